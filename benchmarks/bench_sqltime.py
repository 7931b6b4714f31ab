"""ulid_timestamp(id) in a GROUP BY over 1M rows, against a stored created_at column.

Two tables of the same 1M rows (ids spread over one year) on PostgreSQL and
MariaDB:

* ``bench_sqltime_key``: the ULID key only; the day comes from
  ``ulid_timestamp(id)``;
* ``bench_sqltime_stored``: the key plus a ``created_at`` column with an
  index on it, what a project adds when it wants the time in SQL;
* ``bench_sqltime_generated``: the key plus a stored generated column and
  its index, the documented path for heavy GROUP BY users: on PostgreSQL
  ``created_at`` computed by ``ulid_timestamp(id)``; on MariaDB, which
  refuses date arithmetic in a stored generated column, the integer
  millisecond ``created_ms``, grouped by ``created_ms DIV 86400000``.

On PostgreSQL it also times the SQL ``ulid_timestamp`` compiled to before
(hex text, the millisecond read twice), kept here as literal SQL.

For each server it prints the time of ``SELECT day, count(*) ... GROUP BY
day ORDER BY day`` (365 groups) with the day computed from each source, and
the size of each table (heap and indexes). A third query counts one week
with ``created_since``/``created_before`` grouped by day, against the same
week filtered on the indexed ``created_at``.

Rows are generated inside the database (generate_series, MariaDB's
sequence engine) so loading takes seconds. Each figure is the minimum and
the median of --repeat runs after one warm-up run, interleaved, measured from
Python, in milliseconds.

With ``--mariadb-candidates`` (and ``--keep``) it also times, on MariaDB,
each integer read of the first 6 bytes alone (``SUM(...)`` over the
key-only table), the candidates to ``CONV(HEX(LEFT(id, 6)), 16, 10)``.

Run: ``.venv/bin/python benchmarks/bench_sqltime.py [--rows 1000000] [--repeat 7] [--keep]
[--mariadb-candidates]``
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


# What ulid_timestamp(id) compiled to on PostgreSQL before the integer reads.
_PG_MS_BEFORE = "('x' || encode(substring(uuid_send(id) FROM 1 FOR 6), 'hex'))::bit(48)::bigint"
PG_BEFORE = (
    f"timezone('UTC', TIMESTAMP '1970-01-01 00:00:00' + (({_PG_MS_BEFORE}) / 86400000)"
    f" * INTERVAL '1 day' + (({_PG_MS_BEFORE}) % 86400000) * INTERVAL '1 millisecond')"
)
MARIADB_MS = "CAST(CONV(HEX(LEFT(id, 6)), 16, 10) AS UNSIGNED)"


# Integer reads of the 48-bit millisecond of a BINARY(16) id on MariaDB,
# timed alone as SUM(...) over the key-only table (--mariadb-candidates).
MARIADB_CANDIDATES = {
    "CAST(CONV(HEX(LEFT(id, 6)), 16, 10) AS UNSIGNED) (used)": MARIADB_MS,
    "CAST(CONV(LEFT(HEX(id), 12), 16, 10) AS UNSIGNED)": (
        "CAST(CONV(LEFT(HEX(id), 12), 16, 10) AS UNSIGNED)"
    ),
    "two CONV(HEX(...)) of 3 bytes, shifted": (
        "((CAST(CONV(HEX(LEFT(id, 3)), 16, 10) AS UNSIGNED) << 24)"
        " | CAST(CONV(HEX(SUBSTRING(id, 4, 3)), 16, 10) AS UNSIGNED))"
    ),
    "six ASCII(SUBSTRING(id, i, 1)), shifted": "("
    + " + ".join(f"(ASCII(SUBSTRING(id, {i + 1}, 1)) << {8 * (5 - i)})" for i in range(6))
    + ")",
    "six ORD(SUBSTRING(id, i, 1)), shifted": "("
    + " | ".join(f"(ORD(SUBSTRING(id, {i + 1}, 1)) << {8 * (5 - i)})" for i in range(6))
    + ")",
    "COUNT only (no read of id)": "1",
}


def mariadb_candidates(url: str, repeat: int) -> None:
    """Time each integer read alone over the key-only table (kept by --keep)."""
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        expected = None
        times: dict[str, list[float]] = {name: [] for name in MARIADB_CANDIDATES}
        for name, sql in MARIADB_CANDIDATES.items():  # warm-up, and every read agrees
            got = conn.exec_driver_sql(f"SELECT SUM({sql}) FROM {key_only.name}").scalar()
            if sql != "1":
                assert expected is None or got == expected, name
                expected = got
        names = list(MARIADB_CANDIDATES)
        for r in range(repeat):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                sql = MARIADB_CANDIDATES[name]
                began = time.perf_counter()
                conn.exec_driver_sql(f"SELECT SUM({sql}) FROM {key_only.name}").scalar()
                times[name].append((time.perf_counter() - began) * 1000)
    engine.dispose()
    print("\n| MariaDB: SUM(<millisecond read>) over the key-only table | ms (min) | ms (median) |")
    print("|---|---:|---:|")
    for name in names:
        print(f"| `{name}` | {min(times[name]):,.0f} | {statistics.median(times[name]):,.0f} |")


def generated_table(dialect_name: str) -> sa.Table:
    """The key plus a stored generated creation time and its index."""
    id_column = sa.Column("id", ULIDType(), primary_key=True)
    if dialect_name == "postgresql":
        created: sa.Column[Any] = sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            sa.Computed(ulid_timestamp(id_column), persisted=True),
            index=True,
        )
    else:
        created = sa.Column(
            "created_ms",
            sa.BigInteger,
            sa.Computed(sa.text(MARIADB_MS), persisted=True),
            index=True,
        )
    return sa.Table("bench_sqltime_generated", sa.MetaData(), id_column, created)


def per_day_generated(conn: sa.Connection, table: sa.Table) -> Any:
    if conn.dialect.name == "postgresql":
        return per_day(conn, table, table.c.created_at)
    day_number = (sa.literal_column("created_ms DIV 86400000")).label("day_number")
    counts = (
        sa.select(day_number, sa.func.count().label("n"))
        .select_from(table)
        .group_by(day_number)
        .subquery()
    )
    day = sa.func.date(
        sa.literal_column(
            f"TIMESTAMPADD(DAY, {counts.c.day_number}, TIMESTAMP'1970-01-01 00:00:00')"
        )
    )
    return sa.select(day, counts.c.n).order_by(counts.c.day_number)


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
    conn.exec_driver_sql(
        "INSERT INTO bench_sqltime_generated (id) SELECT id FROM bench_sqltime_key"
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
    generated = generated_table(engine.dialect.name)
    tables = (key_only, stored, generated)
    lines: list[str] = []
    size_lines: list[str] = []
    try:
        with engine.begin() as conn:
            have = 0
            if sa.inspect(conn).has_table(generated.name):
                have = conn.scalar(sa.select(sa.func.count()).select_from(generated)) or 0
            if have != rows:
                generated.drop(conn, checkfirst=True)
                metadata.drop_all(conn)
                metadata.create_all(conn)
                generated.create(conn)
                began = time.perf_counter()
                load(conn, rows)
                print(f"{name}: loaded {rows:,} rows thrice in {time.perf_counter() - began:.1f} s")
        with engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            for table in tables:
                if conn.dialect.name == "postgresql":
                    conn.exec_driver_sql(f"VACUUM ANALYZE {table.name}")
                else:
                    conn.exec_driver_sql(f"ANALYZE TABLE {table.name}").all()
            since, before = WEEK
            all_rows: dict[str, Callable[[], Any]] = {
                "ulid_timestamp(id)": lambda: per_day(
                    conn, key_only, ulid_timestamp(key_only.c.id)
                ),
                "stored created_at": lambda: per_day(conn, stored, stored.c.created_at),
                "generated column": lambda: per_day_generated(conn, generated),
            }
            if conn.dialect.name == "postgresql":
                all_rows["ulid_timestamp(id), previous SQL"] = lambda: per_day(
                    conn, key_only, sa.literal_column(PG_BEFORE, sa.DateTime(timezone=True))
                )
            week: dict[str, Callable[[], Any]] = {
                "ulid_timestamp(id), created_since/before": lambda: per_day(
                    conn,
                    key_only,
                    ulid_timestamp(key_only.c.id),
                    created_since(key_only.c.id, since) & created_before(key_only.c.id, before),
                ),
                "stored created_at, its index": lambda: per_day(
                    conn,
                    stored,
                    stored.c.created_at,
                    (stored.c.created_at >= since) & (stored.c.created_at < before),
                ),
            }
            groups = {"all rows": all_rows, "one week": week}
            statements = {
                (group, label): build()
                for group, queries in groups.items()
                for label, build in queries.items()
            }
            results = {key: timed(conn, stmt)[1] for key, stmt in statements.items()}  # warm-up
            for group, queries in groups.items():
                found = [[tuple(row) for row in results[(group, label)]] for label in queries]
                assert all(f == found[0] for f in found), f"the sources disagree ({group})"
                assert len(found[0]) == (365 if group == "all rows" else 7)
            keys = list(statements)
            times: dict[tuple[str, str], list[float]] = {key: [] for key in keys}
            for r in range(repeat):
                for key in keys[r % len(keys) :] + keys[: r % len(keys)]:
                    times[key].append(timed(conn, statements[key])[0])
            sizes = {t.name: size(conn, t.name) for t in tables}
        for group, queries in groups.items():
            base = min(times[(group, next(label for label in queries if "stored" in label))])
            for label in queries:
                best, median = min(times[(group, label)]), statistics.median(times[(group, label)])
                lines.append(
                    f"| {name} | GROUP BY day, {group}: {label} | {best:,.0f} | {median:,.0f}"
                    f" | {best / base:.2f} |"
                )
        what = {
            key_only.name: "key only",
            stored.name: "key + created_at + its index",
            generated.name: "key + generated column + its index",
        }
        for table_name, (heap, index) in sizes.items():
            size_lines.append(
                f"| {name} | {what[table_name]} | {heap / 2**20:.1f} | {index / 2**20:.1f} |"
                f" {(heap + index) / 2**20:.1f} |"
            )
        if not keep:
            with engine.begin() as conn:
                generated.drop(conn)
                metadata.drop_all(conn)
    finally:
        engine.dispose()
    return lines, size_lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the tables for a rerun")
    parser.add_argument(
        "--mariadb-candidates",
        action="store_true",
        help="also time each integer read of LEFT(id, 6) on MariaDB (needs --keep)",
    )
    args = parser.parse_args()
    timings, sizes = [], []
    for name, url in URLS.items():
        found = bench(name, url, args.rows, args.repeat, args.keep)
        timings += found[0]
        sizes += found[1]
    print()
    print("| server | query | ms (min) | ms (median) | time / stored created_at's |")
    print("|---|---|---:|---:|---:|")
    print("\n".join(timings))
    print()
    print("| server | table | heap MiB | indexes MiB | total MiB |")
    print("|---|---|---:|---:|---:|")
    print("\n".join(sizes))
    if args.mariadb_candidates:
        mariadb_candidates(URLS["MariaDB"], args.repeat)


if __name__ == "__main__":
    main()
