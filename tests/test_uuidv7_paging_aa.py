"""advanced-alchemy's UUIDv7Base and GUID in pagination, feeds and partitions."""

from __future__ import annotations

import asyncio
import random
import re
import uuid
from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone
from typing import Any

import pytest

# advanced-alchemy (tests-integrations) supports newer SQLAlchemy releases only:
# the floor job runs without it (test_uuidv7_paging.py covers the rest there).
pytest.importorskip("advanced_alchemy")

import sqlalchemy as sa
from advanced_alchemy.base import UUIDv7Base
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Mapped, Session

from conftest import Backend
from sqlalchemy_ulid import (
    ULID,
    InvalidULID,
    apaginate,
    create_partitions,
    created_since,
    paginate,
    partition_ddl,
)
from sqlalchemy_ulid._keys import Keys, keys_of, uuid7_min_at
from strategies import v7
from test_timerange import Explain

T = 1_712_345_678_901  # 2024-04-05T19:34:38.901Z


class Ticket(UUIDv7Base):
    __tablename__ = "uuidv7_paged_tickets"

    seat: Mapped[int]


class Booking(UUIDv7Base):
    __tablename__ = "uuidv7_part_bookings"
    __table_args__ = {"postgresql_partition_by": "RANGE (id)"}  # noqa: RUF012

    day: Mapped[int]


@pytest.fixture
def tickets(engine: Engine) -> Iterator[list[uuid.UUID]]:
    """23 tickets, ids made by the model's own uuid7() default and fixed ones."""
    table = Ticket.__table__
    table.drop(engine, checkfirst=True)  # type: ignore[attr-defined]
    table.create(engine)  # type: ignore[attr-defined]
    rng = random.Random(11)
    with Session(engine) as session:
        session.add_all([Ticket(seat=-n) for n in range(1, 4)])  # uuid7() of now
        session.add_all([Ticket(id=v7(T + n // 2, rng.getrandbits(74)), seat=n) for n in range(20)])
        session.commit()
        ids = session.scalars(sa.select(Ticket.id).order_by(Ticket.id)).all()
    yield list(ids)
    table.drop(engine)  # type: ignore[attr-defined]


def test_uuidv7base_pages_forward_and_backward(engine: Engine, tickets: list[uuid.UUID]) -> None:
    assert keys_of(Ticket.id) == Keys("uuid")
    assert len(tickets) == 23
    with Session(engine) as session:
        forward: list[uuid.UUID] = []
        cursor: str | None = None
        pages = 0
        while True:
            page = paginate(session, sa.select(Ticket), Ticket.id, after=cursor, limit=5)
            pages += 1
            forward += [t.id for t in page.items]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor.upper()  # as some clients send it back
            assert len(page.next_cursor) == 36
        backward: list[uuid.UUID] = []
        cursor = "ffffffff-ffff-ffff-ffff-ffffffffffff"
        while cursor is not None:
            page = paginate(session, sa.select(Ticket), Ticket.id, before=cursor, limit=7)
            backward = [t.id for t in page.items] + backward
            cursor = page.prev_cursor
        newest = paginate(session, sa.select(Ticket), Ticket.id, limit=3, descending=True)
        with pytest.raises(InvalidULID):
            paginate(session, sa.select(Ticket), Ticket.id, after=str(ULID.from_uuid(tickets[0])))
    assert pages == 5
    assert forward == backward == tickets
    assert sorted(t.seat for t in newest.items) == [-3, -2, -1]  # made now by uuid7(): the newest


def test_uuidv7base_async(backend: Backend, engine: Engine, tickets: list[uuid.UUID]) -> None:
    async def run(url: str) -> list[uuid.UUID]:
        async_engine = create_async_engine(url)
        try:
            async with AsyncSession(async_engine) as session:
                seen: list[uuid.UUID] = []
                cursor = None
                while True:
                    page = await apaginate(
                        session, sa.select(Ticket), Ticket.id, after=cursor, limit=6
                    )
                    seen += [uuid.UUID(str(t.id)) for t in page.items]
                    if page.next_cursor is None:
                        return seen
                    cursor = page.next_cursor
        finally:
            await async_engine.dispose()

    for url in backend.async_urls:
        assert asyncio.run(run(url)) == tickets, url


def test_uuidv7base_settle_tails(engine: Engine, tickets: list[uuid.UUID]) -> None:
    # The three made by uuid7() just now are newer than the horizon; the rest
    # are from 2024.
    with Session(engine.execution_options(isolation_level="AUTOCOMMIT")) as session:
        page = paginate(
            session, sa.select(Ticket), Ticket.id, settle=timedelta(minutes=10), limit=100
        )
    assert [t.id for t in page.items] == tickets[:20]
    assert page.next_cursor == str(tickets[19])
    assert not page.has_more


def test_uuidv7base_index_serves_the_page(
    backend: Backend, engine: Engine, tickets: list[uuid.UUID]
) -> None:
    sent: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        sent.append((statement, parameters))

    with engine.connect() as conn:
        sa.event.listen(conn, "before_cursor_execute", capture)
        page = paginate(conn, sa.select(Ticket.__table__), Ticket.id, after=str(tickets[5]))
        sa.event.remove(conn, "before_cursor_execute", capture)
        assert len(page.items) == 17
        ((statement, parameters),) = sent
        if backend.name == "postgresql":
            conn.exec_driver_sql("SET enable_seqscan = off")  # 23 rows: make the choice visible
        prefix = "EXPLAIN QUERY PLAN " if backend.name == "sqlite" else "EXPLAIN "
        found = conn.exec_driver_sql(prefix + statement, parameters).all()
        if backend.name == "postgresql":
            conn.exec_driver_sql("RESET enable_seqscan")
        conn.rollback()
    plan = " ".join(str(cell) for row in found for cell in row)
    if backend.name == "postgresql":
        assert "Index Scan using pk_uuidv7_paged_tickets" in plan, plan
        assert re.search(r"Index Cond: \(id >= '[0-9a-f-]{36}'::uuid\)", plan), plan
    elif backend.name == "mysql":
        (only,) = found
        assert (only[3], only[5]) == ("range", "PRIMARY"), found  # type, key
    else:
        assert re.search(
            r"SEARCH uuidv7_paged_tickets USING (INDEX \w+|PRIMARY KEY) \(id>\?\)", plan
        )


DAY1 = datetime(2024, 4, 1, tzinfo=timezone.utc)


def test_uuidv7base_partitions(backend: Backend, engine: Engine, statements: list[str]) -> None:
    ddl = partition_ddl(Booking.id, date(2024, 4, 1), date(2024, 4, 2))  # type: ignore[arg-type]
    assert f"'{uuid7_min_at(DAY1)}'" in ddl[0]
    table = Booking.__table__
    if backend.name != "postgresql":
        statements.clear()
        with engine.connect() as conn, pytest.raises(ValueError, match="PostgreSQL feature"):
            create_partitions(conn, table.c.id, date(2024, 4, 1), date(2024, 4, 4))  # type: ignore[attr-defined]
        assert statements == []
        return
    table.drop(engine, checkfirst=True)  # type: ignore[attr-defined]
    try:
        with engine.begin() as conn:
            table.create(conn)  # type: ignore[attr-defined]
            created = create_partitions(conn, table.c.id, date(2024, 4, 1), date(2024, 4, 4))  # type: ignore[attr-defined]
            assert len(created) == 3
        with Session(engine) as session:
            for day in range(3):
                start_ms = ULID.min_at(DAY1 + timedelta(days=day)).timestamp_ms
                session.add(Booking(id=v7(start_ms, 0), day=day))
                session.add(Booking(id=v7(start_ms + 86_400_000 - 1, (1 << 74) - 1), day=day))
            session.commit()
            placed = session.execute(
                sa.text(
                    "SELECT tableoid::regclass::text, min(day), max(day), count(*) "
                    "FROM uuidv7_part_bookings GROUP BY 1 ORDER BY 1"
                )
            ).all()
            assert [tuple(row) for row in placed] == [
                (f"uuidv7_part_bookings_p2024040{d + 1}", d, d, 2) for d in range(3)
            ]
            stmt = sa.select(Booking.day).where(created_since(Booking.id, DAY1 + timedelta(days=2)))
            plan = "\n".join(row[0] for row in session.execute(Explain(stmt, "EXPLAIN")))
            assert "uuidv7_part_bookings_p20240403" in plan, plan
            assert "uuidv7_part_bookings_p20240401" not in plan, plan
            assert sorted(session.scalars(stmt)) == [2, 2]
            # a new booking made now by uuid7() has no partition yet
            session.add(Booking(day=9))
            with pytest.raises(sa.exc.IntegrityError, match="no partition"):
                session.commit()
    finally:
        table.drop(engine, checkfirst=True)  # type: ignore[attr-defined]
