"""The phases of a primary-key conversion, each resumable.

A :class:`~._plan.Plan` is carried out in four phases: *prepare* (the
new ULIDs computed and checked, the plan stored, a nullable shadow column
added beside each changing column), *fill* the key's shadow, *fill* each
referencing shadow by a join, and the *swap*. The swap records each of its
steps in the stored plan, and each step also checks the schema before it
acts: on MariaDB every DDL statement commits on its own, so a kill can fall
between a step and its record.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import tzinfo
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..._dialects import key_conversion_sql
from ..._generator import MonotonicGenerator
from ..._types import ULIDType
from .._add import STAGING, AddULIDColumnOp, drop_staging, fill, stage
from .._inspect import ColumnState, column_state, quote, run, unescape_percent
from .._locks import lock_safe, lock_safe_ddl
from ._plan import KeyColumn, Plan, clear_state, mark_done

__all__ = ["add_shadows", "fill_referencing", "staged_key", "swap", "unfilled"]


def _q(connection: Connection, plan: Plan, table: str) -> str:
    return quote(connection.dialect, table, plan.schema)


def _c(connection: Connection, name: str) -> str:
    return quote(connection.dialect, name)


def _columns(connection: Connection, plan: Plan, table: str) -> dict[str, dict[str, Any]]:
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


def add_shadows(connection: Connection, plan: Plan, lock_timeout: float) -> None:
    """Add the missing shadow columns, nullable (a metadata change on both servers)."""
    for column in plan.columns:
        if column.parent is None and plan.direction == "legacy":
            continue
        if column.shadow in _columns(connection, plan, column.table):
            continue
        statement = (
            f"ALTER TABLE {_q(connection, plan, column.table)} ADD COLUMN "
            f"{_c(connection, column.shadow)} {plan.new_type} NULL"
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
    other = referenced.alias("ulid_parent")
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


# -- the swap ------------------------------------------------------------------------------


def swap(
    connection: Connection,
    plan: Plan,
    done: list[str],
    *,
    lock_timeout: float,
    catch_up: Callable[[], None],
) -> None:
    """Swap the columns and constraints, one recorded step at a time."""
    sql = key_conversion_sql(connection.dialect)
    assert sql is not None
    if sql.lock is not None:
        # Referencing tables first, the key's table last: a writer that has
        # written a referencing table and then checks a foreign key (reads
        # the key's table) is waited for, instead of waiting for the swap
        # while the swap waits for it (a deadlock that cancels one of them).
        # Writers taking them the other way round are let through by
        # lock_held: the swap gives up its locks first and tries again.
        tables = [_q(connection, plan, t) for t in reversed(plan.tables)]
        statements = [sql.lock.format(tables=tables[0])]
        if len(tables) > 1 and sql.lock_held is not None:
            statements.append(sql.lock_held.format(others=len(tables) - 1))
        statements += [sql.lock.format(tables=t) for t in tables[1:]]
        lock_safe(
            connection,
            lambda: [run(connection, s) for s in statements],
            f"LOCK TABLE {', '.join(tables)}",
            lock_timeout=lock_timeout,
        )
    if not any(name.startswith("swap:") for name in done):
        catch_up()
        missing = unfilled(connection, plan)
        if missing:
            raise sa.exc.InvalidRequestError(
                "rows without a new key value after the catch-up (were they written while "
                f"the swap ran?): {'; '.join(missing)}. Stop writes to these tables and rerun"
            )
    for name, step in _steps(connection, plan, sql.set_not_null, sql.set_comment):
        if f"swap:{name}" in done:
            continue
        statements = step()
        if statements:
            lock_safe_ddl(connection, statements, lock_timeout=lock_timeout)
        mark_done(connection, plan, done, f"swap:{name}")
    clear_state(connection, plan)


def _steps(
    connection: Connection, plan: Plan, set_not_null: str, set_comment: str
) -> Iterator[tuple[str, Callable[[], list[str]]]]:
    """The swap's steps: (name, a function returning the DDL still needed)."""
    dialect = connection.dialect
    metadata = sa.MetaData()

    def table(name: str, *columns: str) -> sa.Table:
        key = f"{plan.schema}.{name}" if plan.schema else name
        if key not in metadata.tables:
            sa.Table(name, metadata, schema=plan.schema)
        found = metadata.tables[key]
        for column in columns:
            if column not in found.c:
                found.append_column(sa.Column(column))
        return found

    def inspector() -> Any:
        return sa.inspect(connection)

    def compiled(element: sa.schema.ExecutableDDLElement) -> str:
        # The compiler escapes % for the driver already, and lock_safe_ddl
        # escapes the text once more where it is sent: undo the first.
        return unescape_percent(dialect, str(element.compile(dialect=dialect)))

    def columns(name: str) -> dict[str, dict[str, Any]]:
        return _columns(connection, plan, name)

    def primary_key(name: str) -> list[str]:
        return list(inspector().get_pk_constraint(name, schema=plan.schema)["constrained_columns"])

    def fk_names(name: str) -> set[str]:
        return {fk["name"] for fk in inspector().get_foreign_keys(name, schema=plan.schema)}

    def index_names(name: str) -> set[str]:
        found = {ix["name"] for ix in inspector().get_indexes(name, schema=plan.schema)}
        found |= {u["name"] for u in inspector().get_unique_constraints(name, schema=plan.schema)}
        return found

    for fk in plan.foreign_keys:
        table(fk.referred_table, fk.referred_column)
    for name in plan.tables:
        table(name, *(c.column for c in plan.columns if c.table == name))

    def foreign_key(fk: Any) -> sa.ForeignKeyConstraint:
        constraint = sa.ForeignKeyConstraint(
            [fk.column],
            [metadata.tables[_key(plan, fk.referred_table)].c[fk.referred_column]],
            name=fk.name,
            ondelete=fk.ondelete,
            onupdate=fk.onupdate,
            deferrable=fk.deferrable,
            initially=fk.initially,
            match=fk.match,
        )
        table(fk.table, fk.column).append_constraint(constraint)
        return constraint

    def drop_fk(fk: Any) -> list[str]:
        if fk.name not in fk_names(fk.table):
            return []
        return [compiled(sa.schema.DropConstraint(foreign_key(fk)))]

    for fk in plan.foreign_keys:
        yield f"drop foreign key {fk.name}", lambda fk=fk: drop_fk(fk)  # type: ignore[misc]

    def index(ix: Any) -> sa.Index:
        t = table(ix.table)
        for name in ix.columns:
            if name not in t.c:
                t.append_column(sa.Column(name))
        return sa.Index(ix.name, *(t.c[name] for name in ix.columns), unique=ix.unique)

    for ix in plan.indexes:
        yield (
            f"drop index {ix.name}",
            lambda ix=ix: (  # type: ignore[misc]
                [compiled(sa.schema.DropIndex(index(ix)))]
                if ix.name in index_names(ix.table)
                else []
            ),
        )

    def pk_sql(name: str, column: str, pk_name: str | None, add: bool) -> str:
        t = table(name)
        constraint = sa.PrimaryKeyConstraint(column, name=pk_name or None)
        if column not in t.c:
            t.append_column(sa.Column(column))
        t.append_constraint(constraint)
        element = (
            sa.schema.AddConstraint(constraint) if add else sa.schema.DropConstraint(constraint)
        )
        return compiled(element)

    def rename(name: str, old: str, new: str) -> list[str]:
        if old not in columns(name) or new in columns(name):
            return []
        old_sql, new_sql = _c(connection, old), _c(connection, new)
        return [f"ALTER TABLE {_q(connection, plan, name)} RENAME COLUMN {old_sql} TO {new_sql}"]

    def drop_column(name: str, column: str, unless_missing: str) -> list[str]:
        found = columns(name)
        if column not in found or unless_missing not in found:
            return []
        return [f"ALTER TABLE {_q(connection, plan, name)} DROP COLUMN {_c(connection, column)}"]

    def drop_pk(name: str, column: KeyColumn) -> list[str]:
        if not primary_key(name):
            return []
        return [pk_sql(name, column.column, column.primary_key, add=False)]

    def add_pk(name: str, column: KeyColumn) -> list[str]:
        if primary_key(name):
            return []
        return [pk_sql(name, column.column, column.primary_key, add=True)]

    def not_null(column: KeyColumn) -> list[str]:
        if not columns(column.table)[column.column]["nullable"]:
            return []
        return [
            set_not_null.format(
                table=_q(connection, plan, column.table),
                column=_c(connection, column.column),
                type=plan.new_type,
            )
        ]

    def comment(column: KeyColumn) -> list[str]:
        state = column_state(connection, column.table, column.column, plan.schema)
        if column.comment is None or state is None or state.comment == column.comment:
            return []
        # The compiler's literal, not String's processor: on MySQL/MariaDB
        # only the compiler doubles backslashes (when the server reads them).
        literal = sa.literal(column.comment, sa.String()).compile(
            dialect=dialect, compile_kwargs={"literal_binds": True}
        )
        text = set_comment.format(
            table=_q(connection, plan, column.table),
            column=_c(connection, column.column),
            type=plan.new_type,
            null="NULL" if column.nullable else "NOT NULL",
            comment=unescape_percent(dialect, str(literal)),
        )
        return [text]

    for column in plan.columns[1:]:
        label = f"{column.table}.{column.column}"
        if column.primary_key is not None:
            yield f"drop primary key {column.table}", lambda c=column: drop_pk(c.table, c)  # type: ignore[misc]
        yield f"drop {label}", lambda c=column: drop_column(c.table, c.column, c.shadow)  # type: ignore[misc]
        yield f"rename {label}", lambda c=column: rename(c.table, c.shadow, c.column)  # type: ignore[misc]
        if not column.nullable:
            yield f"not null {label}", lambda c=column: not_null(c)  # type: ignore[misc]
        if column.comment is not None:
            yield f"comment {label}", lambda c=column: comment(c)  # type: ignore[misc]
        if column.primary_key is not None:
            yield f"primary key {column.table}", lambda c=column: add_pk(c.table, c)  # type: ignore[misc]

    key = plan.columns[0]

    def unique(add: bool) -> list[str]:
        # Added on the key before it is renamed to legacy_id; dropped after
        # legacy_id is renamed back: on the column named like the key both times.
        if (plan.legacy_unique in index_names(plan.table)) == add:
            return []
        t = table(plan.table)
        if plan.key not in t.c:
            t.append_column(sa.Column(plan.key))
        constraint = sa.UniqueConstraint(t.c[plan.key], name=plan.legacy_unique)
        t.append_constraint(constraint)
        element = (
            sa.schema.AddConstraint(constraint) if add else sa.schema.DropConstraint(constraint)
        )
        return [compiled(element)]

    if plan.direction == "ulid":
        yield "unique legacy", lambda: unique(add=True)
        yield f"drop primary key {plan.table}", lambda: drop_pk(plan.table, key)
        yield "rename key to legacy", lambda: rename(plan.table, plan.key, plan.legacy_id)
        yield "rename shadow to key", lambda: rename(plan.table, key.shadow, plan.key)
        yield f"primary key {plan.table}", lambda: add_pk(plan.table, key)
    else:
        yield f"drop primary key {plan.table}", lambda: drop_pk(plan.table, key)
        yield "drop key", lambda: drop_column(plan.table, plan.key, plan.legacy_id)
        yield "rename legacy to key", lambda: rename(plan.table, plan.legacy_id, plan.key)
        yield f"primary key {plan.table}", lambda: add_pk(plan.table, key)
        yield "drop unique legacy", lambda: unique(add=False)

    for ix in plan.indexes:
        yield (
            f"create index {ix.name}",
            lambda ix=ix: (  # type: ignore[misc]
                []
                if ix.name in index_names(ix.table)
                else [compiled(sa.schema.CreateIndex(index(ix)))]
            ),
        )
    for fk in plan.foreign_keys:
        yield (
            f"create foreign key {fk.name}",
            lambda fk=fk: (  # type: ignore[misc]
                []
                if fk.name in fk_names(fk.table)
                else [compiled(sa.schema.AddConstraint(foreign_key(fk)))]
            ),
        )


def _key(plan: Plan, table: str) -> str:
    return f"{plan.schema}.{table}" if plan.schema else table
