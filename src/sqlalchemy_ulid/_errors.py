"""One family of errors for every refusal of a caller's input.

Everything a request can carry into the library (an id, a cursor, a page
size, a time or an interval, a sort) is checked before any SQL runs, and a
bad one raises a subclass of :class:`InvalidInput`. One handler for
:class:`InvalidInput` therefore answers 400 for all of them; a handler that
needs the reason catches a subclass first.

:class:`SettleError` is the other branch of the family: not a bad input but
a database (or a session) where a feed's settle horizon cannot be sound.

No import of SQLAlchemy here: the value layer raises these too.
"""

from __future__ import annotations

__all__ = [
    "CursorSortMismatch",
    "InvalidCursor",
    "InvalidInput",
    "InvalidLimit",
    "InvalidTime",
    "InvalidULID",
    "SettleError",
]


class InvalidInput(ValueError):
    """The base of every refusal of input: catch it to answer 400 to all of them.

    Raised before any SQL runs, so nothing was read or written. A
    :class:`ValueError`. Its subclasses say what was wrong:
    :class:`InvalidULID` (an id), :class:`InvalidCursor` (a page cursor;
    :class:`CursorSortMismatch` for one made under another sort),
    :class:`InvalidLimit` (a page size), :class:`InvalidTime` (a naive or
    out-of-range datetime, an interval that ends before it starts) and
    :class:`PaginationError` (a sort that cannot be paged).

    Example:
        >>> from sqlalchemy_ulid import InvalidInput, ULID
        >>> try:
        ...     ULID("not an id")
        ... except InvalidInput as exc:
        ...     print(type(exc).__name__)
        InvalidULID
    """


class InvalidULID(InvalidInput):
    """Raised for every malformed ULID: bad text, wrong length, out of range.

    It is a :class:`ValueError`, so web frameworks that turn ``ValueError``
    into a 400 response handle it without extra code.

    Example:
        >>> from sqlalchemy_ulid import ULID, InvalidULID
        >>> try:
        ...     ULID("01HTQW311N1KR5G0Y75M3EF00U")
        ... except InvalidULID as exc:
        ...     print(exc)
        invalid character 'U' at position 25 (Crockford base32 has no I, L, O or U)
    """


class InvalidCursor(InvalidULID):
    """A page cursor that is malformed, altered, expired or made for another sort.

    Raised before any SQL runs. A :class:`ValueError` (and an
    :class:`InvalidULID`, so code written for bare-id cursors catches it too).
    A cursor made under another sort raises the subclass
    :class:`CursorSortMismatch`.

    Example:
        >>> from sqlalchemy_ulid import InvalidCursor
        >>> issubclass(InvalidCursor, ValueError)
        True
    """


class CursorSortMismatch(InvalidCursor):
    """A well-formed cursor made under another sort than the statement's.

    A cursor of a multi-key sort passed to a statement in id order, one of
    another ORDER BY, or a bare id passed to a statement sorted by several
    keys. A client that kept a cursor across a change of sort sends one: it
    should start again from the first page.

    Example:
        >>> from sqlalchemy_ulid import CursorSortMismatch, InvalidCursor
        >>> issubclass(CursorSortMismatch, InvalidCursor)
        True
    """


class InvalidLimit(InvalidInput):
    """A page size that is not an int from 1 to ``max_limit``.

    Attributes:
        value: the refused page size, as it was passed.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.orm import Session
        >>> from sqlalchemy_ulid import InvalidLimit, ULIDType, paginate
        >>> t = sa.table("t", sa.column("id", ULIDType()))
        >>> try:
        ...     paginate(Session(), sa.select(t), t.c.id, limit=0)
        ... except InvalidLimit as exc:
        ...     print(exc.value)
        0
    """

    def __init__(self, message: str, value: object = None) -> None:
        super().__init__(message)
        self.value = value

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (str(self), self.value)


class InvalidTime(InvalidInput):
    """A naive datetime, one outside the ids' range, or an interval ending before it starts.

    Example:
        >>> from datetime import datetime
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import InvalidTime, ULIDType, created_since
        >>> t = sa.table("t", sa.column("id", ULIDType()))
        >>> try:
        ...     created_since(t.c.id, datetime(2024, 1, 1))
        ... except InvalidTime as exc:
        ...     print(str(exc).split(" refused")[0])
        naive datetime 2024-01-01T00:00:00
    """


class SettleError(ValueError):
    """The settle horizon cannot be computed soundly here.

    Raised for ``settle="auto"`` on SQLite, on a view (PostgreSQL or
    MariaDB/MySQL), on a PostgreSQL hot standby, on a Galera node, without
    the privilege it needs, on MariaDB/MySQL for a paging column outside the
    table's primary key (or read through a subquery), and for a session
    whose isolation level could make the page skip rows (REPEATABLE READ on
    PostgreSQL; on MariaDB, once the transaction has read). Raised before
    the page's SQL runs.

    A :class:`ValueError`, like every refusal of the library, but on
    purpose not an :class:`InvalidInput`: it is about the server or the
    session, not a client's request, and the same request would succeed on a
    correctly deployed server. So ``contrib.fastapi.add_exception_handlers``
    does not answer it with a 400: the application's own handler (a 500, or
    a 503 it maps) sees it, and so do its logs.

    Example:
        >>> from datetime import timedelta
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.orm import Session
        >>> from sqlalchemy_ulid import SettleError, ULIDType, paginate
        >>> t = sa.Table("t", sa.MetaData(), sa.Column("id", ULIDType(), primary_key=True))
        >>> try:
        ...     paginate(Session(sa.create_engine("sqlite://")), sa.select(t), t.c.id,
        ...              settle="auto")
        ... except SettleError as exc:
        ...     print(str(exc).split(" (")[0])
        settle='auto' has nothing to read on SQLite
    """
