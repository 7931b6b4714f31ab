"""Tailing a feed: settle=, settle="auto" and follow()/afollow() on the three servers.

The central case is deterministic: writer A makes its id first but commits
last. Without settle= a reader moves its cursor past A's id before A's row is
visible and never sees it; with settle= it does, exactly once, in id order.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session, sessionmaker

import _writers
from _sessions import mariadb_held_up
from conftest import Backend, recording
from sqlalchemy_ulid import (
    ULID,
    MonotonicGenerator,
    Page,
    SettleError,
    ULIDType,
    _settle,
    afollow,
    apaginate,
    follow,
    new_ulid,
    paginate,
)
from sqlalchemy_ulid._dialects import dialect_row

feed = sa.Table(
    "feed_events",
    sa.MetaData(),
    sa.Column("id", ULIDType(), primary_key=True),
    sa.Column("writer", sa.String(10), nullable=False),
)
ALL = sa.select(feed.c.id)
MARGIN = timedelta(milliseconds=100)  # writers here insert right after making an id


_PAST = MonotonicGenerator(clock=lambda: time.time_ns() // 1_000_000 - 1000)


def settled_ulid() -> ULID:
    """An id made a second ago: behind even a settle=timedelta(0) horizon.

    With settle=0 the horizon is the server's current millisecond, so a row
    minted in that same millisecond waits for the next poll; tests that expect
    every row on the first page use ids that have already settled.
    """
    return _PAST()


@pytest.fixture
def table(engine: Engine) -> Iterator[sa.Table]:
    feed.drop(engine, checkfirst=True)
    feed.create(engine)
    yield feed
    feed.drop(engine, checkfirst=True)


def reader(engine: Engine) -> Connection:
    """A connection that reads at READ COMMITTED (MariaDB's default is REPEATABLE READ)."""
    level = "AUTOCOMMIT" if engine.dialect.name == "sqlite" else "READ COMMITTED"
    return engine.connect().execution_options(isolation_level=level)


def poll(conn: Connection, cursor: str | None, settle: Any) -> Page[Any]:
    page = paginate(conn, ALL, feed.c.id, after=cursor, settle=settle, margin=MARGIN)
    conn.commit()  # end the read transaction, as a poller between polls
    return page


def late_commit(engine: Engine, settle: Any) -> tuple[ULID, ULID, list[Any]]:
    """Writer A makes its id, B makes a newer one and commits, the reader polls,
    A commits, the reader polls again once everything has settled.

    A holds its transaction open after its INSERT (on SQLite, where one writer
    excludes the others, A waits between making its id and its INSERT). The
    reader's first poll runs in a thread: on MariaDB, settle="auto" makes it
    wait for A's row. Returns A's id, B's id and everything the reader got.
    """
    sqlite = engine.dialect.name == "sqlite"
    delivered: list[Any] = []
    a_id = new_ulid()
    a_conn = engine.connect()
    if not sqlite:
        a_conn.execute(feed.insert(), {"id": a_id, "writer": "A"})
    b_id = new_ulid()
    with engine.begin() as b_conn:
        b_conn.execute(feed.insert(), {"id": b_id, "writer": "B"})
    with reader(engine) as conn:
        # Old enough for a fixed settle to pass B had A committed: the point is
        # that A has not, and the page must not deliver B past A.
        time.sleep(0.25)
        first: list[Page[Any]] = []
        polling = threading.Thread(target=lambda: first.append(poll(conn, None, settle)))
        polling.start()
        if settle == "auto" and engine.dialect.name == "mysql":
            polling.join(0.3)  # MariaDB "auto": the poll waits on A's uncommitted row
            assert polling.is_alive()
        else:
            polling.join()  # the poll must run before A commits, however busy the machine
        if sqlite:
            a_conn.execute(feed.insert(), {"id": a_id, "writer": "A"})
        a_conn.commit()
        a_conn.close()
        polling.join()
        delivered += first[0].items
        # A tailer resumes after the last id it saw (settle= also says so).
        cursor = str(delivered[-1]) if delivered else None
        if settle is not None:
            assert first[0].next_cursor == cursor
        time.sleep(0.3 + (settle.total_seconds() if isinstance(settle, timedelta) else 0.2))
        second = poll(conn, cursor, settle)
        delivered += second.items
    return a_id, b_id, delivered


def test_late_commit_is_skipped_without_settle(table: sa.Table, engine: Engine) -> None:
    # The failure settle= exists for: B's id passes the cursor over A's.
    a_id, b_id, delivered = late_commit(engine, None)
    assert delivered == [b_id]
    assert a_id < b_id
    with engine.connect() as conn:
        assert conn.scalars(ALL.order_by(feed.c.id)).all() == [a_id, b_id]


def test_fixed_settle_delivers_the_late_commit(table: sa.Table, engine: Engine) -> None:
    # A commits within settle of making its id (about 0.3 s of 2 s).
    a_id, b_id, delivered = late_commit(engine, timedelta(seconds=2))
    assert delivered == [a_id, b_id]


def test_auto_settle_delivers_the_late_commit(table: sa.Table, engine: Engine) -> None:
    if engine.dialect.name == "sqlite":
        with reader(engine) as conn, pytest.raises(SettleError, match="SQLite"):
            paginate(conn, ALL, feed.c.id, settle="auto")
        return
    # A's transaction (about 0.6 s) outlasts the margin (0.1 s) six times over.
    a_id, b_id, delivered = late_commit(engine, "auto")
    assert delivered == [a_id, b_id]


def test_cursor_is_kept_when_nothing_settled(table: sa.Table, engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(feed.insert(), [{"id": settled_ulid(), "writer": "W"} for _ in range(3)])
    cursor = "01HTQW311N1KR5G0Y75M3EF00H"  # from 2024: every row is after it
    with reader(engine) as conn:
        page = paginate(conn, ALL, feed.c.id, after=cursor, settle=timedelta(hours=1))
        first = paginate(conn, ALL, feed.c.id, settle=timedelta(hours=1))
        done = paginate(conn, ALL, feed.c.id, after=cursor, settle=timedelta(0), limit=2)
    assert page == Page(items=[], next_cursor=cursor, prev_cursor=None, has_more=False)
    assert first == Page(items=[], next_cursor=None, prev_cursor=None, has_more=False)
    assert len(done.items) == 2
    assert done.has_more
    assert done.next_cursor == str(done.items[-1])


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"settle": timedelta(seconds=-1)}, ValueError),  # a negative window
        ({"settle": 5}, TypeError),  # seconds as a number: say timedelta
        ({"settle": "AUTO"}, TypeError),  # only "auto"
        ({"settle": "auto", "margin": timedelta(seconds=-1)}, ValueError),
        ({"settle": "auto", "margin": 1.0}, TypeError),
        ({"settle": timedelta(1), "before": "01HTQW311N1KR5G0Y75M3EF00H"}, ValueError),
        ({"settle": timedelta(1), "descending": True}, ValueError),  # a feed runs forward
    ],
)
def test_bad_settle_arguments_fail_before_sql(
    table: sa.Table,
    engine: Engine,
    statements: list[str],
    kwargs: dict[str, Any],
    error: type[Exception],
) -> None:
    with Session(engine) as session, pytest.raises(error):
        paginate(session, ALL, feed.c.id, **kwargs)
    assert statements == []


def test_repeatable_read_is_refused(table: sa.Table, engine: Engine) -> None:
    if engine.dialect.name == "sqlite":
        # No isolation levels to choose: a pysqlite transaction reads at once.
        with engine.begin() as conn:
            assert paginate(conn, ALL, feed.c.id, settle=timedelta(0)).items == []
        return
    rr = engine.execution_options(isolation_level="REPEATABLE READ")
    for settle in (timedelta(seconds=1), "auto"):
        with rr.connect() as conn:
            if engine.dialect.name == "mysql":
                # MariaDB: accepted in a transaction that has not read yet
                # (tests/test_settle_isolation.py), refused once it has.
                conn.execute(ALL)
            with pytest.raises(SettleError, match=r"(?i)repeatable.read"):
                paginate(conn, ALL, feed.c.id, settle=settle)
    # InnoDB's READ UNCOMMITTED would deliver rows that may still roll back;
    # PostgreSQL runs it as READ COMMITTED.
    ru = engine.execution_options(isolation_level="READ UNCOMMITTED")
    with ru.connect() as conn:
        if engine.dialect.name == "postgresql":
            assert paginate(conn, ALL, feed.c.id, settle=timedelta(seconds=1)).items == []
        else:
            with pytest.raises(SettleError, match=r"(?i)read.uncommitted"):
                paginate(conn, ALL, feed.c.id, settle=timedelta(seconds=1))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        assert paginate(conn, ALL, feed.c.id, settle="auto").items == []


def test_autocommit_on_a_server_defaulting_to_repeatable_read(
    backends: dict[str, Backend],
) -> None:
    # PostgreSQL reports its default level even to an autocommit connection,
    # where each statement is its own transaction and reads after the horizon.
    # (MariaDB reports @@autocommit itself; SQLite has no levels.)
    pg = backends["postgresql"]
    if pg.engine is None or pg.url is None:
        pytest.fail(f"required backend missing: {pg.reason}", pytrace=False)
    ids = sorted(ULID.from_parts(1_712_345_678_901 + n, n) for n in range(3))
    feed.drop(pg.engine, checkfirst=True)
    feed.create(pg.engine)
    with pg.engine.begin() as conn:
        conn.execute(feed.insert(), [{"id": i, "writer": "W"} for i in ids])
    level = "default_transaction_isolation"
    rr_default = sa.create_engine(pg.url, connect_args={"options": f"-c {level}=repeatable\\ read"})

    async def autocommit_page() -> list[Any]:
        url = make_url(pg.url).set(drivername="postgresql+asyncpg")
        settings = {"server_settings": {level: "repeatable read"}}
        async_engine = create_async_engine(url, connect_args=settings)
        try:
            async with async_engine.connect() as conn:
                autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
                page = await apaginate(autocommit, ALL, feed.c.id, settle=timedelta(0))
            return page.items
        finally:
            await async_engine.dispose()

    try:
        with rr_default.connect() as conn, pytest.raises(SettleError, match="repeatable read"):
            paginate(conn, ALL, feed.c.id, settle=timedelta(0))  # a real RR transaction
        gen = follow(rr_default, ALL, feed.c.id, settle="auto", margin=MARGIN, interval=0.01)
        assert next(gen).items == ids  # follow(engine) autocommits
        gen.close()
        assert asyncio.run(autocommit_page()) == ids
    finally:
        rr_default.dispose()
        feed.drop(pg.engine, checkfirst=True)


@contextlib.contextmanager
def unprivileged(engine: Engine) -> Iterator[Engine]:
    """A PostgreSQL login role with SELECT on the feed and nothing else."""
    # Roles belong to the whole server: one per test database, so suites run
    # against several databases at once never drop each other's role.
    database = engine.url.database
    role = f"{database}_feed_reader"
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if conn.scalar(sa.text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}):
            conn.exec_driver_sql(f'DROP OWNED BY "{role}"')  # left by an interrupted run
            conn.exec_driver_sql(f'DROP ROLE "{role}"')
        conn.exec_driver_sql(f'CREATE ROLE "{role}" LOGIN')
        conn.exec_driver_sql(f'GRANT CONNECT ON DATABASE "{database}" TO "{role}"')
        conn.exec_driver_sql(f'GRANT USAGE ON SCHEMA public TO "{role}"')
        conn.exec_driver_sql(f'GRANT SELECT ON feed_events TO "{role}"')
    limited = sa.create_engine(make_url(engine.url).set(username=role, password=None))
    try:
        yield limited
    finally:
        limited.dispose()
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f'DROP OWNED BY "{role}"')
            conn.exec_driver_sql(f'DROP ROLE "{role}"')


def test_auto_without_pg_read_all_stats_is_a_clear_error(table: sa.Table, engine: Engine) -> None:
    if engine.dialect.name != "postgresql":
        # MariaDB's locking read needs no more than SELECT; SQLite refuses "auto".
        with reader(engine) as conn:
            if engine.dialect.name == "sqlite":
                with pytest.raises(SettleError):
                    paginate(conn, ALL, feed.c.id, settle="auto")
            else:
                assert paginate(conn, ALL, feed.c.id, settle="auto").items == []
        return
    with unprivileged(engine) as limited:
        check_privileges(engine, limited)


def check_privileges(engine: Engine, unprivileged: Engine) -> None:
    # Without the role, other sessions' xact_start reads as NULL: refuse,
    # rather than compute a horizon that ignores the writers we cannot see.
    with unprivileged.connect() as conn:
        with pytest.raises(SettleError, match="pg_read_all_stats"):
            paginate(conn, ALL, feed.c.id, settle="auto")
        # A fixed window needs no privilege.
        assert paginate(conn, ALL, feed.c.id, settle=timedelta(seconds=1)).items == []
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("GRANT pg_read_all_stats TO " + str(unprivileged.url.username))
    with engine.begin() as conn:
        conn.execute(feed.insert(), {"id": ULID.from_parts(1_712_345_678_901, 1), "writer": "W"})
    with unprivileged.connect() as conn:
        assert len(paginate(conn, ALL, feed.c.id, settle="auto").items) == 1


def test_auto_waits_for_the_oldest_writer(engine: Engine, table: sa.Table) -> None:
    if engine.dialect.name == "sqlite":
        with reader(engine) as conn, pytest.raises(SettleError, match="timedelta"):
            paginate(conn, ALL, feed.c.id, settle="auto")
        return
    if engine.dialect.name == "mysql":
        check_locking_read(engine)
        return
    # PostgreSQL: the horizon stays margin behind the start of a transaction
    # holding a write lock on the table, however old the rows after it are.
    old = ULID.from_parts(int(time.time() * 1000) - 60_000, 1)  # a minute old
    with engine.connect() as writer:
        writer.execute(feed.insert(), {"id": new_ulid(), "writer": "A"})  # holds the lock
        time.sleep(0.05)
        with engine.begin() as conn:
            conn.execute(feed.insert(), {"id": old, "writer": "B"})
        with reader(engine) as conn:
            assert paginate(conn, ALL, feed.c.id, settle="auto").items == [old]
            late = new_ulid()
            with engine.begin() as other:
                other.execute(feed.insert(), {"id": late, "writer": "C"})
            time.sleep(MARGIN.total_seconds() * 2)
            held = paginate(conn, ALL, feed.c.id, after=old, settle="auto", margin=MARGIN)
            assert held.items == []  # C is newer than A's transaction start
            assert held.next_cursor == str(old)
        writer.rollback()
    time.sleep(MARGIN.total_seconds() * 2)
    with reader(engine) as conn:
        assert paginate(conn, ALL, feed.c.id, after=old, settle="auto", margin=MARGIN).items == [
            late
        ]


def check_locking_read(engine: Engine) -> None:
    # MariaDB: the page waits for an uncommitted row behind the horizon, then
    # delivers it with the committed rows after it, or skips it if rolled back.
    for outcome in ("commit", "rollback"):
        with engine.begin() as conn:
            conn.execute(feed.delete())
        held = ULID.from_parts(int(time.time() * 1000) - 5_000, 1)
        after_it = ULID.from_parts(int(time.time() * 1000) - 4_000, 1)
        with engine.connect() as writer:
            writer.execute(feed.insert(), {"id": held, "writer": "A"})
            with engine.begin() as conn:
                conn.execute(feed.insert(), {"id": after_it, "writer": "B"})
            pages: list[Page[Any]] = []
            with reader(engine) as conn:
                polling = threading.Thread(
                    target=lambda: pages.append(poll(conn, None, "auto"))  # noqa: B023
                )
                started = time.monotonic()
                polling.start()
                polling.join(0.4)
                assert polling.is_alive(), "the page did not wait for the uncommitted row"
                writer.commit() if outcome == "commit" else writer.rollback()
                polling.join()
                assert time.monotonic() - started >= 0.4
        expected = [held, after_it] if outcome == "commit" else [after_it]
        assert pages[0].items == expected, outcome
    # A transaction longer than innodb_lock_wait_timeout makes the poll raise;
    # the next poll, from the same cursor, goes on.
    stuck = ULID.from_parts(int(time.time() * 1000) - 3_000, 1)
    with engine.connect() as writer:
        writer.execute(feed.insert(), {"id": stuck, "writer": "A"})
        with reader(engine) as conn:
            conn.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 1")
            with pytest.raises(sa.exc.OperationalError, match="Lock wait timeout"):
                poll(conn, str(after_it), "auto")
            conn.rollback()
            writer.commit()
            assert poll(conn, str(after_it), "auto").items == [stuck]
    # follow() retries such a poll instead of ending the consumer.
    impatient = sa.create_engine(
        engine.url, connect_args={"init_command": "SET SESSION innodb_lock_wait_timeout = 1"}
    )
    slow = ULID.from_parts(int(time.time() * 1000) - 2_000, 1)
    try:
        with engine.connect() as writer:
            writer.execute(feed.insert(), {"id": slow, "writer": "A"})
            timer = threading.Timer(1.6, writer.commit)  # after one timed-out poll
            timer.start()
            stop = threading.Event()
            started = time.monotonic()
            for page in follow(
                impatient, ALL, feed.c.id, after=stuck, margin=MARGIN, interval=0.05, stop=stop
            ):
                assert page.items == [slow]
                stop.set()
            assert time.monotonic() - started > 1.0  # at least one poll timed out
            timer.join()  # the commit's reply is read before the connection closes
    finally:
        impatient.dispose()


# -- a bounded concurrent run --------------------------------------------------------


def concurrent_run(
    engine: Engine, settle: Any, seconds: float, max_tx: float, margin: timedelta = MARGIN
) -> None:
    """Four writer threads, transactions of 0..max_tx s, one follower; compare."""
    # SQLite has one writer at a time: a writer that made its ids and then
    # waited for the database lock would spend that wait before its commit,
    # too. Taking the turn first (as BEGIN IMMEDIATE does) keeps ids fresh.
    turn = threading.Lock() if engine.dialect.name == "sqlite" else None
    writers = _writers.Appenders(
        engine, 4, feed, max_tx, values=lambda n, new: {"id": new, "writer": str(n)}, turn=turn
    )
    stop = threading.Event()

    def control() -> None:
        time.sleep(seconds)
        writers.halt()
        window = settle if isinstance(settle, timedelta) else margin
        time.sleep(0.5 + window.total_seconds())
        stop.set()

    got: list[ULID] = []
    cursor: str | None = None
    with writers:
        threading.Thread(target=control).start()
        for page in follow(
            engine, ALL, feed.c.id, settle=settle, margin=margin, interval=0.02, limit=50, stop=stop
        ):
            got += page.items
            cursor = page.next_cursor
    # Writers are done and settled: drain whatever the last poll left.
    with reader(engine) as conn:
        while True:
            page = poll(conn, cursor, settle)
            got += page.items
            cursor = page.next_cursor
            if not page.has_more:
                break
    writers.check()
    written = writers.written
    assert len(written) > 20
    assert len(got) == len(set(got)), "a row was delivered twice"
    assert got == sorted(got), "not in id order"
    assert set(got) == set(written), f"missed {len(set(written) - set(got))} rows"


def test_concurrent_writers_fixed_settle(table: sa.Table, engine: Engine) -> None:
    if engine.dialect.name == "sqlite":
        # One writer at a time: waiting for the lock is part of mint-to-commit.
        concurrent_run(engine, timedelta(seconds=1), seconds=1.0, max_tx=0.05)
        return
    concurrent_run(engine, timedelta(seconds=1), seconds=1.5, max_tx=0.1)


def test_concurrent_writers_auto(table: sa.Table, engine: Engine) -> None:
    if engine.dialect.name == "sqlite":
        # Refused before any SQL: the clock-skew check of the first poll
        # (check_skew="warn") does not run on a database "auto" cannot serve.
        sources: list[Any] = [engine, sessionmaker(engine)]
        for source in sources:
            with recording(engine) as seen, pytest.raises(SettleError, match="SQLite"):
                next(follow(source, ALL, feed.c.id, settle="auto"))
            assert seen == []
        return
    # Transactions up to 0.6 s, twice the margin: only "auto" copes.
    concurrent_run(engine, "auto", seconds=1.5, max_tx=0.6, margin=timedelta(milliseconds=300))


# -- the consumer helpers ------------------------------------------------------------


def test_follow_with_a_sessionmaker_yields_orm_pages_and_stops(
    table: sa.Table, engine: Engine
) -> None:
    from sqlalchemy.orm import registry

    mapper_registry = registry()

    class Event:
        id: ULID
        writer: str

    mapper_registry.map_imperatively(Event, feed)
    try:
        with engine.begin() as conn:
            conn.execute(feed.insert(), [{"id": settled_ulid(), "writer": "W"} for _ in range(5)])
        read_committed = engine.execution_options(
            isolation_level="AUTOCOMMIT" if engine.dialect.name == "sqlite" else "READ COMMITTED"
        )
        stop = threading.Event()
        pages: list[Page[Any]] = []
        for page in follow(
            sessionmaker(read_committed),
            sa.select(Event),
            Event.id,  # type: ignore[arg-type]
            settle=timedelta(0),
            limit=2,
            interval=0.01,
            stop=stop,
        ):
            pages.append(page)
            if sum(len(p.items) for p in pages) == 5:
                threading.Timer(0.05, stop.set).start()
        assert [len(p.items) for p in pages] == [2, 2, 1]
        assert all(isinstance(e, Event) for p in pages for e in p.items)
        assert pages[-1].next_cursor == str(pages[-1].items[-1].id)
    finally:
        mapper_registry.dispose()


def test_follow_resumes_after_its_cursor(table: sa.Table, engine: Engine) -> None:
    ids = sorted(settled_ulid() for _ in range(4))
    with engine.begin() as conn:
        conn.execute(feed.insert(), [{"id": i, "writer": "W"} for i in ids])
    gen = follow(engine, ALL, feed.c.id, after=ids[1], settle=timedelta(0), interval=0.01)
    assert next(gen).items == ids[2:]
    gen.close()


@pytest.mark.parametrize(
    "kwargs",
    [{"interval": 0}, {"interval": -1}, {"limit": 0}, {"settle": None}, {"margin": 5}],
)
def test_follow_checks_its_arguments(
    table: sa.Table, engine: Engine, statements: list[str], kwargs: dict[str, Any]
) -> None:
    with pytest.raises((ValueError, TypeError)):
        next(follow(engine, ALL, feed.c.id, **kwargs))
    assert statements == []


@pytest.mark.parametrize(
    ("after", "error"),
    [
        (bytes(16), TypeError),  # 16 bytes are not a cursor (paginate says so too)
        (uuid.UUID(int=1), TypeError),  # nor a UUID: str() of it is 36 characters
        ("01HTQW311N1KR5G0Y75M3EF00U", ValueError),  # U is not Crockford base32
    ],
)
def test_follow_checks_its_cursor_like_paginate(
    table: sa.Table, engine: Engine, statements: list[str], after: Any, error: type[Exception]
) -> None:
    with pytest.raises(error) as raised:
        next(follow(engine, ALL, feed.c.id, after=after, settle=timedelta(0)))
    with engine.connect() as conn, pytest.raises(error) as expected:
        paginate(conn, ALL, feed.c.id, after=after, settle=timedelta(0))
    assert (type(raised.value), str(raised.value)) == (type(expected.value), str(expected.value))
    assert statements == []


def test_afollow_on_every_async_driver(backend: Backend, engine: Engine, table: sa.Table) -> None:
    # "auto" runs its horizon query through asyncpg, psycopg and asyncmy too.
    settle: Any = timedelta(0) if backend.name == "sqlite" else "auto"
    ids = sorted(ULID.from_parts(1_712_345_678_901 + n, n) for n in range(3))
    with engine.begin() as conn:
        conn.execute(feed.insert(), [{"id": i, "writer": "W"} for i in ids])

    async def run(url: str) -> tuple[list[Any], list[Any]]:
        async_engine = create_async_engine(url)
        level = "AUTOCOMMIT" if backend.name == "sqlite" else "READ COMMITTED"
        sessions = async_sessionmaker(async_engine.execution_options(isolation_level=level))
        got: list[Any] = []
        entities: list[Any] = []
        try:
            stop = asyncio.Event()
            async for page in afollow(
                async_engine, ALL, feed.c.id, settle=settle, interval=0.01, stop=stop
            ):
                got += page.items
                stop.set()
            # An async_sessionmaker: one AsyncSession per poll, ORM rows.
            stop = asyncio.Event()
            async for page in afollow(
                sessions, ALL, feed.c.id, settle=settle, limit=2, interval=0.01, stop=stop
            ):
                entities += page.items
                if len(entities) == 3:
                    stop.set()
        finally:
            await async_engine.dispose()
        return got, entities

    for url in backend.async_urls:
        assert asyncio.run(run(url)) == (ids, ids), url


def test_sync_feed_imports_without_greenlet() -> None:
    # SQLAlchemy 2.1 no longer installs greenlet: the sync API must not need it.
    code = (
        "import sys; sys.modules['greenlet'] = None\n"
        "import sqlalchemy as sa\n"
        "from datetime import timedelta\n"
        "from sqlalchemy_ulid import ULIDType, follow, paginate, new_ulid\n"
        "e = sa.create_engine('sqlite://')\n"
        "t = sa.Table('t', sa.MetaData(), sa.Column('id', ULIDType(), primary_key=True))\n"
        "t.metadata.create_all(e)\n"
        "with e.begin() as c: c.execute(t.insert(), [{'id': new_ulid()}])\n"
        "page = next(follow(e, sa.select(t.c.id), t.c.id, settle=timedelta(0)))\n"
        "print(len(page.items), 'sqlalchemy.ext.asyncio' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.split() == ["1", "False"]


def _commit_when_waited_on(
    writer: Connection, engine: Engine, reader_id: int | None, page_done: threading.Event
) -> None:
    """Commit ``writer`` once the page waits for its row, or once the page is done.

    MariaDB's locking read also locks the first row past its range (A's, not
    yet committed), so it waits for that commit, seen from another
    connection (``reader_id``: the reader's connection id). PostgreSQL's page
    waits for nothing, so the commit comes after it. Conditions, not delays:
    however slow the machine, the order of events is the same.
    """
    deadline = time.monotonic() + 30
    with contextlib.ExitStack() as stack:
        monitor = None if reader_id is None else stack.enter_context(engine.connect())
        while not page_done.is_set() and time.monotonic() < deadline:
            if monitor is not None and mariadb_held_up(monitor, reader_id):
                break
            page_done.wait(0.01)
    writer.commit()


def _wait_for_server_clock_past(engine: Engine, ms: int) -> None:
    """Return once the server's clock is past millisecond ``ms`` (bounded: 30 s)."""
    clock = sa.text(dialect_row(engine.dialect).clock_us or "")
    deadline = time.monotonic() + 30
    with engine.connect() as conn:
        while conn.execute(clock).scalar_one() // 1000 <= ms:
            assert time.monotonic() < deadline, "the server's clock does not advance"
            conn.rollback()
            time.sleep(0.005)


def test_auto_polls_inside_one_long_transaction(engine: Engine, table: sa.Table) -> None:
    # A Session polling without committing: PostgreSQL would serve it one
    # frozen pg_stat_activity for the whole transaction, blind to a writer
    # that connected after the first poll. The horizon clears it each time.
    sqlite = engine.dialect.name == "sqlite"
    settle: Any = timedelta(milliseconds=100) if sqlite else "auto"
    read_committed = engine.execution_options(
        isolation_level="AUTOCOMMIT" if sqlite else "READ COMMITTED"
    )
    old = ULID.from_parts(int(time.time() * 1000) - 60_000, 1)
    # While A is open, a margin of 30 s keeps A's id (made now) ahead of the
    # horizon and B's (a minute old) behind it, however loaded the machine.
    margin = timedelta(seconds=30)
    late = new_ulid()
    with Session(read_committed) as session:
        assert paginate(session, ALL, feed.c.id, settle=settle, margin=margin).items == []
        reader_id = None
        if engine.dialect.name == "mysql":
            reader_id = session.connection().exec_driver_sql("SELECT CONNECTION_ID()").scalar()
        with engine.connect() as writer:  # connects after the first poll
            if not sqlite:
                writer.execute(feed.insert(), {"id": late, "writer": "A"})
            with engine.begin() as conn:
                conn.execute(feed.insert(), {"id": old, "writer": "B"})
            page_done = threading.Event()
            committer = threading.Thread(
                target=_commit_when_waited_on, args=(writer, engine, reader_id, page_done)
            )
            committer.start()
            try:
                page = paginate(session, ALL, feed.c.id, settle=settle, margin=margin)
            finally:
                page_done.set()
                committer.join()
            assert page.items == [old]
        # A has committed and holds no lock: with no margin, the horizon is
        # the server's now, past A's id once the server's clock is.
        if not sqlite:
            _wait_for_server_clock_past(engine, late.timestamp_ms)
        rest = paginate(
            session, ALL, feed.c.id, after=page.next_cursor, settle=settle, margin=timedelta(0)
        )
        assert rest.items == ([] if sqlite else [late])


def test_auto_asks_standby_or_galera_in_the_horizon_statement(
    engine: Engine, table: sa.Table, statements: list[str]
) -> None:
    # settle="auto" is refused on a PostgreSQL hot standby and on a Galera
    # node (tests/cluster runs both). The check rides in the horizon
    # statement: a poll costs no more round trips than before, and this
    # server, neither standby nor Galera node, pages as usual.
    if engine.dialect.name == "sqlite":
        with reader(engine) as conn, pytest.raises(SettleError, match="SQLite"):
            paginate(conn, ALL, feed.c.id, settle="auto")
        return
    old = ULID.from_parts(1_712_345_678_901, 1)
    with engine.begin() as conn:
        conn.execute(feed.insert(), {"id": old, "writer": "W"})
    del statements[:]
    with reader(engine) as conn:
        assert paginate(conn, ALL, feed.c.id, settle="auto").items == [old]
    polled = [s for s in statements if "feed_events" in s or "@@" in s or "pg_" in s]
    if engine.dialect.name == "postgresql":
        assert len(polled) == 3  # clear the activity snapshot, horizon, page
        assert "pg_is_in_recovery()" in polled[1]
        probe = "SELECT pg_is_in_recovery()"
    else:
        assert len(polled) == 2  # horizon, page
        assert "@@global.wsrep_on" in polled[0]
        probe = "SELECT @@global.wsrep_on"  # present on this server, and OFF
    with engine.connect() as conn:
        assert not conn.execute(sa.text(probe)).scalar_one()


@pytest.mark.parametrize("backend", ["mysql"], indirect=True)
def test_auto_on_a_server_without_wsrep_on(
    backend: Backend, engine: Engine, table: sa.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Oracle MySQL, and MariaDB built without wsrep, have no wsrep_on: reading
    # it fails with error 1193. Such a server is no Galera node, so the
    # horizon is asked again without it, once per engine. Stand-in: a name
    # this server does not know, so it answers the real error.
    real = _settle._settle_sql
    monkeypatch.setattr(
        _settle,
        "_settle_sql",
        lambda dialect: dataclasses.replace(
            real(dialect), cluster_variable="wsrep_on_not_in_this_build"
        ),
    )
    old = ULID.from_parts(1_712_345_678_901, 1)
    with engine.begin() as conn:
        conn.execute(feed.insert(), {"id": old, "writer": "W"})
    assert backend.url is not None
    fresh = sa.create_engine(backend.url)  # a dialect of its own: what it learns stays there
    try:
        with recording(fresh) as seen, reader(fresh) as conn:
            first = paginate(conn, ALL, feed.c.id, settle="auto", margin=MARGIN)
            assert conn.in_transaction()  # the failed statement did not end it
            again = paginate(conn, ALL, feed.c.id, after=old, settle="auto", margin=MARGIN)
        assert first.items == [old]
        assert again.items == []
        assert again.next_cursor == str(old)
        assert len(seen) == 3 + 2  # refused, asked again, page; then horizon, page
        assert "wsrep_on_not_in_this_build" in seen[0]
        assert not any("wsrep" in statement for statement in seen[1:])
        # Any other error still reaches the caller.
        broken = sa.select(feed.c.id, sa.literal_column("no_such_column"))
        with reader(fresh) as conn, pytest.raises(sa.exc.OperationalError, match="no_such_column"):
            paginate(conn, broken, feed.c.id, settle="auto")
    finally:
        fresh.dispose()

    async def run(url: str) -> tuple[list[Any], list[Any], list[str]]:
        async_engine = create_async_engine(url, isolation_level="READ COMMITTED")
        try:
            with recording(async_engine.sync_engine) as seen:
                async with async_engine.connect() as conn:
                    first = await apaginate(conn, ALL, feed.c.id, settle="auto", margin=MARGIN)
                    again = await apaginate(
                        conn, ALL, feed.c.id, after=old, settle="auto", margin=MARGIN
                    )
        finally:
            await async_engine.dispose()
        return list(first.items), list(again.items), seen

    for url in backend.async_urls:
        first_items, again_items, seen = asyncio.run(run(url))
        assert (first_items, again_items) == ([old], []), url
        assert len(seen) == 3 + 2, url


def test_orm_session_on_a_fresh_engine_and_with_several_binds(
    backend: Backend, table: sa.Table
) -> None:
    # A worker's first query is often the feed: the Session has not connected
    # yet, so a mysql:// URL has not told MariaDB from MySQL (which name the
    # isolation variable differently). And a session with binds= (or
    # Flask-SQLAlchemy bind keys) has no single engine for the horizon's SQL.
    assert backend.url is not None
    settle: Any = timedelta(0) if backend.name == "sqlite" else "auto"
    level = "AUTOCOMMIT" if backend.name == "sqlite" else "READ COMMITTED"
    ids = sorted(ULID.from_parts(1_712_345_678_901 + n, n) for n in range(3))
    with sa.create_engine(backend.url).begin() as conn:
        conn.execute(feed.insert(), [{"id": i, "writer": "W"} for i in ids])

    for binds in (False, True):
        fresh = sa.create_engine(backend.url, isolation_level=level)
        try:
            session = Session(binds={feed: fresh}) if binds else Session(fresh)
            with session:
                page = paginate(session, ALL, feed.c.id, settle=settle, margin=MARGIN)
            assert page.items == ids, binds
        finally:
            fresh.dispose()

    async def first_async_page(url: str) -> list[Any]:
        fresh = create_async_engine(url, isolation_level=level)
        try:
            async with AsyncSession(fresh) as session:
                page = await apaginate(session, ALL, feed.c.id, settle=settle, margin=MARGIN)
            return page.items
        finally:
            await fresh.dispose()

    for url in backend.async_urls:
        assert asyncio.run(first_async_page(url)) == ids, url


@pytest.mark.parametrize("server", ["postgresql", "mysql"])
def test_auto_refuses_a_view(backends: dict[str, Backend], server: str) -> None:
    # PostgreSQL: writers lock the base table, never the view, so "auto"
    # watching the view saw no writer. MariaDB: a view it materializes
    # (TEMPTABLE) takes no row locks, so the locking read did not wait. Both
    # skipped a slow writer's row; both are refused now.
    found = backends[server]
    if found.engine is None:
        pytest.fail(f"required backend missing: {found.reason}", pytrace=False)
    view = sa.Table(
        "feed_events_view", sa.MetaData(), sa.Column("id", ULIDType(), primary_key=True)
    )
    algorithm = "ALGORITHM=TEMPTABLE " if server == "mysql" else ""
    feed.drop(found.engine, checkfirst=True)
    feed.create(found.engine)
    autocommit = found.engine.execution_options(isolation_level="AUTOCOMMIT")
    try:
        with autocommit.connect() as conn:
            conn.exec_driver_sql(
                f"CREATE {algorithm}VIEW feed_events_view AS SELECT id FROM feed_events"
            )
            conn.execute(
                feed.insert(), {"id": ULID.from_parts(1_712_345_678_901, 1), "writer": "W"}
            )
            with pytest.raises(SettleError, match=r"feed_events_view (is|to be) a .*view"):
                paginate(conn, sa.select(view.c.id), view.c.id, settle="auto", margin=MARGIN)
            # A fixed window needs no writers' locks; the base table pages with "auto".
            fixed = paginate(conn, sa.select(view.c.id), view.c.id, settle=timedelta(0))
            auto = paginate(conn, ALL, feed.c.id, settle="auto", margin=MARGIN)
            assert len(fixed.items) == len(auto.items) == 1
    finally:
        with autocommit.connect() as conn:
            conn.exec_driver_sql("DROP VIEW IF EXISTS feed_events_view")
        feed.drop(found.engine, checkfirst=True)
