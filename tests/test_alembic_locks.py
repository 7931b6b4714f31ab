"""Lock-safe DDL: a blocked DDL statement retries, never queues the writers, ends cleanly.

A reader holds a conflicting lock: an open transaction that read the table
(ACCESS SHARE on PostgreSQL, which ALTER TABLE's ACCESS EXCLUSIVE waits for;
a shared metadata lock on MariaDB). Writers insert single rows meanwhile and
record how long each statement took.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

import _databases
import _writers
from _sessions import session_id
from conftest import Backend, private_engine, recording
from sqlalchemy_ulid.alembic._locks import LockTimeoutError, lock_safe_ddl

TABLE = "lock_orders"
ADD = f"ALTER TABLE {TABLE} ADD COLUMN extra INTEGER"
#: A writer queued behind a waiting DDL waits at most its lock timeout (0.2 s
#: here); the rest is a loaded CI machine. Judged past the machine's own
#: stalls: the longest write of a table the DDL never touches, in the same run.
WRITER_BOUND = 1.5


@pytest.fixture(params=["postgresql", "mysql"])
def server(request: pytest.FixtureRequest, backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends[request.param], _drop) as engine:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"CREATE TABLE {TABLE} (id INTEGER PRIMARY KEY, note VARCHAR(20))")
            conn.exec_driver_sql(f"INSERT INTO {TABLE} VALUES (1, 'first')")
        yield engine


_drop = _databases.dropper(TABLE)


class Writers(_writers.Writers):
    """Threads inserting single rows, each statement timed."""

    def __init__(self, engine: Engine, count: int = 2) -> None:
        super().__init__(engine, count, settle=0)

    def begin(self, conn: sa.Connection, n: int) -> None:
        # One untimed INSERT first: a fresh connection's first
        # statement on the table (opening it) is not the op's doing.
        conn.exec_driver_sql(f"INSERT INTO {TABLE} (id, note) VALUES ({_key(n)}, 'w')")
        conn.commit()

    def write(self, conn: sa.Connection, n: int) -> None:
        key = _key(n) + 1
        while not self.stop.is_set():
            self.send(conn, f"INSERT INTO {TABLE} (id, note) VALUES ({key}, 'w')")
            key += 1
            time.sleep(0.005)

    def check(self, stall: float = 0.0) -> None:
        """Fail on an error, too few writes, or a wait longer than the bound past ``stall``."""
        super().check()
        assert len(self.latencies) > 20, "the writers hardly wrote: the test proves nothing"
        self.check_waits(WRITER_BOUND, stall)


def _key(n: int) -> int:
    """Writer ``n``'s first key."""
    return 1000 + n * 1_000_000


def _columns(engine: Engine) -> list[str]:
    return [c["name"] for c in sa.inspect(engine).get_columns(TABLE)]


def test_ddl_retries_behind_a_reader_and_succeeds_when_it_ends(
    server: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    reader = server.connect()
    reader.exec_driver_sql(f"SELECT * FROM {TABLE}").all()  # holds its lock until rollback
    release = threading.Timer(1.0, reader.rollback)
    started = time.monotonic()
    with (
        _writers.Control(server, "lock_control") as control,
        Writers(server) as writers,
        caplog.at_level(logging.WARNING, "alembic"),
    ):
        release.start()
        with server.begin() as conn:
            lock_safe_ddl(conn, [ADD], lock_timeout=0.2, attempts=20)
        elapsed = time.monotonic() - started
        time.sleep(0.2)  # writers go on after the DDL, too
    release.join(timeout=5)
    reader.close()
    writers.check(control.stall())
    assert "extra" in _columns(server)
    assert elapsed >= 0.9, "the DDL did not wait for the reader"
    retries = [r for r in caplog.records if "lock timeout" in r.getMessage()]
    assert retries, "no retry was logged"


def test_ddl_gives_up_after_its_tries_naming_the_reader(server: Engine) -> None:
    reader = server.connect()
    reader_id = session_id(reader)
    reader.exec_driver_sql(f"SELECT * FROM {TABLE} WHERE id = 1").all()
    try:
        with (
            _writers.Control(server, "lock_control") as control,
            Writers(server) as writers,
            server.connect() as conn,
        ):
            started = time.monotonic()
            with pytest.raises(LockTimeoutError) as caught:
                lock_safe_ddl(conn, [ADD], lock_timeout=0.2, attempts=3)
            elapsed = time.monotonic() - started
            # PostgreSQL: the tries ran in savepoints, the transaction goes on.
            assert conn.exec_driver_sql("SELECT 1").scalar() == 1
            conn.commit()
    finally:
        reader.close()
    writers.check(control.stall())
    error = caught.value
    assert error.attempts == 3
    assert reader_id in [b.session for b in error.blockers], error.blockers
    assert f"session {reader_id}" in str(error)
    if server.dialect.name == "postgresql":
        assert "WHERE id = 1" in str(error)
    assert elapsed < 10  # 3 tries and 0.2 + 0.4 s of backoff, on a loaded machine
    assert "extra" not in _columns(server)


def test_the_session_lock_timeout_is_restored(server: Engine) -> None:
    read = (
        "SELECT current_setting('lock_timeout')"
        if server.dialect.name == "postgresql"
        else "SELECT @@SESSION.lock_wait_timeout, @@SESSION.innodb_lock_wait_timeout"
    )
    with server.connect() as conn:
        before = conn.exec_driver_sql(read).one()
        lock_safe_ddl(conn, [ADD], lock_timeout=timedelta(milliseconds=300))
        assert conn.exec_driver_sql(read).one() == before
        conn.commit()
    with server.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        before = conn.exec_driver_sql(read).one()
        lock_safe_ddl(conn, [f"ALTER TABLE {TABLE} DROP COLUMN extra"], lock_timeout=0.3)
        assert conn.exec_driver_sql(read).one() == before
    assert "extra" not in _columns(server)


@pytest.mark.parametrize(
    "bad",
    [
        0,  # no wait at all is not a timeout
        -1,  # negative
        math.nan,  # not a number of seconds
        math.inf,  # never times out
        timedelta(0),  # zero, as a timedelta
        10**6,  # more than a day
    ],
)
def test_bad_lock_timeouts_refused_before_sql(engine: Engine, bad: object) -> None:
    with engine.connect() as conn, recording(engine) as seen:
        with pytest.raises(ValueError, match="lock_timeout"):
            lock_safe_ddl(conn, ["CREATE TABLE never_made (id INTEGER)"], lock_timeout=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="attempts"):
            lock_safe_ddl(
                conn, ["CREATE TABLE never_made (id INTEGER)"], lock_timeout=1, attempts=0
            )
    assert seen == []


# -- the ops ----------------------------------------------------------------------


def _ops(conn: sa.Connection) -> Any:
    from alembic.migration import MigrationContext
    from alembic.operations import Operations

    import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)

    return Operations(MigrationContext.configure(conn))


def test_the_ops_ddl_gives_up_behind_a_reader_and_changes_nothing(server: Engine) -> None:
    with server.begin() as conn:
        conn.exec_driver_sql(
            f"ALTER TABLE {TABLE} ADD COLUMN created_at TIMESTAMP NOT NULL "
            "DEFAULT '2024-01-01 00:00:00'"
        )
        conn.exec_driver_sql(f"ALTER TABLE {TABLE} ADD COLUMN ref CHAR(26) NULL")
        conn.exec_driver_sql(f"UPDATE {TABLE} SET ref = '01HF1Q8Z9K3J5X7V2N4M6P8R0T'")
        conn.exec_driver_sql(f"ALTER TABLE {TABLE} ADD COLUMN old_id INTEGER NULL")
    reader = server.connect()
    reader.exec_driver_sql(f"SELECT * FROM {TABLE}").all()
    try:
        with _writers.Control(server, "lock_control") as control, Writers(server) as writers:
            with pytest.raises(LockTimeoutError), server.begin() as conn:
                _ops(conn).add_ulid_column(TABLE, "public_id", "created_at", lock_timeout=0.2)
            with pytest.raises(LockTimeoutError), server.begin() as conn:
                _ops(conn).alter_ulid_storage(
                    TABLE, "ref", from_storage="text", to_storage="auto",
                    lock_timeout=timedelta(milliseconds=200),
                )  # fmt: skip
            with pytest.raises(LockTimeoutError), server.begin() as conn:
                _ops(conn).drop_ulid_column(TABLE, "old_id", lock_timeout=0.2)
    finally:
        reader.close()
    writers.check(control.stall())
    columns = {c["name"]: c for c in sa.inspect(server).get_columns(TABLE)}
    assert "public_id" not in columns
    assert "old_id" in columns
    assert "CHAR" in str(columns["ref"]["type"]).upper()


def test_alter_ulid_storage_online_refuses_a_missing_table_before_any_ddl(
    engine: Engine,
) -> None:
    """SQLite: never online; PostgreSQL and MariaDB read the catalog, then refuse."""
    expected: tuple[type[Exception], str] = {
        "sqlite": (ValueError, "SQLite has one writer"),
        "postgresql": (ValueError, "there is no table"),
    }.get(engine.dialect.name, (ValueError, "does not exist: nothing was changed"))
    with (
        engine.connect() as conn,
        recording(engine) as seen,
        pytest.raises(expected[0], match=expected[1]),
    ):
        _ops(conn).alter_ulid_storage(
            TABLE, "ref", from_storage="text", to_storage="auto", online=True
        )
    # The servers read the catalog before they refuse; SQLite sends no SQL.
    assert not [s for s in seen if s.split()[0].upper() in ("ALTER", "CREATE", "INSERT")]
    if engine.dialect.name == "sqlite":
        assert seen == []
