"""Whether a sort key can be NULL, decided from the statement as it selects the key.

A column that its table declares NOT NULL is NULL in a result where an outer
join found no row, at the top or in any subquery or CTE below; a union's
column is NULL where any branch's is. So the answer follows the expression
down through labels, subqueries, CTEs, unions and aliases to the table, and
checks each statement on the way for outer joins. Anything it cannot follow
(an unknown function, a scalar subquery, a table it does not know) can be
NULL: the NULL-safe keyset costs little, a lost row costs trust.

The walk is deterministic: it follows a subquery's column by its position in
the subquery (never by set iteration), and a union's branches in order.

Example:
    >>> import sqlalchemy as sa
    >>> m = sa.MetaData()
    >>> o = sa.Table("o", m, sa.Column("id", sa.Integer, primary_key=True),
    ...              sa.Column("c", sa.Integer, nullable=False))
    >>> c = sa.Table("c", m, sa.Column("id", sa.Integer, primary_key=True),
    ...              sa.Column("name", sa.String, nullable=False))
    >>> inner = sa.select(o.c.id, c.c.name).outerjoin(c, o.c.c == c.c.id).subquery()
    >>> stmt = sa.select(inner)
    >>> may_be_null(inner.c.name, stmt)
    True
    >>> may_be_null(c.c.name, sa.select(c)), may_be_null(sa.func.count(), sa.select(c))
    (False, False)
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import (
    BinaryExpression,
    BindParameter,
    Case,
    Cast,
    ColumnClause,
    ColumnElement,
    Grouping,
    Label,
    Null,
    Over,
    TypeCoerce,
    UnaryExpression,
)
from sqlalchemy.sql.functions import FunctionElement

__all__ = ["may_be_null", "outer_joined"]

#: functions that never return NULL
_NEVER_NULL = {"count", "row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile"}
#: functions that return NULL exactly when an argument is NULL
_STRICT = {"lower", "upper", "trim", "ltrim", "rtrim", "length", "char_length", "abs"}
#: operators that give NULL exactly when an operand is NULL (not division: NULL on
#: MariaDB and SQLite for a zero divisor)
_STRICT_OPERATORS = {operators.add, operators.sub, operators.mul, operators.concat_op}
_DEPTH = 32  # deeper than any statement written by hand


def outer_joined(stmt: Any) -> bool:
    """Whether ``stmt`` outer-joins anything in its own FROM (NOT NULL columns can be NULL)."""
    # Private attributes, read instead of get_final_froms(), which compiles
    # (pinned in tests/test_private_api.py): the joins of .join()/.outerjoin(),
    # and the FROMs of .select_from().
    for *_, flags in getattr(stmt, "_setup_joins", ()):
        if flags.get("isouter") or flags.get("full"):
            return True
    stack: list[Any] = list(getattr(stmt, "_from_obj", ()))
    # An entity selected from a join, such as with_polymorphic(), which
    # outer-joins the subclass tables: their NOT NULL columns are NULL on the
    # rows of other classes.
    stack += list(getattr(stmt, "columns_clause_froms", ()))
    while stack:
        item = stack.pop()
        if isinstance(item, sa.Join):
            if item.isouter or item.full:
                return True
            stack += [item.left, item.right]
    return False


def may_be_null(expr: Any, stmt: Any, outer: bool | None = None) -> bool:
    """Whether ``expr``, a column expression that ``stmt`` selects or sorts by, can be NULL.

    ``outer``: whether ``stmt`` outer-joins (:func:`outer_joined`), if known.
    """
    return _nullable(expr, outer_joined(stmt) if outer is None else outer, _DEPTH)


def _nullable(expr: Any, outer: bool, depth: int) -> bool:
    if depth <= 0:
        return True
    depth -= 1
    if not isinstance(expr, ColumnElement) and hasattr(expr, "__clause_element__"):
        expr = expr.__clause_element__()  # an ORM attribute
    if isinstance(expr, (Label, Grouping)):
        return _nullable(expr.element, outer, depth)
    if isinstance(expr, (Cast, TypeCoerce)):
        return _nullable(expr.clause, outer, depth)
    if isinstance(expr, ColumnClause):
        return _column(expr, outer, depth)
    if isinstance(expr, BindParameter):
        return expr.value is None or expr.callable is not None
    if isinstance(expr, (sa.sql.elements.True_, sa.sql.elements.False_)):
        return False
    if isinstance(expr, Null):
        return True
    if isinstance(expr, Case):
        results = [then for _, then in expr.whens]
        if expr.else_ is None:
            return True
        return any(_nullable(item, outer, depth) for item in [*results, expr.else_])
    if isinstance(expr, Over):
        return _function(expr.element, outer, depth, window=True)
    if isinstance(expr, FunctionElement):
        return _function(expr, outer, depth, window=False)
    if isinstance(expr, BinaryExpression) and expr.operator in _STRICT_OPERATORS:
        return _nullable(expr.left, outer, depth) or _nullable(expr.right, outer, depth)
    if isinstance(expr, UnaryExpression) and expr.operator is operators.neg:
        return _nullable(expr.element, outer, depth)
    return True  # not known: NULL-safe SQL costs little


def _function(func: Any, outer: bool, depth: int, window: bool) -> bool:
    name = str(getattr(func, "name", "")).lower()
    args = list(func.clauses) if hasattr(func, "clauses") else []
    if name in _NEVER_NULL:
        return False
    if name == "coalesce":
        return all(_nullable(arg, outer, depth) for arg in args)
    if name in _STRICT and not window:
        return any(_nullable(arg, outer, depth) for arg in args)
    return True  # aggregates (an empty group's SUM), unknown functions


def _column(expr: ColumnClause[Any], outer: bool, depth: int) -> bool:
    """A column of a table, an alias, a subquery or a CTE, as selected."""
    table = expr.table
    if isinstance(table, sa.Table):
        return outer or not isinstance(expr, sa.Column) or bool(expr.nullable)
    element = getattr(table, "element", None)
    if element is None:
        return True  # sa.table(), a VALUES, a table-valued function: not known
    if isinstance(element, sa.Table):  # sa.alias(table), an aliased() entity
        column = element.c.get(expr.name)
        return outer or column is None or bool(column.nullable)
    index = _position(table, expr)
    branches = _branches(element)
    if index is None or not branches:
        return True
    return any(
        outer or _nullable(branch.selected_columns[index], outer_joined(branch), depth)
        for branch in branches
    )


def _position(table: Any, expr: ColumnClause[Any]) -> int | None:
    """The position of ``expr`` among the columns of the subquery or CTE ``table``."""
    columns = list(table.c)
    for index, column in enumerate(columns):
        if column is expr:
            return index
    for index, column in enumerate(columns):
        if column.key == expr.key:
            return index
    return None


def _branches(element: Any) -> list[Any]:
    """The SELECTs whose rows a subquery returns: one, or each branch of a union, in order."""
    if isinstance(element, sa.CompoundSelect):
        return [branch for select in element.selects for branch in _branches(select)]
    if isinstance(element, sa.Select):
        return [element]
    inner = getattr(element, "element", None)  # a grouping of a union's branch
    return [] if inner is None else _branches(inner)
