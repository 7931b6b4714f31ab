"""Adversarial pages: what a real application feeds paginate() and its cursors.

Each test is one defect found by using the library the way an application
does (sealed cursors, forged cursors, the column types a model declares),
on SQLite, PostgreSQL and MariaDB.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from conftest import recording
from sqlalchemy_ulid import (
    ULID,
    CursorSealer,
    InvalidCursor,
    PaginationError,
    ULIDType,
    paginate,
)
from sqlalchemy_ulid._paging._cursor import decode, encode

MS = 1_712_345_678_901
KEY = bytes(range(32))
meta = sa.MetaData()
rows = sa.Table(
    "adversarial_rows",
    meta,
    sa.Column("id", ULIDType(), primary_key=True),
    sa.Column("total", sa.Integer, nullable=False),
    # What `Mapped[float]` declares: FLOAT, single precision on MariaDB; and
    # REAL, single precision, on PostgreSQL (SQLite stores a double).
    sa.Column("score", sa.Float().with_variant(sa.REAL(), "postgresql"), nullable=False),
)
IDS = [ULID.from_parts(MS + n, n) for n in range(9)]
SCORES = [0.1, 0.1, 0.1, 0.3, 0.123456789, 0.123456789, 2.7, 2.7, 16777217.0]


@pytest.fixture
def table(engine: Engine) -> Iterator[sa.Table]:
    meta.drop_all(engine)
    meta.create_all(engine)
    with engine.begin() as conn:
        conn.execute(
            rows.insert(),
            [
                {"id": ident, "total": n % 3, "score": score}
                for n, (ident, score) in enumerate(zip(IDS, SCORES, strict=True))
            ],
        )
    yield rows
    meta.drop_all(engine)


def _walk(conn: sa.Connection, stmt: sa.Select[Any], size: int) -> list[ULID]:
    """Every page forward; bounded, so a cursor that never advances fails fast."""
    got: list[ULID] = []
    cursor = None
    for _ in range(2 * len(IDS) + 2):
        page = paginate(conn, stmt, rows.c.id, after=cursor, limit=size)
        got += [row.id for row in page.items]
        if page.next_cursor is None:
            return got
        cursor = page.next_cursor
    return got  # did not end: longer than the oracle


@pytest.mark.parametrize("descending", [True, False], ids=["desc", "asc"])
def test_single_precision_float_key_walks_exactly_or_is_refused(
    engine: Engine, table: sa.Table, descending: bool
) -> None:
    score = table.c.score.desc() if descending else table.c.score
    order = [score, table.c.id.desc() if descending else table.c.id]
    stmt = sa.select(table.c.id, table.c.score).order_by(*order)
    with engine.connect() as conn:
        if engine.dialect.name != "sqlite":
            # The row gives the value back rounded to decimal text (MariaDB: 6
            # digits, 0.123457; PostgreSQL: 0.1 for the float 0.100000001490116);
            # a cursor binding that double never matches the stored value, so
            # the cursor's ties would be skipped (DESC) or the page would never
            # advance (ASC). Refused before any SQL, naming the fix.
            with recording(engine) as seen, pytest.raises(PaginationError, match=r"sa\.Double"):
                paginate(conn, stmt, rows.c.id, limit=2)
            assert seen == []
            return
        want = [row.id for row in conn.execute(stmt)]
        for size in (1, 2):
            assert _walk(conn, stmt, size) == want, size


@pytest.mark.parametrize(
    ("variant", "single"),
    [
        (sa.Float(), {"postgresql": False, "mysql": True}),  # PG FLOAT is double precision
        (sa.REAL(), {"postgresql": True, "mysql": False}),  # MariaDB REAL is a DOUBLE
        (sa.Float(precision=24), {"postgresql": True, "mysql": True}),
        (sa.Float(precision=25), {"postgresql": False, "mysql": False}),
        (sa.Double(), {"postgresql": False, "mysql": False}),
        (sa.Numeric(10, 4), {"postgresql": False, "mysql": False}),
    ],
    ids=["Float", "REAL", "Float(24)", "Float(25)", "Double", "Numeric"],
)
def test_which_float_types_are_single_precision(
    engine: Engine, variant: sa.types.TypeEngine[Any], single: dict[str, bool]
) -> None:
    table = sa.Table(
        "adversarial_floats",
        sa.MetaData(),
        sa.Column("id", ULIDType(), primary_key=True),
        sa.Column("v", variant, nullable=False),
    )
    stmt = sa.select(table.c.id, table.c.v).order_by(table.c.v, table.c.id)
    table.create(engine)
    try:
        with engine.connect() as conn:
            if single.get(engine.dialect.name, False):
                with pytest.raises(PaginationError, match="single-precision"):
                    paginate(conn, stmt, table.c.id, limit=2)
            else:
                assert paginate(conn, stmt, table.c.id, limit=2).items == []
    finally:
        table.drop(engine)


def _forged(cursor: str, first: object) -> str:
    """The cursor with its first key replaced: anyone can write one (not sealed)."""
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    sort = raw[1:7]
    values = decode(cursor, sort, 2)
    return encode(sort, [first, values[1]])


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 10**300], ids=["2**63", "-2**63-1", "e300"])
def test_forged_integer_out_of_range_is_invalid_before_sql(
    engine: Engine, table: sa.Table, value: int
) -> None:
    stmt = sa.select(table).order_by(table.c.total.desc(), table.c.id.desc())
    with engine.connect() as conn:
        page = paginate(conn, stmt, table.c.id, limit=2)
        assert page.next_cursor is not None
        forged = _forged(page.next_cursor, value)
        with recording(engine) as seen, pytest.raises(InvalidCursor):
            paginate(conn, stmt, table.c.id, after=forged, limit=2)
        assert seen == []
        # A value the column holds is still a position.
        edge = _forged(page.next_cursor, 2**31 - 1)
        assert paginate(conn, stmt, table.c.id, after=edge, limit=2).items


@pytest.mark.parametrize("value", [2**31, -(2**31) - 1], ids=["2**31", "-2**31-1"])
def test_forged_integer_past_the_column_width(engine: Engine, table: sa.Table, value: int) -> None:
    # `total` is a 32-bit INTEGER. PostgreSQL binds the value as ::INTEGER and
    # fails after SQL ("integer out of range"); MariaDB holds no such row either.
    # SQLite's INTEGER holds any 64-bit value, so there it is a position.
    stmt = sa.select(table).order_by(table.c.total.desc(), table.c.id.desc())
    with engine.connect() as conn:
        page = paginate(conn, stmt, table.c.id, limit=2)
        assert page.next_cursor is not None
        forged = _forged(page.next_cursor, value)
        if engine.dialect.name == "sqlite":
            paginate(conn, stmt, table.c.id, after=forged, limit=2)
            return
        with recording(engine) as seen, pytest.raises(InvalidCursor):
            paginate(conn, stmt, table.c.id, after=forged, limit=2)
        assert seen == []


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), float("-inf"), Decimal("NaN"), Decimal("-Infinity")],
    ids=["nan", "inf", "-inf", "Decimal-NaN", "Decimal--inf"],
)
def test_forged_non_finite_number(engine: Engine, value: float | Decimal) -> None:
    # MariaDB/MySQL store no NaN or infinity, and PyMySQL refuses to bind one
    # (ProgrammingError after the SQL is built): refused as a forged cursor.
    # SQLite binds a NaN as NULL: refused too. PostgreSQL holds them all, and
    # SQLite infinities, so there they are positions.
    table = sa.Table(
        "adversarial_numbers",
        sa.MetaData(),
        sa.Column("id", ULIDType(), primary_key=True),
        sa.Column("d", sa.Double, nullable=False),
        sa.Column("n", sa.Numeric(10, 2), nullable=False),
    )
    table.create(engine)
    try:
        with engine.begin() as conn:
            conn.execute(table.insert(), [{"id": i, "d": 1.5, "n": Decimal(2)} for i in IDS[:3]])
        key = table.c.d if isinstance(value, float) else table.c.n
        stmt = sa.select(table).order_by(key, table.c.id)
        with engine.connect() as conn:
            page = paginate(conn, stmt, table.c.id, limit=1)
            assert page.next_cursor is not None
            forged = _forged(page.next_cursor, value)
            nan = value != value  # (NaN is not itself)
            if engine.dialect.name == "postgresql" or (engine.dialect.name == "sqlite" and not nan):
                paginate(conn, stmt, table.c.id, after=forged, limit=1)
                return
            with recording(engine) as seen, pytest.raises(InvalidCursor):
                paginate(conn, stmt, table.c.id, after=forged, limit=1)
            assert seen == []
    finally:
        table.drop(engine)


@pytest.mark.parametrize(
    "order",
    [
        [rows.c.total.desc(), rows.c.id.desc()],
        [rows.c.total, rows.c.id.desc()],
    ],
    ids=["total desc, id desc", "total, id desc"],
)
def test_sealed_multi_key_token_opens_into_paginate_kwargs(
    engine: Engine, table: sa.Table, order: list[Any]
) -> None:
    # The documented idiom: paginate(..., **sealer.open(token)). A sort by
    # several keys has its direction in its ORDER BY (and its cursor's
    # fingerprint), so the token must not impose descending=False on it.
    sealer = CursorSealer(KEY, context="orders")
    stmt = sa.select(table).order_by(*order)
    with engine.connect() as conn:
        want = [row.id for row in conn.execute(stmt)]
        got: list[ULID] = []
        page = paginate(conn, stmt, table.c.id, limit=4)
        for _ in range(5):
            got += [row.id for row in page.items]
            token, _ = sealer.seal(page)
            if token is None:
                break
            page = paginate(conn, stmt, table.c.id, limit=4, **sealer.open(token))
        assert got == want


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "adversarial_orders"

    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True)
    total: Mapped[int]


@pytest.fixture
def orders(engine: Engine) -> Iterator[list[ULID]]:
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    ids = IDS[:6]
    with Session(engine) as session:
        session.add_all([Order(id=ident, total=10 * (n + 1)) for n, ident in enumerate(ids)])
        session.commit()
    yield ids
    Base.metadata.drop_all(engine)


def test_sort_key_of_an_entity_beside_a_column_is_the_sorted_value(
    engine: Engine, orders: list[ULID]
) -> None:
    stmt = sa.select(Order, sa.literal(1).label("one")).order_by(
        Order.total.desc(), Order.id.desc()
    )
    with Session(engine) as session:
        if engine.dialect.name != "sqlite":
            session.connection(execution_options={"isolation_level": "READ COMMITTED"})
        loaded = session.scalars(sa.select(Order)).all()  # earlier in the request
        with engine.begin() as conn:  # another request moves one order to the top
            conn.execute(sa.update(Order).where(Order.id == orders[2]).values(total=100))
        want = list(session.scalars(sa.select(Order.id).order_by(*stmt._order_by_clauses)))
        got: list[ULID] = []
        cursor = None
        for _ in range(len(orders) + 1):
            page = paginate(session, stmt, Order.id, after=cursor, limit=1)
            got += [row[0].id for row in page.items]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert got == want
        assert loaded  # held, so the identity map keeps them
