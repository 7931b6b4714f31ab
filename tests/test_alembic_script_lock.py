"""The ``--sql`` scripts of the online ops take the lock an online run takes.

While it runs, an online op holds a lock named after the op and its column
(``tests/test_alembic_state_lock.py``). The scripts take the same lock,
for their whole run (psql: a session advisory lock on the same key;
mariadb: ``GET_LOCK`` of the same name), so that a script and an online
run, or two scripts, of one op on one column never run at once:

* an online run under way (paused in its ``progress=`` callback): the
  script stops at its first statement, before any change;
* a script under way (paused while it waits for the state table's lock,
  which the test holds): the online run is refused before any change, and
  the script finishes once the test lets it go on.

The state table's lock on MariaDB is named after the database the table is
in (named locks are the server's): an op in one database does not wait for
an op in another one.
"""

from __future__ import annotations

import io
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.engine import Engine, make_url

import _clients
import _databases
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _offline_scripts import op_sql, run_online
from conftest import Backend, private_engine
from sqlalchemy_ulid.alembic import AddULIDColumnOp
from sqlalchemy_ulid.alembic._plan.database import database_for
from sqlalchemy_ulid.alembic._plan.state import STATE_TABLE

TABLE = "script_lock_orders"
ROWS = 40
#: How long a test waits for a session to reach the point it waits for.
BOUND = 60.0


_drop = _databases.dropper(TABLE, STATE_TABLE)


def _seed(engine: Engine) -> None:
    time_type = "timestamp" if engine.dialect.name == "postgresql" else "datetime(3)"
    base = datetime(2024, 1, 1)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (id int PRIMARY KEY, created_at {time_type} NOT NULL)"
        )
        rows = ", ".join(f"({i}, '{base + timedelta(milliseconds=i)}')" for i in range(1, ROWS + 1))
        conn.exec_driver_sql(f"INSERT INTO {TABLE} VALUES {rows}")


def _op(**options: Any) -> AddULIDColumnOp:
    return AddULIDColumnOp(TABLE, "public_id", "created_at", online=True, batch_size=7, **options)


def _online(engine: Engine, **options: Any) -> None:
    run_online(engine, _op(**options))


def _table(engine: Engine) -> tuple[list[tuple[str, bool]], int]:
    """The table's columns (name, nullable), and its rows with an id."""
    with engine.connect() as conn:
        columns = [(c["name"], c["nullable"]) for c in sa.inspect(conn).get_columns(TABLE)]
        filled = 0
        if "public_id" in {name for name, _ in columns}:
            filled = int(
                conn.exec_driver_sql(
                    f"SELECT count(*) FROM {TABLE} WHERE public_id IS NOT NULL"
                ).scalar_one()
            )
    return columns, filled


def _state_rows(engine: Engine) -> list[tuple[Any, ...]] | None:
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table(STATE_TABLE):
            return None
        return [
            tuple(r) for r in conn.exec_driver_sql(f"SELECT op, target, step FROM {STATE_TABLE}")
        ]


def _done(engine: Engine) -> None:
    assert _table(engine) == ([("id", False), ("created_at", False), ("public_id", False)], ROWS)
    assert _state_rows(engine) is None


def _until(what: str, seen: Callable[[], bool]) -> None:
    """Wait (at most :data:`BOUND` seconds) until ``seen()``."""
    deadline = time.monotonic() + BOUND
    while not seen():
        assert time.monotonic() < deadline, f"not seen within {BOUND:g}s: {what}"
        time.sleep(0.05)


def test_a_script_is_refused_before_any_change_while_an_online_run_is_under_way(
    server: Engine,
) -> None:
    _seed(server)
    script = op_sql(server, _op())
    seen: list[Any] = []

    def meanwhile(progress: Any) -> None:
        # The online run is paused here, after its first batch, holding its lock.
        if seen:
            return
        before = (_table(server), _state_rows(server))
        done = _clients.run(server, script, timeout=BOUND)
        seen.append((done, before, (_table(server), _state_rows(server))))

    _online(server, progress=meanwhile)
    [(done, before, after)] = seen
    assert done.returncode != 0
    assert "is under way" in done.stderr, done.stderr
    # Nothing of the script ran: the table and the state row as the run left them.
    assert after == before
    _done(server)
    # The run over, the script finds everything done.
    assert _clients.run(server, script, timeout=BOUND).returncode == 0
    _done(server)


def _waiting_for_a_lock(engine: Engine, app: str) -> Callable[[], bool]:
    """Whether the script's session (psql's application name ``app``) waits for a lock."""
    if engine.dialect.name == "postgresql":
        query = (
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
            f"'{app}' AND wait_event_type = 'Lock'"
        )
    else:
        query = (
            "SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() "
            "AND DB = DATABASE() AND STATE = 'User lock'"
        )

    def seen() -> bool:
        with engine.connect() as conn:
            return bool(conn.exec_driver_sql(query).scalar_one())

    return seen


def test_an_online_run_is_refused_before_any_change_while_a_script_is_under_way(
    server: Engine, tmp_path: Path
) -> None:
    _seed(server)
    script = op_sql(server, _op())
    app = "script_lock_test"
    if server.dialect.name == "postgresql":
        args = _clients.psql_args(server)
        env = _clients.psql_env(server, app)
    else:
        args, env = _clients.mariadb_args(server), None
    # The script waits, its own lock taken, for the state table's lock, which
    # this session holds: a script paused before its first change.
    take, give_back, _ = database_for(server.dialect).state.table_lock(None)
    holder = server.connect()
    running: subprocess.Popen[str] | None = None
    try:
        for statement in take:
            holder.exec_driver_sql(statement)
        path = tmp_path / "script.sql"
        path.write_text(script)
        with path.open() as stdin:
            running = subprocess.Popen(
                args,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
        _until("the script waiting for the state table's lock", _waiting_for_a_lock(server, app))
        # Without the script's lock the run would wait for the state table's
        # lock too: bounded, it is let go on after BOUND seconds, and fails.
        thread, errors = _in_thread(lambda: _online(server))
        thread.join(timeout=BOUND)
        refused = not thread.is_alive()
        unchanged = _table(server) == ([("id", False), ("created_at", False)], 0)
        for statement in give_back:
            holder.exec_driver_sql(statement)
        holder.commit()
        thread.join(timeout=BOUND)
        assert refused, "the online run was not refused while the script ran"
        assert [type(e) for e in errors] == [ValueError], errors
        assert "is under way" in str(errors[0])
        assert unchanged
        _, err = running.communicate(timeout=BOUND)
        assert running.returncode == 0, err
    finally:
        if running is not None and running.poll() is None:
            running.kill()
            running.communicate()
        holder.close()
    _done(server)
    # The script over, an online run finds everything done.
    _online(server)
    _done(server)


# -- MariaDB: the state table's lock is the database's ------------------------------------


@pytest.fixture
def two_databases(backends: dict[str, Backend]) -> Iterator[tuple[Engine, Engine]]:
    """This test's MariaDB database, and ``<it>_b`` beside it (made here, dropped after)."""
    with private_engine(backends["mysql"], _drop) as engine:
        url = make_url(str(backends["mysql"].url))
        other = f"{url.database}_b"
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{other}`")
            conn.exec_driver_sql(f"CREATE DATABASE `{other}`")
        second = sa.create_engine(url.set(database=other), poolclass=sa.pool.NullPool)
        try:
            yield engine, second
        finally:
            second.dispose()
            with engine.begin() as conn:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{other}`")


def _in_thread(run: Callable[[], None]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def body() -> None:
        try:
            run()
        except BaseException as exc:  # the test reads it
            errors.append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, errors


def _user_lock_waits(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.exec_driver_sql(
                "SELECT count(*) FROM information_schema.PROCESSLIST "
                "WHERE ID <> CONNECTION_ID() AND DB = DATABASE() AND STATE = 'User lock'"
            ).scalar_one()
        )


def test_an_op_does_not_wait_for_the_state_table_of_another_database(
    two_databases: tuple[Engine, Engine],
) -> None:
    """The other database's state table locked: the op here runs to its end
    without ever waiting for that lock (it waited up to 600 s when the lock
    was the server's)."""
    here, there = two_databases
    _seed(here)
    take, give_back, _ = database_for(there.dialect).state.table_lock(None)
    with there.connect() as holder:
        for statement in take:
            holder.exec_driver_sql(statement)
        thread, errors = _in_thread(lambda: _online(here))
        waited = False
        deadline = time.monotonic() + BOUND * 2
        while thread.is_alive() and time.monotonic() < deadline:
            if _user_lock_waits(here):
                waited = True
                break
            time.sleep(0.02)
        for statement in give_back:
            holder.exec_driver_sql(statement)
        thread.join(timeout=BOUND * 2)
    assert not thread.is_alive()
    assert not waited, "the op waited for the other database's state table lock"
    assert errors == []
    _done(here)


def test_an_op_on_a_table_of_another_database_takes_that_databases_state_lock(
    two_databases: tuple[Engine, Engine],
) -> None:
    """``schema=`` another database: its state table is there, and so is its lock."""
    here, there = two_databases
    _seed(there)
    take, give_back, _ = database_for(there.dialect).state.table_lock(None)
    other = there.url.database
    try:
        with there.connect() as holder:
            for statement in take:
                holder.exec_driver_sql(statement)
            thread, errors = _in_thread(lambda: _online(here, schema=other))
            _until("the op waiting for its state table's lock", lambda: _user_lock_waits(here) > 0)
            for statement in give_back:
                holder.exec_driver_sql(statement)
            thread.join(timeout=BOUND * 2)
        assert not thread.is_alive()
        assert errors == []
        _done(there)
    finally:
        _drop(there)


# -- schema=: the lock is the table's schema's, not the session's --------------------------


def test_the_lock_is_named_after_the_ops_schema_not_the_sessions(server: Engine) -> None:
    """A script's lock for ``schema=<the table's>``, taken from a session whose
    own schema (database) is another one, refuses an online run without
    ``schema=`` on that table, before any change; the script's session ended,
    the run proceeds."""
    _seed(server)
    state = database_for(server.dialect).state
    with server.connect() as conn:
        schema = sa.inspect(conn).default_schema_name
    assert schema
    take, _ = state.script_lock("add_ulid_column", f"{schema}.{TABLE}.public_id", schema)
    # The script (written with schema=) takes its lock by this very SQL.
    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect_name=server.dialect.name, opts={"as_sql": True, "output_buffer": buffer}
    )
    Operations(context).invoke(_op(schema=schema))
    assert take in buffer.getvalue()
    elsewhere = (
        "SET search_path TO pg_catalog"
        if server.dialect.name == "postgresql"
        else "USE information_schema"
    )
    with server.connect() as holder:
        holder.exec_driver_sql(elsewhere)
        assert int(holder.exec_driver_sql(f"SELECT {take}").scalar_one()) == 1
        with pytest.raises(ValueError, match="is under way"):
            _online(server)
        assert _table(server) == ([("id", False), ("created_at", False)], 0)
        assert _state_rows(server) is None
    _online(server)
    _done(server)
