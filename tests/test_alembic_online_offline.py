"""``add_ulid_column(..., online=True)`` offline (``--sql``) on PostgreSQL, run by psql.

Odd table names (a quote, a percent) and time columns that cannot date ids:
the script is applied with the real ``psql`` client, stopping at the first
error, as a user applies it.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.engine import Engine

import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from conftest import Backend
from sqlalchemy_ulid import ULID

DAYS = ["'2024-01-01'", "'2024-01-02'"]
DAYS_MS = [1704067200000, 1704153600000]


@pytest.fixture
def pg(backends: dict[str, Backend]) -> Iterator[Engine]:
    backend = backends["postgresql"]
    if backend.url is None:
        pytest.fail(f"backend missing: {backend.reason}", pytrace=False)
    engine = sa.create_engine(backend.url, poolclass=sa.pool.NullPool)
    yield engine
    engine.dispose()


def _script(table: str) -> str:
    """The ``--sql`` output of ``add_ulid_column(table, ..., online=True)``."""
    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect_name="postgresql",
        opts={"as_sql": True, "output_buffer": buffer, "transactional_ddl": True},
    )
    Operations(context).add_ulid_column(table, "public_id", "created_at", online=True)
    return buffer.getvalue()


def _psql(engine: Engine, script: str) -> subprocess.CompletedProcess[str]:
    psql = shutil.which("psql")
    assert psql is not None, "psql is needed to run an offline script"
    url = engine.url
    return subprocess.run(
        [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", url.host or "127.0.0.1",
         "-p", str(url.port or 5432), "-U", url.username or "postgres",
         "-d", url.database or "", "-f", "-"],
        input=script, text=True, capture_output=True, timeout=60, check=False,
        env={**os.environ, "PGPASSWORD": url.password or ""},
    )  # fmt: skip


def _make(engine: Engine, table: str, time_type: str, values: list[str]) -> str:
    quoted = engine.dialect.identifier_preparer.quote(table)  # % doubled for the driver
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {quoted}")
        conn.exec_driver_sql(
            f"CREATE TABLE {quoted} (id int PRIMARY KEY, created_at {time_type} NOT NULL)"
        )
        rows = ", ".join(f"({i}, {v})" for i, v in enumerate(values, 1))
        conn.exec_driver_sql(f"INSERT INTO {quoted} VALUES {rows}")
    return quoted


def _drop(engine: Engine, quoted: str) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {quoted}")


@pytest.mark.parametrize(
    ("table", "time_type", "values", "millis"),
    [
        # A quote ended the script's string literals early.
        ("o'brien", "timestamp", DAYS, DAYS_MS),
        # A percent was read by format() and RAISE as a placeholder.
        ("100%_done", "timestamp", DAYS, DAYS_MS),
        # Both, and integer milliseconds.
        ("it's 50%", "bigint", ["1700000000123", "1700000000124"], [1700000000123, 1700000000124]),
    ],
)
def test_offline_script_runs_for_a_table_name_with_a_quote_or_percent(
    pg: Engine, table: str, time_type: str, values: list[str], millis: list[int]
) -> None:
    quoted = _make(pg, table, time_type, values)
    try:
        done = _psql(pg, _script(table))
        assert done.returncode == 0, done.stderr
        assert f"rows of {table}.public_id filled" in done.stderr
        with pg.connect() as conn:
            ids = conn.exec_driver_sql(f"SELECT public_id FROM {quoted} ORDER BY id").scalars()
            made = [ULID.from_uuid(i).timestamp_ms for i in ids]
            column = next(
                c for c in sa.inspect(conn).get_columns(table) if c["name"] == "public_id"
            )
        assert made == millis
        assert column["nullable"] is False
    finally:
        _drop(pg, quoted)


@pytest.mark.parametrize(
    ("time_type", "value"),
    [
        ("double precision", "1700000000.5"),  # epoch seconds: ids dated 1970
        ("numeric(20,3)", "1700000000123.9"),  # milliseconds, but rounded
        ("real", "1700000000"),  # a float
        ("date", "'2024-01-01'"),  # a day, not a moment (refused online too)
    ],
)
def test_offline_script_refuses_a_time_column_that_cannot_date_ids(
    pg: Engine, time_type: str, value: str
) -> None:
    quoted = _make(pg, "offline_num", time_type, [value])
    try:
        done = _psql(pg, _script("offline_num"))
        assert done.returncode != 0
        assert "offline_num.created_at is" in done.stderr, done.stderr
        assert "not a timestamp or an integer of Unix milliseconds" in done.stderr
        with pg.connect() as conn:
            columns = [c["name"] for c in sa.inspect(conn).get_columns("offline_num")]
        assert columns == ["id", "created_at"]  # stopped before any change
    finally:
        _drop(pg, quoted)
