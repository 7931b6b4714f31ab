"""Statements whose ORDER BY cannot go in a WHERE: paged as a subquery.

A page adds ``keys >= cursor`` to the WHERE and may reverse the ORDER BY.
Three kinds of statement do not allow that:

* GROUP BY (or HAVING) with a sort key that is not a grouped column, such as
  ``sum(total)``: an aggregate cannot go in a WHERE;
* a window function anywhere in the row or the sort, such as
  ``row_number() OVER (...)``: it cannot go in a WHERE, and a WHERE would
  change the rows it numbers;
* ``DISTINCT ON`` (PostgreSQL): its ORDER BY picks the row kept of each
  group, and a reversed ORDER BY or a WHERE on the keys picks another.

Such a statement is paged as ``SELECT <its columns> FROM (<statement>) AS
sqlalchemy_ulid_paged``, sorted and filtered outside, which returns the same
rows in the same order. ``DISTINCT ON`` keeps its ORDER BY inside. When the
statement selects ORM entities, whose objects a subquery would need an
``aliased()`` entity to load, it is refused before any SQL, showing that
wrapping.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql import visitors
from sqlalchemy.sql.elements import ColumnClause, ColumnElement, Over, UnaryExpression

__all__ = ["may_need_subquery", "paged_form"]

_SUBQUERY = "sqlalchemy_ulid_paged"


def _distinct_on(stmt: sa.Select[Any]) -> bool:
    return bool(stmt._distinct_on) or getattr(stmt, "_pre_columns_clause", None) is not None


def may_need_subquery(stmt: sa.Select[Any]) -> bool:
    """A cheap first test: False for a statement that surely pages as it is."""
    if _distinct_on(stmt) or stmt._group_by_clauses or stmt._having_criteria:
        return True
    # Private attribute: the items as passed to select() (entities and tables
    # unexpanded), read instead of selected_columns, which builds a collection.
    return _windowed([*stmt._raw_columns, *stmt._order_by_clauses])


def _windowed(exprs: Sequence[Any]) -> bool:
    """Whether a window function is in any of ``exprs``."""
    for expr in exprs:
        while isinstance(expr, UnaryExpression):  # ASC, DESC, NULLS FIRST/LAST
            expr = expr.element
        if isinstance(expr, (ColumnClause, sa.FromClause)):
            continue  # a column, a table or an entity: no window in it
        if any(isinstance(node, Over) for node in visitors.iterate(expr)):
            return True
    return False


def _reason(stmt: sa.Select[Any], keys: list[ColumnElement[Any]]) -> str | None:
    """Why ``stmt``, sorted by ``keys``, must be paged as a subquery (None: it need not)."""
    # Private attributes: Select has no public accessors for its GROUP BY,
    # HAVING or DISTINCT ON (checked against SQLAlchemy 2.0 and 2.1, where
    # DISTINCT ON is a syntax extension placed before the columns).
    if _distinct_on(stmt):
        return "uses DISTINCT ON, whose ORDER BY picks the row kept of each group"
    for expr in [*stmt.selected_columns, *keys]:
        if _windowed([expr]):
            return f"computes a window function ({expr})"
    grouped = list(stmt._group_by_clauses)
    if grouped or stmt._having_criteria:
        for key in keys:
            if not any(key.compare(group) for group in grouped):
                return f"groups rows (GROUP BY) and sorts by {key}, which is not a grouped column"
    return None


def _index(stmt: sa.Select[Any], expr: ColumnElement[Any]) -> int | None:
    for index, selected in enumerate(stmt.selected_columns):
        candidate = selected.element if isinstance(selected, sa.Label) else selected
        if selected.compare(expr) or candidate.compare(expr):
            return index
    return None


def paged_form(
    stmt: sa.Select[Any],
    order: Sequence[tuple[ColumnElement[Any], bool, str | None]],
    orm: bool,
    error: type[ValueError],
) -> tuple[sa.Select[Any], ColumnElement[Any]]:
    """The statement to page and its paging column: ``stmt`` itself, or wrapped.

    ``order`` is the sort: (expression, descending, NULL placement) per key,
    ending with ``column`` (the id order is the paging column alone).
    Raises ``error`` (before any SQL) for a statement that needs wrapping
    but selects ORM entities.
    """
    reason = _reason(stmt, [expr for expr, _, _ in order])
    if reason is None:
        return stmt, order[-1][0]
    if orm and any(
        item.get("entity") is not None and item["expr"] is item["entity"]
        for item in stmt.column_descriptions
    ):
        raise error(
            f"the statement {reason}, so a page cannot add its keys to the WHERE; page it "
            "as a subquery: sub = stmt.order_by(None).subquery(); entity = aliased(Model, sub); "
            "paginate(session, select(entity, sub.c.<column>...).order_by(<the same keys on "
            "sub.c / entity>), entity.id)"
        )
    width = len(stmt.selected_columns)
    # DISTINCT ON keeps its ORDER BY: it picks the row kept of each group.
    inner = stmt if _distinct_on(stmt) else stmt.order_by(None)
    positions: list[int] = []
    extra: list[ColumnElement[Any]] = []
    for expr, _, _ in order:
        index = _index(stmt, expr)
        if index is None:
            if width > 1:
                raise error(f"the sort key {expr} is not in the row: select it (a label is fine)")
            index = width + len(extra)
            extra.append(expr.label(f"sqlalchemy_ulid_key_{len(extra)}"))
        positions.append(index)
    sub = inner.add_columns(*extra).subquery(_SUBQUERY)
    columns = list(sub.c)
    wrapped = sa.select(*columns[:width])
    clauses = []
    for (_, descending, nulls), index in zip(order, positions, strict=False):
        clause = columns[index].desc() if descending else columns[index].asc()
        if nulls == "first":
            clause = clause.nulls_first()
        elif nulls == "last":
            clause = clause.nulls_last()
        clauses.append(clause)
    return wrapped.order_by(*clauses), columns[positions[-1]]
