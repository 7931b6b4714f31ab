"""Sort keys read and bound as the database computes and stores them (issue 29, follow-up).

Each was found by the paging fuzzer (tests/_paging_fuzz.py) on main: keys
typed by SQLAlchemy as their first operand (a cursor the next page refused,
or rows lost), ORDER BY a position, forged numbers that failed after SQL,
a bind-only TypeDecorator, PostgreSQL's extract('epoch').
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from conftest import recording
from sqlalchemy_ulid import ULID, InvalidCursor, PaginationError, ULIDType, paginate
from sqlalchemy_ulid._dialects import PagingSQL
from sqlalchemy_ulid._paging._computed import computed_type
from test_paging_defects import assert_pages_like_the_query

MS = 1_712_345_678_901


class Prefixed(sa.types.TypeDecorator[str]):
    """Stored with a prefix its bind adds; results not processed (read as stored)."""

    impl = sa.String(16)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        return None if value is None else f"p:{value}"


meta = sa.MetaData()
things = sa.Table(
    "paging_computed_things",
    meta,
    sa.Column("id", ULIDType(), primary_key=True),
    sa.Column("n", sa.Integer, nullable=True),
    sa.Column("f", sa.Double, nullable=True),
    sa.Column("p", sa.Numeric(10, 2), nullable=False),
    sa.Column("tag", Prefixed(), nullable=False),
    sa.Column("wait", sa.Interval, nullable=False),
)


@pytest.fixture
def table(engine: Engine) -> Iterator[sa.Table]:
    meta.drop_all(engine)
    meta.create_all(engine)
    rng = random.Random(29)
    rows = [
        {
            "id": ULID.from_parts(MS + k // 3, rng.getrandbits(80)),
            "n": rng.choice([None, 0, 1, 2]),
            "f": rng.choice([None, 0.5, 1.5, 2.25]),
            "p": Decimal(rng.choice(["0.99", "1.00", "1.01"])),
            "tag": rng.choice(["a", "b"]),
            "wait": timedelta(seconds=rng.choice([0, 1]), microseconds=rng.choice([0, 250000])),
        }
        for k in range(14)
    ]
    with engine.begin() as conn:
        conn.execute(things.insert(), rows)
    yield things
    meta.drop_all(engine)


def test_computed_type_is_the_operands_common_type() -> None:
    t = things.c
    facts = PagingSQL()
    assert isinstance(computed_type(sa.func.coalesce(t.n, t.f), facts), sa.Double)
    assert isinstance(computed_type(t.p + t.f, facts), sa.Double)
    assert isinstance(computed_type(sa.case((t.n > 0, t.n), else_=t.p), facts), sa.Numeric)
    assert isinstance(computed_type(sa.func.coalesce(t.n, -1), facts), sa.Integer)
    pg = PagingSQL(extract_numeric=True)
    assert isinstance(computed_type(sa.extract("epoch", t.wait), pg), sa.Numeric)
    assert isinstance(computed_type(sa.extract("epoch", t.wait), facts), sa.Integer)


@pytest.mark.parametrize(
    "key",
    [
        lambda t: sa.func.coalesce(t.c.n, t.c.f),  # INTEGER and DOUBLE: a double
        lambda t: sa.func.coalesce(t.c.f, t.c.n),
        lambda t: t.c.p + t.c.f,  # NUMERIC and DOUBLE: a double
        lambda t: t.c.p / 3,  # on SQLite, a double rounded to two places as read
        lambda t: t.c.tag,  # a TypeDecorator that processes binds only
    ],
    ids=["coalesce-int-double", "coalesce-double-int", "numeric-plus-double", "third", "bind-only"],
)
@pytest.mark.parametrize("selected", [False, True], ids=["hidden", "selected"])
def test_computed_keys_page_like_the_query(
    engine: Engine, table: sa.Table, key: Any, selected: bool
) -> None:
    expr = key(table)
    shown = [expr.label("k")] if selected else [table.c.f]
    stmt = sa.select(table.c.id, *shown).order_by(expr.desc(), table.c.id)
    with engine.connect() as conn:
        assert_pages_like_the_query(conn, stmt, table.c.id, ident=lambda row: row.id)


def test_epoch_of_an_interval_pages_on_postgresql(engine: Engine, table: sa.Table) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("extract('epoch' ...) of an interval is PostgreSQL's")
    seconds = sa.extract("epoch", table.c.wait)
    stmt = sa.select(table.c.id).order_by(seconds, table.c.id.desc())
    with engine.connect() as conn:
        assert_pages_like_the_query(conn, stmt, table.c.id, ident=lambda row: row)


@pytest.mark.parametrize("position", [sa.literal_column("2"), sa.text("2")], ids=["column", "text"])
def test_order_by_position_refused_before_sql(
    engine: Engine, table: sa.Table, position: Any
) -> None:
    stmt = sa.select(table.c.id, table.c.n).order_by(position, table.c.id)
    with (
        engine.connect() as conn,
        recording(engine) as seen,
        pytest.raises(PaginationError, match="position"),
    ):
        paginate(conn, stmt, table.c.id)
    assert seen == []


def test_decimal_too_long_to_bind_refused_before_sql(engine: Engine, table: sa.Table) -> None:
    """A forged 70-digit decimal: MariaDB/MySQL take 65 digits (refused), PostgreSQL pages it."""
    from sqlalchemy_ulid._paging._cursor import encode
    from sqlalchemy_ulid._paging._sort import read_sort

    stmt = sa.select(table.c.id, table.c.p).order_by(table.c.p, table.c.id)
    _, sort = read_sort(stmt, table.c.id, None, False, lambda: engine.dialect)
    assert sort is not None
    ident = str(ULID.from_parts(MS, 0))
    forged = encode(sort.fingerprint, [Decimal("9" * 40 + "." + "9" * 30), ident])
    with engine.connect() as conn:
        if engine.dialect.name != "mysql":
            assert paginate(conn, stmt, table.c.id, after=forged).items == []
            return
        with recording(engine) as seen, pytest.raises(InvalidCursor):
            paginate(conn, stmt, table.c.id, after=forged)
        assert seen == []
