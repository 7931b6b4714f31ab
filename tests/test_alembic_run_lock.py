"""The storage and key conversions hold the run's own lock online, as their scripts do.

``alter_ulid_storage(online=True)`` on MariaDB (the shadow table) and
``convert_primary_key_to_ulid`` / ``restore_legacy_primary_key`` on both
servers take, for their whole run, the lock their ``--sql`` scripts take
(MariaDB ``GET_LOCK``, PostgreSQL an advisory lock on the same key): a
second run on the same table, online or a script, is refused before any
change ("... is under way"), and the lock goes when the run ends, failed or
not, or when its session is killed.

Each first run is paused at a known point (the storage copy's ``progress=``
callback, the key conversion's first ``ALTER TABLE``), in the test's own
thread: nothing else changes the database while the second run is tried.

The lock is named after the table's database: the op's ``schema=`` when
given, else the session's, so a session whose database is another one, or
an op given ``schema=``, names the same lock for the same table.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.operations import MigrateOperation
from sqlalchemy.engine import Engine

import _clients
import _databases
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _offline_scripts import op_sql, run_online
from conftest import Backend, private_engine
from sqlalchemy_ulid.alembic import (
    AlterULIDStorageOp,
    ConversionRefused,
    ConvertPrimaryKeyToULIDOp,
)
from sqlalchemy_ulid.alembic._plan.database import database_for

TABLE = "rl_orders"
ROWS = 30
#: How long the client may take to run a script, at most.
BOUND = 60.0


@pytest.fixture
def server(backends: dict[str, Backend]) -> Iterator[Engine]:
    """MariaDB (the storage conversion's shadow table is MariaDB's)."""
    with private_engine(backends["mysql"], _drop) as engine:
        yield engine


@pytest.fixture(params=["postgresql", "mysql"])
def either(request: pytest.FixtureRequest, backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends[request.param], _drop) as engine:
        yield engine


_drop = _databases.dropper(
    TABLE, "ulid_key_conversions", "ulid_key_conversions_offline", conversions=[TABLE]
)


def _here(engine: Engine) -> str:
    """SQL of the session's schema (database)."""
    return "current_schema()" if engine.dialect.name == "postgresql" else "DATABASE()"


def _seed_text_ids(engine: Engine) -> None:
    """A table keyed by ULID text (the storage conversion's)."""
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (id CHAR(26) NOT NULL PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB"
        )
        rows = ", ".join(f"(CONCAT('01ARZ3NDEKTSV4RRFFQ69G', LPAD({i}, 4, '0')), {i})"
                         for i in range(ROWS))  # fmt: skip
        conn.exec_driver_sql(f"INSERT INTO {TABLE} (id, n) VALUES {rows}")


def _seed_int_ids(engine: Engine) -> None:
    """A table keyed by integers (the key conversion's)."""
    base = datetime(2024, 1, 1)
    postgresql = engine.dialect.name == "postgresql"
    key = "serial PRIMARY KEY" if postgresql else "INT AUTO_INCREMENT PRIMARY KEY"
    time_type = "timestamp(3)" if postgresql else "DATETIME(3)"
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE {TABLE} (id {key}, created_at {time_type} NOT NULL)")
        rows = ", ".join(f"('{base + timedelta(seconds=i)}')" for i in range(ROWS))
        conn.exec_driver_sql(f"INSERT INTO {TABLE} (created_at) VALUES {rows}")


def _storage(**options: Any) -> AlterULIDStorageOp:
    options.setdefault("batch_size", 7)
    return AlterULIDStorageOp(
        TABLE, "id", from_storage="text", to_storage="binary", online=True, **options
    )


def _key(**options: Any) -> ConvertPrimaryKeyToULIDOp:
    return ConvertPrimaryKeyToULIDOp(TABLE, from_time="created_at", **options)


def _snapshot(engine: Engine) -> tuple[Any, ...]:
    """The schema's tables, columns, triggers, and the table's rows."""
    with engine.connect() as conn:
        columns = conn.exec_driver_sql(
            "SELECT table_name, column_name, data_type, is_nullable FROM "
            f"information_schema.columns WHERE table_schema = {_here(engine)} "
            "ORDER BY table_name, ordinal_position"
        ).all()
        triggers = conn.exec_driver_sql(
            "SELECT trigger_name FROM information_schema.triggers "
            f"WHERE trigger_schema = {_here(engine)} ORDER BY 1"
        ).all()
        rows = conn.exec_driver_sql(f"SELECT * FROM {TABLE} ORDER BY 1").all()
    return tuple(columns), tuple(triggers), tuple(rows)


def _id_type(engine: Engine) -> str:
    """The id's type: int (MariaDB) or integer (PostgreSQL) before the key conversion."""
    with engine.connect() as conn:
        return str(
            conn.exec_driver_sql(
                "SELECT data_type FROM information_schema.columns WHERE table_schema = "
                f"{_here(engine)} AND table_name = '{TABLE}' AND column_name = 'id'"
            ).scalar_one()
        )


_INTEGER = ("int", "integer")


def _paused_key_conversion(engine: Engine, meanwhile: Callable[[], None]) -> None:
    """Run the key conversion, calling ``meanwhile`` before its first ALTER TABLE."""
    seen: list[bool] = []

    def pause(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not seen and statement.lstrip().upper().startswith("ALTER TABLE"):
            seen.append(True)
            meanwhile()

    sa.event.listen(engine, "before_cursor_execute", pause)
    try:
        run_online(engine, _key())
    finally:
        sa.event.remove(engine, "before_cursor_execute", pause)
    assert seen, "the key conversion never reached its first ALTER TABLE"


# -- online against online, and a script against an online run -----------------------------


def test_a_second_storage_run_online_or_a_script_is_refused_while_one_runs(
    server: Engine,
) -> None:
    _seed_text_ids(server)
    script = op_sql(server, _storage())
    tried: list[Any] = []

    def meanwhile(progress: Any) -> None:
        # The first run is paused after its first batch, its lock held.
        if tried:
            return
        before = _snapshot(server)
        with pytest.raises(ValueError, match="is under way") as refused:
            run_online(server, _storage())
        done = _clients.run(server, script, timeout=BOUND)
        tried.append((refused.value, done, before, _snapshot(server)))

    run_online(server, _storage(progress=meanwhile))
    [(refused, done, before, after)] = tried
    assert "alter_ulid_storage" in str(refused)
    assert done.returncode != 0
    assert "is under way" in done.stderr, done.stderr
    assert after == before  # neither the second run nor the script changed anything
    assert _id_type(server) == "binary"
    # The first run over: the lock was given back, and a run proceeds (it has nothing to do).
    run_online(server, _storage())
    assert _clients.run(server, script, timeout=BOUND).returncode == 0


def test_a_second_key_conversion_online_or_a_script_is_refused_while_one_runs(
    either: Engine,
) -> None:
    server = either
    _seed_int_ids(server)
    script = op_sql(server, _key())
    tried: list[Any] = []

    def meanwhile() -> None:
        before = _snapshot(server)
        with pytest.raises(ConversionRefused, match="is under way"):
            run_online(server, _key())
        done = _clients.run(server, script, timeout=BOUND)
        tried.append((done, before, _snapshot(server)))

    _paused_key_conversion(server, meanwhile)
    [(done, before, after)] = tried
    assert done.returncode != 0
    assert "is under way" in done.stderr, done.stderr
    assert after == before
    assert _id_type(server) not in _INTEGER
    # Over: the restore (the same lock, both ways) and the script proceed.
    run_online(server, _key().reverse())
    assert _id_type(server) in _INTEGER


# -- a script's lock against an online run ----------------------------------------------------


def _script_lock(engine: Engine, op: str, target: str, schema: str | None = None) -> str:
    """The SQL by which the script takes its lock (true: taken), found in the script."""
    take, _ = database_for(engine.dialect).state.script_lock(op, target, schema)
    return take


@pytest.mark.parametrize(
    "which",
    [
        pytest.param(("mysql", "storage"), id="mysql-storage"),
        pytest.param(("mysql", "key"), id="mysql-key"),
        pytest.param(("postgresql", "key"), id="postgresql-key"),
    ],
)
def test_an_online_run_is_refused_while_the_scripts_lock_is_held_and_proceeds_after(
    backends: dict[str, Backend], which: tuple[str, str]
) -> None:
    backend, what = which
    with private_engine(backends[backend], _drop) as server:
        if what == "storage":
            _seed_text_ids(server)
            op: MigrateOperation = _storage()
            take = _script_lock(server, "alter_ulid_storage", f"{TABLE}.id")
            refusal: type[ValueError] = ValueError
        else:
            _seed_int_ids(server)
            op = _key()
            take = _script_lock(server, "convert_primary_key_to_ulid", TABLE)
            refusal = ConversionRefused
        # The script takes its lock by this very SQL.
        assert take in op_sql(server, op)
        before = _snapshot(server)
        with server.connect() as script_session:
            assert script_session.exec_driver_sql(f"SELECT {take}").scalar_one() == 1
            with pytest.raises(refusal, match="is under way"):
                run_online(server, op)
            assert _snapshot(server) == before
        # The script's session ended: its lock went with it.
        run_online(server, op)
        assert _id_type(server) not in _INTEGER


def _kill(engine: Engine, session: int) -> None:
    with engine.connect() as conn:
        conn.exec_driver_sql(f"KILL CONNECTION {int(session)}")


def test_a_killed_holders_lock_goes_with_its_session(server: Engine) -> None:
    _seed_text_ids(server)
    take = _script_lock(server, "alter_ulid_storage", f"{TABLE}.id")
    holder = server.connect()
    try:
        session = holder.exec_driver_sql("SELECT CONNECTION_ID()").scalar_one()
        assert holder.exec_driver_sql(f"SELECT {take}").scalar_one() == 1
        with pytest.raises(ValueError, match="is under way"):
            run_online(server, _storage())
        _kill(server, session)
        run_online(server, _storage())
    finally:
        holder.invalidate()
        holder.close()
    assert _id_type(server) == "binary"


#: A migration process that pauses in its first progress callback until told.
_PAUSED_RUN = """
import sys
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy_ulid.alembic import AlterULIDStorageOp

def pause(progress):
    print("paused", flush=True)
    sys.stdin.readline()

engine = sa.create_engine(sys.argv[1], poolclass=sa.pool.NullPool)
with engine.connect() as conn:
    context = MigrationContext.configure(conn)
    with context.begin_transaction(), context.begin_transaction(_per_migration=True):
        Operations(context).invoke(AlterULIDStorageOp(
            sys.argv[2], "id", from_storage="text", to_storage="binary", online=True,
            batch_size=7, progress=pause,
        ))
"""


def test_a_killed_runs_lock_goes_with_its_process(server: Engine) -> None:
    """The migration's process killed (SIGKILL) mid-copy: its sessions end, and the
    lock with them; a new run proceeds and finishes the conversion."""
    _seed_text_ids(server)
    url = server.url.render_as_string(hide_password=False)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.Popen(
        [sys.executable, "-c", _PAUSED_RUN, url, TABLE],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env,
    )  # fmt: skip
    assert run.stdout is not None
    deadline = threading.Timer(BOUND, run.kill)  # a bound on the readline below
    deadline.start()
    try:
        assert run.stdout.readline().strip() == "paused"
        with pytest.raises(ValueError, match="is under way"):
            run_online(server, _storage())
        run.kill()
        run.communicate(timeout=BOUND)
    finally:
        deadline.cancel()
        if run.poll() is None:
            run.kill()
            run.communicate()
    take = _script_lock(server, "alter_ulid_storage", f"{TABLE}.id")
    free = take.replace("COALESCE(GET_LOCK(", "IS_FREE_LOCK(").replace(", 0), 0) = 1", ") = 1")
    # The server ends a killed client's sessions as it notices: wait (bounded) for that.
    until = time.monotonic() + BOUND
    with server.connect() as conn:
        while not conn.exec_driver_sql(f"SELECT {free}").scalar_one():
            assert time.monotonic() < until, "the killed run's lock is still held"
            time.sleep(0.05)
    run_online(server, _storage())
    assert _id_type(server) == "binary"


def test_a_failed_run_gives_its_lock_back(server: Engine) -> None:
    _seed_text_ids(server)

    class Stop(Exception):
        pass

    def stop(progress: Any) -> None:
        raise Stop

    with pytest.raises(Stop):
        run_online(server, _storage(progress=stop))
    assert _id_type(server) == "char"
    # Not refused: the failed run's lock is gone; the rerun finishes the copy.
    run_online(server, _storage())
    assert _id_type(server) == "binary"


def test_the_online_runs_lock_lives_for_the_run_and_is_the_scripts(server: Engine) -> None:
    """While the run is paused the script's very SQL cannot take the lock; after, it can."""
    _seed_text_ids(server)
    take = _script_lock(server, "alter_ulid_storage", f"{TABLE}.id")
    seen: list[int] = []

    def meanwhile(progress: Any) -> None:
        with server.connect() as other:
            seen.append(int(other.exec_driver_sql(f"SELECT {take}").scalar_one()))

    run_online(server, _storage(progress=meanwhile))
    assert seen
    assert set(seen) == {0}, seen
    with server.connect() as other:
        assert other.exec_driver_sql(f"SELECT {take}").scalar_one() == 1


# -- schema= ----------------------------------------------------------------------------------


@pytest.mark.parametrize("held_with_schema", [True, False])
def test_the_lock_is_named_after_the_tables_database_not_the_sessions(
    server: Engine, held_with_schema: bool
) -> None:
    """A lock taken for ``schema=<db>`` from a session in another database
    refuses a run without ``schema=`` in ``<db>``, and the other way round."""
    _seed_text_ids(server)
    database = server.url.database
    assert database
    state = database_for(server.dialect).state
    if held_with_schema:
        take, _ = state.script_lock("alter_ulid_storage", f"{database}.{TABLE}.id", database)
        op = _storage()
    else:
        take, _ = state.script_lock("alter_ulid_storage", f"{TABLE}.id")
        op = _storage(schema=database)
    before = _snapshot(server)
    with server.connect() as holder:
        if held_with_schema:
            holder.exec_driver_sql("USE information_schema")
        assert holder.exec_driver_sql(f"SELECT {take}").scalar_one() == 1
        with pytest.raises(ValueError, match="is under way"):
            run_online(server, op)
        assert _snapshot(server) == before
    run_online(server, op)
    assert _id_type(server) == "binary"
