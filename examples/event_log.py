"""An append-only event log written by several processes and threads at once.

Each writer (a thread inside a forked process) appends events numbered
0, 1, 2, ... with ``id=new_ulid()``. Reading the log back ``ORDER BY id``
then shows that:

* no id was made twice, although the processes were forked from one parent
  whose generator had already been used (each child reseeds after fork);
* every writer's events come back in the order that writer wrote them,
  because one process's ULIDs are strictly increasing, in every thread.

Events of different processes interleave by millisecond: ULIDs order
writers only as precisely as their clocks.

While the writers run, a consumer in the parent follows the log with
``follow()``, the way an outbox poller or a sync job would. Ids are made
before their rows commit, so commits arrive out of id order; ``settle=``
("auto" on PostgreSQL and MariaDB, a fixed window on SQLite, where a writer
may also wait for the database lock) keeps the consumer behind the writes
still in flight, and it receives every event exactly once, in id order.

Usage: ``python examples/event_log.py [DATABASE_URL]``; the default is a
SQLite file ``event_log.sqlite3`` in the current directory, recreated each
run. ``DATABASE_URL`` in the environment works too.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time
from collections import defaultdict
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from sqlalchemy_ulid import ULIDType, follow, new_ulid

PROCESSES = 3
THREADS = 4
EVENTS = 50  # per thread

log = sa.Table(
    "event_log",
    sa.MetaData(),
    sa.Column("id", ULIDType(), primary_key=True, default=new_ulid),
    sa.Column("writer", sa.String(40), nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),
)


def make_engine(url: str) -> sa.Engine:
    if url.startswith("sqlite"):
        # Several processes write one file: wait for the lock instead of failing.
        return sa.create_engine(url, connect_args={"timeout": 30})
    return sa.create_engine(url)


def write(engine: sa.Engine, writer: str) -> None:
    for seq in range(EVENTS):
        with engine.begin() as conn:  # one event per transaction, like a real log
            conn.execute(log.insert(), {"writer": writer, "seq": seq})


def process_main(url: str, process_no: int) -> None:
    engine = make_engine(url)
    threads = [
        threading.Thread(target=write, args=(engine, f"process {process_no} thread {t}"))
        for t in range(THREADS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    engine.dispose()


def consume(engine: sa.Engine, got: list[Any], stop: threading.Event) -> None:
    """Follow the log until stopped, as a long-running consumer would."""
    # SQLite shows no other connection's transactions, so a fixed window: it
    # must outlast the slowest write, which on a loaded machine (writers
    # queueing for SQLite's one write lock) took over 3 s.
    settle: Any = timedelta(seconds=10) if engine.dialect.name == "sqlite" else "auto"
    stmt = sa.select(log.c.id, log.c.writer, log.c.seq)
    for page in follow(engine, stmt, log.c.id, settle=settle, interval=0.05, stop=stop):
        got.extend(page.items)  # a real consumer would also store page.next_cursor


def main(url: str) -> int:
    if url.startswith("sqlite:///"):
        for suffix in ("", "-wal", "-shm", "-journal"):
            path = url.removeprefix("sqlite:///") + suffix
            if os.path.exists(path):
                os.remove(path)
    engine = make_engine(url)
    log.drop(engine, checkfirst=True)
    log.create(engine)
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA journal_mode=WAL")
    engine.dispose()  # children must not share the parent's connections

    # Use the generator before forking, so the children inherit its state.
    print(f"parent {os.getpid()} made {new_ulid()} before forking")
    context = multiprocessing.get_context("fork")
    children = [context.Process(target=process_main, args=(url, n)) for n in range(PROCESSES)]
    for child in children:
        child.start()
    # The consumer thread starts after the fork: children get no threads.
    consumer_engine = make_engine(url)
    consumed: list[Any] = []
    stop = threading.Event()
    consumer = threading.Thread(target=consume, args=(consumer_engine, consumed, stop))
    consumer.start()
    for child in children:
        child.join()
        if child.exitcode != 0:
            print(f"writer process exited with {child.exitcode}", file=sys.stderr)
            stop.set()
            return 1
    expected = PROCESSES * THREADS * EVENTS
    deadline = time.monotonic() + 30
    while len(consumed) < expected and time.monotonic() < deadline:
        time.sleep(0.05)  # the last writes settle
    stop.set()
    consumer.join()
    consumer_engine.dispose()

    engine = make_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(log.c.id, log.c.writer, log.c.seq).order_by(log.c.id)).all()
    engine.dispose()

    ids = [row.id for row in rows]
    by_writer: dict[str, list[int]] = defaultdict(list)
    for row in rows:
        by_writer[row.writer].append(row.seq)
    print(f"read {len(rows)} events in id order, {len(set(ids))} distinct ids")
    print(f"first {ids[0]}  last {ids[-1]}")
    for writer, seqs in sorted(by_writer.items()):
        in_order = seqs == list(range(EVENTS))
        print(f"  {writer}: {len(seqs)} events, in write order: {'yes' if in_order else 'NO'}")
    consumed_ids = [row.id for row in consumed]
    print(
        f"consumer followed the log while it was written: {len(consumed)} events, "
        f"{len(set(ids) - set(consumed_ids))} missed, "
        f"{len(consumed_ids) - len(set(consumed_ids))} duplicates, "
        f"in id order: {'yes' if consumed_ids == ids else 'NO'}"
    )
    ok = (
        consumed_ids == ids
        and len(rows) == expected
        and len(set(ids)) == expected
        and all(seqs == list(range(EVENTS)) for seqs in by_writer.values())
        and len(by_writer) == PROCESSES * THREADS
    )
    print("OK: no duplicates, every writer in order" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    default = os.environ.get("DATABASE_URL", "sqlite:///event_log.sqlite3")
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else default))
