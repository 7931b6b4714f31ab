"""The executors of a feed's plan (:mod:`._plan`): :func:`follow` and :func:`afollow`.

Both run the same sync poll: :func:`follow` on a connection or session it
opens, :func:`afollow` through ``run_sync`` on an async one it opens. They
differ only in how they connect and sleep.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from .._paging import Cursor, Page, ULIDColumn
from .._retry import Retry
from .._settle import DEFAULT_MARGIN, Settle
from ._plan import DEFAULT_RETRY, CheckSkew, FeedPlan, measure_for, poll_connection, poll_session

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

__all__ = ["afollow", "follow"]


def _poll(
    source: Engine | Callable[[], AbstractContextManager[Session]], plan: FeedPlan
) -> Page[Any]:
    if isinstance(source, Engine):
        with plan.driver_errors(source), source.connect() as conn:
            return poll_connection(conn, plan)
    with plan.driver_errors():
        if plan.skew_pending:
            with source() as probe:
                measure_for(probe, plan)
        with source() as session:
            return poll_session(session, plan)


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
    plan = FeedPlan(stmt, column, after, settle, margin, limit, interval, retry, check_skew)
    while stop is None or not stop.is_set():
        try:
            page = _poll(source, plan)
        except Exception as error:
            wait = plan.failed(error)  # raises what is not retried
        else:
            wait = plan.delivered(page)
            if page.items:
                yield page
        if not wait:
            continue
        if stop is None:
            time.sleep(wait)
        elif stop.wait(wait):
            return


async def _apoll(
    source: AsyncEngine | Callable[[], AbstractAsyncContextManager[AsyncSession]],
    plan: FeedPlan,
) -> Page[Any]:
    from sqlalchemy.ext.asyncio import AsyncEngine  # only async callers need greenlet

    if isinstance(source, AsyncEngine):
        with plan.driver_errors(source.sync_engine):
            async with source.connect() as conn:
                return await conn.run_sync(poll_connection, plan)
    with plan.driver_errors():
        if plan.skew_pending:
            async with source() as probe:
                await probe.run_sync(measure_for, plan)
        async with source() as session:
            return await session.run_sync(poll_session, plan)


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
    plan = FeedPlan(stmt, column, after, settle, margin, limit, interval, retry, check_skew)
    while stop is None or not stop.is_set():
        try:
            page = await _apoll(source, plan)
        except Exception as error:
            wait = plan.failed(error)  # raises what is not retried
        else:
            wait = plan.delivered(page)
            if page.items:
                yield page
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
