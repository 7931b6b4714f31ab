"""Whether the paging column is unique in the statement's result (checked before any SQL)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import (
    BinaryExpression,
    BindParameter,
    BooleanClauseList,
    ColumnElement,
)

from .._keys import table_column as _table_column
from ._sort import PaginationError

__all__ = ["check_unique"]


def _fixed(where: ColumnElement[Any] | None) -> set[tuple[Any, str]]:
    """The table columns that ``where`` fixes by equality to a value."""
    fixed: set[tuple[Any, str]] = set()
    stack = [] if where is None else [where]
    while stack:
        clause = stack.pop()
        if isinstance(clause, BooleanClauseList) and clause.operator is operators.and_:
            stack.extend(clause.clauses)
        elif isinstance(clause, BinaryExpression) and clause.operator is operators.eq:
            for side, other in ((clause.left, clause.right), (clause.right, clause.left)):
                table_column = _table_column(side)
                if table_column is not None and isinstance(other, BindParameter):
                    fixed.add((table_column.table, table_column.name))
    return fixed


def check_unique(
    stmt: sa.Select[Any], column: ColumnElement[Any], preceding: Sequence[ColumnElement[Any]]
) -> None:
    """Refuse a paging column that is not unique in the result.

    Unique on its own, or within a composite key (primary key, unique
    constraint or index) whose other columns the WHERE fixes by equality, or
    that precede it, NOT NULL, in the ORDER BY; or grouped by (GROUP BY) with
    only columns that precede it in the ORDER BY. A ``contains_eager()`` of
    a collection repeats each entity once per child: refused, whatever the
    paging column.
    """
    _check_eager_collection(stmt)
    # Private attribute: Select has no public accessor for its GROUP BY.
    grouped = list(stmt._group_by_clauses)
    if any(group.compare(column) for group in grouped) and all(
        group.compare(column) or any(group.compare(expr) for expr in preceding) for group in grouped
    ):
        return
    table_column = _table_column(column)
    if table_column is None or _is_unique(table_column):
        return
    table = table_column.table
    fixed = _fixed(stmt.whereclause)
    for expr in preceding:
        ahead = _table_column(expr)
        if ahead is not None and not ahead.nullable:
            fixed.add((ahead.table, ahead.name))
    groups = [list(table.primary_key.columns)]
    groups += [list(c.columns) for c in table.constraints if isinstance(c, sa.UniqueConstraint)]
    groups += [list(i.columns) for i in table.indexes if i.unique]
    for group in groups:
        names = [c.name for c in group]
        if table_column.name in names and all(
            name == table_column.name or (table, name) in fixed for name in names
        ):
            return
    raise PaginationError(
        f"the paging column {table_column} is not unique, so rows sharing a value would be "
        "skipped at a page boundary; page on the primary key or a unique column, or fix the "
        "other columns of its composite key by equality in the WHERE, or put them before it "
        "in the ORDER BY"
    )


def _check_eager_collection(stmt: sa.Select[Any]) -> None:
    """Refuse ``contains_eager()`` of a collection: the LIMIT would count joined rows.

    ``joinedload()`` of a collection makes SQLAlchemy apply the LIMIT to the
    parents in a subquery; ``contains_eager()`` reads the caller's own join,
    one row per child, so a page of ``n`` rows can hold a single entity with
    its children cut short, and the page after it starts past rows never shown.
    """
    # Private attributes: a loader option's elements, their options and path
    # (no public accessor; pinned by the contains_eager tests on 2.0 and 2.1).
    for option in getattr(stmt, "_with_options", ()):
        for element in getattr(option, "context", ()):
            if "eager_from_alias" not in getattr(element, "local_opts", {}):
                continue
            path = getattr(getattr(element, "path", None), "path", ())
            if any(getattr(step, "uselist", False) for step in path):
                raise PaginationError(
                    "contains_eager() of a collection returns one row per child, so a page's "
                    "LIMIT would count children, not entities, and rows would be lost: load "
                    "the collection with selectinload() (or joinedload(), which limits the "
                    "entities in a subquery)"
                )


def _is_unique(column: sa.Column[Any]) -> bool:
    """Whether the table declares ``column`` unique on its own."""
    table = column.table
    if column.unique or [c.name for c in table.primary_key.columns] == [column.name]:
        return True
    for constraint in table.constraints:
        if isinstance(constraint, sa.UniqueConstraint) and [c.name for c in constraint.columns] == [
            column.name
        ]:
            return True
    return any(
        index.unique and [c.name for c in index.columns] == [column.name] for index in table.indexes
    )
