"""ulid_timestamp() on PostgreSQL 18: its SQL for 15 against 18's, and a stored created_at.

One table of --rows rows (ids spread over the year 2025), generated inside
the server: a ULID key (``ULIDType()``, ``uuid``), a UUIDv7 of the same
instant (``sa.Uuid()``), and ``created_at timestamptz`` holding that instant.
Each query is ``SELECT <UTC day>, count(*) ... GROUP BY day ORDER BY day``
(365 groups), the day computed from:

* the stored ``created_at`` (the reference);
* ``ulid_timestamp(ulid)`` as it compiles on the server (18: the first six
  bytes as two 3-byte bytea->integer casts, two interval products);
* the SQL ``ulid_timestamp(ulid)`` compiles to before 18 (six ``get_byte``);
* one 6-byte bytea->bigint cast and one interval product: faster, but off by
  microseconds past the year 4253, so not used (shown for the ratio);
* ``ulid_timestamp(uuid7)`` as it compiles on the server (18:
  ``uuid_extract_timestamp()``), and the SQL before 18 on the same column.

Every source must give the same groups and counts (checked). Each figure is
the minimum and the median of --repeat interleaved runs after one warm-up,
from Python, in milliseconds; the ratio is against the stored ``created_at``,
minimum to minimum.

Run: ``.venv/bin/python benchmarks/bench_sqltime_pg18.py [--rows 1000000] [--repeat 7] [--keep]``
with SQLALCHEMY_ULID_POSTGRESQL_URL pointing at PostgreSQL 18 (for example
``python -m clusters pg18 start bench && export SQLALCHEMY_ULID_POSTGRESQL_URL=$(python -m
clusters pg18 url bench)``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import datetime, timezone

import sqlalchemy as sa
from _servers import POSTGRESQL_URL  # benchmarks/ is on sys.path when a script runs

from sqlalchemy_ulid import ULIDType, ulid_timestamp

START_MS = int(datetime(2025, 1, 1, tzinfo=timezone.utc).timestamp()) * 1000
YEAR_MS = 365 * 86_400_000
TABLE = "bench_sqltime_pg18"

table = sa.Table(
    TABLE,
    sa.MetaData(),
    sa.Column("ulid", ULIDType(), primary_key=True),
    sa.Column("uuid7", sa.Uuid(), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

_EPOCH = "TIMESTAMP '1970-01-01 00:00:00'"


def _get_bytes(data: str) -> str:
    # What ulid_timestamp() compiles to on PostgreSQL 13-17 for a uuid.
    def half(first: int) -> str:
        b = [f"get_byte({data}, {first + i})" for i in range(3)]
        return f"(({b[0]} << 16) | ({b[1]} << 8) | {b[2]})"

    return (
        f"timezone(INTERVAL '0', {_EPOCH} + {half(0)} * INTERVAL '16777.216 seconds'"
        f" + {half(3)} * INTERVAL '1 millisecond')"
    )


def _compiled(column: sa.ColumnElement[object], conn: sa.Connection) -> str:
    return str(
        ulid_timestamp(column).compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True})
    )


def sources(conn: sa.Connection) -> dict[str, str]:
    """Name -> the SQL of the creation time, over the table's columns."""
    return {
        "stored `created_at`": "created_at",
        "`ulid_timestamp(ulid)` (18: two 3-byte casts)": _compiled(table.c.ulid, conn),
        "`ulid_timestamp(ulid)`, SQL before 18 (six `get_byte`)": _get_bytes("uuid_send(ulid)"),
        "one 6-byte cast, split in two products (the cast made twice)": (
            f"timezone(INTERVAL '0', {_EPOCH}"
            " + (substring(uuid_send(ulid) FROM 1 FOR 6)::bigint >> 24)"
            " * INTERVAL '16777.216 seconds'"
            " + (substring(uuid_send(ulid) FROM 1 FOR 6)::bigint & 16777215)"
            " * INTERVAL '1 millisecond')"
        ),
        "one 6-byte cast, one product (inexact after 4253: not used)": (
            f"timezone(INTERVAL '0', {_EPOCH} + substring(uuid_send(ulid) FROM 1 FOR 6)::bigint"
            " * INTERVAL '1 millisecond')"
        ),
        "`ulid_timestamp(uuid7)` (18: `uuid_extract_timestamp`)": _compiled(table.c.uuid7, conn),
        "`ulid_timestamp(uuid7)`, SQL before 18 (six `get_byte`)": _get_bytes("uuid_send(uuid7)"),
    }


def load(conn: sa.Connection, rows: int) -> None:
    """The same instant three ways; random bits from the server."""
    step = YEAR_MS // rows
    ms = f"({START_MS} + g * {step})"
    rand = "uuid_send(gen_random_uuid())"
    v7 = (
        f"encode(substring(int8send({ms}) FROM 3)"
        f" || set_byte(set_byte(substring({rand} FROM 1 FOR 10), 0, 112 + mod(g, 16)::int),"
        " 2, 128 + mod(g, 64)::int), 'hex')::uuid"
    )
    conn.exec_driver_sql(
        f"INSERT INTO {TABLE} (ulid, uuid7, created_at) SELECT "
        f"encode(substring(int8send({ms}) FROM 3) || substring({rand} FROM 1 FOR 10), 'hex')::uuid,"
        f" {v7}, to_timestamp({ms} / 1000.0) FROM generate_series(0::bigint, {rows - 1}) AS g"
    )
    conn.exec_driver_sql(f"ANALYZE {TABLE}")


def per_day(source: str) -> str:
    return (
        f"SELECT CAST(timezone('UTC', {source}) AS date) AS day, count(*) FROM {TABLE}"
        " GROUP BY day ORDER BY day"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the table (reuse it next run)")
    args = parser.parse_args()
    engine = sa.create_engine(POSTGRESQL_URL)
    with engine.connect() as conn:
        version = conn.dialect.server_version_info or ()
        server = conn.exec_driver_sql("SHOW server_version").scalar()
        if version < (18,):
            raise SystemExit(f"PostgreSQL 18 or later needed, this is {server}")
        conn.exec_driver_sql("SET max_parallel_workers_per_gather = 0")
        exists = conn.exec_driver_sql(f"SELECT to_regclass('{TABLE}')").scalar() is not None
        if exists and conn.exec_driver_sql(f"SELECT count(*) FROM {TABLE}").scalar() != args.rows:
            conn.exec_driver_sql(f"DROP TABLE {TABLE}")
            exists = False
        if not exists:
            table.create(conn)
            load(conn, args.rows)
        conn.commit()
        queries = {name: per_day(sql) for name, sql in sources(conn).items()}
        expected = None
        for name, sql in queries.items():  # warm-up, and every source agrees
            got = conn.exec_driver_sql(sql).all()
            assert expected is None or got == expected, name
            expected = got
        times: dict[str, list[float]] = {name: [] for name in queries}
        names = list(queries)
        for r in range(args.repeat):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                began = time.perf_counter()
                conn.exec_driver_sql(queries[name]).all()
                times[name].append((time.perf_counter() - began) * 1000)
        if not args.keep:
            conn.exec_driver_sql(f"DROP TABLE {TABLE}")
            conn.commit()
    engine.dispose()
    reference = min(times["stored `created_at`"])
    print(f"\nPostgreSQL {server}, {args.rows:,} rows, GROUP BY day ({len(expected or [])} groups)")
    print("\n| day from | ms (min) | ms (median) | time / stored `created_at`'s |")
    print("|---|---:|---:|---:|")
    for name in names:
        print(
            f"| {name} | {min(times[name]):,.0f} | {statistics.median(times[name]):,.0f}"
            f" | {min(times[name]) / reference:.2f} |"
        )


if __name__ == "__main__":
    main()
