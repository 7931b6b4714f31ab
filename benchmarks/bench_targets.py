"""The speed targets of the online ops, measured in one run on PostgreSQL and MariaDB.

Run: ``.venv/bin/python benchmarks/bench_targets.py [--rows 1000000] [--writers 4]``
(URLs from SQLALCHEMY_ULID_POSTGRESQL_URL / SQLALCHEMY_ULID_MYSQL_URL, else the
local test servers; ``--servers PostgreSQL`` and ``--ops storage`` measure a
part).

The targets, with ``--writers`` threads inserting single rows throughout,
each INSERT timed:

* ``alter_ulid_storage(online=True)`` takes at most 2.5 times the
  one-transaction op (PostgreSQL: text to ``uuid``, the table of
  ``bench_storage_online.py``; MariaDB: text to ``BINARY(16)``, the table of
  ``bench_storage_mariadb.py``);
* the backfill of ``add_ulid_column(online=True, server_default=True)``
  takes at most 3 times a plain ``UPDATE`` and index build (the table of
  ``bench_backfill.py``);
* no single INSERT of the writers waits more than 0.3 s during an online
  op, at 100,000 rows and at ``--rows`` (it must not grow with the table).

Every online op runs with its defaults (batches sized by time). Each way
runs once on a freshly loaded table (a migration runs once); the helpers
are the three scripts' own. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from collections.abc import Callable
from typing import Any

import bench_backfill
import bench_storage_mariadb
import bench_storage_online
import sqlalchemy as sa
from _servers import URLS  # benchmarks/ is on sys.path when a script runs
from alembic.migration import MigrationContext
from alembic.operations import Operations

import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _writers import Inserters  # tests/_writers.py: _servers put tests/ on sys.path

#: The table size at which the INSERT wait is also measured, to see it not grow.
SMALL = 100_000
RATIO_STORAGE, RATIO_BACKFILL, MAX_WAIT = 2.5, 3.0, 0.3

#: (total seconds, longest INSERT wait) of one way on a freshly loaded table
Timed = tuple[float, float]


def _storage_pg(engine: sa.Engine, rows: int, online: bool, writers: int) -> Timed:
    bench_storage_online._seed(engine, rows)
    result = bench_storage_online._measure(engine, online, writers, None)
    return result["total"], result["max"]


def _storage_mariadb(engine: sa.Engine, rows: int, online: bool, writers: int) -> Timed:
    # bench_storage_mariadb's own 4 writers (AUTO_INCREMENT keys, ref NULL).
    bench_storage_mariadb._load(engine, rows)
    result = bench_storage_mariadb._run(engine, online, None)
    return result["total"], result["max"]


def _backfill(engine: sa.Engine, rows: int, online: bool, writers: int) -> Timed:
    bench_backfill._load(engine, rows)
    run: Callable[[], None] = (
        functools.partial(bench_backfill._in_migration, engine, online=True)
        if online
        else functools.partial(bench_backfill._plain_sql, engine)
    )
    with Inserters(engine, writers, bench_backfill._insert_row, pause=0.01, join=600) as crew:
        time.sleep(0.2)
        began = time.perf_counter()
        run()
        total = time.perf_counter() - began
        time.sleep(0.2)
    return total, max(crew.waits)


#: server -> (op, what it is compared with, target ratio, how to time it)
TARGETS: dict[str, list[tuple[str, str, float, Any]]] = {
    "PostgreSQL": [
        ("alter_ulid_storage", "one transaction", RATIO_STORAGE, _storage_pg),
        ("add_ulid_column backfill", "plain UPDATE + index", RATIO_BACKFILL, _backfill),
    ],
    "MariaDB": [
        ("alter_ulid_storage", "one transaction", RATIO_STORAGE, _storage_mariadb),
        ("add_ulid_column backfill", "plain UPDATE + index", RATIO_BACKFILL, _backfill),
    ],
}


#: --ops name -> the op of TARGETS
OPS = {"storage": "alter_ulid_storage", "backfill": "add_ulid_column backfill"}


def _clean(engine: sa.Engine) -> None:
    if engine.dialect.name == "mysql":
        bench_storage_mariadb._drop(engine)
    with engine.begin() as conn:
        for table in (bench_storage_online.TABLE, bench_backfill.TABLE):
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--servers", nargs="+", default=list(URLS), choices=list(URLS))
    parser.add_argument("--ops", nargs="+", default=list(OPS), choices=list(OPS))
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f}", flush=True)
    lines = []
    for server in args.servers:
        engine = sa.create_engine(URLS[server], poolclass=sa.pool.NullPool)
        with engine.begin() as conn:
            Operations(MigrationContext.configure(conn)).create_ulid_function()
        try:
            for op, against, target, timed in TARGETS[server]:
                if not any(op == OPS[name] for name in args.ops):
                    continue
                _, small_wait = timed(engine, SMALL, True, args.writers)
                base, _ = timed(engine, args.rows, False, args.writers)
                online, wait = timed(engine, args.rows, True, args.writers)
                ratio = online / base
                misses = [
                    what
                    for what, missed in (
                        ("ratio", ratio > target),
                        ("wait", max(small_wait, wait) > MAX_WAIT),
                    )
                    if missed
                ]
                met = "yes" if not misses else "no (" + ", ".join(misses) + ")"
                lines.append(
                    f"| {server} | {op} | {against}: {base:.1f} | {online:.1f} | {ratio:.2f}x "
                    f"| ≤ {target}x, wait ≤ {MAX_WAIT} s | {met} | {small_wait:.3f} "
                    f"| {wait:.3f} |"
                )
                print(lines[-1], f"(load average {os.getloadavg()[0]:.1f})", flush=True)
        finally:
            _clean(engine)
            engine.dispose()
    print(f"\n{args.rows:,} rows, {args.writers} writers; times in seconds\n")
    print(
        "| server | op | one transaction / plain (s) | online (s) | ratio | target | met? "
        f"| longest INSERT wait at {SMALL:,} (s) | at {args.rows:,} (s) |"
    )
    print("|---|---|---|---:|---:|---|---|---:|---:|")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
