"""Tailing a feed under concurrent writers: rows missed, duplicated, and delivery lag.

Six writer processes append rows with client-side ids (``default=new_ulid``):
each transaction is one INSERT, a random sleep, then COMMIT. Several reader
processes tail the same table at the same time, one per mode, each polling
every 50 ms with ``paginate(conn, select(id), id, after=cursor, limit=500,
settle=...)``:

* ``none``: no settle; the cursor is the last id seen (what the docs used to
  show, and what a hand-written ``WHERE id > :last`` poller does);
* ``fixed N s``: ``settle=timedelta(seconds=N)``;
* ``auto``: ``settle="auto"`` with the default 1 s margin, and again with
  ``margin=timedelta(milliseconds=500)`` (these writers send their INSERT
  within milliseconds of making the id).

Scenarios: transactions of 0-200 ms, 0-600 ms, and 0-200 ms with one 10 s
transaction among them (writer 0, from the 4th second). When the writers
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
import multiprocessing
import random
import statistics
import time
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from _servers import URLS  # benchmarks/ is on sys.path when a script runs

from sqlalchemy_ulid import ULIDType, new_ulid, paginate

WRITERS = 6
POLL = 0.05
SCENARIOS = {
    # name: (longest ordinary transaction in s, one long transaction in s or 0)
    "tx 0-200 ms": (0.2, 0.0),
    "tx 0-600 ms": (0.6, 0.0),
    "tx 0-200 ms + one 10 s": (0.2, 10.0),
}
LONG_TX_AT = 4.0

feed = sa.Table(
    "bench_feed",
    sa.MetaData(),
    sa.Column("id", ULIDType(), primary_key=True, default=new_ulid),
    sa.Column("writer", sa.Integer, nullable=False),
)


def modes(max_tx: float, long_tx: float) -> dict[str, Any]:
    """The readers of one scenario: no settle, fixed windows, auto."""
    chosen: dict[str, Any] = {"none": None}
    fixed = [1.0] if long_tx == 0 else [1.0, long_tx + 1]
    for seconds in fixed:
        chosen[f"fixed {seconds:g} s"] = timedelta(seconds=seconds)
    chosen["auto"] = "auto"
    chosen["auto, margin 0.5 s"] = ("auto", timedelta(milliseconds=500))
    return chosen


def writer(url: str, number: int, seconds: float, max_tx: float, long_tx: float, out: Any) -> None:
    engine = sa.create_engine(url)
    rng = random.Random(number)
    committed: list[tuple[str, float]] = []
    start = time.time()
    long_pending = number == 0 and long_tx > 0
    while time.time() - start < seconds:
        hold = rng.uniform(0, max_tx)
        if long_pending and time.time() - start >= LONG_TX_AT:
            hold, long_pending = long_tx, False
        with engine.connect() as conn:
            row_id = new_ulid()
            conn.execute(feed.insert(), {"id": row_id, "writer": number})
            time.sleep(hold)
            conn.commit()
            committed.append((str(row_id), time.time()))
    engine.dispose()
    out.put(("writer", number, committed))


def reader(url: str, mode: str, settle: Any, stop: Any, out: Any) -> None:
    try:
        got = follow_feed(url, settle, stop)
    except Exception as exc:  # report it: the run must not wait forever
        out.put(("failed", mode, repr(exc)))
        raise
    out.put(("reader", mode, got))


def follow_feed(url: str, settle: Any, stop: Any) -> list[tuple[str, float]]:
    settle, margin = settle if isinstance(settle, tuple) else (settle, timedelta(seconds=1))
    engine = sa.create_engine(url)
    stmt = sa.select(feed.c.id)
    got: list[tuple[str, float]] = []
    cursor: str | None = None
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        while not stop.is_set():
            page = paginate(
                conn, stmt, feed.c.id, after=cursor, limit=500, settle=settle, margin=margin
            )
            now = time.time()
            got += [(str(i), now) for i in page.items]
            if settle is None:
                cursor = str(page.items[-1]) if page.items else cursor
            else:
                cursor = page.next_cursor
            if not page.has_more:
                time.sleep(POLL)
    engine.dispose()
    return got


def run(url: str, seconds: float, max_tx: float, long_tx: float) -> dict[str, dict[str, Any]]:
    engine = sa.create_engine(url)
    feed.drop(engine, checkfirst=True)
    feed.create(engine)
    engine.dispose()
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    stop = context.Event()
    readers = {
        mode: context.Process(target=reader, args=(url, mode, settle, stop, out))
        for mode, settle in modes(max_tx, long_tx).items()
    }
    writers = [
        context.Process(target=writer, args=(url, n, seconds, max_tx, long_tx, out))
        for n in range(WRITERS)
    ]
    for process in [*readers.values(), *writers]:
        process.start()
    results: list[Any] = [out.get() for _ in writers]
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
        ids = [row_id for row_id, _ in rows]
        lags = sorted(at - committed[row_id] for row_id, at in rows if row_id in committed)
        table[mode] = {
            "written": len(committed),
            "missed": len(set(committed) - set(ids)),
            "duplicates": len(ids) - len(set(ids)),
            "p50": statistics.median(lags) if lags else float("nan"),
            "p99": lags[min(len(lags) - 1, int(len(lags) * 0.99))] if lags else float("nan"),
        }
    engine = sa.create_engine(url)
    feed.drop(engine, checkfirst=True)
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
            "| lag p50 (s) | lag p99 (s) |"
        )
        print("|---|---|---:|---:|---:|---:|---:|")
        for scenario in args.scenarios.split(","):
            max_tx, long_tx = SCENARIOS[scenario]
            started = time.monotonic()
            table = run(url, args.seconds, max_tx, long_tx)
            for mode in modes(max_tx, long_tx):
                row = table[mode]
                print(
                    f"| {scenario} | {mode} | {row['written']:,} | {row['missed']:,} | "
                    f"{row['duplicates']:,} | {row['p50']:.2f} | {row['p99']:.2f} |",
                    flush=True,
                )
            print(f"<!-- {scenario}: {time.monotonic() - started:.0f} s -->", flush=True)


if __name__ == "__main__":
    main()
