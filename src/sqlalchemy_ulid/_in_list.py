"""``column.in_(ids)`` for long id lists: one array parameter on PostgreSQL.

psycopg sends at most 65,535 parameters in one statement, and ``IN`` gives
each id its own. Past :data:`ARRAY_THRESHOLD` ids, the ULID comparator builds
an :class:`InArray` instead: PostgreSQL gets ``col = ANY(CAST(:ids AS
UUID[]))`` (one parameter, whatever the length); every other database gets
the usual expanding ``IN``, whose limits are that database's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.visitors import InternalTraversal
from sqlalchemy.types import TypeDecorator

from ._dialects import dialect_row

if TYPE_CHECKING:
    from sqlalchemy.sql.compiler import SQLCompiler

    from ._types import ULIDType

__all__ = ["ARRAY_THRESHOLD", "InArray"]

#: More ids than this in one ``in_`` and PostgreSQL gets one array parameter.
ARRAY_THRESHOLD: Final = 1000

# The element type of the array cast, per PostgreSQL storage kind.
_ARRAY_TYPES: Final = {"uuid": "UUID[]", "binary": "BYTEA[]", "text": "CHAR(26)[]"}


class _IdArray(TypeDecorator[Any]):
    """A list of ids bound as one value: each element through ULIDType."""

    impl = sa.types.NullType
    cache_ok = True

    def __init__(self, ulid_type: ULIDType) -> None:
        super().__init__()
        self.ulid_type = ulid_type

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        convert = self.ulid_type.bind_processor(dialect)
        assert convert is not None

        def process(values: Any) -> Any:
            return [convert(value) for value in values]

        return process


class InArray(ColumnElement[bool]):
    """``column IN (ids)``, or ``column = ANY(:array)`` on PostgreSQL."""

    inherit_cache = True
    type = sa.Boolean()
    # A comparison, like IN itself: no "= 1" where booleans are emulated.
    _is_implicitly_boolean = True
    # A plain list, as SQLAlchemy declares it.
    _traverse_internals = [  # noqa: RUF012
        ("column", InternalTraversal.dp_clauseelement),
        ("array", InternalTraversal.dp_clauseelement),
        ("listed", InternalTraversal.dp_clauseelement),
        ("negate", InternalTraversal.dp_boolean),
    ]

    def __init__(self, column: ColumnElement[Any], values: Sequence[Any], negate: bool) -> None:
        self.column = column
        self.negate = negate
        ulid_type: ULIDType = column.type  # type: ignore[assignment]
        # Both parameters are part of the cache key, so a cached statement
        # gets this statement's ids; each dialect renders only one of them.
        self.array = sa.bindparam(None, list(values), type_=_IdArray(ulid_type))
        self.listed = sa.bindparam(None, list(values), type_=ulid_type, expanding=True)

    def __invert__(self) -> InArray:
        return InArray._copy(self, not self.negate)

    @staticmethod
    def _copy(element: InArray, negate: bool) -> InArray:
        new = InArray.__new__(InArray)
        new.__dict__.update(element.__dict__)
        new.negate = negate
        return new


@compiles(InArray)
def _compile_in(element: InArray, compiler: SQLCompiler, **kw: Any) -> str:
    op = operators.not_in_op if element.negate else operators.in_op
    expression: ColumnElement[bool] = sa.sql.elements.BinaryExpression(
        element.column, element.listed, op
    )
    return compiler.process(expression, **kw)


@compiles(InArray, "postgresql")
def _compile_any(element: InArray, compiler: SQLCompiler, **kw: Any) -> str:
    ulid_type: ULIDType = element.column.type  # type: ignore[assignment]
    kind = dialect_row(compiler.dialect).kind(ulid_type.storage)
    column = compiler.process(element.column, **kw)
    array = f"CAST({compiler.process(element.array, **kw)} AS {_ARRAY_TYPES[kind]})"
    if element.negate:
        # NOT (x = ANY(a)) is x <> ALL(a); both are NULL for a NULL x, as NOT IN is.
        return f"{column} <> ALL({array})"
    return f"{column} = ANY({array})"
