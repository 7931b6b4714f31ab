"""Strawberry GraphQL support: Relay connections backed by our keyset ``paginate``.

Strawberry's ``ListConnection`` pages with offset cursors: a deep page reads
and skips every row before it, and a row inserted meanwhile shifts the page.
:class:`KeysetConnection` is a Relay connection whose cursors are keyset
positions instead: each page is one indexed query from the cursor, in any
ORDER BY that ends with the ULID (or UUIDv7) column. Install with
``pip install 'sqlalchemy-ulid[strawberry]'``.

Return :func:`connection` (or await :func:`aconnection` on an
``AsyncSession``) from a resolver that takes the Relay arguments
``first``/``after`` and ``last``/``before``. A malformed, altered or
cross-sort cursor is a GraphQL error (``extensions.code`` is
``"INVALID_CURSOR"``) raised before any SQL runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import _missing

try:
    import strawberry
    from graphql import GraphQLError
    from strawberry import relay
    from strawberry.relay.types import NodeType
except ModuleNotFoundError as exc:
    raise _missing("strawberry", "strawberry", exc) from exc

from .. import _paging
from .._codec import InvalidULID
from .._sealed import CursorSealer

if TYPE_CHECKING:
    import sqlalchemy as sa
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session

    from .._paging import ULIDColumn
    from .._paging._page import Total

__all__ = ["KeysetConnection", "aconnection", "connection"]


@strawberry.type(description="A connection to a list of items, paged by keyset cursors.")
class KeysetConnection(relay.Connection[NodeType]):
    """A Relay connection whose cursors are keyset positions, not offsets.

    Build it with :func:`connection` or :func:`aconnection`. Strawberry
    names ``KeysetConnection[Fruit]`` ``FruitKeysetConnection`` in the schema.

    Attributes:
        page_info: ``hasNextPage``, ``hasPreviousPage``, ``startCursor``
            and ``endCursor``. Both ``has*Page`` flags are exact in either
            direction (the page reads one row past each end).
        edges: one edge per item; each edge's ``cursor`` works as ``after``
            (continue after it) and as ``before`` (end before it).
        total_count: the number of rows when ``total=`` was asked, else null.

    Example:
        >>> from sqlalchemy_ulid.contrib.strawberry import KeysetConnection
        >>> [f.name for f in KeysetConnection.__strawberry_definition__.fields]
        ['page_info', 'edges', 'total_count']
    """

    total_count: int | None = strawberry.field(
        default=None, description="The number of items, when the server counts them."
    )


def _invalid(argument: str, message: str) -> GraphQLError:
    return GraphQLError(f"{argument}: {message}", extensions={"code": "INVALID_CURSOR"})


def _arguments(
    first: int | None,
    after: str | None,
    last: int | None,
    before: str | None,
    default_limit: int,
    max_limit: int,
    sealer: CursorSealer | None,
) -> dict[str, Any]:
    """Map the Relay arguments onto paginate's, or raise a GraphQL error (no SQL)."""
    cursor: object
    default_limit = min(default_limit, max_limit)
    if last is not None or before is not None:
        if first is not None or after is not None:
            raise GraphQLError("pass first/after to page forward or last/before backward, not both")
        if before is None:
            raise GraphQLError("last needs before: a cursor to page back from")
        argument, cursor, limit = "before", before, default_limit if last is None else last
    else:
        argument, cursor, limit = "after", after, default_limit if first is None else first
    name = "last" if argument == "before" else "first"
    if isinstance(limit, bool) or not 1 <= limit <= max_limit:
        raise GraphQLError(f"{name} must be from 1 to {max_limit}, got {limit}")
    kwargs: dict[str, Any] = {"limit": limit}
    if cursor is None:
        return kwargs
    if sealer is not None:
        try:
            opened = sealer.open(cursor, descending=False)
        except InvalidULID as exc:
            raise _invalid(argument, str(exc)) from None
        cursor = opened.get("after", opened.get("before"))
    kwargs[argument] = cursor
    return kwargs


def _build(
    cls: type[KeysetConnection[Any]],
    page: _paging.Page[Any],
    backward: bool,
    node: Callable[[Any], Any] | None,
    sealer: CursorSealer | None,
) -> KeysetConnection[Any]:
    cursors = page.cursors
    if sealer is not None:
        cursors = [sealer.seal_cursor(cursor) for cursor in cursors]
    edges = [
        relay.Edge(cursor=cursor, node=item if node is None else node(item))
        for cursor, item in zip(cursors, page.items, strict=True)
    ]
    if backward:
        has_next, has_previous = page.next_cursor is not None, page.has_more
    else:
        has_next, has_previous = page.has_more, page.prev_cursor is not None
    info = relay.PageInfo(
        has_next_page=has_next,
        has_previous_page=has_previous,
        start_cursor=cursors[0] if cursors else None,
        end_cursor=cursors[-1] if cursors else None,
    )
    return cls(page_info=info, edges=edges, total_count=page.total)


def connection(
    session: Session | Connection,
    stmt: sa.Select[Any],
    column: ULIDColumn,
    *,
    first: int | None = None,
    after: str | None = None,
    last: int | None = None,
    before: str | None = None,
    default_limit: int = 50,
    max_limit: int = 100,
    total: Total = None,
    sealer: CursorSealer | None = None,
    node: Callable[[Any], Any] | None = None,
    connection_type: type[KeysetConnection[Any]] = KeysetConnection,
) -> KeysetConnection[Any]:
    """Return one page of ``stmt`` as a Relay connection.

    ``first``/``after`` page forward, ``last``/``before`` backward (``last``
    needs ``before``: there is no cursor for "the end"). With neither,
    the first ``default_limit`` items. The sort is ``stmt``'s ORDER BY,
    which ends with ``column`` (see :func:`sqlalchemy_ulid.paginate`).

    Args:
        session: a Session or Connection.
        stmt: a ``select()`` without LIMIT/OFFSET.
        column: the ULID or UUIDv7 column, the sort's unique tiebreaker.
        first: the page size forward.
        after: an edge's cursor; the page starts after it.
        last: the page size backward.
        before: an edge's cursor; the page ends before it.
        default_limit: the page size when neither ``first`` nor ``last``
            (at most ``max_limit``).
        max_limit: the largest ``first``/``last`` a client may ask for.
        total: fill ``totalCount``: None, ``"exact"``, ``"estimate"`` or a
            cap (see :func:`sqlalchemy_ulid.paginate`).
        sealer: seal edge cursors into opaque tokens (and accept only those).
        node: turn each item into the GraphQL type (by default the item
            itself, e.g. an ORM object of a type Strawberry reads by attribute).
        connection_type: a subclass of :class:`KeysetConnection` to build.

    Raises:
        GraphQLError: bad Relay arguments, or a malformed, altered,
            expired or cross-sort cursor, before any SQL runs.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.orm import Session
        >>> from sqlalchemy_ulid import ULIDType, new_ulid
        >>> from sqlalchemy_ulid.contrib.strawberry import connection
        >>> engine = sa.create_engine("sqlite://")
        >>> notes = sa.Table("notes", sa.MetaData(),
        ...     sa.Column("id", ULIDType(), primary_key=True), sa.Column("text", sa.String))
        >>> notes.metadata.create_all(engine)
        >>> with engine.begin() as conn:
        ...     _ = conn.execute(notes.insert(), [{"id": new_ulid(), "text": str(n)}
        ...                                       for n in range(5)])
        >>> with Session(engine) as session:
        ...     page = connection(session, sa.select(notes), notes.c.id, first=2)
        ...     rest = connection(session, sa.select(notes), notes.c.id,
        ...                       first=10, after=page.page_info.end_cursor)
        >>> [edge.node.text for edge in page.edges], page.page_info.has_next_page
        (['0', '1'], True)
        >>> len(rest.edges), rest.page_info.has_previous_page, rest.page_info.has_next_page
        (3, True, False)
    """
    kwargs = _arguments(first, after, last, before, default_limit, max_limit, sealer)
    try:
        page = _paging.paginate(session, stmt, column, total=total, max_limit=max_limit, **kwargs)
    except InvalidULID as exc:
        raise _invalid("before" if "before" in kwargs else "after", str(exc)) from None
    return _build(connection_type, page, "before" in kwargs, node, sealer)


async def aconnection(
    session: AsyncSession | AsyncConnection,
    stmt: sa.Select[Any],
    column: ULIDColumn,
    *,
    first: int | None = None,
    after: str | None = None,
    last: int | None = None,
    before: str | None = None,
    default_limit: int = 50,
    max_limit: int = 100,
    total: Total = None,
    sealer: CursorSealer | None = None,
    node: Callable[[Any], Any] | None = None,
    connection_type: type[KeysetConnection[Any]] = KeysetConnection,
) -> KeysetConnection[Any]:
    """Await one page as a Relay connection: :func:`connection` for asyncio.

    Same arguments and errors; ``session`` is an ``AsyncSession`` or an
    ``AsyncConnection``. Use it in ``async def`` resolvers.
    """
    kwargs = _arguments(first, after, last, before, default_limit, max_limit, sealer)
    try:
        page = await _paging.apaginate(
            session, stmt, column, total=total, max_limit=max_limit, **kwargs
        )
    except InvalidULID as exc:
        raise _invalid("before" if "before" in kwargs else "after", str(exc)) from None
    return _build(connection_type, page, "before" in kwargs, node, sealer)
