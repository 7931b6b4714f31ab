"""``add_ulid_column`` / ``add_uuid7_column`` without ``online=True``: one staged pass.

Every row's id is computed before the first DDL statement, in one ordered
read into a temporary table; then the column is added, filled in one
UPDATE, made NOT NULL and unique. Importing this module registers the
implementation on Alembic's ``Operations``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta, tzinfo
from datetime import timezone as _timezone
from typing import Any

import sqlalchemy as sa
from alembic.operations import Operations
from alembic.util import CommandError
from sqlalchemy.engine import Connection, Dialect

from ..._dialects import dialect_row
from ..._time import check_ms, to_ms
from .._backfill import exact_key_type
from .._inspect import (
    ColumnState,
    check_identifier,
    column_state,
    plain_session,
    quote,
    run,
    strict_mode,
    unique_name,
    unique_on,
    utc_session,
)
from .._locks import DEFAULT_LOCK_TIMEOUT, lock_safe
from .op import AddULIDColumnOp
from .plan import add_online

__all__ = ["STAGING", "add_ulid_column", "drop_staging", "fill", "stage"]


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


STAGING = "_ulid_backfill"


@Operations.implementation_for(AddULIDColumnOp)
@plain_session
def add_ulid_column(operations: Operations, op: AddULIDColumnOp) -> None:
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
        *(sa.Column(k.name, exact_key_type(k.type), primary_key=True) for k in keys),
        sa.Column(op.from_column, table.c[op.from_column].type),
        sa.Column(op.column_name, column_type),
        schema=op.schema,
    )
    staging = sa.Table(
        STAGING,
        sa.MetaData(),
        *(
            sa.Column(k.name, exact_key_type(k.type), primary_key=True, autoincrement=False)
            for k in keys
        ),
        sa.Column("ulid", column_type, nullable=False),
        prefixes=["TEMPORARY"],
    )
    # utc_session: TIMESTAMP times read in UTC, whatever the session's time_zone.
    with strict_mode(connection), utc_session(connection):
        drop_staging(connection, staging)  # left by an earlier attempt in this session
        staging.create(connection)
        try:
            # Every ULID is computed before the first DDL statement.
            stage(connection, target, staging, op, existing)
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
            fill(connection, target, staging, op)
            _finish(operations, connection, target, staging, op, constraint)
        except BaseException:
            # After a failure PostgreSQL's transaction is aborted (its
            # rollback drops the table) and a killed session took the table
            # along: a failing DROP must not hide the error.
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                drop_staging(connection, staging)
            raise
        drop_staging(connection, staging)


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


def stage(
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


def fill(connection: Connection, target: sa.Table, staging: sa.Table, op: AddULIDColumnOp) -> None:
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
        stage(connection, target, staging, op, ColumnState(column.type, True, None, None))
        fill(connection, target, staging, op)
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


def drop_staging(connection: Connection, staging: sa.Table) -> None:
    # The temporary table lives as long as the session: drop it whatever
    # happened (MariaDB: DROP TEMPORARY TABLE, which commits nothing).
    name = quote(connection.dialect, staging.name)
    run(connection, dialect_row(connection.dialect).drop_temporary.format(name))
