"""The Alembic op that adds a ULID column to a populated table.

``op.add_ulid_column`` dates each row's new ULID from a timestamp column;
``op.drop_ulid_column`` (``_drop``) undoes it. Importing this module
registers the op on Alembic's ``Operations``; :mod:`sqlalchemy_ulid.alembic`
imports it, and that import (or Alembic's plugin entry point) is the user's
opt-in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta, tzinfo
from datetime import timezone as _timezone
from typing import Any

import sqlalchemy as sa
from alembic.operations import MigrateOperation, Operations
from alembic.util import CommandError
from sqlalchemy.engine import Connection, Dialect

from .._defaults import ulid_server_default
from .._dialects import dialect_row
from .._generator import MonotonicGenerator
from .._time import check_ms, to_ms
from .._types import Storage, ULIDType, _check_storage
from ._add_plan import add_online
from ._backfill import MAX_BATCH_SIZE, BackfillProgress, check_batch_options
from ._drop import DropULIDColumnOp
from ._inspect import (
    ColumnState,
    check_identifier,
    column_state,
    quote,
    run,
    strict_mode,
    unique_name,
    unique_on,
    utc_session,
)
from ._locks import DEFAULT_LOCK_TIMEOUT, check_lock_timeout, lock_safe

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
        operations.invoke(
            cls(
                table_name,
                column_name,
                from_column,
                storage=storage,
                timezone=timezone,
                batch_size=batch_size,
                unique=unique,
                constraint_name=constraint_name,
                schema=schema,
                fold=fold,
                server_default=server_default,
                online=online,
                pause=pause,
                progress=progress,
                lock_timeout=lock_timeout,
            )
        )

    # -- what the id kind decides (add_uuid7_column overrides these) ---------------

    #: the op's name, in messages
    op_name = "add_ulid_column"
    #: the ids it makes: "ulid" or "uuid7" (the planners make them in SQL offline)
    key = "ulid"

    def storage_kind(self, dialect: Dialect) -> str:
        """The column's storage kind on ``dialect``: ``uuid``, ``binary`` or ``text``/``hex``."""
        return dialect_row(dialect).kind(self.storage)

    @staticmethod
    def _check_storage(storage: Any, server_default: bool) -> None:
        _check_storage(storage)
        if server_default and storage == "text":
            raise ValueError("storage='text' has no server-side generator: server_default=False")

    def column_type(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        """The new column's type."""
        return ULIDType(self.storage)

    def id_maker(self, clock: Callable[[], int]) -> Callable[[], Any]:
        """A monotonic generator of ids, as the column binds them, on ``clock``."""
        return MonotonicGenerator(clock=clock)

    def make_server_default(self, dialect: Dialect) -> Any:
        """The column's server default; ValueError (before any DDL) if the database has none."""
        server = dialect_row(dialect).server
        if server is None or dialect_row(dialect).kind(self.storage) not in server.default:
            raise ValueError(
                f"{dialect.name} has no server-side ULID generator for storage "
                f"{self.storage!r}: server_default=True cannot be honoured"
            )
        return ulid_server_default(self.storage)

    def reverse(self) -> DropULIDColumnOp:
        return DropULIDColumnOp(
            self.table_name,
            self.column_name,
            unique=self.unique,
            constraint_name=self.constraint_name,
            schema=self.schema,
        )


def _refuse_offline(operations: Operations, what: str) -> None:
    if operations.migration_context.as_sql:
        raise CommandError(
            f"{what} cannot run in offline (--sql) mode: the values it writes are "
            "computed from the rows in the database. Run this migration online."
        )


_NAIVE_EPOCH = datetime(1970, 1, 1)
_ONE_MS = timedelta(milliseconds=1)


def _timestamp_ms(value: Any, zone: tzinfo, fold: int | None) -> int:
    if isinstance(value, datetime) and value.tzinfo is None:
        if isinstance(zone, _timezone):
            # A fixed offset has no DST: naive arithmetic, exact and quick
            # (this runs once per row).
            ms = (value - _NAIVE_EPOCH - zone.utcoffset(None)) // _ONE_MS
            check_ms(ms)
            return ms
        placed = value.replace(tzinfo=zone)
        other = placed.replace(fold=1)
        if placed.utcoffset() != other.utcoffset():
            if fold is None:
                raise ValueError(
                    f"{value.isoformat()} is ambiguous or does not exist in {zone} "
                    "(a daylight-saving change); pass fold=0 or fold=1 to choose the "
                    "offset before or after it"
                )
            placed = placed.replace(fold=fold)
        value = placed
    return to_ms(value)


_STAGING = "_ulid_backfill"


@Operations.implementation_for(AddULIDColumnOp)
def _add_ulid_column(operations: Operations, op: AddULIDColumnOp) -> None:
    if op.online:
        add_online(operations, op, lambda value: _timestamp_ms(value, op.timezone, op.fold))
        return
    _refuse_offline(operations, op.op_name)
    connection = operations.get_bind()
    dialect = connection.dialect
    table = sa.Table(op.table_name, sa.MetaData(), schema=op.schema, autoload_with=connection)
    if op.from_column not in table.c:
        raise ValueError(f"{op.table_name} has no column {op.from_column!r}")
    keys = list(table.primary_key.columns)
    if not keys:
        raise ValueError(
            f"{op.table_name} has no primary key: add_ulid_column needs one to "
            "update rows and to order rows with equal timestamps"
        )
    check_identifier(op.column_name, "column name", dialect)
    constraint = op.constraint_name or unique_name(op.table_name, op.column_name, dialect)
    check_identifier(constraint, "constraint name", dialect)
    column_type = op.column_type(dialect)
    server_default = op.make_server_default(dialect) if op.server_default else None
    existing = column_state(connection, op.table_name, op.column_name, op.schema)
    if existing is not None:
        _check_existing(existing, column_type, op, dialect)
    nulls = connection.scalar(
        sa.select(sa.func.count()).select_from(table).where(table.c[op.from_column].is_(None))
    )
    if nulls:
        raise ValueError(
            f"{op.table_name}.{op.from_column} is NULL in {nulls} rows: "
            "fill them before deriving ULIDs from it"
        )
    target = sa.Table(
        op.table_name,
        sa.MetaData(),
        *(sa.Column(k.name, k.type, primary_key=True) for k in keys),
        sa.Column(op.from_column, table.c[op.from_column].type),
        sa.Column(op.column_name, column_type),
        schema=op.schema,
    )
    staging = sa.Table(
        _STAGING,
        sa.MetaData(),
        *(sa.Column(k.name, k.type, primary_key=True, autoincrement=False) for k in keys),
        sa.Column("ulid", column_type, nullable=False),
        prefixes=["TEMPORARY"],
    )
    # utc_session: TIMESTAMP times read in UTC, whatever the session's time_zone.
    with strict_mode(connection), utc_session(connection):
        _drop_staging(connection, staging)  # left by an earlier attempt in this session
        staging.create(connection)
        try:
            # Every ULID is computed before the first DDL statement.
            _stage(connection, table if existing is None else target, staging, op, existing)
            if existing is None:
                # On PostgreSQL the lock taken here is held to commit: only
                # this statement waits for it, and only lock_timeout long.
                _lock_safe(
                    connection,
                    op,
                    "ADD COLUMN",
                    lambda: operations.add_column(
                        op.table_name,
                        sa.Column(op.column_name, column_type, nullable=True),
                        schema=op.schema,
                    ),
                )
            if op.server_default and (existing is None or existing.default is None):
                with operations.batch_alter_table(op.table_name, schema=op.schema) as batch:
                    batch.alter_column(
                        op.column_name,
                        existing_type=column_type,
                        existing_nullable=True if existing is None else existing.nullable,
                        server_default=server_default,
                    )
            _fill(connection, target, staging, op)
            _finish(operations, connection, target, staging, op, constraint)
        except BaseException:
            # After a failure PostgreSQL's transaction is aborted (its
            # rollback drops the table) and a killed session took the table
            # along: a failing DROP must not hide the error.
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                _drop_staging(connection, staging)
            raise
        _drop_staging(connection, staging)


def _check_existing(
    existing: ColumnState,
    column_type: sa.types.TypeEngine[Any],
    op: AddULIDColumnOp,
    dialect: Dialect,
) -> None:
    wanted = column_type.dialect_impl(dialect).compile(dialect=dialect)
    found = existing.type.compile(dialect=dialect)
    if _base(wanted) != _base(found):
        raise ValueError(
            f"{op.table_name}.{op.column_name} exists as {found}, not {wanted} "
            f"(storage={op.storage!r}); nothing was changed"
        )


def _base(type_sql: str) -> str:
    return type_sql.split(" ")[0].split("(")[0].upper()


def _stage(
    connection: Connection,
    source: sa.Table,
    staging: sa.Table,
    op: AddULIDColumnOp,
    existing: ColumnState | None,
) -> int:
    """Compute the ULIDs of the rows that have none, in one ordered pass.

    One ``SELECT ... ORDER BY time, key`` read through a server-side cursor
    (linear, where re-querying a batch at a time re-sorts the table each
    time), written to the temporary table in batches. Where the driver
    cannot write while a streaming read is open (PyMySQL), the computed
    pairs are kept (about 50 bytes a row) and written after the read.
    """
    time_col = source.c[op.from_column]
    keys = [source.c[k.name] for k in staging.primary_key.columns]
    query = sa.select(time_col, *keys).order_by(time_col, *keys)
    if existing is not None:
        query = query.where(source.c[op.column_name].is_(None))
    # The generator's clock is the current row's time: the rows arrive in
    # (time, key) order, so ties count up by one in key order, exactly as
    # ULIDs made live within one millisecond would.
    now = [0]
    generate = op.id_maker(lambda: now[0])
    names = [k.name for k in keys]
    interleave = dialect_row(connection.dialect).write_while_streaming
    pending: list[dict[str, Any]] = []
    count = 0
    # Options on the statement: Connection.execution_options() would change
    # the connection itself, and every later statement would stream too.
    result = connection.execute(
        query, execution_options={"stream_results": True, "yield_per": op.batch_size}
    )
    with result:
        for batch in result.partitions():
            staged = []
            for row in batch:
                now[0] = _timestamp_ms(row[0], op.timezone, op.fold)
                item = dict(zip(names, row[1:], strict=True))
                item["ulid"] = generate()
                staged.append(item)
            count += len(staged)
            if interleave:
                connection.execute(staging.insert(), staged)
            else:
                pending.extend(staged)
    for start in range(0, len(pending), op.batch_size):
        connection.execute(staging.insert(), pending[start : start + op.batch_size])
    return count


def _fill(connection: Connection, target: sa.Table, staging: sa.Table, op: AddULIDColumnOp) -> None:
    """Write the staged ULIDs into the rows that still have none, in one UPDATE."""
    names = [k.name for k in staging.primary_key.columns]
    connection.execute(
        sa.update(target)
        .where(*(target.c[name] == staging.c[name] for name in names))
        .where(target.c[op.column_name].is_(None))
        .values({op.column_name: staging.c.ulid})
    )
    connection.execute(staging.delete())


#: Catch-up rounds for rows written while the op runs (MariaDB's DDL does
#: not keep writers out; PostgreSQL's lock does, so one round suffices).
_CATCH_UP_ROUNDS = 3


def _finish(
    operations: Operations,
    connection: Connection,
    target: sa.Table,
    staging: sa.Table,
    op: AddULIDColumnOp,
    constraint: str,
) -> None:
    column = target.c[op.column_name]
    missing = sa.select(sa.func.count()).select_from(target).where(column.is_(None))
    for _ in range(_CATCH_UP_ROUNDS):
        if not connection.scalar(missing):
            break
        _stage(connection, target, staging, op, ColumnState(column.type, True, None, None))
        _fill(connection, target, staging, op)
    state = column_state(connection, op.table_name, op.column_name, op.schema)
    assert state is not None
    if state.nullable:

        def not_null() -> None:
            with operations.batch_alter_table(op.table_name, schema=op.schema) as batch:
                batch.alter_column(
                    op.column_name,
                    existing_type=column.type,
                    existing_nullable=True,
                    nullable=False,
                    # MariaDB's MODIFY restates the column: keep these.
                    existing_server_default=(
                        None if state.default is None else sa.text(state.default)
                    ),
                    existing_comment=state.comment,
                )

        try:
            _lock_safe(connection, op, "SET NOT NULL", not_null)
        except sa.exc.DBAPIError as exc:
            if exc.connection_invalidated:
                raise
            late = connection.scalar(missing)
            if not late:
                raise
            raise CommandError(
                f"{late} rows were written to {op.table_name} without {op.column_name} "
                "while add_ulid_column ran, so it cannot be made NOT NULL yet. Rerun the "
                "migration (it fills only the rows that have none), after giving the "
                "application a default for the column or pausing its writes"
            ) from exc
    if op.unique and not unique_on(connection, op.table_name, op.column_name, op.schema):
        if dialect_row(connection.dialect).unique_by_index:
            operations.create_index(
                constraint, op.table_name, [op.column_name], unique=True, schema=op.schema
            )
        else:
            operations.create_unique_constraint(
                constraint, op.table_name, [op.column_name], schema=op.schema
            )


def _lock_safe(
    connection: Connection, op: AddULIDColumnOp, what: str, action: Callable[[], object]
) -> None:
    timeout = DEFAULT_LOCK_TIMEOUT if op.lock_timeout is None else op.lock_timeout
    lock_safe(connection, action, f"{what} on {op.table_name}", lock_timeout=timeout)


def _drop_staging(connection: Connection, staging: sa.Table) -> None:
    # The temporary table lives as long as the session: drop it whatever
    # happened (MariaDB: DROP TEMPORARY TABLE, which commits nothing).
    name = quote(connection.dialect, staging.name)
    run(connection, dialect_row(connection.dialect).drop_temporary.format(name))
