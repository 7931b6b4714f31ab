"""MariaDB: ``alter_ulid_storage`` text -> binary, online (shadow table) against one transaction.

Run: ``.venv/bin/python benchmarks/bench_storage_mariadb.py [--rows 1000000]``
(the server from ``SQLALCHEMY_ULID_MYSQL_URL``, else the local test server;
``--batch-size 1000 --online-only`` runs the online op alone with smaller batches).

The table: ``id INT AUTO_INCREMENT`` primary key, ``ref CHAR(26)`` holding ULID
text under a unique key (the column converted), ``note VARCHAR(20)``. Four
writers insert single rows (``ref`` NULL, so every row fits either storage)
throughout, each ``INSERT`` timed. For each way we report the op's total
time, the time of each step (from the statements the op sends), and the
writers' longest and 99th-percentile ``INSERT`` wait, over the whole op and
outside the final swap. The table is loaded afresh before each way.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import sqlalchemy as sa
from _servers import MARIADB_URL
from alembic.migration import MigrationContext
from alembic.operations import Operations

import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _writers import Inserters  # tests/_writers.py: _servers put tests/ on sys.path
from sqlalchemy_ulid import new_ulid

TABLE = "bench_shadow"


def _drop(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        for name in ("del", "upd", "ins"):
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS _{TABLE}__ulid_{name}")
        for name in (TABLE, f"_{TABLE}__new", f"_{TABLE}__old"):
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")


def _load(engine: sa.Engine, rows: int) -> None:
    _drop(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
            "ref CHAR(26) NULL, note VARCHAR(20) NOT NULL, UNIQUE KEY uq_ref (ref)) "
            "ENGINE=InnoDB"
        )
    batch = 10_000
    with engine.connect() as conn:
        for start in range(0, rows, batch):
            values = ", ".join(
                f"('{new_ulid()}', 'n{i}')" for i in range(start, min(rows, start + batch))
            )
            conn.exec_driver_sql(f"INSERT INTO {TABLE} (ref, note) VALUES {values}")
            conn.commit()


def _insert(conn: sa.Connection, key: int) -> None:
    """A writer's row (the table's own key)."""
    conn.exec_driver_sql(f"INSERT INTO {TABLE} (note) VALUES ('writer')")
    conn.commit()


#: statement prefix -> the step it starts (the op's statements, in order)
_STEPS = [
    ("CREATE TABLE", "create shadow"),
    ("ALTER TABLE", "MODIFY shadow / column"),
    ("CREATE TRIGGER", "triggers"),
    ("INSERT IGNORE", "copy"),
    ("SELECT (SELECT COUNT", "count"),
    ("RENAME TABLE", "RENAME"),
    ("DROP TRIGGER", "drop triggers"),
    ("DROP TABLE", "drop old"),
    ("UPDATE", "UPDATE"),
]


def _run(engine: sa.Engine, online: bool, batch_size: int | None = 5000) -> dict[str, Any]:
    """One way, timed (``batch_size=None``: batches sized by time, the op's default)."""
    marks: list[tuple[float, str]] = []

    def mark(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        for prefix, step in _STEPS:
            if statement.startswith(prefix):
                if not marks or marks[-1][1] != step:
                    marks.append((time.monotonic(), step))
                return

    sa.event.listen(engine, "before_cursor_execute", mark)
    writers = Inserters(engine, 4, _insert, pause=0.005, settle=0.5, join=600, daemon=True)
    with writers, engine.connect() as conn:
        started = time.monotonic()
        context = MigrationContext.configure(conn)
        with context.begin_transaction(), context.begin_transaction(_per_migration=True):
            Operations(context).alter_ulid_storage(
                TABLE,
                "ref",
                from_storage="text",
                to_storage="binary",
                online=online,
                batch_size=batch_size,
            )
        ended = time.monotonic()
    sa.event.remove(engine, "before_cursor_execute", mark)
    steps: dict[str, float] = {}
    for (at, step), following in zip(marks, [*marks[1:], (ended, "")], strict=True):
        steps[step] = steps.get(step, 0.0) + following[0] - at
    during = [w for s, w in writers.timed if started <= s <= ended]
    rename = next((at for at, step in marks if step == "RENAME"), None)
    outside = [
        w
        for s, w in writers.timed
        if started <= s <= ended and (rename is None or not rename - 2 <= s <= rename + 2)
    ]
    return {
        "total": ended - started,
        "steps": steps,
        "max": max(during),
        "p99": statistics.quantiles(during, n=100)[98],
        "median": statistics.median(during),
        "outside_max": max(outside) if outside else float("nan"),
        "before_median": statistics.median([w for s, w in writers.timed if s < started]),
        "inserts": len(during),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=5000, help="online=True batch_size")
    parser.add_argument("--online-only", action="store_true")
    args = parser.parse_args()
    engine = sa.create_engine(MARIADB_URL, poolclass=sa.pool.NullPool)
    results = {}
    ways = (("online=True", True), ("one transaction", False))
    for name, online in ways[:1] if args.online_only else ways:
        _load(engine, args.rows)
        results[name] = _run(engine, online, args.batch_size)
        print(name, results[name], flush=True)
    print(f"\n{args.rows:,} rows, text -> binary, 4 writers, batch_size={args.batch_size}\n")
    print("| op | total | longest INSERT wait | p99 | median (before the op) | INSERTs |")
    print("|----|-------|---------------------|-----|------------------------|---------|")
    for name, r in results.items():
        print(
            f"| {name} | {r['total']:.1f} s | {r['max']:.2f} s | {r['p99'] * 1000:.1f} ms | "
            f"{r['median'] * 1000:.1f} ms ({r['before_median'] * 1000:.1f} ms) | {r['inserts']:,} |"
        )
    print("\nonline=True steps:")
    for step, seconds in results["online=True"]["steps"].items():
        print(f"  {step}: {seconds:.2f} s")
    outside = results["online=True"]["outside_max"]
    print(f"  longest INSERT wait outside the RENAME (2 s either side): {outside:.2f} s")
    _drop(engine)  # the test suite may share this database
    engine.dispose()


if __name__ == "__main__":
    main()
