"""UUIDv7 columns: time ranges, cursors and index use; MariaDB's UUID order; interop values."""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

# advanced-alchemy (tests-integrations) supports newer SQLAlchemy releases only:
# the floor job runs without it.
pytest.importorskip("advanced_alchemy")

import sqlalchemy as sa
from advanced_alchemy.base import UUIDv7Base
from advanced_alchemy.types import GUID
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.dialects import mssql, mysql, postgresql
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Mapped, Session, mapped_column
from sqlalchemy.types import TypeDecorator

from conftest import Backend
from sqlalchemy_ulid import (
    ULID,
    InvalidULID,
    ULIDType,
    created_before,
    created_between,
    created_since,
    ulid_timestamp,
)
from sqlalchemy_ulid._keys import Keys, TimeOrderError, keys_of, uuid7_min_at
from strategies import v7
from test_timerange import plan

T = 1_712_345_678_901  # 2024-04-05T19:34:38.901Z
V7_RANDOM_MAX = (0xFFF << 64) | ((1 << 62) - 1)  # every bit a UUIDv7 leaves random


def v7_max(ms: int) -> uuid.UUID:
    return v7(ms, (1 << 74) - 1)


class TextUuid(TypeDecorator[uuid.UUID]):
    """A project's own decorator over sa.Uuid (the generic case of GUID)."""

    impl = sa.Uuid
    cache_ok = True


SA_SERIES = tuple(int(part) for part in sa.__version__.split(".")[:2])

# A UUID column spelled four ways; all hold UUIDv7s and take UUID cursors.
TYPES = {
    "Uuid": sa.Uuid,
    "Uuid(as_uuid=False)": lambda: sa.Uuid(as_uuid=False),
    "GUID": GUID,
    "decorated Uuid": TextUuid,
}

metadata = sa.MetaData()


@pytest.fixture(params=list(TYPES))
def table(request: pytest.FixtureRequest, engine: Engine) -> Iterator[sa.Table]:
    table = sa.Table(
        "uuidv7_events",
        sa.MetaData(),
        sa.Column("id", TYPES[request.param](), primary_key=True),
        sa.Column("n", sa.Integer, nullable=False),
    )
    table.drop(engine, checkfirst=True)
    table.create(engine)
    yield table
    table.drop(engine)


# Rows straddling the millisecond T: the boundary itself is a valid UUIDv7.
EDGES = {
    "T-1 max": v7_max(T - 1),
    "T min": v7(T, 0),
    "T max": v7_max(T),
    "T+1 min": v7(T + 1, 0),
    "T+1 max": v7_max(T + 1),
    "T+2 min": v7(T + 2, 0),
}
NAME = {value: key for key, value in EDGES.items()}


def idv(table: sa.Table, u: uuid.UUID) -> Any:
    """``u`` as the column binds it (text for ``Uuid(as_uuid=False)``)."""
    return keys_of(table.c.id).parse(u)


def names(engine: Engine, table: sa.Table, clause: sa.ColumnElement[bool]) -> list[str]:
    with engine.connect() as conn:
        found = conn.scalars(sa.select(table.c.id).where(clause).order_by(table.c.id)).all()
    return [NAME[uuid.UUID(str(u))] for u in found]


def test_time_ranges_select_exactly_the_right_rows(engine: Engine, table: sa.Table) -> None:
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": idv(table, u), "n": 0} for u in EDGES.values()])
    column = table.c.id
    assert names(engine, table, created_since(column, T)) == [
        "T min",
        "T max",
        "T+1 min",
        "T+1 max",
        "T+2 min",
    ]
    assert names(engine, table, created_before(column, T)) == ["T-1 max"]
    assert names(engine, table, created_between(column, T, T + 2)) == [
        "T min",
        "T max",
        "T+1 min",
        "T+1 max",
    ]
    assert names(engine, table, created_between(column, T, T + 1)) == ["T min", "T max"]
    assert names(engine, table, created_between(column, T, T)) == []


def test_the_bound_is_the_zero_random_uuidv7_of_the_millisecond() -> None:
    bound = uuid7_min_at(T)
    assert bound == v7(T, 0)
    assert (bound.version, bound.variant) == (7, uuid.RFC_4122)
    assert ULID.from_uuid(bound).timestamp_ms == T
    # before every UUIDv7 of T, after every UUIDv7 of T - 1
    assert v7_max(T - 1) < bound <= v7(T, 0) < v7(T, 1) < v7_max(T)
    column = sa.column("id", sa.Uuid(as_uuid=False))
    assert created_since(column, T).right.value == str(bound)  # type: ignore[attr-defined]


# -- the index serves the range ------------------------------------------------------


@pytest.mark.parametrize("type_name", ["Uuid", "GUID"])
def test_index_serves_the_range(
    backend: Backend, engine: Engine, metadata: sa.MetaData, type_name: str
) -> None:
    table = sa.Table(
        "uuidv7_indexed",
        metadata,
        sa.Column("id", TYPES[type_name](), primary_key=True),
        sa.Column("n", sa.Integer, nullable=False),
    )
    table.drop(engine, checkfirst=True)
    table.create(engine)
    where = created_between(table.c.id, T + 1000 * 1000, T + 1050 * 1000)
    compiled = str(where.compile(engine))
    assert re.fullmatch(r"uuidv7_indexed\.id >= \S+ AND uuidv7_indexed\.id < \S+", compiled)
    rng = random.Random(0)
    rows = [{"id": v7(T + n * 1000, rng.getrandbits(74)), "n": n} for n in range(2000)]
    with engine.begin() as conn:
        conn.execute(table.insert(), rows)
        if backend.name == "postgresql":
            conn.exec_driver_sql("ANALYZE uuidv7_indexed")
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        elif backend.name == "mysql":
            conn.exec_driver_sql("ANALYZE TABLE uuidv7_indexed").all()
        found = plan(conn, sa.select(table).where(where))
        count = conn.scalar(sa.select(sa.func.count()).select_from(table).where(where))
    assert count == 50
    text = " ".join(str(cell) for row in found for cell in row)
    if backend.name == "postgresql":
        assert "Index Scan using uuidv7_indexed_pkey" in text, text
        assert re.search(r"Index Cond: \(\(id >= '[0-9a-f-]{36}'::uuid\) AND", text), text
        assert "Filter" not in text, text
    elif backend.name == "mysql":
        (only,) = found
        fields = ["id", "select_type", "table", "type", "possible_keys", "key"]
        row = dict(zip(fields, only[: len(fields)], strict=True))
        assert (row["type"], row["key"]) == ("range", "PRIMARY"), found
    else:
        assert re.search(r"SEARCH uuidv7_indexed USING (INDEX \w+|PRIMARY KEY) \(id", text), text


# -- advanced-alchemy's UUIDv7Base ----------------------------------------------------


class Reading(UUIDv7Base):
    __tablename__ = "uuidv7_readings"

    value: Mapped[int] = mapped_column(nullable=False)


@pytest.fixture
def readings(engine: Engine) -> Iterator[type[Reading]]:
    Reading.__table__.drop(engine, checkfirst=True)  # type: ignore[attr-defined]
    Reading.__table__.create(engine)  # type: ignore[attr-defined]
    yield Reading
    Reading.__table__.drop(engine)  # type: ignore[attr-defined]


def test_uuidv7base_model(engine: Engine, readings: type[Reading]) -> None:
    assert keys_of(Reading.id) == Keys("uuid")
    with Session(engine) as session:
        # ids from the model's own default (uuid-utils' uuid7), then fixed ones
        session.add_all([Reading(value=-1), Reading(value=-2)])
        session.add_all([Reading(id=u, value=n) for n, u in enumerate(EDGES.values())])
        session.commit()
        made = session.scalars(sa.select(Reading.id).where(Reading.value < 0)).all()
        assert all(u.version == 7 for u in made)
        assert session.scalars(
            sa.select(Reading.value)
            .where(created_between(Reading.id, T, T + 1))
            .order_by(Reading.id)
        ).all() == [1, 2]
        assert (
            session.scalar(sa.select(sa.func.count()).where(created_since(Reading.id, T + 2))) == 3
        )  # T+2 min and the two made now
        created = session.scalars(
            sa.select(ulid_timestamp(Reading.id)).where(Reading.value == 1)
        ).one()
        assert created == ULID.from_uuid(EDGES["T min"]).datetime


# -- cursors: parse and format in the column's own text form ---------------------------


def walk(engine: Engine, table: sa.Table, limit: int, *, backward: bool) -> list[int]:
    """Walk every page through text cursors, as a web client would."""
    column = table.c.id
    keys = keys_of(column)
    cursor: str | None = None
    seen: list[int] = []
    pages = 0
    while True:
        stmt = sa.select(column, table.c.n)
        if cursor is not None:
            value = keys.parse(cursor)
            bound = keys.bind(column, value)
            stmt = stmt.where(column < bound if backward else column > bound)
        stmt = stmt.order_by(column.desc() if backward else column).limit(limit)
        with engine.connect() as conn:
            rows = conn.execute(stmt).all()
        if not rows:
            break
        pages += 1
        seen += [n for _, n in rows]
        cursor = keys.format(rows[-1][0])
        assert isinstance(cursor, str)
        assert len(cursor) == 36
    assert pages >= 3
    return seen


def test_pages_forward_and_backward_through_uuid_cursors(engine: Engine, table: sa.Table) -> None:
    rng = random.Random(3)
    ids = sorted(v7(T + rng.randrange(5), rng.getrandbits(74)) for _ in range(23))
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": idv(table, u), "n": n} for n, u in enumerate(ids)])
    assert walk(engine, table, 5, backward=False) == list(range(23))
    assert walk(engine, table, 7, backward=True) == list(reversed(range(23)))


BAD_CURSORS = [
    "",  # empty
    "018eafc1-8435-7000-8000-00000000000",  # 35 characters
    "018eafc1-8435-7000-8000-0000000000000",  # 37 characters
    "018eafc184357000800000000000000000",  # no dashes (32 hex digits + 2)
    "018eafc184357000800000000000000",  # no dashes
    "{018eafc1-8435-7000-8000-000000000000}",  # braces
    "urn:uuid:018eafc1-8435-7000-8000-000000000000",  # URN form
    "018eafc1-8435-7000-8000-00000000000g",  # not hex
    "018eafc1-8435-7000-8000-000000000000\n",  # trailing newline
    " 018eafc1-8435-7000-8000-000000000000",  # leading space
    "018eafc1-84357-000-8000-000000000000",  # dashes in the wrong places
    "01HTQW311N1KR5G0Y75M3EF00H",  # a ULID's text, not the column's form
    "' OR 1=1 --",  # injection attempt
]


@pytest.mark.parametrize("cursor", BAD_CURSORS)
def test_malformed_uuid_cursors_raise_before_sql(
    engine: Engine, table: sa.Table, statements: list[str], cursor: str
) -> None:
    statements.clear()
    with pytest.raises(InvalidULID, match="UUID cursor is 36 characters"):
        keys_of(table.c.id).parse(cursor)
    assert statements == []


def test_cursor_values_and_text() -> None:
    u = v7(T, 12345)
    keys = keys_of(sa.column("id", sa.Uuid()))
    assert keys.parse(str(u).upper()) == u
    assert keys.parse(u) == u
    assert keys.parse(ULID.from_uuid(u)) == u
    assert keys.format(u) == str(u)
    assert keys.format(str(u)) == str(u)
    assert keys.format(u.bytes) == str(u)
    as_text = keys_of(sa.column("id", sa.Uuid(as_uuid=False)))
    assert as_text.parse(str(u)) == str(u)
    with pytest.raises(TypeError, match=r"uuid\.UUID or its 36-character text"):
        keys.parse(12)
    ulid_keys = keys_of(sa.column("id", ULIDType()))
    assert ulid_keys.parse("01HTQW311N1KR5G0Y75M3EF00H") == ULID("01HTQW311N1KR5G0Y75M3EF00H")
    with pytest.raises(InvalidULID):
        ulid_keys.parse(str(u))  # a UUID's text on a ULID column
    assert ulid_keys.format(ULID.from_uuid(u)) == str(ULID.from_uuid(u))


@pytest.mark.parametrize(
    ("column_type", "kind"),
    [
        (sa.Uuid(), "uuid"),
        (sa.UUID(), "uuid"),
        (postgresql.UUID(), "uuid"),
        (GUID(), "uuid"),
        (GUID(binary=False), "uuid"),
        (TextUuid(), "uuid"),
        (ULIDType(), "ulid"),
        (ULIDType("text"), "ulid"),
        (sa.LargeBinary(16), "ulid"),  # anything else: ULIDs, as before
    ],
)
def test_key_kind_of_a_column_type(column_type: Any, kind: str) -> None:
    assert keys_of(sa.column("id", column_type)).kind == kind
    assert keys_of(column_type).kind == kind


# -- MariaDB's UUID type and SQLAlchemy's Uuid on MariaDB ----------------------------------


def server(backends: dict[str, Backend], name: str) -> Engine:
    found = backends[name]
    if found.engine is None:
        pytest.fail(f"required backend missing: {found.reason}", pytrace=False)
    return found.engine


def test_mariadb_uuid_type_sorts_uuidv7_in_time_order(backends: dict[str, Backend]) -> None:
    # MariaDB's own UUID type (10.7+) swaps the groups of UUIDs of versions
    # 1-5; from 10.11.5 it keeps versions 6+ as plain bytes. Checked on the
    # server: valid UUIDv7s come back in time order, UUIDv4s do not.
    engine = server(backends, "mysql")
    rng = random.Random(7)
    sevens = [v7(rng.randrange(1 << 48), rng.getrandbits(74)) for _ in range(500)]
    fours = [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(500)]
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE IF EXISTS uuidv7_native")
        conn.exec_driver_sql("CREATE TABLE uuidv7_native (id UUID PRIMARY KEY, v INT)")
        try:
            for version, values in ((7, sevens), (4, fours)):
                conn.exec_driver_sql("DELETE FROM uuidv7_native")
                conn.exec_driver_sql(
                    "INSERT INTO uuidv7_native VALUES (%s, %s)",
                    [(str(u), version) for u in values],
                )
                got = [
                    uuid.UUID(text)
                    for text in conn.exec_driver_sql(
                        "SELECT CAST(id AS CHAR) FROM uuidv7_native ORDER BY id"
                    ).scalars()
                ]
                assert (got == sorted(values)) is (version == 7)
        finally:
            conn.exec_driver_sql("DROP TABLE uuidv7_native")
    assert engine.dialect.server_version_info >= (10, 11, 5)  # type: ignore[operator]


def test_how_sqlalchemy_renders_uuid_on_mariadb(backends: dict[str, Backend]) -> None:
    # SQLAlchemy 2.1 renders Uuid as MariaDB's native UUID; 2.0 as CHAR(32).
    # Both sort UUIDv7s in time order on this server, so both are accepted.
    engine = server(backends, "mysql")
    table = sa.Table("uuidv7_rendered", sa.MetaData(), sa.Column("id", sa.Uuid(), primary_key=True))
    table.drop(engine, checkfirst=True)
    table.create(engine)
    try:
        with engine.begin() as conn:
            declared = conn.exec_driver_sql(
                "SELECT column_type FROM information_schema.columns "
                "WHERE table_schema = DATABASE() AND table_name = 'uuidv7_rendered'"
            ).scalar()
            conn.execute(table.insert(), [{"id": u} for u in EDGES.values()])
            count = conn.scalar(
                sa.select(sa.func.count())
                .select_from(table)
                .where(created_since(table.c.id, T + 1))
            )
        assert declared == ("uuid" if SA_SERIES >= (2, 1) else "char(32)")
        assert count == 3
    finally:
        table.drop(engine)


def old_mariadb() -> Any:
    dialect = mysql.dialect()
    dialect.is_mariadb = True
    dialect.server_version_info = (10, 11, 4)
    dialect.supports_native_uuid = True
    return dialect


def test_refuses_a_native_uuid_that_is_not_in_time_order() -> None:
    t = sa.table("t", sa.column("id", sa.Uuid()))
    with pytest.raises(TimeOrderError, match=r"mysql 10\.11\.4 native uuid type"):
        str(created_since(t.c.id, T).compile(dialect=old_mariadb()))
    with pytest.raises(TimeOrderError, match="UNIQUEIDENTIFIER never does"):
        str(created_since(t.c.id, T).compile(dialect=mssql.dialect()))
    # 16 bytes or text stay fine there, as does a ULID column
    for ok in (sa.Uuid(native_uuid=False), ULIDType(), GUID()):
        c = sa.table("t", sa.column("id", ok)).c.id
        str(created_since(c, T).compile(dialect=old_mariadb()))


def test_refuses_sql_server_uniqueidentifier() -> None:
    # GUID renders UNIQUEIDENTIFIER on SQL Server in every SQLAlchemy version.
    t = sa.table("t", sa.column("id", GUID()))
    keys = keys_of(t.c.id)
    with pytest.raises(TimeOrderError, match="UNIQUEIDENTIFIER"):
        str(
            (t.c.id > keys.bind(t.c.id, keys.parse(str(v7(T, 0))))).compile(dialect=mssql.dialect())
        )
    # ulid_timestamp reads the time, which does not depend on the order
    assert "CONVERT(CHAR(36), t.id)" in str(ulid_timestamp(t.c.id).compile(dialect=mssql.dialect()))


# -- interop values ---------------------------------------------------------------------


v7_values = st.builds(v7, st.integers(0, (1 << 48) - 1), st.integers(0, (1 << 74) - 1))


@given(v7_values)
def test_every_uuidv7_round_trips_through_a_ulid(u: uuid.UUID) -> None:
    ulid = ULID.from_uuid(u)
    assert ulid.to_uuid() == u
    assert ULID(str(ulid)).to_uuid() == u
    assert ulid.timestamp_ms == u.int >> 80
    assert (u.version, u.variant) == (7, uuid.RFC_4122)


@given(v7_values, v7_values)
def test_uuidv7_order_is_ulid_order_is_time_order(a: uuid.UUID, b: uuid.UUID) -> None:
    assert (a < b) == (ULID.from_uuid(a) < ULID.from_uuid(b)) == (a.bytes < b.bytes)
    if a.int >> 80 < b.int >> 80:
        assert a < b


@given(st.integers(1, (1 << 48) - 1), st.integers(0, (1 << 80) - 1))
def test_bounds_of_both_kinds(ms: int, random_bits: int) -> None:
    # ULID.min_at(ms) is at or below every UUIDv7 of ms (their version and
    # variant bits only add), so a ULID column holding UUIDv7s keeps exact
    # ranges. The UUIDv7 bound is above the ULIDs of ms whose bits 48-51 are
    # below 7: a UUID column holding ULIDs does not.
    ulid = ULID.from_parts(ms, random_bits)
    assert ULID.min_at(ms).to_uuid() <= v7(ms, random_bits % (1 << 74))
    assert (ulid.to_uuid() < uuid7_min_at(ms)) == ((ulid.int >> 76) & 0xF < 7)


def test_a_ulid_column_may_hold_uuidv7_values(engine: Engine, metadata: sa.MetaData) -> None:
    table = sa.Table("uuidv7_in_ulid", metadata, sa.Column("id", ULIDType(), primary_key=True))
    table.drop(engine, checkfirst=True)
    table.create(engine)
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": u} for u in EDGES.values()])  # uuid.UUID binds
        since = conn.scalars(
            sa.select(table.c.id).where(created_since(table.c.id, T + 1)).order_by(table.c.id)
        ).all()
        times = conn.scalars(sa.select(ulid_timestamp(table.c.id)).order_by(table.c.id)).all()
    assert [u.to_uuid() for u in since] == [EDGES["T+1 min"], EDGES["T+1 max"], EDGES["T+2 min"]]
    assert times == [ULID.from_uuid(u).datetime for u in EDGES.values()]


def test_a_mariadb_dialect_before_it_connects() -> None:
    # SQLAlchemy 2.1's MariaDB dialect renders Uuid as UUID before it knows
    # the server version: no promise of time order until it connects.
    from sqlalchemy.dialects.mysql.mariadb import MariaDBDialect

    t = sa.table("t", sa.column("id", sa.Uuid()))
    compile_ = lambda: str(created_since(t.c.id, T).compile(dialect=MariaDBDialect()))  # noqa: E731
    if SA_SERIES >= (2, 1):
        with pytest.raises(TimeOrderError, match="server version unknown"):
            compile_()
    else:  # CHAR(32) hex: in time order on every version
        assert "t.id >= " in compile_()
