"""Storage study: a ULID primary key against UUIDv4 and CHAR(26), at 1M rows.

Run: ``nohup .venv/bin/python benchmarks/bench_storage.py > /tmp/bench_storage.log 2>&1 &``
(options: ``--rows 1000000 --batch 10000 --chart docs/img/storage.png``)

For PostgreSQL and MariaDB, three tables with the same shape (a 16- or
26-byte primary key, an integer column with a secondary index on it):

* ``ULID``: what ``ULIDType()`` creates (``uuid`` / ``BINARY(16)``), values
  from ``new_ulid()`` — time-ordered, so each insert lands at the right edge
  of the primary-key index;
* ``UUIDv4``: the same column type with ``uuid.uuid4()`` values — random, so
  inserts land all over the index;
* ``CHAR(26)``: what ``ULIDType("text")`` creates, with ULID text.

Ids are generated in Python beforehand (not timed), for PostgreSQL as text
(COPY parses it), for MariaDB as bytes / text. Rows go in batches of
``--batch`` (``COPY`` on PostgreSQL, multi-row ``INSERT`` on MariaDB), one
commit per batch. We report the load throughput, the throughput of the last
10% of the load (when the index is largest), and the size of the primary-key
and secondary indexes after ``VACUUM``/``ANALYZE``.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from sqlalchemy_ulid import ULIDType, new_ulid

# A database of its own, so test suites running on the same servers (which
# create and drop tables in "test") cannot disturb a 1M-row load.
BENCH_DB = "ulid_bench"
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
MARIADB_URL = "mysql+pymysql://root@127.0.0.1:3306/test"
KEYS = ("ULID", "UUIDv4", "CHAR(26)")


@dataclass
class Outcome:
    database: str
    key: str
    seconds: float
    tail_rows_per_s: float
    pk_mb: float
    secondary_mb: float
    rows: int

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds


def _ids(key: str, rows: int, as_hex: bool) -> list[Any]:
    """The ids, already in the form the driver writes (conversion not timed)."""
    if key == "CHAR(26)":
        return [str(new_ulid()) for _ in range(rows)]
    make = (lambda: new_ulid().bytes) if key == "ULID" else (lambda: uuid.uuid4().bytes)
    if as_hex:
        # 32 hex digits, which COPY parses into uuid: the client sends text
        # for every key type, so the load measures the server, not the
        # driver's per-type encoding.
        return [make().hex() for _ in range(rows)]
    return [make() for _ in range(rows)]


def _table(key: str) -> sa.Table:
    column_type = ULIDType("text") if key == "CHAR(26)" else ULIDType()
    name = {"ULID": "st_ulid", "UUIDv4": "st_uuid4", "CHAR(26)": "st_char26"}[key]
    table = sa.Table(
        name,
        sa.MetaData(),
        sa.Column("id", column_type, primary_key=True),
        sa.Column("n", sa.Integer, nullable=False),
    )
    sa.Index(f"{name}_n", table.c.n)
    return table


def _load(
    engine: sa.Engine, table: sa.Table, ids: list[Any], batch: int, write: Callable[..., None]
) -> tuple[float, float]:
    """Insert all rows; return (total seconds, rows/s over the last 10%)."""
    tail_start = len(ids) - len(ids) // 10
    tail_seconds, tail_rows = 0.0, 0
    start = time.perf_counter()
    for offset in range(0, len(ids), batch):
        chunk = ids[offset : offset + batch]
        before = time.perf_counter()
        with engine.begin() as conn:
            write(conn, table, chunk, offset)
        if offset + len(chunk) > tail_start:  # batches in the last 10%
            tail_seconds += time.perf_counter() - before
            tail_rows += len(chunk)
    return time.perf_counter() - start, tail_rows / tail_seconds


def _pg_write(conn: sa.Connection, table: sa.Table, chunk: list[Any], offset: int) -> None:
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    with cursor.copy(f"COPY {table.name} (id, n) FROM STDIN") as copy:
        for i, value in enumerate(chunk, offset):
            copy.write_row((value, i))


def _mariadb_write(conn: sa.Connection, table: sa.Table, chunk: list[Any], offset: int) -> None:
    # PyMySQL's executemany turns one INSERT ... VALUES into multi-row inserts.
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    cursor.executemany(
        f"INSERT INTO {table.name} (id, n) VALUES (%s, %s)",
        [(value, i) for i, value in enumerate(chunk, offset)],
    )


def _pg_sizes(conn: sa.Connection, table: sa.Table) -> tuple[float, float]:
    conn.exec_driver_sql(f"VACUUM ANALYZE {table.name}")
    pk = conn.exec_driver_sql(f"SELECT pg_relation_size('{table.name}_pkey')").scalar_one()
    secondary = conn.exec_driver_sql(f"SELECT pg_relation_size('{table.name}_n')").scalar_one()
    return pk / 2**20, secondary / 2**20


def _mariadb_sizes(conn: sa.Connection, table: sa.Table) -> tuple[float, float]:
    conn.exec_driver_sql(f"ANALYZE TABLE {table.name} PERSISTENT FOR ALL")
    rows = conn.exec_driver_sql(
        "SELECT index_name, stat_value * @@innodb_page_size FROM mysql.innodb_index_stats "
        f"WHERE database_name = DATABASE() AND table_name = '{table.name}' "
        "AND stat_name = 'size'"
    ).all()
    sizes = {name: float(value) / 2**20 for name, value in rows}
    # InnoDB clusters the table on its primary key: the PRIMARY "index" is
    # the table itself, and every secondary entry carries a copy of the key.
    return sizes["PRIMARY"], sizes[f"{table.name}_n"]


def _bench_engine(url: str) -> sa.Engine:
    """An engine on BENCH_DB, created on the server if missing."""
    with sa.create_engine(url, isolation_level="AUTOCOMMIT").connect() as conn:
        if conn.dialect.name == "postgresql":
            exists = conn.exec_driver_sql(
                f"SELECT 1 FROM pg_database WHERE datname = '{BENCH_DB}'"
            ).scalar()
            if not exists:
                conn.exec_driver_sql(f"CREATE DATABASE {BENCH_DB}")
        else:
            conn.exec_driver_sql(f"CREATE DATABASE IF NOT EXISTS {BENCH_DB}")
    bench_url = sa.make_url(url).set(database=BENCH_DB)
    return sa.create_engine(bench_url, isolation_level="AUTOCOMMIT")


SERVERS = {
    "postgresql": ("PostgreSQL 15", PG_URL, _pg_write, _pg_sizes),
    "mariadb": ("MariaDB 10.11", MARIADB_URL, _mariadb_write, _mariadb_sizes),
}


def run(rows: int, batch: int, databases: list[str]) -> list[Outcome]:
    outcomes = []
    for name in databases:
        database, url, write, sizes = SERVERS[name]
        engine = _bench_engine(url)
        for key in KEYS:
            table = _table(key)
            table.drop(engine, checkfirst=True)
            table.create(engine)
            ids = _ids(key, rows, as_hex=name == "postgresql")
            seconds, tail = _load(engine, table, ids, batch, write)
            with engine.connect() as conn:
                pk_mb, secondary_mb = sizes(conn, table)
            outcomes.append(Outcome(database, key, seconds, tail, pk_mb, secondary_mb, rows))
            print(f"# {database} {key}: {seconds:.1f}s", flush=True)
            table.drop(engine)
        engine.dispose()
    return outcomes


def table_markdown(outcomes: list[Outcome]) -> str:
    lines = [
        "| database | key | load (rows/s) | last 10% (rows/s) | vs ULID | "
        "primary key (MB) | secondary index (MB) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for outcome in outcomes:
        ulid = next(o for o in outcomes if o.database == outcome.database and o.key == "ULID")
        lines.append(
            f"| {outcome.database} | {outcome.key} | {outcome.rows_per_s:,.0f} | "
            f"{outcome.tail_rows_per_s:,.0f} | {outcome.seconds / ulid.seconds:.2f}x time | "
            f"{outcome.pk_mb:.1f} | {outcome.secondary_mb:.1f} |"
        )
    return "\n".join(lines)


def chart(outcomes: list[Outcome], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    databases = list(dict.fromkeys(o.database for o in outcomes))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.25
    for k, key in enumerate(KEYS):
        picked = [next(o for o in outcomes if o.database == d and o.key == key) for d in databases]
        positions = [i + (k - 1) * width for i in range(len(databases))]
        axes[0].bar(positions, [o.pk_mb + o.secondary_mb for o in picked], width, label=key)
        axes[1].bar(positions, [o.rows_per_s / 1000 for o in picked], width, label=key)
    axes[0].set_title(f"Index size at {outcomes[0].rows:,} rows (PK + secondary, MB)")
    axes[1].set_title("Bulk load throughput (thousand rows/s)")
    for axis in axes:
        axis.set_xticks(range(len(databases)), databases)
        axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--chart", default="docs/img/storage.png")
    parser.add_argument("--databases", default="postgresql,mariadb")
    args = parser.parse_args()
    outcomes = run(args.rows, args.batch, args.databases.split(","))
    print(f"\n{args.rows:,} rows, batches of {args.batch:,}\n")
    print(table_markdown(outcomes))
    if args.chart:
        chart(outcomes, args.chart)
        print(f"\nchart: {args.chart}")


if __name__ == "__main__":
    main()
