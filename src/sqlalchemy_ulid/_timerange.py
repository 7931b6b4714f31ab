"""Time ranges on a ULID column: created_since / created_before / created_between.

A ULID starts with its creation millisecond, so "created at or after t" is
``id >= ULID.min_at(t)`` (the smallest ULID of that millisecond) and "created
before t" is ``id < ULID.min_at(t)``. Both are plain comparisons on the
column, which the primary-key index serves: no created_at column, no index of
its own, no function wrapped around the column.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.sql.elements import ColumnElement

from ._pagination import ULIDColumn, _bound, _expression
from ._time import to_ms
from ._ulid import ULID

__all__ = ["created_before", "created_between", "created_since"]


def created_since(column: ULIDColumn, when: datetime | int) -> ColumnElement[bool]:
    """Return ``column >= ULID.min_at(when)``: rows created at or after ``when``.

    Args:
        column: the ULID column (Core column or ORM attribute).
        when: a timezone-aware datetime, or Unix milliseconds. Sub-millisecond
            parts are floored, as the ULID itself does.

    Raises:
        ValueError: ``when`` is a naive datetime (raised before any SQL).

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
    """
    bound = ULID.min_at(when)
    expr = _expression(column)
    return expr >= _bound(expr, bound)


def created_before(column: ULIDColumn, when: datetime | int) -> ColumnElement[bool]:
    """Return ``column < ULID.min_at(when)``: rows created strictly before ``when``.

    Raises:
        ValueError: ``when`` is a naive datetime.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import ULIDType, created_before
        >>> t = sa.table("events", sa.column("id", ULIDType()))
        >>> print(created_before(t.c.id, 1712345678901))
        events.id < :param_1
    """
    bound = ULID.min_at(when)
    expr = _expression(column)
    return expr < _bound(expr, bound)


def created_between(
    column: ULIDColumn, start: datetime | int, end: datetime | int
) -> ColumnElement[bool]:
    """Return rows created in the half-open range ``[start, end)``.

    ``column >= ULID.min_at(start) AND column < ULID.min_at(end)``: adjacent
    ranges (Monday to Tuesday, Tuesday to Wednesday) never share a row.
    ``start == end`` is an empty range.

    Raises:
        ValueError: a naive datetime, or ``start`` after ``end``.

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
        raise ValueError(f"start {start!r} is after end {end!r}")
    expr = _expression(column)
    return (expr >= _bound(expr, ULID.min_at(start_ms))) & (
        expr < _bound(expr, ULID.min_at(end_ms))
    )
