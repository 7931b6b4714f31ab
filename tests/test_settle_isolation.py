"""settle= at the server's default isolation: REPEATABLE READ on MariaDB.

No engine here sets ``isolation_level``: MariaDB runs at its default,
REPEATABLE READ. A poll that begins its transaction itself is accepted
there, because InnoDB takes a transaction's read view at its first read of
an InnoDB table, and the horizon statement reads none: the page's read (or
its locking read, which reads the newest committed rows anyway) comes after
the horizon. A transaction that has already read is still refused, and so
is REPEATABLE READ on PostgreSQL, whose snapshot is taken by the horizon
statement itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session, sessionmaker

import _writers
from _sessions import mariadb_held_up
from sqlalchemy_ulid import ULID, Page, SettleError, ULIDType, follow, new_ulid, paginate
from sqlalchemy_ulid._dialects import dialect_row

MARGIN = timedelta(milliseconds=100)
events = sa.Table(
    "settle_rr_events",
    sa.MetaData(),
    sa.Column("id", ULIDType(), primary_key=True),
)
ALL = sa.select(events.c.id)


@pytest.fixture
def table(engine: Engine) -> Iterator[sa.Table]:
    events.drop(engine, checkfirst=True)
    events.create(engine)
    yield events
    events.drop(engine, checkfirst=True)


def settle_of(engine: Engine) -> list[Any]:
    return [timedelta(0)] if engine.dialect.name == "sqlite" else [timedelta(0), "auto"]


def old_ulid(seconds_ago: float, n: int = 1) -> ULID:
    return ULID.from_parts(int((time.time() - seconds_ago) * 1000), n)


def test_the_server_default_is_repeatable_read(engine: Engine) -> None:
    # The premise of this module: nothing here chose READ COMMITTED.
    with engine.connect() as conn:
        if engine.dialect.name == "mysql":
            assert conn.exec_driver_sql("SELECT @@tx_isolation").scalar() == "REPEATABLE-READ"
            assert conn.get_isolation_level() == "REPEATABLE READ"
        elif engine.dialect.name == "postgresql":
            assert conn.get_isolation_level() == "READ COMMITTED"


def test_a_poll_that_begins_its_transaction_is_accepted(engine: Engine, table: sa.Table) -> None:
    old = old_ulid(60)
    with engine.begin() as conn:
        conn.execute(events.insert(), {"id": old})
    for settle in settle_of(engine):
        with engine.connect() as conn:  # a fresh Connection
            assert paginate(conn, ALL, events.c.id, settle=settle).items == [old]
        with Session(engine) as session:  # a fresh Session
            assert paginate(session, ALL, events.c.id, settle=settle).items == [old]
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")  # reads no table: still no snapshot
            assert paginate(conn, ALL, events.c.id, settle=settle).items == [old]
            conn.commit()  # a new transaction for the next poll
            assert paginate(conn, ALL, events.c.id, after=old, settle=settle).items == []


def test_a_transaction_that_has_read_is_refused(engine: Engine, table: sa.Table) -> None:
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            conn.execute(ALL)
            assert paginate(conn, ALL, events.c.id, settle=timedelta(0)).items == []
        return
    if engine.dialect.name == "postgresql":
        # REPEATABLE READ takes its snapshot at the first statement: the
        # horizon's own. A writer committing between that snapshot and the
        # horizon's read of pg_locks holds no lock and is invisible. Refused
        # even in a fresh transaction.
        rr = engine.execution_options(isolation_level="REPEATABLE READ")
        for settle in settle_of(engine):
            with rr.connect() as conn, pytest.raises(SettleError, match="taken by the horizon"):
                paginate(conn, ALL, events.c.id, settle=settle)
        return
    for settle in settle_of(engine):
        with engine.connect() as conn:
            conn.execute(ALL)  # the read view exists now, and could predate the horizon
            with pytest.raises(SettleError, match=r"already .*@@in_transaction"):
                paginate(conn, ALL, events.c.id, settle=settle)
        with Session(engine) as session:
            session.execute(ALL)
            with pytest.raises(SettleError, match="already"):
                paginate(session, ALL, events.c.id, settle=settle)
        with engine.connect() as conn:  # polling twice in one transaction
            paginate(conn, ALL, events.c.id, settle=settle)
            with pytest.raises(SettleError, match="already"):
                paginate(conn, ALL, events.c.id, settle=settle)
        with engine.connect() as conn:
            conn.exec_driver_sql("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            with pytest.raises(SettleError, match="already"):
                paginate(conn, ALL, events.c.id, settle=settle)


def test_the_horizon_statement_takes_no_snapshot(engine: Engine, table: sa.Table) -> None:
    # A row committed after the horizon statement (with an id behind the
    # horizon) is in the page: the page's snapshot is taken after the
    # horizon, by the page itself. Were it taken by the horizon statement, the
    # row would be missing and the cursor would move past it.
    for settle in settle_of(engine):
        with engine.begin() as conn:
            conn.execute(events.delete())
        before, between = old_ulid(60, 1), old_ulid(60, 2)
        with engine.begin() as conn:
            conn.execute(events.insert(), {"id": before})
        marker = {"postgresql": "transaction_isolation", "mysql": "@@tx_isolation"}.get(
            engine.dialect.name, "julianday"
        )

        def commit_between(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if marker in statement:  # noqa: B023
                with engine.begin() as other:
                    other.execute(events.insert(), {"id": between})  # noqa: B023

        with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            sa.event.listen(conn, "after_cursor_execute", commit_between)
            page = paginate(conn, ALL, events.c.id, settle=settle)
        assert page.items == [before, between], settle


def _server_ms(conn: Connection) -> int:
    query = dialect_row(conn.dialect).clock_us
    assert query is not None
    value = int(conn.exec_driver_sql(query).scalar_one()) // 1000
    conn.rollback()
    return value


def _until(condition: Callable[[], bool], what: str, seconds: float = 15) -> None:
    """Wait for ``condition`` (polled), failing after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def late_commit(engine: Engine, settle: Any) -> list[Any]:
    """A makes its id, B a later one and commits, a poll runs, A commits, a poll runs.

    Each poll runs in a fresh transaction of a plain connection (REPEATABLE
    READ on MariaDB). Every step waits for a condition, never for a delay.
    """
    first: list[Page[Any]] = []
    waiting_id: list[int] = []
    window = settle if isinstance(settle, timedelta) else MARGIN
    locking_read = settle == "auto" and engine.dialect.name == "mysql"

    def poll() -> None:
        with engine.connect() as conn:
            if locking_read:
                waiting_id.append(conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar_one())
                conn.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 10")
                conn.commit()
            first.append(paginate(conn, ALL, events.c.id, settle=settle, margin=MARGIN))

    polling = threading.Thread(target=poll)
    with engine.connect() as writer, engine.connect() as clock:
        writer.exec_driver_sql("SELECT 1")  # connected: A's id is made as its INSERT starts
        writer.rollback()
        a_id = new_ulid()
        writer.execute(events.insert(), {"id": a_id})
        b_id = new_ulid()
        with engine.begin() as conn:
            conn.execute(events.insert(), {"id": b_id})
        # Both ids behind now - margin, so the poll's range holds A's row.
        _until(lambda: _server_ms(clock) > b_id.timestamp_ms + _ms(MARGIN), "the clock")
        polling.start()
        if locking_read:
            # The locking read waits for A's row: A commits once the poll is
            # seen held up (or has ended). Committing before the read reaches
            # A's row is no less a late commit: the page then reads it.
            with engine.connect() as monitor:
                _until(
                    lambda: (
                        not polling.is_alive()
                        or bool(waiting_id and mariadb_held_up(monitor, waiting_id[0]))
                    ),
                    "the poll held up or ended",
                )
        else:
            polling.join(10)
        writer.commit()
        polling.join(15)
        assert first, "the poll did not finish"
        # Both ids behind the next poll's horizon: now - settle (or - margin).
        _until(lambda: _server_ms(clock) > b_id.timestamp_ms + _ms(window), "the clock")
    with Session(engine) as session:
        rest = paginate(
            session, ALL, events.c.id, after=first[0].next_cursor, settle=settle, margin=MARGIN
        )
    return [*first[0].items, *rest.items]


def _ms(delta: timedelta) -> int:
    return delta // timedelta(milliseconds=1)


def test_late_commit_at_the_default_isolation(engine: Engine, table: sa.Table) -> None:
    if engine.dialect.name == "sqlite":
        # One writer at a time: A's open transaction would block B.
        with engine.connect() as conn, pytest.raises(SettleError, match="SQLite"):
            paginate(conn, ALL, events.c.id, settle="auto")
        return
    for settle in (timedelta(seconds=2), "auto"):
        with engine.begin() as conn:
            conn.execute(events.delete())
        delivered = late_commit(engine, settle)
        with engine.connect() as conn:
            ids = sorted(conn.scalars(ALL))
        assert delivered == ids, settle
        assert len(ids) == 2


@pytest.mark.parametrize("source", ["sessionmaker", "engine"])
def test_concurrent_writers_at_the_default_isolation(
    engine: Engine, table: sa.Table, source: str
) -> None:
    if engine.dialect.name == "sqlite":
        with pytest.raises(SettleError, match="SQLite"):
            next(follow(engine, ALL, events.c.id, settle="auto"))
        return
    margin = timedelta(milliseconds=300)
    writers = _writers.Appenders(engine, 3, events, max_tx=0.6, join=30)
    stop = threading.Event()

    def control() -> None:
        time.sleep(1.5)
        writers.halt()
        time.sleep(1.0)
        stop.set()

    feed_source: Any = sessionmaker(engine) if source == "sessionmaker" else engine
    got: list[Any] = []
    cursor = None
    with writers:
        threading.Thread(target=control).start()
        for page in follow(
            feed_source, ALL, events.c.id, margin=margin, interval=0.02, limit=50, stop=stop
        ):
            got += [item if isinstance(item, ULID) else item[0] for item in page.items]
            cursor = page.next_cursor
    with Session(engine) as session:
        rest = paginate(session, ALL, events.c.id, after=cursor, settle="auto", margin=margin)
    got += rest.items
    writers.check()
    written = writers.written
    assert len(written) > 10
    assert got == sorted(set(got)), "out of order, or delivered twice"
    assert set(got) == set(written), f"missed {len(set(written) - set(got))} rows"
