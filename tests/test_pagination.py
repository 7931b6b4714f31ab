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
from sqlalchemy.ext.asyncio import (
    AsyncSession,
    async_scoped_session,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    Session,
    joinedload,
    mapped_column,
    relationship,
    scoped_session,
    sessionmaker,
)

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
        (KEEP.order_by(events.c.id.desc()), {"descending": False}, PaginationError),  # disagrees
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


# -- no silent gaps (issue 11, part 4) --------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"limit": 0},  # an empty page
        {"limit": -1},  # negative
        {"limit": True},  # a bool is not a page size
        {"limit": 1.5},  # not an int
        {"limit": "10"},  # text from a query string, unconverted
        {"limit": 10**20},  # a client asking for everything (driver overflow)
        {"limit": 1001},  # over the default max_limit of 1000
        {"limit": 6, "max_limit": 5},  # over a lower cap
        {"limit": 5, "max_limit": 0},  # a cap that allows nothing
        {"limit": 5, "max_limit": None},  # no cap is not an option
    ],
)
def test_limit_is_capped_before_sql(
    table: sa.Table, engine: Engine, statements: list[str], kwargs: dict[str, Any]
) -> None:
    with Session(engine) as session, pytest.raises(ValueError, match="limit"):
        paginate(session, KEEP, events.c.id, **kwargs)
    assert statements == []


def test_limit_at_the_cap_is_accepted(table: sa.Table, engine: Engine) -> None:
    ids = seed(engine, 12)
    with Session(engine) as session:
        assert paginate(session, KEEP, events.c.id, limit=1000).items == ids
        assert paginate(session, KEEP, events.c.id, limit=3, max_limit=3).items == ids[:3]


def test_cursors_on_edge_and_empty_pages(table: sa.Table, engine: Engine) -> None:
    # Each cursor is set exactly when a page lies that way, so a client can
    # always go back (or forward) from where it stands, and never into nothing.
    ids = seed(engine, 12)
    strs = [str(i) for i in ids]
    with Session(engine) as session:

        def page(**kwargs: Any) -> tuple[list[Any], str | None, str | None, bool]:
            got = paginate(session, KEEP, events.c.id, limit=3, **kwargs)
            return list(got.items), got.prev_cursor, got.next_cursor, got.has_more

        # a cursor before every row: nothing precedes the page
        assert page(after=FIRST) == (ids[:3], None, strs[2], True)
        # a cursor after every row: an empty page that can go back from the cursor
        assert page(after=LAST) == ([], LAST, None, False)
        assert page(before=LAST) == (ids[-3:], strs[-3], None, True)
        # backward past the start: an empty page that can go forward again
        assert page(before=FIRST) == ([], None, FIRST, False)
        assert page(after=FIRST)[0] == ids[:3]
        # backward to the first row: no previous page, the next one is kept
        assert page(before=ids[3]) == (ids[:3], None, strs[2], False)
        # a cursor that is the last row's id
        assert page(after=ids[-1]) == ([], strs[-1], None, False)
        assert page(before=ids[-1])[0] == ids[-4:-1]
        # descending display order mirrors all of it
        down = paginate(session, KEEP, events.c.id, after=LAST, limit=3, descending=True)
        assert (down.items, down.prev_cursor) == (ids[::-1][:3], None)
        past = paginate(session, KEEP, events.c.id, after=FIRST, limit=3, descending=True)
        assert (past.items, past.prev_cursor, past.next_cursor) == ([], FIRST, None)
        # the same calls on a table with nothing the WHERE keeps
        none = sa.select(events.c.id).where(events.c.kind == "none")
        empty = paginate(session, none, events.c.id, after=strs[3], limit=3)
        assert (empty.items, empty.prev_cursor, empty.next_cursor) == ([], None, None)
        empty = paginate(session, none, events.c.id, before=strs[3], limit=3)
        assert (empty.items, empty.prev_cursor, empty.next_cursor) == ([], None, None)


class Base2(DeclarativeBase):
    pass


class Parent(Base2):
    __tablename__ = "pagination_parents"

    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True, default=new_ulid)
    ref: Mapped[ULID | None] = mapped_column(ULIDType(), unique=True, nullable=True)
    group: Mapped[ULID] = mapped_column(ULIDType())  # not unique: many parents per group
    children: Mapped[list[Child]] = relationship(order_by="Child.n")


class Child(Base2):
    __tablename__ = "pagination_children"

    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True, default=new_ulid)
    parent_id: Mapped[ULID] = mapped_column(ULIDType(), sa.ForeignKey(Parent.id))
    n: Mapped[int]


@pytest.fixture
def families(engine: Engine) -> Iterator[list[ULID]]:
    """Seven parents with 0..3 children each; every other one has a NULL ref."""
    Base2.metadata.drop_all(engine)
    Base2.metadata.create_all(engine)
    group = new_ulid()
    parents = [
        Parent(
            id=ULID.from_parts(MS + n, n),
            ref=ULID.from_parts(MS + n, 99) if n % 2 else None,
            group=group,
            children=[Child(n=k) for k in range(n % 4)],
        )
        for n in range(7)
    ]
    with Session(engine) as session:
        session.add_all(parents)
        session.commit()
    yield [ULID.from_parts(MS + n, n) for n in range(7)]
    Base2.metadata.drop_all(engine)


def test_nullable_column_pages_only_non_null_rows(families: list[ULID], engine: Engine) -> None:
    refs = [ULID.from_parts(MS + n, 99) for n in range(7) if n % 2]
    with Session(engine) as session:
        got: list[Any] = []
        page = paginate(session, sa.select(Parent.ref), Parent.ref, limit=2)
        got += page.items
        while page.next_cursor is not None:
            page = paginate(
                session, sa.select(Parent.ref), Parent.ref, after=page.next_cursor, limit=2
            )
            got += page.items
        down = paginate(session, sa.select(Parent), Parent.ref, limit=10, descending=True)
    assert got == refs  # NULLs neither first nor last, and no "None" cursor
    assert [p.ref for p in down.items] == refs[::-1]


def test_non_unique_column_is_refused_before_sql(
    families: list[ULID], engine: Engine, statements: list[str]
) -> None:
    with Session(engine) as session, pytest.raises(PaginationError, match="not unique"):
        paginate(session, sa.select(Parent), Parent.group)
    with Session(engine) as session, pytest.raises(PaginationError, match="not unique"):
        paginate(session, sa.select(Child.parent_id), Child.parent_id)  # a foreign key
    assert statements == []


@pytest.mark.parametrize("limit", [1, 2, 50])
def test_join_that_repeats_the_id_is_refused(
    families: list[ULID], engine: Engine, limit: int
) -> None:
    # The primary key repeats once per child: a page boundary inside the run
    # of one parent would skip its other children's rows.
    joined = sa.select(Parent.id, Child.n).join(Child, Child.parent_id == Parent.id)
    with Session(engine) as session, pytest.raises(PaginationError, match="repeats"):
        paginate(session, joined, Parent.id, after=families[2], limit=limit)


def test_joinedload_pages_parents_with_all_children(families: list[ULID], engine: Engine) -> None:
    stmt = sa.select(Parent).options(joinedload(Parent.children))
    with Session(engine) as session:
        pages: list[list[Parent]] = []
        cursor = None
        while True:
            page = paginate(session, stmt, Parent.id, after=cursor, limit=2)
            pages.append(list(page.items))
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        back = paginate(session, stmt, Parent.id, before=families[4], limit=3)
        newest = paginate(session, stmt, Parent.id, limit=2, descending=True)
        # the LIMIT counts parents: 2 + 2 + 2 + 1, not joined rows
        assert [len(p) for p in pages] == [2, 2, 2, 1]
        assert [p.id for page_ in pages for p in page_] == families
        for page_ in pages:
            for parent in page_:
                n = families.index(parent.id)
                assert [c.n for c in parent.children] == list(range(n % 4))
        assert [p.id for p in back.items] == families[1:4]
        assert [p.id for p in newest.items] == families[::-1][:2]
        assert [c.n for c in newest.items[0].children] == [0, 1]  # parent 6: 6 % 4 children


# -- every session shape (issue 10, item 1) -----------------------------------------


def test_scoped_session_is_orm(table: sa.Table, engine: Engine) -> None:
    ids = seed(engine, 12)
    factory = scoped_session(sessionmaker(engine))
    try:
        stmt = sa.select(Event).where(Event.kind == "keep")
        first = paginate(factory, stmt, Event.id, limit=3)
        second = paginate(factory, stmt, Event.id, after=first.next_cursor, limit=3)
    finally:
        factory.remove()
    assert all(isinstance(item, Event) for item in first.items)
    assert [e.id for e in [*first.items, *second.items]] == ids[:6]
    assert first.next_cursor == str(ids[2])


def test_async_scoped_session_is_orm(backend: Backend, engine: Engine, table: sa.Table) -> None:
    ids = seed(engine, 9)

    async def run(url: str) -> tuple[list[Any], str | None]:
        async_engine = create_async_engine(url)
        factory = async_scoped_session(
            async_sessionmaker(async_engine), scopefunc=asyncio.current_task
        )
        try:
            stmt = sa.select(Event).where(Event.kind == "keep")
            first = await apaginate(factory, stmt, Event.id, limit=2)
            rest = await apaginate(factory, stmt, Event.id, after=first.next_cursor, limit=50)
            return [e.id for e in [*first.items, *rest.items]], first.next_cursor
        finally:
            await factory.remove()
            await async_engine.dispose()

    for url in backend.async_urls:
        got, cursor = asyncio.run(run(url))
        assert got == ids, url
        assert cursor == str(ids[1]), url


def test_flask_sqlalchemy_db_session_pages(backend: Backend, engine: Engine) -> None:
    flask = pytest.importorskip("flask")
    flask_sqlalchemy = pytest.importorskip("flask_sqlalchemy")

    app = flask.Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = engine.url.render_as_string(hide_password=False)
    db = flask_sqlalchemy.SQLAlchemy(app)

    class Post(db.Model):  # type: ignore[name-defined,misc]
        __tablename__ = "pagination_flask_posts"
        id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True, default=new_ulid)
        title: Mapped[str] = mapped_column(sa.String(20))

    with app.app_context():
        db.drop_all()
        db.create_all()
        try:
            db.session.add_all([Post(title=f"post {n}") for n in range(7)])
            db.session.commit()
            titles: list[str] = []
            cursors: list[str | None] = []
            page = paginate(db.session, sa.select(Post), Post.id, limit=3)
            while True:
                titles += [post.title for post in page.items]
                cursors.append(page.next_cursor)
                if page.next_cursor is None:
                    break
                page = paginate(
                    db.session, sa.select(Post), Post.id, after=page.next_cursor, limit=3
                )
            assert titles == [f"post {n}" for n in range(7)]
            assert len(cursors) == 3  # three pages: 3 + 3 + 1
            assert all(isinstance(c, str) and len(c) == 26 for c in cursors[:2])
        finally:
            db.session.remove()
            db.drop_all()
            with app.app_context():
                db.engines[None].dispose()


def test_one_query_per_page_when_the_cursor_row_exists(
    table: sa.Table, engine: Engine, statements: list[str]
) -> None:
    # The exact prev_cursor costs nothing in the common case: the page is read
    # from the cursor's row inclusive. Only a vanished cursor row costs an EXISTS.
    ids = seed(engine, 12)
    statements.clear()
    with Session(engine) as session:
        page = paginate(session, KEEP, events.c.id, after=ids[2], limit=3)
        assert (page.items, page.prev_cursor) == (ids[3:6], str(ids[3]))
        assert len(statements) == 1
        back = paginate(session, KEEP, events.c.id, before=ids[6], limit=3)
        assert (back.items, back.next_cursor) == (ids[3:6], str(ids[5]))
        assert len(statements) == 2
        with engine.begin() as conn:
            conn.execute(events.delete().where(events.c.id == ids[2]))
        session.commit()  # a new snapshot (MariaDB reads at REPEATABLE READ)
        statements.clear()
        gone = paginate(session, KEEP, events.c.id, after=ids[2], limit=3)
        assert (gone.items, gone.prev_cursor) == (ids[3:6], str(ids[3]))
        assert len(statements) == 2
