"""The first phases of a primary-key conversion: *prepare* and *fill*, each resumable.

*Prepare* computes the new ULIDs (staged before any DDL), stores the plan
and adds a nullable shadow column beside each changing column; *fill*
writes the key's shadow, then each referencing shadow by a join. The swap
(``_phases``) follows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import tzinfo
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..._generator import MonotonicGenerator
from ..._types import ULIDType
from .._add import STAGING, AddULIDColumnOp, drop_staging, fill, stage
from .._inspect import ColumnState, quote
from .._locks import lock_safe_ddl
from ._plan import KeyColumn, Plan

__all__ = [
    "add_shadows",
    "columns_of",
    "fill_referencing",
    "parent_alias",
    "quoted",
    "quoted_table",
    "staged_key",
    "unfilled",
]


def parent_alias(plan: Plan, table: str) -> str:
    """The alias of ``table`` where a join reads it for a referencing shadow.

    One per table (``ulid_p`` and the number of its first column in the
    plan, as in the MariaDB script): the swap locks each table under it.
    """
    return f"ulid_p{1 + next(i for i, c in enumerate(plan.columns) if c.table == table)}"


def quoted_table(connection: Connection, plan: Plan, table: str) -> str:
    return quote(connection.dialect, table, plan.schema)


def quoted(connection: Connection, name: str) -> str:
    return quote(connection.dialect, name)


def columns_of(connection: Connection, plan: Plan, table: str) -> dict[str, dict[str, Any]]:
    return {
        c["name"]: dict(c) for c in sa.inspect(connection).get_columns(table, schema=plan.schema)
    }


def _source(plan: Plan, column: KeyColumn) -> str:
    """The column that holds ``column``'s new values for the rows that reference it."""
    if column.parent is None and plan.direction == "legacy":
        return plan.legacy_id
    return column.shadow


# -- prepare and fill ------------------------------------------------------------------


@contextlib.contextmanager
def staged_key(
    connection: Connection,
    plan: Plan,
    *,
    timezone: tzinfo,
    fold: int | None,
    batch_size: int,
) -> Iterator[Callable[[], None]]:
    """Compute the new ULIDs of the key's rows that have none, into a temporary table.

    Yields the function that writes them into the key's shadow column. Every
    ULID is computed (and from a time column, checked) on entry, before the
    caller's first DDL statement.
    """
    key = plan.columns[0]
    table = sa.Table(plan.table, sa.MetaData(), schema=plan.schema, autoload_with=connection)
    ulid_type = ULIDType(plan.storage)  # type: ignore[arg-type]
    staging = sa.Table(
        STAGING,
        sa.MetaData(),
        sa.Column(plan.key, table.c[plan.key].type, primary_key=True, autoincrement=False),
        sa.Column("ulid", ulid_type, nullable=False),
        prefixes=["TEMPORARY"],
    )
    op = AddULIDColumnOp(
        plan.table,
        key.shadow,
        plan.from_time or plan.key,
        storage=plan.storage,  # type: ignore[arg-type]
        timezone=timezone,
        batch_size=batch_size,
        fold=fold,
        schema=plan.schema,
    )
    exists = key.shadow in table.c
    existing = ColumnState(ulid_type, True, None, None) if exists else None
    drop_staging(connection, staging)
    staging.create(connection)
    try:
        if plan.from_time is not None:
            stage(connection, table, staging, op, existing)
        else:
            _stage_now(connection, table, staging, plan, exists, batch_size)
        target = sa.Table(
            plan.table,
            sa.MetaData(),
            sa.Column(plan.key, table.c[plan.key].type, primary_key=True),
            sa.Column(key.shadow, ulid_type),
            schema=plan.schema,
        )
        yield lambda: fill(connection, target, staging, op)
    finally:
        with contextlib.suppress(sa.exc.SQLAlchemyError):
            drop_staging(connection, staging)


def _stage_now(
    connection: Connection,
    table: sa.Table,
    staging: sa.Table,
    plan: Plan,
    exists: bool,
    batch_size: int,
) -> None:
    """New ULIDs dated now, handed out in key order (so they sort like the old keys)."""
    key = table.c[plan.key]
    query = sa.select(key).order_by(key)
    if exists:
        query = query.where(table.c[plan.columns[0].shadow].is_(None))
    keys = connection.execute(query).scalars().all()
    generate = MonotonicGenerator()
    for start in range(0, len(keys), batch_size):
        rows = [{plan.key: k, "ulid": generate()} for k in keys[start : start + batch_size]]
        connection.execute(staging.insert(), rows)


def add_shadows(
    connection: Connection,
    plan: Plan,
    lock_timeout: float,
    reading: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
) -> None:
    """Add the missing shadow columns, nullable (a metadata change on both servers).

    Each table is read just before its ``ALTER`` (a column added to a
    partitioned table is on its partitions already), in ``reading()`` (the
    op's transaction without the statement timeout); each ``ALTER`` then
    waits for its lock only ``lock_timeout``.
    """
    for column in plan.columns:
        if column.parent is None and plan.direction == "legacy":
            continue
        with reading():
            present = column.shadow in columns_of(connection, plan, column.table)
        if present:
            continue
        statement = (
            f"ALTER TABLE {quoted_table(connection, plan, column.table)} ADD COLUMN "
            f"{quoted(connection, column.shadow)} {plan.new_type} NULL"
        )
        lock_safe_ddl(connection, [statement], lock_timeout=lock_timeout)


def fill_referencing(
    connection: Connection, plan: Plan, column: KeyColumn, *, catch_up: bool
) -> None:
    """Copy each referenced row's new value into the referencing shadow, by a join.

    With ``catch_up`` it also corrects shadows the application made stale
    (a reference changed or cleared since the first fill).
    """
    assert column.parent is not None
    parent = next(c for c in plan.columns if (c.table, c.column) == column.parent)
    source = _source(plan, parent)
    child = sa.table(
        column.table, sa.column(column.column), sa.column(column.shadow), schema=plan.schema
    )
    referenced = sa.table(
        parent.table, sa.column(parent.column), sa.column(source), schema=plan.schema
    )
    other = referenced.alias(parent_alias(plan, parent.table))
    shadow, new = child.c[column.shadow], other.c[source]
    stale = sa.or_(shadow.is_(None), shadow != new) if catch_up else shadow.is_(None)
    connection.execute(
        sa.update(child)
        .where(child.c[column.column] == other.c[parent.column], stale)
        .values({column.shadow: new})
    )
    if catch_up:
        connection.execute(
            sa.update(child)
            .where(child.c[column.column].is_(None), shadow.is_not(None))
            .values({column.shadow: None})
        )


def unfilled(connection: Connection, plan: Plan) -> list[str]:
    """Name the shadows that still miss a value, with counts."""
    found = []
    for column in plan.columns:
        source = _source(plan, column)
        t = sa.table(column.table, sa.column(column.column), sa.column(source), schema=plan.schema)
        missing: sa.ColumnElement[bool] = t.c[source].is_(None)
        if column.parent is not None:
            missing = sa.and_(missing, t.c[column.column].is_not(None))
        count = connection.scalar(sa.select(sa.func.count()).select_from(t).where(missing))
        if count:
            found.append(f"{column.table}.{source}: {count} rows")
    return found
