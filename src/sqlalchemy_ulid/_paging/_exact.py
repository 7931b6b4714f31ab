"""Exact cursors: which sort key types a cursor can carry, refused before any SQL otherwise.

A cursor must find its row again, so each key's value must come back from the
database exactly as the database compares it, and go into the cursor and back
into a bound parameter unchanged. Refused, before any SQL, naming the fix:

* a single-precision float (returned rounded to decimal text);
* a ``Numeric(asdecimal=False)`` wider than a double's 15 significant digits
  (returned as a rounded float);
* a native ENUM on a database that sorts it in declaration order but compares
  it as text;
* a type whose Python values a cursor cannot carry (``Interval``/``timedelta``,
  JSON, arrays, ...).

A ``TypeDecorator`` whose results are processed (``process_result_value``)
may return something other than what the database holds, and a float read as
``Decimal`` is rounded to ten places; such a key is read and bound as the
database's own type (:func:`raw_type`).
"""

from __future__ import annotations

import enum
import math
import re
import uuid
from collections.abc import Callable
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import visitors
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import TypeDecorator, TypeEngine

from .._codec import InvalidCursor
from .._dialects import PagingSQL
from .._keys import table_column as _table_column
from .._typeid import TypeID
from .._types import ULIDType
from .._ulid import ULID
from ._computed import computed_type
from ._keyset import SortKey

__all__ = ["bind_type", "check_key_type", "checked_value", "key_type", "raw_type"]

#: the Python values a cursor carries exactly (see _cursor._typed)
_CARRIED = (bool, int, float, Decimal, str, bytes, datetime, date, time, uuid.UUID, ULID, TypeID)
#: significant digits a double carries through decimal text and back
_DOUBLE_DIGITS = 15
#: a date or datetime as MariaDB/MySQL's drivers return one they cannot
#: make a date of ('0000-00-00', '2024-00-00 00:00:00')
_ZERO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}( [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?)?")
#: functions whose value changes from one call (or row) to the next: the
#: clock, random numbers, new ids
_VOLATILE = {
    "now", "current_timestamp", "current_date", "current_time", "localtimestamp",
    "localtime", "clock_timestamp", "statement_timestamp", "transaction_timestamp",
    "timeofday", "sysdate", "curdate", "curtime", "utc_timestamp", "utc_date",
    "utc_time", "random", "rand", "uuid", "gen_random_uuid", "uuid_generate_v4",
    "randomblob",
}  # fmt: skip
#: the widest NUMERIC of the supported databases (PostgreSQL's): digits
#: before the decimal point, and after it
_NUMERIC_WHOLE, _NUMERIC_SCALE = 131072, 16383


def check_key_type(
    expr: ColumnElement[Any],
    facts: PagingSQL,
    dialect: Callable[[], Dialect],
    error: type[ValueError],
) -> None:
    """Raise ``error`` (before any SQL) for a sort key a cursor cannot carry exactly."""
    for node in visitors.iterate(expr):
        if not isinstance(node, FunctionElement):
            continue
        name = str(getattr(node, "name", "")).lower()
        if name in _VOLATILE or (name == "unix_timestamp" and not list(node.clauses)):
            raise error(
                f"the sort key {expr} calls {name}(), whose value changes from one call to "
                "the next, so a cursor made on one page would not find its row on the next: "
                "sort by a stored column (such as the timestamp the key is computed from)"
            )
    type_ = computed_type(expr, facts)
    stored = _unwrapped(type_, dialect)
    if facts.enum_compares_as_text and isinstance(stored, sa.Enum) and stored.native_enum:
        raise error(
            f"the sort key {expr} is a native ENUM, which this database sorts in "
            "declaration order but compares as text, so pages would skip rows: sort "
            "by a text enum (sa.Enum(..., native_enum=False)) or another column"
        )
    if (
        facts.single_float is not None
        and isinstance(type_, sa.Float)
        and facts.single_float(type_.compile(dialect=dialect()))
    ):
        raise error(
            f"the sort key {expr} is a single-precision float "
            f"({type_.compile(dialect=dialect())}), which this database returns "
            "rounded, so a cursor could not find its row again: sort by a double "
            "(sa.Double) or a Numeric column"
        )
    if (
        isinstance(type_, sa.Numeric)
        and not isinstance(type_, sa.Float)
        and not type_.asdecimal
        and (type_.precision is None or type_.precision > _DOUBLE_DIGITS)
    ):
        raise error(
            f"the sort key {expr} is a Numeric returned as float (asdecimal=False), "
            f"which cannot carry more than {_DOUBLE_DIGITS} digits, so a cursor could "
            "not find its row again: sort by a Numeric with asdecimal=True (the default)"
        )
    try:
        python = raw_python_type(type_, dialect)
    except NotImplementedError:
        return  # a type that does not say: its values are checked as the cursor is made
    if python is not object and not issubclass(python, (*_CARRIED, enum.Enum)):
        raise error(
            f"the sort key {expr} holds {python.__name__} values ({type_!r}), which a "
            "cursor cannot carry exactly: sort by another expression (an interval by its "
            "number of seconds, e.g. sa.extract('epoch', column) on PostgreSQL)"
        )


def _unwrapped(type_: TypeEngine[Any], dialect: Callable[[], Dialect]) -> TypeEngine[Any]:
    """The type the database stores behind any ``TypeDecorator`` (an Enum behind one too)."""
    for _ in range(8):
        if not isinstance(type_, TypeDecorator):
            break
        type_ = type_.load_dialect_impl(dialect())
    return type_


def raw_python_type(type_: TypeEngine[Any], dialect: Callable[[], Dialect]) -> type:
    raw = raw_type(type_, dialect)
    return (raw or type_).python_type


def raw_type(type_: TypeEngine[Any], dialect: Callable[[], Dialect]) -> TypeEngine[Any] | None:
    """The database's own type behind a key whose values a ``TypeDecorator`` processes.

    A decorator that processes results may return another value than the
    database holds; one that processes only binds returns the value as held,
    which its bind would process again. None for every other type (its
    values come back as the database holds them), and for the library's own
    types, whose round trip is exact.
    A float read as ``Decimal`` (``Double(asdecimal=True)``) is rounded to
    ten decimal places as it is read: its key is read as the double.
    """
    if isinstance(type_, sa.Float) and type_.asdecimal and not isinstance(type_, TypeDecorator):
        return sa.Double()
    if not isinstance(type_, TypeDecorator) or isinstance(type_, (ULIDType, sa.Interval)):
        return None
    kind = type(type_)
    if (
        kind.process_result_value is TypeDecorator.process_result_value
        and kind.result_processor is TypeDecorator.result_processor
        and kind.process_bind_param is TypeDecorator.process_bind_param
        and kind.bind_processor is TypeDecorator.bind_processor
    ):
        return None
    impl = type_.load_dialect_impl(dialect())
    return None if isinstance(impl, TypeDecorator) else impl


def key_type(
    expr: ColumnElement[Any], facts: PagingSQL, dialect: Callable[[], Dialect]
) -> TypeEngine[Any] | None:
    """The type a sort key is read and bound as, where not its own (None: its own).

    The type the database computes (:func:`~._computed.computed_type`), as
    the database holds it (:func:`raw_type`); on a database that stores a
    NUMERIC as a double, that double, and one that stores dates as text,
    that text: the value it compares, not one rounded or reformatted.
    """
    computed = computed_type(expr, facts)
    kind = raw_type(computed, dialect) or computed
    if facts.numeric_as_double and isinstance(kind, sa.Numeric) and not isinstance(kind, sa.Float):
        kind = sa.Double()
    elif facts.dates_as_text and isinstance(kind, (sa.Date, sa.DateTime, sa.Time)):
        kind = sa.String()
    return None if kind is expr.type else kind


def bind_type(type_: TypeEngine[Any]) -> TypeEngine[Any]:
    """The type a key's cursor value is bound as: the key's own, never narrower.

    PostgreSQL's drivers cast each parameter to its type (``::INTEGER``;
    asyncpg ``::NUMERIC(10, 2)``), but a key computed from a column holds
    values its column's type cannot: ``sum()`` of an INTEGER is a BIGINT
    (the cast failed past 2**31, after SQL), ``price / 3`` has more decimals
    (the cast rounded them, and pages repeated rows). Such a key is bound as
    a BIGINT, or a NUMERIC of no stated precision; the comparison is the same.
    """
    if isinstance(type_, TypeDecorator):
        return type_
    if isinstance(type_, sa.Integer) and not isinstance(type_, sa.BigInteger):
        return sa.BigInteger()
    if (
        isinstance(type_, sa.Numeric)
        and not isinstance(type_, sa.Float)
        and (type_.precision is not None or type_.scale is not None)
    ):
        return sa.Numeric() if type_.asdecimal else sa.Numeric(asdecimal=False)
    return type_


def _holdable(value: Any, expected: type, facts: PagingSQL) -> bool:
    """Whether a row could hold ``value``, a cursor's value of a key of Python type ``expected``.

    Cursors are not signed, so one can carry values no database returns, and
    binding them fails after SQL (PostgreSQL: "value overflows numeric
    format", a NUL in text; any driver: a lone surrogate, which UTF-8 cannot
    encode) or as the statement is built (a text that is not a ULID, a
    signaling NaN): such a cursor is refused before any SQL.
    """
    if isinstance(value, str):
        if not facts.text_holds_nul and "\x00" in value:
            return False
        try:
            value.encode()
        except UnicodeEncodeError:
            return False
    if expected in (ULID, TypeID) and not isinstance(value, (ULID, uuid.UUID)):
        return False
    if expected is uuid.UUID and not isinstance(value, uuid.UUID):
        return False
    if isinstance(value, Decimal):
        if value.is_snan():
            return False
        if value.is_finite() and value:
            exponent = value.as_tuple().exponent
            assert isinstance(exponent, int)  # finite
            return exponent >= -_NUMERIC_SCALE and value.adjusted() < _NUMERIC_WHOLE
    return True


def _zero_date(value: Any, expected: type, facts: PagingSQL) -> bool:
    """Whether ``value`` is a date key's value that the driver returned as text.

    MariaDB/MySQL store '0000-00-00' (and dates with a zero month or day)
    under their default sql_mode, sort them first, and their drivers return
    them as text; the cursor carries that text, bound as it came.
    """
    return (
        facts.zero_dates
        and expected in (date, datetime)
        and isinstance(value, str)
        and _ZERO_DATE.fullmatch(value) is not None
    )


# Key values checked against the type of their key when a cursor is read.
_CHECKED = (bool, int, float, Decimal, str, bytes, datetime, date, time)


def checked_value(key: SortKey, value: Any, facts: PagingSQL) -> Any:
    """Check a decoded key value against its key's type (enums by name).

    A value no row of this database can hold is a forged cursor: refused
    here, since binding it fails after SQL (an integer past the column's
    width on PostgreSQL, a NaN on MariaDB/MySQL).
    """
    if value is None:
        return None
    type_ = key.type
    if isinstance(type_, sa.Enum) and type_.enum_class is not None:
        if not isinstance(value, str) or value not in type_.enum_class.__members__:
            raise InvalidCursor("the cursor is malformed (truncated or altered)")
        return type_.enum_class[value]
    try:
        expected = type_.python_type
    except NotImplementedError:
        expected = object  # a type that does not say (literal_column)
    if expected is object and (
        (isinstance(value, Decimal) and not facts.untyped_decimals)
        or (isinstance(value, int) and not -(2**63) <= value < 2**64)
    ):
        # A key of no known type: what no driver returns (no integer is
        # wider than 64 bits, SQLite's driver returns no Decimal).
        raise InvalidCursor("the cursor is malformed (truncated or altered)")
    if not _holdable(value, expected, facts):
        raise InvalidCursor("the cursor is malformed (truncated or altered)")
    if _zero_date(value, expected, facts):
        return value
    numbers = (int, float, Decimal)
    if expected is int and isinstance(value, Decimal) and value.is_finite() and value == int(value):
        # An integer key whose database returns a DECIMAL (MariaDB's SUM() of
        # an INT, a window's SUM()): the same number, bound as an int.
        value = int(value)
    if (
        expected in _CHECKED
        and not isinstance(value, expected)
        and not (expected in (float, Decimal) and isinstance(value, numbers))
    ):
        raise InvalidCursor("the cursor is malformed (truncated or altered)")
    if isinstance(value, bool) and expected is not bool and expected in _CHECKED:
        raise InvalidCursor("the cursor is malformed (truncated or altered)")
    if expected is int and isinstance(value, int):
        on_column = facts.int_width_enforced and _table_column(key.expr) is not None
        low, high = _int_range(type_, on_column)
        if not low <= value <= high:
            raise InvalidCursor("the cursor is malformed (truncated or altered)")
    if isinstance(value, (float, Decimal)) and not _number_holdable(value, facts):
        raise InvalidCursor("the cursor is malformed (truncated or altered)")
    if expected is float and isinstance(value, Decimal):
        return float(value)  # bound as the double it is compared with
    return value


def _number_holdable(value: float | Decimal, facts: PagingSQL) -> bool:
    """Whether a number could be a row's: NaN, infinities and digits the database takes."""
    if value != value:  # NaN
        return not (facts.finite_numbers_only or facts.nan_is_null)
    if not math.isfinite(value):
        return not facts.finite_numbers_only
    if facts.numeric_digits is not None and isinstance(value, Decimal) and value:
        exponent = value.as_tuple().exponent
        assert isinstance(exponent, int)  # finite
        digits = max(value.adjusted() + 1, 1) + max(-exponent, 0)
        return digits <= facts.numeric_digits
    return True


#: integer widths in bits by type name, where narrower than 64 (MySQL's names too)
_INT_BITS = {"TINYINT": 8, "SMALLINT": 16, "MEDIUMINT": 24, "INTEGER": 32, "INT": 32}


def _int_range(type_: Any, column_width: bool) -> tuple[int, int]:
    """The values an integer key can hold.

    The column type's width where the database enforces it on a table
    column, else 64 bits; signed, or unsigned on MySQL (whose BIGINT
    UNSIGNED goes past 2**63).
    """
    bits = 64
    if column_width and not isinstance(type_, sa.BigInteger):
        name = type(type_).__name__.upper()
        bits = _INT_BITS.get(name, 16 if isinstance(type_, sa.SmallInteger) else 32)
    if getattr(type_, "unsigned", False):
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
