"""The plan of ``alter_ulid_storage``/``alter_uuid7_storage(online=True)`` on MariaDB.

InnoDB cannot change a column between ``CHAR(26)`` and ``BINARY(16)`` in
place: ``MODIFY`` copies the table while writers wait. So the plan builds
the converted table beside the original and swaps the two, in steps that
each commit on their own. It is written from names alone: its guards and
the statements it makes as it runs (``generated``: a column list, a
counter) read ``information_schema``, so the one plan runs online and
renders as the ``mariadb`` script. While the column is in the old storage:

0. the checks (``storage_checks.shadow_checks``), before any change;
1. ``CREATE TABLE _<t>__new LIKE <t>``, then ``MODIFY`` of its column to
   the new storage with the nullability, COMMENT and converted DEFAULT
   found (the table is empty: instant);
2. three triggers on ``<t>`` (``AFTER DELETE``, ``AFTER UPDATE``, ``AFTER
   INSERT``, created in that order) that mirror every write into the
   shadow, converting the column: a value that is not an id makes the
   writer's statement fail;
3. the copy (``storage_copy``), then both tables counted in one statement;
4. the table's ``AUTO_INCREMENT`` counter given to the shadow (``CREATE
   TABLE ... LIKE`` started it again: the keys of rows deleted from the end
   would be given out twice), then ``RENAME TABLE <t> TO _<t>__old,
   _<t>__new TO <t>`` (atomic; the triggers follow ``_<t>__old``);
5. once the column is in the new storage: the triggers dropped, then
   ``_<t>__old``, or the shadow of a run being undone (only a table of the
   original's shape, its column still in the old storage).

Killed and rerun, each step's guard sees what is done; the copy goes on
from the first row of ``<t>`` the shadow lacks (``INSERT IGNORE`` never
overwrites a mirrored row).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._inspect import run
from .._locks import DEFAULT_LOCK_TIMEOUT
from .._plan.batches import BATCH_SECONDS
from .._plan.render_mariadb import lit
from .._plan.step import Fill, Plan, Step
from .._primary_key._offline_mariadb_sql import quoted
from .storage_checks import shadow_checks
from .storage_copy import (
    AUTO_INC_BATCH_SECONDS,
    COPY_DECLARE,
    batch_seconds_sql,
    copy_script,
    estimate_sql,
    key_sql,
    names_sql,
    row_key_sql,
    values_sql,
)
from .storage_target import default_clause_sql

if TYPE_CHECKING:
    from .storage_target import Names

__all__ = ["done_sql", "plan_storage"]

#: The triggers, in the order they are created (see the module docstring).
EVENTS = ("delete", "update", "insert")
#: What the scripts say in their header.
_NOTES = (
    "Run it as mariadb --batch < script.sql. Writers go on throughout; if a statement "
    "fails (a lock wait timeout, a value that is not an id), fix the cause and run the "
    "script again from its first line: the copy goes on from the first row the new "
    "table lacks.",
)


def _trigger_exists(n: Names, event: str) -> str:
    return (
        "EXISTS (SELECT 1 FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = "
        f"{n.schema} AND TRIGGER_NAME = {lit(n.triggers[event])})"
    )


def _triggers_exist(n: Names) -> str:
    return (
        f"(SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = {n.schema} "
        f"AND TRIGGER_NAME IN ({n.trigger_list})) = 3"
    )


def _ours(n: Names, table: str) -> str:
    """SQL true when ``table`` has the original's columns, ours still in the old storage."""
    return (
        f"{n.columns_of(table)} <=> {n.columns_of(n.name)} "
        f"AND {n.kind_of(table)} <=> {lit(n.from_kind)}"
    )


def _cleanup(n: Names) -> list[tuple[str, str, tuple[str, ...]]]:
    """(label, guard, statements) of what a finished conversion drops."""
    converted = f"{n.kind_of(n.name)} <=> {lit(n.to_kind)}"
    any_trigger = " OR ".join(_trigger_exists(n, e) for e in EVENTS)
    return [
        (
            "Phase 5: the triggers dropped",
            f"{converted} AND ({any_trigger})",
            tuple(f"DROP TRIGGER IF EXISTS {n.trigger_sql[e]}" for e in EVENTS),
        ),
        (
            "the old table dropped",
            f"{converted} AND {_ours(n, n.old_name)}",
            (f"DROP TABLE {n.old}",),
        ),
        (
            "the shadow of a run undone dropped",
            f"{converted} AND {_ours(n, n.shadow_name)}",
            (f"DROP TABLE {n.shadow}",),
        ),
    ]


def done_sql(n: Names) -> str:
    """SQL true when the column is converted and nothing of a conversion is left."""
    left = " OR ".join(f"({guard})" for _, guard, _ in _cleanup(n))
    return f"{n.kind_of(n.name)} <=> {lit(n.to_kind)} AND NOT ({left})"


def _modify(n: Names) -> str:
    """A query of the shadow's MODIFY: the new type, the table's nullability, COMMENT, DEFAULT."""
    op = n.op
    nullable = (
        "IS_NULLABLE = 'YES'" if op.nullable is None else ("TRUE" if op.nullable else "FALSE")
    )
    # Not correlated: the DEFAULT's text goes into a derived table.
    default = (
        f"(SELECT COLUMN_DEFAULT FROM information_schema.COLUMNS WHERE {n.where(n.name)} "
        f"AND COLUMN_NAME = {n.column_lit})"
    )
    return (
        f"SELECT CONCAT({lit(f'ALTER TABLE {n.shadow} MODIFY {n.column} {n.type_sql}')}, "
        f"IF({nullable}, ' NULL', ' NOT NULL'), {default_clause_sql(n, default)}, "
        "IF(COLUMN_COMMENT = '', '', CONCAT(' COMMENT ', QUOTE(COLUMN_COMMENT)))) AS ddl "
        f"FROM information_schema.COLUMNS WHERE {n.where(n.name)} AND COLUMN_NAME = {n.column_lit}"
    )


def _trigger(n: Names, event: str) -> str:
    """A query of the CREATE TRIGGER that mirrors ``event`` into the shadow."""
    shadow = lit(n.shadow)
    head = lit(
        f"CREATE TRIGGER {n.trigger_sql[event]} AFTER {event.upper()} ON {n.table} FOR EACH ROW "
    )
    key = quoted(key_sql(n))
    values = values_sql(n, "NEW")
    mirror = f"'REPLACE INTO ', {shadow}, ' (', {names_sql(n)}, ') VALUES (', {values}, ')'"
    forget = (
        f"'DELETE FROM ', {shadow}, ' WHERE ', {shadow}, '.', {key}, ' = ', {row_key_sql(n, 'OLD')}"
    )
    # A changed key leaves its old row behind in the shadow: remove it.
    moved = f"'NOT (OLD.', {key}, ' <=> NEW.', {key}, ')'"
    made = {
        "delete": f"{head}, {forget}",
        "update": (
            f"{head}, 'BEGIN IF ', {moved}, ' THEN ', {forget}, '; END IF; ', {mirror}, '; END'"
        ),
        "insert": f"{head}, {mirror}",
    }
    return f"SELECT CONCAT({made[event]}) AS ddl"


def plan_storage(n: Names, copy: Callable[[Any], Callable[[int], int]] | None = None) -> Plan:
    """The op's plan; ``copy(connection)`` (online) begins the copy's Python batches."""
    op = n.op
    going = f"{n.kind_of(n.name)} <=> {lit(n.from_kind)}"
    shadow_new = f"{going} AND {n.kind_of(n.shadow_name)} <=> {lit(n.to_kind)}"
    copying = f"{shadow_new} AND {_triggers_exist(n)}"
    steps = shadow_checks(n)
    steps.append(
        Step(
            "Phase 1: the new table",
            "ddl",
            (f"CREATE TABLE {n.shadow} LIKE {n.table}",),
            guard=f"{going} AND {n.columns_of(n.shadow_name)} IS NULL",
        )
    )
    steps.append(
        Step(
            "the new table's column in the new storage",
            "ddl",
            (_modify(n),),
            guard=f"{going} AND {n.kind_of(n.shadow_name)} <=> {lit(n.from_kind)}",
            generated=True,
        )
    )
    for number, event in enumerate(EVENTS):
        steps.append(
            Step(
                f"Phase 2: the {event} trigger" if number == 0 else f"the {event} trigger",
                "ddl",
                (_trigger(n, event),),
                guard=f"{shadow_new} AND NOT {_trigger_exists(n, event)}",
                generated=True,
            )
        )
    steps.append(
        Step(
            "Phase 3: the copy",
            "fill",
            guard=copying,
            fill=Fill(
                copy if copy is not None else _no_online,
                copy_script(n, op.batch_size, op.pause),
                declare=COPY_DECLARE,
                table=op.table_name,
                column=op.column_name,
                estimate=lambda c: int(run(c, estimate_sql(n)).scalar() or 0),
                seconds=lambda c: _seconds(c, n),
            ),
        )
    )
    steps.append(
        Step(
            "Phase 4: the AUTO_INCREMENT counter carried",
            "ddl",
            (
                f"SELECT CONCAT({lit(f'ALTER TABLE {n.shadow} AUTO_INCREMENT = ')}, "
                "AUTO_INCREMENT) AS ddl FROM information_schema.TABLES "
                f"WHERE {n.where(n.name)} AND AUTO_INCREMENT IS NOT NULL",
            ),
            guard=copying,
            generated=True,
        )
    )
    steps.append(
        Step(
            "the swap",
            "ddl",
            (f"RENAME TABLE {n.table} TO {n.old}, {n.shadow} TO {n.table}",),
            guard=copying,
        )
    )
    steps += [
        Step(label, "ddl", statements, guard=guard) for label, guard, statements in _cleanup(n)
    ]
    return Plan(
        op=op.op_name,
        target=n.target,
        steps=tuple(steps),
        lock_timeout=DEFAULT_LOCK_TIMEOUT if op.lock_timeout is None else op.lock_timeout,
        batch_size=op.batch_size,
        pause=op.pause,
        schema=op.schema,
        notes=_NOTES,
    )


def _seconds(connection: Any, n: Names) -> float:
    held = run(connection, batch_seconds_sql(n)).scalar()
    return AUTO_INC_BATCH_SECONDS if held else BATCH_SECONDS


def _no_online(connection: Any) -> Callable[[int], int]:
    raise RuntimeError("this plan was made for a script: it has no online copy")
