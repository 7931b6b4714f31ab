"""The refusals of the one-transaction storage conversion on MariaDB, as ``check`` steps.

Each check is SQL over ``information_schema`` and the table, true when the
op must refuse, with SQL of the refusal's text. The online op asks them
(``_plan.run.run_checks``) and its ``--sql`` script writes them as ``IF
<guard> THEN SIGNAL`` (``_plan.render_mariadb.checks_block``): online and
offline refuse from the same SQL, before any change. A column already in
the new storage is refused nothing (a rerun after success does nothing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._codec import InvalidULID
from .._plan.render_mariadb import lit
from .._plan.step import Step

if TYPE_CHECKING:
    from .storage_target import Names

__all__ = ["column_kind", "one_transaction_checks", "shadow_checks"]


def column_kind(n: Names) -> str:
    """SQL of the column's storage kind (``holding``: the ``VARBINARY`` of a run under way)."""
    return n.kind_case()


def _found(n: Names, what: str) -> str:
    return (
        f"(SELECT {what} FROM information_schema.COLUMNS WHERE {n.where(n.name)} "
        f"AND COLUMN_NAME = {n.column_lit})"
    )


def one_transaction_checks(n: Names) -> list[Step]:
    """The refusals of ``alter_ulid_storage`` (one transaction), in the online op's order."""
    op, sql = n.op, n.sql
    kind = _found(n, n.kind_case())
    to_do = f"NOT {kind} <=> {lit(n.to_kind)}"
    column = f"{op.table_name}.{op.column_name}"
    nothing = lit("; nothing was changed")
    done = sql.check(n.column, n.to_kind) or "TRUE"
    converted = f"(SELECT COUNT(*) FROM {n.table} WHERE {n.column} IS NOT NULL AND ({done}))"
    present = f"(SELECT COUNT({n.column}) FROM {n.table})"
    name = lit(op.table_name)
    references = (
        "(SELECT GROUP_CONCAT(CONCAT(TABLE_NAME, '(', COLUMN_NAME, ') references ', "
        "REFERENCED_TABLE_NAME, '.', REFERENCED_COLUMN_NAME) SEPARATOR '; ') "
        f"FROM information_schema.KEY_COLUMN_USAGE WHERE REFERENCED_TABLE_NAME IS NOT NULL "
        f"AND TABLE_SCHEMA = {n.schema} AND ((TABLE_NAME = {name} "
        f"AND COLUMN_NAME = {n.column_lit}) OR (REFERENCED_TABLE_NAME = {name} "
        f"AND REFERENCED_COLUMN_NAME = {n.column_lit})))"
    )
    checks = [
        _column_check(n),
        Step(
            "the column is in either storage",
            "check",
            guard=f"{to_do} AND NOT ({kind} <=> {lit(n.from_kind)} OR {kind} <=> 'holding')",
            message=f"CONCAT({lit(column + ' is ')}, {_found(n, 'COLUMN_TYPE')}, "
            f"{lit(f', which is neither {n.from_kind} nor {n.to_kind} storage')}, {nothing})",
        ),
        Step(
            "no foreign key uses the column",
            "check",
            guard=f"{to_do} AND {references} IS NOT NULL",
            message=f"CONCAT({lit(column + ' is used by foreign keys (')}, {references}, "
            f"{lit('); nothing was changed. Drop those foreign keys, convert the key and every column referencing it with alter_ulid_storage, then create the foreign keys again')})",  # noqa: E501
        ),
        Step(
            "the values are all old or all new",
            "check",
            guard=f"{kind} <=> 'holding' AND {converted} > 0 AND {converted} <> {present}",
            message=f"CONCAT({lit(column + ' holds ')}, {converted}, ' converted and ', "
            f"{present} - {converted}, {lit(' unconverted values (rows written during an interrupted conversion?); nothing was changed. Convert or delete the odd rows by hand, then rerun')})",  # noqa: E501
        ),
    ]
    checks.append(_default_check(n, kind, to_do))
    if op.checked_before(n.from_kind):
        when = f"({kind} <=> {lit(n.from_kind)} OR ({kind} <=> 'holding' AND {converted} = 0))"
        checks.append(_values_check(n, when))
    return checks


def _column_check(n: Names) -> Step:
    """The column is in the table (both ops ask it first, or after the table)."""
    return Step(
        "the column exists",
        "check",
        guard=f"NOT EXISTS {_found(n, '1')}",
        message=lit(f"{n.op.table_name} has no column {n.op.column_name!r}"),
    )


def _values_check(n: Names, when: str) -> Step:
    """A value that is not an id of the old storage, shown (raised as InvalidULID online)."""
    op, sql = n.op, n.sql
    shown = n.column if n.from_kind in ("text", "hex") else f"HEX({n.column})"
    bad = sql.bad_text(n.column, n.from_kind)
    example = f"(SELECT {shown} FROM {n.table} WHERE {n.column} IS NOT NULL AND {bad} LIMIT 1)"
    column = f"{op.table_name}.{op.column_name}"
    return Step(
        "every value is an id",
        "check",
        guard=f"{when} AND {example} IS NOT NULL",
        message=f"CONCAT({lit(f'{column} holds values that are not {op.values_name} (e.g. ')}, "
        f"{example}, {lit('); nothing was changed')})",
        error=InvalidULID,
    )


def _default_check(n: Names, kind: str, to_do: str) -> Step:
    """A DEFAULT that is not a literal id of the old storage cannot be carried."""
    from .storage_target import default_value_sql

    op = n.op
    default = _found(n, "COLUMN_DEFAULT")
    value, valid = default_value_sql(n, default)
    column = f"{op.table_name}.{op.column_name}"
    return Step(
        "the DEFAULT can be carried",
        "check",
        guard=f"{to_do} AND {default} IS NOT NULL AND {default} <> 'NULL' "
        f"AND ({value} IS NULL OR NOT COALESCE({valid}, FALSE))",
        message=f"CONCAT({lit(column + ' has DEFAULT ')}, {default}, "
        f"{lit(', which cannot be carried to the new storage; nothing was changed')})",
    )


def shadow_checks(n: Names) -> list[Step]:
    """The refusals of ``alter_ulid_storage(online=True)`` (the shadow table), in order.

    With the column already in the new storage none refuses: the op then
    only removes what an interrupted run left.
    """
    op = n.op
    where = f"{op.op_name}({op.table_name!r}, online=True)"
    kind, to = n.kind_of(n.name), lit(n.to_kind)
    to_do = f"NOT {kind} <=> {to}"
    name, column = lit(op.table_name), f"{op.table_name}.{op.column_name}"
    cols, new_cols = n.columns_of(n.name), n.columns_of(n.shadow_name)
    engine = f"(SELECT ENGINE FROM information_schema.TABLES WHERE {n.where(n.name)})"
    keys = (
        "(SELECT COUNT(*) FROM information_schema.KEY_COLUMN_USAGE "
        f"WHERE {n.where(n.name)} AND CONSTRAINT_NAME = 'PRIMARY')"
    )
    foreign = (
        "(SELECT GROUP_CONCAT(CONSTRAINT_NAME, ' (', TABLE_NAME, ' references ', "
        "REFERENCED_TABLE_NAME, ')' SEPARATOR '; ') "
        "FROM information_schema.REFERENTIAL_CONSTRAINTS "
        f"WHERE CONSTRAINT_SCHEMA = {n.schema} AND (TABLE_NAME = {name} "
        f"OR REFERENCED_TABLE_NAME = {name}))"
    )
    triggers = (
        "(SELECT GROUP_CONCAT(TRIGGER_NAME SEPARATOR ', ') FROM information_schema.TRIGGERS "
        f"WHERE EVENT_OBJECT_SCHEMA = {n.schema} AND EVENT_OBJECT_TABLE = {name} "
        f"AND TRIGGER_NAME NOT IN ({n.trigger_list}))"
    )
    ours_idle = (
        "NOT EXISTS (SELECT 1 FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = "
        f"{n.schema} AND TRIGGER_NAME IN ({n.trigger_list}))"
    )
    new_kind = n.kind_of(n.shadow_name)
    nothing = "Nothing was changed"
    checks = [
        Step(
            "the table exists",
            "check",
            guard=f"{cols} IS NULL",
            message=lit(f"{op.table_name} does not exist: nothing was changed"),
        ),
        _column_check(n),
        Step(
            "no one-transaction run was interrupted",
            "check",
            guard=f"{kind} <=> 'holding'",
            message=lit(
                f"{column} is VARBINARY: a conversion without online=True was interrupted. "
                "Finish it by rerunning without online=True"
            ),
        ),
        Step(
            "the column is in the old storage",
            "check",
            guard=f"{to_do} AND NOT {kind} <=> {lit(n.from_kind)}",
            message=lit(
                f"{column} is neither {n.from_kind} nor {n.to_kind} storage: nothing was changed"
            ),
        ),
        Step(
            "an InnoDB table",
            "check",
            guard=f"{to_do} AND NOT {engine} <=> 'InnoDB'",
            message=f"CONCAT({lit(f'{where} needs an InnoDB table; {op.table_name} is ')}, "
            f"COALESCE({engine}, '?'))",
        ),
        Step(
            "a single-column primary key",
            "check",
            guard=f"{to_do} AND {keys} <> 1",
            message=lit(
                f"{where} needs a single-column primary key on {op.table_name}: the copy "
                f"walks it in batches and the triggers find rows by it. {nothing}"
            ),
        ),
        Step(
            "no foreign key uses the table",
            "check",
            guard=f"{to_do} AND {foreign} IS NOT NULL",
            message=f"CONCAT({lit(f'{where}: foreign keys use the table: ')}, {foreign}, "
            f"{lit(f'; the swap renames the table, which would leave them on the old copy. {nothing}: drop them first and create them again afterwards')})",  # noqa: E501
        ),
        Step(
            "no trigger of the application's",
            "check",
            guard=f"{to_do} AND {triggers} IS NOT NULL",
            message=f"CONCAT({lit(f'{where}: {op.table_name} has triggers (')}, {triggers}, "
            f"{lit(f'); they would not follow the swap to the new table. {nothing}: drop them, convert, then create them again')})",  # noqa: E501
        ),
        Step(
            "the old table's name is free",
            "check",
            guard=f"{to_do} AND {n.columns_of(n.old_name)} IS NOT NULL",
            message=lit(
                f"{where} needs the name {n.old_name} for the old table during the swap, and "
                f"a table has it (left by an earlier conversion?). {nothing}: drop or rename it"
            ),
        ),
        Step(
            "the new table's name is free or ours",
            "check",
            guard=f"{to_do} AND {new_cols} IS NOT NULL AND NOT ("
            f"({new_cols} <=> {cols} AND {new_kind} <=> {to}) OR ({new_cols} <=> {cols} "
            f"AND {new_kind} <=> {lit(n.from_kind)} AND {ours_idle}))",
            message=lit(
                f"{where} builds the new table as {n.shadow_name}, and a table of another "
                f"shape is named {n.shadow_name}. {nothing}: drop or rename it"
            ),
        ),
        _default_check(n, kind, to_do),
    ]
    if op.checked_before(n.from_kind):
        checks.append(_values_check(n, f"{kind} <=> {lit(n.from_kind)}"))
    return checks
