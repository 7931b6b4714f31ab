"""op.convert_primary_key_to_ulid on customers + orders, PostgreSQL and MariaDB.

For each server and size it loads ``bench_pk_customers`` (N rows: integer
keys, a creation time, a nullable self-reference ``referrer_id``) and
``bench_pk_orders`` (2N rows, each referencing a customer, indexed), then
runs the op with ``from_time="created_at"`` and times, from the statements
it sends:

* the whole op;
* before the swap: the ULIDs computed, the shadow columns added and
  filled (each statement committed on its own: the tables stay usable);
* the swap: on PostgreSQL from ``LOCK TABLE`` to the commit, the time the
  ACCESS EXCLUSIVE locks are held (readers and writers of both tables
  wait); on MariaDB from the first swap DDL to the last (each statement
  commits; every ``ALTER TABLE`` copies or rebuilds the table).

And, for comparison, the same work by hand in one transaction: ``ADD
COLUMN``, one ``UPDATE`` with server-generated ids, the join ``UPDATE`` for
orders, the constraint swap; its time is all under the lock on PostgreSQL.

With ``--offline`` it also times the op's offline (``--sql``) script, as
Alembic writes it, applied by the real client (``psql -v ON_ERROR_STOP=1``
or ``mariadb --batch``) on the same tables, against the op run online in
the same run.

One run each (a migration runs once); the machine is shared, so expect
noise of 10-20% or more.

Run: ``.venv/bin/python benchmarks/bench_pk_convert.py [--sizes 100000] [--offline]``
(URLs from SQLALCHEMY_ULID_POSTGRESQL_URL / SQLALCHEMY_ULID_MYSQL_URL, else
the local test servers).
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import time
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from _servers import URLS  # benchmarks/ is on sys.path when a script runs
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.dialects import mysql

import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)

CUSTOMERS, ORDERS = "bench_pk_customers", "bench_pk_orders"
START = datetime(2020, 1, 1)
DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql")
CHUNK = 20_000


def _drop(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        for name in (ORDERS, CUSTOMERS, "ulid_key_conversions"):
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {name}"))


def _load(engine: sa.Engine, rows: int) -> None:
    _drop(engine)
    metadata = sa.MetaData()
    customers = sa.Table(
        CUSTOMERS,
        metadata,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("created_at", DATETIME, nullable=False),
        sa.Column("referrer_id", sa.Integer, sa.ForeignKey(f"{CUSTOMERS}.id"), nullable=True),
    )
    orders = sa.Table(
        ORDERS,
        metadata,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column(
            "customer_id", sa.Integer, sa.ForeignKey(f"{CUSTOMERS}.id"), nullable=False, index=True
        ),
    )
    with engine.begin() as conn:
        metadata.create_all(conn)
        for start in range(1, rows + 1, CHUNK):
            conn.execute(
                customers.insert(),
                [
                    {
                        "id": i,
                        "created_at": START + timedelta(milliseconds=i // 3),
                        "referrer_id": i - 1 if i % 4 == 0 else None,
                    }
                    for i in range(start, min(start + CHUNK, rows + 1))
                ],
            )
        for start in range(1, 2 * rows + 1, CHUNK):
            conn.execute(
                orders.insert(),
                [
                    {"id": i, "customer_id": 1 + (i * 7919) % rows}
                    for i in range(start, min(start + CHUNK, 2 * rows + 1))
                ],
            )


def _convert(engine: sa.Engine) -> dict[str, float]:
    marks: dict[str, float] = {}

    def hook(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        text = " ".join(statement.split()).upper()
        now = time.perf_counter()
        if text.startswith("LOCK TABLE") or (
            text.startswith("ALTER TABLE") and "DROP" in text and "swap" not in marks
        ):
            marks.setdefault("swap", now)
        marks["last"] = now

    sa.event.listen(engine, "before_cursor_execute", hook)
    start = time.perf_counter()
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn)
            with context.begin_transaction():
                Operations(context).convert_primary_key_to_ulid(CUSTOMERS, from_time="created_at")
            conn.commit()
    finally:
        sa.event.remove(engine, "before_cursor_execute", hook)
    end = time.perf_counter()
    return {
        "total": end - start,
        "before swap": marks["swap"] - start,
        "swap": end - marks["swap"],
    }


def _by_hand(engine: sa.Engine) -> float:
    """The same conversion written by hand, in one transaction (ids from the server)."""
    postgresql = engine.dialect.name == "postgresql"
    new = "gen_random_uuid()" if postgresql else "RANDOM_BYTES(16)"
    kind = "UUID" if postgresql else "BINARY(16)"
    drop_fk = "DROP CONSTRAINT" if postgresql else "DROP FOREIGN KEY"
    statements = [
        f"ALTER TABLE {CUSTOMERS} ADD COLUMN uid {kind}",
        f"ALTER TABLE {ORDERS} ADD COLUMN cuid {kind}",
        f"UPDATE {CUSTOMERS} SET uid = {new}",
    ]
    with engine.connect() as conn:
        inspector = sa.inspect(conn)
        fks = [(t, f["name"]) for t in (CUSTOMERS, ORDERS) for f in inspector.get_foreign_keys(t)]
    if postgresql:
        statements.append(
            f"UPDATE {ORDERS} o SET cuid = c.uid FROM {CUSTOMERS} c WHERE c.id = o.customer_id"
        )
    else:
        statements.append(
            f"UPDATE {ORDERS} o JOIN {CUSTOMERS} c ON c.id = o.customer_id SET o.cuid = c.uid"
        )
    statements += [f"ALTER TABLE {t} {drop_fk} {name}" for t, name in fks]
    pk = f"DROP CONSTRAINT {CUSTOMERS}_pkey" if postgresql else "DROP PRIMARY KEY"
    statements += [
        f"ALTER TABLE {CUSTOMERS} {pk}",
        f"ALTER TABLE {CUSTOMERS} ADD PRIMARY KEY (uid)",
        f"ALTER TABLE {ORDERS} DROP COLUMN customer_id",
        f"ALTER TABLE {ORDERS} RENAME COLUMN cuid TO customer_id",
        f"CREATE INDEX ix_by_hand ON {ORDERS} (customer_id)",
        f"ALTER TABLE {ORDERS} ADD FOREIGN KEY (customer_id) REFERENCES {CUSTOMERS} (uid)",
    ]
    start = time.perf_counter()
    with engine.begin() as conn:
        for statement in statements:
            conn.exec_driver_sql(statement)
    return time.perf_counter() - start


def _offline(engine: sa.Engine) -> float:
    """The op's ``--sql`` script for these tables, applied by the server's own client."""
    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect_name=engine.dialect.name, opts={"as_sql": True, "output_buffer": buffer}
    )
    Operations(context).convert_primary_key_to_ulid(CUSTOMERS, from_time="created_at")
    url = engine.url
    if engine.dialect.name == "postgresql":
        command = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", url.host or "127.0.0.1",
                   "-p", str(url.port or 5432), "-U", url.username or "postgres",
                   "-d", url.database or "", "-f", "-"]  # fmt: skip
    else:
        command = ["mariadb", "--batch", "-h", url.host or "127.0.0.1", "-P",
                   str(url.port or 3306), "-u", url.username or "root",
                   url.database or ""]  # fmt: skip
    env = {**os.environ, "PGPASSWORD": url.password or "", "MYSQL_PWD": url.password or ""}
    start = time.perf_counter()
    subprocess.run(
        command, input=buffer.getvalue(), text=True, capture_output=True, check=True, env=env
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--offline", action="store_true", help="also time the --sql script")
    args = parser.parse_args()
    if args.offline:
        print("| server | customers | orders | online op (s) | offline script (s) | ratio |")
        print("|---|---:|---:|---:|---:|---:|")
        for server, url in URLS.items():
            engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
            for rows in args.sizes:
                _load(engine, rows)
                online = _convert(engine)["total"]
                _load(engine, rows)
                offline = _offline(engine)
                _drop(engine)
                print(
                    f"| {server} | {rows:,} | {2 * rows:,} | {online:.1f} | {offline:.1f} | "
                    f"{offline / online:.2f}x |",
                    flush=True,
                )
            engine.dispose()
        return
    columns = "op total (s) | before the swap (s) | swap (s) | by hand (s)"
    print(f"| server | customers | orders | {columns} |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for server, url in URLS.items():
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        for rows in args.sizes:
            _load(engine, rows)
            times = _convert(engine)
            _load(engine, rows)
            hand = _by_hand(engine)
            _drop(engine)
            print(
                f"| {server} | {rows:,} | {2 * rows:,} | {times['total']:.1f} | "
                f"{times['before swap']:.1f} | {times['swap']:.1f} | {hand:.1f} |",
                flush=True,
            )
        engine.dispose()


if __name__ == "__main__":
    main()
