"""Online migrations through PgBouncer in transaction mode leave no setting behind.

A pooler hands each transaction the next free server session, so a session
setting an op made in one autocommit statement (``SET lock_timeout``) and
meant to put back in another can stay on a session the application gets
next. Here the migration runs through a pool of ``POOL`` server sessions
while application writers use the same pool. Afterwards every one of those
sessions (``POOL`` clients holding one each, in a transaction) shows the
server's own ``lock_timeout`` and ``statement_timeout``, and application
UPDATEs that wait 1.5 s for a row lock on each of them all succeed.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.operations import Operations
from sqlalchemy.engine import Engine

import _pooler
import _writers
import sqlalchemy_ulid
import sqlalchemy_ulid.alembic  # registers the ops
from _offline_scripts import run_online
from _pooler import Pooled

pgbouncer = _pooler.pgbouncer
pooled = _pooler.pooled

POOL = 4
BASE = datetime(2024, 1, 1, tzinfo=timezone.utc)


@pytest.fixture
def direct(backends: Any, pgbouncer: Any) -> Engine:
    engine = backends["postgresql"].engine
    assert engine is not None
    return engine


@pytest.fixture
def table(direct: Engine) -> Iterator[str]:
    name = f"pooler_mig_{secrets.token_hex(4)}"
    with direct.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {name} (id integer PRIMARY KEY, created_at timestamptz NOT NULL, "
            "ref char(26), old_id integer, note text)"
        )
        conn.execute(
            sa.text(
                f"INSERT INTO {name} (id, created_at, ref, note) "
                "SELECT g, :base + g * interval '1 ms', "
                "'01HF1Q8Z9K3J5X7V2N4M6P8R' || lpad((g % 100)::text, 2, '0'), 'seed' "
                "FROM generate_series(1, 3000) g"
            ),
            {"base": BASE},
        )
    yield name
    with direct.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {name} CASCADE")


class AppWriters(_writers.Loop):
    """Application threads inserting rows through the pool while the migration runs."""

    def __init__(self, engine: Engine, table: str, count: int = 3, insert: bool = True) -> None:
        # insert=False: UPDATEs of seeded rows, found by created_at (for an op
        # that changes the primary key's type).
        super().__init__(
            engine, count, self._write, connection="write", pause=0.002, settle=0.2, join=20
        )
        self.sql = (
            f"INSERT INTO {table} (id, created_at, note) VALUES (:id, clock_timestamp(), 'app')"
            if insert
            else f"UPDATE {table} SET note = 'app' "
            "WHERE created_at = :base + (:id % 3000 + 1) * interval '1 ms'"
        )

    def _write(self, conn: sa.Connection, n: int, i: int) -> None:
        conn.execute(sa.text(self.sql), {"id": 1_000_000 * (n + 1) + i, "base": BASE})


def _every_session(pooled_engine: Engine) -> list[tuple[int, str, str]]:
    """(pid, lock_timeout, statement_timeout) of each of the pool's server sessions."""
    held = [pooled_engine.connect() for _ in range(POOL)]
    try:
        return [
            tuple(  # type: ignore[misc]
                conn.execute(
                    sa.text(
                        "SELECT pg_backend_pid(), current_setting('lock_timeout'), "
                        "current_setting('statement_timeout')"
                    )
                ).one()
            )
            for conn in held
        ]
    finally:
        for conn in held:
            conn.close()


def _updates_that_wait(direct: Engine, pooled_engine: Engine, table: str) -> list[BaseException]:
    """UPDATEs on every server session of the pool, each waiting 1.5 s for a row lock."""
    errors: list[BaseException] = []
    held = [pooled_engine.connect() for _ in range(POOL)]
    for conn in held:
        conn.execute(sa.text("SELECT 1"))  # each holds a server session of its own
    blocker = direct.connect()
    blocker.execute(sa.text(f"UPDATE {table} SET note = 'blocker' WHERE id = 1"))

    def update(conn: sa.Connection) -> None:
        try:
            conn.execute(sa.text(f"UPDATE {table} SET note = 'app' WHERE id = 1"))
            conn.commit()
        except sa.exc.DBAPIError as exc:
            errors.append(exc)
            conn.rollback()

    threads = [threading.Thread(target=update, args=(conn,)) for conn in held]
    for thread in threads:
        thread.start()
    time.sleep(1.5)
    blocker.commit()
    blocker.close()
    for thread in threads:
        thread.join(30)
    for conn in held:
        conn.close()
    return errors


def _add_column(ops: Operations, table: str) -> None:
    ops.create_ulid_function()
    ops.add_ulid_column(
        table, "public_id", "created_at", online=True, server_default=True, batch_size=500
    )


def _alter_storage(ops: Operations, table: str) -> None:
    ops.alter_ulid_storage(
        table, "ref", from_storage="text", to_storage="auto", online=True, batch_size=500
    )


def _drop_column(ops: Operations, table: str) -> None:
    ops.drop_ulid_column(table, "old_id")


@pytest.mark.parametrize("op", [_add_column, _alter_storage, _drop_column])
def test_an_online_op_through_the_pool_leaves_every_server_session_as_it_was(
    direct: Engine, pooled: Pooled, table: str, op: Callable[[Operations, str], None]
) -> None:
    with direct.connect() as conn:
        defaults = tuple(
            conn.execute(
                sa.text(
                    "SELECT current_setting('lock_timeout'), current_setting('statement_timeout')"
                )
            ).one()
        )
    engine = pooled(POOL, pool_size=POOL + 4)
    before = _every_session(engine)
    assert len({row[0] for row in before}) == POOL
    with AppWriters(engine, table) as writers:
        run_online(engine, lambda ops: op(ops, table))
    assert not writers.errors, writers.errors[:3]
    assert writers.done > 10, "the application hardly wrote: the test proves nothing"
    after = _every_session(engine)
    assert len({row[0] for row in after}) == POOL
    assert {row[1:] for row in after} == {defaults}, after
    assert _updates_that_wait(direct, engine, table) == []


def test_the_key_conversion_refuses_a_pooled_connection_before_any_change(
    direct: Engine, pooled: Pooled, table: str
) -> None:
    # It keeps the new ids in a temporary table between transactions.
    from sqlalchemy_ulid.alembic import ConversionRefused

    engine = pooled(POOL, pool_size=POOL + 4)
    columns = [c["name"] for c in sa.inspect(direct).get_columns(table)]
    with (
        AppWriters(engine, table, insert=False) as writers,
        pytest.raises(ConversionRefused, match="run the migration on a direct connection"),
    ):
        run_online(
            engine, lambda ops: ops.convert_primary_key_to_ulid(table, from_time="created_at")
        )
    assert not writers.errors, writers.errors[:3]
    assert [c["name"] for c in sa.inspect(direct).get_columns(table)] == columns
    with direct.connect() as conn:
        assert (
            not conn.execute(
                sa.text("SELECT count(*) FROM pg_tables WHERE tablename = 'ulid_key_conversions'")
            ).scalar_one()
            or not conn.execute(
                sa.text("SELECT count(*) FROM ulid_key_conversions s WHERE s::text LIKE :t"),
                {"t": table},
            ).scalar_one()
        )
    assert {row[1:] for row in _every_session(engine)} == {("0", "0")}


def test_no_op_takes_a_session_advisory_lock() -> None:
    # Only transaction advisory locks (pg_advisory_xact_lock), released at
    # commit: a session lock would stay on a pooled server session. The one
    # session lock is the --sql scripts' (their steps are many transactions;
    # psql runs them on a direct connection), kept in StateSQL.script_claim.
    source = Path(sqlalchemy_ulid.__file__).parent
    found = [
        (path.relative_to(source).as_posix(), line.strip())
        for path in source.rglob("*.py")
        for line in path.read_text().splitlines()
        if re.search(r"pg_(try_)?advisory_(un)?lock(_shared)?\s*\(", line)
    ]
    assert found == [
        (
            "alembic/postgresql/catalog.py",
            "script_claim=\"pg_try_advisory_lock(hashtext({schema} || ':' || {name}))\",",
        ),
        (
            "alembic/postgresql/catalog.py",
            "script_release=\"pg_advisory_unlock(hashtext({schema} || ':' || {name}))\",",
        ),
    ]
    assert any("pg_advisory_xact_lock" in p.read_text() for p in source.rglob("*.py"))


def test_a_proxy_is_told_from_a_direct_connection(
    direct: Engine, pooled: Pooled, backends: Any
) -> None:
    import asyncio

    from sqlalchemy.ext.asyncio import create_async_engine

    from sqlalchemy_ulid.alembic._proxy import behind_a_proxy

    with direct.connect() as conn:
        assert not behind_a_proxy(conn)  # TCP, the server sees our own port

    async def through(url: sa.engine.URL, **kw: Any) -> bool:
        engine = create_async_engine(url, **kw)
        try:
            async with engine.connect() as conn:
                return bool(await conn.run_sync(behind_a_proxy))
        finally:
            await engine.dispose()

    async_url = direct.url
    for driver in ("asyncpg", "psycopg_async"):
        assert not asyncio.run(through(async_url.set(drivername=f"postgresql+{driver}")))
    url = sa.engine.make_url(backends["postgresql"].url)
    unix = sa.create_engine(url.set(host=None, port=None, query={"host": "/var/run/postgresql"}))
    try:
        with unix.connect() as conn:
            assert not behind_a_proxy(conn)  # the server's own socket file
    finally:
        unix.dispose()
    with pooled(1).connect() as conn:
        assert behind_a_proxy(conn)


def test_a_concurrent_index_through_the_pool_changes_no_session_setting(
    direct: Engine, pooled: Pooled, table: str, caplog: pytest.LogCaptureFixture
) -> None:
    from sqlalchemy_ulid.alembic._locks import lock_safe_ddl

    engine = pooled(POOL, pool_size=POOL + 4)
    with AppWriters(engine, table) as writers, engine.connect() as conn:
        autocommit = conn.execution_options(isolation_level="AUTOCOMMIT")
        lock_safe_ddl(
            autocommit,
            [
                f"CREATE INDEX CONCURRENTLY {table}_note ON {table} (note)",
                f"ALTER TABLE {table} ADD COLUMN extra integer",
            ],
            lock_timeout=0.5,
        )
    assert not writers.errors, writers.errors[:3]
    assert "runs under the server's own lock_timeout" in caplog.text
    with direct.connect() as conn:
        assert (
            conn.execute(
                sa.text("SELECT count(*) FROM pg_indexes WHERE indexname = :name"),
                {"name": f"{table}_note"},
            ).scalar_one()
            == 1
        )
    assert {row[1:] for row in _every_session(engine)} == {("0", "0")}
