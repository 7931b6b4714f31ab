"""Alembic ops that add a ULID column to a populated table, and drop it again.

``op.add_ulid_column`` dates each row's new ULID from a timestamp column;
``op.drop_ulid_column`` undoes it. Importing this module registers both on
Alembic's ``Operations``; :mod:`sqlalchemy_ulid.alembic` imports it, and that
import is the user's opt-in.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime, tzinfo
from datetime import timezone as _timezone
from typing import Any

import sqlalchemy as sa
from alembic.operations import MigrateOperation, Operations
from alembic.util import CommandError
from sqlalchemy.engine import Connection

from ._generator import MonotonicGenerator
from ._time import to_ms
from ._types import Storage, ULIDType, _check_storage

__all__ = ["AddULIDColumnOp", "DropULIDColumnOp"]


def _unique_name(table_name: str, column_name: str, name: str | None) -> str:
    return name if name is not None else f"uq_{table_name}_{column_name}"


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
        batch_size: int = 10_000,
        unique: bool = True,
        constraint_name: str | None = None,
        schema: str | None = None,
    ) -> None:
        _check_storage(storage)
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
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
        self.batch_size = batch_size
        self.unique = unique
        self.constraint_name = constraint_name
        self.schema = schema

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
        batch_size: int = 10_000,
        unique: bool = True,
        constraint_name: str | None = None,
        schema: str | None = None,
    ) -> None:
        """Add a ULID column to a populated table, backfilled from a timestamp.

        Each row gets a ULID whose timestamp is the row's ``from_column`` (to
        the millisecond), so the new ULIDs sort like the rows' creation
        times; rows with equal times are numbered in primary-key order, by
        the monotonic generator. The column is added nullable, filled in
        batches of ``batch_size`` rows, then made ``NOT NULL`` and (with
        ``unique=True``) given a unique constraint. On SQLite the last step
        recreates the table (Alembic's batch mode).

        Online only: the ULIDs depend on the rows, so in offline (``--sql``)
        mode this raises :class:`alembic.util.CommandError`.

        Args:
            operations: supplied by Alembic (call it as ``op.add_ulid_column``).
            table_name: the table, which must have a primary key.
            column_name: the new column.
            from_column: a date-time column (or integer Unix milliseconds)
                with no NULLs.
            storage: the new column's :class:`~sqlalchemy_ulid.ULIDType` storage.
            timezone: the zone naive timestamps are in (``None``: UTC).
                Databases usually return ``TIMESTAMP``/``DATETIME`` values
                naive; they are read as UTC unless you say otherwise, never as the machine's local
                time. Aware values keep their own offset.
            batch_size: rows read and updated per round trip.
            unique: add a unique constraint on the new column.
            constraint_name: its name; default ``uq_<table>_<column>``.
            schema: the table's schema.

        Raises:
            alembic.util.CommandError: in offline mode.
            ValueError: the table has no primary key, or ``from_column`` has
                NULLs or naive values that ``timezone`` cannot place. Checked
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
            )
        )

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


def _timestamp_ms(value: Any, zone: tzinfo) -> int:
    if isinstance(value, datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=zone)
    return to_ms(value)


def _ordered_rows(
    connection: Connection, table: sa.Table, from_column: str, batch_size: int
) -> Iterator[Sequence[sa.Row[Any]]]:
    """Yield the rows' keys and times in (time, key) order, a batch at a time.

    Keyset pagination, not OFFSET: each batch starts where the last one
    ended, so the whole walk reads each row once. The cursor compares the
    time column as the driver returned it (``raw``), so no round trip
    through a Python type can shift it (SQLite stores times as text).
    """
    time_col = table.c[from_column]
    keys = list(table.primary_key.columns)
    raw = sa.type_coerce(time_col, sa.types.NullType())
    query = (
        sa.select(raw.label("_raw"), time_col.label("_time"), *keys)
        .order_by(time_col, *keys)
        .limit(batch_size)
    )
    last: tuple[Any, ...] | None = None
    while True:
        page = query
        if last is not None:
            page = query.where(sa.tuple_(raw, *keys) > sa.tuple_(*last))
        rows: Sequence[sa.Row[Any]] = connection.execute(page).all()
        if not rows:
            return
        yield rows
        last_row: tuple[Any, ...] = tuple(rows[-1])
        last = (
            sa.literal(last_row[0], sa.types.NullType()),
            *(sa.literal(v, k.type) for v, k in zip(last_row[2:], keys, strict=True)),
        )


@Operations.implementation_for(AddULIDColumnOp)
def _add_ulid_column(operations: Operations, op: AddULIDColumnOp) -> None:
    _refuse_offline(operations, "add_ulid_column")
    connection = operations.get_bind()
    table = sa.Table(op.table_name, sa.MetaData(), schema=op.schema, autoload_with=connection)
    if op.from_column not in table.c:
        raise ValueError(f"{op.table_name} has no column {op.from_column!r}")
    keys = list(table.primary_key.columns)
    if not keys:
        raise ValueError(
            f"{op.table_name} has no primary key: add_ulid_column needs one to "
            "update rows and to order rows with equal timestamps"
        )
    nulls = connection.scalar(
        sa.select(sa.func.count()).select_from(table).where(table.c[op.from_column].is_(None))
    )
    if nulls:
        raise ValueError(
            f"{op.table_name}.{op.from_column} is NULL in {nulls} rows: "
            "fill them before deriving ULIDs from it"
        )

    column_type = ULIDType(op.storage)
    operations.add_column(
        op.table_name, sa.Column(op.column_name, column_type, nullable=True), schema=op.schema
    )
    _backfill(connection, table, keys, column_type, op)
    with operations.batch_alter_table(op.table_name, schema=op.schema) as batch:
        batch.alter_column(
            op.column_name, existing_type=column_type, existing_nullable=True, nullable=False
        )
        if op.unique:
            batch.create_unique_constraint(
                _unique_name(op.table_name, op.column_name, op.constraint_name), [op.column_name]
            )


def _backfill(
    connection: Connection,
    table: sa.Table,
    keys: list[sa.Column[Any]],
    column_type: ULIDType,
    op: AddULIDColumnOp,
) -> None:
    """Compute every row's ULID, stage them, and write them in one UPDATE.

    Multi-row INSERTs into a temporary table are fast on every driver, where
    one UPDATE per row is a round trip per row (minutes for a million rows
    on MySQL). The joined UPDATE is rendered by SQLAlchemy for each dialect.
    """
    staging = sa.Table(
        f"_ulid_backfill_{op.table_name}",
        sa.MetaData(),
        *(sa.Column(k.name, k.type, primary_key=True, autoincrement=False) for k in keys),
        sa.Column("ulid", column_type, nullable=False),
        prefixes=["TEMPORARY"],
    )
    staging.create(connection)
    # The generator's clock is the current row's time: the rows arrive in
    # (time, key) order, so ties count up by one in key order, exactly as
    # ULIDs made live within one millisecond would.
    now = [0]
    generate = MonotonicGenerator(clock=lambda: now[0])
    names = [k.name for k in keys]
    for rows in _ordered_rows(connection, table, op.from_column, op.batch_size):
        staged = []
        for row in rows:
            values: tuple[Any, ...] = tuple(row)
            now[0] = _timestamp_ms(values[1], op.timezone)
            item = dict(zip(names, values[2:], strict=True))
            item["ulid"] = generate()
            staged.append(item)
        connection.execute(staging.insert(), staged)
    target = sa.table(
        op.table_name,
        *(sa.column(name) for name in names),
        sa.column(op.column_name, column_type),
        schema=op.schema,
    )
    connection.execute(
        sa.update(target)
        .where(*(target.c[name] == staging.c[name] for name in names))
        .values({op.column_name: staging.c.ulid})
    )
    staging.drop(connection)


@Operations.register_operation("drop_ulid_column")
class DropULIDColumnOp(MigrateOperation):
    """Drop a column made by ``add_ulid_column``, with its unique constraint."""

    def __init__(
        self,
        table_name: str,
        column_name: str,
        *,
        unique: bool = True,
        constraint_name: str | None = None,
        schema: str | None = None,
    ) -> None:
        self.table_name = table_name
        self.column_name = column_name
        self.unique = unique
        self.constraint_name = constraint_name
        self.schema = schema

    @classmethod
    def drop_ulid_column(
        cls,
        operations: Operations,
        table_name: str,
        column_name: str,
        *,
        unique: bool = True,
        constraint_name: str | None = None,
        schema: str | None = None,
    ) -> None:
        """Drop a ULID column and its unique constraint (undoes ``add_ulid_column``).

        Works offline too. On SQLite it recreates the table (batch mode).

        Args:
            operations: supplied by Alembic (call it as ``op.drop_ulid_column``).
            table_name: the table.
            column_name: the ULID column.
            unique: whether ``add_ulid_column`` made a unique constraint.
            constraint_name: its name; default ``uq_<table>_<column>``.
            schema: the table's schema.
        """
        operations.invoke(
            cls(
                table_name,
                column_name,
                unique=unique,
                constraint_name=constraint_name,
                schema=schema,
            )
        )

    def reverse(self) -> MigrateOperation:
        raise NotImplementedError("add_ulid_column needs the timestamp column to date from")


@Operations.implementation_for(DropULIDColumnOp)
def _drop_ulid_column(operations: Operations, op: DropULIDColumnOp) -> None:
    with operations.batch_alter_table(op.table_name, schema=op.schema) as batch:
        if op.unique:
            batch.drop_constraint(
                _unique_name(op.table_name, op.column_name, op.constraint_name), type_="unique"
            )
        batch.drop_column(op.column_name)
