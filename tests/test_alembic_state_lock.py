"""Runners that share the state table take its lock to create, start and finish.

Every online op records where it stands in one table,
``sqlalchemy_ulid_migrations``; the last op to finish drops it. Without a
lock, an op finishing could drop the table while another had just made it
and not yet written its row (that one then fails on a missing table), and
two sessions creating it at once could collide. The table is made, and the
op's row added, under a lock (PostgreSQL: a transaction-level advisory
lock; MariaDB: ``GET_LOCK``), and the row is forgotten and the table
dropped under it too.

While it runs, an online op also holds a lock of its own, for its op and
target, in a session of its own (a transaction-level advisory lock on
PostgreSQL, ``GET_LOCK`` on MariaDB): a second run of the same op on the
same column is refused before any change, rather than fail on a step the
first has just done.

Four runners at once, on PostgreSQL and MariaDB: on four tables, all
finish and nothing is left; on one table, each finishes or is refused, and
the table ends as one run leaves it.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

import _databases
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _offline_scripts import run_online
from conftest import Backend, private_engine
from sqlalchemy_ulid.alembic._plan.database import database_for
from sqlalchemy_ulid.alembic._plan.state import STATE_TABLE

RUNNERS = 4
ROWS = 30
TABLES = [f"lock_orders_{i}" for i in range(RUNNERS)]


_drop = _databases.dropper(*TABLES, STATE_TABLE)


def _seed(engine: Engine, table: str) -> None:
    time_type = "timestamp" if engine.dialect.name == "postgresql" else "datetime(3)"
    base = datetime(2024, 1, 1)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {table} (id int PRIMARY KEY, created_at {time_type} NOT NULL)"
        )
        rows = ", ".join(f"({i}, '{base + timedelta(milliseconds=i)}')" for i in range(1, ROWS + 1))
        conn.exec_driver_sql(f"INSERT INTO {table} VALUES {rows}")


def _run(engine: Engine, table: str) -> None:
    run_online(
        engine,
        lambda op: op.add_ulid_column(table, "public_id", "created_at", online=True, batch_size=7),
    )


def _at_once(engine: Engine, tables: list[str]) -> list[BaseException | None]:
    """Run the op on each table, each in a thread of its own, started together."""
    start = threading.Barrier(len(tables))
    errors: list[BaseException | None] = [None] * len(tables)

    def runner(i: int) -> None:
        start.wait()
        try:
            _run(engine, tables[i])
        except Exception as exc:  # the test reads them
            errors[i] = exc

    threads = [threading.Thread(target=runner, args=(i,)) for i in range(len(tables))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return errors


def _state_rows(engine: Engine) -> list[tuple[Any, ...]] | None:
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table(STATE_TABLE):
            return None
        return [tuple(r) for r in conn.exec_driver_sql(f"SELECT op, target FROM {STATE_TABLE}")]


def _filled(engine: Engine, table: str) -> tuple[int, int, bool]:
    """(rows, distinct ids, whether the column is NOT NULL)."""
    with engine.connect() as conn:
        rows, ids = conn.exec_driver_sql(
            f"SELECT count(*), count(DISTINCT public_id) FROM {table}"
        ).one()
        [column] = [c for c in sa.inspect(conn).get_columns(table) if c["name"] == "public_id"]
    return int(rows), int(ids), not column["nullable"]


def test_four_runners_on_four_tables_all_finish_and_leave_nothing(server: Engine) -> None:
    for table in TABLES:
        _seed(server, table)
    errors = _at_once(server, TABLES)
    assert errors == [None] * RUNNERS
    assert _state_rows(server) is None
    for table in TABLES:
        assert _filled(server, table) == (ROWS, ROWS, True)


def test_four_runners_of_one_op_on_one_table_never_interleave(server: Engine) -> None:
    table = TABLES[0]
    _seed(server, table)
    errors = _at_once(server, [table] * RUNNERS)
    # Each runner finished (the first, or one after it finished: everything
    # done) or was refused before any change while another ran; none failed
    # on a step another had done meanwhile.
    for error in errors:
        if error is not None:
            assert isinstance(error, ValueError), repr(error)
            assert "is under way" in str(error)
    assert errors.count(None) >= 1
    assert _state_rows(server) is None
    assert _filled(server, table) == (ROWS, ROWS, True)


def test_a_run_while_another_session_holds_the_ops_lock_is_refused_before_any_change(
    server: Engine,
) -> None:
    table = TABLES[0]
    _seed(server, table)
    state = database_for(server.dialect).state
    take, give_back = state.run_lock("add_ulid_column", f"{table}.public_id")
    with server.connect() as other:
        assert int(other.exec_driver_sql(take).scalar_one()) == 1
        with pytest.raises(ValueError, match="is under way"):
            _run(server, table)
        with server.connect() as conn:
            columns = [c["name"] for c in sa.inspect(conn).get_columns(table)]
        assert columns == ["id", "created_at"]
        assert _state_rows(server) is None
        if give_back:
            other.exec_driver_sql(give_back)
        other.rollback()
    _run(server, table)
    assert _filled(server, table) == (ROWS, ROWS, True)


def test_the_run_lock_session_keeps_no_snapshot_under_repeatable_read(
    backends: dict[str, Backend],
) -> None:
    """PostgreSQL, an engine at REPEATABLE READ: while the op fills, the session
    holding its lock (idle in its open transaction) has no ``backend_xmin``, so
    it holds back no VACUUM for the length of the run, and the concurrent
    index build, which waits for every older snapshot, does not wait for it
    (with a snapshot kept, the op failed on its lock timeout)."""
    table = TABLES[0]
    with private_engine(backends["postgresql"], _drop) as plain:
        _seed(plain, table)
        engine = plain.execution_options(isolation_level="REPEATABLE READ")
        seen: list[tuple[Any, ...]] = []

        def watch(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if statement.lstrip().upper().startswith("UPDATE") and not seen:
                # The batch's own session is left out: it reads its rows and
                # writes them in one short transaction, holding its snapshot
                # only until that batch commits.
                runner = conn.connection.dbapi_connection.info.backend_pid
                with plain.connect() as other:
                    seen.extend(
                        tuple(r)
                        for r in other.exec_driver_sql(
                            "SELECT state, backend_xmin::text FROM pg_stat_activity "
                            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                            f"AND pid <> {int(runner)} AND state = 'idle in transaction'"
                        )
                    )
                    seen.append(("watched", None))

        sa.event.listen(plain, "before_cursor_execute", watch)
        try:
            _run(engine, table)
        finally:
            sa.event.remove(plain, "before_cursor_execute", watch)
        assert ("watched", None) in seen
        holders = [row for row in seen if row[0] == "idle in transaction"]
        assert holders, "no session held the run's lock while the op filled"
        assert all(xmin is None for _, xmin in holders), seen
        assert _filled(plain, table) == (ROWS, ROWS, True)


def test_a_run_in_another_database_does_not_hold_back_a_run_here(
    backends: dict[str, Backend],
) -> None:
    """MariaDB's named locks are the server's: the lock a run holds for a table
    in one database does not refuse the same op on a table of the same name in
    another (as when several applications, or test workers, share a server)."""
    table = TABLES[0]
    with private_engine(backends["mysql"], _drop) as engine:
        _seed(engine, table)
        take, give_back = database_for(engine.dialect).state.run_lock(
            "add_ulid_column", f"{table}.public_id"
        )
        with engine.connect() as other:
            other.exec_driver_sql("USE information_schema")
            assert int(other.exec_driver_sql(take).scalar_one()) == 1
            _run(engine, table)  # not refused
            other.exec_driver_sql(give_back)
            other.rollback()
        assert _filled(engine, table) == (ROWS, ROWS, True)
