"""UUIDv7 columns in pagination, feeds and partitions (issue 13, item 1).

No advanced-alchemy here, so the floor job runs all of it; its ``GUID`` and
``UUIDv7Base`` are in test_uuidv7_paging_aa.py.
"""

from __future__ import annotations

import asyncio
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import date, datetime, timedelta, timezone
from functools import partial
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from sqlalchemy.types import TypeDecorator

from conftest import Backend
from sqlalchemy_ulid import (
    ULID,
    InvalidULID,
    Page,
    SettleError,
    after,
    apaginate,
    before,
    create_partitions,
    created_since,
    follow,
    paginate,
    partition_ddl,
)
from sqlalchemy_ulid._keys import TimeOrderError, keys_of, uuid7_min_at
from strategies import v7
from test_timerange import Explain

T = 1_712_345_678_901  # 2024-04-05T19:34:38.901Z


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class DecoratedUuid(TypeDecorator[uuid.UUID]):
    """A project's own decorator over sa.Uuid."""

    impl = sa.Uuid
    cache_ok = True


TYPES: dict[str, Callable[[], sa.types.TypeEngine[Any]]] = {
    "Uuid": sa.Uuid,
    "Uuid(as_uuid=False)": lambda: sa.Uuid(as_uuid=False),
    "decorated Uuid": DecoratedUuid,
}


def make_table(name: str, type_: sa.types.TypeEngine[Any], **kw: Any) -> sa.Table:
    return sa.Table(
        name,
        sa.MetaData(),
        sa.Column("id", type_, primary_key=True),
        sa.Column("kind", sa.String(10), nullable=False),
        **kw,
    )


@pytest.fixture(params=list(TYPES))
def table(request: pytest.FixtureRequest, engine: Engine) -> Iterator[sa.Table]:
    table = make_table("uuidv7_pages", TYPES[request.param]())
    table.drop(engine, checkfirst=True)
    table.create(engine)
    yield table
    table.drop(engine)


def seed(engine: Engine, table: sa.Table, count: int = 40) -> list[str]:
    """Insert ``count`` UUIDv7 rows in random order, several per millisecond;
    return the canonical text of the "keep" rows' ids, in id order."""
    rng = random.Random(count)
    ids = [v7(T + n // 3, rng.getrandbits(74)) for n in range(count)]
    rows = [{"id": u, "kind": rng.choice(["keep", "keep", "drop"])} for u in ids]
    rng.shuffle(rows)
    parse = keys_of(table.c.id).parse
    with engine.begin() as conn:
        conn.execute(table.insert(), [{**row, "id": parse(row["id"])} for row in rows])
    return sorted(str(row["id"]) for row in rows if row["kind"] == "keep")


def text(value: Any) -> str:
    """A returned id (uuid.UUID, or text for as_uuid=False) as canonical text."""
    return str(uuid.UUID(str(value)))


def from_url(link: str | None, name: str) -> str | None:
    """The cursor a client sends back: the query parameter of a link, as a str."""
    if link is None:
        return None
    return parse_qs(urlsplit(link).query)[name][0]


def link(cursor: str | None, name: str) -> str | None:
    return None if cursor is None else "/orders?" + urlencode({name: cursor, "limit": 4})


# -- paging forward and backward through text cursors from URLs ---------------------


FIRST = "00000000-0000-0000-0000-000000000000"  # before every id
LAST = "ffffffff-ffff-ffff-ffff-ffffffffffff"  # after every id


def walk(
    fetch: Callable[..., Page[Any]], *, backward: bool, start: str | None = None
) -> list[list[str]]:
    """Follow the links from one end to the other; return the pages in walk order."""
    name = "before" if backward else "after"
    pages: list[list[str]] = []
    next_link = link(start, name)
    while True:
        page = fetch(**{name: from_url(next_link, name)})
        pages.append([text(item) for item in page.items])
        cursor = page.prev_cursor if backward else page.next_cursor
        assert page.has_more == (cursor is not None)
        if cursor is None:
            return pages
        assert re.fullmatch(
            r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", cursor
        )
        next_link = link(cursor, name)
        assert len(pages) < 100, "the walk does not end"


def test_pages_forward_and_backward_with_text_cursors(engine: Engine, table: sa.Table) -> None:
    ids = seed(engine, table)
    keep = sa.select(table.c.id).where(table.c.kind == "keep")
    for size in (1, 4, 7):
        for descending in (False, True):
            expected = ids[::-1] if descending else ids
            with Session(engine) as session:
                fetch = partial(
                    paginate, session, keep, table.c.id, limit=size, descending=descending
                )
                forward = walk(fetch, backward=False)
                # backward from the far end (past every id in display order)
                backward = walk(fetch, backward=True, start=FIRST if descending else LAST)
            assert len(forward) >= 3
            assert [i for page in forward for i in page] == expected, (size, descending)
            assert [i for page in reversed(backward) for i in page] == expected, (size, descending)
            assert all(0 < len(page) <= size for page in forward)


def test_page_cursors_are_the_columns_text_and_the_neighbours_are_found(
    engine: Engine, table: sa.Table
) -> None:
    ids = seed(engine, table, 20)
    keep = sa.select(table.c.id).where(table.c.kind == "keep")
    with engine.connect() as conn:
        first = paginate(conn, keep, table.c.id, limit=3)
        second = paginate(conn, keep, table.c.id, after=first.next_cursor, limit=3)
        # an upper-case cursor (some clients do that) names the same row
        upper = paginate(conn, keep, table.c.id, after=first.next_cursor.upper(), limit=3)  # type: ignore[union-attr]
        back = paginate(conn, keep, table.c.id, before=second.prev_cursor, limit=3)
        # a cursor whose row is gone (or never existed): the EXISTS probe
        gone = str(v7(T - 1, 0))
        from_gone = paginate(conn, keep, table.c.id, after=gone, limit=3)
        as_uuid = paginate(conn, keep, table.c.id, after=uuid.UUID(ids[2]), limit=3)
        as_ulid = paginate(conn, keep, table.c.id, after=ULID.from_uuid(uuid.UUID(ids[2])), limit=3)
    assert (first.prev_cursor, first.next_cursor) == (None, ids[2])
    assert [text(i) for i in second.items] == ids[3:6]
    assert second.prev_cursor == ids[3]
    assert upper == second
    assert [text(i) for i in back.items] == ids[:3]
    assert (back.prev_cursor, back.next_cursor) == (None, ids[2])
    assert [text(i) for i in from_gone.items] == ids[:3]
    assert from_gone.prev_cursor is None  # nothing lies before it
    assert as_uuid == as_ulid == second


def test_orm_entities_and_clauses(engine: Engine, table: sa.Table) -> None:
    ids = seed(engine, table, 12)
    cursor = ids[1]
    with engine.connect() as conn:
        later = conn.scalars(
            sa.select(table.c.id)
            .where(after(table.c.id, cursor))
            .where(before(table.c.id, ids[4]))
            .where(table.c.kind == "keep")
            .order_by(table.c.id)
        ).all()
    assert [text(i) for i in later] == ids[2:4]


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "uuidv7_orm_orders"

    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid(), primary_key=True)
    total: Mapped[int]


@pytest.fixture
def orders(engine: Engine) -> Iterator[type[Order]]:
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    yield Order
    Base.metadata.drop_all(engine)


def test_orm_model_pages_through_three_pages(engine: Engine, orders: type[Order]) -> None:
    made = [v7(T + n, n) for n in range(10)]
    with Session(engine) as session:
        session.add_all([Order(id=u, total=n) for n, u in enumerate(made)])
        session.commit()
        totals, cursor, pages = [], None, 0
        while True:
            page = paginate(session, sa.select(Order), Order.id, after=cursor, limit=4)
            pages += 1
            totals += [o.total for o in page.items]
            cursor = page.next_cursor
            if cursor is None:
                break
        newest = paginate(session, sa.select(Order), Order.id, limit=3, descending=True)
    assert pages == 3
    assert totals == list(range(10))
    assert [o.total for o in newest.items] == [9, 8, 7]
    assert newest.next_cursor == str(made[7])


def test_async_twin(backend: Backend, engine: Engine, table: sa.Table) -> None:
    ids = seed(engine, table, 15)
    keep = sa.select(table.c.id).where(table.c.kind == "keep")

    async def run(url: str) -> tuple[list[str], str, list[str]]:
        async_engine = create_async_engine(url)
        try:
            async with AsyncSession(async_engine) as session:
                seen, cursor = [], None
                while True:
                    page = await apaginate(session, keep, table.c.id, after=cursor, limit=3)
                    seen += [text(i) for i in page.items]
                    if page.next_cursor is None:
                        break
                    cursor = page.next_cursor
            async with async_engine.connect() as conn:
                back = await apaginate(conn, keep, table.c.id, before=cursor, limit=2)
            assert cursor is not None
            return seen, cursor, [text(i) for i in back.items]
        finally:
            await async_engine.dispose()

    for url in backend.async_urls:
        seen, last_cursor, back = asyncio.run(run(url))
        assert seen == ids, url  # asyncpg's own UUID class included
        at = ids.index(last_cursor)
        assert back == ids[at - 2 : at], url


# -- malformed cursors: InvalidULID before any SQL -----------------------------------

BAD_CURSORS = [
    "",  # empty is malformed, not "no cursor"
    "018eafc1-8435-7000-8000-00000000000",  # 35 characters
    "018eafc1-8435-7000-8000-0000000000000",  # 37 characters
    "018eafc184357000800000000000000000000",  # no dashes, padded to 36
    "018eafc1843570008000000000000000",  # 32 hex digits: not the canonical form
    "{018eafc1-8435-7000-8000-000000000000}",  # braces
    "urn:uuid:018eafc1-8435-7000-8000-000000000000",  # URN form
    "018eafc1-8435-7000-8000-00000000000g",  # not hex
    "018eafc1-8435-7000-8000-000000000000\n",  # trailing newline
    "01HTQW311N1KR5G0Y75M3EF00H",  # a ULID's text, not this column's form
    "' OR 1=1 --",  # SQL injection
]


@pytest.mark.parametrize("cursor", BAD_CURSORS)
def test_malformed_cursors_raise_before_sql(
    engine: Engine, table: sa.Table, statements: list[str], cursor: str
) -> None:
    statements.clear()
    keep = sa.select(table.c.id)
    with pytest.raises(InvalidULID):
        after(table.c.id, cursor)
    with pytest.raises(InvalidULID):
        before(table.c.id, cursor)
    with Session(engine) as session:
        with pytest.raises(InvalidULID):
            paginate(session, keep, table.c.id, after=cursor)
        with pytest.raises(InvalidULID):
            paginate(session, keep, table.c.id, before=cursor, descending=True)
        with pytest.raises(InvalidULID):
            paginate(session, keep, table.c.id, after=cursor, settle=timedelta(seconds=1))
    with pytest.raises(InvalidULID):
        next(follow(engine, keep, table.c.id, after=cursor, settle=timedelta(0)))
    assert statements == []


def test_cursor_of_wrong_type_raises_before_sql(
    engine: Engine, table: sa.Table, statements: list[str]
) -> None:
    statements.clear()
    with pytest.raises(TypeError, match=r"uuid\.UUID or its 36-character text"):
        after(table.c.id, 12)  # type: ignore[arg-type]
    with Session(engine) as session, pytest.raises(TypeError):
        paginate(session, sa.select(table.c.id), table.c.id, after=b"\x01" * 16)  # type: ignore[arg-type]
    assert statements == []


def old_mariadb() -> Any:
    dialect = mysql.dialect()
    dialect.is_mariadb = True
    dialect.server_version_info = (10, 11, 4)
    dialect.supports_native_uuid = True
    return dialect


def test_a_uuid_storage_out_of_time_order_is_refused_when_compiled() -> None:
    t = sa.table("t", sa.column("id", sa.Uuid()))
    cursor = str(v7(T, 0))
    for clause in (after(t.c.id, cursor), before(t.c.id, cursor)):
        with pytest.raises(TimeOrderError, match=r"10\.11\.4 native uuid type"):
            str(clause.compile(dialect=old_mariadb()))
    # the same clause on PostgreSQL, and 16-byte binary storage there, are fine
    assert "t.id > " in str(after(t.c.id, cursor).compile(dialect=postgresql.dialect()))  # type: ignore[no-untyped-call]
    binary = sa.table("t", sa.column("id", sa.Uuid(native_uuid=False))).c.id
    assert "t.id > " in str(after(binary, cursor).compile(dialect=old_mariadb()))


# -- the index serves a page ---------------------------------------------------------


def test_index_serves_the_page_query(
    backend: Backend, engine: Engine, statements: list[str]
) -> None:
    table = make_table("uuidv7_explained", sa.Uuid())
    table.drop(engine, checkfirst=True)
    table.create(engine)
    try:
        rng = random.Random(5)
        rows = [{"id": v7(T + n, rng.getrandbits(74)), "kind": "k"} for n in range(2000)]
        sent: list[tuple[str, Any]] = []

        def capture(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
            sent.append((statement, parameters))

        with engine.begin() as conn:
            conn.execute(table.insert(), rows)
            if backend.name == "postgresql":
                conn.exec_driver_sql("ANALYZE uuidv7_explained")
            elif backend.name == "mysql":
                conn.exec_driver_sql("ANALYZE TABLE uuidv7_explained").all()
        cursor = str(rows[1000]["id"])
        with engine.connect() as conn:
            sa.event.listen(conn, "before_cursor_execute", capture)
            page = paginate(conn, sa.select(table), table.c.id, after=cursor, limit=10)
            sa.event.remove(conn, "before_cursor_execute", capture)
            assert [row.id for row in page.items] == [r["id"] for r in rows[1001:1011]]
            ((statement, parameters),) = sent  # the cursor's row exists: one query
            prefix = "EXPLAIN QUERY PLAN " if backend.name == "sqlite" else "EXPLAIN "
            found = conn.exec_driver_sql(prefix + statement, parameters).all()
        text_plan = " ".join(str(cell) for row in found for cell in row)
        if backend.name == "postgresql":
            assert re.search(r"Index (Only )?Scan using uuidv7_explained_pkey", text_plan), (
                text_plan
            )
            assert "Seq Scan" not in text_plan, text_plan
            assert "Sort" not in text_plan, text_plan
            assert re.search(r"Index Cond: \(id >= '[0-9a-f-]{36}'::uuid\)", text_plan), text_plan
        elif backend.name == "mysql":
            (only,) = found
            fields = ["id", "select_type", "table", "type", "possible_keys", "key"]
            row = dict(zip(fields, only[: len(fields)], strict=True))
            assert (row["type"], row["key"]) == ("range", "PRIMARY"), found
            assert "filesort" not in text_plan, found
        else:
            assert re.search(
                r"SEARCH uuidv7_explained USING (INDEX \w+|PRIMARY KEY) \(id>\?\)", text_plan
            ), text_plan
            assert "TEMP B-TREE" not in text_plan, text_plan
    finally:
        table.drop(engine)


# -- tailing a UUIDv7 table with settle= ---------------------------------------------


def test_settle_tails_a_uuidv7_table(backend: Backend, engine: Engine, table: sa.Table) -> None:
    now = now_ms()
    parse = keys_of(table.c.id).parse
    old = sorted(v7(now - 60_000 + n, n) for n in range(5))  # settled long ago
    fresh = [v7(now + 5_000, 1), v7(now + 3_600_000, 2)]  # not settled for a while
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": parse(u), "kind": "k"} for u in old + fresh])
    stmt = sa.select(table.c.id)
    with engine.connect() as base:
        conn = base.execution_options(isolation_level="AUTOCOMMIT")
        first = paginate(conn, stmt, table.c.id, settle=timedelta(seconds=2), limit=3)
        rest = paginate(
            conn, stmt, table.c.id, after=first.next_cursor, settle=timedelta(seconds=2), limit=3
        )
        caught_up = paginate(
            conn, stmt, table.c.id, after=rest.next_cursor, settle=timedelta(seconds=2)
        )
        if backend.name == "sqlite":
            with pytest.raises(SettleError, match="nothing to read on SQLite"):
                paginate(conn, stmt, table.c.id, settle="auto")
            auto = None
        else:
            auto = paginate(conn, stmt, table.c.id, settle="auto", limit=10)
    assert [text(i) for i in first.items] == [str(u) for u in old[:3]]
    assert (first.next_cursor, first.has_more) == (str(old[2]), True)
    assert [text(i) for i in rest.items] == [str(u) for u in old[3:]]
    assert rest.next_cursor == str(old[-1])
    # nothing settled beyond: the place is kept, the fresh rows wait
    assert (caught_up.items, caught_up.next_cursor, caught_up.has_more) == ([], str(old[-1]), False)
    if auto is not None:
        assert [text(i) for i in auto.items] == [str(u) for u in old]


def test_the_horizon_is_the_zero_random_uuidv7_of_its_millisecond(
    engine: Engine, table: sa.Table
) -> None:
    # The data query keeps the rows strictly below the smallest UUIDv7 of
    # the horizon's millisecond: read the bound it sent to the server.
    sent: list[Any] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        values = parameters.values() if isinstance(parameters, dict) else parameters
        sent.append([v for v in values if not isinstance(v, int)])

    settle = timedelta(seconds=30)
    with engine.connect() as base:
        conn = base.execution_options(isolation_level="AUTOCOMMIT")
        sa.event.listen(conn, "before_cursor_execute", capture)
        low = now_ms() - 30_000
        page = paginate(conn, sa.select(table.c.id), table.c.id, settle=settle)
        high = now_ms() - 30_000
    assert page.items == []
    (bound,) = [uuid.UUID(str(value)) for value in sent[-1]]  # the data query's only key
    assert (bound.version, bound.variant) == (7, uuid.RFC_4122)
    assert bound == uuid7_min_at(bound.int >> 80)  # zero random bits
    assert low - 1000 <= bound.int >> 80 <= high + 1000  # server clock, same host


def test_follow_a_uuidv7_table(engine: Engine, table: sa.Table) -> None:
    parse = keys_of(table.c.id).parse
    start = now_ms() - 10_000
    first = [v7(start + n, n) for n in range(4)]
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": parse(u), "kind": "k"} for u in first])
    stop = threading.Event()
    seen: list[str] = []
    cursors: list[str | None] = []

    def write_later() -> None:
        with engine.begin() as conn:
            later = [v7(now_ms() - 5, n) for n in range(3)]
            conn.execute(table.insert(), [{"id": parse(u), "kind": "k"} for u in later])

    writer = threading.Timer(0.2, write_later)
    writer.start()
    try:
        deadline = time.monotonic() + 10
        for page in follow(
            engine,
            sa.select(table.c.id),
            table.c.id,
            after=str(first[0]),
            settle=timedelta(0),
            limit=2,
            interval=0.05,
            stop=stop,
        ):
            seen += [text(i) for i in page.items]
            cursors.append(page.next_cursor)
            if len(seen) == 6 or time.monotonic() > deadline:
                stop.set()
    finally:
        writer.join()
    assert seen[:3] == [str(u) for u in first[1:]]
    assert len(seen) == len(set(seen)) == 6
    assert seen == sorted(seen)
    assert cursors[-1] == seen[-1]


# -- PostgreSQL partitions on a uuid column ------------------------------------------

DAY1 = datetime(2024, 4, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "type_", [sa.Uuid(), sa.Uuid(as_uuid=False), postgresql.UUID(), DecoratedUuid()], ids=repr
)
def test_partitions_on_a_uuid_column(
    backend: Backend, engine: Engine, statements: list[str], type_: Any
) -> None:
    table = make_table("uuidv7_parts", type_, postgresql_partition_by="RANGE (id)")
    ddl = partition_ddl(table.c.id, date(2024, 4, 1), date(2024, 4, 3))
    day2 = uuid7_min_at(DAY1 + timedelta(days=1))
    assert f"'{day2}'" in ddl[0] or f"'{day2.hex}'" in ddl[0]
    if backend.name != "postgresql":
        statements.clear()
        with engine.connect() as conn, pytest.raises(ValueError, match="PostgreSQL feature"):
            create_partitions(conn, table.c.id, date(2024, 4, 1), date(2024, 4, 6))
        assert statements == []
        return
    parse = keys_of(table.c.id).parse
    table.drop(engine, checkfirst=True)
    try:
        with engine.begin() as conn:
            table.create(conn)
            created = create_partitions(conn, table.c.id, date(2024, 4, 1), date(2024, 4, 4))
            again = create_partitions(conn, table.c.id, date(2024, 4, 1), date(2024, 4, 6))
            assert (len(created), len(again)) == (3, 2)
            rows = []
            for day in range(5):
                start_ms = ULID.min_at(DAY1 + timedelta(days=day)).timestamp_ms
                # each day's first and last UUIDv7: the last one of a day
                # must not spill into the next day's partition
                rows.append({"id": parse(v7(start_ms, 0)), "kind": f"d{day}"})
                rows.append(
                    {"id": parse(v7(start_ms + 86_400_000 - 1, (1 << 74) - 1)), "kind": f"d{day}"}
                )
            conn.execute(table.insert(), rows)
            placed = conn.execute(
                sa.text(
                    "SELECT tableoid::regclass::text, min(kind), max(kind), count(*) "
                    "FROM uuidv7_parts GROUP BY 1 ORDER BY 1"
                )
            ).all()
            assert [tuple(row) for row in placed] == [
                (f"uuidv7_parts_p2024040{day + 1}", f"d{day}", f"d{day}", 2) for day in range(5)
            ]
            since = created_since(table.c.id, DAY1 + timedelta(days=3, hours=12))
            stmt = sa.select(table.c.kind).where(since)
            plan = "\n".join(row[0] for row in conn.execute(Explain(stmt, "EXPLAIN")))
            assert "uuidv7_parts_p20240404" in plan, plan
            assert "uuidv7_parts_p20240405" in plan, plan
            for pruned in ("p20240401", "p20240402", "p20240403"):
                assert f"uuidv7_parts_{pruned}" not in plan, plan
            assert sorted(conn.scalars(stmt)) == ["d3", "d4", "d4"]
    finally:
        table.drop(engine, checkfirst=True)
