"""The PgBouncer harness (clusters/pgbouncer.py): idempotent start, pools of an exact size."""

from __future__ import annotations

import importlib
import inspect
import threading
import time

import pytest
import sqlalchemy as sa

import _pooler
from _pooler import PgBouncer, Pooled

pgbouncer = _pooler.pgbouncer
pooled = _pooler.pooled


def _waiting(bouncer: PgBouncer, alias: str) -> int:
    # SHOW POOLS: database|user|cl_active|cl_waiting|...
    for line in bouncer.admin("SHOW POOLS").splitlines():
        fields = line.split("|")
        if fields[0] == alias:
            return int(fields[3])
    return 0


def test_start_is_idempotent_and_an_alias_pool_never_exceeds_its_size(
    pgbouncer: PgBouncer, pooled: Pooled
) -> None:
    token = pgbouncer.state()
    pgbouncer.start()  # already running: only checked
    assert pgbouncer.state() == token
    engine = pooled(2)
    alias = engine.url.database
    assert alias is not None
    held = [engine.connect() for _ in range(2)]
    pids = {conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one() for conn in held}
    assert len(pids) == 2  # each holds a server session of its own while in a transaction
    done = threading.Event()

    def third() -> None:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        done.set()

    thread = threading.Thread(target=third)
    thread.start()
    deadline = time.monotonic() + 10
    while _waiting(pgbouncer, alias) != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _waiting(pgbouncer, alias) == 1  # the third client waits for the pool
    assert not done.is_set()
    held[0].commit()  # the transaction ends: its server session goes to the third client
    thread.join(10)
    assert done.is_set()
    for conn in held:
        conn.close()


# Whether this SQLAlchemy's asyncpg dialect takes prepared_statement_name_func
# (2.0.8, the floor, does not).
_ASYNCPG_NAMES = "prepared_statement_name_func" in inspect.getsource(
    importlib.import_module("sqlalchemy.dialects.postgresql.asyncpg")
)


def test_the_documented_driver_settings_work_across_server_sessions(
    pgbouncer: PgBouncer, pooled: Pooled
) -> None:
    # docs/production.md: psycopg with prepare_threshold=None, asyncpg with
    # no statement caches and unique statement names. Several clients run
    # the same statements many times over a pool of 2 server sessions.
    import asyncio
    from uuid import uuid4

    from sqlalchemy.ext.asyncio import create_async_engine

    sync_engine = pooled(2)  # connect_args={"prepare_threshold": None}
    pids: set[int] = set()
    errors: list[BaseException] = []

    def client() -> None:
        try:
            for _ in range(30):
                with sync_engine.begin() as conn:
                    pids.add(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())
                    conn.execute(sa.text("SELECT CAST(:x AS int) + 1"), {"x": 1})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert len(pids) == 2

    url = sync_engine.url.set(
        drivername="postgresql+asyncpg", query={"prepared_statement_cache_size": "0"}
    )
    async_engine = create_async_engine(
        url,
        connect_args={
            "statement_cache_size": 0,
            "prepared_statement_name_func": lambda: f"__asyncpg_{uuid4()}__",
        },
    )

    async def async_client() -> set[int]:
        seen = set()
        for _ in range(30):
            async with async_engine.begin() as conn:
                seen.add((await conn.execute(sa.text("SELECT pg_backend_pid()"))).scalar_one())
                await conn.execute(sa.text("SELECT CAST(:x AS int) + 1"), {"x": 1})
        return seen

    async def main() -> set[int]:
        try:
            found = await asyncio.gather(*(async_client() for _ in range(4)))
            return set().union(*found)
        finally:
            await async_engine.dispose()

    if not _ASYNCPG_NAMES:
        # SQLAlchemy releases before the asyncpg dialect took
        # prepared_statement_name_func hand it to asyncpg, which refuses it:
        # docs/production.md says which releases the setting needs.
        with pytest.raises(TypeError, match="prepared_statement_name_func"):
            asyncio.run(main())
        return
    assert len(asyncio.run(main())) == 2
