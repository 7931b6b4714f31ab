"""Keyset pagination: after / before / paginate / apaginate on the three servers."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from conftest import Backend
from sqlalchemy_ulid import (
    ULID,
    InvalidULID,
    Page,
    PaginationError,
    ULIDType,
    after,
    apaginate,
    before,
    new_ulid,
    paginate,
)

MS = 1_712_345_678_901
FIRST = "00000000000000000000000000"  # smaller than every id
LAST = "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"  # larger than every id


class Base(DeclarativeBase):
    pass


class Event(Base):
    __tablename__ = "pagination_events"

    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True, default=new_ulid)
    kind: Mapped[str] = mapped_column(sa.String(10))


events = Event.__table__


@pytest.fixture
def table(engine: Engine) -> Iterator[sa.Table]:
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    yield events  # type: ignore[misc]
    Base.metadata.drop_all(engine)


def seed(engine: Engine, count: int = 40) -> list[ULID]:
    """Insert ``count`` rows in random order, three per millisecond; return the
    ids of the rows whose kind is "keep" (the caller's WHERE), in id order."""
    rng = random.Random(count)
    rows = [
        {
            "id": ULID.from_parts(MS + n // 3, rng.getrandbits(80)),
            "kind": rng.choice(["keep", "keep", "drop"]),
        }
        for n in range(count)
    ]
    rng.shuffle(rows)
    with engine.begin() as conn:
        conn.execute(events.insert(), rows)
    return sorted(row["id"] for row in rows if row["kind"] == "keep")


KEEP = sa.select(events.c.id).where(events.c.kind == "keep")


def walk(fetch: Callable[[str | None], Page[Any]], *, backward: bool) -> list[Any]:
    """Follow the cursors from one end to the other; return the items in display order."""
    pages: list[list[Any]] = []
    cursor: str | None = None
    while True:
        page = fetch(cursor)
        pages.append(list(page.items))
        assert page.has_more == ((page.prev_cursor if backward else page.next_cursor) is not None)
        cursor = page.prev_cursor if backward else page.next_cursor
        if cursor is None:
            break
        assert len(pages) < 100, "the walk does not end"
    if backward:
        pages.reverse()
    return [item for page in pages for item in page]


def test_oracle_walk_every_page_size(table: sa.Table, engine: Engine) -> None:
    # The unpaged ordered query is the oracle: every walk, in every direction
    # and page size, must give back exactly its rows in its order.
    expected = seed(engine)
    with Session(engine) as session:

        def fetch(cursor: str | None, backward: bool, size: int, descending: bool) -> Page[Any]:
            if backward:
                # A backward walk starts past the far end of display order.
                end = FIRST if descending else LAST
                return paginate(
                    session,
                    KEEP,
                    events.c.id,
                    before=cursor or end,
                    limit=size,
                    descending=descending,
                )
            return paginate(
                session, KEEP, events.c.id, after=cursor, limit=size, descending=descending
            )

        assert session.scalars(KEEP.order_by(events.c.id)).all() == expected
        for size in range(1, 12):
            for descending in (False, True):
                want = expected[::-1] if descending else expected
                forward = walk(
                    partial(fetch, backward=False, size=size, descending=descending), backward=False
                )
                assert forward == want, (size, descending, "forward")
                backward = walk(
                    partial(fetch, backward=True, size=size, descending=descending), backward=True
                )
                assert backward == want, (size, descending, "backward")


def test_page_fields_and_cursor_semantics(table: sa.Table, engine: Engine) -> None:
    ids = seed(engine, 12)  # some dropped by the WHERE
    with Session(engine) as session:
        first = paginate(session, KEEP, events.c.id, limit=3)
        assert first.items == ids[:3]
        assert (first.prev_cursor, first.next_cursor, first.has_more) == (None, str(ids[2]), True)
        second = paginate(session, KEEP, events.c.id, after=first.next_cursor, limit=3)
        assert second.items == ids[3:6]
        assert second.prev_cursor == str(ids[3])
        assert second.next_cursor == str(ids[5])
        # back from the second page: the first page again, in ascending order
        back = paginate(session, KEEP, events.c.id, before=second.prev_cursor, limit=3)
        assert back.items == ids[:3]
        assert (back.prev_cursor, back.next_cursor, back.has_more) == (None, str(ids[2]), False)
        last = paginate(session, KEEP, events.c.id, after=ids[-2], limit=3)
        assert last.items == ids[-1:]
        assert last.next_cursor is None
        assert not last.has_more
        # Paged past the end: nothing follows, but the way back is kept.
        empty = paginate(session, KEEP, events.c.id, after=ids[-1], limit=3)
        assert empty == Page(items=[], next_cursor=None, prev_cursor=str(ids[-1]), has_more=False)
        # an exactly full last page: limit + 1 rows fetched tells there is no more
        exact = paginate(session, KEEP, events.c.id, after=ids[-4], limit=3)
        assert exact.items == ids[-3:]
        assert not exact.has_more
        assert isinstance(first.next_cursor, str)
        assert len(first.next_cursor) == 26


def test_orm_core_labeled_and_connection(table: sa.Table, engine: Engine) -> None:
    ids = seed(engine, 9)
    with Session(engine) as session:
        entities = paginate(
            session, sa.select(Event).where(Event.kind == "keep"), Event.id, limit=2
        )
        assert all(isinstance(item, Event) for item in entities.items)
        assert [item.id for item in entities.items] == ids[:2]
        assert entities.next_cursor == str(ids[1])
        # The table column works for an entity select too.
        same = paginate(session, sa.select(Event).where(Event.kind == "keep"), events.c.id, limit=2)
        assert [item.id for item in same.items] == ids[:2]

        labeled = sa.select(events.c.kind, events.c.id.label("event_id")).where(
            events.c.kind == "keep"
        )
        rows = paginate(session, labeled, events.c.id, limit=2)
        assert isinstance(rows.items[0], sa.Row)
        assert [row.event_id for row in rows.items] == ids[:2]
        assert rows.next_cursor == str(ids[1])
        more = paginate(session, labeled, Event.id, after=rows.next_cursor, limit=2)
        assert [row.event_id for row in more.items] == ids[2:4]

    with engine.connect() as conn:
        core = paginate(
            conn, sa.select(events).where(events.c.kind == "keep"), events.c.id, limit=2
        )
        assert [row.id for row in core.items] == ids[:2]
        scalars = paginate(conn, KEEP, events.c.id, after=ids[0], limit=2)
        assert scalars.items == ids[1:3]


def test_stable_under_inserts_between_pages(table: sa.Table, engine: Engine) -> None:
    original = seed(engine, 20)
    seen: list[ULID] = []
    added: list[ULID] = []
    cursor: str | None = None
    while True:
        # One session per page, as a web app does per request.
        with Session(engine) as session:
            page = paginate(session, KEEP, events.c.id, after=cursor, limit=4)
        seen.extend(page.items)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
        with engine.begin() as conn:
            new = [new_ulid(), new_ulid()]
            # A late row with an old timestamp lands behind the cursor: it must
            # not shift later pages either.
            behind = ULID.from_parts(MS - 1, random.getrandbits(80))
            conn.execute(
                events.insert(),
                [{"id": i, "kind": "keep"} for i in new] + [{"id": behind, "kind": "keep"}],
            )
            added.extend(new)
        assert len(added) < 40
    assert len(seen) == len(set(seen)), "a row was repeated"
    assert seen == original + added, "a row was skipped or out of order"


def test_async_twin(backend: Backend, engine: Engine, table: sa.Table) -> None:
    ids = seed(engine, 15)

    async def run(url: str) -> tuple[list[Any], list[Any], list[Any]]:
        async_engine = create_async_engine(url)
        try:
            async with AsyncSession(async_engine) as session:
                first = await apaginate(session, KEEP, events.c.id, limit=4)
                rest = await apaginate(
                    session, KEEP, events.c.id, after=first.next_cursor, limit=100
                )
                entities = await apaginate(
                    session,
                    sa.select(Event).where(Event.kind == "keep"),
                    Event.id,
                    before=rest.prev_cursor,
                    limit=2,
                )
            async with async_engine.connect() as conn:
                newest = await apaginate(conn, KEEP, events.c.id, limit=3, descending=True)
            return (
                list(first.items) + list(rest.items),
                [e.id for e in entities.items],
                list(newest.items),
            )
        finally:
            await async_engine.dispose()

    for url in backend.async_urls:
        walked, entity_ids, newest = asyncio.run(run(url))
        assert walked == ids, url
        assert entity_ids == ids[2:4], url
        assert newest == ids[::-1][:3], url


# -- refusals: all before any SQL runs ------------------------------------------

BAD_CURSORS = [
    "",  # empty is malformed, not "no cursor"
    "01HTQW311N1KR5G0Y75M3EF00",  # 25 characters
    "01HTQW311N1KR5G0Y75M3EF00HH",  # 27 characters
    "01HTQW311N1KR5G0Y75M3EF0IL",  # I and L are not Crockford letters
    "01HTQW311N1KR5G0Y75M3EF0OU",  # nor O and U
    "81HTQW311N1KR5G0Y75M3EF00H",  # overflows 128 bits
    "' OR 1=1 --".ljust(26, "A"),  # SQL injection, 26 characters
    "0000000000000'; DROP TABLE--"[:26],  # another, 26 characters
    " 01HTQW311N1KR5G0Y75M3EF00",  # padded with a space
]


@pytest.mark.parametrize("cursor", BAD_CURSORS)
def test_bad_cursor_raises_before_sql(
    table: sa.Table, engine: Engine, statements: list[str], cursor: str
) -> None:
    with pytest.raises(InvalidULID):
        after(events.c.id, cursor)
    with pytest.raises(InvalidULID):
        before(Event.id, cursor)
    with Session(engine) as session:
        with pytest.raises(InvalidULID):
            paginate(session, KEEP, events.c.id, after=cursor)
        with pytest.raises(InvalidULID):
            paginate(session, sa.select(Event), Event.id, before=cursor, descending=True)
    assert statements == []


def test_cursor_of_wrong_type(table: sa.Table, engine: Engine, statements: list[str]) -> None:
    with pytest.raises(TypeError):
        after(events.c.id, 12345)  # type: ignore[arg-type]
    with Session(engine) as session, pytest.raises(TypeError):
        paginate(session, KEEP, events.c.id, before=b"\x00" * 16)  # type: ignore[arg-type]
    assert statements == []


@pytest.mark.parametrize(
    ("stmt", "kwargs", "error"),
    [
        (KEEP.order_by(events.c.kind), {}, PaginationError),  # ORDER BY another column
        (KEEP.order_by(events.c.id, events.c.kind), {}, PaginationError),  # ... as a tiebreak
        (KEEP.order_by(events.c.id.desc()), {}, PaginationError),  # contradicts descending
        (KEEP.limit(5), {}, PaginationError),  # its own LIMIT
        (KEEP.offset(5), {}, PaginationError),  # its own OFFSET
        (sa.select(events.c.kind), {}, PaginationError),  # the paging column not selected
        (KEEP, {"limit": 0}, ValueError),  # an empty page size
        (KEEP, {"after": FIRST, "before": LAST}, ValueError),  # both directions
    ],
)
def test_refusals_before_sql(
    table: sa.Table,
    engine: Engine,
    statements: list[str],
    stmt: sa.Select[Any],
    kwargs: dict[str, Any],
    error: type[Exception],
) -> None:
    with Session(engine) as session, pytest.raises(error) as caught:
        paginate(session, stmt, events.c.id, **kwargs)
    assert str(caught.value)
    assert statements == []
    assert issubclass(PaginationError, ValueError)


def test_order_by_the_paging_column_is_accepted(table: sa.Table, engine: Engine) -> None:
    ids = seed(engine, 10)
    with Session(engine) as session:
        up = paginate(session, KEEP.order_by(events.c.id), events.c.id, limit=3)
        down = paginate(
            session, KEEP.order_by(events.c.id.desc()), events.c.id, limit=3, descending=True
        )
    assert up.items == ids[:3]
    assert down.items == ids[::-1][:3]


def test_cursor_binds_as_the_columns_type() -> None:
    # The bound value is a ULID handed to the column's type, whatever text came in.
    clause = after(events.c.id, "01htqw311n1kr5g0y75m3ef00h")
    assert clause.right.value == ULID("01HTQW311N1KR5G0Y75M3EF00H")  # type: ignore[attr-defined]
    assert isinstance(clause.right.type, ULIDType)  # type: ignore[attr-defined]
