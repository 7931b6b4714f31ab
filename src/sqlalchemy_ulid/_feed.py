"""Following a feed: poll :func:`paginate` with ``settle=``, yield pages, sleep when caught up.

Each poll runs on a connection (or session) of its own, so no transaction
stays open between polls: with an Engine the connection autocommits, which
is the isolation ``settle=`` needs on every server.
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

from ._keys import keys_of
from ._paging import Cursor, Page, ULIDColumn, apaginate, paginate
from ._settle import DEFAULT_MARGIN, Settle, check_settle, is_lock_wait_timeout

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

__all__ = ["afollow", "follow"]


def _options(settle: Settle, margin: timedelta, limit: int, interval: float) -> dict[str, Any]:
    """Check the arguments once (before any SQL); return paginate()'s keywords."""
    check_settle(settle, margin)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be an int >= 1, got {limit!r}")
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval <= 0:
        raise ValueError(f"interval must be a number of seconds > 0, got {interval!r}")
    return {"limit": limit, "max_limit": limit, "settle": settle, "margin": margin}


def _start(column: ULIDColumn, after: Cursor | None) -> str | None:
    """The first cursor as text in the column's own form (InvalidULID before SQL)."""
    if after is None:
        return None
    keys = keys_of(column)
    return keys.format(keys.parse(after))


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
    ``interval``), or when the caller leaves the loop (``break``, or
    ``close()`` on the generator). A poll that MariaDB/MySQL ends with a lock
    wait timeout (a writer slower than ``innodb_lock_wait_timeout``, see
    ``settle="auto"``) is retried after ``interval``; any other failure
    raises out of the loop, and the stored cursor says where to resume.

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
        limit: the largest page yielded.
        interval: seconds to sleep when caught up.
        stop: set it (from any thread) to end the loop.

    Raises:
        ValueError: bad ``settle``, ``margin``, ``limit`` or ``interval``, or
            a malformed ``after`` (:class:`InvalidULID`), when the generator
            starts, before any SQL.
        TypeError: ``after`` is of a type that never names a key (as in
            :func:`paginate`).

    Example:
        >>> import sqlalchemy as sa
        >>> from datetime import timedelta
        >>> from sqlalchemy_ulid import ULIDType, follow, new_ulid
        >>> engine = sa.create_engine("sqlite://")
        >>> log = sa.Table("log", sa.MetaData(), sa.Column("id", ULIDType(), primary_key=True))
        >>> log.metadata.create_all(engine)
        >>> with engine.begin() as conn:
        ...     _ = conn.execute(log.insert(), [{"id": new_ulid()} for _ in range(3)])
        >>> seen = []
        >>> for page in follow(engine, sa.select(log.c.id), log.c.id,
        ...                    settle=timedelta(0), interval=0.01):
        ...     seen += page.items
        ...     if len(seen) == 3:
        ...         break
        >>> len(seen)
        3
    """
    options = _options(settle, margin, limit, interval)
    cursor = _start(column, after)
    while stop is None or not stop.is_set():
        page = None
        try:
            if isinstance(source, Engine):
                with source.connect() as conn:
                    autocommit = conn.execution_options(isolation_level="AUTOCOMMIT")
                    page = paginate(autocommit, stmt, column, after=cursor, **options)
            else:
                with source() as session:
                    page = paginate(session, stmt, column, after=cursor, **options)
        except sa.exc.OperationalError as error:
            if not is_lock_wait_timeout(error):
                raise
        if page is not None:
            cursor = page.next_cursor
            if page.items:
                yield page
            if page.has_more:
                continue
        if stop is None:
            time.sleep(interval)
        elif stop.wait(interval):
            return


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
) -> AsyncIterator[Page[Any]]:
    """Follow a feed with asyncio: :func:`follow` for an AsyncEngine or async_sessionmaker.

    Same behaviour and arguments; ``stop`` is an :class:`asyncio.Event`, and
    the sleep between polls gives the event loop to other tasks.

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

    options = _options(settle, margin, limit, interval)
    cursor = _start(column, after)
    while stop is None or not stop.is_set():
        page = None
        try:
            if isinstance(source, AsyncEngine):
                async with source.connect() as conn:
                    autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
                    page = await apaginate(autocommit, stmt, column, after=cursor, **options)
            else:
                async with source() as session:
                    page = await apaginate(session, stmt, column, after=cursor, **options)
        except sa.exc.OperationalError as error:
            if not is_lock_wait_timeout(error):
                raise
        if page is not None:
            cursor = page.next_cursor
            if page.items:
                yield page
            if page.has_more:
                continue
        if stop is None:
            await asyncio.sleep(interval)
        else:
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except asyncio.TimeoutError:
                pass
            else:
                return
