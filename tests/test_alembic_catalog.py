"""The ops' readers ask each database's catalog, found by its registered class (issue 32).

``alembic/_inspect.py`` has no branch on the dialect's name: the catalog of
``alembic/<database>/catalog.py`` (``Catalog``) reads what SQLAlchemy's
reflection misses and sets what the session needs. A dialect with no catalog
is refused with a clear message before any SQL.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

import sqlalchemy_ulid.alembic  # noqa: F401  (registers the catalogs)
from sqlalchemy_ulid.alembic._catalog import UnsupportedCatalog, catalog_for
from sqlalchemy_ulid.alembic._inspect import column_state, strict_mode, utc_session
from sqlalchemy_ulid.alembic.mysql.catalog import MariaDBCatalog
from sqlalchemy_ulid.alembic.postgresql.catalog import PostgreSQLCatalog
from sqlalchemy_ulid.alembic.sqlite import SQLiteCatalog

_CATALOGS = {"sqlite": SQLiteCatalog, "postgresql": PostgreSQLCatalog, "mysql": MariaDBCatalog}


def test_each_backend_has_its_own_catalog(engine: Engine, backend: Any) -> None:
    assert type(catalog_for(engine.dialect)) is _CATALOGS[backend.name]


def _settings(conn: sa.Connection) -> tuple[str, str] | None:
    if not isinstance(catalog_for(conn.dialect), MariaDBCatalog):
        return None
    row = conn.exec_driver_sql("SELECT @@SESSION.sql_mode, @@SESSION.time_zone").one()
    return str(row[0]), str(row[1])


def test_session_settings_are_put_back(engine: Engine) -> None:
    """strict_mode/utc_session hold inside the block only, on every backend."""
    with engine.connect() as conn:
        if _settings(conn) is not None:
            conn.exec_driver_sql("SET SESSION sql_mode = '', time_zone = '+05:00'")
        before = _settings(conn)
        with strict_mode(conn), utc_session(conn):
            inside = _settings(conn)
            if inside is not None:
                assert "STRICT_ALL_TABLES" in inside[0].split(",")
                assert inside[1] == "+00:00"
        assert _settings(conn) == before
        conn.rollback()


def test_column_state_reads_a_function_default_and_its_comment(engine: Engine) -> None:
    """MariaDB's reflection returns neither a function DEFAULT nor the COMMENT after it."""
    long_text = "y" * 200
    mariadb = isinstance(catalog_for(engine.dialect), MariaDBCatalog)
    default = f"concat('{long_text}', 'b')" if mariadb else f"'{long_text}' || 'b'"
    table = sa.Table(
        "catalog_function_default",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("note", sa.String(400), server_default=sa.text(f"({default})"), comment="a note"),
    )
    with engine.begin() as conn:
        table.drop(conn, checkfirst=True)
        table.create(conn)
    try:
        with engine.connect() as conn:
            state = column_state(conn, table.name, "note", None)
        assert state is not None
        assert state.default is not None
        assert long_text in state.default
        if engine.dialect.name != "sqlite":  # SQLite keeps no comments
            assert state.comment == "a note"
    finally:
        with engine.begin() as conn:
            table.drop(conn)


@pytest.mark.parametrize("url", ["mssql+pymssql://", "oracle+oracledb://"])
def test_a_database_without_a_catalog_is_refused_before_any_sql(url: str) -> None:
    # A mock engine only records what would be sent: nothing must be.
    sent: list[object] = []
    mock = sa.create_mock_engine(url, lambda sql, *a, **kw: sent.append(sql))
    with pytest.raises(UnsupportedCatalog, match=r"not supported on \w+") as caught:
        strict_mode(mock)  # type: ignore[arg-type]
    assert isinstance(caught.value, ValueError)
    assert sent == []
