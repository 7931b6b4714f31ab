"""Keyset pagination on a ULID column: after / before / paginate / Page.

A page is ``WHERE <caller's filters> AND id > :cursor ORDER BY id LIMIT n + 1``:
the extra row tells whether another page exists, so no COUNT ever runs, and the
primary-key index finds the start of every page as fast as the first one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, Union

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row
from sqlalchemy.orm import Mapper, QueryableAttribute, Session
from sqlalchemy.sql.elements import ColumnElement, Label, UnaryExpression

from ._ulid import ULID

if TYPE_CHECKING:
    # sqlalchemy.ext.asyncio needs greenlet, which SQLAlchemy 2.1 no longer
    # installs: the sync path must import without it.
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

__all__ = ["Page", "PaginationError", "after", "apaginate", "before", "paginate"]

_T = TypeVar("_T")

#: A ULID column: a Core column (or other column expression) or an ORM attribute.
# (Union, not "|": these aliases are evaluated at run time on Python 3.10.)
ULIDColumn = Union[ColumnElement[Any], QueryableAttribute[Any]]  # noqa: UP007
Cursor = Union[ULID, str]  # noqa: UP007


class PaginationError(ValueError):
    """The statement cannot be paged: it has its own ORDER BY, LIMIT or OFFSET.

    A :class:`ValueError`, so code that catches bad input catches this too.
    """


# -- cursor clauses -----------------------------------------------------------


def _parse_cursor(cursor: Cursor) -> ULID:
    if isinstance(cursor, ULID):
        return cursor
    if isinstance(cursor, str):
        return ULID(cursor)  # strict: raises InvalidULID, "" included
    raise TypeError(f"a cursor is a ULID or its 26-character text, not {type(cursor).__name__}")


def _expression(column: ULIDColumn) -> ColumnElement[Any]:
    expr = column.__clause_element__() if isinstance(column, QueryableAttribute) else column
    if not isinstance(expr, ColumnElement):
        raise TypeError(f"expected a ULID column, not {type(column).__name__}")
    return expr


def _bound(column: ColumnElement[Any], value: ULID) -> ColumnElement[Any]:
    # The column's own type converts the cursor, so it binds exactly like
    # a stored id (uuid, 16 bytes or text, whatever the column holds).
    return sa.bindparam(None, value, type_=column.type, unique=True)


def after(column: ULIDColumn, cursor: Cursor) -> ColumnElement[bool]:
    """Return ``column > :cursor``: the rows after a cursor in ULID order.

    Args:
        column: the ULID column (Core column or ORM attribute).
        cursor: a :class:`ULID` or its 26-character text.

    Raises:
        InvalidULID: the cursor is malformed (the empty string too). Raised
            here, before any SQL exists, so a web handler can answer 400.

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
    """
    value = _parse_cursor(cursor)
    expr = _expression(column)
    return expr > _bound(expr, value)


def before(column: ULIDColumn, cursor: Cursor) -> ColumnElement[bool]:
    """Return ``column < :cursor``: the rows before a cursor in ULID order.

    Raises:
        InvalidULID: the cursor is malformed, before any SQL is built.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import ULIDType, before
        >>> t = sa.table("events", sa.column("id", ULIDType()))
        >>> print(before(t.c.id, "01HTQW311N1KR5G0Y75M3EF00H"))
        events.id < :param_1
    """
    value = _parse_cursor(cursor)
    expr = _expression(column)
    return expr < _bound(expr, value)


# -- the page -----------------------------------------------------------------


@dataclass(frozen=True)
class Page(Generic[_T]):
    """One page of rows in display order, with the cursors of its neighbours.

    Attributes:
        items: the rows, in display order (ascending ids, or descending with
            ``descending=True``), whichever direction was paged.
        next_cursor: the id of the last item when more rows follow in display
            order, else None. Pass it as ``after=`` for the next page.
        prev_cursor: the id of the first item when rows precede it in display
            order, else None (the first page). Pass it as ``before=``.
        has_more: more rows lie beyond this page in the direction of travel:
            ``next_cursor is not None`` when paging with ``after=`` (or no
            cursor), ``prev_cursor is not None`` when paging with ``before=``.

    Example:
        >>> page = Page(items=["a"], next_cursor=None, prev_cursor=None, has_more=False)
        >>> page.items
        ['a']
    """

    items: Sequence[_T]
    next_cursor: str | None
    prev_cursor: str | None
    has_more: bool


# -- planning a page ----------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    statement: sa.Select[Any]
    ulid_of: Callable[[Row[Any]], Any]
    scalar: bool
    backward: bool  # paging with before=: the SQL ran against display order
    had_cursor: bool
    limit: int


def _check_order(stmt: sa.Select[Any], column: ColumnElement[Any], descending: bool) -> None:
    # Private attributes: Select has no public accessors for its ORDER BY or
    # row limits (checked against SQLAlchemy 2.0 and 2.1).
    if stmt._has_row_limiting_clause:
        raise PaginationError(
            "the statement already has a LIMIT, OFFSET or FETCH; paginate() adds its own "
            "LIMIT, so pass the statement without one"
        )
    for clause in stmt._order_by_clauses:
        element, is_desc = clause, False
        if isinstance(clause, UnaryExpression) and clause.modifier in (
            sa.sql.operators.asc_op,
            sa.sql.operators.desc_op,
        ):
            is_desc = clause.modifier is sa.sql.operators.desc_op
            element = clause.element
        if isinstance(element, Label):
            element = element.element
        if not (isinstance(element, ColumnElement) and element.compare(column)):
            raise PaginationError(
                f"the statement is ordered by {clause}, but keyset pages must be ordered "
                f"by the paging column {column} alone; remove the ORDER BY"
            )
        if is_desc != descending:
            raise PaginationError(
                f"the statement orders {column} {'DESC' if is_desc else 'ASC'} but "
                f"descending={descending}; pass descending= instead of ORDER BY"
            )


def _matches(candidate: Any, column: ColumnElement[Any]) -> bool:
    if hasattr(candidate, "__clause_element__"):
        candidate = candidate.__clause_element__()
    if isinstance(candidate, Label):
        candidate = candidate.element
    return isinstance(candidate, ColumnElement) and bool(candidate.compare(column))


def _entity_key(entity: Any, column: ColumnElement[Any]) -> str | None:
    """Return the attribute of a mapped entity that maps ``column``, if any."""
    info = sa.inspect(entity, raiseerr=False)
    mapper: Mapper[Any] | None = getattr(info, "mapper", None)
    if mapper is None:
        return None
    for prop in mapper.column_attrs:
        if any(_matches(c, column) for c in prop.columns):
            return prop.key
    # An aliased entity's attribute compares equal to the alias's column,
    # not to the table's, so try the entity's own attributes too.
    for prop in mapper.column_attrs:
        if _matches(getattr(entity, prop.key), column):
            return prop.key
    return None


def _reader(
    stmt: sa.Select[Any], column: ColumnElement[Any], orm: bool
) -> tuple[Callable[[Row[Any]], Any], bool]:
    """Return how to read the paging column from a row, and whether rows are scalars."""
    if not orm:
        # Core execution (Connection): entities come back as plain columns.
        for index, selected in enumerate(stmt.selected_columns):
            if _matches(selected, column):
                return (lambda row, i=index: row[i]), len(stmt.selected_columns) == 1
    else:
        descriptions = stmt.column_descriptions
        scalar = len(descriptions) == 1
        for index, description in enumerate(descriptions):
            expr, entity = description["expr"], description.get("entity")
            if entity is not None and expr is entity:
                key = _entity_key(entity, column)
                if key is not None:
                    return (lambda row, i=index, k=key: getattr(row[i], k)), scalar
            elif _matches(expr, column):
                return (lambda row, i=index: row[i]), scalar
    raise PaginationError(
        f"the paging column {column} is not selected: select it (a label is fine), or "
        "select the entity that maps it"
    )


def _plan(
    stmt: sa.Select[Any],
    column: ULIDColumn,
    after_cursor: Cursor | None,
    before_cursor: Cursor | None,
    limit: int,
    descending: bool,
    orm: bool,
) -> _Plan:
    # Every check runs before any SQL: bad cursors and limits are the
    # caller's input and must fail without touching the database.
    if after_cursor is not None and before_cursor is not None:
        raise ValueError("pass after= or before=, not both")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be an int >= 1, got {limit!r}")
    if not isinstance(stmt, sa.Select):
        raise TypeError(f"paginate() pages a select(), not {type(stmt).__name__}")
    cursor = after_cursor if before_cursor is None else before_cursor
    value = None if cursor is None else _parse_cursor(cursor)
    expr = _expression(column)
    _check_order(stmt, expr, descending)
    ulid_of, scalar = _reader(stmt, expr, orm)

    backward = before_cursor is not None
    # Paging backward runs the SQL in the opposite order, nearest rows first,
    # and the page is reversed into display order afterwards.
    sql_descending = descending != backward
    paged = stmt.order_by(None).order_by(expr.desc() if sql_descending else expr.asc())
    if value is not None:
        bound = _bound(expr, value)
        paged = paged.where(expr < bound if sql_descending else expr > bound)
    return _Plan(
        statement=paged.limit(limit + 1),
        ulid_of=ulid_of,
        scalar=scalar,
        backward=backward,
        had_cursor=value is not None,
        limit=limit,
    )


def _page(plan: _Plan, rows: Sequence[Row[Any]]) -> Page[Any]:
    more = len(rows) > plan.limit
    rows = list(rows[: plan.limit])
    if plan.backward:
        rows.reverse()
    items = [row[0] for row in rows] if plan.scalar else rows
    if not rows:
        return Page(items=items, next_cursor=None, prev_cursor=None, has_more=False)
    first, last = str(plan.ulid_of(rows[0])), str(plan.ulid_of(rows[-1]))
    if plan.backward:
        # We came from the cursor, so rows follow this page in display order.
        return Page(
            items=items, next_cursor=last, prev_cursor=first if more else None, has_more=more
        )
    return Page(
        items=items,
        next_cursor=last if more else None,
        prev_cursor=first if plan.had_cursor else None,
        has_more=more,
    )


# -- the entry points -----------------------------------------------------------


def paginate(
    session: Session | Connection,
    stmt: sa.Select[Any],
    column: ULIDColumn,
    *,
    after: Cursor | None = None,
    before: Cursor | None = None,
    limit: int = 50,
    descending: bool = False,
) -> Page[Any]:
    """Fetch one page of ``stmt`` in ULID order, after or before a cursor.

    Runs one query, ``stmt`` with its WHERE kept, plus ``column > :after``
    (or ``< :before``), ``ORDER BY column`` and ``LIMIT limit + 1``; no COUNT.
    Rows inserted between two calls never make a page skip or repeat a row:
    a cursor is a position in the id order, not a row number.

    Items: when ``stmt`` selects one thing (an entity, as in
    ``select(Event)``, or one column) the items are those objects, as with
    ``session.scalars()``; otherwise they are :class:`~sqlalchemy.engine.Row`
    objects. Each item's id is read from the selected column that is
    ``column`` (under any label), or from the attribute mapping ``column``
    on a selected entity.

    Cursors: ``next_cursor`` is the last item's id and ``prev_cursor`` the
    first item's id, as 26-character text; either is None where no rows lie
    that way (``prev_cursor`` is None on the first page). ``after=c``
    returns the rows after ``c`` in display order, ``before=c`` those before
    it, still in display order. An empty page has no cursors.

    Args:
        session: a :class:`~sqlalchemy.orm.Session` or a Core
            :class:`~sqlalchemy.engine.Connection` (Core statements only).
            For :class:`~sqlalchemy.ext.asyncio.AsyncSession` use
            :func:`apaginate`.
        stmt: a ``select()`` without ORDER BY (except on ``column`` in the
            requested direction), LIMIT or OFFSET.
        column: the ULID column to page on, usually the primary key.
        after: a cursor (ULID or its text); the page starts after it.
        before: a cursor; the page ends before it.
        limit: the page size, at least 1.
        descending: page newest first (display order descending).

    Raises:
        InvalidULID: a cursor is malformed (before any SQL runs).
        PaginationError: ``stmt`` has a LIMIT/OFFSET or another ORDER BY, or
            does not select ``column`` (a :class:`ValueError`).
        ValueError: ``limit < 1``, or both ``after`` and ``before``.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.orm import Session
        >>> from sqlalchemy_ulid import ULID, ULIDType, paginate
        >>> engine = sa.create_engine("sqlite://")
        >>> events = sa.Table(
        ...     "events", sa.MetaData(), sa.Column("id", ULIDType(), primary_key=True)
        ... )
        >>> events.metadata.create_all(engine)
        >>> ids = [ULID.from_parts(1712345678901 + n, 0) for n in range(5)]
        >>> with Session(engine) as session:
        ...     _ = session.execute(events.insert(), [{"id": i} for i in ids])
        ...     first = paginate(session, sa.select(events.c.id), events.c.id, limit=2)
        ...     second = paginate(session, sa.select(events.c.id), events.c.id,
        ...                       after=first.next_cursor, limit=2)
        ...     back = paginate(session, sa.select(events.c.id), events.c.id,
        ...                     before=second.prev_cursor, limit=2)
        >>> first.items == ids[:2], first.prev_cursor, first.next_cursor == str(ids[1])
        (True, None, True)
        >>> second.items == ids[2:4], second.has_more
        (True, True)
        >>> back.items == ids[:2], back.has_more
        (True, False)
    """
    plan = _plan(stmt, column, after, before, limit, descending, isinstance(session, Session))
    return _page(plan, session.execute(plan.statement).all())


async def apaginate(
    session: AsyncSession | AsyncConnection,
    stmt: sa.Select[Any],
    column: ULIDColumn,
    *,
    after: Cursor | None = None,
    before: Cursor | None = None,
    limit: int = 50,
    descending: bool = False,
) -> Page[Any]:
    """Await one page: :func:`paginate` for AsyncSession and AsyncConnection.

    Same arguments, same checks (all before any SQL), same :class:`Page`.

    Example:
        >>> import asyncio
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
        >>> from sqlalchemy_ulid import ULIDType, apaginate, new_ulid
        >>> events = sa.Table(
        ...     "events", sa.MetaData(), sa.Column("id", ULIDType(), primary_key=True)
        ... )
        >>> async def main() -> list[int]:
        ...     engine = create_async_engine("sqlite+aiosqlite://")
        ...     async with engine.begin() as conn:
        ...         await conn.run_sync(events.metadata.create_all)
        ...     async with AsyncSession(engine) as session:
        ...         await session.execute(events.insert(), [{"id": new_ulid()} for _ in range(3)])
        ...         page = await apaginate(session, sa.select(events.c.id), events.c.id, limit=2)
        ...         rest = await apaginate(session, sa.select(events.c.id), events.c.id,
        ...                                after=page.next_cursor, limit=2)
        ...     await engine.dispose()
        ...     return [len(page.items), len(rest.items)]
        >>> asyncio.run(main())
        [2, 1]
    """
    from sqlalchemy.ext.asyncio import AsyncSession  # only async callers need greenlet

    orm = isinstance(session, AsyncSession)
    plan = _plan(stmt, column, after, before, limit, descending, orm)
    result = await session.execute(plan.statement)
    return _page(plan, result.all())
