"""op.add_ulid_column on 100k and 1M rows, PostgreSQL and MariaDB.

For each server and size it loads a table of integer keys and unindexed
creation times (about 3 rows per millisecond: many ties), then times:

* ``add_ulid_column``: one ordered streaming pass into a temporary table
  (before the first DDL), then ``ADD COLUMN``, one joined ``UPDATE``,
  ``NOT NULL``, unique constraint. On PostgreSQL the time from ``ADD
  COLUMN`` to the commit is how long the ACCESS EXCLUSIVE lock is held:
  readers and writers wait that long;
* what users write by hand instead (and what this op did before): keyset
  batches ``ORDER BY created_at, id LIMIT 10000`` re-queried per batch (a
  sort of the whole table each time, without an index on the time) and an
  ``UPDATE ... WHERE id = ?`` per row (executemany). Only at 100k rows:
  it is quadratic in the SELECTs.

With ``--online`` it compares, on the same table and in the same run, while
4 writer threads insert single rows (each INSERT timed):

* ``add_ulid_column(server_default=True)``, the one-transaction op;
* ``add_ulid_column(online=True, server_default=True)``: phases, batched
  backfill (rows/s from its progress reports);
* the same work as plain SQL: ``UPDATE t SET col = <generated id>`` (the
  server's generator) and the unique index build, one transaction;

and reports each one's total time and the longest INSERT wait.

Times are seconds from Python, one run each (a migration runs once); the
machine is shared, so expect noise of 10-20%.

Run: ``.venv/bin/python benchmarks/bench_backfill.py [--sizes 100000 1000000]``
or ``... --online [--servers PostgreSQL MariaDB]``
(URLs from SQLALCHEMY_ULID_POSTGRESQL_URL / SQLALCHEMY_ULID_MYSQL_URL, else the
local test servers).
"""

from __future__ import annotations

import argparse
import functools
import random
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa
from _servers import URLS  # benchmarks/ is on sys.path when a script runs
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.dialects import mysql

import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _writers import Inserters
from sqlalchemy_ulid import ULIDType
from sqlalchemy_ulid._dialects import dialect_row
from sqlalchemy_ulid._generator import MonotonicGenerator
from sqlalchemy_ulid._kinds import ULID_KEYS
from sqlalchemy_ulid._time import to_ms

TABLE = "bench_backfill"
BATCH = 10_000
START = datetime(2020, 1, 1)
DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql")


def _load(engine: sa.Engine, rows: int) -> None:
    metadata = sa.MetaData()
    table = sa.Table(
        TABLE,
        metadata,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("created_at", DATETIME, nullable=False),
        sa.Column("note", sa.String(20)),
    )
    rng = random.Random(7)
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE IF EXISTS {TABLE}"))
        metadata.create_all(conn)
        for start in range(0, rows, 50_000):
            conn.execute(
                table.insert(),
                [
                    {
                        "id": i,
                        "created_at": START + timedelta(milliseconds=rng.randrange(rows // 3)),
                        "note": "x",
                    }
                    for i in range(start, min(rows, start + 50_000))
                ],
            )


def _timed_op(engine: sa.Engine) -> tuple[float, float]:
    """Run add_ulid_column; return (total seconds, seconds from ADD COLUMN to commit)."""
    marks: dict[str, float] = {}

    def mark(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith(f"ALTER TABLE {TABLE} ADD COLUMN") and "add" not in marks:
            marks["add"] = time.perf_counter()

    sa.event.listen(engine, "before_cursor_execute", mark)
    try:
        began = time.perf_counter()
        with engine.begin() as conn:
            Operations(MigrationContext.configure(conn)).add_ulid_column(
                TABLE, "public_id", "created_at", batch_size=BATCH
            )
        ended = time.perf_counter()
    finally:
        sa.event.remove(engine, "before_cursor_execute", mark)
    return ended - began, ended - marks["add"]


def _by_hand(engine: sa.Engine) -> float:
    """Keyset batches re-sorted per batch, an UPDATE per row: the usual script."""
    began = time.perf_counter()
    target = sa.table(TABLE, sa.column("id"), sa.column("created_at"), sa.column("public_id"))
    with engine.begin() as conn:
        Operations(MigrationContext.configure(conn)).add_column(
            TABLE, sa.Column("public_id", ULIDType(), nullable=True)
        )
        now = [0]
        generate = MonotonicGenerator(clock=lambda: now[0])
        kind = ULIDType()
        bind = kind.bind_processor(conn.dialect)
        last: tuple[Any, Any] | None = None
        while True:
            query = (
                sa.select(target.c.created_at, target.c.id)
                .order_by(target.c.created_at, target.c.id)
                .limit(BATCH)
            )
            if last is not None:
                query = query.where(sa.tuple_(target.c.created_at, target.c.id) > sa.tuple_(*last))
            rows = conn.execute(query).all()
            if not rows:
                break
            updates = []
            for created_at, key in rows:
                now[0] = to_ms(created_at.replace(tzinfo=timezone.utc))
                value = generate()
                updates.append({"key": key, "value": bind(value) if bind else value})
            conn.execute(sa.text(f"UPDATE {TABLE} SET public_id = :value WHERE id = :key"), updates)
            last = (rows[-1][0], rows[-1][1])
    return time.perf_counter() - began


def _insert_row(conn: sa.Connection, key: int) -> None:
    conn.exec_driver_sql(
        f"INSERT INTO {TABLE} (id, created_at, note) VALUES ({key}, '2030-01-01 00:00:00', 'w')"
    )
    conn.commit()


def _in_migration(engine: sa.Engine, **options: Any) -> None:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn)
        with context.begin_transaction(), context.begin_transaction(_per_migration=True):
            Operations(context).add_ulid_column(
                TABLE, "public_id", "created_at", server_default=True, **options
            )


def _plain_sql(engine: sa.Engine) -> None:
    row = dialect_row(engine.dialect)
    server = ULID_KEYS.generator(row)
    assert server is not None
    kind = row.kind("auto")
    column = ULIDType().load_dialect_impl(engine.dialect).compile(dialect=engine.dialect)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"ALTER TABLE {TABLE} ADD COLUMN public_id {column}")
        conn.exec_driver_sql(f"UPDATE {TABLE} SET public_id = {server.default[kind]}")
        conn.exec_driver_sql(f"CREATE UNIQUE INDEX uq_{TABLE}_public_id ON {TABLE} (public_id)")


def _rate_into(rates: list[float]) -> Any:
    return lambda progress: rates.append(progress.rate)


def _online_table(servers: list[str], sizes: list[int]) -> None:
    print(
        "| server | rows | op | total (s) | longest INSERT wait (s) | INSERTs "
        "| backfill rows/s | total / plain UPDATE |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for server in servers:
        engine = sa.create_engine(URLS[server])
        with engine.begin() as conn:
            Operations(MigrationContext.configure(conn)).create_ulid_function()
        try:
            for rows in sizes:
                results: dict[str, tuple[float, float, int, str]] = {}
                rates: list[float] = []
                runs: list[tuple[str, Any]] = [
                    ("plain UPDATE + index", functools.partial(_plain_sql, engine)),
                    (
                        "add_ulid_column",
                        functools.partial(_in_migration, engine, batch_size=BATCH),
                    ),
                    (
                        "online=True",
                        functools.partial(
                            _in_migration, engine, online=True, progress=_rate_into(rates)
                        ),
                    ),
                ]
                for name, run in runs:
                    _load(engine, rows)
                    with engine.begin() as conn:
                        conn.exec_driver_sql(f"ANALYZE TABLE {TABLE}" if server == "MariaDB"
                                             else f"ANALYZE {TABLE}")  # fmt: skip
                    with Inserters(engine, 4, _insert_row, pause=0.01, join=600) as writers:
                        time.sleep(0.2)
                        began = time.perf_counter()
                        run()
                        total = time.perf_counter() - began
                        time.sleep(0.2)
                    rate = f"{rates[-1]:,.0f}" if name == "online=True" and rates else "—"
                    results[name] = (total, max(writers.waits), len(writers.waits), rate)
                plain = results["plain UPDATE + index"][0]
                for name, (total, wait, count, rate) in results.items():
                    print(
                        f"| {server} | {rows:,} | {name} | {total:.1f} | {wait:.3f} | {count} "
                        f"| {rate} | {total / plain:.2f}x |",
                        flush=True,
                    )
        finally:
            with engine.begin() as conn:
                conn.execute(sa.text(f"DROP TABLE IF EXISTS {TABLE}"))
            engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--online", action="store_true", help="compare online=True (see above)")
    parser.add_argument("--servers", nargs="+", default=list(URLS), choices=list(URLS))
    args = parser.parse_args()
    if args.online:
        _online_table(args.servers, args.sizes)
        return
    print(
        "| server | rows | add_ulid_column (s) | per 1M rows (s) | before the first DDL (s) "
        "| ADD COLUMN to commit (s) | by hand (s) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for server, url in URLS.items():
        engine = sa.create_engine(url)
        try:
            for rows in args.sizes:
                _load(engine, rows)
                total, altering = _timed_op(engine)
                hand = "—"
                if rows <= 100_000:
                    _load(engine, rows)
                    hand = f"{_by_hand(engine):.1f}"
                print(
                    f"| {server} | {rows:,} | {total:.1f} | {total * 1_000_000 / rows:.1f} "
                    f"| {total - altering:.1f} | {altering:.1f} | {hand} |",
                    flush=True,
                )
        finally:
            with engine.begin() as conn:
                conn.execute(sa.text(f"DROP TABLE IF EXISTS {TABLE}"))
            engine.dispose()


if __name__ == "__main__":
    main()
