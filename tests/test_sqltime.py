"""ulid_timestamp(column): the creation time in SQL, exact to the millisecond, per backend."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.dialects import mssql, mysql, oracle, postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.exc import CompileError
from sqlalchemy.ext.hybrid import hybrid_property
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, column_property, mapped_column

import strategies
from conftest import Backend
from sqlalchemy_ulid import ULID, ULIDType, ulid_timestamp
from sqlalchemy_ulid._dialects import dialect_row
from sqlalchemy_ulid._keys import storage_kind, uuid7_min_at

MAX_MS = (1 << 48) - 1
MAX_DATETIME_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


def ms_of(dt: datetime) -> int:
    return (dt - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(milliseconds=1)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=timezone.utc)  # type: ignore[misc]


# Edge timestamps, named by what they are.
EDGES = {
    "epoch": 0,
    "epoch + 1 ms": 1,
    "leap day 2000, last ms": ms_of(utc(2000, 2, 29, 23, 59, 59, 999000)),
    "leap day 2024, first ms": ms_of(utc(2024, 2, 29)),
    "2038 (past int32 seconds)": (1 << 31) * 1000,
    "2038 + 1 ms": (1 << 31) * 1000 + 1,
    "a ULID's own time": 1_712_345_678_901,
    "2100-03-01 (not a leap year)": ms_of(utc(2100, 3, 1)),
    "9999-12-31, last ms": MAX_DATETIME_MS,
}

STORAGES = ["auto", "binary", "text", "uuid"]


def column_type(storage: str) -> sa.types.TypeEngine[Any]:
    return sa.Uuid() if storage == "uuid" else ULIDType(storage)  # type: ignore[arg-type]


def key(storage: str, ms: int, rng: random.Random) -> Any:
    if storage == "uuid":  # a UUIDv7 of that millisecond
        return uuid.UUID(int=uuid7_min_at(ms).int | rng.getrandbits(62) | rng.getrandbits(12) << 64)
    return ULID.from_parts(ms, rng.getrandbits(80))


def as_ulid(value: Any) -> ULID:
    return value if isinstance(value, ULID) else ULID.from_uuid(value)


@pytest.fixture
def table_for(engine: Engine, metadata: sa.MetaData) -> Any:
    def make(storage: str) -> sa.Table:
        table = sa.Table(
            f"sqltime_{storage}",
            metadata,
            sa.Column("id", column_type(storage), primary_key=True),
            sa.Column("n", sa.Integer, nullable=False, default=0),
        )
        table.drop(engine, checkfirst=True)
        table.create(engine)
        return table

    return make


@pytest.mark.parametrize("storage", STORAGES)
def test_matches_python_datetime_at_the_edges(engine: Engine, table_for: Any, storage: str) -> None:
    table = table_for(storage)
    rng = random.Random(storage)
    keys = {name: key(storage, ms, rng) for name, ms in EDGES.items()}
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": k} for k in keys.values()])
        found = dict(conn.execute(sa.select(table.c.id, ulid_timestamp(table.c.id))).all())
    for name, k in keys.items():
        assert found[k] == as_ulid(k).datetime, name
        assert found[k].tzinfo is timezone.utc, name


@pytest.mark.parametrize("storage", STORAGES)
def test_matches_python_datetime_for_random_times(
    engine: Engine, table_for: Any, storage: str
) -> None:
    # Any rounding (a float on the way, a time zone) shows up in a few hundred.
    table = table_for(storage)
    rng = random.Random(f"random-{storage}")
    keys = [key(storage, rng.randrange(MAX_DATETIME_MS + 1), rng) for _ in range(300)]
    recent = (1_600_000_000_000, 1_900_000_000_000)
    keys += [key(storage, rng.randrange(*recent), rng) for _ in range(300)]
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": k} for k in keys])
        found = dict(conn.execute(sa.select(table.c.id, ulid_timestamp(table.c.id))).all())
    wrong = [(str(k), found[k]) for k in keys if found[k] != as_ulid(k).datetime]
    assert wrong == []


@pytest.mark.parametrize("storage", STORAGES)
def test_beyond_year_9999(backend: Backend, engine: Engine, table_for: Any, storage: str) -> None:
    # 2**48 - 1 ms is in the year 10889. PostgreSQL's timestamptz holds it
    # (checked in SQL: Python's datetime cannot); MariaDB's DATETIME and
    # SQLite's date functions end at 9999 and give NULL.
    table = table_for(storage)
    big = key(storage, MAX_MS, random.Random(0))
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": big}])
        created = ulid_timestamp(table.c.id)
        if backend.name == "postgresql":
            ms = conn.scalar(sa.select(sa.cast(sa.extract("epoch", created) * 1000, sa.BigInteger)))
            assert ms == MAX_MS
            text = conn.scalar(sa.select(sa.func.to_char(created, "YYYY-MM-DD HH24:MI:SS.MS")))
            assert text in ("10889-08-02 05:31:50.655",)
        else:
            assert conn.scalar(sa.select(created)) is None


# -- in select, where, group_by, order_by ------------------------------------------------


@pytest.mark.parametrize("storage", ["auto", "uuid"])
def test_where_group_by_order_by(engine: Engine, table_for: Any, storage: str) -> None:
    table = table_for(storage)
    rng = random.Random(1)
    day = utc(2024, 2, 28)
    rows = [
        {"id": key(storage, ms_of(day + timedelta(days=d, hours=h)), rng), "n": d}
        for d in range(3)
        for h in range(d + 1)
    ]  # 1 row on the 28th, 2 on the leap day, 3 on 1 March
    created = ulid_timestamp(table.c.id)
    with engine.begin() as conn:
        conn.execute(table.insert(), rows)
        since = conn.scalars(
            sa.select(table.c.n).where(created >= utc(2024, 2, 29)).order_by(created.desc())
        ).all()
        per_time = conn.execute(
            sa.select(created, sa.func.count()).group_by(created).order_by(created)
        ).all()
    assert since == [2, 2, 2, 1, 1]
    assert [count for _, count in per_time] == [1] * 6
    assert [t for t, _ in per_time] == sorted(as_ulid(r["id"]).datetime for r in rows)


def test_naive_datetime_comparison_is_refused_before_sql(
    engine: Engine, table_for: Any, statements: list[str]
) -> None:
    table = table_for("auto")
    statements.clear()
    naive = datetime(2024, 1, 1)
    aware = naive.replace(tzinfo=timezone.utc)
    created = ulid_timestamp(table.c.id)
    # Refused when the comparison is built: a ValueError (an API's 400), not
    # SQLAlchemy's StatementError when the statement runs.
    for build in (
        lambda: created >= naive,
        lambda: naive <= created,
        lambda: created.between(aware, naive),
        lambda: created.in_([aware, naive]),
        lambda: created != naive,
    ):
        with pytest.raises(ValueError, match="naive datetime"):
            build()
    with engine.connect() as conn:  # aware datetimes still run
        assert conn.execute(sa.select(table.c.id).where(created.between(aware, aware))).all() == []
    assert len(statements) == 1


# -- time zones ---------------------------------------------------------------------


def server(backends: dict[str, Backend], name: str) -> Backend:
    """One server backend, for a test about that server only (missing: fail)."""
    found = backends[name]
    if found.engine is None:
        pytest.fail(f"required backend missing: {found.reason}", pytrace=False)
    return found


@pytest.mark.parametrize(
    ("name", "args", "shown"),
    [
        # timestamptz is an instant: shown in the session's zone, same instant
        ("postgresql", {"options": "-c timezone=Asia/Kolkata"}, "2024-04-06 01:04:38.901+05:30"),
        # a UTC DATETIME, whatever the session time_zone (no FROM_UNIXTIME)
        ("mysql", {"init_command": "SET time_zone = '+05:30'"}, "2024-04-05 19:34:38.901"),
    ],
)
def test_utc_whatever_the_session_time_zone(
    backends: dict[str, Backend], name: str, args: dict[str, Any], shown: str
) -> None:
    url = server(backends, name).url
    assert url is not None
    session_zone = "SHOW timezone" if name == "postgresql" else "SELECT @@session.time_zone"
    engine = sa.create_engine(url, connect_args=args)
    table = sa.Table("sqltime_zone", sa.MetaData(), sa.Column("id", ULIDType(), primary_key=True))
    u = ULID.from_parts(1_712_345_678_901, 7)
    try:
        table.create(engine)
        with engine.begin() as conn:
            assert conn.exec_driver_sql(session_zone).scalar() in ("Asia/Kolkata", "+05:30")
            conn.execute(table.insert(), {"id": u})
            assert conn.scalar(sa.select(ulid_timestamp(table.c.id))) == u.datetime
            text = conn.scalar(sa.select(sa.cast(ulid_timestamp(table.c.id), sa.String)))
        assert text.startswith(shown), text
    finally:
        table.drop(engine, checkfirst=True)
        engine.dispose()


# -- ORM: column_property and hybrid_property -----------------------------------------


class Base(DeclarativeBase):
    pass


class Event(Base):
    __tablename__ = "sqltime_orm_events"

    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True)
    created_at: Mapped[datetime] = column_property(ulid_timestamp(id))


class Order(Base):
    __tablename__ = "sqltime_orm_orders"

    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid(), primary_key=True)

    @hybrid_property
    def created_at(self) -> datetime:
        return ULID.from_uuid(self.id).datetime

    @created_at.inplace.expression
    @classmethod
    def _created_at_expression(cls) -> sa.ColumnElement[datetime]:
        return ulid_timestamp(cls.id)


@pytest.fixture
def orm(engine: Engine) -> Iterator[Session]:
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    with Session(engine) as session:
        yield session
    Base.metadata.drop_all(engine)


def test_column_property_and_hybrid_property(orm: Session) -> None:
    e = ULID.from_parts(ms_of(utc(2024, 2, 29, 12)), 1)
    o = uuid7_min_at(utc(2038, 1, 19, 3, 14, 8))
    orm.add_all([Event(id=e), Order(id=o)])
    orm.commit()
    orm.expunge_all()
    event = orm.scalars(sa.select(Event)).one()
    assert event.created_at == e.datetime
    order = orm.scalars(sa.select(Order).where(Order.created_at >= utc(2038, 1, 1))).one()
    assert order.created_at == utc(2038, 1, 19, 3, 14, 8)  # instance side: .datetime
    assert orm.scalar(sa.select(Order.created_at)) == order.created_at  # SQL side


# -- generated columns ------------------------------------------------------------------


def created_at_type() -> sa.types.TypeEngine[Any]:
    # DATETIME without fsp drops the milliseconds on MySQL/MariaDB.
    return sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=3), "mysql", "mariadb")


@pytest.mark.parametrize("storage", STORAGES)
def test_generated_column(
    backend: Backend, engine: Engine, metadata: sa.MetaData, storage: str
) -> None:
    # Stored (and indexed) on PostgreSQL and SQLite; MariaDB refuses date
    # arithmetic in stored or indexed generated columns, so there it is virtual.
    stored = backend.name != "mysql"
    id_column = sa.Column("id", column_type(storage), primary_key=True)
    table = sa.Table(
        f"sqltime_generated_{storage}",
        metadata,
        id_column,
        sa.Column(
            "created_at",
            created_at_type(),
            sa.Computed(ulid_timestamp(id_column), persisted=stored),
            index=stored,
        ),
    )
    table.drop(engine, checkfirst=True)
    table.create(engine)
    rng = random.Random(storage)
    keys = [key(storage, ms, rng) for ms in EDGES.values()]
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": k} for k in keys])
        rows = conn.execute(sa.select(table.c.id, table.c.created_at)).all()
        since = conn.scalar(
            sa.select(sa.func.count()).where(table.c.created_at >= utc(2038, 1, 19, 3, 14, 8))
        )
    found = dict(rows)
    for k in keys:
        value = found[k]  # a plain DateTime column: naive UTC on MariaDB and SQLite
        value = value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value
        assert value == as_ulid(k).datetime
    assert since == 4  # 2038, 2038 + 1 ms, 2100, 9999


def test_mariadb_refuses_a_stored_generated_column(backends: dict[str, Backend]) -> None:
    engine = server(backends, "mysql").engine
    assert engine is not None
    metadata = sa.MetaData()
    id_column = sa.Column("id", ULIDType(), primary_key=True)
    table = sa.Table(
        "sqltime_generated_stored",
        metadata,
        id_column,
        sa.Column(
            "created_at", created_at_type(), sa.Computed(ulid_timestamp(id_column), persisted=True)
        ),
    )
    try:
        with pytest.raises(sa.exc.OperationalError, match="cannot be used in the GENERATED ALWAYS"):
            table.create(engine)
    finally:
        table.drop(engine, checkfirst=True)


# -- compile only: SQL Server, Oracle, and a dialect without SQL -------------------------


@pytest.mark.parametrize(
    ("dialect", "storage", "expected"),
    [
        (mssql.dialect(), "auto", "CAST(SUBSTRING(t.id, 1, 6) AS BIGINT)"),
        (mssql.dialect(), "text", "CAST(CHARINDEX(SUBSTRING(t.id, 1, 1), '0123456789ABCDEFGHJKMN"),
        (mssql.dialect(), "uuid", "CONVERT(CHAR(36), t.id)"),
        (oracle.dialect(), "auto", "RAWTOHEX(UTL_RAW.SUBSTR(t.id, 1, 6))"),
        (oracle.dialect(), "text", "INSTR('0123456789ABCDEFGHJKMNPQRSTVWXYZ', SUBSTR(t.id, 1, 1))"),
        (oracle.dialect(), "uuid", "UPPER(SUBSTR(REPLACE(t.id, '-', ''), 1, 12))"),
        (postgresql.dialect(), "uuid", "get_byte(uuid_send(t.id), 5)"),
        (postgresql.dialect(), "binary", "get_byte(t.id, 0) << 16"),
        (postgresql.dialect(), "text", "CAST(strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ'"),
        (mysql.dialect(), "uuid", "LEFT(REPLACE(t.id, '-', ''), 12)"),
        (sqlite.dialect(), "binary", "hex(substr(t.id, 1, 6))"),
    ],
)
def test_compiles_per_dialect(dialect: Any, storage: str, expected: str) -> None:
    t = sa.table("t", sa.column("id", column_type(storage)))
    sql = str(sa.select(ulid_timestamp(t.c.id)).compile(dialect=dialect))
    assert expected in sql, sql
    timestamp = {
        "mssql": "DATEADD(day, ",
        "oracle": "NUMTODSINTERVAL(",
        "postgresql": "timezone(INTERVAL '0', TIMESTAMP '1970-01-01 00:00:00' + ",
        "mysql": "TIMESTAMPADD(MICROSECOND, ",
        "sqlite": "strftime('%Y-%m-%d %H:%M:%f', ",
    }[dialect.name]
    assert timestamp in sql, sql


def test_percent_signs_are_escaped_for_pyformat_drivers() -> None:
    # text storage reads the millisecond, then splits it with "%"
    t = sa.table("t", sa.column("id", ULIDType("text")))
    sql = str(sa.select(ulid_timestamp(t.c.id)).compile(dialect=postgresql.psycopg.dialect()))
    assert "%% 86400000" in sql
    assert "% 86400000" not in sql.replace("%% 86400000", "")


def test_unknown_dialect_and_unknown_storage_raise() -> None:
    class Other(sa.engine.default.DefaultDialect):
        name = "other"

    t = sa.table("t", sa.column("id", ULIDType()), sa.column("n", sa.Integer))
    with pytest.raises(CompileError, match=r"no SQL for the other dialect.*postgresql"):
        sa.select(ulid_timestamp(t.c.id)).compile(dialect=Other())
    with pytest.raises(TypeError, match="cannot tell how a column of type Integer"):
        sa.select(ulid_timestamp(t.c.n)).compile(dialect=sqlite.dialect())
    with pytest.raises(TypeError, match="expected a ULID or UUID column"):
        ulid_timestamp("id")


# -- the integer reads themselves, over the whole 48 bits ----------------------------


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=st.lists(strategies.timestamps, min_size=1, max_size=40))
@pytest.mark.parametrize("storage", ["auto", "binary", "text"])
def test_millisecond_sql_is_exact_over_48_bits(
    engine: Engine, storage: str, values: list[int]
) -> None:
    # The millisecond each storage's SQL reads, as an integer, for any 48
    # bits (past the year 9999, where no datetime can check it), 0 and
    # 2**48 - 1 always among them. On PostgreSQL the timestamp itself is
    # checked too, through extract(epoch ...), which is exact (numeric).
    column_type = ULIDType(storage)  # type: ignore[arg-type]
    dialect = engine.dialect
    kind = storage_kind(column_type, dialect)
    time = dialect_row(dialect).time
    assert time is not None
    with engine.connect():  # the server's version is known from here on
        time = time.for_server(dialect)  # PostgreSQL 18: its bytea->integer casts
    literal = column_type.literal_processor(dialect)
    ids = [ULID.from_parts(ms, ms % 997) for ms in [0, MAX_MS, *values]]
    columns = [time.millis[kind](literal(u)) for u in ids]
    if dialect.name == "postgresql":
        read = time.direct.get(kind, lambda col: time.timestamp(time.millis[kind](col)))
        columns += [f"extract(epoch FROM {read(literal(u))}) * 1000" for u in ids]
    with engine.connect() as conn:
        row = conn.execute(sa.text(f"SELECT {', '.join(columns)}")).one()
    expected = [u.timestamp_ms for u in ids]
    # compared exactly: a microsecond off (a float on the way) fails
    assert [Decimal(v) for v in row] == expected * (len(columns) // len(ids))


# -- PostgreSQL 18: uuid_extract_timestamp() on UUIDv7 columns, never on ULIDs ------------


def _pg_version(engine: Engine) -> tuple[int, ...]:
    with engine.connect() as conn:
        return tuple(conn.dialect.server_version_info or ())


@pytest.mark.parametrize("version", [(15, 4), (17, 2), (18, 0), (19, 1)])
def test_postgresql_18_compiles_uuid7_columns_to_uuid_extract_timestamp(
    version: tuple[int, ...],
) -> None:
    dialect = postgresql.psycopg.dialect()
    dialect.server_version_info = version
    t = sa.table(
        "t",
        sa.column("v7", sa.Uuid()),
        sa.column("ulid", ULIDType()),
        sa.column("raw", ULIDType("binary")),
    )
    v7, ulid, raw = (str(sa.select(ulid_timestamp(c)).compile(dialect=dialect)) for c in t.c)
    # A ULID never goes through it: its bits are not a UUIDv7's.
    assert "uuid_extract_timestamp" not in ulid + raw
    if version >= (18,):
        assert "uuid_extract_timestamp(t.v7)" in v7
        assert "substring(uuid_send(t.ulid) FROM 1 FOR 3)::integer" in ulid
        assert "substring(t.raw FROM 4 FOR 3)::integer" in raw
        assert "get_byte" not in ulid + raw
    else:
        assert "uuid_extract_timestamp" not in v7
        assert all("get_byte" in sql for sql in (v7, ulid, raw))


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=st.lists(strategies.timestamps, min_size=1, max_size=40), data=st.data())
def test_postgresql_uuid7_and_ulid_times_are_exact_over_48_bits(
    backends: dict[str, Backend], values: list[int], data: st.DataObject
) -> None:
    # On every version: ulid_timestamp() of a UUIDv7 and of a ULID of any
    # millisecond (0 and 2**48 - 1 always among them, the year 10889) is that
    # millisecond exactly, through extract(epoch ...) (numeric: exact).
    engine = backends["postgresql"].engine
    if engine is None:
        pytest.fail(f"required backend missing: {backends['postgresql'].reason}", pytrace=False)
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    millis = [0, MAX_MS, *values]
    v7s = [key("uuid", ms, rng) for ms in millis]
    ulids = [key("auto", ms, rng) for ms in millis]
    exprs = [ulid_timestamp(sa.literal(v, sa.Uuid())) for v in v7s]
    exprs += [ulid_timestamp(sa.literal(u, ULIDType())) for u in ulids]
    exprs += [ulid_timestamp(sa.literal(u, ULIDType("binary"))) for u in ulids]
    with engine.connect() as conn:
        row = conn.execute(sa.select(*(sa.extract("epoch", e) * 1000 for e in exprs))).one()
    assert [Decimal(v) for v in row] == millis * 3


def test_uuid_extract_timestamp_misreads_ulids_on_postgresql_18(
    backends: dict[str, Backend],
) -> None:
    # What docs/time-ranges.md says: uuid_extract_timestamp() needs version 7
    # (or 1) and the RFC variant, which a ULID's random bits only sometimes
    # have. On a ULID it is NULL, or a time that is not the ULID's, or (when
    # the bits read as version 7 and the variant) the right millisecond by
    # chance. ulid_timestamp() is right on every one.
    engine = backends["postgresql"].engine
    if engine is None:
        pytest.fail(f"required backend missing: {backends['postgresql'].reason}", pytrace=False)
    rng = random.Random(30)
    ulids = [
        ULID.from_parts(rng.randrange(MAX_DATETIME_MS), rng.getrandbits(80)) for _ in range(4000)
    ]
    t = sa.table("sqltime_misread", sa.column("id", ULIDType()))

    def ms(expr: Any) -> Any:
        return sa.cast(sa.extract("epoch", expr) * 1000, sa.BigInteger)

    with engine.connect() as conn:
        if _pg_version(engine) < (17,):
            # Before 17 the server has no such function to misuse.
            assert conn.scalar(sa.text("SELECT to_regproc('uuid_extract_timestamp')")) is None
            return
        conn.exec_driver_sql("CREATE TEMP TABLE sqltime_misread (id uuid)")
        conn.execute(t.insert(), [{"id": u} for u in ulids])
        rows = conn.execute(
            sa.select(
                sa.cast(t.c.id, sa.Uuid()),
                ms(sa.func.uuid_extract_timestamp(sa.cast(t.c.id, sa.Uuid()))),
                ms(ulid_timestamp(t.c.id)),
            )
        ).all()
        conn.rollback()
    nulls = wrong = 0
    for value, extracted, ours in rows:
        ulid = ULID.from_uuid(value)
        assert ours == ulid.timestamp_ms
        version, variant = value.version, value.variant
        if version == 7 and variant == uuid.RFC_4122:
            assert extracted == ulid.timestamp_ms
        elif version == 1 and variant == uuid.RFC_4122:
            wrong += extracted != ulid.timestamp_ms
        else:
            assert extracted is None
            nulls += 1
    assert nulls > 3000
    assert wrong > 0
