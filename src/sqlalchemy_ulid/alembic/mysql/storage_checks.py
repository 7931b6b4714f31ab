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

from .._offline_mariadb import _literal
from .._plan.step import Step

if TYPE_CHECKING:
    from .._storage._offline_mariadb_sql import Names

__all__ = ["column_kind", "one_transaction_checks"]


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
    to_do = f"NOT {kind} <=> {_literal(n.to_kind)}"
    column = f"{op.table_name}.{op.column_name}"
    nothing = _literal("; nothing was changed")
    done = sql.check(n.column, n.to_kind) or "TRUE"
    converted = f"(SELECT COUNT(*) FROM {n.table} WHERE {n.column} IS NOT NULL AND ({done}))"
    present = f"(SELECT COUNT({n.column}) FROM {n.table})"
    name = _literal(op.table_name)
    references = (
        "(SELECT GROUP_CONCAT(CONCAT(TABLE_NAME, '(', COLUMN_NAME, ') references ', "
        "REFERENCED_TABLE_NAME, '.', REFERENCED_COLUMN_NAME) SEPARATOR '; ') "
        f"FROM information_schema.KEY_COLUMN_USAGE WHERE REFERENCED_TABLE_NAME IS NOT NULL "
        f"AND TABLE_SCHEMA = {n.schema} AND ((TABLE_NAME = {name} "
        f"AND COLUMN_NAME = {n.column_lit}) OR (REFERENCED_TABLE_NAME = {name} "
        f"AND REFERENCED_COLUMN_NAME = {n.column_lit})))"
    )
    checks = [
        Step(
            "the column exists",
            "check",
            guard=f"NOT EXISTS {_found(n, '1')}",
            message=_literal(f"{op.table_name} has no column {op.column_name!r}"),
        ),
        Step(
            "the column is in either storage",
            "check",
            guard=f"{to_do} AND NOT ({kind} <=> {_literal(n.from_kind)} OR {kind} <=> 'holding')",
            message=f"CONCAT({_literal(column + ' is ')}, {_found(n, 'COLUMN_TYPE')}, "
            f"{_literal(f', which is neither {n.from_kind} nor {n.to_kind} storage')}, {nothing})",
        ),
        Step(
            "no foreign key uses the column",
            "check",
            guard=f"{to_do} AND {references} IS NOT NULL",
            message=f"CONCAT({_literal(column + ' is used by foreign keys (')}, {references}, "
            f"{_literal('); nothing was changed. Drop those foreign keys, convert the key and every column referencing it with alter_ulid_storage, then create the foreign keys again')})",  # noqa: E501
        ),
        Step(
            "the values are all old or all new",
            "check",
            guard=f"{kind} <=> 'holding' AND {converted} > 0 AND {converted} <> {present}",
            message=f"CONCAT({_literal(column + ' holds ')}, {converted}, ' converted and ', "
            f"{present} - {converted}, {_literal(' unconverted values (rows written during an interrupted conversion?); nothing was changed. Convert or delete the odd rows by hand, then rerun')})",  # noqa: E501
        ),
    ]
    if op.checked_before(n.from_kind):
        shown = n.column if n.from_kind in ("text", "hex") else f"HEX({n.column})"
        bad = sql.bad_text(n.column, n.from_kind)
        example = f"(SELECT {shown} FROM {n.table} WHERE {n.column} IS NOT NULL AND {bad} LIMIT 1)"
        checks.append(
            Step(
                "every value is an id",
                "check",
                guard=f"({kind} <=> {_literal(n.from_kind)} OR ({kind} <=> 'holding' "
                f"AND {converted} = 0)) AND {example} IS NOT NULL",
                message=f"CONCAT({_literal(f'{column} holds values that are not {op.values_name} (e.g. ')}, "  # noqa: E501
                f"{example}, {_literal(')')}, {nothing})",
            )
        )
    checks.append(_default_check(n, kind, to_do))
    return checks


def _default_check(n: Names, kind: str, to_do: str) -> Step:
    """A DEFAULT that is not a literal id of the old storage cannot be carried."""
    from .._storage._offline_mariadb_sql import default_value_sql

    op = n.op
    default = _found(n, "COLUMN_DEFAULT")
    value, valid = default_value_sql(n, default)
    column = f"{op.table_name}.{op.column_name}"
    return Step(
        "the DEFAULT can be carried",
        "check",
        guard=f"{to_do} AND {default} IS NOT NULL AND {default} <> 'NULL' "
        f"AND ({value} IS NULL OR NOT COALESCE({valid}, FALSE))",
        message=f"CONCAT({_literal(column + ' has DEFAULT ')}, {default}, "
        f"{_literal(', which cannot be carried to the new storage; nothing was changed')})",
    )
