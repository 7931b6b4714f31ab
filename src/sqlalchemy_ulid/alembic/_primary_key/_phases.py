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

import contextlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..._dialects import key_conversion_sql
from .._inspect import run, unescape_percent
from .._locks import lock_safe, lock_safe_ddl
from .._plan.database import database_for
from .._plan.step import Step
from ._fill import parent_alias, quoted, quoted_table, unfilled
from ._plan import STATE_TABLE, KeyColumn, Plan
from ._state import clear_state, mark_done

__all__ = ["swap", "swap_steps"]


# -- the swap ------------------------------------------------------------------------------


def swap(
    connection: Connection,
    plan: Plan,
    done: list[str],
    *,
    lock_timeout: float,
    catch_up: Callable[[], None],
) -> None:
    """Swap the columns and constraints, one recorded step at a time.

    On PostgreSQL the swap is one transaction under ACCESS EXCLUSIVE locks.
    On MariaDB, where each DDL statement commits on its own, it holds
    ``LOCK TABLES ... WRITE`` from before the catch-up to its last step, as
    the script does: a row written after the catch-up would keep its old
    value only, and lose it at the swap.
    """
    unlock = _lock_tables(connection, plan, lock_timeout)
    try:
        _swap(connection, plan, done, lock_timeout=lock_timeout, catch_up=catch_up)
    except BaseException:
        if unlock is not None:
            # The locks go with the session anyway; a killed one cannot be told.
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                run(connection, unlock)
        raise
    if unlock is not None:
        run(connection, unlock)


def _lock_tables(connection: Connection, plan: Plan, lock_timeout: float) -> str | None:
    """Where DDL commits on its own: every table locked at once, until the returned SQL.

    The tables (each also under the alias the catch-up reads it by) and the
    state table the steps are recorded in: a session under ``LOCK TABLES``
    may use only what it locked (temporary tables excepted).
    """
    sql = key_conversion_sql(connection.dialect)
    assert sql is not None
    if sql.lock_tables is None or sql.lock_table is None:
        return None
    aliases = {name: parent_alias(plan, name) for name in plan.tables}
    aliases[STATE_TABLE] = "ulid_state"
    items = [
        sql.lock_table.format(table=quoted_table(connection, plan, name), alias=alias)
        for name, alias in aliases.items()
    ]
    statement = sql.lock_tables.format(tables=", ".join(items))
    lock_safe(connection, lambda: run(connection, statement), statement, lock_timeout=lock_timeout)
    return sql.unlock


def _swap(
    connection: Connection,
    plan: Plan,
    done: list[str],
    *,
    lock_timeout: float,
    catch_up: Callable[[], None],
) -> None:
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
    for step in swap_steps(connection, plan):
        name = f"swap:{step.label}"
        if name in done:
            continue
        if _still_to_do(connection, step):
            lock_safe_ddl(connection, list(step.statements), lock_timeout=lock_timeout)
        mark_done(connection, plan, done, name)
    clear_state(connection, plan)


def _still_to_do(connection: Connection, step: Step) -> bool:
    """The step's guard, asked in the swap's own transaction where there is one."""
    return bool(run(connection, f"SELECT CASE WHEN ({step.guard}) THEN 1 ELSE 0 END").scalar())


def swap_steps(connection: Connection, plan: Plan) -> list[Step]:
    """The swap's steps: each its DDL and a guard in SQL, true while it is still to do.

    The statements are compiled by the dialect; the guards come from the
    database's catalog (``alembic/<database>/catalog.py``, its ``KeyCatalog``),
    so that the steps read the same online (``SELECT <guard>``) and in a script.
    """
    sql = key_conversion_sql(connection.dialect)
    assert sql is not None
    guards = database_for(connection.dialect).key_catalog
    dialect = connection.dialect
    metadata = sa.MetaData()

    def table(name: str, *columns: str) -> sa.Table:
        key = _key(plan, name)
        if key not in metadata.tables:
            sa.Table(name, metadata, schema=plan.schema)
        found = metadata.tables[key]
        for column in columns:
            if column not in found.c:
                found.append_column(sa.Column(column))
        return found

    def compiled(element: sa.schema.ExecutableDDLElement) -> str:
        # The compiler escapes % for the driver already, and lock_safe_ddl
        # escapes the text once more where it is sent: undo the first.
        return unescape_percent(dialect, str(element.compile(dialect=dialect)))

    def on(name: str) -> tuple[str, str, str | None]:
        """A table as the guards take it: (quoted and qualified, name, schema)."""
        return quoted_table(connection, plan, name), name, plan.schema

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
            # Recreated as it was: PostgreSQL's NOT VALID stays (other dialects ignore it).
            postgresql_not_valid=not fk.validated,
        )
        table(fk.table, fk.column).append_constraint(constraint)
        return constraint

    def index(ix: Any, add: bool) -> str:
        """Drop or create the index, or the unique constraint that owns it."""
        if add and ix.definition is not None:
            return str(ix.definition)
        t = table(ix.table, *ix.columns)
        columns = [t.c[name] for name in ix.columns]
        if ix.constraint:
            unique = sa.UniqueConstraint(*columns, name=ix.name)
            t.append_constraint(unique)
            return compiled(
                sa.schema.AddConstraint(unique) if add else sa.schema.DropConstraint(unique)
            )
        found = sa.Index(ix.name, *columns, unique=ix.unique)
        if add:
            return guards.create_index(compiled(sa.schema.CreateIndex(found)), ix.comment)  # type: ignore[no-any-return]
        return compiled(sa.schema.DropIndex(found))

    def pk_sql(name: str, column: str, pk_name: str | None, add: bool) -> str:
        t = table(name, column)
        constraint = sa.PrimaryKeyConstraint(column, name=pk_name or None)
        t.append_constraint(constraint)
        element = (
            sa.schema.AddConstraint(constraint) if add else sa.schema.DropConstraint(constraint)
        )
        return compiled(element)

    def has(name: str, column: str) -> str:
        return guards.has_column(*on(name), column)  # type: ignore[no-any-return]

    def pending(name: str, column: str) -> str:
        """SQL true while the swap has not yet renamed the column's new values into place.

        A drop (a foreign key, an index, a primary key) is to do while its
        object exists *and* this holds: after the swap the object exists again.
        """
        found = next(c for c in plan.columns if c.table == name and c.column == column)
        source = found.shadow if found.parent is not None or plan.direction == "ulid" else None
        return has(name, source if source is not None else plan.legacy_id)

    def step(label: str, statement: str, guard: str) -> Step:
        return Step(label, "ddl", (statement,), guard=guard)

    def literal(text: str) -> str:
        # The compiler's literal, not String's processor: on MySQL/MariaDB
        # only the compiler doubles backslashes (when the server reads them).
        found = sa.literal(text, sa.String()).compile(
            dialect=dialect, compile_kwargs={"literal_binds": True}
        )
        return unescape_percent(dialect, str(found))

    def rename(
        label: str, name: str, old: str, new: str, restated: KeyColumn | None = None
    ) -> Step:
        """Rename ``old`` to ``new``.

        With ``restated``, in the statement that gives the column its end
        state (NULL or NOT NULL, comment), where the database has one, as
        the script does.
        """
        old_sql, new_sql = quoted(connection, old), quoted(connection, new)
        statement = f"ALTER TABLE {on(name)[0]} RENAME COLUMN {old_sql} TO {new_sql}"
        if restated is not None and sql.rename_column is not None:
            text = restated.comment
            statement = sql.rename_column.format(
                table=on(name)[0],
                old=old_sql,
                column=new_sql,
                type=plan.new_type,
                null="NULL" if restated.nullable else "NOT NULL",
                comment="" if text is None else f" COMMENT {literal(text)}",
            )
        return step(label, statement, f"{has(name, old)} AND NOT {has(name, new)}")

    def drop_column(label: str, name: str, column: str, unless_missing: str) -> Step:
        statement = f"ALTER TABLE {on(name)[0]} DROP COLUMN {quoted(connection, column)}"
        return step(label, statement, f"{has(name, column)} AND {has(name, unless_missing)}")

    def drop_pk(name: str, column: KeyColumn) -> Step:
        return step(
            f"drop primary key {name}",
            pk_sql(name, column.column, column.primary_key, add=False),
            f"{guards.has_primary_key(*on(name))} AND {pending(name, column.column)}",
        )

    def add_pk(name: str, column: KeyColumn) -> list[Step]:
        """Add the primary key again, with its comment (lost with the dropped one)."""
        statement = pk_sql(name, column.column, column.primary_key, add=True)
        add = step(
            f"primary key {name}",
            guards.create_index(statement, column.pk_comment),
            f"NOT {guards.has_primary_key(*on(name))}",
        )
        label = column.primary_key or ""
        return [add, *comment_back(label, name, False, column.pk_comment, "primary key")]

    def not_null(label: str, column: KeyColumn) -> Step:
        statement = sql.set_not_null.format(
            table=on(column.table)[0], column=quoted(connection, column.column), type=plan.new_type
        )
        if column.not_null is not None:
            statement = guards.named_not_null(
                on(column.table)[0],
                quoted(connection, column.column),
                quoted(connection, column.not_null),
            )
        return step(label, statement, guards.nullable(*on(column.table), column.column))

    def comment(label: str, column: KeyColumn, text: str) -> Step:
        statement = sql.set_comment.format(
            table=on(column.table)[0],
            column=quoted(connection, column.column),
            type=plan.new_type,
            null="NULL" if column.nullable else "NOT NULL",
            comment=literal(text),
        )
        return step(
            label, statement, guards.comment_differs(*on(column.table), column.column, text)
        )

    def changing(ix: Any) -> str:
        """The changing column an index is dropped for."""
        return next(
            c.column for c in plan.columns[1:] if c.table == ix.table and c.column in ix.columns
        )

    def comment_back(
        label: str, name: str, index: bool, text: str | None, kind: str = "foreign key"
    ) -> list[Step]:
        """Give a recreated index or constraint its comment back, where the database can."""
        schema_sql = quoted(connection, plan.schema) if plan.schema else None
        statement = None
        if text is not None and label:  # MariaDB's primary key has no name (nor this step)
            statement = guards.comment_sql(
                on(name)[0], schema_sql, index, quoted(connection, label), text
            )
        if statement is None:
            return []
        read = guards.index_comment if index else guards.constraint_comment
        now = read(*on(name), label)
        return [
            step(
                f"comment {'index' if index else kind} {label}",
                statement,
                f"COALESCE({now}, '') <> {guards.literal(text)}",
            )
        ]

    steps = [
        step(
            f"drop foreign key {fk.name}",
            compiled(sa.schema.DropConstraint(foreign_key(fk))),
            f"{guards.has_foreign_key(*on(fk.table), fk.name)} AND {pending(fk.table, fk.column)}",
        )
        for fk in plan.foreign_keys
    ]
    steps += [
        step(
            f"drop index {ix.name}",
            index(ix, add=False),
            f"{guards.has_index(*on(ix.table), ix.name)} AND {pending(ix.table, changing(ix))}",
        )
        for ix in plan.indexes
    ]
    for column in plan.columns[1:]:
        label = f"{column.table}.{column.column}"
        if column.primary_key is not None:
            steps.append(drop_pk(column.table, column))
        steps.append(drop_column(f"drop {label}", column.table, column.column, column.shadow))
        steps.append(rename(f"rename {label}", column.table, column.shadow, column.column, column))
        # Still steps where the rename restated the column (their guards then
        # find nothing to do): a swap an earlier release began may need them.
        if not column.nullable:
            steps.append(not_null(f"not null {label}", column))
        if column.comment is not None:
            steps.append(comment(f"comment {label}", column, column.comment))
        if column.primary_key is not None:
            steps += add_pk(column.table, column)

    key = plan.columns[0]
    # Added on the key before it is renamed to legacy_id; dropped after
    # legacy_id is renamed back: on the column named like the key both times.
    unique = sa.UniqueConstraint(table(plan.table, plan.key).c[plan.key], name=plan.legacy_unique)
    table(plan.table).append_constraint(unique)
    has_unique = guards.has_index(*on(plan.table), plan.legacy_unique)
    if plan.direction == "ulid":
        steps += [
            step("unique legacy", compiled(sa.schema.AddConstraint(unique)), f"NOT {has_unique}"),
            drop_pk(plan.table, key),
            rename("rename key to legacy", plan.table, plan.key, plan.legacy_id),
            # The key's comment stays on legacy_id, in the script too.
            rename(
                "rename shadow to key", plan.table, key.shadow, plan.key, replace(key, comment=None)
            ),
            *add_pk(plan.table, key),
        ]
    else:
        steps += [
            drop_pk(plan.table, key),
            drop_column("drop key", plan.table, plan.key, plan.legacy_id),
            rename("rename legacy to key", plan.table, plan.legacy_id, plan.key),
            *add_pk(plan.table, key),
            step("drop unique legacy", compiled(sa.schema.DropConstraint(unique)), has_unique),
        ]

    for ix in plan.indexes:
        steps.append(
            step(
                f"create index {ix.name}",
                index(ix, add=True),
                f"NOT {guards.has_index(*on(ix.table), ix.name)}",
            )
        )
        steps += comment_back(ix.name, ix.table, not ix.constraint, ix.comment)
    for fk in plan.foreign_keys:
        steps.append(
            step(
                f"create foreign key {fk.name}",
                compiled(sa.schema.AddConstraint(foreign_key(fk))),
                f"NOT {guards.has_foreign_key(*on(fk.table), fk.name)}",
            )
        )
        steps += comment_back(fk.name, fk.table, False, fk.comment)
    return steps


def _key(plan: Plan, table: str) -> str:
    return f"{plan.schema}.{table}" if plan.schema else table
