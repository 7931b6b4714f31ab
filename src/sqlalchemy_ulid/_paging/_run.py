"""Paging a statement: the executors of the plan (:mod:`._plan`), sync and async.

A page is ``WHERE <caller's filters> AND id >= :cursor ORDER BY id LIMIT n + 2``:
the cursor's own row tells whether a page lies behind, the row past the page
whether another one follows, so no COUNT ever runs, and the primary-key index
finds the start of every page as fast as the first one.

One plan serves both entry points: :func:`_steps` is a generator that
yields each statement to run (horizon, page, probe) and receives its result
(or has its database error thrown in, which the horizon may answer with
another statement), so :func:`paginate` and :func:`apaginate` are loops of a
few lines that differ only by ``await``.

What depends on the column's kind of key (ULID or UUID) is asked of
:func:`~sqlalchemy_ulid._keys.keys_of`: how a cursor is parsed and written,
the horizon's bound, and the bound parameter (which refuses, when compiled, a
uuid storage that the database does not keep in time order).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect, Result, Row
from sqlalchemy.orm import Session, scoped_session

from .._settle import (
    DEFAULT_MARGIN,
    Settle,
)
from .._settle import Step as _Step
from ._cursor import Cursor
from ._page import Page, Total
from ._plan import Plan, plan_page
from ._sort import (
    PaginationError,
    ULIDColumn,
)

if TYPE_CHECKING:
    # sqlalchemy.ext.asyncio needs greenlet, which SQLAlchemy 2.1 no longer
    # installs: the sync path must import without it.
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session

__all__ = ["apaginate", "paginate"]


def _scalar(result: Result[Any]) -> Any:
    return result.scalar()


def _steps(plan: Plan) -> Generator[_Step, Any, Page[Any]]:
    """Yield each statement of a page and receive its result; return the Page."""
    statement = plan.statement
    if plan.horizon is not None:
        horizon_ms = yield from plan.horizon.steps()
        # Ids of the horizon's millisecond are not settled yet: strictly below
        # its zero-random bound (a ULID's, or a UUIDv7's on a UUID column).
        settled = plan.keys.min_at(max(horizon_ms, 0))
        statement = statement.where(plan.column < plan.keys.bind(plan.column, settled))
        statement = plan.horizon.restrict(statement)
    rows = yield statement, plan.rows
    # Compared as read (no text per row): a repeat is the same value twice.
    values = [plan.value_of(row) for row in rows]
    for index, (earlier, later) in enumerate(itertools.pairwise(values)):
        if earlier == later:
            raise PaginationError(
                f"the paging column {plan.column} repeats {plan.id_of(rows[index])} in the result "
                "(a join?), so a page boundary would skip rows; page on a column unique in "
                "the result"
            )
    behind = False
    if plan.probe is not None:  # fetched from the cursor inclusive
        if rows and plan.id_of(rows[0]) == plan.cursor_id:
            behind, rows = True, rows[1:]
        else:
            rows = rows[: plan.limit + 1]
            behind = bool((yield plan.probe(), _scalar))
    total = None
    if plan.count is not None:
        total = yield plan.count
    return _page(plan, rows, behind, total)


def _page(plan: Plan, rows: Sequence[Row[Any]], behind: bool, total: int | None) -> Page[Any]:
    more = len(rows) > plan.limit
    rows = list(rows[: plan.limit])
    if plan.backward:
        rows.reverse()
    items = [row[0] for row in rows] if plan.scalar else plan.items(rows)
    cursor = plan.cursor
    first = plan.position_of(rows[0]) if rows else cursor
    last = plan.position_of(rows[-1]) if rows else cursor

    def positions() -> list[str]:
        return [plan.position_of(row) for row in rows]

    fields: dict[str, Any] = {"items": items, "total": total, "_positions": positions}
    if plan.horizon is not None:
        # A feed never loses its place: resume after the last delivered id.
        return Page(next_cursor=last, prev_cursor=None, has_more=more, **fields)
    if plan.backward:
        return Page(
            next_cursor=last if behind else None,
            prev_cursor=first if more else None,
            has_more=more,
            **fields,
        )
    return Page(
        next_cursor=last if more else None,
        prev_cursor=first if behind else None,
        has_more=more,
        **fields,
    )


def _resume(
    steps: Generator[_Step, Any, Page[Any]], outcome: Any, error: Exception | None
) -> _Step | Page[Any]:
    """Hand a step's result (or its database error) to the plan; get its next step or the page."""
    try:
        return steps.throw(error) if error is not None else steps.send(outcome)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def _dialect_of(session: Any, stmt: sa.Select[Any]) -> Callable[[], Dialect]:
    """A deferred lookup of the session's dialect: only settle= needs it."""

    def lookup() -> Dialect:
        dialect = getattr(session, "dialect", None)  # Connection, AsyncConnection
        if isinstance(dialect, Dialect):
            return dialect
        # The statement picks the engine of a session with several binds.
        return session.get_bind(clause=stmt).dialect  # type: ignore[no-any-return]

    return lookup


def _orm_binding(stmt: sa.Select[Any]) -> dict[str, Any]:
    """How a session finds the engine for our own statements (the horizon's text()).

    A session with ``binds=`` (or Flask-SQLAlchemy's bind keys) routes an ORM
    statement by its entities, but a ``text()`` has none: it goes where the
    paged statement goes, inside the same transaction.
    """
    return {"bind_arguments": {"clause": stmt}}


# -- the entry points -----------------------------------------------------------


def paginate(
    session: Session | scoped_session[Any] | Connection,
    stmt: sa.Select[Any],
    column: ULIDColumn,
    *,
    after: Cursor | None = None,
    before: Cursor | None = None,
    limit: int = 50,
    descending: bool | None = None,
    max_limit: int = 1000,
    settle: Settle | None = None,
    margin: timedelta = DEFAULT_MARGIN,
    total: Total = None,
) -> Page[Any]:
    """Fetch one page of ``stmt`` in its ORDER BY (or id order), after or before a cursor.

    Keeps ``stmt``'s WHERE and adds the cursor condition, the ORDER BY and a
    LIMIT one row past the page: no COUNT, no OFFSET, and rows inserted or
    deleted between two calls never shift a page. The items are the selected
    objects when ``stmt`` selects one thing (an entity or one column), else
    :class:`~sqlalchemy.engine.Row` objects. To sort by other columns, end the
    ORDER BY with ``column`` as the unique tiebreaker; to read a table as a
    feed while writers run, pass ``settle=``. The pagination docs cover
    sorts, NULLs, composite keys, totals, UUIDv7 columns and the SQL it runs;
    the feed docs cover ``settle=`` and the isolation levels it needs.

    Args:
        session: a Core :class:`~sqlalchemy.engine.Connection`, or anything
            else that executes ORM statements: a
            :class:`~sqlalchemy.orm.Session`, a ``scoped_session``,
            Flask-SQLAlchemy's ``db.session``. For asyncio use
            :func:`apaginate`.
        stmt: a ``select()`` without LIMIT or OFFSET; its ORDER BY, if any,
            ends with ``column``.
        column: the ULID or UUIDv7 column to page on: the primary key, a
            column the table declares unique, or the last column of a
            composite key whose other columns the WHERE fixes by equality
            (``where(Event.tenant_id == t)``) or the ORDER BY puts first.
        after: a cursor (a ULID or its text; on a UUID column a
            :class:`uuid.UUID` or its text); the page starts after it.
        before: a cursor; the page ends before it.
        limit: the page size, from 1 to ``max_limit``.
        descending: None (the ORDER BY decides; ascending ids without
            one), or the direction of ``column``: page newest first with
            True. It must agree with the ORDER BY's last key.
        max_limit: the largest ``limit`` accepted (a page size from a client
            cannot ask for the whole table).
        settle: None for browsing; a ``timedelta`` or ``"auto"`` for tailing
            (forward, ascending only).
        margin: with ``settle="auto"``, the allowance for the time from
            making an id to sending its INSERT, plus clock skew (by default
            0.2 s on PostgreSQL, 1 s on MariaDB/MySQL, where an INSERT can
            also wait on gap locks before its row exists).
        total: None (no count), ``"exact"`` (one ``COUNT(*)`` of the
            filtered statement), ``"estimate"`` (the planner's row estimate
            from ``EXPLAIN``; PostgreSQL and MariaDB/MySQL), or an int ``N``
            (a count that stops at ``N`` rows). Read it as ``Page.total``.

    Raises:
        InvalidULID: a malformed cursor; :class:`InvalidCursor` (a subclass)
            for a cursor of a sort by several keys that is malformed,
            altered or made for another sort.
        PaginationError: a statement that cannot be paged on ``column``: a
            LIMIT/OFFSET, an ORDER BY that does not end with ``column``,
            ``column`` not selected or not unique, a sort key a cursor
            cannot carry exactly, or an entity query whose sort must be
            paged as a subquery (see the pagination docs).
        SettleError: ``settle="auto"`` cannot be sound here, or the
            session's isolation level could skip rows (see the feed docs).
        ValueError: a bad ``limit``, ``total`` or combination of arguments
            (both ``after`` and ``before``; ``settle=`` with ``before=``,
            ``descending=True`` or a sort by several keys).

    All are :class:`ValueError` subclasses, raised before any SQL runs,
    except a repeat of ``column`` found in the result and a refusal that
    only the server can tell (a hot standby, a view), read with the horizon.

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
        ...     session.commit()
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

        Tailing: these ids are from 2024, long settled, so all five come
        back; the page carries the cursor to poll from next time.

        >>> from datetime import timedelta
        >>> with engine.connect() as conn:
        ...     tail = paginate(conn, sa.select(events.c.id), events.c.id,
        ...                     settle=timedelta(seconds=2), limit=10)
        ...     again = paginate(conn, sa.select(events.c.id), events.c.id,
        ...                      after=tail.next_cursor, settle=timedelta(seconds=2))
        >>> len(tail.items), tail.next_cursor == str(ids[-1])
        (5, True)
        >>> again.items, again.next_cursor == str(ids[-1])
        ([], True)
    """
    orm = not isinstance(session, Connection)
    plan = plan_page(
        stmt,
        column,
        after,
        before,
        limit,
        descending,
        orm,
        max_limit=max_limit,
        settle=settle,
        margin=margin,
        dialect=_dialect_of(session, stmt),
        total=total,
    )
    binding = _orm_binding(stmt) if orm else {}
    if plan.horizon is not None:
        # Connect now (all checks have passed): the horizon's SQL depends on
        # what the server turns out to be, and on whether the driver autocommits.
        connection = session if isinstance(session, Connection) else session.connection(**binding)
        horizon = plan.horizon.connected(connection.dialect, connection.connection.dbapi_connection)
        plan = replace(plan, horizon=horizon)
    steps = _steps(plan)
    step: _Step | Page[Any] = next(steps)
    while not isinstance(step, Page):
        statement, read = step
        try:
            outcome, error = read(session.execute(statement, **binding)), None
        except sa.exc.DBAPIError as failed:  # the plan may answer with another statement
            outcome, error = None, failed
        step = _resume(steps, outcome, error)
    return step


async def apaginate(
    session: AsyncSession | async_scoped_session[Any] | AsyncConnection,
    stmt: sa.Select[Any],
    column: ULIDColumn,
    *,
    after: Cursor | None = None,
    before: Cursor | None = None,
    limit: int = 50,
    descending: bool | None = None,
    max_limit: int = 1000,
    settle: Settle | None = None,
    margin: timedelta = DEFAULT_MARGIN,
    total: Total = None,
) -> Page[Any]:
    """Await one page: :func:`paginate` for asyncio sessions and connections.

    Same arguments, same checks (all before any SQL), same :class:`Page`.
    ``session`` is an :class:`~sqlalchemy.ext.asyncio.AsyncConnection` (Core)
    or anything else that executes ORM statements (``AsyncSession``,
    ``async_scoped_session``).

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
    from sqlalchemy.ext.asyncio import AsyncConnection  # only async callers need greenlet

    orm = not isinstance(session, AsyncConnection)
    plan = plan_page(
        stmt,
        column,
        after,
        before,
        limit,
        descending,
        orm,
        max_limit=max_limit,
        settle=settle,
        margin=margin,
        dialect=_dialect_of(session, stmt),
        total=total,
    )
    binding = _orm_binding(stmt) if orm else {}
    if plan.horizon is not None:
        connection = (
            session if isinstance(session, AsyncConnection) else await session.connection(**binding)
        )
        raw = await connection.get_raw_connection()
        plan = replace(
            plan, horizon=plan.horizon.connected(connection.dialect, raw.dbapi_connection)
        )
    steps = _steps(plan)
    step: _Step | Page[Any] = next(steps)
    while not isinstance(step, Page):
        statement, read = step
        try:
            outcome, error = read(await session.execute(statement, **binding)), None
        except sa.exc.DBAPIError as failed:  # the plan may answer with another statement
            outcome, error = None, failed
        step = _resume(steps, outcome, error)
    return step
