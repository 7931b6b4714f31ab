"""Server-side UUIDv7 generators on real SQLite, PostgreSQL 15 and MariaDB 10.11, and
the DDL they render for PostgreSQL 18 and MariaDB 11.7 (compiled, with a faked
server version)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.dialects import mssql, mysql, postgresql, sqlite
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.schema import CreateColumn

from conftest import Backend
from sqlalchemy_ulid import (
    ULID,
    drop_uuid7_function,
    drop_uuid7_function_ddl,
    install_ulid_function,
    install_uuid7_function,
    register_uuid7_function,
    uuid7_function_ddl,
    uuid7_max_at,
    uuid7_min_at,
    uuid7_server_default,
)
from sqlalchemy_ulid._dialects import dialect_row

ROWS = 2000


@pytest.fixture
def conn(engine: Engine) -> Iterator[Connection]:
    """One connection with gen_uuid7() installed (SQLite keeps it per connection)."""
    with engine.connect() as connection:
        install_uuid7_function(connection)
        connection.commit()
        yield connection
        connection.rollback()
        drop_uuid7_function(connection)
        connection.commit()


def _column_type(storage: str, dialect: Dialect) -> sa.types.TypeEngine[Any]:
    if storage == "binary":
        return dialect_row(dialect).binary()
    if storage == "hex":
        return sa.Uuid(native_uuid=False)  # CHAR(32) hex, as sa.Uuid stores it
    return sa.Uuid()


def _table(metadata: sa.MetaData, storage: str, dialect: Dialect) -> sa.Table:
    return sa.Table(
        "u7_server_events",
        metadata,
        sa.Column("n", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column(
            "id",
            _column_type(storage, dialect),
            nullable=False,
            server_default=uuid7_server_default(storage),  # type: ignore[arg-type]
        ),
    )


def _as_uuid(value: Any) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return uuid.UUID(int=value.int)
    return uuid.UUID(bytes=bytes(value))


def _insert_many(conn: Connection) -> None:
    """One INSERT of ROWS rows, in n order, every id from the DEFAULT."""
    name = conn.dialect.name
    if name == "postgresql":
        sql = f"INSERT INTO u7_server_events (n) SELECT g FROM generate_series(1, {ROWS}) AS g"
    elif name == "sqlite":
        sql = (
            f"WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {ROWS}) "
            "INSERT INTO u7_server_events (n) SELECT n FROM s"
        )
    else:  # MariaDB's sequence engine
        sql = f"INSERT INTO u7_server_events (n) SELECT seq FROM seq_1_to_{ROWS}"
    conn.exec_driver_sql(sql)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _storages(engine: Engine) -> list[str]:
    # "native" where sa.Uuid() is the database's uuid type: PostgreSQL, and
    # MariaDB with SQLAlchemy 2.1.
    time_sql = dialect_row(engine.dialect).time
    assert time_sql is not None
    native = ["native"] if time_sql.native_uuid(engine.dialect) else []
    return ["auto", "binary", "hex", *native]


@pytest.mark.parametrize("storage", ["auto", "native", "binary", "hex"])
def test_one_insert_of_many_rows_gets_valid_current_v7s(
    conn: Connection, metadata: sa.MetaData, storage: str
) -> None:
    if storage not in _storages(conn.engine):
        with pytest.raises(exc.CompileError, match="no uuid type"):
            _table(metadata, storage, conn.dialect).create(conn)
        return
    table = _table(metadata, storage, conn.dialect)
    metadata.create_all(conn)
    before = _now_ms()
    _insert_many(conn)
    after = _now_ms()
    rows = conn.execute(sa.select(table.c.n, table.c.id).order_by(table.c.n)).all()
    conn.commit()
    ids = [_as_uuid(value) for _, value in rows]
    assert len(ids) == ROWS
    assert len(set(ids)) == ROWS
    for value in ids:
        assert value.version == 7
        assert value.variant == uuid.RFC_4122
        assert before - 1_000 <= value.int >> 80 <= after + 1_000
        assert uuid7_min_at(value.int >> 80) <= value <= uuid7_max_at(value.int >> 80)
    # Ordered by millisecond everywhere...
    assert all(a.int >> 80 <= b.int >> 80 for a, b in pairwise(ids))
    if conn.dialect.name in ("postgresql", "sqlite"):
        # ...and within a millisecond where we say so (a session / the process).
        assert ids == sorted(ids)
        # PostgreSQL 13-17: our counter sits in rand_a, a run of one ms counts
        # 0, 1, 2... PostgreSQL 18's uuidv7() puts the time's fraction of a
        # millisecond there, at least one 1/4096 ms on per id of a backend.
        if conn.dialect.name == "postgresql":
            first_ms = ids[0].int >> 80
            run = [(v.int >> 64) & 0xFFF for v in ids if v.int >> 80 == first_ms]
            if (conn.dialect.server_version_info or ()) >= (18,):
                assert all(a < b for a, b in pairwise(run))
            else:
                assert run == list(range(run[0], run[0] + len(run)))


def test_separate_statements_of_one_session_are_ordered(
    conn: Connection, metadata: sa.MetaData
) -> None:
    table = _table(metadata, "auto", conn.dialect)
    metadata.create_all(conn)
    for n in range(30):
        conn.exec_driver_sql(f"INSERT INTO u7_server_events (n) VALUES ({n})")
        if conn.dialect.name == "mysql":
            time.sleep(0.002)  # ordered by millisecond only there
    assert conn.scalars(sa.select(table.c.n).order_by(table.c.id)).all() == list(range(30))
    conn.commit()


def test_gen_uuid7_callable_in_raw_sql(conn: Connection) -> None:
    values = [_as_uuid(conn.scalar(sa.text("SELECT gen_uuid7()"))) for _ in range(20)]
    assert {v.version for v in values} == {7}
    assert len(set(values)) == 20
    if conn.dialect.name != "mysql":
        assert values == sorted(values)


def test_core_insert_returns_the_server_generated_key(
    conn: Connection, metadata: sa.MetaData
) -> None:
    table = sa.Table(
        "u7_server_keys",
        metadata,
        sa.Column("id", sa.Uuid(), primary_key=True, server_default=uuid7_server_default()),
        sa.Column("x", sa.Integer),
    )
    metadata.create_all(conn)
    result = conn.execute(table.insert().values(x=7))
    key = result.inserted_primary_key
    if conn.dialect.name == "mysql":
        # MariaDB returns no generated non-integer key without RETURNING.
        assert key is None or key[0] is None or key[0].version == 7
    else:
        assert key is not None
        assert key[0].version == 7
        assert conn.scalar(sa.select(table.c.x).where(table.c.id == key[0])) == 7
    conn.commit()  # before the table is dropped on another connection


def test_drop_is_idempotent(engine: Engine) -> None:
    with engine.connect() as connection:
        drop_uuid7_function(connection)
        drop_uuid7_function(connection)
        connection.commit()
        if engine.dialect.name != "sqlite":
            with pytest.raises(exc.DBAPIError):
                connection.execute(sa.text("SELECT gen_uuid7()"))
            connection.rollback()


def _postgresql(backends: dict[str, Backend]) -> Engine:
    pg = backends["postgresql"]
    if pg.engine is None:
        pytest.fail(f"required backend missing: {pg.reason}", pytrace=False)
    return pg.engine


def test_postgresql_gen_ulid_is_ordered_within_a_session(backends: dict[str, Backend]) -> None:
    engine = _postgresql(backends)
    with engine.connect() as connection:
        install_ulid_function(connection)
        raw = connection.scalars(sa.text(f"SELECT gen_ulid() FROM generate_series(1, {ROWS})"))
        ulids = [ULID.from_bytes(value.bytes) for value in raw]
        one_by_one = [
            ULID.from_bytes(connection.scalar(sa.text("SELECT gen_ulid()")).bytes)
            for _ in range(20)
        ]
        connection.rollback()
    assert ulids == sorted(ulids)
    assert len(set(ulids)) == ROWS
    assert one_by_one == sorted(one_by_one)
    assert ulids[-1] < one_by_one[0]


def test_postgresql_sessions_each_keep_their_own_order(backends: dict[str, Backend]) -> None:
    engine = _postgresql(backends)
    with engine.connect() as one, engine.connect() as two:
        install_uuid7_function(one)
        one.commit()
        made: dict[str, list[uuid.UUID]] = {"one": [], "two": []}
        for _ in range(200):
            made["one"].append(one.scalar(sa.text("SELECT gen_uuid7()")))
            made["two"].append(two.scalar(sa.text("SELECT gen_uuid7()")))
        one.rollback()
        two.rollback()
        drop_uuid7_function(one)
        one.commit()
    for values in made.values():
        assert values == sorted(values)
    assert not set(made["one"]) & set(made["two"])


def test_register_is_for_sqlite_only(engine: Engine) -> None:
    if engine.dialect.name == "sqlite":
        fresh = sa.create_engine("sqlite://")
        register_uuid7_function(fresh)
        with fresh.connect() as connection:
            values = [connection.scalar(sa.text("SELECT gen_uuid7()")) for _ in range(5)]
        assert [uuid.UUID(bytes=v).version for v in values] == [7] * 5
        assert values == sorted(values)
        return
    with pytest.raises(ValueError, match="for SQLite engines"):
        register_uuid7_function(engine)


# -- DDL for other server versions (compiled, no server) -------------------------------


def _dialect(module: Any, version: tuple[Any, ...] | None, **attrs: Any) -> Dialect:
    dialect: Dialect = module.dialect()
    dialect.server_version_info = version
    for name, value in attrs.items():
        setattr(dialect, name, value)
    return dialect


def _default_sql(dialect: Dialect, storage: str = "auto", type_: Any = None) -> str:
    column = sa.Column(
        "id",
        type_ if type_ is not None else sa.Uuid(),
        server_default=uuid7_server_default(storage),  # type: ignore[arg-type]
    )
    sa.Table("t", sa.MetaData(), column)
    return str(CreateColumn(column).compile(dialect=dialect))


def _mariadb(version: tuple[Any, ...]) -> Dialect:
    dialect = _dialect(mysql, version, is_mariadb=True)
    # What SQLAlchemy 2.1 sets for MariaDB 10.7+ (sa.UUID() renders UUID on 2.0 too).
    dialect.supports_native_uuid = True
    return dialect


def test_postgresql_18_uses_uuidv7() -> None:
    pg18 = _dialect(postgresql, (18, 0))
    assert _default_sql(pg18) == "id UUID DEFAULT (uuidv7())"
    assert (
        _default_sql(pg18, "binary", sa.LargeBinary()) == "id BYTEA DEFAULT (uuid_send(uuidv7()))"
    )
    # gen_uuid7() on 18+ is the server's own, for raw SQL.
    assert uuid7_function_ddl(pg18) == [
        "CREATE OR REPLACE FUNCTION gen_uuid7() RETURNS uuid LANGUAGE sql VOLATILE "
        "AS 'SELECT uuidv7()'"
    ]


@pytest.mark.parametrize("version", [(15, 20), (17, 2), None])
def test_postgresql_before_18_and_offline_use_gen_uuid7(version: tuple[int, ...] | None) -> None:
    dialect = _dialect(postgresql, version)
    assert _default_sql(dialect) == "id UUID DEFAULT (gen_uuid7())"
    assert "LANGUAGE plpgsql" in uuid7_function_ddl(dialect)[0]
    assert "set_config('sqlalchemy_ulid.gen_uuid7'" in uuid7_function_ddl(dialect)[0]


def test_postgresql_12_is_refused_clearly() -> None:
    pg12 = _dialect(postgresql, (12, 9))
    with pytest.raises(exc.CompileError, match=r"PostgreSQL 12\.9 has no gen_random_uuid"):
        _default_sql(pg12)
    with pytest.raises(NotImplementedError, match="gen_random_uuid"):
        uuid7_function_ddl(pg12)


def test_mariadb_11_7_uses_uuid_v7_for_uuid_columns() -> None:
    maria = _mariadb((11, 7, 2, "MariaDB"))
    assert _default_sql(maria, "native", sa.UUID()) == "id UUID DEFAULT (UUID_v7())"
    # 16 bytes: the portable expression (UUID_v7() returns a UUID).
    binary = _default_sql(maria, "binary", sa.BINARY(16))
    assert binary.startswith("id BINARY(16) DEFAULT (UNHEX(CONCAT(")
    assert "RANDOM_BYTES" in binary


def test_mariadb_10_11_uses_an_inline_expression() -> None:
    maria = _mariadb((10, 11, 19))
    text = _default_sql(maria, "native", sa.UUID())
    assert text.startswith("id UUID DEFAULT (LOWER(CONCAT(")
    assert "UUID_v7" not in text


def test_mariadb_before_10_10_is_refused_clearly() -> None:
    with pytest.raises(exc.CompileError, match=r"MariaDB 10\.6\.16 has no RANDOM_BYTES"):
        _default_sql(_mariadb((10, 6, 16)), "binary", sa.BINARY(16))


def test_mysql_8_is_not_taken_for_an_old_mariadb() -> None:
    mysql8 = _dialect(mysql, (8, 0, 36), is_mariadb=False)
    assert "RANDOM_BYTES" in _default_sql(mysql8, "binary", sa.BINARY(16))
    with pytest.raises(exc.CompileError, match="no uuid type"):
        _default_sql(mysql8, "native")


def test_databases_without_a_generator_are_refused() -> None:
    with pytest.raises(exc.CompileError, match="no server-side UUIDv7 generator for 'mssql'"):
        _default_sql(mssql.dialect())
    supported = "supported: cockroachdb, mariadb, mysql, postgresql, sqlite"
    with pytest.raises(NotImplementedError, match=supported):
        uuid7_function_ddl("mssql")
    with pytest.raises(exc.CompileError, match="no uuid type"):
        _default_sql(sqlite.dialect(), "native")


@pytest.mark.parametrize("storage", ["text", "uuid", "", None])
def test_unknown_storage_is_a_value_error_before_any_sql(storage: Any) -> None:
    with pytest.raises(ValueError, match="storage must be one of"):
        uuid7_server_default(storage)


def test_drop_ddl_per_dialect() -> None:
    assert drop_uuid7_function_ddl("postgresql") == ["DROP FUNCTION IF EXISTS gen_uuid7()"]
    assert drop_uuid7_function_ddl("mysql") == ["DROP FUNCTION IF EXISTS gen_uuid7"]
    assert drop_uuid7_function_ddl("sqlite") == []


@pytest.mark.parametrize(("name", "bits"), [("gen_uuid7", 12), ("gen_ulid", 16)])
def test_postgresql_counter_steps_back_and_overflow(
    backends: dict[str, Backend], name: str, bits: int
) -> None:
    """The session state read by the function: a clock behind it, a full count."""
    engine = _postgresql(backends)
    setting = f"sqlalchemy_ulid.{name}"
    ahead = _now_ms() + 60_000  # as if the clock had stepped back a minute

    def made() -> tuple[int, int]:
        value = uuid.UUID(int=conn.scalar(sa.text(f"SELECT {name}()")).int)
        count = (value.int >> 64) & 0xFFF if bits == 12 else (value.int >> 64) & 0xFFFF
        return value.int >> 80, count

    with engine.connect() as conn:
        (install_uuid7_function if name == "gen_uuid7" else install_ulid_function)(conn)
        if name == "gen_uuid7" and (engine.dialect.server_version_info or ()) >= (18,):
            # PostgreSQL 18: gen_uuid7() is the server's uuidv7(), which keeps its
            # state in the backend: our setting changes nothing, and each id is
            # later than the one before, at the current millisecond.
            conn.execute(sa.text(f"SELECT set_config('{setting}', '{ahead}:5', false)"))
            made_now = [made() for _ in range(50)]
            assert all(a < b for a, b in pairwise(made_now))
            assert all(abs(ms - _now_ms()) < 5_000 for ms, _ in made_now)
            conn.rollback()
            return
        conn.execute(sa.text(f"SELECT set_config('{setting}', '{ahead}:5', false)"))
        assert made() == (ahead, 6)  # keeps the later millisecond, counts on
        assert made() == (ahead, 7)
        conn.execute(sa.text(f"SELECT set_config('{setting}', '{ahead}:{(1 << bits) - 1}', false)"))
        assert made() == (ahead + 1, 0)  # a full count moves on, never wraps
        conn.execute(sa.text(f"SELECT set_config('{setting}', '', false)"))
        now_ms, count = made()
        assert count == 0
        assert abs(now_ms - _now_ms()) < 5_000
        conn.rollback()


@pytest.mark.parametrize(
    ("helper", "bad"),
    [
        ("register_uuid7_function", "sqlite://"),  # a URL, not an engine
        ("register_uuid7_function", None),  # nothing
        ("install_uuid7_function", "sqlite://"),  # a URL, not a connection
        ("install_uuid7_function", sa.create_engine("sqlite://")),  # an engine, not a connection
        ("drop_uuid7_function", None),  # nothing
        ("uuid7_function_ddl", None),  # neither a dialect nor its name
        ("drop_uuid7_function_ddl", 5),  # neither a dialect nor its name
    ],
)
def test_uuid7_function_helpers_refuse_a_non_engine_with_type_error(
    helper: str, bad: object
) -> None:
    # They read .dialect / .name of what they got, and raised AttributeError.
    import sqlalchemy_ulid

    with pytest.raises(TypeError, match=helper):
        getattr(sqlalchemy_ulid, helper)(bad)
