"""``alter_ulid_storage`` text -> uuid on PostgreSQL: online against one transaction.

Run: ``SQLALCHEMY_ULID_POSTGRESQL_URL=... .venv/bin/python benchmarks/bench_storage_online.py``
(options: ``--rows 1000000 --writers 4 --batch 5000``)

For each mode a table of ``--rows`` rows (an integer key, a ``CHAR(26)`` ULID
column with a unique constraint and an index) is converted to ``uuid`` while
``--writers`` threads insert one row at a time (with its ULID as text) and
commit, timing each INSERT. Writers bind text until the op's swap begins and
uuid after it. We report the op's total time and the writers' longest and
99th-percentile INSERT wait. Printed as a Markdown table.
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

import sqlalchemy as sa
from _servers import POSTGRESQL_URL  # benchmarks/ is on sys.path when a script runs
from alembic.migration import MigrationContext
from alembic.operations import Operations

import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _writers import Inserters  # tests/_writers.py: _servers put tests/ on sys.path
from sqlalchemy_ulid import new_ulid

TABLE = "bench_storage_online"


def _seed(engine: sa.Engine, rows: int) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {TABLE}")
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (id BIGINT PRIMARY KEY, ref CHAR(26) NOT NULL, n INTEGER)"
        )
        raw = conn.connection.driver_connection
        assert raw is not None
        with raw.cursor().copy(f"COPY {TABLE} (id, ref, n) FROM STDIN") as copy:  # type: ignore[attr-defined]
            for i in range(rows):
                copy.write_row((i, str(new_ulid()), i % 1000))
        conn.exec_driver_sql(f"ALTER TABLE {TABLE} ADD CONSTRAINT uq_{TABLE}_ref UNIQUE (ref)")
        conn.exec_driver_sql(f"CREATE INDEX ix_{TABLE}_n_ref ON {TABLE} (n, ref)")
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f"VACUUM ANALYZE {TABLE}")


class Writers(Inserters):
    """Writers binding the ULID as text until the swap begins, as a uuid after it."""

    def __init__(self, engine: sa.Engine, count: int) -> None:
        super().__init__(engine, count, self._insert, pause=0.005, join=60)
        self.swapping = threading.Event()

    def _insert(self, conn: sa.Connection, key: int) -> None:
        ulid = new_ulid()
        value: Any = ulid.to_uuid() if self.swapping.is_set() else str(ulid)
        try:
            conn.execute(
                sa.text(f"INSERT INTO {TABLE} (id, ref, n) VALUES (:k, :r, 0)"),
                {"k": key, "r": value},
            )
            conn.commit()
        except sa.exc.DBAPIError:
            conn.rollback()  # in flight as the swap changed the type


def _measure(engine: sa.Engine, online: bool, writers: int, batch: int | None) -> dict[str, float]:
    """One mode, timed (``batch=None``: batches sized by time, the op's default)."""
    crew = Writers(engine, writers)

    def hook(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("LOCK TABLE") or (not online and "ALTER COLUMN" in statement):
            crew.swapping.set()

    sa.event.listen(engine, "before_cursor_execute", hook)
    options: dict[str, Any] = {"online": True, "batch_size": batch} if online else {}
    if batch is None:
        options.pop("batch_size", None)
    try:
        with crew:
            time.sleep(0.5)
            started = time.monotonic()
            with engine.connect() as conn:
                context = MigrationContext.configure(conn, opts={"transactional_ddl": True})
                with context.begin_transaction():
                    Operations(context).alter_ulid_storage(
                        TABLE, "ref", from_storage="text", to_storage="auto", **options
                    )
            total = time.monotonic() - started
            time.sleep(0.5)
    finally:
        sa.event.remove(engine, "before_cursor_execute", hook)
    waits = sorted(crew.waits)
    return {
        "total": total,
        "max": waits[-1],
        "p99": waits[int(len(waits) * 0.99)],
        "inserts": len(waits),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=5000)
    args = parser.parse_args()
    engine = sa.create_engine(POSTGRESQL_URL, poolclass=sa.pool.NullPool)
    print("| mode | rows | total (s) | writers' INSERTs | max INSERT wait (ms) | p99 (ms) |")
    print("|---|---:|---:|---:|---:|---:|")
    for online in (False, True):
        _seed(engine, args.rows)
        result = _measure(engine, online, args.writers, args.batch)
        mode = f"online=True, batch_size={args.batch}" if online else "one transaction"
        print(
            f"| {mode} | {args.rows:,} | {result['total']:.1f} | {result['inserts']:,.0f} | "
            f"{result['max'] * 1000:,.0f} | {result['p99'] * 1000:,.1f} |",
            flush=True,
        )
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {TABLE}")


if __name__ == "__main__":
    main()
