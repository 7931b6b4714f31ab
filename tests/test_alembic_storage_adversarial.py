"""``alter_ulid_storage(..., online=True)`` on tables shaped as users make them.

Each test here is a way a user's table or workload broke the online
conversion once: objects that use the column and that the swap would drop
(PostgreSQL), generated columns, writers that keep appending rows and
AUTO_INCREMENT counters (MariaDB).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.engine import Engine

import _databases
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _offline_scripts import run_online
from conftest import Backend, private_engine, recording
from sqlalchemy_ulid import ULID, new_ulid
from sqlalchemy_ulid.alembic import BackfillProgress

TABLE = "adv_items"
STATE = "sqlalchemy_ulid_migrations"
CHANGES = ("ALTER", "CREATE", "INSERT", "UPDATE", "DELETE", "DROP", "RENAME", "REPLACE")
#: Batches after which a copy of a few rows has clearly stopped ending.
ENDLESS = 100


def _engine(backends: dict[str, Backend], name: str) -> Iterator[Engine]:
    with private_engine(backends[name], _drop) as engine:
        yield engine


@pytest.fixture
def pg(backends: dict[str, Backend]) -> Iterator[Engine]:
    yield from _engine(backends, "postgresql")


@pytest.fixture
def maria(backends: dict[str, Backend]) -> Iterator[Engine]:
    yield from _engine(backends, "mysql")


_drop = _databases.dropper(TABLE, conversions=[TABLE])


def _run(engine: Engine, **options: Any) -> None:
    """Run the op as ``alembic upgrade`` does, in the transactions Alembic begins."""
    to = "native" if engine.dialect.name == "postgresql" else "binary"
    run_online(
        engine,
        lambda op: op.alter_ulid_storage(
            TABLE, "ref", from_storage="text", to_storage=to, online=True, **options
        ),
    )


def _sql(engine: Engine, statement: str) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(statement)


def _rows(engine: Engine, query: str) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.exec_driver_sql(query).all())


# -- PostgreSQL: what DROP COLUMN would take with it -------------------------------------

#: (what the table has that uses ``ref``, the DDL that makes it, how the error names it)
USED_BY = [
    # DROP COLUMN drops a CHECK constraint naming the column, silently
    ("check", f"ALTER TABLE {TABLE} ADD CONSTRAINT ck_adv_diff CHECK (ref <> other)", "ck_adv"),
    # DROP COLUMN refuses, after all the copy: a generated column depends on it
    (
        "generated",
        f"ALTER TABLE {TABLE} ADD g TEXT GENERATED ALWAYS AS (lower(ref)) STORED",
        "column g",
    ),
    # DROP COLUMN drops extended statistics on the column, silently
    ("statistics", f"CREATE STATISTICS st_adv ON ref, n FROM {TABLE}", "st_adv"),
    # DROP COLUMN drops a row-level security policy using the column
    ("policy", f"CREATE POLICY p_adv ON {TABLE} USING (ref IS NOT NULL)", "p_adv"),
    # column privileges live on the column, and go with it
    ("grant", f"GRANT SELECT (ref) ON {TABLE} TO PUBLIC", "GRANTs on the column"),
]


@pytest.mark.parametrize(("case", "ddl", "named"), USED_BY, ids=[u[0] for u in USED_BY])
def test_postgresql_refuses_what_the_swap_would_drop_before_any_ddl(
    pg: Engine, case: str, ddl: str, named: str
) -> None:
    _sql(pg, f"CREATE TABLE {TABLE} (id INT PRIMARY KEY, ref CHAR(26) NOT NULL, other TEXT, n INT)")
    with pg.begin() as conn:
        conn.execute(
            sa.text(f"INSERT INTO {TABLE} (id, ref, other, n) VALUES (:i, :r, :o, :i)"),
            [{"i": i, "r": str(new_ulid()), "o": str(new_ulid())} for i in range(20)],
        )
        conn.exec_driver_sql(ddl)
    with recording(pg) as seen, pytest.raises(ValueError, match=named):
        _run(pg)
    assert not [s for s in seen if s.split()[0].upper() in CHANGES]
    columns = _rows(
        pg,
        f"SELECT attname FROM pg_attribute WHERE attrelid = '{TABLE}'::regclass "
        "AND attnum > 0 AND NOT attisdropped",
    )
    assert ("ref__ulid",) not in columns
    assert not _rows(pg, f"SELECT 1 FROM pg_trigger WHERE tgrelid = '{TABLE}'::regclass")
    # Once it is gone, the conversion runs.
    undo = {
        "check": f"ALTER TABLE {TABLE} DROP CONSTRAINT ck_adv_diff",
        "generated": f"ALTER TABLE {TABLE} DROP COLUMN g",
        "statistics": "DROP STATISTICS st_adv",
        "policy": f"DROP POLICY p_adv ON {TABLE}",
        "grant": f"REVOKE SELECT (ref) ON {TABLE} FROM PUBLIC",
    }
    _sql(pg, undo[case])
    before = dict(_rows(pg, f"SELECT id, ref FROM {TABLE}"))
    _run(pg)
    after = dict(_rows(pg, f"SELECT id, ref FROM {TABLE}"))
    assert {k: ULID(v) for k, v in before.items()} == {
        k: ULID.from_uuid(v) for k, v in after.items()
    }


# -- MariaDB: the shadow table ------------------------------------------------------------


def _maria_table(engine: Engine, extra: str = "", rows: int = 10) -> None:
    _sql(
        engine,
        f"CREATE TABLE {TABLE} (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
        f"ref CHAR(26) NOT NULL, n INT NULL{extra}) ENGINE=InnoDB",
    )
    with engine.begin() as conn:
        conn.execute(
            sa.text(f"INSERT INTO {TABLE} (ref, n) VALUES (:r, :n)"),
            [{"r": str(new_ulid()), "n": i} for i in range(rows)],
        )


def _writes(engine: Engine, failures: list[str], *, calls: list[int]) -> Any:
    """A progress callback that writes (insert, update) from another session each batch."""

    def write(report: BackfillProgress) -> None:
        calls.append(1)
        if len(calls) > ENDLESS:
            raise RuntimeError(f"the copy of a few rows ran {ENDLESS} batches")
        try:
            with engine.begin() as conn:
                conn.execute(
                    sa.text(f"INSERT INTO {TABLE} (ref, n) VALUES (:r, 7)"), {"r": str(new_ulid())}
                )
                conn.exec_driver_sql(f"UPDATE {TABLE} SET n = n + 1 WHERE id = 1")
        except sa.exc.DBAPIError as exc:
            failures.append(str(exc.orig))

    return write


def _maria_values(engine: Engine, column: str = "ref") -> dict[int, Any]:
    return dict(_rows(engine, f"SELECT id, {column} FROM {TABLE}"))


def test_mariadb_copy_ends_while_writers_keep_appending_rows(maria: Engine) -> None:
    # Each batch a writer adds a row past the end: the rows added after the
    # triggers exist are in the shadow already, and the copy must stop.
    _maria_table(maria)
    failures: list[str] = []
    calls: list[int] = []
    _run(maria, batch_size=3, progress=_writes(maria, failures, calls=calls))
    assert failures == []
    assert len(calls) <= 4  # 10 rows, 3 a batch
    assert len(_maria_values(maria)) == 10 + len(calls)


def test_mariadb_writers_keep_writing_a_table_with_generated_columns(maria: Engine) -> None:
    # A generated column cannot be given a value: a trigger that copies
    # every column would make each of the application's writes fail.
    _maria_table(maria, ", g INT AS (n * 2) PERSISTENT, v VARCHAR(30) AS (CONCAT('n', n)) VIRTUAL")
    failures: list[str] = []
    calls: list[int] = []
    _run(maria, batch_size=3, progress=_writes(maria, failures, calls=calls))
    assert failures == []
    rows = _rows(maria, f"SELECT id, n, g, v, LENGTH(ref) FROM {TABLE} ORDER BY id")
    assert len(rows) == 10 + len(calls)
    assert all(g == n * 2 and v == f"n{n}" and length == 16 for _, n, g, v, length in rows)
    assert rows[0][1] == len(calls)  # every update of row 1 is there
    create = _rows(maria, f"SHOW CREATE TABLE {TABLE}")[0][1]
    assert "GENERATED ALWAYS AS (`n` * 2) STORED" in create
    assert "GENERATED ALWAYS AS (concat('n',`n`)) VIRTUAL" in create


def test_mariadb_auto_increment_counter_is_carried_over_the_swap(maria: Engine) -> None:
    # Rows deleted from the end: the counter is past every key left, and
    # keys once given out must not be given again.
    _maria_table(maria, rows=20)
    _sql(maria, f"DELETE FROM {TABLE} WHERE id > 5")
    _run(maria)
    with maria.begin() as conn:
        conn.execute(
            sa.text(f"INSERT INTO {TABLE} (ref) VALUES (:r)"), {"r": ULID(str(new_ulid())).bytes}
        )
    assert max(_maria_values(maria)) == 21
    counter = _rows(
        maria,
        "SELECT AUTO_INCREMENT FROM information_schema.TABLES "
        f"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{TABLE}'",
    )
    assert counter == [(22,)]


def _type(engine: Engine, table: str) -> str:
    return str(
        _rows(
            engine,
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            f"WHERE attrelid = '{table}'::regclass AND attname = 'ref'",
        )[0][0]
    )


def _pg_table(engine: Engine, name: str, rows: int) -> None:
    _sql(engine, f"CREATE TABLE {name} (id INT PRIMARY KEY, ref CHAR(26) NOT NULL)")
    with engine.begin() as conn:
        conn.execute(
            sa.text(f"INSERT INTO {name} (id, ref) VALUES (:i, :r)"),
            [{"i": i, "r": str(new_ulid())} for i in range(rows)],
        )


def test_postgresql_a_conversion_starting_while_another_creates_the_state_table(pg: Engine) -> None:
    # Another conversion's first transaction, caught between creating the
    # state table and committing: this one waits for it, then joins the table
    # (it used to fail: duplicate key in pg_type).
    from sqlalchemy_ulid.alembic._storage._target import STATE_LOCK as _STATE_LOCK

    _sql(pg, f"DROP TABLE IF EXISTS {STATE}")
    _pg_table(pg, TABLE, 20)
    created = threading.Event()

    def other() -> None:
        with pg.begin() as conn:
            conn.exec_driver_sql(_STATE_LOCK)
            conn.exec_driver_sql(
                f"CREATE TABLE {STATE} (op text NOT NULL, target text NOT NULL, "
                "plan text NOT NULL, step text NOT NULL, done boolean NOT NULL DEFAULT false, "
                "PRIMARY KEY (op, target))"
            )
            created.set()
            time.sleep(0.5)

    thread = threading.Thread(target=other)
    thread.start()
    assert created.wait(10)
    _run(pg, lock_timeout=5.0)
    thread.join(10)
    assert not thread.is_alive()
    assert _type(pg, TABLE) == "uuid"
    # The last conversion took the state table with it.
    assert _rows(pg, f"SELECT to_regclass('{STATE}')") == [(None,)]


def test_postgresql_three_conversions_at_once_all_finish(pg: Engine) -> None:
    names = [f"{TABLE}_{n}" for n in "abc"]
    for name in names:
        _sql(pg, f"DROP TABLE IF EXISTS {name}")
        _pg_table(pg, name, 30)
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(names))

    def convert(name: str, batch: int) -> None:
        barrier.wait(10)
        try:
            with pg.connect() as conn:
                context = MigrationContext.configure(conn, opts={"transactional_ddl": True})
                with context.begin_transaction():
                    Operations(context).alter_ulid_storage(
                        name,
                        "ref",
                        from_storage="text",
                        to_storage="native",
                        online=True,
                        batch_size=batch,
                        lock_timeout=5.0,
                    )
        except BaseException as exc:
            errors.append(exc)

    try:
        threads = [
            threading.Thread(target=convert, args=(n, b))
            for n, b in zip(names, (50, 5, 7), strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        for name in names:
            assert _type(pg, name) == "uuid"
        assert _rows(pg, f"SELECT to_regclass('{STATE}')") == [(None,)]
    finally:
        for name in names:
            _sql(pg, f"DROP TABLE IF EXISTS {name}")


class _Stop(Exception):
    pass


def test_postgresql_the_downgrade_of_an_interrupted_run_removes_what_it_left(pg: Engine) -> None:
    # The upgrade stopped in its copy (a failure, a kill); the way back is
    # the same op with the storages swapped. It used to refuse ("neither
    # uuid nor text"), leaving the trigger converting every write.
    _pg_table(pg, TABLE, 50)
    before = _rows(pg, f"SELECT id, ref FROM {TABLE} ORDER BY id")

    def stop(report: BackfillProgress) -> None:
        raise _Stop

    with pytest.raises(_Stop):
        _run(pg, batch_size=10, progress=stop)
    assert _type(pg, TABLE) == "character(26)"
    with pg.connect() as conn:
        context = MigrationContext.configure(conn, opts={"transactional_ddl": True})
        with context.begin_transaction():
            Operations(context).alter_ulid_storage(
                TABLE, "ref", from_storage="native", to_storage="text", online=True
            )
    columns = _rows(
        pg,
        f"SELECT attname FROM pg_attribute WHERE attrelid = '{TABLE}'::regclass "
        "AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
    )
    assert columns == [("id",), ("ref",)]
    assert not _rows(pg, f"SELECT 1 FROM pg_trigger WHERE tgrelid = '{TABLE}'::regclass")
    assert not _rows(pg, "SELECT 1 FROM pg_proc WHERE proname = 'adv_items_ref__ulid_sync'")
    assert _rows(pg, f"SELECT to_regclass('{STATE}')") == [(None,)]
    assert _rows(pg, f"SELECT id, ref FROM {TABLE} ORDER BY id") == before
    # A value that is not a ULID is written as before the conversion began.
    _sql(pg, f"UPDATE {TABLE} SET ref = 'not a ulid' WHERE id = 1")
    _sql(pg, f"UPDATE {TABLE} SET ref = '{before[1][1]}' WHERE id = 1")
    _run(pg)
    assert _type(pg, TABLE) == "uuid"
