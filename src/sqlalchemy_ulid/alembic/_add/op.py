"""The Alembic op that adds a ULID column to a populated table.

``op.add_ulid_column`` dates each row's new ULID from a timestamp column;
``op.drop_ulid_column`` (``_drop``) undoes it. Importing this module
registers the op on Alembic's ``Operations``; :mod:`sqlalchemy_ulid.alembic`
imports it, and that import (or Alembic's plugin entry point) is the user's
opt-in.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta, tzinfo
from datetime import timezone as _timezone
from typing import Any, ClassVar

import sqlalchemy as sa
from alembic.operations import MigrateOperation, Operations
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import CompileError

from ..._dialects import dialect_row
from ..._kinds import ULID_KEYS, KeyKind, typeid_keys
from ..._server_defaults import server_default as key_server_default
from ..._types import Storage
from .._backfill import MAX_BATCH_SIZE, BackfillProgress, check_batch_options
from .._drop import DropULIDColumnOp
from .._invoke import invoke
from .._locks import check_lock_timeout

__all__ = ["MAX_BATCH_SIZE", "AddULIDColumnOp"]


@Operations.register_operation("add_ulid_column")
class AddULIDColumnOp(MigrateOperation):
    """Add a ULID column to a populated table, dated from a timestamp column."""

    def __init__(
        self,
        table_name: str,
        column_name: str,
        from_column: str,
        *,
        storage: Storage = "auto",
        timezone: tzinfo | None = None,
        batch_size: int | None = None,
        unique: bool = True,
        constraint_name: str | None = None,
        schema: str | None = None,
        fold: int | None = None,
        server_default: bool = False,
        online: bool = False,
        pause: float | timedelta = 0.0,
        progress: Callable[[BackfillProgress], object] | None = None,
        lock_timeout: float | timedelta | None = None,
    ) -> None:
        self._check_storage(storage, server_default)
        # Checked here, before any SQL: the op is built before it runs.
        self.online = online
        self.lock_timeout = None if lock_timeout is None else check_lock_timeout(lock_timeout)
        if fold not in (None, 0, 1):
            raise ValueError(f"fold must be None, 0 or 1, got {fold!r}")
        #: online, batches are sized by time unless the caller fixed their size
        self.sized_by_time = batch_size is None
        self.batch_size, self.pause, self.progress = check_batch_options(
            batch_size, pause, progress, online
        )
        # None, not a default of timezone.utc: Alembic re-creates this
        # signature from source text, where only simple literals survive.
        if timezone is None:
            timezone = _timezone.utc
        if not isinstance(timezone, tzinfo):
            raise TypeError(f"timezone must be a datetime.tzinfo, not {type(timezone).__name__}")
        self.table_name = table_name
        self.column_name = column_name
        self.from_column = from_column
        self.storage: Storage = storage
        self.timezone: tzinfo = timezone
        self.unique = unique
        self.constraint_name = constraint_name
        self.schema = schema
        self.fold = fold
        self.server_default = server_default

    @classmethod
    def add_ulid_column(
        cls,
        operations: Operations,
        table_name: str,
        column_name: str,
        from_column: str,
        *,
        storage: Storage = "auto",
        timezone: tzinfo | None = None,
        batch_size: int | None = None,
        unique: bool = True,
        constraint_name: str | None = None,
        schema: str | None = None,
        fold: int | None = None,
        server_default: bool = False,
        online: bool = False,
        pause: float | timedelta = 0.0,
        progress: Callable[[BackfillProgress], object] | None = None,
        lock_timeout: float | timedelta | None = None,
    ) -> None:
        """Add a ULID column to a populated table, backfilled from a timestamp.

        Each row gets a ULID whose timestamp is the row's ``from_column`` (to
        the millisecond), so the new ULIDs sort like the rows' creation
        times; rows with equal times are numbered in primary-key order, by
        the monotonic generator.

        The steps, each safe to interrupt:

        1. Checks, before any DDL: a primary key, no NULL times, names the
           database accepts, and every row's ULID computed (times out of
           range, before 1970, or in a DST gap or fold refuse here), in one
           ordered streaming pass into a temporary table.
        2. ``ADD COLUMN`` (nullable), one joined ``UPDATE``, then a catch-up
           for rows written meanwhile.
        3. ``NOT NULL``, then (with ``unique=True``) the unique constraint
           (a unique index on SQLite).

        Rerun after an interruption, it finds the column, fills only its
        NULL rows and adds what is missing; rerun after success, it does
        nothing. The temporary table is dropped whatever happens.

        On PostgreSQL the migration's transaction holds an ACCESS EXCLUSIVE
        lock from ``ADD COLUMN`` to commit (step 2 and 3); see "Running these
        on a live database" in the docs for durations and what the
        application must do about the new NOT NULL column.

        The ULIDs depend on the rows, so in offline (``--sql``) mode this
        raises :class:`alembic.util.CommandError`, except with
        ``online=True`` on PostgreSQL and MariaDB, which writes the phases
        and the backfill as SQL (a ``DO`` block, or a ``BEGIN NOT ATOMIC``
        block on MariaDB, that commits every batch).

        With ``online=True`` the op runs in phases instead, each committed
        on its own, with a batched backfill between them (see ``online``
        below and "Live tables" in the docs).

        Args:
            operations: supplied by Alembic (call it as ``op.add_ulid_column``).
            table_name: the table, which must have a primary key.
            column_name: the new column.
            from_column: a date-time column (or integer Unix milliseconds)
                with no NULLs.
            storage: the new column's :class:`~sqlalchemy_ulid.ULIDType` storage.
            timezone: the zone naive timestamps are in (``None``: UTC).
                Databases usually return ``TIMESTAMP``/``DATETIME`` values
                naive; they are read as UTC unless you say otherwise, never
                as the machine's local time. Aware values keep their own
                offset.
            batch_size: rows read and updated per round trip (default
                10,000; with ``online=True`` 5,000, one transaction each; at
                most 1,000,000).
            unique: add a unique constraint on the new column.
            constraint_name: its name; default ``uq_<table>_<column>``.
            schema: the table's schema.
            fold: for a naive time that a DST change in ``timezone`` makes
                ambiguous (a fold) or non-existent (a gap): ``None`` refuses
                it, ``0``/``1`` picks the offset before/after the change
                (Python's ``datetime.fold``).
            server_default: right after ``ADD COLUMN``, give the column the
                database's ULID generator as its DEFAULT
                (:func:`~sqlalchemy_ulid.ulid_server_default`; on PostgreSQL
                run ``op.create_ulid_function()`` first). Rows the
                application inserts without the column, during the op and
                after it, then get an id instead of a NULL (MariaDB) or a
                NOT NULL violation.
            online: run in phases that each commit on their own (PostgreSQL
                and MariaDB), so that no writer waits longer than a
                metadata change: ``ADD COLUMN``, a batched backfill in key
                order, then NOT NULL and the unique constraint built without
                blocking writes. Needs a single-column primary key. Commits
                the migration's transaction first (Alembic's
                ``autocommit_block()``). Offline (``--sql``, PostgreSQL and
                MariaDB) it writes the phases as a script. See "Live tables" in the docs.
            pause: with ``online=True``, seconds (or a timedelta) to sleep
                between two batches, to leave the server room.
            progress: with ``online=True``, called after every batch with a
                :class:`~sqlalchemy_ulid.alembic.BackfillProgress` (rows done,
                estimated total, rate, ETA). Alembic's logger gets the same
                at most every five seconds.
            lock_timeout: seconds (or a timedelta) each DDL statement may
                wait for its table lock before it gives up and retries
                (default 1 s); see :class:`~sqlalchemy_ulid.alembic.LockTimeoutError`.

        Example:
            In a migration (``alembic upgrade``)::

                op.add_ulid_column(
                    "orders", "public_id", "created_at",
                    online=True, server_default=True,
                )

        Raises:
            alembic.util.CommandError: in offline mode (without
                ``online=True``, or on SQLite), rows were written without
                the column faster than the catch-up (rerun it), or
                ``online=True`` inside a transaction Alembic did not begin.
            LockTimeoutError: a DDL statement could not get its lock on any
                try; the message names the sessions holding it. Rerun later.
            ValueError: the table has no primary key, ``from_column`` has
                NULLs or naive values that ``timezone`` cannot place, a time
                is out of the ULID range, or a name is too long. Checked
                before the table is altered.
        """
        invoke(cls, operations, locals())

    # -- what the key kind decides (add_uuid7_column sets ``keys`` and ``prefix``) ---

    #: the op's name, in messages
    op_name = "add_ulid_column"
    #: the ids it makes: "ulid" or "uuid7" (the planners make them in SQL offline)
    key = "ulid"
    #: the kind of key the op adds
    keys: ClassVar[KeyKind] = ULID_KEYS
    #: the typed ids' prefix (``add_uuid7_column(prefix=...)``); None: plain keys
    prefix: str | None = None

    @property
    def column_keys(self) -> KeyKind:
        """The key kind of the new column: the op's, or the typed ids' of ``prefix``."""
        return self.keys if self.prefix is None else typeid_keys(self.prefix)

    def storage_kind(self, dialect: Dialect) -> str:
        """The column's storage kind on ``dialect``: ``uuid``, ``binary``, ``text`` or ``hex``."""
        return self.column_keys.generated_storage(self.storage, dialect)

    @classmethod
    def _check_storage(cls, storage: Any, server_default: bool) -> None:
        options = cls.keys.storage_options
        if storage not in options:
            raise ValueError(f"storage must be one of {', '.join(options)}; got {storage!r}")
        if server_default and storage in cls.keys.ungenerated:
            raise ValueError(
                f"storage={storage!r} has no server-side generator: server_default=False"
            )

    def column_type(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        """The new column's type."""
        return self.column_keys.storage_type(self.storage, dialect)

    def id_maker(self, clock: Callable[[], int]) -> Callable[[], Any]:
        """A monotonic generator of ids, as the column binds them, on ``clock``."""
        return self.column_keys.clocked(clock, self.storage)

    def make_server_default(self, dialect: Dialect) -> Any:
        """The column's server default; ValueError (before any DDL) if the database has none."""
        sql = self.column_keys.generator(dialect_row(dialect))
        try:
            kind = self.storage_kind(dialect)
        except CompileError as exc:
            raise ValueError(f"{exc}: server_default=True cannot be honoured") from None
        if sql is None or kind not in {**sql.default, **sql.builtin}:
            raise ValueError(
                f"{dialect.name} has no server-side {self.keys.label} generator for storage "
                f"{self.storage!r}: server_default=True cannot be honoured"
            )
        return key_server_default(self.column_keys, self.storage)

    def reverse(self) -> DropULIDColumnOp:
        return DropULIDColumnOp(
            self.table_name,
            self.column_name,
            unique=self.unique,
            constraint_name=self.constraint_name,
            schema=self.schema,
        )
