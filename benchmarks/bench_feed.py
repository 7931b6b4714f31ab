"""Tailing a feed under concurrent writers: rows missed, duplicated, and delivery lag.

Six writer processes append rows with client-side ids (``default=new_ulid``):
each transaction is one INSERT, a random sleep, then COMMIT. Several reader
processes tail the same table at the same time, one per mode, each polling
every 50 ms with ``paginate(conn, select(id), id, after=cursor, limit=500,
settle=...)``:

* ``none``: no settle; the cursor is the last id seen (what the docs used to
  show, and what a hand-written ``WHERE id > :last`` poller does);
* ``fixed N s``: ``settle=timedelta(seconds=N)``;
* ``auto``: ``settle="auto"`` with ``margin=timedelta(milliseconds=200)``
  (PostgreSQL's default), and with 1 s (MariaDB's default, and the
  default everywhere before) (these writers send their INSERT within
  milliseconds of making the id, and each runs ``guard_ulid_age()`` with
  0.2 s, which would refuse an INSERT of an older id).

Scenarios: transactions of 0-200 ms, 0-600 ms, and 0-200 ms with one 10 s
transaction among them (writer 0, from the 4th second). Three more are the
slow writers ``"auto"`` once lost rows to:

* ``FK waits + tenant feed``: rows of tenants 1 and 2 under four parent rows;
  another process keeps locking one parent at a time (``SELECT ... FOR
  UPDATE``, 0.5-2 s), so INSERTs wait on their foreign-key check. The
  readers follow ``WHERE tenant = 1``, which MariaDB serves from
  ``INDEX(tenant)``;
* ``untracked writer``: writer 0 runs with ``SET track_activities = off``
  (PostgreSQL; on MariaDB it is an ordinary writer) and holds each
  transaction 0.5-1.5 s;
* ``updater``: another process runs ``UPDATE ... SET seq = seq + 1 WHERE
  id >= :two_seconds_ago`` (newest first on MariaDB) and holds it 0.2 s.

In those, one more reader runs ``"auto"`` as it was before the fix (the
page through any index on MariaDB; a NULL ``xact_start`` taken as ended on
PostgreSQL). A poll that fails with a deadlock or lock wait timeout is
retried from the same cursor, and counted. When the writers
stop, the readers keep polling until everything written has settled, then
stop; a row that a reader never got is *missed*, one it got twice is a
*duplicate*. *Lag* is delivery time minus the row's commit time (both on
this machine's clock), p50 and p99, in seconds.

Run: ``.venv/bin/python benchmarks/bench_feed.py [--seconds 20] [--servers PostgreSQL,MariaDB]``
(URLs from SQLALCHEMY_ULID_POSTGRESQL_URL / SQLALCHEMY_ULID_MYSQL_URL, else the
local test servers).
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import random
import statistics
import time
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from _servers import URLS  # benchmarks/ is on sys.path when a script runs

from sqlalchemy_ulid import ULID, ULIDType, guard_ulid_age, new_ulid, paginate
from sqlalchemy_ulid._settle import DEFAULT_MARGIN

WRITERS = 6
POLL = 0.05
SCENARIOS = {
    # name: (longest ordinary transaction in s, one long transaction in s or 0, kind)
    "tx 0-200 ms": (0.2, 0.0, "plain"),
    "tx 0-600 ms": (0.6, 0.0, "plain"),
    "tx 0-200 ms + one 10 s": (0.2, 10.0, "plain"),
    "FK waits + tenant feed": (0.2, 0.0, "fk"),
    "untracked writer": (0.2, 0.0, "untracked"),
    "updater": (0.2, 0.0, "updater"),
}
LONG_TX_AT = 4.0
# PostgreSQL's default margin; MariaDB's is 1 s (see DialectRow.settle_margin).
SHORT_MARGIN = timedelta(milliseconds=200)
PARENTS = 4
RETRYABLE = {1205, 1213, "40P01", "55P03"}  # lock wait timeout, deadlock (both servers)

metadata = sa.MetaData()
parents = sa.Table("bench_feed_parent", metadata, sa.Column("id", sa.Integer, primary_key=True))
feed = sa.Table(
    "bench_feed",
    metadata,
    sa.Column("id", ULIDType(), primary_key=True, default=new_ulid),
    sa.Column("writer", sa.Integer, nullable=False),
    sa.Column("parent_id", sa.ForeignKey("bench_feed_parent.id"), nullable=False),
    sa.Column("tenant", sa.Integer, nullable=False, index=True),
    sa.Column("seq", sa.Integer, nullable=False, default=0),
)


def modes(max_tx: float, long_tx: float, kind: str = "plain") -> dict[str, Any]:
    """The readers of one scenario: no settle, fixed windows, auto."""
    chosen: dict[str, Any] = {"none": None}
    fixed = [1.0] if long_tx == 0 else [1.0, long_tx + 1]
    for seconds in fixed:
        chosen[f"fixed {seconds:g} s"] = timedelta(seconds=seconds)
    chosen["auto, margin 0.2 s"] = ("auto", SHORT_MARGIN)
    if kind == "plain":
        chosen["auto, margin 1 s"] = ("auto", timedelta(seconds=1))
    else:
        chosen["auto before the fix"] = ("auto", SHORT_MARGIN, "before the fix")
    return chosen


def writer(
    url: str, number: int, seconds: float, max_tx: float, long_tx: float, kind: str, out: Any
) -> None:
    engine = sa.create_engine(url)
    guard_ulid_age(engine, SHORT_MARGIN)
    rng = random.Random(number)
    committed: list[tuple[str, float]] = []
    start = time.time()
    long_pending = number == 0 and long_tx > 0
    untracked = kind == "untracked" and number == 0
    with engine.connect() as conn:
        if untracked and engine.dialect.name == "postgresql":
            conn.exec_driver_sql("SET track_activities = off")  # this session only
            conn.commit()
        while time.time() - start < seconds:
            hold = rng.uniform(0.5, 1.5) if untracked else rng.uniform(0, max_tx)
            if long_pending and time.time() - start >= LONG_TX_AT:
                hold, long_pending = long_tx, False
            tenant = rng.choice([1, 2]) if kind == "fk" else 1
            parent = rng.randint(1, PARENTS) if kind == "fk" else 1
            row_id = new_ulid()
            row = {"id": row_id, "writer": number, "tenant": tenant, "parent_id": parent}
            conn.execute(feed.insert(), row)
            time.sleep(hold)
            conn.commit()
            if tenant == 1:  # the readers follow tenant 1
                committed.append((str(row_id), time.time()))
    engine.dispose()
    out.put(("writer", number, committed))


def disturber(url: str, kind: str, stop: Any) -> None:
    """Lock parent rows (FK waits), or update recent rows (updater), until stopped."""
    engine = sa.create_engine(url)
    rng = random.Random(99)
    mysql = engine.dialect.name == "mysql"
    while not stop.is_set():
        with engine.connect() as conn:
            try:
                if kind == "fk":
                    parent = rng.randint(1, PARENTS)
                    locked = sa.select(parents.c.id).where(parents.c.id == parent)
                    conn.execute(locked.with_for_update())
                    time.sleep(rng.uniform(0.5, 2.0))
                else:
                    recent = ULID.from_parts(int((time.time() - 2) * 1000), 0)
                    order = " ORDER BY id DESC" if mysql else ""
                    update = sa.text(f"UPDATE bench_feed SET seq = seq + 1 WHERE id >= :r{order}")
                    conn.execute(update.bindparams(sa.bindparam("r", recent, type_=ULIDType())))
                    time.sleep(0.2)
                conn.commit()
            except sa.exc.DBAPIError:
                conn.rollback()  # a deadlock victim: try again
        time.sleep(rng.uniform(0, 0.3))
    engine.dispose()


def reader(url: str, mode: str, settle: Any, kind: str, stop: Any, out: Any) -> None:
    try:
        got = follow_feed(url, settle, kind, stop)
    except Exception as exc:  # report it: the run must not wait forever
        out.put(("failed", mode, repr(exc)))
        raise
    out.put(("reader", mode, got))


def before_the_fix() -> None:
    """Put back, in this reader process only, what "auto" did before the fix."""
    from sqlalchemy_ulid import _settle

    def restrict(self: Any, statement: Any) -> Any:  # any index, as chosen by the server
        return statement.with_for_update(read=True) if self.locking_read else statement

    _settle.Horizon.restrict = restrict  # type: ignore[method-assign]
    # A NULL xact_start counted as an ended transaction.
    real = _settle._settle_sql

    def settle_sql(dialect: Any) -> Any:
        sql = real(dialect)
        writers = sql.writers.replace(
            "ELSE coalesce(a.backend_start, 'epoch') END", "ELSE NULL END"
        )
        return dataclasses.replace(sql, writers=writers)

    _settle._settle_sql = settle_sql


def follow_feed(url: str, settle: Any, kind: str, stop: Any) -> list[tuple[str, float]]:
    if isinstance(settle, tuple) and len(settle) == 3:
        before_the_fix()
        settle = settle[:2]
    settle, margin = settle if isinstance(settle, tuple) else (settle, DEFAULT_MARGIN)
    engine = sa.create_engine(url)
    stmt = sa.select(feed.c.id).where(feed.c.tenant == 1)
    got: list[tuple[str, float]] = []
    cursor: str | None = None
    retries = 0
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        while not stop.is_set():
            try:
                page = paginate(
                    conn, stmt, feed.c.id, after=cursor, limit=500, settle=settle, margin=margin
                )
            except sa.exc.DBAPIError as error:
                orig = error.orig
                # psycopg names the SQLSTATE; PyMySQL the error number (first
                # argument), and newer PyMySQL a SQLSTATE too (40001 for both)
                codes = {getattr(orig, "sqlstate", None), (getattr(orig, "args", None) or [0])[0]}
                if not codes & RETRYABLE:
                    raise
                retries += 1  # nothing delivered, the cursor has not moved
                time.sleep(POLL)
                continue
            now = time.time()
            got += [(str(i), now) for i in page.items]
            if settle is None:
                cursor = str(page.items[-1]) if page.items else cursor
            else:
                cursor = page.next_cursor
            if not page.has_more:
                time.sleep(POLL)
    engine.dispose()
    got.append(("retries", float(retries)))
    return got


def run(
    url: str, seconds: float, max_tx: float, long_tx: float, kind: str
) -> dict[str, dict[str, Any]]:
    engine = sa.create_engine(url)
    metadata.drop_all(engine)
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(parents.insert(), [{"id": n} for n in range(1, PARENTS + 1)])
        if kind == "fk":  # older rows of another tenant: INDEX(tenant) is the cheap plan
            old = int(time.time() * 1000) - 60_000
            conn.execute(
                feed.insert(),
                [
                    {"id": ULID.from_parts(old + n, n), "writer": -1, "tenant": 2, "parent_id": 1}
                    for n in range(2000)
                ],
            )
    engine.dispose()
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    stop = context.Event()
    readers = {
        mode: context.Process(target=reader, args=(url, mode, settle, kind, stop, out))
        for mode, settle in modes(max_tx, long_tx, kind).items()
    }
    writers = [
        context.Process(target=writer, args=(url, n, seconds, max_tx, long_tx, kind, out))
        for n in range(WRITERS)
    ]
    done_writing = context.Event()
    others = []
    if kind in ("fk", "updater"):
        others.append(context.Process(target=disturber, args=(url, kind, done_writing)))
    for process in [*readers.values(), *writers, *others]:
        process.start()
    results: list[Any] = [out.get() for _ in writers]
    done_writing.set()
    for process in others:
        process.join()
    # Let the largest window pass, then a little more, before the readers stop.
    time.sleep(max(long_tx + 1, 1.0) + 2.0)
    stop.set()
    results += [out.get() for _ in readers]
    failed = [f"{mode}: {error}" for kind, mode, error in results if kind == "failed"]
    if failed:
        raise RuntimeError("a reader failed: " + "; ".join(failed))
    for process in [*readers.values(), *writers]:
        process.join()
    committed = {row_id: at for kind, _, rows in results if kind == "writer" for row_id, at in rows}
    table: dict[str, dict[str, Any]] = {}
    for kind, mode, rows in results:
        if kind != "reader":
            continue
        retries = int(rows.pop()[1])
        ids = [row_id for row_id, _ in rows]
        lags = sorted(at - committed[row_id] for row_id, at in rows if row_id in committed)
        table[mode] = {
            "retries": retries,
            "written": len(committed),
            "missed": len(set(committed) - set(ids)),
            "duplicates": len(ids) - len(set(ids)),
            "p50": statistics.median(lags) if lags else float("nan"),
            "p99": lags[min(len(lags) - 1, int(len(lags) * 0.99))] if lags else float("nan"),
        }
    engine = sa.create_engine(url)
    metadata.drop_all(engine)
    engine.dispose()
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="writing time per scenario")
    parser.add_argument("--servers", default=",".join(URLS))
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = parser.parse_args()
    for server in args.servers.split(","):
        url = URLS[server]
        print(f"\n#### {server}: {WRITERS} writers, {args.seconds:g} s, reader polls every 50 ms\n")
        print(
            "| transactions | mode | rows written | missed | duplicates "
            "| lag p50 (s) | lag p99 (s) | retried polls |"
        )
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for scenario in args.scenarios.split(","):
            max_tx, long_tx, kind = SCENARIOS[scenario]
            started = time.monotonic()
            table = run(url, args.seconds, max_tx, long_tx, kind)
            for mode in modes(max_tx, long_tx, kind):
                row = table[mode]
                print(
                    f"| {scenario} | {mode} | {row['written']:,} | {row['missed']:,} | "
                    f"{row['duplicates']:,} | {row['p50']:.2f} | {row['p99']:.2f} | "
                    f"{row['retries']:,} |",
                    flush=True,
                )
            print(f"<!-- {scenario}: {time.monotonic() - started:.0f} s -->", flush=True)


if __name__ == "__main__":
    main()
