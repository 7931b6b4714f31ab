"""follow(settle="auto") behind PgBouncer in transaction mode, and guard_ulid_age_ddl().

A pooler queues a transaction after the writer made its id (in Python) and
before the server sees anything of it, so the readers' horizon can pass the
id meanwhile. The reproduction is deterministic: a pool of one held by
another client until the feed has moved past a newer row. The database
guard (a trigger checking the id against the server's clock when the INSERT
runs) refuses such a row with SQLSTATE 40001; retried, it gets a new id and
is delivered.
"""

from __future__ import annotations

import random
import secrets
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

import _pooler
from _pooler import Pooled
from sqlalchemy_ulid import ULID, ULIDType, guard_ulid_age_ddl, install_ulid_function

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from bench_pooler_feed import (
    Follower,
    feed_table,
    insert_retrying,
    is_refusal,
    run_load,
)

# The PgBouncer fixtures (tests/_pooler.py).
pgbouncer = _pooler.pgbouncer
pooled = _pooler.pooled


@pytest.fixture
def direct(backends: Any, pgbouncer: Any) -> Engine:
    engine = backends["postgresql"].engine
    assert engine is not None
    return engine


@pytest.fixture
def table(direct: Engine) -> Iterator[sa.Table]:
    table = feed_table(f"pooler_feed_{secrets.token_hex(4)}")
    table.metadata.drop_all(direct)
    yield table
    table.metadata.drop_all(direct)


def _guarded(table: sa.Table, direct: Engine, guard: bool) -> None:
    if guard:
        for ddl in guard_ulid_age_ddl(table):
            sa.event.listen(table, "after_create", ddl)
    table.metadata.create_all(direct)


def _queued_writer(
    direct: Engine, pooled_engine: Engine, table: sa.Table
) -> tuple[set[ULID], list[ULID], int]:
    """A pool of one, held by a client until the feed has delivered a newer row.

    Writer A makes its id, then waits in PgBouncer's queue; writer B (direct)
    inserts a newer row, which the direct feed delivers; then the pool is
    released and A's INSERT runs. Returns (committed ids, delivered ids, A's
    refusals).
    """
    follower = Follower(direct, table, "direct engine")
    follower.start()
    holding = threading.Event()
    release = threading.Event()
    refusals: list[int] = []

    def hold() -> None:
        with pooled_engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))  # BEGIN: the pool's one server session is ours
            holding.set()
            release.wait(20)
            conn.commit()

    def writer_a() -> None:
        refusals.append(insert_retrying(pooled_engine, table, {"writer": 1}))

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(10)
    a = threading.Thread(target=writer_a)
    a.start()  # its id is made now; its transaction waits for the pool
    time.sleep(0.3)
    with direct.begin() as conn:
        b_id = conn.execute(table.insert().returning(table.c.id), {"writer": 2}).scalar_one()
    deadline = time.monotonic() + 20
    while b_id not in follower.ids and time.monotonic() < deadline:
        time.sleep(0.01)
    assert b_id in follower.ids, "the feed never delivered the direct writer's row"
    release.set()
    holder.join(20)
    a.join(20)
    with direct.connect() as conn:
        committed = set(conn.execute(sa.select(table.c.id)).scalars())
    deadline = time.monotonic() + 5
    while not committed <= set(follower.ids) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    follower.stop.set()
    follower.join(10)
    assert follower.error is None, follower.error
    return committed, follower.ids, refusals[0]


def test_without_the_guard_a_queued_python_id_is_skipped(
    direct: Engine, pooled: Pooled, table: sa.Table
) -> None:
    # What the docs warn of: ids made in Python, a pooler, no database guard.
    _guarded(table, direct, guard=False)
    committed, delivered, refusals = _queued_writer(direct, pooled(1), table)
    assert len(committed) == 2
    assert refusals == 0
    missed = committed - set(delivered)
    assert len(missed) == 1, (committed, delivered)
    assert min(committed) in missed  # the queued writer's older id


def test_the_guard_refuses_the_queued_id_and_the_retry_is_delivered(
    direct: Engine, pooled: Pooled, table: sa.Table
) -> None:
    _guarded(table, direct, guard=True)
    committed, delivered, refusals = _queued_writer(direct, pooled(1), table)
    assert refusals >= 1
    assert len(committed) == 2
    assert sorted(delivered) == sorted(committed)  # each once


def test_server_made_ids_are_delivered_without_a_guard(direct: Engine, pooled: Pooled) -> None:
    # The id is made when the INSERT runs, after the wait in the queue.
    table = feed_table(f"pooler_feed_{secrets.token_hex(4)}", server_made=True)
    try:
        with direct.begin() as conn:
            install_ulid_function(conn)
        table.metadata.create_all(direct)
        committed, delivered, refusals = _queued_writer(direct, pooled(1), table)
        assert refusals == 0
        assert len(committed) == 2
        assert sorted(delivered) == sorted(committed)
    finally:
        table.metadata.drop_all(direct)


def test_every_committed_row_is_delivered_once_through_a_queueing_pool(
    direct: Engine, pooled: Pooled
) -> None:
    # 6 writers through a pool of 2 (one in three holds its transaction
    # 0.1-0.6 s before inserting) and one direct writer; three feeds.
    result = run_load(direct, pooled(2), guard=True, writers=6, seconds=6.0)
    assert result.committed > 50
    assert result.refused > 0, "no INSERT queued past the margin: the test proved nothing"
    assert result.missed == {"direct engine": 0, "pooled engine": 0, "pooled sessionmaker": 0}
    assert set(result.repeated.values()) == {0}


@pytest.mark.parametrize("storage", ["native", "binary", "text"])
def test_the_guard_refuses_exactly_the_ids_older_than_max_age(direct: Engine, storage: str) -> None:
    # Oracle: the server's clock when the INSERT ran minus the id's
    # millisecond. Ids within 40 ms of the limit are left out (the two
    # clocks are read a few ms apart).
    table = sa.Table(
        f"pooler_guard_{secrets.token_hex(4)}",
        sa.MetaData(),
        sa.Column("id", ULIDType(storage), primary_key=True),  # type: ignore[arg-type]
        sa.Column(
            "ran",
            sa.BigInteger,
            server_default=sa.text("floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"),
        ),
    )
    max_ms = 300
    for ddl in guard_ulid_age_ddl(table, timedelta(milliseconds=max_ms)):
        sa.event.listen(table, "after_create", ddl)
    table.metadata.create_all(direct)
    rng = random.Random(30)
    try:
        checked = 0
        for _ in range(80):
            offset = rng.choice([rng.randint(-3000, 3000), rng.randint(-400, 400)])
            now_ms = int(time.time() * 1000)
            ulid = ULID.from_parts(now_ms - offset, rng.randbytes(10))
            error: BaseException | None = None
            try:
                with direct.begin() as conn:
                    ran = conn.execute(
                        table.insert().returning(table.c.ran), {"id": ulid}
                    ).scalar_one()
            except sa.exc.OperationalError as exc:
                error = exc
                ran = int(time.time() * 1000)
            refused = error is not None
            if error is not None:
                assert is_refusal(error)
                assert "guard allows 300 ms" in str(error)
            age = ran - ulid.timestamp_ms
            if abs(age - max_ms) < 40:
                continue
            assert refused == (age > max_ms), (offset, age)
            checked += 1
        assert checked > 50
        # An import may store old ids on purpose.
        old = ULID.from_parts(int(time.time() * 1000) - 60_000, bytes(10))
        with direct.begin() as conn:
            conn.exec_driver_sql("SET LOCAL sqlalchemy_ulid.allow_old_ids = on")
            conn.execute(table.insert(), {"id": old})
        # An upsert of that existing old id is an INSERT first: refused too.
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        upsert_old = pg_insert(table).values(id=old).on_conflict_do_nothing()
        with (
            pytest.raises(sa.exc.OperationalError, match="guard allows") as upsert,
            direct.begin() as conn,
        ):
            conn.execute(upsert_old)
        assert is_refusal(upsert.value)
        # drop=True removes it: the same old id's neighbour goes in.
        with direct.begin() as conn:
            for ddl in guard_ulid_age_ddl(table, drop=True):
                conn.execute(ddl)
            conn.execute(table.insert(), {"id": ULID.from_parts(old.timestamp_ms, b"\x01" * 10)})
    finally:
        table.metadata.drop_all(direct)
        with direct.begin() as conn:
            for ddl in guard_ulid_age_ddl(table, drop=True):
                conn.execute(ddl)


def test_the_guard_ddl_is_skipped_on_other_databases_and_checks_its_arguments() -> None:
    table = sa.Table("events", sa.MetaData(), sa.Column("id", ULIDType(), primary_key=True))
    for ddl in guard_ulid_age_ddl(table):
        sa.event.listen(table, "after_create", ddl)
    sqlite = sa.create_engine("sqlite://")
    table.metadata.create_all(sqlite)  # PostgreSQL only: nothing runs here
    with sqlite.begin() as conn:
        conn.execute(table.insert(), {"id": ULID.from_parts(0, bytes(10))})
    with pytest.raises(TypeError):
        guard_ulid_age_ddl(table, 0.2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="positive"):
        guard_ulid_age_ddl(table, timedelta(0))
    with pytest.raises(TypeError):
        guard_ulid_age_ddl("events")  # type: ignore[arg-type]
    plain = sa.Table("plain", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))
    with pytest.raises(ValueError, match="no ULIDType primary-key column"):
        guard_ulid_age_ddl(plain)
