"""guard_ulid_age(): an INSERT of an id older than max_age is refused before it is sent."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from conftest import Backend, recording
from sqlalchemy_ulid import (
    ULID,
    SettleError,
    StaleULIDError,
    ULIDType,
    guard_ulid_age,
    new_ulid,
    ulid_server_default,
)


class Base(DeclarativeBase):
    pass


class Event(Base):
    __tablename__ = "guard_events"
    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True, default=new_ulid)
    n: Mapped[int] = mapped_column(default=0)


class Child(Base):
    __tablename__ = "guard_children"
    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True, default=new_ulid)
    event_id: Mapped[ULID] = mapped_column(ULIDType(), sa.ForeignKey("guard_events.id"))


MAX_AGE = timedelta(milliseconds=500)


def aged(seconds: float) -> ULID:
    """An id whose time is ``seconds`` before now."""
    return ULID.from_parts(int((time.time() - seconds) * 1000), bytes(10))


@pytest.fixture
def tables(engine: Engine) -> Iterator[Engine]:
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    remove = guard_ulid_age(engine, MAX_AGE)
    try:
        yield engine
    finally:
        remove()
        Base.metadata.drop_all(engine)


@pytest.fixture
def bare(engine: Engine) -> Iterator[Engine]:
    """The tables without the fixture's guard: a test installs its own."""
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    try:
        yield engine
    finally:
        Base.metadata.drop_all(engine)


def count(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.scalar(sa.select(sa.func.count()).select_from(Event.__table__)) or 0


def test_fresh_ids_are_sent_and_stale_ones_refused_before_any_sql(tables: Engine) -> None:
    engine = tables
    with Session(engine) as session:
        session.add_all([Event(n=i) for i in range(3)])  # made at flush
        session.commit()
    stale = aged(5)
    with recording(engine) as sent, Session(engine) as session:
        session.add(Event(id=stale))
        with pytest.raises(StaleULIDError) as raised:
            session.flush()
        session.rollback()
    assert not any("INSERT" in statement.upper() for statement in sent)
    assert raised.value.ulid == stale
    assert timedelta(seconds=4.5) < raised.value.age < timedelta(seconds=60)
    assert isinstance(raised.value, SettleError)  # so a ValueError
    assert count(engine) == 3


@pytest.mark.parametrize(
    "form",
    [
        lambda u: u,
        str,
        lambda u: str(u).lower(),
        lambda u: u.to_uuid(),
        lambda u: u.bytes,
    ],
    ids=["ULID", "str", "lower", "uuid", "bytes"],
)
def test_every_id_form_is_checked_in_core_inserts(tables: Engine, form: object) -> None:
    engine = tables
    table = Event.__table__
    rows = [{"id": form(new_ulid()), "n": 1} for _ in range(3)]  # type: ignore[operator]
    with engine.begin() as conn:
        conn.execute(sa.insert(table), rows)  # executemany, all fresh
    late = [{"id": form(new_ulid()), "n": 2}, {"id": form(aged(3)), "n": 2}]  # type: ignore[operator]
    with pytest.raises(StaleULIDError), engine.begin() as conn:
        conn.execute(sa.insert(table), late)
    with pytest.raises(StaleULIDError), engine.begin() as conn:
        conn.execute(sa.insert(table).values(id=form(aged(3))))  # type: ignore[operator]
    assert count(engine) == 3


def test_foreign_keys_and_other_statements_are_never_refused(tables: Engine) -> None:
    engine = tables
    with Session(engine) as session:
        old = Event(id=new_ulid())
        session.add(old)
        session.commit()
        parent = old.id
    time.sleep(0.6)  # the parent is now older than MAX_AGE
    # A foreign key names an existing row: only the new row's own id counts.
    with Session(engine) as session:
        session.add(Child(event_id=parent))
        session.commit()
        # UPDATE, DELETE and SELECT with old ids pass.
        session.execute(sa.update(Event).where(Event.id == parent).values(n=7))
        assert session.execute(sa.select(Event.n).where(Event.id == parent)).scalar() == 7
        session.execute(sa.delete(Child).where(Child.event_id == parent))
        session.commit()
    # a new child with an old id of its own is refused
    child = Child(id=aged(5), event_id=parent)
    with Session(engine) as session:
        session.add(child)
        with pytest.raises(StaleULIDError):
            session.flush()


def test_a_multi_row_values_insert_is_checked(tables: Engine) -> None:
    engine = tables
    table = Event.__table__
    fresh = sa.insert(table).values([{"id": new_ulid(), "n": 1}, {"id": new_ulid(), "n": 2}])
    stale = sa.insert(table).values([{"id": new_ulid(), "n": 1}, {"id": aged(2), "n": 2}])
    with engine.begin() as conn:
        conn.execute(fresh)
    with pytest.raises(StaleULIDError), engine.begin() as conn:
        conn.execute(stale)
    assert count(engine) == 2


@pytest.mark.parametrize("name", ["postgresql", "mysql"])  # the servers with gen_ulid()
def test_ids_made_by_the_server_need_no_guard(backends: dict[str, Backend], name: str) -> None:
    engine = backends[name].engine
    if engine is None:
        pytest.fail(f"required backend missing: {backends[name].reason}", pytrace=False)
    table = sa.Table(
        "guard_server",
        sa.MetaData(),
        sa.Column("id", ULIDType(), primary_key=True, server_default=ulid_server_default()),
        sa.Column("n", sa.Integer),
    )
    table.metadata.drop_all(engine)
    from sqlalchemy_ulid import install_ulid_function

    with engine.begin() as conn:
        install_ulid_function(conn)
    table.metadata.create_all(engine)
    remove = guard_ulid_age(engine, timedelta(milliseconds=1), clock=lambda: time.time() + 60)
    try:
        with engine.begin() as conn:
            conn.execute(table.insert(), [{"n": 1}, {"n": 2}])
            assert conn.scalar(sa.select(sa.func.count()).select_from(table)) == 2
    finally:
        remove()
        table.metadata.drop_all(engine)


def test_a_skewed_clock_and_remove(tables: Engine) -> None:
    engine = tables
    remove = guard_ulid_age(engine, timedelta(seconds=1), clock=lambda: time.time() + 2)
    # this process's clock reads 2 s ahead: a fresh id looks 2 s old
    with pytest.raises(StaleULIDError), engine.begin() as conn:
        conn.execute(sa.insert(Event.__table__).values(id=new_ulid()))
    remove()
    remove()  # twice is harmless
    with engine.begin() as conn:
        conn.execute(sa.insert(Event.__table__).values(id=new_ulid()))
    assert count(engine) == 1


def test_bad_arguments_raise_before_anything_is_installed(engine: Engine) -> None:
    with pytest.raises(TypeError, match="max_age"):
        guard_ulid_age(engine, 0.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_age must be positive"):
        guard_ulid_age(engine, timedelta(seconds=-1))
    with pytest.raises(ValueError, match="max_age must be positive"):
        guard_ulid_age(engine, timedelta(0))  # would refuse every INSERT
    with pytest.raises(TypeError):
        guard_ulid_age("sqlite://")
    with pytest.raises(TypeError):
        guard_ulid_age(engine, clock=5)  # type: ignore[arg-type]
    assert not engine.dispatch.before_cursor_execute


def test_an_async_engine_is_guarded(backend: Backend) -> None:
    import asyncio

    engine = create_async_engine(backend.async_urls[0])
    table = sa.Table("guard_async", sa.MetaData(), sa.Column("id", ULIDType(), primary_key=True))

    async def run() -> None:
        remove = guard_ulid_age(engine, MAX_AGE)
        try:
            async with engine.begin() as conn:
                await conn.run_sync(table.metadata.drop_all)
                await conn.run_sync(table.metadata.create_all)
                await conn.execute(table.insert().values(id=new_ulid()))
            with pytest.raises(StaleULIDError):
                async with engine.begin() as conn:
                    await conn.execute(table.insert().values(id=aged(5)))
            async with engine.begin() as conn:
                assert await conn.scalar(sa.select(sa.func.count()).select_from(table)) == 1
                await conn.run_sync(table.metadata.drop_all)
        finally:
            remove()
            await engine.dispose()

    asyncio.run(run())


def _jumping_clock(reads: list[float]) -> Callable[[], float]:
    def clock() -> float:
        # this process's clock jumps 10 s after the first batch was checked:
        # a slow network between batches, seen from the guard
        reads.append(time.time())
        return reads[-1] + (10 if len(reads) > 1 else 0)

    return clock


def test_later_batches_of_rising_ids_are_not_refused(bare: Engine) -> None:
    # Ids made at flush rise in the order the rows are sent: a later batch
    # sits behind rows the first one wrote, uncommitted, which a reader's
    # scan waits for. It is sent, however long the first batch took.
    engine = bare
    reads: list[float] = []
    remove = guard_ulid_age(engine, timedelta(seconds=5), clock=_jumping_clock(reads))
    batches: list[object] = []

    def sent_batch(*_: object) -> None:
        batches.append(None)

    stmt = sa.insert(Event.__table__).returning(Event.__table__.c.id)
    sa.event.listen(engine, "before_cursor_execute", sent_batch)
    try:
        with engine.begin() as conn:
            sent = conn.execute(stmt, [{"n": i} for i in range(2500)]).all()
    finally:
        sa.event.remove(engine, "before_cursor_execute", sent_batch)
        remove()
    assert len(sent) == 2500 == count(engine)
    assert len(batches) > 1  # sent in several batches
    assert len(reads) == 1  # checked once, before the first


def test_later_batches_of_ids_out_of_order_are_checked(bare: Engine) -> None:
    engine = bare
    reads: list[float] = []
    remove = guard_ulid_age(engine, timedelta(seconds=5), clock=_jumping_clock(reads))
    stmt = sa.insert(Event.__table__).returning(Event.__table__.c.id)
    falling = sorted((new_ulid() for _ in range(2500)), reverse=True)
    rows = [{"id": ident, "n": i} for i, ident in enumerate(falling)]  # > 1 batch anywhere
    try:
        with pytest.raises(StaleULIDError), engine.begin() as conn:
            conn.execute(stmt, rows)
    finally:
        remove()
    assert len(reads) >= 2  # refused at a later batch, not the first
    assert count(engine) == 0  # the transaction rolled back


def test_the_default_margin_is_each_databases_own(engine: Engine) -> None:
    from sqlalchemy_ulid._settle import DEFAULT_MARGIN, margin_for

    # PostgreSQL: 0.2 s; MariaDB (gap locks can hold an INSERT before its
    # row exists) and SQLite (no "auto"): 1 s. An explicit margin is kept.
    expected = 0.2 if engine.dialect.name == "postgresql" else 1.0
    assert margin_for(DEFAULT_MARGIN, engine.dialect).total_seconds() == expected
    assert margin_for(timedelta(seconds=3), engine.dialect) == timedelta(seconds=3)
    assert "database's default" in repr(DEFAULT_MARGIN)
    # the guard's default max_age is that margin: an id 0.5 s old passes
    # on MariaDB and SQLite, and is refused on PostgreSQL
    remove = guard_ulid_age(engine)
    try:
        Base.metadata.create_all(engine)
        insert = sa.insert(Event.__table__).values(id=aged(0.5))
        if expected < 0.5:
            with pytest.raises(StaleULIDError), engine.begin() as conn:
                conn.execute(insert)
        else:
            with engine.begin() as conn:
                conn.execute(insert)
    finally:
        remove()
        Base.metadata.drop_all(engine)
