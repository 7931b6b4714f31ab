"""op.alter_uuid7_storage text -> uuid against the hand-written ALTER, PostgreSQL and MariaDB.

For each server it loads one table of N rows (an integer key and ``ref
CHAR(36) NOT NULL`` holding UUIDv7 text, with a unique index) once, copies it
for each run, and times:

* the op: ``op.alter_uuid7_storage(..., from_storage="text", to_storage="auto")``
  (PostgreSQL: its checks, then one ``ALTER ... TYPE uuid USING`` with the
  version check in the expression; MariaDB: its checks, ``MODIFY`` to
  ``VARBINARY(36)``, one ``UPDATE``, ``MODIFY`` to ``UUID``);
* by hand: ``ALTER TABLE ... ALTER COLUMN ref TYPE uuid USING ref::uuid``
  (PostgreSQL) / ``ALTER TABLE ... MODIFY ref UUID NOT NULL`` (MariaDB),
  which checks nothing beyond "is it a UUID" and cannot be resumed.

One run each (a migration runs once); the machine is shared, so expect noise
of 10-20% or more.

Run: ``.venv/bin/python benchmarks/bench_uuid7_storage.py [--rows 1000000]``
(URLs from SQLALCHEMY_ULID_POSTGRESQL_URL / SQLALCHEMY_ULID_MYSQL_URL, else
the local test servers).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import sqlalchemy as sa
from _servers import URLS  # benchmarks/ is on sys.path when a script runs
from alembic.migration import MigrationContext
from alembic.operations import Operations

import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from sqlalchemy_ulid import new_uuid7

SOURCE, TABLE = "bench_u7_source", "bench_u7_keys"
COLUMNS = "(id BIGINT PRIMARY KEY, ref CHAR(36) NOT NULL)"


def _load(engine: sa.Engine, rows: int, batch: int = 10_000) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {SOURCE}")
        conn.exec_driver_sql(f"CREATE TABLE {SOURCE} {COLUMNS}")
    table = sa.table(SOURCE, sa.column("id"), sa.column("ref"))
    for start in range(0, rows, batch):
        chunk = [{"id": i, "ref": str(new_uuid7())} for i in range(start, min(rows, start + batch))]
        with engine.begin() as conn:
            conn.execute(table.insert(), chunk)


def _copy(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {TABLE}")
        conn.exec_driver_sql(f"CREATE TABLE {TABLE} {COLUMNS}")
        conn.exec_driver_sql(f"INSERT INTO {TABLE} SELECT id, ref FROM {SOURCE}")
        conn.exec_driver_sql(f"CREATE UNIQUE INDEX uq_{TABLE}_ref ON {TABLE} (ref)")
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql(f"ANALYZE {TABLE}")


def _by_op(conn: sa.Connection) -> None:
    op = Operations(MigrationContext.configure(conn))
    op.alter_uuid7_storage(TABLE, "ref", from_storage="text", to_storage="auto")


def _by_hand(conn: sa.Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"ALTER TABLE {TABLE} ALTER COLUMN ref TYPE uuid USING ref::uuid")
    else:
        conn.exec_driver_sql(f"ALTER TABLE {TABLE} MODIFY ref UUID NOT NULL")


def _timed(engine: sa.Engine, run: Callable[[sa.Connection], None]) -> float:
    _copy(engine)
    started = time.perf_counter()
    with engine.begin() as conn:
        run(conn)
    seconds = time.perf_counter() - started
    with engine.connect() as conn:
        column = {c["name"]: c for c in sa.inspect(conn).get_columns(TABLE)}["ref"]
        assert isinstance(column["type"], sa.Uuid), column["type"]
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    print("| server | rows | op (s) | by hand (s) |")
    print("|---|---:|---:|---:|")
    for server, url in URLS.items():
        engine = sa.create_engine(url)
        try:
            _load(engine, args.rows)
            op_s = _timed(engine, _by_op)
            hand_s = _timed(engine, _by_hand)
            print(f"| {server} | {args.rows:,} | {op_s:.1f} | {hand_s:.1f} |", flush=True)
        finally:
            with engine.begin() as conn:
                conn.exec_driver_sql(f"DROP TABLE IF EXISTS {TABLE}")
                conn.exec_driver_sql(f"DROP TABLE IF EXISTS {SOURCE}")
            engine.dispose()


if __name__ == "__main__":
    main()
