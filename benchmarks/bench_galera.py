"""Insert throughput on a 3-node Galera cluster: ULID vs UUIDv4 vs AUTO_INCREMENT keys.

Run (starts the cluster from ``clusters/``, tears it down at the end):
``.venv/bin/python benchmarks/bench_galera.py --rows 30000 --size-rows 1000000``

Three writers, one per node, insert the same number of rows into one table
per key type, in transactions of ``--batch`` rows (a multi-row INSERT each):

* ``ULID``: ``ULIDType()`` (``BINARY(16)``), ids minted in the client by one
  ``MonotonicGenerator`` per writer (each writer is one application server);
* ``UUIDv4``: the same column with ``uuid.uuid4()`` values;
* ``AUTO_INCREMENT``: ``BIGINT AUTO_INCREMENT``, ids made by the node, with
  Galera's ``wsrep_auto_increment_control`` giving each node its own offset
  (increment 3, offsets 1/2/3).

A transaction that fails certification (error 1213) or hits a duplicate key
(1062) is retried with new ids; we count both, and the nodes'
``wsrep_local_cert_failures`` + ``wsrep_local_bf_aborts``. Key types run in
turns (ULID, UUIDv4, AUTO_INCREMENT, then again) so load from the other
engineers on the machine spreads over all three; the table reports the
median round.

Then, per key type, ``--size-rows`` rows (the same three writers, batches of
``--size-batch``) and the size of the primary key (InnoDB clusters the rows
on it) and of a secondary index on an integer column, from
``mysql.innodb_index_stats`` after ``ANALYZE TABLE ... PERSISTENT FOR ALL``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the cluster harness

from clusters import Galera
from clusters.galera import node_status
from clusters.workload import create_on_every_node

from sqlalchemy_ulid import MonotonicGenerator, ULIDType

KEYS = ("ULID", "UUIDv4", "AUTO_INCREMENT")


def make_table(metadata: sa.MetaData, key: str) -> sa.Table:
    name = "bench_" + key.lower()
    if key == "AUTO_INCREMENT":
        id_column = sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True)
    else:
        id_column = sa.Column("id", ULIDType(), primary_key=True)
    return sa.Table(
        name,
        metadata,
        id_column,
        sa.Column("n", sa.Integer, nullable=False, index=True),
        sa.Column("body", sa.String(64), nullable=False),
    )


def id_maker(key: str) -> Callable[[], Any] | None:
    if key == "ULID":
        return MonotonicGenerator()
    if key == "UUIDv4":
        return uuid.uuid4
    return None


@dataclass
class WriterResult:
    rows: int = 0
    retries: dict[str, int] = field(default_factory=dict)


def write(
    engine: sa.Engine, table: sa.Table, key: str, rows: int, batch: int, base: int
) -> WriterResult:
    result = WriterResult()
    make = id_maker(key)
    body = "x" * 64
    n = base
    while result.rows < rows:
        size = min(batch, rows - result.rows)
        for _attempt in range(20):
            values = [{"n": n + i, "body": body} for i in range(size)]
            if make is not None:
                for row in values:
                    row["id"] = make()
            try:
                with engine.begin() as conn:
                    conn.execute(table.insert(), values)
                break
            except sa.exc.DBAPIError as exc:
                code = exc.orig.args[0] if exc.orig is not None and exc.orig.args else None
                name = {1213: "certification/deadlock", 1062: "duplicate key"}.get(code)
                if name is None:
                    raise
                result.retries[name] = result.retries.get(name, 0) + 1
        else:
            raise RuntimeError("20 retries in a row")
        result.rows += size
        n += size
    return result


def conflicts(galera: Galera) -> int:
    total = 0
    for node in galera.nodes:
        status = node_status(node)
        total += int(status["wsrep_local_cert_failures"]) + int(status["wsrep_local_bf_aborts"])
    return total


@dataclass
class Round:
    key: str
    rows: int
    seconds: float
    retries: dict[str, int]
    cert_failures: int

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds


def run_writers(
    galera: Galera, engines: list[sa.Engine], table: sa.Table, key: str, rows: int, batch: int
) -> Round:
    # The first writer takes the remainder: exactly ``rows`` rows in all.
    shares = [rows // len(engines)] * len(engines)
    shares[0] += rows - sum(shares)
    results: list[WriterResult] = [WriterResult() for _ in engines]
    errors: list[BaseException] = []

    def target(index: int) -> None:
        try:
            base = index * 10_000_000  # each writer its own range of n
            results[index] = write(engines[index], table, key, shares[index], batch, base)
        except BaseException as exc:
            errors.append(exc)

    before = conflicts(galera)
    threads = [threading.Thread(target=target, args=(i,)) for i in range(len(engines))]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Count the time until every node has applied everything.
    for engine in engines:
        with engine.connect() as conn:
            conn.execute(sa.text("SET SESSION wsrep_sync_wait = 1"))
            conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
    seconds = time.perf_counter() - began
    if errors:
        raise errors[0]
    retries: dict[str, int] = {}
    for result in results:
        for name, count in result.retries.items():
            retries[name] = retries.get(name, 0) + count
    return Round(key, rows, seconds, retries, conflicts(galera) - before)


def index_sizes(engine: sa.Engine, table: sa.Table) -> tuple[float, float]:
    with engine.connect() as conn:
        conn.execute(sa.text(f"ANALYZE TABLE {table.name} PERSISTENT FOR ALL")).all()
        page = conn.execute(sa.text("SELECT @@innodb_page_size")).scalar_one()
        sizes = dict(
            conn.execute(
                sa.text(
                    "SELECT index_name, stat_value FROM mysql.innodb_index_stats"
                    " WHERE database_name = DATABASE() AND table_name = :t AND stat_name = 'size'"
                ),
                {"t": table.name},
            ).all()
        )
    primary = sizes.pop("PRIMARY") * page / 2**20
    secondary = sum(sizes.values()) * page / 2**20
    return primary, secondary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=30_000, help="rows per key type per round")
    parser.add_argument("--batch", type=int, default=10, help="rows per transaction")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size-rows", type=int, default=1_000_000, help="rows for the size table")
    parser.add_argument("--size-batch", type=int, default=1000)
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = parser.parse_args()

    galera = Galera()
    began = time.monotonic()
    galera.start()
    print(f"galera: 3 nodes up in {time.monotonic() - began:.1f} s", flush=True)
    engines = [sa.create_engine(url, pool_size=2) for url in galera.urls]
    try:
        rounds: dict[str, list[Round]] = {key: [] for key in KEYS}
        for number in range(args.rounds):
            for key in KEYS:
                metadata = sa.MetaData()
                table = make_table(metadata, key)
                metadata.drop_all(engines[0])
                create_on_every_node(metadata, engines)
                outcome = run_writers(galera, engines, table, key, args.rows, args.batch)
                rounds[key].append(outcome)
                print(
                    f"round {number + 1} {key:15} {outcome.rows_per_s:8,.0f} rows/s"
                    f"  retries {outcome.retries or 0}  cert failures {outcome.cert_failures}",
                    flush=True,
                )
                metadata.drop_all(engines[0])

        sizes: dict[str, tuple[float, float, float]] = {}
        if args.size_rows:
            for key in KEYS:
                metadata = sa.MetaData()
                table = make_table(metadata, key)
                metadata.drop_all(engines[0])
                create_on_every_node(metadata, engines)
                outcome = run_writers(galera, engines, table, key, args.size_rows, args.size_batch)
                primary, secondary = index_sizes(engines[0], table)
                sizes[key] = (primary, secondary, outcome.rows_per_s)
                print(
                    f"size {key:15} {outcome.rows:,} rows at {outcome.rows_per_s:,.0f} rows/s:"
                    f" primary {primary:.1f} MB, secondary {secondary:.1f} MB",
                    flush=True,
                )
                metadata.drop_all(engines[0])

        print(
            f"\n### Galera, 3 nodes, 3 writers, {args.rows:,} rows per key type per round,"
            f" {args.batch}-row transactions (median of {args.rounds} rounds)\n"
        )
        print("| key | rows/s | vs ULID | retries (all rounds) | cert. failures (all rounds) |")
        print("|---|---:|---:|---:|---:|")
        base = statistics.median(r.rows_per_s for r in rounds["ULID"])
        for key in KEYS:
            rate = statistics.median(r.rows_per_s for r in rounds[key])
            retries = sum(sum(r.retries.values()) for r in rounds[key])
            cert = sum(r.cert_failures for r in rounds[key])
            print(f"| {key} | {rate:,.0f} | {rate / base:.2f}x | {retries} | {cert} |")
        if sizes:
            print(f"\n### Index sizes at {args.size_rows:,} rows (node 1)\n")
            print(
                "| key | load (rows/s) | primary key, with the rows (MB) | secondary index (MB) |"
            )
            print("|---|---:|---:|---:|")
            for key, (primary, secondary, rate) in sizes.items():
                print(f"| {key} | {rate:,.0f} | {primary:.1f} | {secondary:.1f} |")
    finally:
        for engine in engines:
            engine.dispose()
        if not args.keep:
            galera.stop()


if __name__ == "__main__":
    main()
