"""Paging a statement: the one planner, and its sync and async executors.

A page is ``WHERE <caller's filters> AND id >= :cursor ORDER BY id LIMIT n + 2``:
the cursor's own row tells whether a page lies behind, the row past the page
whether another one follows, so no COUNT ever runs, and the primary-key index
finds the start of every page as fast as the first one.

One planner serves both entry points: :func:`_steps` is a generator that
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
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect, Result, Row
from sqlalchemy.orm import Session, scoped_session
from sqlalchemy.sql.elements import ColumnElement

from .._checks import check_limit
from .._codec import InvalidULID
from .._dialects import PagingSQL, dialect_row
from .._keys import Keys, KeyValue, column_expression, keys_of
from .._settle import (
    DEFAULT_MARGIN,
    Horizon,
    Settle,
    Step,
    check_settle,
    plan_horizon,
)
from ._cursor import Cursor, InvalidCursor, looks_keyset
from ._page import Page, Total, check_total, count_step
from ._sort import (
    PaginationError,
    Sort,
    ULIDColumn,
    _reader,
    check_unique,
    may_be_null,
    paged_statement,
    read_sort,
    sort_exprs,
)

if TYPE_CHECKING:
    # sqlalchemy.ext.asyncio needs greenlet, which SQLAlchemy 2.1 no longer
    # installs: the sync path must import without it.
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session

__all__ = ["apaginate", "paginate"]

# -- planning a page ----------------------------------------------------------

#: One statement for an executor to run, and how to read its result.
_Step = Step


@dataclass(frozen=True)
class _Plan:
    statement: sa.Select[Any]  # ordered and limited; the horizon is added later
    column: ColumnElement[Any]
    keys: Keys
    value_of: Callable[[Row[Any]], Any]  # the paging column of a row, as read
    id_of: Callable[[Row[Any]], str]  # the paging column of a row, as text
    position_of: Callable[[Row[Any]], str]  # the cursor of a row
    scalar: bool
    backward: bool  # paging with before=: the SQL ran against display order
    cursor: str | None  # the cursor's canonical text
    cursor_id: str | None  # the paging column's value in the cursor, as text
    # "Any row on the other side of the cursor?", asked only when the page,
    # fetched from the cursor inclusive, does not start with the cursor's row
    # (built only then: most pages never need it).
    probe: Callable[[], sa.Select[Any]] | None
    limit: int
    horizon: Horizon | None
    count: Step | None  # total=: the COUNT or the EXPLAIN, after the page


def _plan(
    stmt: sa.Select[Any],
    column: ULIDColumn,
    after_cursor: Cursor | None,
    before_cursor: Cursor | None,
    limit: int,
    descending: bool | None,
    orm: bool,
    *,
    max_limit: int = 1000,
    settle: Settle | None = None,
    margin: timedelta = DEFAULT_MARGIN,
    dialect: Callable[[], Dialect] | None = None,
    total: Total = None,
) -> _Plan:
    # Every check runs before any SQL: bad cursors and limits are the
    # caller's input and must fail without touching the database.
    if after_cursor is not None and before_cursor is not None:
        raise ValueError("pass after= or before=, not both")
    limit = check_limit(limit, max_limit)  # the rule follow() shares (a cap of 2**31 - 1)
    if not isinstance(stmt, sa.Select):
        raise TypeError(f"paginate() pages a select(), not {type(stmt).__name__}")
    if descending is not None and not isinstance(descending, bool):
        raise TypeError(f"descending must be None, True or False, not {descending!r}")
    paging = _paging_of(dialect)
    check_total(total, paging)
    cursor = after_cursor if before_cursor is None else before_cursor
    expr = column_expression(column)
    keys = keys_of(expr)
    origin = stmt, expr  # the caller's: its uniqueness is checked on it
    stmt, expr = paged_statement(stmt, expr, descending, orm)
    orm_descending, sort = read_sort(stmt, expr, descending, orm, _known(dialect))
    if sort is not None:
        if settle is not None:
            raise ValueError(
                "settle= follows a feed in id order: order the statement by the paging "
                "column alone (or not at all)"
            )
        backward = before_cursor is not None
        return _sorted_plan(
            stmt, sort, expr, keys, cursor, backward, limit, orm, total, paging, origin
        )
    descending = orm_descending
    value = None if cursor is None else _parse_id(keys, cursor)
    if settle is not None:
        check_settle(settle, margin)
        if before_cursor is not None or descending:
            raise ValueError(
                "settle= follows a feed forward: page with after= in ascending order "
                "(no before=, no descending=True)"
            )
    ulid_of, scalar = _reader(stmt, expr, orm)
    check_unique(*origin, ())
    horizon = None
    if settle is not None:
        assert dialect is not None
        horizon = plan_horizon(settle, margin, dialect(), expr)

    count = count_step(stmt, total, paging)
    if may_be_null(expr, stmt):
        # NULL has no place in id order: such rows are never paged.
        stmt = stmt.where(expr.is_not(None))
    backward = before_cursor is not None
    # Paging backward runs the SQL in the opposite order, nearest rows first,
    # and the page is reversed into display order afterwards.
    sql_descending = descending != backward
    paged = stmt.order_by(None).order_by(expr.desc() if sql_descending else expr.asc())
    probe = None
    fetch = limit + 1
    if value is not None and settle is None:
        # Whether a page lies behind this one: the cursor's own row usually
        # still exists, so fetch from it inclusive and look. Only when it is
        # gone (deleted, filtered out, made up) does a second query ask
        # whether any row lies on the other side of the cursor.
        bound = keys.bind(expr, value)
        paged = paged.where(expr <= bound if sql_descending else expr >= bound)
        fetch += 1
        behind = expr >= bound if sql_descending else expr <= bound

        def probe() -> sa.Select[Any]:
            return sa.select(stmt.order_by(None).where(behind).exists())

    elif value is not None:
        bound = keys.bind(expr, value)
        paged = paged.where(expr < bound if sql_descending else expr > bound)
    text = None if value is None else keys.format(value)

    def id_of(row: Row[Any]) -> str:
        return keys.format(ulid_of(row))

    return _Plan(
        statement=paged.limit(fetch),
        column=expr,
        keys=keys,
        value_of=ulid_of,
        id_of=id_of,
        position_of=id_of,
        scalar=scalar,
        backward=backward,
        cursor=text,
        cursor_id=text,
        probe=probe,
        limit=limit,
        horizon=horizon,
        count=count,
    )


def _sorted_plan(
    stmt: sa.Select[Any],
    sort: Sort,
    expr: ColumnElement[Any],
    keys: Keys,
    cursor: Cursor | None,
    backward: bool,
    limit: int,
    orm: bool,
    total: Total,
    paging: Callable[[], PagingSQL],
    origin: tuple[sa.Select[Any], ColumnElement[Any]],
) -> _Plan:
    """The plan of a page sorted by several keys: the same shape, keyset cursors."""
    values = None if cursor is None else sort.parse(cursor, keys)  # InvalidCursor, no SQL
    ulid_of, scalar = _reader(stmt, expr, orm)
    check_unique(*origin, sort_exprs(origin[0])[:-1])
    count = count_step(stmt, total, paging)
    base, paged = stmt, sort.statement
    if may_be_null(expr, stmt):
        base, paged = stmt.where(expr.is_not(None)), paged.where(expr.is_not(None))
    paged = paged.order_by(None).order_by(*sort.keyset.order_by(reverse=backward))
    probe, fetch, text, cursor_id = None, limit + 1, None, None
    if values is not None:
        binds = sort.binds(values, keys)
        paged = paged.where(sort.keyset.past(binds, reverse=backward, inclusive=True))
        fetch += 1

        def probe() -> sa.Select[Any]:
            behind = sort.keyset.past(binds, reverse=not backward, inclusive=False)
            return sa.select(base.order_by(None).where(behind).exists())

        cursor_id = keys.format(values[-1])
        assert isinstance(cursor, str)
        text = cursor

    def id_of(row: Row[Any]) -> str:
        return keys.format(ulid_of(row))

    def position_of(row: Row[Any]) -> str:
        return sort.cursor(row, id_of(row))

    return _Plan(
        statement=paged.limit(fetch),
        column=expr,
        keys=keys,
        value_of=ulid_of,
        id_of=id_of,
        position_of=position_of,
        scalar=scalar,
        backward=backward,
        cursor=text,
        cursor_id=cursor_id,
        probe=probe,
        limit=limit,
        horizon=None,
        count=count,
    )


def _parse_id(keys: Keys, cursor: Cursor) -> KeyValue:
    """A bare-id cursor, strictly; a multi-key cursor here is one of another sort."""
    try:
        return keys.parse(cursor)
    except InvalidULID:
        if isinstance(cursor, str) and looks_keyset(cursor):
            raise InvalidCursor(
                "the cursor was made for a sort by several keys; this statement is in "
                "id order (ordered by the paging column alone, or not at all)"
            ) from None
        raise


def _known(dialect: Callable[[], Dialect] | None) -> Callable[[], Dialect]:
    """The dialect, for checks that need it; only called once a plan needs it."""

    def lookup() -> Dialect:
        assert dialect is not None
        return dialect()

    return lookup


def _paging_of(dialect: Callable[[], Dialect] | None) -> Callable[[], PagingSQL]:
    """The dialect's paging facts, looked up only when a plan needs them."""
    known = _known(dialect)
    return lambda: dialect_row(known()).paging


def _rows(result: Result[Any]) -> Sequence[Row[Any]]:
    # Joined eager loads of collections repeat a parent on several rows;
    # SQLAlchemy then demands unique(), and has already applied the LIMIT to
    # the parents in a subquery. The marker is private (no public accessor;
    # pinned by the joinedload test on SQLAlchemy 2.0 and 2.1).
    if getattr(result, "_unique_filter_state", None) is not None:
        result = result.unique()
    return result.all()


def _scalar(result: Result[Any]) -> Any:
    return result.scalar()


def _steps(plan: _Plan) -> Generator[_Step, Any, Page[Any]]:
    """Yield each statement of a page and receive its result; return the Page."""
    statement = plan.statement
    if plan.horizon is not None:
        horizon_ms = yield from plan.horizon.steps()
        # Ids of the horizon's millisecond are not settled yet: strictly below
        # its zero-random bound (a ULID's, or a UUIDv7's on a UUID column).
        settled = plan.keys.min_at(max(horizon_ms, 0))
        statement = statement.where(plan.column < plan.keys.bind(plan.column, settled))
        statement = plan.horizon.restrict(statement)
    rows = yield statement, _rows
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


def _page(plan: _Plan, rows: Sequence[Row[Any]], behind: bool, total: int | None) -> Page[Any]:
    more = len(rows) > plan.limit
    rows = list(rows[: plan.limit])
    if plan.backward:
        rows.reverse()
    items = [row[0] for row in rows] if plan.scalar else rows
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

    Runs ``stmt`` with its WHERE kept, plus ``column >= :after`` (or
    ``<= :before``), ``ORDER BY column`` and ``LIMIT limit + 2`` (the
    cursor's own row and one row past the page; without a cursor
    ``LIMIT limit + 1``, with ``settle=`` ``column > :after``); no COUNT.
    A cursor is a position in id order, not a row number, so rows inserted
    or deleted between two calls never shift a page. Rows whose ``column``
    is NULL are never returned. ``prev_cursor`` (or ``next_cursor`` after
    ``before=``) is set exactly when a page lies that way: a page reached
    from a cursor is read from the cursor's own row, inclusive, and only
    when that row is gone does a second indexed query (``EXISTS``) look
    for a row on the other side of the cursor.

    Sorting by other columns: the statement's ORDER BY is the sort, and it
    ends with ``column``, the unique tiebreaker, e.g.
    ``order_by(Order.total.desc(), Order.id.desc())``. Keys may be in mixed
    directions, be NULL (placed by ``nulls_first()``/``nulls_last()``, else
    where the database sorts NULLs), and be expressions such as
    ``func.lower(name)``. The page then reads ``(keys) >= (cursor's keys)``
    (a row value where the database range-scans one, else an expansion with
    a leading range), and its cursors are opaque strings that carry the
    key values exactly, refused with :class:`InvalidCursor` under another
    sort. The comparison runs in SQL, under the database's collation.
    A key can be NULL where the statement can return it NULL (outer joins
    at any depth, unions, aggregates). GROUP BY with an aggregate key,
    window functions and DISTINCT ON are paged as a subquery.

    The column holds ULIDs (``ULIDType``) or UUIDv7s (``sa.Uuid``,
    ``postgresql.UUID``, or a type over them such as advanced-alchemy's
    ``GUID``); the cursors are the column's own text form: 26 characters
    for ULIDs, the canonical 36-character form for UUIDs. A database whose
    native uuid type does not sort UUIDv7s in time order is refused with
    ``TimeOrderError`` (a :class:`ValueError`) when the statement compiles,
    before it runs.

    Tailing a feed (reading "what was added after my cursor" while writers
    run) needs ``settle=``: ids are made before their rows commit, so
    without it a row that commits late can land behind a cursor that
    already moved past it, and is never seen. With ``settle=`` only rows
    whose id is older than a horizon asked of the database server are
    returned, and ``next_cursor`` always holds the position to resume from:

    * ``settle=timedelta(...)``: the horizon is the server's ``now - settle``.
      Every committed row is delivered exactly once, in id order, while each
      writer commits within ``settle`` of making its id (clock skew included).
    * ``settle="auto"`` (PostgreSQL, MariaDB/MySQL): the horizon follows the
      transactions in flight, ``margin`` behind the oldest writer of the
      table (PostgreSQL, needs ``pg_read_all_stats``) or behind the server's
      clock with a locking read that waits for uncommitted rows (MariaDB).
      ``margin`` (by default 0.2 s on PostgreSQL, 1 s on MariaDB/MySQL)
      must cover the time from making an id to
      sending its INSERT, plus clock skew: :func:`guard_ulid_age` makes the
      writers keep to it. It raises :class:`SettleError` on SQLite,
      on a PostgreSQL hot standby and on a Galera node, which cannot see
      the transactions open elsewhere: pass a ``timedelta`` there.

    Both need READ COMMITTED or autocommit (the data query must see what
    committed before the horizon was taken); REPEATABLE READ raises
    :class:`SettleError`, except on MariaDB in a transaction that has not
    read yet (a fresh Connection or Session). See the "Tailing a feed" docs
    for the proof.

    Items: when ``stmt`` selects one thing (an entity, as in
    ``select(Event)``, or one column) the items are those objects, as with
    ``session.scalars()``; otherwise they are :class:`~sqlalchemy.engine.Row`
    objects. Each item's id is read from the selected column that is
    ``column`` (under any label), or from the attribute mapping ``column``
    on a selected entity. Joined eager loads (``joinedload``) work: the
    LIMIT counts parents, each with all its children.

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
        InvalidULID: a cursor is malformed (before any SQL runs);
            :class:`InvalidCursor` (a subclass) for the cursor of a sort by
            several keys that is malformed, altered or made for another sort.
        PaginationError: ``stmt`` has a LIMIT/OFFSET, an ORDER BY that does
            not end with ``column`` or disagrees with ``descending``, a sort
            key the row cannot show, does not select ``column``, or
            ``column`` is not unique (declared so, or found repeated in the
            result), a sort key whose value a cursor cannot carry exactly
            (a ``Numeric(asdecimal=False)`` of more than 15 digits, an
            interval), or a sort that must be paged as a subquery (GROUP BY
            with an aggregate key, a window function, DISTINCT ON) in a
            statement that selects entities (a :class:`ValueError`).
        SettleError: ``settle="auto"`` cannot be sound here (SQLite, a view,
            a hot standby, a Galera node, missing privilege, on MariaDB/MySQL
            a paging column outside the primary key), or the session's
            isolation level could skip rows (a :class:`ValueError`).
        ValueError: ``limit`` is not an int from 1 to ``max_limit``, both
            ``after`` and ``before``, ``settle=`` with ``before=``,
            ``descending=True`` or a sort by several keys, or a bad
            ``total`` (``"estimate"`` on SQLite). All before any SQL runs.

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
    plan = _plan(
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
    plan = _plan(
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
