"""Server-side ULID generators on real SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import time
import typing
from collections.abc import Iterator
from datetime import timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.engine import Connection, Engine

from sqlalchemy_ulid import (
    ULID,
    ULIDType,
    drop_ulid_function,
    drop_ulid_function_ddl,
    install_ulid_function,
    register_ulid_function,
    ulid_function_ddl,
    ulid_server_default,
)
from sqlalchemy_ulid._kinds import ULID_KEYS, UUID7_KEYS
from sqlalchemy_ulid._types import Storage
from sqlalchemy_ulid._uuid7_defaults import UUID7Storage


@pytest.fixture
def conn(engine: Engine) -> Iterator[Connection]:
    """One connection with gen_ulid() installed (SQLite keeps it per connection)."""
    with engine.connect() as connection:
        install_ulid_function(connection)
        connection.commit()
        yield connection
        connection.rollback()
        drop_ulid_function(connection)
        connection.commit()


def _events(metadata: sa.MetaData, storage: str = "auto") -> sa.Table:
    return sa.Table(
        "ut_server_events",
        metadata,
        sa.Column(
            "id",
            ULIDType(storage),  # type: ignore[arg-type]
            primary_key=True,
            server_default=ulid_server_default(storage),  # type: ignore[arg-type]
        ),
        sa.Column("n", sa.Integer, nullable=False),
    )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.mark.parametrize("storage", ["auto", "binary"])
def test_raw_insert_without_id_gets_a_current_ulid(
    conn: Connection, metadata: sa.MetaData, storage: str
) -> None:
    table = _events(metadata, storage)
    metadata.create_all(conn)
    before = _now_ms()
    conn.exec_driver_sql("INSERT INTO ut_server_events (n) VALUES (1)")
    after = _now_ms()
    got = conn.scalar(sa.select(table.c.id))
    conn.commit()
    assert type(got) is ULID
    # Local servers: allow a little clock skew and rounding, nothing more.
    assert before - 1_000 <= got.timestamp_ms <= after + 1_000
    assert got.datetime.tzinfo is timezone.utc


def test_rows_from_separate_statements_sort_in_insertion_order(
    conn: Connection, metadata: sa.MetaData
) -> None:
    table = _events(metadata)
    metadata.create_all(conn)
    for n in range(25):
        conn.exec_driver_sql(f"INSERT INTO ut_server_events (n) VALUES ({n})")
        # Server generators order by millisecond only (not monotonic), so
        # statements a millisecond apart must sort in order.
        time.sleep(0.002)
    assert conn.scalars(sa.select(table.c.n).order_by(table.c.id)).all() == list(range(25))
    assert len(set(conn.scalars(sa.select(table.c.id)))) == 25
    conn.commit()


def test_core_insert_returns_the_server_generated_key(
    conn: Connection, metadata: sa.MetaData
) -> None:
    table = _events(metadata)
    metadata.create_all(conn)
    result = conn.execute(table.insert().values(n=7))
    key = result.inserted_primary_key
    assert key is not None
    assert conn.scalar(sa.select(table.c.n).where(table.c.id == key[0])) == 7
    conn.commit()


def test_gen_ulid_callable_in_raw_sql(conn: Connection) -> None:
    before = _now_ms()
    raw = conn.scalar(sa.text("SELECT gen_ulid()"))
    value = ULIDType().process_result_value(raw, conn.dialect)
    assert type(value) is ULID
    assert before - 1_000 <= value.timestamp_ms <= _now_ms() + 1_000


def test_text_storage_has_no_server_generator() -> None:
    with pytest.raises(ValueError, match="storage='text' has no server-side generator"):
        ulid_server_default("text")


def test_unsupported_dialect_fails_at_create_table() -> None:
    from sqlalchemy.dialects import mssql

    table = _events(sa.MetaData())
    with pytest.raises(exc.CompileError, match="'mssql'"):
        sa.schema.CreateTable(table).compile(dialect=mssql.dialect())


def test_ddl_strings_install_and_drop_the_function(engine: Engine) -> None:
    create, drop = ulid_function_ddl(engine.dialect), drop_ulid_function_ddl(engine.dialect)
    if engine.dialect.name == "sqlite":
        assert (create, drop) == ([], [])  # nothing lives in a SQLite file
        return
    assert create == ulid_function_ddl(engine.dialect.name)
    with engine.connect() as connection:
        for statement in create:
            connection.exec_driver_sql(statement)
        connection.commit()
        assert connection.scalar(sa.text("SELECT gen_ulid()")) is not None
        for statement in drop:
            connection.exec_driver_sql(statement)
        connection.commit()
        with pytest.raises(exc.DBAPIError):
            connection.execute(sa.text("SELECT gen_ulid()"))
        connection.rollback()
        drop_ulid_function(connection)  # dropping twice is fine
        connection.commit()


def test_register_ulid_function_gives_every_connection_of_one_engine(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/registered.sqlite3"
    registered, plain = sa.create_engine(url), sa.create_engine(url)
    register_ulid_function(registered)
    metadata = sa.MetaData()
    table = _events(metadata)
    try:
        with registered.begin() as connection:
            metadata.create_all(connection)
            connection.exec_driver_sql("INSERT INTO ut_server_events (n) VALUES (1)")
        registered.dispose()  # a fresh connection gets the function too
        with registered.begin() as connection:
            connection.exec_driver_sql("INSERT INTO ut_server_events (n) VALUES (2)")
            ids = connection.scalars(sa.select(table.c.id).order_by(table.c.id)).all()
        assert len(ids) == 2
        assert ids[0] < ids[1]  # the SQLite function is monotonic
        with pytest.raises(exc.OperationalError, match="gen_ulid"), plain.begin() as other:
            other.exec_driver_sql("INSERT INTO ut_server_events (n) VALUES (3)")
    finally:
        registered.dispose()
        plain.dispose()


def test_register_ulid_function_refuses_other_engines(backend: Any) -> None:
    # A fresh engine of each backend: on SQLite it works; elsewhere it is
    # refused and the engine keeps connecting (issue 10, item 9).
    engine = sa.create_engine(backend.url)
    try:
        if engine.dialect.name == "sqlite":
            register_ulid_function(engine)
            with engine.connect() as connection:
                assert connection.exec_driver_sql("SELECT gen_ulid()").scalar() is not None
        else:
            with pytest.raises(ValueError, match="install_ulid_function"):
                register_ulid_function(engine)
            for _ in range(2):
                engine.dispose()
                with engine.connect() as connection:
                    assert connection.scalar(sa.text("SELECT 1")) == 1
    finally:
        engine.dispose()


def test_unsupported_dialect_is_named() -> None:
    with pytest.raises(NotImplementedError, match="'oracle'"):
        ulid_function_ddl("oracle")


def test_server_default_rejects_unknown_storage() -> None:
    with pytest.raises(ValueError, match="storage must be one of"):
        ulid_server_default("uuid")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("helper", "bad"),
    [
        ("register_ulid_function", "sqlite://"),  # a URL, not an engine
        ("install_ulid_function", None),  # nothing
        ("drop_ulid_function", "sqlite://"),  # a URL, not a connection
        ("ulid_function_ddl", None),  # neither a dialect nor its name
        ("drop_ulid_function_ddl", 5),  # neither a dialect nor its name
    ],
)
def test_ulid_function_helpers_refuse_a_non_engine_with_type_error(
    helper: str, bad: object
) -> None:
    import sqlalchemy_ulid

    with pytest.raises(TypeError, match=helper):
        getattr(sqlalchemy_ulid, helper)(bad)


def test_the_storage_options_are_the_public_literals() -> None:
    # The one server-default op checks storage= against the kind's options: the
    # same as the annotations of ulid_server_default() and uuid7_server_default().
    assert typing.get_args(Storage) == ULID_KEYS.storage_options
    assert typing.get_args(UUID7Storage) == UUID7_KEYS.storage_options
    assert ULID_KEYS.ungenerated == ("text",)
    assert not UUID7_KEYS.ungenerated
