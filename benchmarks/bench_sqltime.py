"""ulid_timestamp(id) in a GROUP BY over 1M rows, against a stored created_at column.

Two tables of the same 1M rows (ids spread over one year) on PostgreSQL and
MariaDB:

* ``bench_sqltime_key``: the ULID key only; the day comes from
  ``ulid_timestamp(id)``;
* ``bench_sqltime_stored``: the key plus a ``created_at`` column with an
  index on it, what a project adds when it wants the time in SQL.

For each server it prints the time of ``SELECT day, count(*) ... GROUP BY
day ORDER BY day`` (365 groups) with the day computed from each source, and
the size of each table (heap and indexes). A third query counts one week
with ``created_since``/``created_before`` grouped by day, against the same
week filtered on the indexed ``created_at``.

Rows are generated inside the database (generate_series, MariaDB's
sequence engine) so loading takes seconds. Each figure is the minimum and
the median of --repeat runs after one warm-up run, interleaved, measured from
Python, in milliseconds.

Run: ``.venv/bin/python benchmarks/bench_sqltime.py [--rows 1000000] [--repeat 7] [--keep]``
(URLs from SQLALCHEMY_ULID_POSTGRESQL_URL / SQLALCHEMY_ULID_MYSQL_URL, else the
local test servers).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from _servers import URLS  # benchmarks/ is on sys.path when a script runs
from sqlalchemy.dialects import mysql

from sqlalchemy_ulid import ULIDType, created_before, created_since, ulid_timestamp

START = datetime(2025, 1, 1, tzinfo=timezone.utc)
START_MS = int(START.timestamp()) * 1000
YEAR_MS = 365 * 86_400_000
WEEK = (datetime(2025, 6, 1, tzinfo=timezone.utc), datetime(2025, 6, 8, tzinfo=timezone.utc))

metadata = sa.MetaData()
key_only = sa.Table("bench_sqltime_key", metadata, sa.Column("id", ULIDType(), primary_key=True))
stored = sa.Table(
    "bench_sqltime_stored",
    metadata,
    sa.Column("id", ULIDType(), primary_key=True),
    sa.Column(
        "created_at",
        sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=3), "mysql"),
        nullable=False,
        index=True,
    ),
)


def load(conn: sa.Connection, rows: int) -> None:
    """The same instants in both tables; random bits from the server."""
    step = YEAR_MS // rows
    if conn.dialect.name == "postgresql":
        source = (
            f"SELECT encode(substring(int8send({START_MS} + g * {step}) FROM 3)"
            " || substring(uuid_send(gen_random_uuid()) FROM 1 FOR 10), 'hex')::uuid AS id"
            f" FROM generate_series(0::bigint, {rows - 1}) AS g"
        )
        created = "to_timestamp(('x' || substr(replace(id::text, '-', ''), 1, 12))"
        created += "::bit(48)::bigint / 1000.0)"
    else:
        source = (
            f"SELECT UNHEX(CONCAT(LPAD(HEX({START_MS} + seq * {step}), 12, '0'),"
            f" HEX(RANDOM_BYTES(10)))) AS id FROM seq_0_to_{rows - 1}"
        )
        created = (
            "TIMESTAMPADD(MICROSECOND, CAST(CONV(HEX(LEFT(id, 6)), 16, 10) AS UNSIGNED) * 1000,"
            " TIMESTAMP'1970-01-01 00:00:00')"
        )
    conn.exec_driver_sql(f"INSERT INTO bench_sqltime_key (id) {source}")
    conn.exec_driver_sql(
        f"INSERT INTO bench_sqltime_stored (id, created_at) SELECT id, {created}"
        " FROM bench_sqltime_key"
    )


def utc_day(conn: sa.Connection, ts: Any) -> Any:
    if conn.dialect.name == "postgresql":
        return sa.cast(sa.func.timezone("UTC", ts), sa.Date)
    return sa.func.date(ts)  # MariaDB: both hold UTC


def per_day(conn: sa.Connection, table: sa.Table, ts: Any, where: Any = None) -> Any:
    day = utc_day(conn, ts).label("day")
    stmt = sa.select(day, sa.func.count()).select_from(table).group_by(day).order_by(day)
    return stmt if where is None else stmt.where(where)


def size(conn: sa.Connection, name: str) -> tuple[int, int]:
    """(heap bytes, index bytes) of a table."""
    if conn.dialect.name == "postgresql":
        row = conn.exec_driver_sql(
            f"SELECT pg_table_size('{name}'), pg_indexes_size('{name}')"
        ).one()
    else:
        row = conn.exec_driver_sql(
            "SELECT data_length, index_length FROM information_schema.tables"
            f" WHERE table_schema = DATABASE() AND table_name = '{name}'"
        ).one()
    return int(row[0]), int(row[1])


def timed(conn: sa.Connection, stmt: Any) -> tuple[float, list[Any]]:
    began = time.perf_counter()
    rows = conn.execute(stmt).all()
    return (time.perf_counter() - began) * 1000, rows


def bench(name: str, url: str, rows: int, repeat: int, keep: bool) -> tuple[list[str], list[str]]:
    engine = sa.create_engine(url)
    lines: list[str] = []
    size_lines: list[str] = []
    try:
        with engine.begin() as conn:
            have = 0
            if sa.inspect(conn).has_table("bench_sqltime_stored"):
                have = conn.scalar(sa.select(sa.func.count()).select_from(stored)) or 0
            if have != rows:
                metadata.drop_all(conn)
                metadata.create_all(conn)
                began = time.perf_counter()
                load(conn, rows)
                print(f"{name}: loaded {rows:,} rows twice in {time.perf_counter() - began:.1f} s")
        with engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                conn.exec_driver_sql("VACUUM ANALYZE bench_sqltime_key")
                conn.exec_driver_sql("VACUUM ANALYZE bench_sqltime_stored")
            else:
                conn.exec_driver_sql("ANALYZE TABLE bench_sqltime_key").all()
                conn.exec_driver_sql("ANALYZE TABLE bench_sqltime_stored").all()
            since, before = WEEK
            queries: dict[str, Callable[[], Any]] = {
                "GROUP BY day, all rows: ulid_timestamp(id)": lambda: per_day(
                    conn, key_only, ulid_timestamp(key_only.c.id)
                ),
                "GROUP BY day, all rows: stored created_at": lambda: per_day(
                    conn, stored, stored.c.created_at
                ),
                "GROUP BY day, one week: ulid_timestamp(id), created_since/before": lambda: per_day(
                    conn,
                    key_only,
                    ulid_timestamp(key_only.c.id),
                    created_since(key_only.c.id, since) & created_before(key_only.c.id, before),
                ),
                "GROUP BY day, one week: stored created_at, its index": lambda: per_day(
                    conn,
                    stored,
                    stored.c.created_at,
                    (stored.c.created_at >= since) & (stored.c.created_at < before),
                ),
            }
            statements = {label: build() for label, build in queries.items()}
            results = {label: timed(conn, stmt)[1] for label, stmt in statements.items()}  # warm-up
            labels = list(statements)
            assert results[labels[0]] == results[labels[1]], "the two sources disagree"
            assert results[labels[2]] == results[labels[3]], "the two sources disagree"
            assert len(results[labels[0]]) == 365
            assert len(results[labels[2]]) == 7
            times: dict[str, list[float]] = {label: [] for label in labels}
            for r in range(repeat):
                for label in labels[r % len(labels) :] + labels[: r % len(labels)]:
                    times[label].append(timed(conn, statements[label])[0])
            sizes = {t.name: size(conn, t.name) for t in (key_only, stored)}
        base = {0: labels[0], 1: labels[0], 2: labels[2], 3: labels[2]}
        for i, label in enumerate(labels):
            best, median = min(times[label]), statistics.median(times[label])
            ratio = best / min(times[base[i]])
            lines.append(f"| {name} | {label} | {best:,.0f} | {median:,.0f} | {ratio:.2f} |")
        for table_name, (heap, index) in sizes.items():
            what = "key only" if table_name == key_only.name else "key + created_at + its index"
            size_lines.append(
                f"| {name} | {what} | {heap / 2**20:.1f} | {index / 2**20:.1f} |"
                f" {(heap + index) / 2**20:.1f} |"
            )
        if not keep:
            with engine.begin() as conn:
                metadata.drop_all(conn)
    finally:
        engine.dispose()
    return lines, size_lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the tables for a rerun")
    args = parser.parse_args()
    timings, sizes = [], []
    for name, url in URLS.items():
        found = bench(name, url, args.rows, args.repeat, args.keep)
        timings += found[0]
        sizes += found[1]
    print()
    print("| server | query | ms (min) | ms (median) | time / ulid_timestamp's |")
    print("|---|---|---:|---:|---:|")
    print("\n".join(timings))
    print()
    print("| server | table | heap MiB | indexes MiB | total MiB |")
    print("|---|---|---:|---:|---:|")
    print("\n".join(sizes))


if __name__ == "__main__":
    main()
