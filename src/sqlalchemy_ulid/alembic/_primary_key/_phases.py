"""The last phase of a primary-key conversion: the *swap*, resumable.

A :class:`~._plan.Plan` is carried out in four phases: *prepare* (the
new ULIDs computed and checked, the plan stored, a nullable shadow column
added beside each changing column), *fill* the key's shadow, *fill* each
referencing shadow by a join (those three in ``_fill``), and the *swap*.
The swap records each of its steps in the stored plan, and each step also
checks the schema before it acts: on MariaDB every DDL statement commits
on its own, so a kill can fall between a step and its record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..._dialects import key_conversion_sql
from .._inspect import column_state, run, unescape_percent
from .._locks import lock_safe, lock_safe_ddl
from ._fill import columns_of, quoted, quoted_table, unfilled
from ._plan import KeyColumn, Plan
from ._state import clear_state, mark_done

__all__ = ["swap"]


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
        tables = [quoted_table(connection, plan, t) for t in reversed(plan.tables)]
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
        return columns_of(connection, plan, name)

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
        old_sql, new_sql = quoted(connection, old), quoted(connection, new)
        table_sql = quoted_table(connection, plan, name)
        return [f"ALTER TABLE {table_sql} RENAME COLUMN {old_sql} TO {new_sql}"]

    def drop_column(name: str, column: str, unless_missing: str) -> list[str]:
        found = columns(name)
        if column not in found or unless_missing not in found:
            return []
        table_sql = quoted_table(connection, plan, name)
        return [f"ALTER TABLE {table_sql} DROP COLUMN {quoted(connection, column)}"]

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
                table=quoted_table(connection, plan, column.table),
                column=quoted(connection, column.column),
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
            table=quoted_table(connection, plan, column.table),
            column=quoted(connection, column.column),
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
