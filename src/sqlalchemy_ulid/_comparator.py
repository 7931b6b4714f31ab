"""Operands of a ULID column: what names a ULID, and the comparator that converts them.

``col == "01H..."``, ``col.in_([...])`` and ``col.between(a, b)`` convert
their literal operands when the expression is built: a malformed id raises
:class:`~sqlalchemy_ulid.InvalidULID` before any SQL exists, and the ORM's
in-Python evaluator compares ULID with ULID. ``ULIDType`` uses
:class:`ULIDComparator`; the bulk-insert and ORM hooks use :func:`operand`
and :func:`to_bytes`.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from collections import deque
from itertools import repeat
from typing import TYPE_CHECKING, Any, Final

import sqlalchemy as sa
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import BindParameter, ClauseElement, ColumnElement
from sqlalchemy.types import TypeDecorator

from ._codec import InvalidULID, decode_int, decode_ints, encode, encode_int, valid_texts
from ._codec import decode as decode_text
from ._in_list import ARRAY_THRESHOLD, InArray
from ._ulid import ULID, _from_bytes, _from_int, _new, _set_int

if TYPE_CHECKING:
    from ._types import ULIDType

__all__ = [
    "COMPARISONS",
    "IN_OPS",
    "PATTERN_OPS",
    "ULIDComparator",
    "in_values",
    "operand",
    "operands",
    "to_bytes",
]


def to_bytes(value: object) -> bytes:
    """Return the 16 bytes of anything that names a ULID, or raise.

    Accepts a :class:`ULID`, its text in either case, a :class:`uuid.UUID`
    (asyncpg's subclass included), 16 bytes, or an object of another ULID
    library that carries its 16 bytes in ``.bytes`` (python-ulid, ulid-py).

    Raises:
        InvalidULID: the value has the right type but is not a ULID.
        TypeError: the value is of a type that never names a ULID.
    """
    if isinstance(value, ULID):
        return value._int.to_bytes(16, "big")
    if isinstance(value, str):
        return decode_text(value)
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, (bytes, bytearray, memoryview)):
        if len(value) != 16:
            raise InvalidULID(f"a ULID is 16 bytes, got {len(value)}")
        return bytes(value)
    data = getattr(value, "bytes", None)
    if isinstance(data, bytes) and len(data) == 16 and not isinstance(value, (int, float)):
        return data
    raise TypeError(
        f"cannot use {type(value).__name__} as a ULID: "
        "pass a ULID, its 26-character text, a UUID or 16 bytes"
    )


# Operators whose other side is an id (or, for in_, a list of ids): literal
# operands are converted when the expression is built.
COMPARISONS: Final = frozenset(
    {
        operators.eq,
        operators.ne,
        operators.lt,
        operators.le,
        operators.gt,
        operators.ge,
        operators.between_op,
        operators.not_between_op,
        operators.is_distinct_from,
        operators.is_not_distinct_from,
    }
)
IN_OPS: Final = frozenset({operators.in_op, operators.not_in_op})
# Pattern operators: text storage only, the pattern bound as plain text.
PATTERN_OPS: Final = frozenset(
    getattr(operators, name)
    for name in (
        "like_op",
        "not_like_op",
        "ilike_op",
        "not_ilike_op",
        "startswith_op",
        "not_startswith_op",
        "istartswith_op",
        "not_istartswith_op",
        "endswith_op",
        "not_endswith_op",
        "iendswith_op",
        "not_iendswith_op",
        "contains_op",
        "not_contains_op",
        "icontains_op",
        "not_icontains_op",
    )
    if hasattr(operators, name)  # the i- variants are newer than SQLAlchemy 2.0.0
)


def _is_literal(value: object) -> bool:
    return not isinstance(value, ClauseElement) and not hasattr(value, "__clause_element__")


def operand(column_type: ULIDType, value: Any) -> Any:
    """Return a literal operand as the value the column holds; leave SQL alone."""
    if type(value) is ULID:
        return encode_int(value._int) if column_type.as_str else value
    if value is None or not _is_literal(value):
        return value
    if type(value) is str:
        number = decode_int(value)
        return encode_int(number) if column_type.as_str else _from_int(number)
    if isinstance(value, (_dt.datetime, _dt.date)):
        raise TypeError(
            "a ULID column compares with ids, not datetimes: use "
            "ULID.min_at(when) / ULID.max_at(when), or created_since(column, when)"
        )
    data = to_bytes(value)
    return encode(data) if column_type.as_str else _from_bytes(data)


def operands(column_type: ULIDType, values: Any) -> list[Any]:
    """``_operand`` of every value of an ``in_`` list, whole lists at once where they can be.

    A list of ``ULID`` objects is kept as it is; a list of str is decoded in
    one pass (:func:`decode_ints`); mixed lists go value by value.
    """
    items = list(values)
    kinds = set(map(type, items))
    if kinds == {str}:
        return _decoded(column_type, items)
    if kinds == {ULID}:
        return list(map(encode_int, (u._int for u in items))) if column_type.as_str else items
    return [operand(column_type, value) for value in items]


def _decoded(column_type: ULIDType, texts: list[str]) -> list[Any]:
    numbers = decode_ints(texts)
    if column_type.as_str:
        return list(map(encode_int, numbers))
    # Every step a C call over the whole list: no Python frame per id.
    ulids = list(map(_new, repeat(ULID, len(numbers))))
    deque(map(_set_int, ulids, numbers), maxlen=0)
    return ulids


def in_values(column: ColumnElement[Any], column_type: ULIDType, values: Any) -> Any:
    """The right side of ``column.in_(values)``: a list, or one expanding parameter.

    A list of ``ULID`` objects becomes the parameter as it is. A list of
    str ids is checked in one pass here, so a malformed id raises before any
    SQL exists, and decoded in one pass when the statement first needs its
    values (executing, compiling with literal values, the ORM's
    ``synchronize_session`` evaluator), once: the parameter's ``callable_``
    keeps what it made. Either way SQLAlchemy does not look at each value
    again. Longer lists and mixed ones go through :func:`_operands`.
    """
    items = list(values)
    kinds = set(map(type, items))
    if len(items) > ARRAY_THRESHOLD or not (kinds == {str} or kinds == {ULID}):
        return operands(column_type, items)
    key = getattr(column, "key", None)
    if kinds == {ULID}:
        # Already checked: one parameter, without SQLAlchemy's look at each value.
        bound = operands(column_type, items)
        return BindParameter(key, bound, type_=column_type, unique=True, expanding=True)
    if not valid_texts(items):
        decode_ints(items)  # raises InvalidULID for the first bad text
    made: list[list[Any]] = []

    def decoded() -> list[Any]:
        if not made:
            made.append(_decoded(column_type, items))
        return made[0]

    return BindParameter(
        key,
        callable_=decoded,
        type_=column_type,
        unique=True,
        expanding=True,
    )


class ULIDComparator(TypeDecorator.Comparator[Any]):
    """Convert literal operands to ULIDs when the expression is built.

    ``col == "bad"`` raises :class:`InvalidULID` at once, before any SQL
    exists, and the ORM's in-Python evaluator (``synchronize_session``)
    compares ULID with ULID.
    """

    __slots__ = ()

    def operate(self, op: Any, *other: Any, **kwargs: Any) -> ColumnElement[Any]:
        column_type: ULIDType = self.type  # type: ignore[assignment]
        if op in COMPARISONS:
            if len(other) == 1:
                other = (operand(column_type, other[0]),)
            else:
                other = tuple([operand(column_type, value) for value in other])
        elif (
            op in IN_OPS
            and other
            and _is_literal(other[0])
            # in_("01H...") is a mistake SQLAlchemy itself reports
            and not isinstance(other[0], (str, bytes))
        ):
            values = in_values(self.expr, column_type, other[0])
            if isinstance(values, list) and len(values) > ARRAY_THRESHOLD:
                return InArray(self.expr, values, negate=op is operators.not_in_op)
            other = (values, *other[1:])
        elif op in PATTERN_OPS:
            return self._pattern(op, *other, **kwargs)
        return super().operate(op, *other, **kwargs)

    def _pattern(self, op: Any, *other: Any, **kwargs: Any) -> ColumnElement[Any]:
        column_type: ULIDType = self.type  # type: ignore[assignment]
        if column_type.storage != "text":
            raise TypeError(
                f"{op.__name__.removesuffix('_op')} needs ULIDType('text'): this column "
                f"stores ids as bytes (storage={column_type.storage!r}). For the ids of a "
                "time range, compare with ULID.min_at / ULID.max_at."
            )
        # Seen as plain text, the column takes the pattern unconverted.
        as_text = sa.type_coerce(self.expr, sa.String())
        return as_text.operate(op, *other, **kwargs)
