"""A follow() consumer under production faults: kills, a deadlocking updater, a long transaction.

For ``--seconds`` (30 by default) per server:

* three writer threads append rows (1-3 per transaction, transactions of
  0-100 ms), and a fourth opens one 10 s transaction from the 5th second;
* an updater runs ``UPDATE ... SET seq = seq + 1 WHERE id >= :recent``
  (``ORDER BY id DESC`` on MariaDB) over the last ten rows, holding it 0.2 s,
  again and again: on MariaDB it deadlocks with the feed's locking read;
* a killer ends the consumers' sessions ``--kills`` times (6 by default),
  evenly spread (``pg_terminate_backend`` / ``KILL``).

Two consumers tail the table with ``follow(engine, ..., settle="auto",
interval=0.05)`` on engines of their own: one with the default
``retry=Retry()``, and one with ``retry=None``, which is what a consumer
without retries does (it ends at the first failure). When the writers stop,
the consumers go on until they have everything, or for 20 s more. A row a
consumer never got is *missed*, one it got twice a *duplicate*; *out of
order* counts deliveries older than the one before.

Run: ``.venv/bin/python benchmarks/bench_follow_soak.py [--seconds 30] [--kills 6]
[--servers PostgreSQL,MariaDB]`` (URLs from SQLALCHEMY_ULID_POSTGRESQL_URL /
SQLALCHEMY_ULID_MYSQL_URL, else the local test servers).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import threading
import time
from collections import Counter
from typing import Any

import sqlalchemy as sa
from _servers import URLS  # benchmarks/ is on sys.path when a script runs

from _writers import Appenders  # tests/_writers.py: _servers put tests/ on sys.path
from sqlalchemy_ulid import ULID, Retry, ULIDType, follow, new_ulid

WRITERS = 3
LONG_TX_AT, LONG_TX = 5.0, 10.0
_ID = {"postgresql": "SELECT pg_backend_pid()", "mysql": "SELECT CONNECTION_ID()"}
_KILL = {"postgresql": "SELECT pg_terminate_backend({})", "mysql": "KILL {}"}

soak = sa.Table(
    "bench_follow_soak",
    sa.MetaData(),
    sa.Column("id", ULIDType(), primary_key=True),
    sa.Column("seq", sa.Integer, nullable=False, server_default="0"),
)


class Retries(logging.Handler):
    """Counts follow()'s retry warnings by kind."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.kinds: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        for kind in ("disconnect", "deadlock"):
            if f"({kind})" in message:
                self.kinds[kind] += 1
        if "innodb_lock_wait_timeout" in message:
            self.kinds["lock wait timeout"] += 1


class Consumer:
    """One follow() loop on an engine of its own, whose sessions can be killed."""

    def __init__(self, url: str, name: str, retry: Retry | None) -> None:
        self.engine = sa.create_engine(url)
        self.name = name
        self.retry = retry
        self.ids: list[int] = []
        self.got: list[ULID] = []
        self.error: BaseException | None = None
        self.died_at: float | None = None
        sa.event.listen(self.engine, "connect", self.connected)

    def connected(self, dbapi_connection: Any, record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(_ID[self.engine.dialect.name])
        self.ids.append(int(cursor.fetchone()[0]))
        cursor.close()
        dbapi_connection.rollback()

    def run(self, stop: threading.Event, start: float) -> None:
        try:
            for page in follow(
                self.engine,
                sa.select(soak.c.id),
                soak.c.id,
                interval=0.05,
                limit=500,
                retry=self.retry,
                stop=stop,
            ):
                self.got.extend(page.items)
        except Exception as error:
            self.error = error
            self.died_at = time.monotonic() - start
        finally:
            self.engine.dispose()


def run(server: str, url: str, seconds: float, kills: int) -> dict[str, Any]:
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    soak.drop(admin, checkfirst=True)
    soak.create(admin)
    dialect = admin.dialect.name
    writing = threading.Event()
    stop = threading.Event()
    counts: Counter[str] = Counter()
    start = time.monotonic()
    engine = sa.create_engine(url)
    writers = Appenders(engine, WRITERS, soak, max_tx=0.1)
    written, lock = writers.written, writers.lock

    def long_transaction() -> None:
        time.sleep(LONG_TX_AT)
        with engine.begin() as conn:
            row = new_ulid()
            conn.execute(soak.insert(), {"id": row})
            time.sleep(LONG_TX)
        with lock:
            written.append(row)

    order = " ORDER BY id DESC" if dialect == "mysql" else ""
    bump = sa.text(f"UPDATE bench_follow_soak SET seq = seq + 1 WHERE id >= :recent{order}")
    bump = bump.bindparams(sa.bindparam("recent", type_=ULIDType()))

    def update() -> None:
        while writing.is_set():
            with lock:
                recent = written[-10] if len(written) >= 10 else None
            if recent is None:
                time.sleep(0.01)
                continue
            try:
                with engine.begin() as conn:
                    conn.execute(bump, {"recent": recent})
                    time.sleep(0.2)
                counts["updates"] += 1
            except sa.exc.OperationalError as error:
                counts["updater deadlocks" if "1213" in str(error) else "updater errors"] += 1

    consumers = [
        Consumer(url, "retry=Retry()", Retry()),
        Consumer(url, "retry=None", None),
    ]

    def kill() -> None:
        for n in range(kills):
            time.sleep(seconds / (kills + 1))
            for consumer in consumers:
                if consumer.error is None and consumer.ids:
                    with admin.connect() as conn, contextlib.suppress(sa.exc.OperationalError):
                        conn.exec_driver_sql(_KILL[dialect].format(consumer.ids[-1]))
            counts["kills"] = n + 1

    writing.set()
    longer = threading.Thread(target=long_transaction)
    helpers = [threading.Thread(target=update), threading.Thread(target=kill)]
    readers = [threading.Thread(target=c.run, args=(stop, start)) for c in consumers]
    with writers:
        for thread in [longer, *helpers, *readers]:
            thread.start()
        time.sleep(max(0.0, seconds - (time.monotonic() - start)))
    writers.check()
    longer.join()
    writing.clear()
    for thread in helpers:
        thread.join()
    deadline = time.monotonic() + 20
    while len(consumers[0].got) < len(written) and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    for thread in readers:
        thread.join(30)
    engine.dispose()
    soak.drop(admin, checkfirst=True)
    admin.dispose()
    result: dict[str, Any] = {"written": len(written), **counts, "consumers": []}
    for consumer in consumers:
        got = consumer.got
        seen = Counter(got)
        result["consumers"].append(
            {
                "name": consumer.name,
                "delivered": len(got),
                "missed": len(set(written) - set(got)),
                "duplicates": sum(n - 1 for n in seen.values()),
                "out of order": sum(1 for a, b in itertools.pairwise(got) if b < a),
                "connections": len(consumer.ids),
                "ended": "ran to the end"
                if consumer.error is None
                else f"died at {consumer.died_at:.1f} s: {type(consumer.error).__name__}",
            }
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument("--servers", default=",".join(URLS))
    args = parser.parse_args()
    retries = Retries()
    logging.getLogger("sqlalchemy_ulid.follow").addHandler(retries)
    logging.getLogger("sqlalchemy_ulid.follow").propagate = False
    print(
        "| server | consumer | rows written | delivered | missed | duplicates | out of order "
        "| connections | ended |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    notes = []
    for server in args.servers.split(","):
        retries.kinds.clear()
        started = time.monotonic()
        result = run(server, URLS[server], args.seconds, args.kills)
        for c in result["consumers"]:
            print(
                f"| {server} | {c['name']} | {result['written']:,} | {c['delivered']:,} "
                f"| {c['missed']} | {c['duplicates']} | {c['out of order']} "
                f"| {c['connections']} | {c['ended']} |"
            )
        notes.append(
            f"{server}: {result.get('kills', 0)} kills, {result.get('updates', 0)} updates "
            f"({result.get('updater deadlocks', 0)} lost a deadlock), retries "
            f"{dict(retries.kinds) or 'none'}, {time.monotonic() - started:.0f} s"
        )
    print()
    for note in notes:
        print(f"- {note}")


if __name__ == "__main__":
    main()
