"""sqlakeyset's select_page on ULID columns, after contrib.sqlakeyset.register()."""

from __future__ import annotations

import pytest

# The integrations (tests-integrations extra) support newer SQLAlchemy releases
# than our floor: the floor job runs without them, and this module skips.
pytest.importorskip("sqlakeyset")

import random
from collections.abc import Iterator

import sqlalchemy as sa
from sqlakeyset import BadBookmark, select_page, serialize_bookmark, unserialize_bookmark
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from conftest import recording
from sqlalchemy_ulid import ULID, InvalidULID, ULIDType
from sqlalchemy_ulid.contrib import sqlakeyset as ulid_sqlakeyset

MS = 1_712_345_678_901


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "contrib_sqlakeyset_items"

    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(20))


@pytest.fixture
def ids(engine: Engine) -> Iterator[list[ULID]]:
    ulid_sqlakeyset.register()
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    rng = random.Random(7)
    # Two per millisecond, inserted out of order: only the id says the order.
    made = [ULID.from_parts(MS + n // 2, rng.getrandbits(80)) for n in range(25)]
    rows = [{"id": i, "name": f"item {n}"} for n, i in enumerate(made)]
    rng.shuffle(rows)
    with engine.begin() as conn:
        conn.execute(Item.__table__.insert(), rows)
    yield sorted(made)
    Base.metadata.drop_all(engine)


def test_register_is_idempotent() -> None:
    ulid_sqlakeyset.register()
    ulid_sqlakeyset.register()
    u = ULID("01HTQW311N1KR5G0Y75M3EF00H")
    assert serialize_bookmark(((u,), False)) == ">ulid:01HTQW311N1KR5G0Y75M3EF00H"


def test_three_page_walk_forward_and_back(engine: Engine, ids: list[ULID]) -> None:
    stmt = sa.select(Item).order_by(Item.id)
    with Session(engine) as session:
        pages, bookmark = [], None
        for _ in range(3):
            page = select_page(session, stmt, per_page=10, page=bookmark)
            pages.append([row.Item.id for row in page])
            # The bookmark goes through text, as it would through a URL.
            bookmark = page.paging.bookmark_next
            assert isinstance(bookmark, str)
        assert pages == [ids[:10], ids[10:20], ids[20:]]
        assert not page.paging.has_next

        # And back from the last page, with the text of its "previous" bookmark.
        back = select_page(session, stmt, per_page=10, page=page.paging.bookmark_previous)
        assert [row.Item.id for row in back] == ids[10:20]


def test_descending_walk_on_a_core_column(engine: Engine, ids: list[ULID]) -> None:
    table = Item.__table__
    stmt = sa.select(table.c.id, table.c.name).order_by(table.c.id.desc())
    with Session(engine) as session:
        seen, bookmark, has_next = [], None, True
        while has_next:
            page = select_page(session, stmt, per_page=10, page=bookmark)
            seen += [row.id for row in page]
            bookmark, has_next = page.paging.bookmark_next, page.paging.has_next
    assert seen == ids[::-1]


def test_text_storage_column(engine: Engine) -> None:
    # as_str columns return str, a type sqlakeyset knows without us.
    meta = sa.MetaData()
    table = sa.Table(
        "contrib_sqlakeyset_text",
        meta,
        sa.Column("id", ULIDType("text", as_str=True), primary_key=True),
    )
    meta.drop_all(engine)
    meta.create_all(engine)
    try:
        made = sorted(str(ULID.from_parts(MS + n, n)) for n in range(7))
        with engine.begin() as conn:
            conn.execute(table.insert(), [{"id": i} for i in made])
        with Session(engine) as session:
            first = select_page(session, sa.select(table.c.id).order_by(table.c.id), per_page=4)
            rest = select_page(
                session,
                sa.select(table.c.id).order_by(table.c.id),
                per_page=4,
                page=first.paging.bookmark_next,
            )
        assert [r.id for r in first] + [r.id for r in rest] == made
    finally:
        meta.drop_all(engine)


@pytest.mark.parametrize(
    "bookmark",
    [
        ">ulid:01HTQW311N1KR5G0Y75M3EF00",  # 25 characters
        ">ulid:01HTQW311N1KR5G0Y75M3EF0OH",  # O is not in the alphabet
        ">ulid:81HTQW311N1KR5G0Y75M3EF00H",  # first character above 7: overflows 128 bits
        ">ulid:",  # empty
    ],
)
def test_tampered_bookmark_fails_before_sql(engine: Engine, ids: list[ULID], bookmark: str) -> None:
    with pytest.raises(BadBookmark) as caught:
        unserialize_bookmark(bookmark)
    assert isinstance(caught.value.__cause__, InvalidULID)
    with Session(engine) as session, recording(engine) as seen, pytest.raises(BadBookmark):
        select_page(session, sa.select(Item).order_by(Item.id), per_page=10, page=bookmark)
    assert seen == []
