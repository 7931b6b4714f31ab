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

Times are seconds from Python, one run each (a migration runs once); the
machine is shared, so expect noise of 10-20%.

Run: ``.venv/bin/python benchmarks/bench_backfill.py [--sizes 100000 1000000]``
(URLs from SQLALCHEMY_ULID_POSTGRESQL_URL / SQLALCHEMY_ULID_MYSQL_URL, else the
local test servers).
"""

from __future__ import annotations

import argparse
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
from sqlalchemy_ulid import ULIDType
from sqlalchemy_ulid._generator import MonotonicGenerator
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    args = parser.parse_args()
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
