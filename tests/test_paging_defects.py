"""Regression tests of issue 29: the seven ways paginate() skipped, repeated or misordered rows.

Each test is one defect, on SQLite, PostgreSQL and MariaDB (DISTINCT ON on
PostgreSQL, the only one that has it): every walk, forward and backward at
several page sizes, equals the unpaged statement, or the statement is
refused with PaginationError before any SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from conftest import recording
from sqlalchemy_ulid import ULID, PaginationError, ULIDType, paginate
from sqlalchemy_ulid._paging._nulls import may_be_null
from sqlalchemy_ulid._paging._sort import read_sort

MS = 1_712_345_678_901


class Base(DeclarativeBase):
    pass


class Customer(Base):
    __tablename__ = "paging_defects_customers"

    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(8))  # NOT NULL


class Order(Base):
    __tablename__ = "paging_defects_orders"

    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True)
    customer_id: Mapped[ULID | None] = mapped_column(ULIDType())
    total: Mapped[int]
    x: Mapped[int | None]
    d: Mapped[Decimal] = mapped_column(sa.Numeric(30, 20))
    wait: Mapped[timedelta] = mapped_column(sa.Interval)


orders, customers = Order.__table__, Customer.__table__
CUSTOMERS = [ULID.from_parts(MS, n) for n in range(4)]
ORDERS = [ULID.from_parts(MS + 1 + n // 3, n) for n in range(12)]


@pytest.fixture
def db(engine: Engine) -> Iterator[None]:
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    try:
        with engine.begin() as conn:
            names = ["ann", "bob", "ann", "cy"]
            conn.execute(
                customers.insert(),
                [{"id": i, "name": n} for i, n in zip(CUSTOMERS, names, strict=True)],
            )
            conn.execute(
                orders.insert(),
                [
                    {
                        "id": ident,
                        # half the orders have no customer (NULL, or one that is missing)
                        "customer_id": [CUSTOMERS[n % 4], None, ULID.from_parts(MS, 99)][n % 3]
                        if n % 2
                        else CUSTOMERS[n % 4],
                        "total": n % 4,
                        "x": None if n % 3 == 0 else n % 2,
                        "d": Decimal(f"1.00000000000000000{n % 3}01"),
                        "wait": timedelta(days=n % 2),
                    }
                    for n, ident in enumerate(ORDERS)
                ],
            )
        yield
    finally:
        Base.metadata.drop_all(engine)


def _id(item: Any) -> Any:
    return item[0] if isinstance(item, sa.Row) else item.id


def assert_pages_like_the_query(
    session: Any,
    stmt: sa.Select[Any],
    column: Any,
    ident: Callable[[Any], Any] = _id,
    sizes: tuple[int, ...] = (1, 2, 3),
) -> list[Any]:
    """Walk every page forward and backward at each size; each walk equals the unpaged query."""
    result = session.execute(stmt)
    rows = result.scalars().all() if len(stmt.column_descriptions) == 1 else result.all()
    want = [ident(row) for row in rows if ident(row) is not None]
    assert want
    for size in sizes:
        got: list[Any] = []
        cursor, last = None, None
        for _ in range(len(want) + 2):
            page = paginate(session, stmt, column, after=cursor, limit=size)
            got += [ident(item) for item in page.items]
            last = page.cursors[-1] if page.items else last
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert got == want, ("forward", size)
        chunks: list[list[Any]] = []
        cursor = last
        for _ in range(len(want) + 2):
            page = paginate(session, stmt, column, before=cursor, limit=size)
            chunks.insert(0, [ident(item) for item in page.items])
            if page.prev_cursor is None:
                break
            cursor = page.prev_cursor
        assert [i for chunk in chunks for i in chunk] == want[:-1], ("backward", size)
    return want


# -- 1. an outer join below the statement ------------------------------------------


@pytest.mark.parametrize("form", ["subquery", "cte", "two levels"])
@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
def test_1_key_null_from_an_outer_join_inside_a_subquery_or_cte(
    engine: Engine, db: None, form: str, descending: bool
) -> None:
    inner = sa.select(orders.c.id, customers.c.name.label("cname")).outerjoin(
        customers, orders.c.customer_id == customers.c.id
    )
    if form == "two levels":
        inner = sa.select(inner.subquery("deeper"))
    sub = inner.cte("named") if form == "cte" else inner.subquery()
    key = sub.c.cname.desc() if descending else sub.c.cname
    stmt = sa.select(sub).order_by(key, sub.c.id.desc() if descending else sub.c.id)
    assert may_be_null(sub.c.cname, stmt)  # customers.name is NOT NULL, but not here
    with engine.connect() as conn:
        want = assert_pages_like_the_query(conn, stmt, sub.c.id)
    assert len(want) == len(ORDERS)


# -- 2. a union whose branches differ ---------------------------------------------


@pytest.mark.parametrize("nullable_first", [False, True], ids=["not-null-first", "nullable-first"])
def test_2_union_key_nullable_in_one_branch(engine: Engine, db: None, nullable_first: bool) -> None:
    # total is NOT NULL, x is nullable: the union's column is nullable,
    # whichever branch comes first (it was decided by set iteration order).
    low = sa.select(orders.c.id, orders.c.total.label("v")).where(orders.c.total < 2)
    high = sa.select(orders.c.id, orders.c.x.label("v")).where(orders.c.total >= 2)
    branches = [high, low] if nullable_first else [low, high]
    sub = sa.union_all(*branches).subquery()
    stmt = sa.select(sub).order_by(sub.c.v.desc(), sub.c.id)
    assert may_be_null(sub.c.v, stmt)
    _, sort = read_sort(stmt, sub.c.id, None, False, lambda: engine.dialect)
    assert sort is not None
    assert [key.nullable for key in sort.keyset.keys] == [True, False]
    with engine.connect() as conn:
        assert_pages_like_the_query(conn, stmt, sub.c.id)


# -- 3. keys a cursor cannot carry exactly ------------------------------------------


def test_3_lossy_numeric_key_refused_before_sql(engine: Engine, db: None) -> None:
    lossy = sa.type_coerce(orders.c.d, sa.Numeric(30, 20, asdecimal=False))
    stmt = sa.select(orders.c.id, lossy.label("d")).order_by(lossy, orders.c.id)
    with (
        engine.connect() as conn,
        recording(engine) as seen,
        pytest.raises(PaginationError, match="asdecimal"),
    ):
        paginate(conn, stmt, orders.c.id)
    assert seen == []


def test_3_exact_numeric_keys_page(engine: Engine, db: None) -> None:
    # The same values as Decimals (the default) page exactly; as floats, a
    # Numeric of at most 15 digits does too.
    short = sa.type_coerce(orders.c.total, sa.Numeric(10, 2, asdecimal=False))
    with engine.connect() as conn:
        for key in (orders.c.d, short):
            stmt = sa.select(orders.c.id, key.label("k")).order_by(key.desc(), orders.c.id)
            assert_pages_like_the_query(conn, stmt, orders.c.id)


class Rounded(sa.TypeDecorator[Decimal]):
    """Returns its values rounded: what the row shows is not what the database holds."""

    impl = sa.Numeric(30, 20)
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        return None if value is None else round(value, 2)


def test_3_type_decorator_that_changes_results_is_read_as_stored(engine: Engine, db: None) -> None:
    rounded = sa.type_coerce(orders.c.d, Rounded())
    with Session(engine) as session:
        # One entity: the key is read as the database holds it, beside the row.
        stmt = sa.select(Order).order_by(rounded, Order.id.desc())
        assert_pages_like_the_query(session, stmt, Order.id)
        # Rows that show the rounded value: the key is read beside them, as stored.
        rows = sa.select(orders.c.id, rounded.label("d")).order_by(rounded, orders.c.id)
        assert_pages_like_the_query(session, rows, orders.c.id)
        page = paginate(session, rows, orders.c.id, limit=2)
        assert list(page.items[0]._mapping) == ["id", "d"]


# -- 4. DISTINCT ON --------------------------------------------------------------------


def test_4_distinct_on_pages_backward_too(engine: Engine, db: None) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("DISTINCT ON is PostgreSQL's")
    try:
        from sqlalchemy.dialects.postgresql import distinct_on
    except ImportError:  # SQLAlchemy 2.0
        stmt = sa.select(orders.c.id, orders.c.total, orders.c.x).distinct(orders.c.total)
    else:
        stmt = sa.select(orders.c.id, orders.c.total, orders.c.x)
        stmt = stmt.ext(distinct_on(orders.c.total))
    stmt = stmt.order_by(orders.c.total, orders.c.x.desc(), orders.c.id)
    with engine.connect() as conn:
        want = assert_pages_like_the_query(conn, stmt, orders.c.id)
    assert len(want) == 4  # one row per total


# -- 5. an outer-joined entity that is None ----------------------------------------


@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
def test_5_key_of_an_outer_joined_entity_that_is_none(
    engine: Engine, db: None, descending: bool
) -> None:
    name = Customer.name.desc() if descending else Customer.name
    stmt = (
        sa.select(Order, Customer)
        .outerjoin(Customer, Order.customer_id == Customer.id)
        .order_by(name, Order.id)
    )
    with Session(engine) as session:
        want = assert_pages_like_the_query(session, stmt, Order.id, ident=lambda r: r[0].id)
        assert len(want) == len(ORDERS)
        assert any(row[1] is None for row in session.execute(stmt))


# -- 6. aggregate and window keys ---------------------------------------------------


def test_6_aggregate_keys_page_as_a_subquery(engine: Engine, db: None) -> None:
    spent = sa.func.sum(orders.c.total).label("spent")
    stmt = (
        sa.select(customers.c.id, spent)
        .join(orders, orders.c.customer_id == customers.c.id)
        .group_by(customers.c.id)
        .order_by(spent.desc(), customers.c.id)
    )
    with engine.connect() as conn:
        with recording(engine) as seen:
            assert_pages_like_the_query(conn, stmt, customers.c.id)
        assert all("sqlalchemy_ulid_paged" in sql for sql in seen[1:])
        page = paginate(conn, stmt, customers.c.id, limit=2)
        assert page.items[0]._fields == ("id", "spent")


@pytest.mark.parametrize("window", ["row_number", "sum over partition"])
def test_6_window_keys_page_as_a_subquery(engine: Engine, db: None, window: str) -> None:
    if window == "row_number":
        key = sa.func.row_number().over(order_by=(orders.c.total, orders.c.id)).label("w")
    else:
        key = sa.func.sum(orders.c.total).over(partition_by=orders.c.customer_id).label("w")
    stmt = sa.select(orders.c.id, key).order_by(key.desc(), orders.c.id)
    with engine.connect() as conn:
        assert_pages_like_the_query(conn, stmt, orders.c.id, ident=lambda r: tuple(r))


def test_6_entities_with_an_aggregate_key_refused_before_sql(engine: Engine, db: None) -> None:
    spent = sa.func.sum(Order.total).label("spent")
    stmt = (
        sa.select(Customer, spent)
        .join(Order, Order.customer_id == Customer.id)
        .group_by(Customer.id, Customer.name)
        .order_by(spent.desc(), Customer.id)
    )
    with (
        Session(engine) as session,
        recording(engine) as seen,
        pytest.raises(PaginationError, match=r"aliased\(Model, sub\)"),
    ):
        paginate(session, stmt, Customer.id)
    assert seen == []


# -- 7. refusals that were wrong or late ----------------------------------------------


@pytest.mark.parametrize("ordered", [True, False], ids=["by spent", "id order"])
def test_7_group_by_the_paging_column_makes_it_unique(
    engine: Engine, db: None, ordered: bool
) -> None:
    spent = sa.func.sum(orders.c.total).label("spent")
    stmt = sa.select(orders.c.customer_id, spent).group_by(orders.c.customer_id)
    if ordered:
        stmt = stmt.order_by(spent, orders.c.customer_id)
    with engine.connect() as conn:
        if not ordered:
            # (the oracle: the id order, without the group of NULL customers)
            want = [r[0] for r in conn.execute(stmt.order_by(orders.c.customer_id)) if r[0]]
            got = paginate(conn, stmt, orders.c.customer_id, limit=50).items
            assert [r[0] for r in got] == want
            return
        assert_pages_like_the_query(conn, stmt, orders.c.customer_id)


def test_7_interval_key_refused_before_sql(engine: Engine, db: None) -> None:
    stmt = sa.select(orders.c.id, orders.c.wait).order_by(orders.c.wait, orders.c.id)
    with (
        engine.connect() as conn,
        recording(engine) as seen,
        pytest.raises(PaginationError, match="timedelta"),
    ):
        paginate(conn, stmt, orders.c.id)
    assert seen == []
