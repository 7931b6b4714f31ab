"""Following a feed: poll :func:`paginate` with ``settle=``, yield pages, sleep when caught up.

Each poll runs on a connection (or session) of its own, so no transaction
stays open between polls: with an Engine the connection autocommits, which
is the isolation ``settle=`` needs on every server. A poll that fails on a
dropped connection, a deadlock or a lock wait timeout is retried from the
same cursor (see ``_retry``): it delivered nothing, so nothing is skipped or
repeated. The decisions between polls live in :class:`_Loop`, which does no
I/O; the sync and async loops only run its polls and sleeps.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.orm import Session

from ._checks import MAX_LIMIT, check_limit, check_seconds
from ._clock import ClockSkew, ClockSkewError, judge, measure_skew
from ._keys import column_expression, keys_of
from ._paging import Cursor, Page, ULIDColumn, apaginate, paginate
from ._retry import Retry, classify, logger, wrap_driver_error
from ._settle import DEFAULT_MARGIN, Settle, check_settle, margin_for, plan_horizon

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

__all__ = ["afollow", "follow"]

#: What ``check_skew=`` accepts.
CheckSkew = Literal["warn", "raise"] | None
DEFAULT_RETRY = Retry()
_SKEW_SAMPLES = 5
_SKEW_FRACTION = 0.5
_PING = "SELECT 1"


class _Loop:
    """A feed's state between polls, and what to do next (no I/O here).

    Every argument is checked when it is built, before any SQL.
    """

    def __init__(
        self,
        column: ULIDColumn,
        after: Cursor | None,
        settle: Settle,
        margin: timedelta,
        limit: int,
        interval: float,
        retry: Retry | None,
        check_skew: CheckSkew,
    ) -> None:
        check_settle(settle, margin)
        check_limit(limit, MAX_LIMIT)
        self.interval = check_seconds("interval", interval)
        if retry is not None and not isinstance(retry, Retry):
            raise TypeError(f"retry must be a Retry or None, not {type(retry).__name__}")
        if check_skew not in ("warn", "raise", None):
            raise ValueError(f"check_skew must be 'warn', 'raise' or None, got {check_skew!r}")
        self.options: dict[str, Any] = {
            "limit": limit,
            "max_limit": limit,
            "settle": settle,
            "margin": margin,
        }
        self.cursor = _start(column, after)
        self.column = column
        self.retry = retry
        self.margin = margin
        self.check_skew = check_skew
        # The skew check compares against the margin of "auto"; a fixed
        # window's share of skew is the caller's to judge.
        self.skew_pending = check_skew is not None and settle == "auto"
        self.failures = 0  # failed polls in a row

    def kwargs(self) -> dict[str, Any]:
        """paginate()'s keywords for the next poll."""
        return {"after": self.cursor, **self.options}

    def delivered(self, page: Page[Any]) -> float:
        """Move past ``page``; return the seconds to sleep before the next poll."""
        self.failures = 0
        self.cursor = page.next_cursor
        return 0.0 if page.has_more else self.interval

    def failed(self, error: BaseException) -> float | None:
        """Seconds to wait before polling again after ``error``, or None to raise it."""
        kind = classify(error)
        if kind is None:
            return None
        first_line = str(error).split("\n", 1)[0]
        if kind == "lock wait timeout":
            # Waiting is what "auto" does behind a slow writer: not a failure.
            logger.warning(
                "follow(): a writer held a row longer than innodb_lock_wait_timeout; "
                "polling again from cursor %s in %g s: %s",
                self.cursor,
                self.interval,
                first_line,
            )
            return self.interval
        self.failures += 1
        attempts = 0 if self.retry is None else self.retry.attempts
        if self.retry is None or self.failures > attempts:
            return None
        delay = self.retry.delay(self.failures)
        logger.warning(
            "follow(): poll failed (%s), retry %d of %d from cursor %s in %g s: %s",
            kind,
            self.failures,
            attempts,
            self.cursor,
            delay,
            first_line,
        )
        return delay

    def skew_check(self, dialect: Dialect) -> bool:
        """Whether to measure the skew now; raises SettleError where "auto" cannot run.

        Checked before the measuring: on a database where ``"auto"`` has
        nothing to read (SQLite), the first poll refuses without any SQL.
        """
        if self.skew_pending:
            plan_horizon("auto", self.margin, dialect, column_expression(self.column))
        return self.skew_pending

    def skew_measured(self, skew: ClockSkew, dialect: Dialect) -> None:
        """Warn or raise if this process's clock is too far from the server's."""
        self.skew_pending = False
        problem = judge(skew, margin_for(self.margin, dialect), _SKEW_FRACTION)
        if problem is None:
            return
        if self.check_skew == "raise":
            raise ClockSkewError(problem, skew)
        logger.warning("follow(): %s", problem)


def _start(column: ULIDColumn, after: Cursor | None) -> str | None:
    """The first cursor as text in the column's own form (InvalidULID before SQL)."""
    if after is None:
        return None
    keys = keys_of(column)
    return keys.format(keys.parse(after))


def _as_dbapi_error(error: Exception, bind: Engine | Connection | None) -> Exception | None:
    """SQLAlchemy's DBAPIError for a raw driver error, or None for any other error.

    SQLAlchemy leaves unwrapped what the driver raises while it sets a
    connection's isolation level (``execution_options(isolation_level=...)``,
    or an engine's option, when a connection starts) and while it resets it
    (when the connection is checked in): on a connection the server closed,
    PyMySQL's ``autocommit()`` raises its own ``OperationalError``.
    SQLAlchemy did not see that error, so it neither invalidated the
    connection nor recycled the pool, as it does after a disconnect it sees;
    a fresh pool replaces the old one (``dispose(close=False)``: connections
    in use are left alone), so no dead connection is handed out again.
    """
    if bind is None:
        return None
    wrapped = wrap_driver_error(error, bind.dialect)
    if wrapped is error:
        return None
    bind.engine.dispose(close=False)
    assert isinstance(wrapped, Exception)
    return wrapped


def _poll_engine(engine: Engine, stmt: sa.Select[Any], column: ULIDColumn, loop: _Loop) -> Any:
    try:
        with engine.connect() as conn:
            if loop.failures:
                # After a failure, a ping first: a dead pooled connection fails
                # it through SQLAlchemy, which then recycles the whole pool, so
                # one retry does not meet the next dead connection.
                conn.exec_driver_sql(_PING)
                conn.rollback()
            try:
                autocommit = conn.execution_options(isolation_level="AUTOCOMMIT")
            except Exception:
                conn.invalidate()  # not back to the pool, whose reset would fail too
                raise
            if loop.skew_check(autocommit.dialect):
                loop.skew_measured(measure_skew(autocommit, _SKEW_SAMPLES), autocommit.dialect)
            return paginate(autocommit, stmt, column, **loop.kwargs())
    except Exception as error:
        wrapped = _as_dbapi_error(error, engine)
        if wrapped is None:
            raise
        raise wrapped from error


def _poll_sessions(
    source: Callable[[], AbstractContextManager[Session]],
    stmt: sa.Select[Any],
    column: ULIDColumn,
    loop: _Loop,
) -> Any:
    bind = None
    try:
        if loop.skew_pending:
            # In a session of its own: the poll's session must begin with the page.
            with source() as probe:
                bind = probe.get_bind(clause=stmt)
                if loop.skew_check(bind.dialect):
                    probe_conn = probe.connection()
                    loop.skew_measured(measure_skew(probe_conn, _SKEW_SAMPLES), probe_conn.dialect)
        with source() as session:
            bind = session.get_bind(clause=stmt)
            return paginate(session, stmt, column, **loop.kwargs())
    except Exception as error:
        wrapped = _as_dbapi_error(error, bind)
        if wrapped is None:
            raise
        raise wrapped from error


def follow(
    source: Engine | Callable[[], AbstractContextManager[Session]],
    stmt: sa.Select[Any],
    column: ULIDColumn,
    *,
    after: Cursor | None = None,
    settle: Settle = "auto",
    margin: timedelta = DEFAULT_MARGIN,
    limit: int = 100,
    interval: float = 0.5,
    stop: threading.Event | None = None,
    retry: Retry | None = DEFAULT_RETRY,
    check_skew: CheckSkew = "warn",
) -> Iterator[Page[Any]]:
    """Follow a feed: yield each new page of ``stmt`` after ``after``, forever.

    Polls ``paginate(..., after=cursor, settle=settle)``, yields every page
    that has items, moves the cursor to ``page.next_cursor``, polls again at
    once while ``page.has_more``, and otherwise sleeps ``interval`` seconds.
    Every committed row is yielded exactly once, in id order, under the
    conditions of ``settle=`` (see :func:`paginate`). Store
    ``page.next_cursor`` after handling a page, and pass it as ``after=``
    when the consumer restarts.

    Stops when ``stop`` is set (checked while sleeping, so within one
    ``interval`` or retry wait), or when the caller leaves the loop
    (``break``, or ``close()`` on the generator).

    A poll that fails delivers nothing and leaves the cursor where it was,
    so polling again can neither skip nor repeat a row. Polls that fail on a
    dropped connection (a killed session, a server restart or failover: a
    SQLAlchemy error with ``connection_invalidated``, or a failure to
    connect) or on a deadlock are retried from the cursor under ``retry``,
    each with a warning on the ``sqlalchemy_ulid.follow`` logger. A MariaDB
    lock wait timeout (a writer slower than ``innodb_lock_wait_timeout``,
    see ``settle="auto"``) is retried after ``interval`` for as long as it
    lasts. Any other error raises out of the loop, and the stored cursor
    says where to resume.

    Args:
        source: an :class:`~sqlalchemy.engine.Engine` (each poll runs on a
            new autocommit connection; items are Rows or scalars), or a
            callable returning a Session context manager, such as a
            ``sessionmaker`` (items are ORM objects; each poll runs in a new
            session, so MariaDB's default REPEATABLE READ is accepted; on
            PostgreSQL use READ COMMITTED, its default).
        stmt: the ``select()`` to follow (its WHERE is kept).
        column: the ULID or UUIDv7 column, usually the primary key.
        after: the cursor to start after (see :func:`paginate`); None starts
            at the beginning.
        settle: ``"auto"`` (PostgreSQL, MariaDB/MySQL) or a ``timedelta``
            (needed on SQLite, on a view, on a hot standby or on a Galera
            node, where ``"auto"`` raises :class:`SettleError` at the first
            poll).
        margin: with ``"auto"``, see :func:`paginate`.
        limit: the largest page yielded (1 to 2**31 - 1).
        interval: seconds to sleep when caught up: a finite number > 0, at
            most a day.
        stop: set it (from any thread) to end the loop.
        retry: the :class:`Retry` policy for dropped connections and
            deadlocks (by default 10 tries in a row, waits from 0.1 s
            doubling to 10 s); None raises the first such failure.
        check_skew: with ``settle="auto"``, the first poll measures this
            process's clock against the server's (:func:`check_clock_skew`);
            ``"warn"`` logs a warning when the skew takes more than half of
            ``margin``, ``"raise"`` raises :class:`ClockSkewError`, None
            skips the check.

    Raises:
        ValueError: bad ``settle``, ``margin``, ``limit``, ``interval`` or
            ``check_skew``, or a malformed ``after`` (:class:`InvalidULID`),
            when the generator starts, before any SQL.
        TypeError: ``after`` is of a type that never names a key (as in
            :func:`paginate`), or ``interval`` or ``retry`` is of the wrong
            type.

    Example:
        >>> import sqlalchemy as sa
        >>> from datetime import timedelta
        >>> from sqlalchemy_ulid import Retry, ULIDType, follow, new_ulid
        >>> engine = sa.create_engine("sqlite://")
        >>> log = sa.Table("log", sa.MetaData(), sa.Column("id", ULIDType(), primary_key=True))
        >>> log.metadata.create_all(engine)
        >>> with engine.begin() as conn:
        ...     _ = conn.execute(log.insert(), [{"id": new_ulid()} for _ in range(3)])
        >>> seen = []
        >>> for page in follow(engine, sa.select(log.c.id), log.c.id,
        ...                    settle=timedelta(0), interval=0.01,
        ...                    retry=Retry(attempts=5, backoff=0.5)):
        ...     seen += page.items
        ...     if len(seen) == 3:
        ...         break
        >>> len(seen)
        3
    """
    loop = _Loop(column, after, settle, margin, limit, interval, retry, check_skew)
    while stop is None or not stop.is_set():
        try:
            if isinstance(source, Engine):
                page = _poll_engine(source, stmt, column, loop)
            else:
                page = _poll_sessions(source, stmt, column, loop)
        except Exception as error:
            wait = loop.failed(error)
            if wait is None:
                raise
        else:
            if page.items:
                yield page
            wait = loop.delivered(page)
            if not wait:
                continue
        if stop is None:
            time.sleep(wait)
        elif stop.wait(wait):
            return


async def _apoll_engine(
    engine: AsyncEngine, stmt: sa.Select[Any], column: ULIDColumn, loop: _Loop
) -> Any:
    try:
        async with engine.connect() as conn:
            if loop.failures:  # a ping first after a failure, as in _poll_engine
                await conn.exec_driver_sql(_PING)
                await conn.rollback()
            try:
                autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
            except Exception:
                await conn.invalidate()
                raise
            if loop.skew_check(autocommit.dialect):
                loop.skew_measured(await _askew(autocommit), autocommit.dialect)
            return await apaginate(autocommit, stmt, column, **loop.kwargs())
    except Exception as error:
        wrapped = _as_dbapi_error(error, engine.sync_engine)
        if wrapped is None:
            raise
        raise wrapped from error


async def _askew(conn: AsyncConnection) -> ClockSkew:
    return await conn.run_sync(measure_skew, _SKEW_SAMPLES)


async def _apoll_sessions(
    source: Callable[[], AbstractAsyncContextManager[AsyncSession]],
    stmt: sa.Select[Any],
    column: ULIDColumn,
    loop: _Loop,
) -> Any:
    bind = None
    try:
        if loop.skew_pending:  # in a session of its own, as in _poll_sessions
            async with source() as probe:
                bind = probe.get_bind(clause=stmt)
                if loop.skew_check(bind.dialect):
                    probe_conn = await probe.connection()
                    loop.skew_measured(await _askew(probe_conn), probe_conn.dialect)
        async with source() as session:
            bind = session.get_bind(clause=stmt)
            return await apaginate(session, stmt, column, **loop.kwargs())
    except Exception as error:
        wrapped = _as_dbapi_error(error, bind)
        if wrapped is None:
            raise
        raise wrapped from error


async def afollow(
    source: AsyncEngine | Callable[[], AbstractAsyncContextManager[AsyncSession]],
    stmt: sa.Select[Any],
    column: ULIDColumn,
    *,
    after: Cursor | None = None,
    settle: Settle = "auto",
    margin: timedelta = DEFAULT_MARGIN,
    limit: int = 100,
    interval: float = 0.5,
    stop: asyncio.Event | None = None,
    retry: Retry | None = DEFAULT_RETRY,
    check_skew: CheckSkew = "warn",
) -> AsyncIterator[Page[Any]]:
    """Follow a feed with asyncio: :func:`follow` for an AsyncEngine or async_sessionmaker.

    Same behaviour and arguments, retries included; ``stop`` is an
    :class:`asyncio.Event`, and the sleeps between polls give the event loop
    to other tasks.

    Example:
        >>> import asyncio
        >>> import sqlalchemy as sa
        >>> from datetime import timedelta
        >>> from sqlalchemy.ext.asyncio import create_async_engine
        >>> from sqlalchemy_ulid import ULIDType, afollow, new_ulid
        >>> log = sa.Table("log", sa.MetaData(), sa.Column("id", ULIDType(), primary_key=True))
        >>> async def main() -> int:
        ...     engine = create_async_engine("sqlite+aiosqlite://")
        ...     async with engine.begin() as conn:
        ...         await conn.run_sync(log.metadata.create_all)
        ...         await conn.execute(log.insert(), [{"id": new_ulid()} for _ in range(3)])
        ...     stop = asyncio.Event()
        ...     seen = []
        ...     async for page in afollow(engine, sa.select(log.c.id), log.c.id,
        ...                               settle=timedelta(0), interval=0.01, stop=stop):
        ...         seen += page.items
        ...         if len(seen) == 3:  # a row made this millisecond waits for the next
        ...             stop.set()  # ends the loop at its next sleep
        ...     await engine.dispose()
        ...     return len(seen)
        >>> asyncio.run(main())
        3
    """
    from sqlalchemy.ext.asyncio import AsyncEngine  # only async callers need greenlet

    loop = _Loop(column, after, settle, margin, limit, interval, retry, check_skew)
    while stop is None or not stop.is_set():
        try:
            if isinstance(source, AsyncEngine):
                page = await _apoll_engine(source, stmt, column, loop)
            else:
                page = await _apoll_sessions(source, stmt, column, loop)
        except Exception as error:
            wait = loop.failed(error)
            if wait is None:
                raise
        else:
            if page.items:
                yield page
            wait = loop.delivered(page)
            if not wait:
                continue
        if stop is None:
            await asyncio.sleep(wait)
        else:
            try:
                await asyncio.wait_for(stop.wait(), wait)
            except asyncio.TimeoutError:
                pass
            else:
                return
