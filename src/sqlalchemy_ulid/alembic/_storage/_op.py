"""The Alembic op that converts a ULID column between text and binary storage.

``op.alter_ulid_storage`` runs the conversion as SQL in the database (the
``convert`` field of the dialect's row in ``_dialects``), so it also works in
offline (``--sql``) mode. Importing this module registers it on Alembic's
``Operations``; :mod:`sqlalchemy_ulid.alembic` imports it, and that import is
the user's opt-in.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, ClassVar

import sqlalchemy as sa
from alembic.operations import MigrateOperation, Operations
from sqlalchemy.exc import CompileError

from ..._convert_sql import ConvertSQL
from ..._dialects import DialectRow
from ..._kinds import ULID_KEYS, KeyKind
from ..._types import Storage
from .._backfill import BackfillProgress, check_batch_options
from .._invoke import invoke
from .._locks import check_lock_timeout
from ._values import (
    kind_of,
    ulid_default,
)

__all__ = ["AlterULIDStorageOp"]

#: the lengths of a UUIDv7's two text forms
_TEXT_FORMS = {32: "hex", 36: "text"}


@Operations.register_operation("alter_ulid_storage")
class AlterULIDStorageOp(MigrateOperation):
    """Convert a ULID column between text and binary storage in place."""

    op_name = "alter_ulid_storage"

    def __init__(
        self,
        table_name: str,
        column_name: str,
        *,
        from_storage: Storage,
        to_storage: Storage,
        nullable: bool | None = None,
        schema: str | None = None,
        copy_from: sa.Table | None = None,
        online: bool = False,
        lock_timeout: float | timedelta | None = None,
        batch_size: int | None = None,
        pause: float | timedelta = 0.0,
        progress: Callable[[BackfillProgress], object] | None = None,
    ) -> None:
        self.check_storage(from_storage)
        self.check_storage(to_storage)
        self.online = online
        #: batches sized by time (about 150 ms each) unless the caller fixed their size
        self.sized_by_time = batch_size is None
        self.batch_size, self.pause, self.progress = check_batch_options(
            batch_size, pause, progress, online
        )
        self.lock_timeout = None if lock_timeout is None else check_lock_timeout(lock_timeout)
        self.table_name = table_name
        self.column_name = column_name
        self.from_storage: Storage = from_storage
        self.to_storage: Storage = to_storage
        self.nullable = nullable
        self.schema = schema
        self.copy_from = copy_from

    @classmethod
    def alter_ulid_storage(
        cls,
        operations: Operations,
        table_name: str,
        column_name: str,
        *,
        from_storage: Storage,
        to_storage: Storage,
        nullable: bool | None = None,
        schema: str | None = None,
        copy_from: sa.Table | None = None,
        online: bool = False,
        lock_timeout: float | timedelta | None = None,
        batch_size: int | None = None,
        pause: float | timedelta = 0.0,
        progress: Callable[[BackfillProgress], object] | None = None,
    ) -> None:
        """Convert a ULID column's storage, keeping every value.

        ``from_storage`` and ``to_storage`` are :class:`~sqlalchemy_ulid.ULIDType`
        storages: ``"text"`` is ``CHAR(26)`` (or any ``CHAR``/``VARCHAR``
        holding ULID text, either case), ``"auto"`` is ``UUID`` on PostgreSQL
        and 16-byte binary elsewhere, ``"binary"`` is 16-byte binary
        (``BYTEA`` on PostgreSQL). Undo it by swapping the two.

        The conversion runs in the database, as SQL, so it works offline
        (``--sql``) as well:

        * PostgreSQL: one ``ALTER TABLE ... ALTER COLUMN ... TYPE ... USING``;
          its ``--sql`` script is one ``DO`` block that reads the column as
          it runs (a rerun does nothing; the DEFAULT is carried, and what
          the online op refuses is refused, as online).
        * MySQL / MariaDB: ``MODIFY`` to ``VARBINARY(26)``, one ``UPDATE``,
          ``MODIFY`` to the final type. Indexes and constraints on the column
          stay; a column referenced by a foreign key cannot change type.
        * SQLite: one ``UPDATE`` (SQLite columns hold any value), then the
          table is recreated with the new declared type (batch mode; in
          offline mode pass ``copy_from``, since nothing can be reflected).
          SQLite before 3.41 has no ``unhex()``; online, the op defines it
          on the connection.

        The conversion SQL itself fails on a text value the parser would
        refuse (or a binary value that is not 16 bytes), online and in
        ``--sql`` scripts, whatever MariaDB's ``sql_mode``: no value can
        become a different id. Online, text values are also checked first:
        if any is not a ULID, the op raises
        :class:`~sqlalchemy_ulid.InvalidULID`, with examples, before
        changing anything.

        Online it reads the column first and is safe to rerun: a column
        already in ``to_storage`` is left alone, and after an interrupted
        MariaDB run (column left ``VARBINARY(26)``) it recognises whether
        the values were converted and finishes. Nullability, the
        ``COMMENT`` and a ULID literal ``DEFAULT`` are kept (any other
        DEFAULT is refused before any change, as is a column used by a
        foreign key: see "Keys with foreign keys" in the docs).

        Args:
            operations: supplied by Alembic (call it as ``op.alter_ulid_storage``).
            table_name: the table.
            column_name: the ULID column.
            from_storage: its current storage.
            to_storage: the storage to convert to.
            nullable: whether the column is nullable (MySQL restates it in
                ``MODIFY``). Online it is read from the database if omitted;
                offline it is required (except with ``online=True``, whose
                scripts read it as they run).
            schema: the table's schema.
            copy_from: the table's definition, for SQLite in offline mode.
            online: convert a live table while writers go on (see "Live
                tables" in the docs). PostgreSQL: a shadow column kept in step
                by a trigger, a batched copy, indexes built ``CONCURRENTLY``,
                then a short swap. MariaDB/MySQL: a shadow table, triggers
                that mirror writes, a copy in key order, then an atomic
                ``RENAME TABLE``. In ``--sql`` mode, PostgreSQL gets the
                same phases as a rerunnable script for ``psql`` (see
                "Offline (--sql) on PostgreSQL" in the docs), MariaDB the
                shadow-table steps as a rerunnable script for the
                ``mariadb`` client ("Offline (--sql) on MariaDB"); SQLite
                raises ``ValueError``.
            lock_timeout: seconds (or a timedelta) each ALTER may wait for
                its table lock before it retries (default 1 s); see
                :class:`~sqlalchemy_ulid.alembic.LockTimeoutError`.
            batch_size: with ``online=True``, rows copied per statement.
                Left out, the first batch is 5,000 rows and the next ones are
                sized to take about 150 ms each; the offline script uses
                5,000 (or the size given).
            pause: with ``online=True``, seconds (or a timedelta) to sleep
                between batches.
            progress: with ``online=True``, called after every batch with a
                :class:`~sqlalchemy_ulid.alembic.BackfillProgress`.

        Raises:
            InvalidULID: (online) a text value is not a ULID.
            ValueError: both storages are the same kind on this database;
                (online) the column is used by a foreign key, has a DEFAULT
                that cannot be converted, is of neither storage, or holds
                both converted and unconverted values.
            alembic.util.CommandError: offline without ``nullable`` (not
                needed with ``online=True``).
        """
        invoke(cls, operations, locals())

    def reverse(self) -> AlterULIDStorageOp:
        return type(self)(
            self.table_name,
            self.column_name,
            from_storage=self.to_storage,
            to_storage=self.from_storage,
            nullable=self.nullable,
            schema=self.schema,
            copy_from=self.copy_from,
            online=self.online,
            lock_timeout=self.lock_timeout,
            batch_size=None if self.sized_by_time else self.batch_size,
            pause=self.pause,
            progress=self.progress,
        )

    # What the key kind decides (alter_uuid7_storage: _uuid7 sets these).

    #: the kind of key the column holds
    keys: ClassVar[KeyKind] = ULID_KEYS
    #: the storage options: the kind's, and (UUIDv7) its hyphenated text
    storages: ClassVar[tuple[str, ...]] = ULID_KEYS.storage_options

    @property
    def values_name(self) -> str:
        """What the column's values are called in errors ("ULIDs", "UUIDv7s")."""
        return f"{self.keys.label}s"

    @classmethod
    def check_storage(cls, storage: Any) -> None:
        """Refuse a storage option this op does not know (ValueError)."""
        if storage not in cls.storages:
            raise ValueError(f"storage must be one of {', '.join(cls.storages)}; got {storage!r}")

    def convert_sql(self, row: DialectRow) -> ConvertSQL | None:
        """Return the dialect's conversion SQL for this op's keys (None: none)."""
        return self.keys.convert(row)

    def kind(self, storage: str, dialect: Any) -> str:
        """Return the storage kind ("uuid", "binary", "text", "hex") of a storage option."""
        if storage == "text":
            return "text"
        try:
            return self.keys.generated_storage(storage, dialect)
        except CompileError as exc:
            raise ValueError(str(exc)) from None

    def found_kind(self, type_: sa.types.TypeEngine[Any], holding: int | None) -> str | None:
        """Return the kind a reflected type holds, "holding", or None (see kind_of)."""
        found = kind_of(type_, holding)
        if found != "text" or "hex" not in self.storages:
            return found
        # Two text forms (a UUIDv7's 32 hex digits or 36 characters): by the
        # length; a longer VARCHAR holds the form its storage names.
        length = getattr(type_, "length", None)
        from_storage: str = self.from_storage  # a UUID7ConvertStorage here
        return _TEXT_FORMS.get(length or 0) or ("hex" if from_storage == "hex" else "text")

    def checked_before(self, kind: str) -> bool:
        """Whether values of ``kind`` are checked (and named) before any DDL."""
        # Any 16 bytes are a ULID; a uuid or 16 bytes may be of another version.
        return kind == "text" or self.keys.uuid7_time

    def column_type(self, storage: str, dialect: Any) -> sa.types.TypeEngine[Any]:
        """Return the column type of a storage option."""
        return self.keys.storage_type(storage, dialect)

    def default_value(self, default: str, kind: str) -> bytes | None:
        """The 16 bytes a reflected literal DEFAULT of a ``kind`` column holds, or None."""
        return ulid_default(default, kind)
