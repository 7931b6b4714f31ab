"""A concurrent index build that times out is retried, not refused as "already exists".

``CREATE INDEX CONCURRENTLY`` commits the index to the catalog, then waits
for the transactions writing the table; a lock timeout there leaves the
index INVALID under its name. Both online ops (``add_ulid_column`` and
``alter_ulid_storage``) build their indexes through
``build_index_concurrently``, which drops such a leftover before each retry.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from conftest import Backend
from sqlalchemy_ulid.alembic import _concurrent_index
from sqlalchemy_ulid.alembic._concurrent_index import build_index_concurrently, index_valid
from sqlalchemy_ulid.alembic._locks import LockTimeoutError

TABLE = "ci_retry"


@pytest.fixture
def pg(backends: dict[str, Backend]) -> Iterator[Engine]:
    engine = backends["postgresql"].engine
    assert engine is not None
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {TABLE}")
        conn.exec_driver_sql(f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, v int)")
        conn.exec_driver_sql(f"INSERT INTO {TABLE} SELECT g, g FROM generate_series(1, 100) g")
    yield engine
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {TABLE}")


def _hold_a_write(engine: Engine, seconds: float) -> tuple[threading.Thread, threading.Event]:
    """A transaction that has written the table and commits after ``seconds``."""
    started = threading.Event()

    def hold() -> None:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"INSERT INTO {TABLE} VALUES (1000, 1)")
            started.set()
            threading.Event().wait(seconds)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert started.wait(10)
    return thread, started


def _build(conn: sa.Connection, lock_timeout: float) -> None:
    build_index_concurrently(
        conn,
        f"CREATE UNIQUE INDEX CONCURRENTLY ci_retry_v ON {TABLE} (v, id)",
        table=TABLE,
        name="ci_retry_v",
        qualified="ci_retry_v",
        lock_timeout=lock_timeout,
    )


def test_a_timed_out_build_is_dropped_and_built_again(
    pg: Engine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_concurrent_index, "_INDEX_WAIT", 0.2)
    thread, _ = _hold_a_write(pg, 1.0)
    with (
        caplog.at_level(logging.WARNING, "alembic.runtime.migration"),
        pg.connect().execution_options(isolation_level="AUTOCOMMIT") as conn,
    ):
        _build(conn, 0.2)
        assert index_valid(conn, TABLE, "ci_retry_v") is True
    thread.join(10)
    assert any(
        "lock timeout" in r.getMessage() and "try 1 of" in r.getMessage() for r in caplog.records
    )


def test_every_try_timing_out_fails_cleanly_and_leaves_no_index(
    pg: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_concurrent_index, "_INDEX_WAIT", 0.1)
    monkeypatch.setattr(_concurrent_index, "_INDEX_TRIES", 2)
    thread, _ = _hold_a_write(pg, 4.0)
    with pg.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        with pytest.raises(LockTimeoutError):
            _build(conn, 0.1)
        thread.join(10)
        # The INVALID leftover of the last try was dropped on the way out, or
        # is dropped by the next run, which then builds the index.
        assert index_valid(conn, TABLE, "ci_retry_v") in (None, False)
        _build(conn, 0.1)
        assert index_valid(conn, TABLE, "ci_retry_v") is True
