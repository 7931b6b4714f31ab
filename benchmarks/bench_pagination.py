"""Keyset pages and time ranges on a 1M-row ULID table, PostgreSQL and MariaDB.

Same rows on both servers, loaded once (reruns reuse a table of the right
size). For each server it prints:

* the latency of one 50-row page at depth 0, 10%, 50% and 90%, with
  ``paginate(after=cursor)``, with ``OFFSET`` and with sqlakeyset
  (``select_page`` with a string bookmark, its ULID bookmark type
  registered);
* ``count(*)`` of the rows created in the last hour (the newest 1%) with
  ``created_since(id, t)`` against the same predicate on an unindexed
  ``created_at`` column holding the same instants (a full scan).

Every figure is the median of repeated runs after warm-up, from Python
(``session.execute`` to rows in hand), in milliseconds.

Run: ``.venv/bin/python benchmarks/bench_pagination.py [--rows 1000000] [--keep]``
(URLs from SQLALCHEMY_ULID_POSTGRESQL_URL / SQLALCHEMY_ULID_MYSQL_URL, else the
local test servers).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlakeyset
import sqlalchemy as sa
from _servers import URLS  # benchmarks/ is on sys.path when a script runs
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import Session

from sqlalchemy_ulid import ULID, ULIDType, created_since, paginate

PAGE = 50
HOURS = 100  # rows spread evenly over 100 hours: the last hour is the newest 1%
# A fixed end instant makes every run load identical rows.
END = datetime(2026, 1, 1, tzinfo=timezone.utc)

metadata = sa.MetaData()
events = sa.Table(
    "bench_pagination",
    metadata,
    sa.Column("id", ULIDType(), primary_key=True),
    # Deliberately unindexed: the "no ULID" way to ask for recent rows.
    sa.Column(
        "created_at",
        sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=3), "mysql"),
        nullable=False,
    ),
    sa.Column("payload", sa.String(40), nullable=False),
)


def make_rows(n: int) -> list[tuple[ULID, datetime, str]]:
    """n rows with ids in time order, the same every run (seeded randomness)."""
    import random

    rng = random.Random(4)
    start_ms = int((END - timedelta(hours=HOURS)).timestamp() * 1000)
    span_ms = HOURS * 3600 * 1000
    rows = []
    for i in range(n):
        ms = start_ms + i * span_ms // n
        ulid = ULID.from_parts(ms, rng.getrandbits(80))
        rows.append((ulid, ulid.datetime, f"event {i}"))
    rows.sort(key=lambda row: row[0])
    return rows


def load(engine: sa.Engine, rows: list[tuple[ULID, datetime, str]]) -> None:
    with engine.connect() as conn:
        have = 0
        if sa.inspect(conn).has_table(events.name):
            have = conn.scalar(sa.select(sa.func.count()).select_from(events)) or 0
    if have == len(rows):
        print(f"  reusing {have} rows in {engine.dialect.name}")
        return
    metadata.drop_all(engine)
    metadata.create_all(engine)
    started = time.perf_counter()
    if engine.dialect.name == "postgresql":
        raw = engine.raw_connection()
        try:
            cursor = raw.cursor()
            # COPY text format: uuid as 32 hex digits, timestamptz as ISO text.
            with cursor.copy(f"COPY {events.name} (id, created_at, payload) FROM STDIN") as copy:  # type: ignore[attr-defined]
                for chunk in range(0, len(rows), 50_000):
                    copy.write(
                        "".join(
                            f"{u.hex}\t{dt.isoformat()}\t{p}\n"
                            for u, dt, p in rows[chunk : chunk + 50_000]
                        )
                    )
            raw.commit()
        finally:
            raw.close()
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f"VACUUM ANALYZE {events.name}")
    else:
        raw = engine.raw_connection()
        try:
            cursor = raw.cursor()
            sql = f"INSERT INTO {events.name} (id, created_at, payload) VALUES (%s, %s, %s)"
            for chunk in range(0, len(rows), 20_000):
                # PyMySQL turns executemany into multi-row INSERTs.
                cursor.executemany(
                    sql,
                    [
                        (u.bytes, dt.replace(tzinfo=None), p)
                        for u, dt, p in rows[chunk : chunk + 20_000]
                    ],
                )
            raw.commit()
        finally:
            raw.close()
        with engine.connect() as conn:
            conn.exec_driver_sql(f"ANALYZE TABLE {events.name}").all()
    took = time.perf_counter() - started
    print(f"  loaded {len(rows)} rows into {engine.dialect.name} in {took:.0f} s")


def interleaved_ms(runs: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Median ms of each callable, run in shuffled rounds so that background
    load (a shared CI box) hits every contender alike."""
    import random

    rng = random.Random(0)
    names = list(runs)
    for name in names:  # warm-up: plans cached, pages in memory
        runs[name]()
        runs[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        rng.shuffle(names)
        for name in names:
            started = time.perf_counter()
            runs[name]()
            times[name].append((time.perf_counter() - started) * 1000)
    return {name: statistics.median(values) for name, values in times.items()}


DEPTHS = (("0", 0.0), ("10%", 0.1), ("50%", 0.5), ("90%", 0.9))
METHODS = ("after", "offset", "sqlakeyset")


def bench_pages(
    session: Session, ids: list[ULID], rounds: int
) -> list[tuple[str, float, float, float]]:
    n = len(ids)
    stmt = sa.select(events)
    ordered = sa.select(events).order_by(events.c.id)
    runs: dict[str, Callable[[], Any]] = {}
    for label, fraction in DEPTHS:
        depth = int(n * fraction)
        cursor = None if depth == 0 else str(ids[depth - 1])
        bookmark = (
            None if cursor is None else sqlakeyset.serialize_bookmark(((ULID(cursor),), False))
        )

        def keyset(cursor: str | None = cursor) -> Any:
            return paginate(session, stmt, events.c.id, after=cursor, limit=PAGE).items

        def offset(depth: int = depth) -> Any:
            return session.execute(ordered.offset(depth).limit(PAGE)).all()

        def keyset_lib(bookmark: str | None = bookmark) -> Any:
            page = sqlakeyset.select_page(session, ordered, per_page=PAGE, page=bookmark)
            _ = page.paging.bookmark_next  # the cursor a web API would hand out
            return page

        # Same rows from all three, or the timings mean nothing.
        expected = ids[depth : depth + PAGE]
        for run in (keyset, offset, keyset_lib):
            assert [row.id for row in run()] == expected
        runs |= {
            f"after {label}": keyset,
            f"offset {label}": offset,
            f"sqlakeyset {label}": keyset_lib,
        }
    medians = interleaved_ms(runs, rounds)
    return [
        (label, *(medians[f"{method} {label}"] for method in METHODS))  # type: ignore[misc]
        for label, _ in DEPTHS
    ]


def bench_range(session: Session, ids: list[ULID], rounds: int) -> tuple[int, float, float]:
    since = END - timedelta(hours=1)
    by_id = sa.select(sa.func.count()).select_from(events).where(created_since(events.c.id, since))
    # MariaDB DATETIME holds naive UTC; PostgreSQL timestamptz takes the aware value.
    naive_ok = session.get_bind().dialect.name != "postgresql"
    scan_since = since.replace(tzinfo=None) if naive_ok else since
    by_scan = (
        sa.select(sa.func.count()).select_from(events).where(events.c.created_at >= scan_since)
    )
    count = session.scalar(by_id)
    assert count == session.scalar(by_scan) == sum(1 for u in ids if u >= ULID.min_at(since))
    medians = interleaved_ms(
        {"id": lambda: session.scalar(by_id), "scan": lambda: session.scalar(by_scan)}, rounds
    )
    return int(count or 0), medians["id"], medians["scan"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument(
        "--keep", action="store_true", help="keep the loaded table for a faster rerun"
    )
    args = parser.parse_args()
    # sqlakeyset refuses to write a bookmark for a type it does not know.
    sqlakeyset.custom_bookmark_type(ULID, "ulid", deserializer=ULID, serializer=str)
    started = time.perf_counter()
    rows = make_rows(args.rows)
    ids = [row[0] for row in rows]
    print(f"generated {len(rows)} rows in {time.perf_counter() - started:.0f} s")
    out = []
    for name, url in URLS.items():
        engine = sa.create_engine(url)
        load(engine, rows)
        with Session(engine) as session:
            pages = bench_pages(session, ids, args.rounds)
            count, by_id, by_scan = bench_range(session, ids, args.rounds)
        if not args.keep:
            # The servers are often shared test databases: leave them as found.
            metadata.drop_all(engine)
        engine.dispose()
        first = pages[0][1]
        out.append(f"\n### {name}, {args.rows:,} rows, {PAGE}-row pages (median ms)\n")
        out.append(
            "| depth | `after(cursor)` | OFFSET | sqlakeyset | after vs first page "
            "| OFFSET / after | sqlakeyset / after |"
        )
        out.append("|---|---:|---:|---:|---:|---:|---:|")
        for label, keyset, offset, lib in pages:
            out.append(
                f"| {label} | {keyset:.2f} | {offset:.2f} | {lib:.2f} | {keyset / first:.2f}x "
                f"| {offset / keyset:.1f}x | {lib / keyset:.2f}x |"
            )
        share = count / args.rows
        out.append(
            f"\n`count(*)` of rows created in the last hour ({count:,} rows, {share:.1%}):\n"
        )
        out.append("| query | ms | ratio |")
        out.append("|---|---:|---:|")
        out.append(f"| `created_since(id, t)` (primary-key range) | {by_id:.2f} | 1.0x |")
        out.append(
            f"| `created_at >= t` (unindexed column, full scan) | {by_scan:.2f} "
            f"| {by_scan / by_id:.1f}x |"
        )
        print("\n".join(out[-(len(pages) + 9) :]), flush=True)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    print("\n".join(out))


if __name__ == "__main__":
    main()
