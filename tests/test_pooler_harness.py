"""The PgBouncer harness (clusters/pgbouncer.py): idempotent start, pools of an exact size."""

from __future__ import annotations

import threading
import time

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
