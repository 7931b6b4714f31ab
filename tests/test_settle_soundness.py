"""settle="auto" where a writer is slow in ways the horizon could miss.

* MariaDB: an INSERT waiting on a foreign-key check has written its
  primary-key entry but not yet its later secondary-index entries. A page
  read through such an index (a per-tenant feed) passed the waiting row and
  lost it; the page now reads through the primary key.
* PostgreSQL: a writer with ``track_activities = off`` shows no
  ``xact_start``; it was taken for a transaction that had ended.

Each case is deterministic: the slow writer is held by a lock this test
holds, and released only after the poll that must not move past it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import DeclarativeBase, Session, aliased

from conftest import Backend, recording
from sqlalchemy_ulid import ULID, Page, SettleError, ULIDType, apaginate, new_ulid, paginate

MARGIN = timedelta(milliseconds=100)
WAIT = 10  # seconds: innodb_lock_wait_timeout and lock_timeout of every session here

meta = sa.MetaData()
parents = sa.Table(
    "settle_parents",
    meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("n", sa.Integer, nullable=False),
)
# The table: the feed filters on tenant, served by INDEX(tenant).
msgs = sa.Table(
    "settle_msgs",
    meta,
    sa.Column("id", ULIDType(), primary_key=True),
    sa.Column("parent_id", sa.ForeignKey("settle_parents.id"), nullable=False),
    sa.Column("tenant", sa.Integer, nullable=False, index=True),
)
# A composite primary key (tenant, id): a per-tenant feed fixes the tenant.
# (The id is unique on its own too, as paging needs.)
tenant_msgs = sa.Table(
    "settle_tenant_msgs",
    meta,
    sa.Column("tenant", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("id", ULIDType(), primary_key=True, unique=True),
    sa.Column("parent_id", sa.ForeignKey("settle_parents.id"), nullable=False),
    sa.Column("kind", sa.Integer, nullable=False, index=True),
)
# The id only a unique secondary key.
numbered = sa.Table(
    "settle_numbered",
    meta,
    sa.Column("n", sa.Integer, primary_key=True),
    sa.Column("id", ULIDType(), nullable=False, unique=True),
)


@pytest.fixture
def tables(engine: Engine) -> Iterator[None]:
    meta.drop_all(engine)
    meta.create_all(engine)
    with engine.begin() as conn:
        conn.execute(parents.insert(), [{"id": 1, "n": 0}, {"id": 2, "n": 0}])
    yield
    meta.drop_all(engine)


def bounded(conn: Connection) -> Connection:
    """Every lock wait of this session ends within WAIT seconds."""
    if conn.dialect.name == "mysql":
        conn.exec_driver_sql(f"SET SESSION innodb_lock_wait_timeout = {WAIT}")
    elif conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SET lock_timeout = '{WAIT}s'")
    conn.commit()
    return conn


def old_ulid(seconds_ago: float) -> ULID:
    return ULID.from_parts(int((time.time() - seconds_ago) * 1000), 1)


class Waiter:
    """Run one INSERT in a thread; it blocks until the test releases a lock."""

    def __init__(self, engine: Engine, table: sa.Table, row: dict[str, Any]) -> None:
        self.conn = bounded(engine.connect())
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(table, row))

    def _run(self, table: sa.Table, row: dict[str, Any]) -> None:
        try:
            self.conn.execute(table.insert(), row)
            self.conn.commit()
        except BaseException as error:  # reported by join()
            self.error = error

    def start(self) -> None:
        """Start the INSERT; return once the server shows it waiting for a lock."""
        mysql = self.conn.dialect.name == "mysql"
        me = self.conn.exec_driver_sql(
            "SELECT CONNECTION_ID()" if mysql else "SELECT pg_backend_pid()"
        ).scalar()
        self.conn.commit()
        waiting = sa.text(
            "SELECT count(*) FROM information_schema.PROCESSLIST "
            "WHERE ID = :me AND INFO LIKE 'INSERT%'"
            if mysql
            else "SELECT count(*) FROM pg_stat_activity "
            "WHERE pid = :me AND wait_event_type = 'Lock'"
        )
        self.thread.start()
        deadline = time.monotonic() + WAIT
        with self.conn.engine.connect() as watcher:
            while not watcher.execute(waiting, {"me": me}).scalar():
                assert time.monotonic() < deadline, "the INSERT never reached the server"
                assert self.thread.is_alive(), f"the INSERT did not wait: {self.error}"
                watcher.rollback()  # a fresh look each time
                time.sleep(0.02)
        time.sleep(0.05)  # in the lock wait by now (MariaDB shows the query a bit earlier)
        assert self.thread.is_alive(), f"the INSERT did not wait: {self.error}"

    def join(self) -> None:
        self.thread.join(WAIT + 5)
        assert not self.thread.is_alive()
        self.conn.close()
        assert self.error is None, self.error


def poll_in_thread(engine: Engine, stmt: sa.Select[Any], column: Any, after: Any) -> Any:
    """Start a poll on a fresh autocommit connection; return (thread, result list)."""
    got: list[Page[Any] | BaseException] = []

    def run() -> None:
        try:
            with bounded(engine.connect()).execution_options(isolation_level="AUTOCOMMIT") as conn:
                got.append(paginate(conn, stmt, column, after=after, settle="auto", margin=MARGIN))
        except BaseException as error:
            got.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, got


def fk_wait_feed(
    engine: Engine, table: sa.Table, stmt: sa.Select[Any], row: dict[str, Any]
) -> None:
    """The issue's reproduction, on ``table`` read through ``stmt``.

    A second connection holds parent 1; the INSERT of row ``a`` (parent 1)
    waits on its foreign-key check; a later id (parent 2) commits; the poll
    must not deliver it past ``a``; once the parent is released, ``a`` is
    delivered, and nothing twice.
    """
    # Other tenants' rows make the tenant index the cheap plan for the filter.
    with engine.begin() as conn:
        conn.execute(
            table.insert(),
            [
                {**row, "id": old_ulid(30 - n / 100), "tenant": 2, "parent_id": 2}
                for n in range(200)
            ],
        )
    a_id = old_ulid(0)
    with bounded(engine.connect()) as holder:
        holder.execute(sa.select(parents.c.id).where(parents.c.id == 1).with_for_update())
        waiter = Waiter(engine, table, {**row, "id": a_id, "parent_id": 1})
        waiter.start()
        b_id = new_ulid()
        with engine.begin() as conn:
            conn.execute(table.insert(), {**row, "id": b_id, "parent_id": 2})
        assert a_id < b_id
        time.sleep(MARGIN.total_seconds() * 3)  # both ids are behind the horizon now
        thread, got = poll_in_thread(engine, stmt, table.c.id, None)
        thread.join(0.5)
        if engine.dialect.name == "mysql":
            # The locking read meets a's primary-key entry and waits for it.
            assert thread.is_alive(), f"the poll passed the waiting INSERT: {got}"
        else:
            thread.join(WAIT)
        holder.rollback()
        waiter.join()
        thread.join(WAIT + 5)
    assert not thread.is_alive()
    first = got[0]
    assert isinstance(first, Page), first
    time.sleep(MARGIN.total_seconds() * 3)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        second = paginate(
            conn, stmt, table.c.id, after=first.next_cursor, settle="auto", margin=MARGIN
        )
    assert [*first.items, *second.items] == [a_id, b_id]


def test_fk_wait_behind_a_secondary_index_is_delivered(engine: Engine, tables: None) -> None:
    stmt = sa.select(msgs.c.id).where(msgs.c.tenant == 1)
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn, pytest.raises(SettleError, match="SQLite"):
            paginate(conn, stmt, msgs.c.id, settle="auto")
        return
    fk_wait_feed(engine, msgs, stmt, {"tenant": 1})


def test_fk_wait_with_a_composite_primary_key(engine: Engine, tables: None) -> None:
    # PRIMARY KEY (tenant, id), the tenant fixed in the WHERE: the page reads
    # the primary key's range for that tenant, and still waits for the row.
    stmt = sa.select(tenant_msgs.c.id).where(tenant_msgs.c.tenant == 1, tenant_msgs.c.kind == 7)
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn, pytest.raises(SettleError, match="SQLite"):
            paginate(conn, stmt, tenant_msgs.c.id, settle="auto")
        return
    fk_wait_feed(engine, tenant_msgs, stmt, {"tenant": 1, "kind": 7})


def test_the_page_reads_through_the_primary_key(
    engine: Engine, tables: None, statements: list[str]
) -> None:
    class Base(DeclarativeBase):
        pass

    class Msg(Base):
        __table__ = msgs

    orm_alias = aliased(Msg)
    core_alias = msgs.alias("m")
    cases: list[tuple[sa.Select[Any], Any]] = [
        (sa.select(msgs.c.id).where(msgs.c.tenant == 1), msgs.c.id),
        (sa.select(Msg).where(Msg.tenant == 1), Msg.id),
        (sa.select(orm_alias), orm_alias.id),
        (sa.select(core_alias.c.id), core_alias.c.id),
    ]
    for stmt, column in cases:
        del statements[:]
        with Session(engine) as session:
            if engine.dialect.name == "sqlite":
                with pytest.raises(SettleError, match="SQLite"):
                    paginate(session, stmt, column, settle="auto")
                continue
            assert paginate(session, stmt, column, settle="auto").items == []
        page_sql = statements[-1]
        if engine.dialect.name == "mysql":
            assert "FORCE INDEX (PRIMARY)" in page_sql, page_sql
            assert "LOCK IN SHARE MODE" in page_sql, page_sql
        else:
            assert "FORCE INDEX" not in page_sql
            assert "FOR SHARE" not in page_sql


def test_auto_refuses_a_paging_column_outside_the_primary_key(
    engine: Engine, tables: None, statements: list[str]
) -> None:
    # Through the id's own unique index a slow INSERT may not be there yet;
    # through the primary key without the id, each poll would lock the table.
    subquery = sa.select(msgs.c.id).subquery()
    with engine.connect() as conn:
        if engine.dialect.name == "mysql":
            with pytest.raises(SettleError, match="primary key"):
                paginate(conn, sa.select(numbered.c.id), numbered.c.id, settle="auto")
            with pytest.raises(SettleError, match="subquery"):
                paginate(conn, sa.select(subquery.c.id), subquery.c.id, settle="auto")
            assert statements == []
        elif engine.dialect.name == "postgresql":
            # PostgreSQL watches the table's locks, whatever index serves the page.
            for stmt, column in (
                (sa.select(numbered.c.id), numbered.c.id),
                (sa.select(subquery.c.id), subquery.c.id),
            ):
                assert paginate(conn, stmt, column, settle="auto").items == []
        else:
            with pytest.raises(SettleError, match="SQLite"):
                paginate(conn, sa.select(numbered.c.id), numbered.c.id, settle="auto")
        # A fixed window needs no index: it reads no locks.
        page = paginate(conn, sa.select(numbered.c.id), numbered.c.id, settle=timedelta(0))
        assert page.items == []


# -- PostgreSQL: a writer whose transaction start is not tracked -----------------------


@contextlib.contextmanager
def open_writer(engine: Engine, setting: str | None) -> Iterator[tuple[Connection, ULID]]:
    """A connection that inserted a row and keeps its transaction open."""
    with bounded(engine.connect()) as writer:
        if setting is not None:
            writer.exec_driver_sql(setting)
            writer.commit()
        a_id = new_ulid()
        writer.execute(msgs.insert(), {"id": a_id, "parent_id": 1, "tenant": 1})
        yield writer, a_id


@pytest.mark.parametrize(
    "setting",
    [
        "SET track_activities = off",  # pg_stat_activity: state 'disabled', no xact_start
        None,  # tracking on until after the INSERT, then on again: see below
    ],
)
def test_an_untracked_writer_holds_the_horizon_back(
    engine: Engine, tables: None, setting: str | None
) -> None:
    stmt = sa.select(msgs.c.id)
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn, pytest.raises(SettleError, match="SQLite"):
            paginate(conn, stmt, msgs.c.id, settle="auto")
        return
    mysql = engine.dialect.name == "mysql"
    with open_writer(engine, None if mysql else setting) as (writer, a_id):
        if setting is None and not mysql:
            # Turned off and on again inside the transaction: 'idle in
            # transaction' with no xact_start, the lock still held.
            writer.exec_driver_sql("SET track_activities = off")
            writer.exec_driver_sql("SELECT 1")
            writer.exec_driver_sql("SET track_activities = on")
            writer.exec_driver_sql("SELECT 1")
        b_id = new_ulid()
        with engine.begin() as conn:
            conn.execute(msgs.insert(), {"id": b_id, "parent_id": 2, "tenant": 1})
        time.sleep(MARGIN.total_seconds() * 3)
        thread, got = poll_in_thread(engine, stmt, msgs.c.id, None)
        thread.join(0.5)
        if mysql:
            assert thread.is_alive()  # the locking read waits for a's row
        else:
            thread.join(WAIT)
            held = got[0]
            assert isinstance(held, Page), held
            assert held.items == []  # never b past the open a
        writer.commit()
        thread.join(WAIT)
    time.sleep(MARGIN.total_seconds() * 3)
    first = got[0]
    assert isinstance(first, Page), first
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        rest = paginate(
            conn, stmt, msgs.c.id, after=first.next_cursor, settle="auto", margin=MARGIN
        )
    assert [*first.items, *rest.items] == [a_id, b_id]


def test_the_async_page_reads_through_the_primary_key(backend: Backend, tables: None) -> None:
    # apaginate() runs the same plan: the same hint and locking read.
    stmt = sa.select(msgs.c.id).where(msgs.c.tenant == 1)

    async def page_sql(url: str) -> list[str]:
        engine = create_async_engine(url)
        try:
            with recording(engine.sync_engine) as seen:
                async with engine.connect() as conn:
                    page = await apaginate(conn, stmt, msgs.c.id, settle="auto", margin=MARGIN)
            assert page.items == []
            return seen
        finally:
            await engine.dispose()

    assert backend.async_urls
    for url in backend.async_urls:
        if backend.name == "sqlite":
            with pytest.raises(SettleError, match="SQLite"):
                asyncio.run(page_sql(url))
            continue
        last = asyncio.run(page_sql(url))[-1]
        assert ("FORCE INDEX (PRIMARY)" in last) == (backend.name == "mysql"), (url, last)
