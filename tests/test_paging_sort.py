"""Keyset pages in any ORDER BY: the oracle, key types, NULLs, composite keys, SQL.

Everything runs on SQLite, PostgreSQL and MariaDB. The oracle is the
database itself: the concatenated pages must equal the unpaged statement.
"""

from __future__ import annotations

import enum
import random
import uuid
from collections.abc import Callable, Iterator
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from conftest import Backend, recording
from sqlalchemy_ulid import (
    ULID,
    Page,
    PaginationError,
    ULIDType,
    follow,
    new_ulid,
    paginate,
)
from sqlalchemy_ulid._paging._cursor import decode
from sqlalchemy_ulid._paging._sort import read_sort

MS = 1_712_345_678_901
meta = sa.MetaData()
items = sa.Table(
    "paging_sort_items",
    meta,
    sa.Column("id", ULIDType(), primary_key=True),
    sa.Column("a", sa.Integer, nullable=True),
    sa.Column("b", sa.String(8), nullable=True),
    sa.Column("n", sa.Integer, nullable=False),
)
sa.Index("paging_sort_items_n_id", items.c.n, items.c.id)


def _ids(count: int, seed: int = 0) -> list[ULID]:
    rng = random.Random(seed)
    return [ULID.from_parts(MS + n // 2, rng.getrandbits(80)) for n in range(count)]


@pytest.fixture
def table(engine: Engine) -> Iterator[sa.Table]:
    meta.drop_all(engine)
    meta.create_all(engine)
    yield items
    meta.drop_all(engine)


def _fill(engine: Engine, rows: list[dict[str, Any]]) -> None:
    with engine.begin() as conn:
        conn.execute(items.delete())
        if rows:
            conn.execute(items.insert(), rows)


def walk_forward(fetch: Callable[..., Page[Any]], size: int) -> tuple[list[Any], list[Page[Any]]]:
    got: list[Any] = []
    pages: list[Page[Any]] = []
    cursor = None
    while True:
        page = fetch(after=cursor, limit=size)
        pages.append(page)
        got += list(page.items)
        assert page.has_more == (page.next_cursor is not None)
        if page.next_cursor is None:
            return got, pages
        cursor = page.next_cursor
        assert len(pages) <= 100


def walk_backward(fetch: Callable[..., Page[Any]], size: int, start: str) -> list[Any]:
    """From the cursor ``start`` back to the first row (the start row excluded)."""
    chunks: list[list[Any]] = []
    cursor = start
    while True:
        page = fetch(before=cursor, limit=size)
        chunks.append(list(page.items))
        assert page.has_more == (page.prev_cursor is not None)
        if page.prev_cursor is None:
            break
        cursor = page.prev_cursor
        assert len(chunks) <= 100
    return [row for chunk in reversed(chunks) for row in chunk]


# -- the oracle -------------------------------------------------------------------

# (the ORDER BY paged, the ORDER BY MariaDB runs as the oracle: it has no
# NULLS FIRST/LAST, so the oracle spells the NULL placement out)
a, b, n, id_ = items.c.a, items.c.b, items.c.n, items.c.id
ORDERS: list[tuple[str, list[Any], list[Any] | None]] = [
    ("a desc, id desc", [a.desc(), id_.desc()], None),
    ("a, b desc, id", [a, b.desc(), id_], None),
    ("n desc, id desc", [n.desc(), id_.desc()], None),
    ("n, a, id desc", [n, a, id_.desc()], None),
    (
        "a nulls last, b desc nulls first, id",
        [a.nulls_last(), b.desc().nulls_first(), id_],
        [a.is_(None), a, b.is_(None).desc(), b.desc(), id_],
    ),
    ("a desc nulls last, id", [a.desc().nulls_last(), id_], [a.desc(), id_]),
]

rows_strategy = st.lists(
    st.tuples(
        st.none() | st.integers(0, 3),
        st.none() | st.sampled_from(["a", "B", "b", "c"]),
        st.integers(0, 2),
    ),
    max_size=9,
)


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=rows_strategy)
def test_oracle_every_order_every_page_size(
    backend: Backend, engine: Engine, table: sa.Table, data: list[tuple[Any, Any, int]]
) -> None:
    ids = _ids(len(data), seed=len(data))
    rows = [{"id": i, "a": x, "b": y, "n": z} for i, (x, y, z) in zip(ids, data, strict=True)]
    _fill(engine, rows)
    with engine.connect() as conn:
        for name, order, oracle in ORDERS:
            stmt = sa.select(table).order_by(*order)
            run = order if oracle is None or backend.name != "mysql" else oracle
            want = [row.id for row in conn.execute(sa.select(table).order_by(*run))]

            def fetch(stmt: sa.Select[Any] = stmt, **kwargs: Any) -> Page[Any]:
                return paginate(conn, stmt, table.c.id, **kwargs)

            for size in range(1, len(want) + 2):
                forward, pages = walk_forward(fetch, size)
                assert [row.id for row in forward] == want, (name, size)
                if not want:
                    continue
                last = pages[-1]
                assert last.cursors[-1] == fetch(after=None, limit=len(want)).cursors[-1]
                back = walk_backward(fetch, size, last.cursors[-1])
                assert [row.id for row in back] == want[:-1], (name, size, "backward")


def test_cursors_of_items_continue_after_each_item(engine: Engine, table: sa.Table) -> None:
    ids = _ids(9)
    _fill(engine, [{"id": i, "a": k % 3 or None, "b": "x", "n": k % 2} for k, i in enumerate(ids)])
    stmt = sa.select(table).order_by(table.c.a.desc(), table.c.id)
    with engine.connect() as conn:
        whole = [row.id for row in conn.execute(stmt)]
        page = paginate(conn, stmt, table.c.id, limit=4)
        assert page.cursors[-1] == page.next_cursor
        for index, cursor in enumerate(page.cursors):
            rest = paginate(conn, stmt, table.c.id, after=cursor, limit=20)
            assert [row.id for row in rest.items] == whole[index + 1 :]
            head = paginate(conn, stmt, table.c.id, before=cursor, limit=20)
            assert [row.id for row in head.items] == whole[:index]


def test_a_page_pickles_with_its_cursors(engine: Engine, table: sa.Table) -> None:
    import pickle

    _fill(engine, [{"id": i, "a": 1, "b": "x", "n": k} for k, i in enumerate(_ids(4))])
    with engine.connect() as conn:
        stmt = sa.select(table.c.id, table.c.n).order_by(table.c.n.desc(), table.c.id)
        page = paginate(conn, stmt, table.c.id, limit=3, total="exact")
    copy = pickle.loads(pickle.dumps(page))
    assert (copy.items, copy.next_cursor, copy.total) == (page.items, page.next_cursor, 4)
    assert copy.cursors == page.cursors


def test_descending_is_the_order_by_unless_given(engine: Engine, table: sa.Table) -> None:
    ids = sorted(_ids(5))
    _fill(engine, [{"id": i, "a": 1, "b": "x", "n": 0} for i in ids])
    with engine.connect() as conn:
        page = paginate(conn, sa.select(table.c.id).order_by(table.c.id.desc()), table.c.id)
        assert page.items == ids[::-1]
        assert page.next_cursor is None  # bare ids, as ever
        with pytest.raises(PaginationError, match="descending=False"):
            paginate(
                conn,
                sa.select(table).order_by(table.c.a, table.c.id.desc()),
                table.c.id,
                descending=False,
            )


# -- key types --------------------------------------------------------------------


class Color(enum.Enum):
    red = "r"
    green = "g"
    blue = "b"


class TypesBase(DeclarativeBase):
    pass


def _datetime6() -> sa.types.TypeEngine[Any]:
    # DATETIME(6) on MariaDB (microseconds), TIMESTAMPTZ on PostgreSQL.
    return sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql")


class Typed(TypesBase):
    __tablename__ = "paging_sort_types"

    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True)
    i: Mapped[int | None] = mapped_column(sa.BigInteger)
    dec: Mapped[Decimal | None] = mapped_column(sa.Numeric(12, 4))
    f: Mapped[float | None] = mapped_column(sa.Double)
    s: Mapped[str | None] = mapped_column(sa.String(12))
    flag: Mapped[bool | None] = mapped_column(sa.Boolean)
    color: Mapped[Color | None] = mapped_column(sa.Enum(Color))
    day: Mapped[date | None] = mapped_column(sa.Date)
    at: Mapped[datetime | None] = mapped_column(_datetime6())
    naive: Mapped[datetime | None] = mapped_column(
        sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql")
    )
    ref: Mapped[ULID | None] = mapped_column(ULIDType())
    u: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid())


def _typed_rows() -> list[dict[str, Any]]:
    rng = random.Random(7)
    base = datetime(2024, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
    strings = ["apple", "Apple", "APPLE", "banana", "Banana", "cherry", "Äpfel", "zed", "Zed"]
    rows = []
    for k, ident in enumerate(_ids(24, seed=5)):
        pick = rng.random() < 0.2  # about one value in five is NULL
        rows.append(
            {
                "id": ident,
                "i": None if pick else rng.choice([-2, 0, 5, 10**12]),
                "dec": None
                if pick
                else rng.choice([Decimal("0.1000"), Decimal("-3.3333"), Decimal("7")]),
                "f": None if pick else rng.choice([0.1, 0.1 + 2**-55, -1e-300, 2.5]),
                "s": None if pick else rng.choice(strings),
                "flag": None if pick else rng.choice([True, False]),
                "color": None if pick else rng.choice(list(Color)),
                "day": None if pick else date(2024, 1, 1) + timedelta(days=rng.choice([0, 1, 40])),
                "at": None
                if pick
                else base + timedelta(microseconds=rng.choice([0, 1, 2, 999_999])),
                "naive": None if pick else datetime(2024, 1, 1) + timedelta(microseconds=k % 3),
                "ref": None if pick else rng.choice(_ids(3, seed=9)),
                "u": None if pick else rng.choice([uuid.UUID(int=1), uuid.UUID(int=2 << 64)]),
            }
        )
    return rows


def _recreate(engine: Engine) -> None:
    """Drop and create the typed tables, then close the pool's idle connections.

    Dropping the enum type gives it a new OID. psycopg forgets its prepared
    statements on the connection that ran the DROP, but another pooled
    connection may still hold a prepared INSERT naming the old type ("cache
    lookup failed for type"), once the suite has left several in the pool.
    """
    TypesBase.metadata.drop_all(engine)
    TypesBase.metadata.create_all(engine)
    engine.dispose()


@pytest.fixture
def typed(engine: Engine) -> Iterator[type[Typed]]:
    _recreate(engine)
    with Session(engine) as session:
        session.execute(sa.insert(Typed), _typed_rows())
        session.commit()
    yield Typed
    TypesBase.metadata.drop_all(engine)


KEY_NAMES = ["i", "dec", "f", "s", "flag", "color", "day", "at", "naive", "ref", "u"]


@pytest.mark.parametrize("name", KEY_NAMES)
def test_each_key_type_walks_exactly(engine: Engine, typed: type[Typed], name: str) -> None:
    column = getattr(Typed, name)
    with Session(engine) as session:
        if name == "color" and engine.dialect.name == "mysql":
            # A native ENUM sorts by declaration but compares as text there.
            with recording(engine) as seen, pytest.raises(PaginationError, match="ENUM"):
                paginate(session, sa.select(Typed).order_by(column, Typed.id), Typed.id)
            assert seen == []
            return
        for order in ([column, Typed.id], [column.desc(), Typed.id.desc()]):
            stmt = sa.select(Typed).order_by(*order)
            want = [row.id for row in session.scalars(stmt)]

            def fetch(stmt: sa.Select[Any] = stmt, **kwargs: Any) -> Page[Any]:
                return paginate(session, stmt, Typed.id, **kwargs)

            forward, pages = walk_forward(fetch, 5)
            assert [row.id for row in forward] == want, name
            back = walk_backward(fetch, 3, pages[-1].cursors[-1])
            assert [row.id for row in back] == want[:-1], name


def test_single_precision_float_keys(engine: Engine, typed: type[Typed]) -> None:
    # MariaDB returns a FLOAT rounded to six digits: such a key is refused
    # there; elsewhere (float8 on PostgreSQL, REAL on SQLite) it pages.
    stmt = sa.select(Typed).order_by(sa.cast(Typed.f, sa.Float()), Typed.id)
    with Session(engine) as session:
        if engine.dialect.name == "mysql":
            with recording(engine) as seen, pytest.raises(PaginationError, match="FLOAT"):
                paginate(session, stmt, Typed.id)
            assert seen == []
            return
        want = [t.id for t in session.scalars(stmt)]
        got, _ = walk_forward(lambda **kw: paginate(session, stmt, Typed.id, **kw), 5)
        assert [t.id for t in got] == want


def test_expressions_and_labels_as_keys(engine: Engine, typed: type[Typed]) -> None:
    lowered = sa.func.lower(Typed.s)
    label = lowered.label("low")
    entities = sa.select(Typed).order_by(lowered.desc(), Typed.id)
    rows = sa.select(Typed.id, label).order_by(label, Typed.id.desc())
    with Session(engine) as session:
        for stmt, want in [
            (entities, [t.id for t in session.scalars(entities)]),
            (rows, [r.id for r in session.execute(rows)]),
        ]:

            def fetch(stmt: sa.Select[Any] = stmt, **kwargs: Any) -> Page[Any]:
                return paginate(session, stmt, Typed.id, **kwargs)

            forward, pages = walk_forward(fetch, 4)
            assert [item.id for item in forward] == want
            back = walk_backward(fetch, 3, pages[-1].cursors[-1])
            assert [item.id for item in back] == want[:-1]
        # The extra key column of an entity sort never shows in the items.
        assert all(isinstance(item, Typed) for item in fetch(stmt=entities).items)
        assert all(len(item) == 2 for item in fetch(stmt=rows).items)


def test_cursor_keeps_microseconds_zones_and_floats(engine: Engine, typed: type[Typed]) -> None:
    with Session(engine) as session:
        stmt = sa.select(Typed).where(Typed.at.is_not(None), Typed.f.is_not(None))
        stmt = stmt.order_by(Typed.at, Typed.f, Typed.id)
        page = paginate(session, stmt, Typed.id, limit=1)
        row = page.items[0]
        column = Typed.id.__clause_element__()
        _, sort = read_sort(stmt, column, None, True, lambda: engine.dialect)
        assert sort is not None
        at, f, ident = decode(page.cursors[0], sort.fingerprint, 3)
        if engine.dialect.name == "sqlite":  # dates are text there, compared as stored
            assert at == row.at.strftime("%Y-%m-%d %H:%M:%S.%f")
            return
        assert (at, f, ident) == (row.at, row.f, str(row.id))
        assert at.microsecond == row.at.microsecond
        assert at.utcoffset() == row.at.utcoffset()


def test_collation_decides_string_order(engine: Engine, typed: type[Typed]) -> None:
    # The database's own collation orders the strings; the pages follow it
    # (case-insensitive equals on MariaDB tie on the id, as in the ORDER BY).
    with Session(engine) as session:
        stmt = sa.select(Typed).where(Typed.s.is_not(None)).order_by(Typed.s, Typed.id)
        want = [row.id for row in session.scalars(stmt)]
        got: list[ULID] = []
        cursor = None
        while True:
            page = paginate(session, stmt, Typed.id, after=cursor, limit=2)
            got += [row.id for row in page.items]
            if not page.has_more:
                break
            cursor = page.next_cursor
        assert got == want
        python_order = sorted(session.scalars(stmt), key=lambda row: (row.s, row.id))
        if engine.dialect.name == "mysql":  # utf8mb4 general: not Python's code points
            assert [row.id for row in python_order] != want


# -- rows inserted and deleted between pages --------------------------------------


def test_rows_that_stay_are_seen_exactly_once(engine: Engine, table: sa.Table) -> None:
    ids = _ids(30, seed=3)
    rng = random.Random(11)
    _fill(
        engine,
        [{"id": i, "a": rng.choice([None, 1, 2]), "b": "x", "n": rng.randrange(3)} for i in ids],
    )
    stmt = sa.select(table).order_by(table.c.n.desc(), table.c.a, table.c.id.desc())
    stayed = set(ids)
    seen: list[ULID] = []
    cursor = None
    with engine.connect() as conn:
        while True:
            page = paginate(conn, stmt, table.c.id, after=cursor, limit=4)
            seen += [row.id for row in page.items]
            with engine.begin() as writer:
                gone = rng.choice(sorted(stayed - set(seen))) if stayed - set(seen) else None
                if gone is not None:
                    writer.execute(table.delete().where(table.c.id == gone))
                    stayed.discard(gone)
                writer.execute(
                    table.insert(),
                    [
                        {
                            "id": new_ulid(),
                            "a": rng.choice([None, 1, 2]),
                            "b": "y",
                            "n": rng.randrange(3),
                        }
                    ],
                )
                if page.items:  # delete the cursor's own row too, sometimes
                    last = page.items[-1].id
                    if rng.random() < 0.5:
                        writer.execute(table.delete().where(table.c.id == last))
            if not page.has_more:
                break
            cursor = page.next_cursor
    assert len(seen) == len(set(seen))
    assert stayed <= set(seen)


# -- the SQL ----------------------------------------------------------------------


def test_ulid_binds_survive_inside_a_row_value(engine: Engine, table: sa.Table) -> None:
    ids = _ids(6)
    _fill(engine, [{"id": i, "a": 1, "b": "x", "n": 0} for i in ids])
    with engine.connect() as conn:
        bound = sa.tuple_(
            sa.bindparam(None, 1, type_=sa.Integer), sa.bindparam(None, ids[2], type_=ULIDType())
        )
        query = sa.select(table.c.id).where(sa.tuple_(table.c.a, table.c.id) > bound)
        assert conn.scalars(query.order_by(table.c.id)).all() == ids[3:]


def _paged_sql(engine: Engine, stmt: sa.Select[Any], **kwargs: Any) -> tuple[str, Any]:
    captured: list[tuple[str, Any]] = []

    def grab(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        captured.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", grab)
    try:
        with engine.connect() as conn:
            paginate(conn, stmt, items.c.id, **kwargs)
    finally:
        sa.event.remove(engine, "before_cursor_execute", grab)
    return captured[0]


def test_explain_uses_the_two_key_index_without_a_sort(engine: Engine, table: sa.Table) -> None:
    ids = [ULID.from_parts(MS + k, k) for k in range(3000)]
    _fill(engine, [{"id": i, "a": None, "b": None, "n": k % 50} for k, i in enumerate(ids)])
    with engine.begin() as conn:
        conn.exec_driver_sql(
            {
                "postgresql": "ANALYZE paging_sort_items",
                "mysql": "ANALYZE TABLE paging_sort_items",
            }.get(engine.dialect.name, "ANALYZE")
        )
    stmt = sa.select(table).order_by(table.c.n.desc(), table.c.id.desc())
    with engine.connect() as conn:
        first = paginate(conn, stmt, table.c.id, limit=50)
    sql, params = _paged_sql(engine, stmt, after=first.next_cursor, limit=50)
    name = engine.dialect.name
    prefix = {"postgresql": "EXPLAIN ", "mysql": "EXPLAIN ", "sqlite": "EXPLAIN QUERY PLAN "}
    with engine.connect() as conn:
        plan = [tuple(row) for row in conn.exec_driver_sql(prefix[name] + sql, params)]
    text = " ".join(str(part) for row in plan for part in row)
    if name == "postgresql":
        assert "(n, id) <" in sql.replace("paging_sort_items.", "")  # a row value
        assert "Index Scan Backward using paging_sort_items_n_id" in text, text
        assert "Sort" not in text.replace("Sort Key", ""), text
    elif name == "mysql":
        assert "(n, id)" not in sql.replace("paging_sort_items.", "")  # the expansion
        (row,) = plan
        assert row[3] == "range", row  # the access type
        assert row[5] == "paging_sort_items_n_id", row  # the key used
        assert "filesort" not in str(row[9]), row
    else:
        assert "USING INDEX paging_sort_items_n_id" in text, text
        assert "TEMP B-TREE" not in text, text


# -- composite keys -----------------------------------------------------------------


class Event(TypesBase):
    __tablename__ = "paging_sort_tenant_events"

    tenant_id: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True)
    body: Mapped[str] = mapped_column(sa.String(10), default="x")


@pytest.fixture
def tenants(engine: Engine) -> Iterator[dict[int, list[ULID]]]:
    _recreate(engine)
    made = {1: sorted(_ids(7, seed=1)), 2: sorted(_ids(5, seed=2))}
    with Session(engine) as session:
        session.execute(
            sa.insert(Event), [{"tenant_id": t, "id": i} for t, ids in made.items() for i in ids]
        )
        session.commit()
    yield made
    TypesBase.metadata.drop_all(engine)


def test_composite_key_fixed_by_equality(engine: Engine, tenants: dict[int, list[ULID]]) -> None:
    with Session(engine) as session:
        stmt = sa.select(Event).where(Event.tenant_id == 2)
        got, _ = walk_forward(lambda **kw: paginate(session, stmt, Event.id, **kw), 2)
        assert [e.id for e in got] == tenants[2]
        newest = paginate(session, stmt.order_by(Event.id.desc()), Event.id, limit=2)
        assert [e.id for e in newest.items] == tenants[2][::-1][:2]
        assert newest.next_cursor == str(tenants[2][-2])  # bare ids


def test_composite_key_preceding_in_order_by(
    engine: Engine, tenants: dict[int, list[ULID]]
) -> None:
    with Session(engine) as session:
        stmt = sa.select(Event).order_by(Event.tenant_id.desc(), Event.id)
        got, _pages = walk_forward(lambda **kw: paginate(session, stmt, Event.id, **kw), 3)
        assert [(e.tenant_id, e.id) for e in got] == [(t, i) for t in (2, 1) for i in tenants[t]]


def test_composite_key_otherwise_refused_before_sql(
    engine: Engine, tenants: dict[int, list[ULID]]
) -> None:
    with Session(engine) as session, recording(engine) as seen:
        for stmt in (
            sa.select(Event),
            sa.select(Event).where(Event.tenant_id > 1),
            sa.select(Event).order_by(Event.body, Event.id),
        ):
            with pytest.raises(PaginationError, match="not unique"):
                paginate(session, stmt, Event.id)
    assert seen == []


def test_follow_a_tenant_feed(engine: Engine, tenants: dict[int, list[ULID]]) -> None:
    stmt = sa.select(Event.id).where(Event.tenant_id == 1).order_by(Event.id)
    seen: list[ULID] = []
    for page in follow(engine, stmt, Event.id, settle=timedelta(0), limit=3, interval=0.01):
        seen += page.items
        if len(seen) >= len(tenants[1]):
            break
    assert seen == tenants[1]


# -- refusals ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("order", "match"),
    [
        ([items.c.a], "must end with the paging column"),  # no tiebreaker
        ([items.c.id, items.c.a], "must end with the paging column"),  # id not last
        (["a", items.c.id], "not a column expression"),  # a name as text
        ([sa.literal_column("2"), items.c.id], "position"),  # ORDER BY 2
        ([sa.text("2"), items.c.id], "position"),  # the same, as text
    ],
)
def test_bad_orders_refused_before_sql(
    engine: Engine, table: sa.Table, order: list[Any], match: str
) -> None:
    with (
        engine.connect() as conn,
        recording(engine) as seen,
        pytest.raises(PaginationError, match=match),
    ):
        paginate(conn, sa.select(table).order_by(*order), table.c.id)
    assert seen == []


def test_key_not_in_the_row_is_read_from_a_hidden_column(engine: Engine, table: sa.Table) -> None:
    """A key not selected is added as a hidden column: read, and not shown in the rows."""
    _fill(engine, [{"id": i, "a": k % 3 or None, "b": "x", "n": k} for k, i in enumerate(_ids(8))])
    stmt = sa.select(table.c.id, table.c.b).order_by(table.c.a, table.c.id)
    with engine.connect() as conn:
        want = [tuple(row) for row in conn.execute(stmt)]
        got, cursor = [], None
        while True:
            page = paginate(conn, stmt, table.c.id, after=cursor, limit=3)
            got += [tuple(row) for row in page.items]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
    assert got == want
    assert {len(row) for row in got} == {2}


def test_settle_needs_the_id_order(engine: Engine, table: sa.Table) -> None:
    with engine.connect() as conn, pytest.raises(ValueError, match="id order"):
        paginate(
            conn,
            sa.select(table).order_by(table.c.n, table.c.id),
            table.c.id,
            settle=timedelta(seconds=1),
        )


# -- outer joins and asyncio ----------------------------------------------------------

tags = sa.Table(
    "paging_sort_tags",
    meta,
    sa.Column("id", ULIDType(), primary_key=True),
    sa.Column("item_id", ULIDType(), nullable=False),
    sa.Column("rank", sa.Integer, nullable=False),
)


def test_a_not_null_key_of_an_outer_join_can_be_null(engine: Engine, table: sa.Table) -> None:
    ids = sorted(_ids(8, seed=4))
    _fill(engine, [{"id": i, "a": 1, "b": "x", "n": 0} for i in ids])
    with engine.begin() as conn:
        conn.execute(
            tags.insert(),
            [{"id": new_ulid(), "item_id": i, "rank": k % 2} for k, i in enumerate(ids[:4])],
        )
    # tags.rank is NOT NULL, but NULL for the items without a tag.
    stmt = (
        sa.select(table.c.id, tags.c.rank)
        .select_from(table.outerjoin(tags, tags.c.item_id == table.c.id))
        .order_by(tags.c.rank.desc(), table.c.id)
    )
    with engine.connect() as conn:
        want = [row.id for row in conn.execute(stmt)]
        got, _ = walk_forward(lambda **kw: paginate(conn, stmt, table.c.id, **kw), 3)
    assert [row.id for row in got] == want
    assert len(want) == 8


def test_apaginate_pages_a_sort_with_a_total(
    backend: Backend, engine: Engine, table: sa.Table
) -> None:
    import asyncio

    from sqlalchemy.ext.asyncio import create_async_engine

    from sqlalchemy_ulid import apaginate

    ids = sorted(_ids(7, seed=6))
    _fill(engine, [{"id": i, "a": k % 3, "b": "x", "n": 0} for k, i in enumerate(ids)])
    stmt = sa.select(table).order_by(table.c.a.desc(), table.c.id)
    with engine.connect() as conn:
        want = [row.id for row in conn.execute(stmt)]

    async def main(url: str) -> list[ULID]:
        async_engine = create_async_engine(url)
        try:
            async with async_engine.connect() as conn:
                first = await apaginate(conn, stmt, table.c.id, limit=4, total="exact")
                assert first.total == 7
                rest = await apaginate(conn, stmt, table.c.id, after=first.next_cursor)
                return [row.id for row in [*first.items, *rest.items]]
        finally:
            await async_engine.dispose()

    for url in backend.async_urls:
        assert asyncio.run(main(url)) == want
