"""Adversarial pages, third sweep: shapes a user writes against hidden key columns and typed ids.

Keys not selected as columns are read from hidden extra columns; these
tests try the statements where an extra column could change the rows
(DISTINCT, GROUP BY, set operations, eager loads of collections) and the
ORM and Core row shapes around them. Each walks forward and backward at
page sizes 1, 2, 3 and 7, cursors passed as text, exactly like the unpaged
query, or is refused with a ValueError before any SQL ran.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    Session,
    aliased,
    column_property,
    contains_eager,
    deferred,
    joinedload,
    mapped_column,
    relationship,
    selectinload,
)

from conftest import Backend, recording
from sqlalchemy_ulid import ULID, PaginationError, TypeID, TypeIDType, ULIDType, apaginate, paginate
from test_paging_adversarial_2 import _ids, forge, walk

SIZES = (1, 2, 3, 7)
_TOKEN = uuid.uuid4().hex[:8]


def _walk(engine: Engine, session: Any, stmt: sa.Select[Any], column: Any, **kw: Any) -> str:
    with recording(engine) as seen:
        try:
            paginate(session, stmt, column, limit=1)
        except ValueError:
            assert seen == [], "refused after SQL ran"
            return "refused"
    walk(session, stmt, column, sizes=SIZES, **kw)
    return "walked"


class Base(DeclarativeBase):
    pass


class Shop(Base):
    __tablename__ = f"adv3_shop_{_TOKEN}"
    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(40))
    note: Mapped[str | None] = deferred(mapped_column(sa.Text, nullable=True))
    items: Mapped[list[Item]] = relationship(back_populates="shop", order_by="Item.id")


class Item(Base):
    __tablename__ = f"adv3_item_{_TOKEN}"
    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True)
    shop_id: Mapped[ULID] = mapped_column(sa.ForeignKey(Shop.id))
    price: Mapped[int | None] = mapped_column(nullable=True)
    label: Mapped[str] = mapped_column(sa.String(200))
    shop: Mapped[Shop] = relationship(back_populates="items")


Shop.item_count = column_property(
    sa.select(sa.func.count(Item.id))
    .where(Item.shop_id == Shop.id)
    .correlate_except(Item)
    .scalar_subquery()
)


class Staff(Base):
    __tablename__ = f"adv3_staff_{_TOKEN}"
    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True)
    kind: Mapped[str] = mapped_column(sa.String(10))
    level: Mapped[int | None] = mapped_column(nullable=True)
    __mapper_args__: ClassVar[dict[str, Any]] = {
        "polymorphic_on": "kind",
        "polymorphic_identity": "staff",
    }


class Clerk(Staff):  # single table inheritance
    __mapper_args__: ClassVar[dict[str, Any]] = {"polymorphic_identity": "clerk"}


@pytest.fixture
def orm(engine: Engine) -> Iterator[None]:
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    shops, items, staff = _ids(4), _ids(30), _ids(9)
    names = ["b", "a", "é", "a"]
    try:
        with Session(engine) as session:
            session.add_all(
                [
                    Shop(id=shops[n], name=names[n], note=None if n % 2 else "x" * 300)
                    for n in range(4)
                ]
            )
            session.flush()
            # shop 0 holds most items: a page of rows can be one shop's
            session.add_all(
                [
                    Item(
                        id=items[n],
                        shop_id=shops[0 if n < 20 else n % 4],
                        price=None if n % 5 == 0 else n % 3,
                        label="ü" * (n % 4) + "z" * 150,
                    )
                    for n in range(30)
                ]
            )
            session.add_all(
                [(Clerk if n % 2 else Staff)(id=staff[n], level=n % 3 or None) for n in range(9)]
            )
            session.commit()
        yield
    finally:
        Base.metadata.drop_all(engine)


# -- eager loads of collections -----------------------------------------------------


@pytest.mark.parametrize("sorted_", [True, False], ids=["sorted", "id-order"])
def test_contains_eager_collection_is_refused_before_sql(
    engine: Engine, orm: None, sorted_: bool
) -> None:
    """contains_eager of a collection: one row per child, so the LIMIT counted children.

    Walked forward on SQLite, PostgreSQL and MariaDB alike, pages of 1, 2,
    3 and 7 returned 1, 1, 2 and 3 of the 4 shops (the first page's rows were
    one shop's 20 items, uniqued to one entity: no next page). Refused now.
    """
    stmt = sa.select(Shop).join(Shop.items).options(contains_eager(Shop.items))
    stmt = stmt.order_by(Shop.name, Shop.id) if sorted_ else stmt
    with (
        Session(engine) as session,
        recording(engine) as seen,
        pytest.raises(PaginationError, match="contains_eager"),
    ):
        paginate(session, stmt, Shop.id, limit=2)
    assert seen == []


def test_contains_eager_of_a_many_to_one_pages(engine: Engine, orm: None) -> None:
    stmt = (
        sa.select(Item)
        .join(Item.shop)
        .options(contains_eager(Item.shop))
        .order_by(Shop.name.desc(), Item.price, Item.id)
    )
    with Session(engine) as session:
        assert _walk(engine, session, stmt, Item.id) == "walked"


@pytest.mark.parametrize("load", [joinedload, selectinload])
def test_entity_and_column_with_eager_collection(engine: Engine, orm: None, load: Any) -> None:
    stmt = (
        sa.select(Item, Shop.name)
        .join(Item.shop)
        .options(
            load(Item.shop).options(load(Shop.items)) if load is selectinload else load(Item.shop)
        )
        .order_by(Shop.name.desc(), Item.price, Item.id)
    )
    with Session(engine) as session:
        assert _walk(engine, session, stmt, Item.id, ident=lambda r: r[0].id) == "walked"


def test_joinedload_collection_of_two_entities(engine: Engine, orm: None) -> None:
    stmt = (
        sa.select(Shop)
        .options(joinedload(Shop.items))
        .order_by(Shop.item_count.desc(), Shop.name, Shop.id)
    )
    with Session(engine) as session:
        assert _walk(engine, session, stmt, Shop.id) == "walked"


# -- DISTINCT and GROUP BY with hidden keys ------------------------------------------


def test_distinct_over_a_join_with_a_key_of_the_joined_table(engine: Engine, orm: None) -> None:
    """SELECT DISTINCT shop.id ... ORDER BY item.price: a hidden item.price splits the rows.

    Walked forward on SQLite and MariaDB, every page size returned 11 rows
    for the 4 shops (7 repeats, one per shop and price); PostgreSQL failed
    after SQL. Refused now.
    """
    stmt = sa.select(Shop.id).join(Shop.items).distinct().order_by(Item.price, Shop.id)
    with engine.connect() as conn:
        assert _walk(engine, conn, stmt, Shop.id) == "refused"


def test_distinct_over_a_join_with_a_key_of_its_own_table(engine: Engine, orm: None) -> None:
    """A hidden key of the paging column's own table leaves DISTINCT's rows as they were."""
    if engine.dialect.name == "postgresql":
        pytest.skip("PostgreSQL refuses the unpaged statement (ORDER BY key not selected)")
    stmt = sa.select(Shop.id).join(Shop.items).distinct().order_by(Shop.name.desc(), Shop.id)
    with engine.connect() as conn:
        assert _walk(engine, conn, stmt, Shop.id) == "walked"


def test_group_by_with_an_aggregate_key_hidden(engine: Engine, orm: None) -> None:
    stmt = (
        sa.select(Shop.id)
        .join(Shop.items)
        .group_by(Shop.id)
        .order_by(sa.func.count(Item.id).desc(), Shop.id)
    )
    with engine.connect() as conn:
        assert _walk(engine, conn, stmt, Shop.id) in ("walked", "refused")


def test_group_by_with_a_grouped_key_hidden(engine: Engine, orm: None) -> None:
    stmt = (
        sa.select(Shop.id, sa.func.count(Item.id))
        .join(Shop.items)
        .group_by(Shop.id, Shop.name)
        .order_by(Shop.name, Shop.id)
    )
    with engine.connect() as conn:
        assert _walk(engine, conn, stmt, Shop.id) == "walked"


# -- Core row shapes ------------------------------------------------------------------


def _items() -> sa.Table:
    return Item.__table__  # type: ignore[return-value]


def test_labels_that_shadow_column_names(engine: Engine, orm: None) -> None:
    t = _items()
    stmt = sa.select(t.c.id, t.c.label.label("price"), t.c.price.label("label")).order_by(
        t.c.price.desc(), t.c.label, t.c.id
    )
    with engine.connect() as conn:
        assert _walk(engine, conn, stmt, t.c.id) == "walked"


def test_two_keys_with_the_same_label(engine: Engine, orm: None) -> None:
    """ORDER BY k where two columns are labelled k: the database picks one (SQLite) or errs.

    Walked forward on SQLite (which sorts by the first ``k`` while the cursor
    compares the second), pages of 1 lost 17 of 30 rows; pages of 2 looped
    until the walk's cap (198 repeats). PostgreSQL raised "ORDER BY k is
    ambiguous" after SQL; MariaDB happened to page. Refused now.
    """
    t = _items()
    a, b = t.c.price.label("k"), sa.func.lower(t.c.label).label("k")
    stmt = sa.select(t.c.id, a, b).order_by(a, b.desc(), t.c.id)
    with engine.connect() as conn:
        assert _walk(engine, conn, stmt, t.c.id) == "refused"


def test_the_same_key_twice(engine: Engine, orm: None) -> None:
    t = _items()
    stmt = sa.select(t.c.id).order_by(t.c.price, t.c.price.desc(), t.c.id)
    with engine.connect() as conn:
        assert _walk(engine, conn, stmt, t.c.id) in ("walked", "refused")


def test_the_paging_column_as_an_earlier_key(engine: Engine, orm: None) -> None:
    t = _items()
    stmt = sa.select(t.c.id).order_by(t.c.id.desc(), t.c.price, t.c.id.desc())
    with engine.connect() as conn:
        assert _walk(engine, conn, stmt, t.c.id) in ("walked", "refused")


def test_union_and_except_subqueries(engine: Engine, orm: None) -> None:
    t = _items()
    cheap = sa.select(t.c.id, t.c.price, t.c.label).where(t.c.price < 2)
    dear = sa.select(t.c.id, t.c.price, t.c.label).where(t.c.price >= 1)
    for sub in (sa.union(cheap, dear).subquery(), sa.except_(cheap, dear).subquery()):
        stmt = sa.select(sub.c.id).order_by(sub.c.price.desc(), sub.c.label, sub.c.id)
        with engine.connect() as conn:
            assert _walk(engine, conn, stmt, sub.c.id) == "walked"


def test_with_only_columns_and_scalars(engine: Engine, orm: None) -> None:
    stmt = sa.select(Item).order_by(Item.label, Item.id).with_only_columns(Item.id)
    with Session(engine) as session:
        assert _walk(engine, session, stmt, Item.id) == "walked"


def test_single_table_inheritance_key(engine: Engine, orm: None) -> None:
    stmt = sa.select(Clerk).order_by(Clerk.level.desc(), Clerk.id)
    with Session(engine) as session:
        assert _walk(engine, session, stmt, Clerk.id) in ("walked", "refused")


def test_deferred_and_column_property_keys(engine: Engine, orm: None) -> None:
    stmt = sa.select(Shop).order_by(Shop.note, Shop.item_count, Shop.id)
    with Session(engine) as session:
        assert _walk(engine, session, stmt, Shop.id) == "walked"


def test_aliased_entity_and_column(engine: Engine, orm: None) -> None:
    s = aliased(Shop)
    stmt = (
        sa.select(Item, s.name)
        .join(s, Item.shop_id == s.id)
        .order_by(s.name, Item.label.desc(), Item.id)
    )
    with Session(engine) as session:
        assert _walk(engine, session, stmt, Item.id, ident=lambda r: r[0].id) == "walked"


def test_for_update_with_hidden_keys(engine: Engine, orm: None) -> None:
    t = _items()
    stmt = sa.select(t.c.id).order_by(t.c.label, t.c.price, t.c.id).with_for_update()
    with engine.begin() as conn:
        assert _walk(engine, conn, stmt, t.c.id) == "walked"


# -- typed-id keys --------------------------------------------------------------------


class Member(Base):
    __tablename__ = f"adv3_member_{_TOKEN}"
    id: Mapped[TypeID] = mapped_column(TypeIDType("user"), primary_key=True)
    name: Mapped[str | None] = mapped_column(sa.String(40), nullable=True)
    org_id: Mapped[TypeID | None] = mapped_column(TypeIDType("org"), nullable=True)


def _members(engine: Engine) -> list[TypeID]:
    ids = [TypeID.from_ulid("user", u) for u in _ids(11)]
    with Session(engine) as session:
        session.add_all(
            [Member(id=i, name=[None, "ä", "b", "ä"][n % 4]) for n, i in enumerate(ids)]
        )
        session.commit()
    return ids


def test_typeid_sort_with_text_cursors(engine: Engine, orm: None) -> None:
    _members(engine)
    stmt = sa.select(Member).order_by(Member.name.desc(), Member.id.desc())
    with Session(engine) as session:
        assert _walk(engine, session, stmt, Member.id, ident=_ident) == "walked"
        stmt = sa.select(Member.id).order_by(Member.id.desc())
        assert _walk(engine, session, stmt, Member.id, ident=_ident) == "walked"


def _refused_or_same(engine: Engine, session: Any, stmt: Any, cursor: str, want: list[Any]) -> str:
    """The page after ``cursor``: refused with a ValueError before SQL, or ``want``."""
    with recording(engine) as seen:
        try:
            page = paginate(session, stmt, Member.id, after=cursor, limit=3)
        except ValueError:
            assert seen == [], "refused after SQL ran"
            return "refused"
    assert [_ident(item) for item in page.items] == want
    return "paged"


def _ident(item: Any) -> Any:
    return item if isinstance(item, TypeID) else item[0] if isinstance(item, sa.Row) else item.id


def test_cursors_of_a_ulid_column_on_a_typeid_column(engine: Engine, orm: None) -> None:
    """A bare ULID, another prefix's typed id, and a ULIDType sort's cursor on a TypeIDType key."""
    ids = _members(engine)
    by_id = sa.select(Member.id).order_by(Member.id)
    by_name = sa.select(Member.id, Member.name).order_by(Member.name, Member.id)
    items = _items()
    ulid_sort = sa.select(items.c.id, items.c.label).order_by(items.c.label, items.c.id)
    with Session(engine) as session:
        ulid_cursor = str(paginate(session, ulid_sort, items.c.id, limit=2).next_cursor)
        bare = str(ids[2].to_ulid())
        outcome = _refused_or_same(engine, session, by_id, bare, ids[3:6])
        assert outcome in ("refused", "paged")
        assert _refused_or_same(engine, session, by_id, "org_" + str(ids[2])[5:], []) == "refused"
        assert _refused_or_same(engine, session, by_name, str(ids[2]), []) == "refused"
        assert _refused_or_same(engine, session, by_name, ulid_cursor, []) == "refused"
        assert _refused_or_same(engine, session, by_id, ulid_cursor, []) == "refused"


# -- async ----------------------------------------------------------------------------


def test_async_session_with_hidden_keys(backend: Backend, orm: None) -> None:
    """AsyncSession through apaginate: entity rows, keys read as hidden columns, text cursors."""
    url = backend.async_urls[0]
    stmt = (
        sa.select(Item, Shop.name).join(Item.shop).order_by(Shop.name.desc(), Item.price, Item.id)
    )

    async def run() -> tuple[list[Any], list[Any]]:
        engine = create_async_engine(url)
        try:
            async with AsyncSession(engine) as session:
                want = [row[0].id for row in (await session.execute(stmt)).all()]
                got: list[Any] = []
                cursor = None
                while True:
                    page = await apaginate(session, stmt, Item.id, after=cursor, limit=4)
                    assert all(len(row) == 2 for row in page.items)
                    got += [row[0].id for row in page.items]
                    if page.next_cursor is None:
                        return want, got
                    cursor = str(page.next_cursor)
        finally:
            await engine.dispose()

    want, got = asyncio.run(run())
    assert got == want
    assert len(want) == 30


def test_group_by_with_a_key_neither_grouped_nor_aggregated(engine: Engine, orm: None) -> None:
    """GROUP BY shop ORDER BY item.price: the database picks a price per group (or refuses).

    The cursor's WHERE on item.price would filter items before grouping, so
    each group's price could change between pages.
    """
    if engine.dialect.name == "postgresql":
        pytest.skip(
            "PostgreSQL refuses the unpaged statement (price neither grouped nor aggregated)"
        )
    stmt = sa.select(Shop.id).join(Shop.items).group_by(Shop.id).order_by(Item.price, Shop.id)
    with engine.connect() as conn:
        assert _walk(engine, conn, stmt, Shop.id) in ("walked", "refused")


def test_only_a_text_column_selected(engine: Engine, orm: None) -> None:
    stmt = sa.select(Item.label).order_by(Item.label, Item.id)
    with (
        engine.connect() as conn,
        recording(engine) as seen,
        pytest.raises(PaginationError, match="not selected"),
    ):
        paginate(conn, stmt, Item.id, limit=2)
    assert seen == []


def test_label_named_like_another_column_sorted_by_the_label(engine: Engine, orm: None) -> None:
    """ORDER BY price where "price" labels the text column and the table has a price column too."""
    t = _items()
    shadow = t.c.label.label("price")
    stmt = sa.select(t.c.id, shadow).order_by(shadow.desc(), t.c.id)
    with engine.connect() as conn:
        assert _walk(engine, conn, stmt, t.c.id) == "walked"


def test_distinct_entities_sorted_by_their_own_column(engine: Engine, orm: None) -> None:
    stmt = sa.select(Shop).join(Shop.items).distinct().order_by(Shop.name, Shop.id)
    with Session(engine) as session:
        assert _walk(engine, session, stmt, Shop.id) == "walked"


def test_id_columns_as_earlier_sort_keys(engine: Engine, orm: None) -> None:
    """A ULIDType foreign key, and a nullable TypeIDType one, sorted before the paging column.

    The TypeIDType key was refused before SQL ("holds TypeID values, which a
    cursor cannot carry exactly ... an interval by its number of seconds"):
    a typed-id foreign key is a natural sort key, and its 128 bits are
    exact. Its cursor now carries them; the column gives the prefix back.
    """
    with Session(engine) as session:
        stmt = sa.select(Item).order_by(Item.shop_id.desc(), Item.id)
        assert _walk(engine, session, stmt, Item.id) == "walked"
    orgs = [TypeID.from_ulid("org", u) for u in _ids(3)]
    ids = _members(engine)
    with Session(engine) as session:
        for n, member in enumerate(session.scalars(sa.select(Member))):
            member.org_id = None if n % 4 == 0 else orgs[n % 3]
        session.commit()
        stmt = sa.select(Member).order_by(Member.org_id.desc(), Member.id)
        assert _walk(engine, session, stmt, Member.id, ident=_ident) == "walked"
        cursor = paginate(session, stmt, Member.id, limit=2).next_cursor
        assert cursor is not None
        # Forged: a key value that is no id, an id of the other prefix (its bits are
        # bound under the column's prefix: a page), the largest id (an empty page).
        for value, outcome in (
            (["s", "org_x"], "refused"),
            (["U", str(orgs[0].to_ulid())], "paged"),
            (["U", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"], "paged"),
        ):
            forged = forge(cursor, [value, ["s", str(ids[0])]])
            with recording(engine) as seen:
                try:
                    paginate(session, stmt, Member.id, after=forged, limit=2)
                    got = "paged"
                except ValueError:
                    assert seen == []
                    got = "refused"
            assert got == outcome, value


def test_entity_and_column_with_joined_collection_and_a_hidden_key(
    engine: Engine, orm: None
) -> None:
    """select(Shop, Shop.name) + joinedload(items), sorted by a key it does not select."""
    from sqlalchemy.orm import scoped_session, sessionmaker

    stmt = (
        sa.select(Shop, Shop.name)
        .options(joinedload(Shop.items))
        .order_by(Shop.item_count.desc(), sa.func.lower(Shop.name), Shop.id)
    )
    scoped = scoped_session(sessionmaker(engine))
    try:
        want = [row[0].id for row in scoped.execute(stmt).unique().all()]
        for size in SIZES:
            got: list[Any] = []
            cursor = None
            while True:
                page = paginate(scoped, stmt, Shop.id, after=cursor, limit=size)
                got += [row[0].id for row in page.items]
                last = page.cursors[-1]
                if page.next_cursor is None:
                    break
                cursor = str(page.next_cursor)
            assert got == want, size
            back: list[Any] = []
            cursor = str(last)
            while cursor is not None:
                page = paginate(scoped, stmt, Shop.id, before=cursor, limit=size)
                back = [row[0].id for row in page.items] + back
                cursor = None if page.prev_cursor is None else str(page.prev_cursor)
            assert back == want[:-1], size
        page = paginate(scoped, stmt, Shop.id, limit=2)
        assert [len(row) for row in page.items] == [2, 2]
        for shop, _ in page.items:  # every collection whole, not cut by the LIMIT
            count = scoped.scalar(sa.select(sa.func.count()).where(Item.shop_id == shop.id))
            assert len(shop.items) == count
        assert len(page.items[0][0].items) == 23
    finally:
        scoped.remove()


def _odd_keys() -> dict[str, Any]:
    t = _items()
    shops = Shop.__table__
    return {
        "is-null": t.c.price.is_(None),
        "negated": -t.c.price,
        "modulo": t.c.price % 2,
        "length": sa.func.length(t.c.label),
        "cast-text": sa.cast(t.c.price, sa.String(10)),
        "exists": sa.exists().where(shops.c.id == t.c.shop_id, shops.c.name == "a"),
        "substr": sa.func.substr(t.c.label, 1, 2),
        "concat": sa.func.coalesce(t.c.label, "") + "é",
    }


@pytest.mark.parametrize("name", list(_odd_keys()))
def test_odd_key_expressions(engine: Engine, orm: None, name: str) -> None:
    """Expressions a user sorts by: each pages exactly, or is refused before SQL."""
    t = _items()
    key = _odd_keys()[name]
    stmt = sa.select(t.c.id).order_by(key.desc(), t.c.id)
    with engine.connect() as conn:
        assert _walk(engine, conn, stmt, t.c.id) in ("walked", "refused")


@pytest.mark.parametrize("value", [1, 7, True, "x", sa.true(), sa.false(), sa.null()])
def test_a_constant_sort_key_is_refused_before_sql(engine: Engine, orm: None, value: Any) -> None:
    """order_by(literal(1), id): MariaDB's driver inlines ``ORDER BY 1``, the first column.

    Walked on MariaDB, ``select(id, price).order_by(literal(1).desc(), id)``
    sorted by ``id DESC`` while the cursor compared the constant: pages of 1,
    2, 3 and 7 returned 1, 4, 6 and 14 of 30 rows (29, 28, 27 and 23 lost);
    ``literal(7)`` failed after SQL (no column 7). ``sa.true()`` is written
    ``1`` on SQLite and read as a position there and on MariaDB (pages of 1:
    1 of 30 rows); PostgreSQL failed after SQL ("non-integer constant in
    ORDER BY", also for ``sa.null()``). A constant orders nothing: refused
    on every database.
    """
    t = _items()
    constant = value if isinstance(value, sa.ColumnElement) else sa.literal(value)
    stmt = sa.select(t.c.id, t.c.price).order_by(constant.desc(), t.c.id)
    with (
        engine.connect() as conn,
        recording(engine) as seen,
        pytest.raises(PaginationError, match="a constant"),
    ):
        paginate(conn, stmt, t.c.id, limit=2)
    assert seen == []


def test_typeid_ids_alone_sorted_by_a_hidden_nullable_key(engine: Engine, orm: None) -> None:
    """select(Member.id) by name (NULLs, unicode), DISTINCT too: Core and ORM rows of typed ids."""
    _members(engine)
    stmt = sa.select(Member.id).order_by(Member.name.desc(), Member.id.desc())
    with Session(engine) as session:
        assert _walk(engine, session, stmt, Member.id, ident=_ident) == "walked"
    with engine.connect() as conn:
        assert _walk(engine, conn, stmt, Member.id, ident=_ident) == "walked"
        if engine.dialect.name != "postgresql":  # (which refuses the unpaged statement)
            distinct = stmt.distinct()
            assert _walk(engine, conn, distinct, Member.id, ident=_ident) == "walked"
