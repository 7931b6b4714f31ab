"""Time ranges on a ULID or UUIDv7 column: created_since / created_before / created_between.

A ULID starts with its creation millisecond, so "created at or after t" is
``id >= ULID.min_at(t)`` (the smallest ULID of that millisecond) and "created
before t" is ``id < ULID.min_at(t)``. Both are plain comparisons on the
column, which the primary-key index serves: no created_at column, no index of
its own, no function wrapped around the column. A UUIDv7 starts with the same
millisecond; its bound is the UUIDv7 of that millisecond with zero random
bits (``_keys`` decides which bound a column gets).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Union

from sqlalchemy.orm import QueryableAttribute
from sqlalchemy.sql.elements import ColumnElement

from ._errors import InvalidTime
from ._keys import column_expression, keys_of
from ._time import to_ms

__all__ = ["created_before", "created_between", "created_since"]

#: A ULID or UUID column: a Core column (or other column expression) or an ORM attribute.
# (Union, not "|": evaluated at run time on Python 3.10.)
KeyColumn = Union[ColumnElement[Any], QueryableAttribute[Any]]  # noqa: UP007


def _compare(column: KeyColumn, when: datetime | int, op: str) -> ColumnElement[bool]:
    expr = column_expression(column)
    keys = keys_of(expr)
    bound = keys.bind(expr, keys.min_at(when))
    return expr >= bound if op == ">=" else expr < bound


def created_since(column: KeyColumn, when: datetime | int) -> ColumnElement[bool]:
    """Return ``column >= ULID.min_at(when)``: rows created at or after ``when``.

    On a UUID column (``sa.Uuid``, ``postgresql.UUID`` or a type over them)
    the bound is the smallest UUIDv7 of that millisecond instead: zero random
    bits, with the version and variant bits set.

    Args:
        column: the ULID or UUIDv7 column (Core column or ORM attribute).
        when: a timezone-aware datetime, or Unix milliseconds. Sub-millisecond
            parts are floored, as the ULID itself does.

    Raises:
        InvalidTime: ``when`` is a naive datetime (raised before any SQL).
        TimeOrderError: (a ValueError, when the statement is compiled) the
            database's native uuid type does not sort UUIDv7s in time order.

    Example:
        >>> from datetime import datetime, timezone
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import ULIDType, created_since
        >>> t = sa.table("events", sa.column("id", ULIDType()))
        >>> clause = created_since(t.c.id, datetime(2024, 4, 5, 9, tzinfo=timezone.utc))
        >>> print(clause)
        events.id >= :param_1
        >>> clause.right.value
        ULID('01HTPQRYM00000000000000000')
        >>> u = sa.table("orders", sa.column("id", sa.Uuid()))
        >>> created_since(u.c.id, datetime(2024, 4, 5, 9, tzinfo=timezone.utc)).right.value
        UUID('018ead7c-7a80-7000-8000-000000000000')
    """
    return _compare(column, when, ">=")


def created_before(column: KeyColumn, when: datetime | int) -> ColumnElement[bool]:
    """Return ``column < ULID.min_at(when)``: rows created strictly before ``when``.

    Raises:
        InvalidTime: ``when`` is a naive datetime.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import ULIDType, created_before
        >>> t = sa.table("events", sa.column("id", ULIDType()))
        >>> print(created_before(t.c.id, 1712345678901))
        events.id < :param_1
    """
    return _compare(column, when, "<")


def created_between(
    column: KeyColumn, start: datetime | int, end: datetime | int
) -> ColumnElement[bool]:
    """Return rows created in the half-open range ``[start, end)``.

    ``column >= ULID.min_at(start) AND column < ULID.min_at(end)``: adjacent
    ranges (Monday to Tuesday, Tuesday to Wednesday) never share a row.
    ``start == end`` is an empty range.

    Raises:
        InvalidTime: a naive datetime, or ``start`` after ``end``.

    Example:
        >>> from datetime import datetime, timezone
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import ULIDType, created_between
        >>> t = sa.table("events", sa.column("id", ULIDType()))
        >>> day = datetime(2024, 4, 5, tzinfo=timezone.utc)
        >>> print(created_between(t.c.id, day, day.replace(day=6)))
        events.id >= :param_1 AND events.id < :param_2
    """
    start_ms, end_ms = to_ms(start), to_ms(end)
    if start_ms > end_ms:
        raise InvalidTime(f"start {start!r} is after end {end!r}")
    return _compare(column, start_ms, ">=") & _compare(column, end_ms, "<")
