"""The type a database computes for a sort key, where SQLAlchemy's type is another.

SQLAlchemy types ``coalesce(a, b)``, ``CASE`` and ``a + b`` as their first
operand (or by its own rules for arithmetic), but the database computes the
common type of every operand: ``coalesce(int_col, double_col)`` is a double,
``numeric_col + double_col`` a double, and PostgreSQL's ``EXTRACT`` a
NUMERIC. A cursor must carry the value the database computed, so such a key
is read and bound as that type (:func:`computed_type`).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import (
    BinaryExpression,
    Case,
    ColumnElement,
    Extract,
    Grouping,
    Label,
)
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import NullType, TypeDecorator, TypeEngine

from .._dialects import PagingSQL

__all__ = ["computed_type"]

#: functions whose value is one of their arguments', of their common type
_COMMON = {"coalesce", "ifnull", "nullif", "greatest", "least", "max", "min", "nvl"}
#: operators whose result is of their operands' common type
_ARITHMETIC = {
    operators.add,
    operators.sub,
    operators.mul,
    operators.truediv,
    operators.floordiv,
    operators.mod,
}


def _operands(node: Any) -> list[Any]:
    """The operands whose common type is the node's value's (none: its own type decides)."""
    if isinstance(node, FunctionElement) and str(getattr(node, "name", "")).lower() in _COMMON:
        return list(node.clauses)
    if isinstance(node, Case):
        parts = [result for _, result in node.whens]
        return parts if node.else_ is None else [*parts, node.else_]
    if isinstance(node, BinaryExpression) and node.operator in _ARITHMETIC:
        return [node.left, node.right]
    return []


def computed_type(expr: ColumnElement[Any], facts: PagingSQL) -> TypeEngine[Any]:
    """The type of the values the database computes for ``expr``.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid._dialects import PagingSQL
        >>> t = sa.table("t", sa.column("n", sa.Integer), sa.column("f", sa.Double))
        >>> computed_type(sa.func.coalesce(t.c.n, t.c.f), PagingSQL())
        Double()
    """
    node: Any = expr
    while isinstance(node, (Label, Grouping)):
        node = node.element
    own = expr.type
    if isinstance(node, Extract):
        return sa.Numeric() if facts.extract_numeric else own
    if isinstance(own, TypeDecorator):
        return own
    parts = [computed_type(part, facts) for part in _operands(node)]
    parts = [part for part in parts if not isinstance(part, NullType)]
    # (Float is not a Numeric on SQLAlchemy 2.1, a subclass of one on 2.0)
    if not parts or not all(isinstance(part, (sa.Numeric, sa.Float, sa.Integer)) for part in parts):
        return own
    if isinstance(own, sa.Float):
        return own
    if any(isinstance(part, sa.Float) for part in parts):
        return sa.Double()
    if isinstance(own, sa.Integer) and any(isinstance(part, sa.Numeric) for part in parts):
        return sa.Numeric()
    return own
