"""The one-column keyset conditions: :func:`after` and :func:`before`."""

from __future__ import annotations

from typing import Any, Union

from sqlalchemy.orm import QueryableAttribute
from sqlalchemy.sql.elements import ColumnElement

from .._keys import Keys, KeyValue, column_expression, keys_of
from ._cursor import Cursor

__all__ = ["ULIDColumn", "after", "before"]

#: A ULID or UUID column: a Core column (or other column expression) or an ORM attribute.
# (Union, not "|": these aliases are evaluated at run time on Python 3.10.)
ULIDColumn = Union[ColumnElement[Any], QueryableAttribute[Any]]  # noqa: UP007


def _parsed(column: ULIDColumn, cursor: Cursor) -> tuple[ColumnElement[Any], Keys, KeyValue]:
    """The column's expression, its keys, and the cursor parsed strictly (no SQL)."""
    expr = column_expression(column)
    keys = keys_of(expr)
    return expr, keys, keys.parse(cursor)  # InvalidULID for bad text, "" included


def after(column: ULIDColumn, cursor: Cursor) -> ColumnElement[bool]:
    """Return ``column > :cursor``: the rows after a cursor in id order.

    Args:
        column: the ULID or UUIDv7 column (Core column or ORM attribute):
            ``ULIDType``, ``sa.Uuid``, ``postgresql.UUID`` or a type over
            them, such as advanced-alchemy's ``GUID``.
        cursor: a :class:`ULID` or its 26-character text on a ULID column; a
            :class:`uuid.UUID` (or a ULID) or its canonical 36-character text
            on a UUID column.

    Raises:
        InvalidULID: the cursor is malformed (the empty string too). Raised
            here, before any SQL exists, so a web handler can answer 400.
        TimeOrderError: (a ValueError, when the statement is compiled) the
            database's native uuid type does not sort UUIDv7s in time order.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import ULIDType, after
        >>> t = sa.table("events", sa.column("id", ULIDType()))
        >>> print(after(t.c.id, "01HTQW311N1KR5G0Y75M3EF00H"))
        events.id > :param_1
        >>> after(t.c.id, "' OR 1=1 --")
        Traceback (most recent call last):
        ...
        sqlalchemy_ulid.InvalidULID: ...
        >>> u = sa.table("orders", sa.column("id", sa.Uuid()))
        >>> after(u.c.id, "018EAFC1-8435-7000-8000-000000000000").right.value
        UUID('018eafc1-8435-7000-8000-000000000000')
    """
    expr, keys, value = _parsed(column, cursor)
    return expr > keys.bind(expr, value)


def before(column: ULIDColumn, cursor: Cursor) -> ColumnElement[bool]:
    """Return ``column < :cursor``: the rows before a cursor in id order.

    Takes the same columns and cursors as :func:`after`.

    Raises:
        InvalidULID: the cursor is malformed, before any SQL is built.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import ULIDType, before
        >>> t = sa.table("events", sa.column("id", ULIDType()))
        >>> print(before(t.c.id, "01HTQW311N1KR5G0Y75M3EF00H"))
        events.id < :param_1
    """
    expr, keys, value = _parsed(column, cursor)
    return expr < keys.bind(expr, value)
