"""Keyset pages sorted by ``total DESC, id DESC`` on 1M rows, PostgreSQL and MariaDB.

One table, ``(id ULID primary key, total int, payload)``, with an index on
``(total, id)``, loaded in SQL (``generate_series`` on PostgreSQL, the
``seq_1_to_N`` sequence engine on MariaDB). For each server it prints the
median latency of one 50-row page at depth 0, 10%, 50% and 90% of the
sort, with ``paginate(after=cursor)`` (this library), with ``OFFSET`` and
with sqlakeyset's ``select_page`` (bookmarks of the same two keys), all on
the same statement and index; and the time of ``total="estimate"`` (the
page with the planner's row estimate, and that estimate's own cost).

Run: ``.venv/bin/python benchmarks/bench_sort_paging.py [--rows 1000000] [--keep]``
(URLs from SQLALCHEMY_ULID_POSTGRESQL_URL / SQLALCHEMY_ULID_MYSQL_URL, else the
local test servers).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import sqlakeyset
import sqlalchemy as sa
from _servers import URLS  # benchmarks/ is on sys.path when a script runs
from bench_pagination import interleaved_ms
from sqlalchemy.orm import Session

from sqlalchemy_ulid import ULID, ULIDType, paginate
from sqlalchemy_ulid._paging._cursor import encode
from sqlalchemy_ulid._paging._sort import read_sort

PAGE = 50
DEPTHS = (("0", 0.0), ("10%", 0.1), ("50%", 0.5), ("90%", 0.9))
METHODS = ("ours", "offset", "sqlakeyset")

metadata = sa.MetaData()
orders = sa.Table(
    "bench_sort_paging",
    metadata,
    sa.Column("id", ULIDType(), primary_key=True),
    sa.Column("total", sa.Integer, nullable=False),
    sa.Column("payload", sa.String(40), nullable=False),
)
sa.Index("bench_sort_paging_total_id", orders.c.total, orders.c.id)
SORTED = sa.select(orders).order_by(orders.c.total.desc(), orders.c.id.desc())

_LOAD = {
    # Any 128-bit value is a ULID; the totals repeat (100,000 distinct values).
    "postgresql": (
        "INSERT INTO bench_sort_paging (id, total, payload) "
        "SELECT md5(g::text)::uuid, mod(g::bigint * 7919, 100000), 'order ' || g "
        "FROM generate_series(1, {n}) AS g"
    ),
    "mysql": (
        "INSERT INTO bench_sort_paging (id, total, payload) "
        "SELECT UNHEX(MD5(seq)), MOD(seq * 7919, 100000), CONCAT('order ', seq) "
        "FROM seq_1_to_{n}"
    ),
}
_ANALYZE = {
    "postgresql": "VACUUM ANALYZE bench_sort_paging",
    "mysql": "ANALYZE TABLE bench_sort_paging",
}


def load(engine: sa.Engine, rows: int) -> None:
    with engine.connect() as conn:
        have = 0
        if sa.inspect(conn).has_table(orders.name):
            have = conn.scalar(sa.select(sa.func.count()).select_from(orders)) or 0
    if have == rows:
        print(f"  reusing {have} rows in {engine.dialect.name}")
        return
    metadata.drop_all(engine)
    metadata.create_all(engine)
    started = time.perf_counter()
    with engine.begin() as conn:
        conn.exec_driver_sql(_LOAD[engine.dialect.name].format(n=rows))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(_ANALYZE[engine.dialect.name])
    took = time.perf_counter() - started
    print(f"  loaded {rows} rows into {engine.dialect.name} in {took:.0f} s")


def cursor_at(session: Session, depth: int) -> tuple[str, Any, Any] | None:
    """Our cursor and sqlakeyset's bookmark for the row just before ``depth``."""
    if depth == 0:
        return None
    row = session.execute(
        sa.select(orders.c.total, orders.c.id)
        .order_by(orders.c.total.desc(), orders.c.id.desc())
        .offset(depth - 1)
        .limit(1)
    ).one()
    dialect = session.get_bind().dialect
    _, sort = read_sort(SORTED, orders.c.id, None, True, lambda: dialect)
    assert sort is not None
    ours = encode(sort.fingerprint, [row.total, str(row.id)])
    bookmark = sqlakeyset.serialize_bookmark(((row.total, row.id), False))
    return ours, bookmark, row


def bench_pages(session: Session, rows: int, rounds: int) -> dict[str, float]:
    runs: dict[str, Callable[[], Any]] = {}
    for label, fraction in DEPTHS:
        depth = int(rows * fraction)
        at = cursor_at(session, depth)
        cursor, bookmark = (None, None) if at is None else at[:2]

        def ours(cursor: str | None = cursor) -> Any:
            return paginate(session, SORTED, orders.c.id, after=cursor, limit=PAGE).items

        def offset(depth: int = depth) -> Any:
            return session.execute(SORTED.offset(depth).limit(PAGE)).all()

        def theirs(bookmark: Any = bookmark) -> Any:
            page = sqlakeyset.select_page(session, SORTED, per_page=PAGE, page=bookmark)
            _ = page.paging.bookmark_next  # the cursor a web API would hand out
            return list(page)

        expected = [o.id for o in offset()]
        for run in (ours, theirs):
            assert [o.id for o in run()] == expected, (label, run.__name__)
        runs |= {f"ours {label}": ours, f"offset {label}": offset, f"sqlakeyset {label}": theirs}

    def estimate() -> Any:
        return paginate(session, SORTED, orders.c.id, limit=PAGE, total="estimate").total

    runs["estimate"] = estimate
    # A keyset page takes about a millisecond, a deep OFFSET up to seconds:
    # interleaved with one, a fast page's timing mostly measures the slow
    # query it followed. So the contenders under 20 ms (timed once here) take
    # their rounds among themselves, ten times as many, and the slow ones theirs.
    slow = {name: run for name, run in runs.items() if _once_ms(run) > 20}
    fast = {name: run for name, run in runs.items() if name not in slow}
    return interleaved_ms(fast, 10 * rounds) | interleaved_ms(slow, rounds)


def _once_ms(run: Callable[[], Any]) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--keep", action="store_true", help="keep the table for a faster rerun")
    parser.add_argument("--only", choices=sorted(URLS), help="measure one server only")
    args = parser.parse_args()
    sqlakeyset.custom_bookmark_type(ULID, "ulid", deserializer=ULID, serializer=str)
    started = time.perf_counter()
    out = []
    for name, url in URLS.items():
        if args.only is not None and name != args.only:
            continue
        engine = sa.create_engine(url)
        load(engine, args.rows)
        with Session(engine) as session:
            medians = bench_pages(session, args.rows, args.rounds)
            estimated = paginate(session, SORTED, orders.c.id, total="estimate").total
        if not args.keep:
            metadata.drop_all(engine)
        engine.dispose()
        first = medians["ours 0"]
        out.append(
            f"\n### {name}, {args.rows:,} rows, {PAGE}-row pages by `total DESC, id DESC` "
            "(median ms)\n"
        )
        out.append(
            "| depth | ours | OFFSET | sqlakeyset | ours vs first page "
            "| OFFSET / ours | sqlakeyset / ours |"
        )
        out.append("|---|---:|---:|---:|---:|---:|---:|")
        for label, _ in DEPTHS:
            ours, offset, lib = (medians[f"{m} {label}"] for m in METHODS)
            out.append(
                f"| {label} | {ours:.2f} | {offset:.2f} | {lib:.2f} | {ours / first:.2f}x "
                f"| {offset / ours:.1f}x | {lib / ours:.2f}x |"
            )
        estimate_cost = medians["estimate"] - first
        out.append(
            f'\nFirst page with `total="estimate"`: {medians["estimate"]:.2f} ms '
            f"(the EXPLAIN: about {estimate_cost:.2f} ms; it estimated {estimated:,} rows)."
        )
        print("\n".join(out[-8:]), flush=True)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    print("\n".join(out))


if __name__ == "__main__":
    main()
