"""Keyset pagination on a ULID or UUIDv7 column: after / before / paginate / Page.

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
import uuid
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar, Union

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect, Result, Row
from sqlalchemy.orm import Mapper, QueryableAttribute, Session, scoped_session
from sqlalchemy.sql.elements import ColumnElement, Label, UnaryExpression

from ._keys import Keys, KeyValue, column_expression, keys_of
from ._settle import (
    DEFAULT_MARGIN,
    Horizon,
    Settle,
    SettleError,
    Step,
    check_settle,
    plan_horizon,
)
from ._ulid import ULID

if TYPE_CHECKING:
    # sqlalchemy.ext.asyncio needs greenlet, which SQLAlchemy 2.1 no longer
    # installs: the sync path must import without it.
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session

__all__ = ["Page", "PaginationError", "SettleError", "after", "apaginate", "before", "paginate"]

_T = TypeVar("_T")

#: A ULID or UUID column: a Core column (or other column expression) or an ORM attribute.
# (Union, not "|": these aliases are evaluated at run time on Python 3.10.)
ULIDColumn = Union[ColumnElement[Any], QueryableAttribute[Any]]  # noqa: UP007
#: A cursor: a ULID, a uuid.UUID, or the column's text form of either.
Cursor = Union[ULID, uuid.UUID, str]  # noqa: UP007


class PaginationError(ValueError):
    """The statement cannot be paged without skipping or repeating rows.

    It has its own ORDER BY, LIMIT or OFFSET, does not select the paging
    column, or pages on a column that is not unique in its result. A
    :class:`ValueError`, so code that catches bad input catches this too.
    """


# -- cursor clauses -----------------------------------------------------------


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


# -- the page -----------------------------------------------------------------


@dataclass(frozen=True)
class Page(Generic[_T]):
    """One page of rows in display order, with the cursors of its neighbours.

    Attributes:
        items: the rows, in display order (ascending ids, or descending with
            ``descending=True``), whichever direction was paged.
        next_cursor: where the next page starts: pass it as ``after=``. The
            last item's id when rows follow the page in display order; on an
            empty page reached with ``before=``, that cursor when rows follow
            it; else None. With ``settle=`` it is never lost: the last item's
            id, or the cursor passed in when nothing was delivered.
        prev_cursor: where the previous page ends: pass it as ``before=``.
            The first item's id when rows precede the page; on an empty page
            reached with ``after=``, that cursor when rows precede it; else
            None (the first page). Always None with ``settle=``.
        has_more: more rows lie beyond this page in the direction of travel
            (for ``settle=``: more settled rows, so poll again at once).

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

#: One statement for an executor to run, and how to read its result.
_Step = Step


@dataclass(frozen=True)
class _Plan:
    statement: sa.Select[Any]  # ordered and limited; the horizon is added later
    column: ColumnElement[Any]
    keys: Keys
    ulid_of: Callable[[Row[Any]], Any]
    scalar: bool
    backward: bool  # paging with before=: the SQL ran against display order
    cursor: str | None  # the cursor's canonical text
    # "Any row on the other side of the cursor?", asked only when the page,
    # fetched from the cursor inclusive, does not start with the cursor's row.
    probe: sa.Select[Any] | None
    limit: int
    horizon: Horizon | None


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


def _table_column(column: ColumnElement[Any]) -> sa.Column[Any] | None:
    """The table column behind ``column`` (through ORM annotations and aliases)."""
    for candidate in column.proxy_set:
        if isinstance(candidate, sa.Column) and isinstance(candidate.table, sa.Table):
            return candidate
    return None


def _is_unique(column: sa.Column[Any]) -> bool:
    """Whether the table declares ``column`` unique on its own."""
    table = column.table
    if column.unique or [c.name for c in table.primary_key.columns] == [column.name]:
        return True
    for constraint in table.constraints:
        if isinstance(constraint, sa.UniqueConstraint) and [c.name for c in constraint.columns] == [
            column.name
        ]:
            return True
    return any(
        index.unique and [c.name for c in index.columns] == [column.name] for index in table.indexes
    )


def _check_limit(limit: object, max_limit: object) -> int:
    from ._checks import check_limit  # the rule follow() shares (a cap of 2**31 - 1)

    return check_limit(limit, max_limit)


def _plan(
    stmt: sa.Select[Any],
    column: ULIDColumn,
    after_cursor: Cursor | None,
    before_cursor: Cursor | None,
    limit: int,
    descending: bool,
    orm: bool,
    *,
    max_limit: int = 1000,
    settle: Settle | None = None,
    margin: timedelta = DEFAULT_MARGIN,
    dialect: Callable[[], Dialect] | None = None,
) -> _Plan:
    # Every check runs before any SQL: bad cursors and limits are the
    # caller's input and must fail without touching the database.
    if after_cursor is not None and before_cursor is not None:
        raise ValueError("pass after= or before=, not both")
    limit = _check_limit(limit, max_limit)
    if not isinstance(stmt, sa.Select):
        raise TypeError(f"paginate() pages a select(), not {type(stmt).__name__}")
    cursor = after_cursor if before_cursor is None else before_cursor
    expr = column_expression(column)
    keys = keys_of(expr)
    value = None if cursor is None else keys.parse(cursor)
    if settle is not None:
        check_settle(settle, margin)
        if before_cursor is not None or descending:
            raise ValueError(
                "settle= follows a feed forward: page with after= in ascending order "
                "(no before=, no descending=True)"
            )
    _check_order(stmt, expr, descending)
    ulid_of, scalar = _reader(stmt, expr, orm)
    table_column = _table_column(expr)
    if table_column is not None and not _is_unique(table_column):
        raise PaginationError(
            f"the paging column {table_column} is not unique, so rows sharing a value "
            "would be skipped at a page boundary; page on the primary key or a unique column"
        )
    horizon = None
    if settle is not None:
        assert dialect is not None
        table = None if table_column is None else table_column.table
        horizon = plan_horizon(settle, margin, dialect(), table)

    if table_column is None or table_column.nullable:
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
        probe = sa.select(stmt.order_by(None).where(behind).exists())
    elif value is not None:
        bound = keys.bind(expr, value)
        paged = paged.where(expr < bound if sql_descending else expr > bound)
    return _Plan(
        statement=paged.limit(fetch),
        column=expr,
        keys=keys,
        ulid_of=ulid_of,
        scalar=scalar,
        backward=backward,
        cursor=None if value is None else keys.format(value),
        probe=probe,
        limit=limit,
        horizon=horizon,
    )


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
        if plan.horizon.locking_read:
            statement = statement.with_for_update(read=True)
    rows = yield statement, _rows
    ids = [plan.ulid_of(row) for row in rows]
    for earlier, later in itertools.pairwise(ids):
        if earlier == later:
            raise PaginationError(
                f"the paging column {plan.column} repeats {earlier} in the result (a join?), "
                "so a page boundary would skip rows; page on a column unique in the result"
            )
    behind = False
    if plan.probe is not None:  # fetched from the cursor inclusive
        if ids and plan.keys.format(ids[0]) == plan.cursor:
            behind, rows = True, rows[1:]
        else:
            rows = rows[: plan.limit + 1]
            behind = bool((yield plan.probe, _scalar))
    return _page(plan, rows, behind)


def _page(plan: _Plan, rows: Sequence[Row[Any]], behind: bool) -> Page[Any]:
    more = len(rows) > plan.limit
    rows = list(rows[: plan.limit])
    if plan.backward:
        rows.reverse()
    items = [row[0] for row in rows] if plan.scalar else rows
    cursor = plan.cursor
    first = plan.keys.format(plan.ulid_of(rows[0])) if rows else cursor
    last = plan.keys.format(plan.ulid_of(rows[-1])) if rows else cursor
    if plan.horizon is not None:
        # A feed never loses its place: resume after the last delivered id.
        return Page(items=items, next_cursor=last, prev_cursor=None, has_more=more)
    if plan.backward:
        return Page(
            items=items,
            next_cursor=last if behind else None,
            prev_cursor=first if more else None,
            has_more=more,
        )
    return Page(
        items=items,
        next_cursor=last if more else None,
        prev_cursor=first if behind else None,
        has_more=more,
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
    descending: bool = False,
    max_limit: int = 1000,
    settle: Settle | None = None,
    margin: timedelta = DEFAULT_MARGIN,
) -> Page[Any]:
    """Fetch one page of ``stmt`` in id order, after or before a cursor.

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
      ``margin`` must cover the time from making an id to sending its
      INSERT, plus clock skew. It raises :class:`SettleError` on SQLite,
      on a PostgreSQL hot standby and on a Galera node, which cannot see
      the transactions open elsewhere: pass a ``timedelta`` there.

    Both need READ COMMITTED or autocommit (the data query must see what
    committed before the horizon was taken); REPEATABLE READ raises
    :class:`SettleError`. See the "Tailing a feed" docs for the proof.

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
        stmt: a ``select()`` without ORDER BY (except on ``column`` in the
            requested direction), LIMIT or OFFSET.
        column: the ULID or UUIDv7 column to page on: the primary key or a
            column the table declares unique.
        after: a cursor (a ULID or its text; on a UUID column a
            :class:`uuid.UUID` or its text); the page starts after it.
        before: a cursor; the page ends before it.
        limit: the page size, from 1 to ``max_limit``.
        descending: page newest first (display order descending).
        max_limit: the largest ``limit`` accepted (a page size from a client
            cannot ask for the whole table).
        settle: None for browsing; a ``timedelta`` or ``"auto"`` for tailing
            (forward, ascending only).
        margin: with ``settle="auto"``, the allowance for the time from
            making an id to sending its INSERT, plus clock skew.

    Raises:
        InvalidULID: a cursor is malformed (before any SQL runs).
        PaginationError: ``stmt`` has a LIMIT/OFFSET, an ORDER BY on another
            column or against ``descending``, does not select ``column``, or
            ``column`` is not unique (declared so, or found repeated in the
            result) (a :class:`ValueError`).
        SettleError: ``settle="auto"`` cannot be sound here (SQLite, a view,
            a hot standby, a Galera node, missing privilege), or the session's
            isolation level could skip rows (a :class:`ValueError`).
        ValueError: ``limit`` is not an int from 1 to ``max_limit``, both
            ``after`` and ``before``, or ``settle=`` with ``before=`` or
            ``descending=True``. All before any SQL runs.

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
    descending: bool = False,
    max_limit: int = 1000,
    settle: Settle | None = None,
    margin: timedelta = DEFAULT_MARGIN,
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
