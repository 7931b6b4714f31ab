"""``make cluster-demo``: 3 writers (one per Galera node) and 1 tailing reader, then tear down."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import sqlalchemy as sa

from sqlalchemy_ulid import SettleError, paginate

from ._common import base_dir, start_watchdog
from .galera import Galera
from .workload import Tailer, Writer, create_on_every_node, feed_table

SETTLE = timedelta(seconds=1)


def auto_is_refused(engine: sa.Engine, table: sa.Table) -> bool:
    """Show that ``settle="auto"`` refuses a Galera node; True when it did."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        try:
            paginate(conn, sa.select(table.c.id), table.c.id, settle="auto")
        except SettleError as exc:
            print(f"\nsettle='auto' on node3 is refused: {str(exc).split(': ', 1)[0]}.")
            return True
    print("\nsettle='auto' on node3 was NOT refused")
    return False


def demo(seconds: float = 8.0, *, keep: bool = False) -> int:
    """Run the demo; return 0 when the reader saw every row exactly once, in id order.

    With ``keep`` the cluster stays up afterwards (the demo's table is dropped).
    """
    galera = Galera()
    began = time.monotonic()
    token_before = (galera.state() or {}).get("token")
    print("starting a 3-node Galera cluster on 127.0.0.1:3311-3313 ...", flush=True)
    galera.start()
    token = (galera.state() or {}).get("token")
    if token != token_before:  # a cluster started earlier keeps its own time to live
        start_watchdog(galera.kind, str(token), 600, base_dir() / "galera-watchdog.log")
    engines = [sa.create_engine(url, pool_size=2) for url in galera.urls]
    try:
        print(f"  up in {time.monotonic() - began:.1f} s")
        for line in galera.status():
            print("  " + line)
        metadata = sa.MetaData()
        table = feed_table(metadata, "demo_feed")
        create_on_every_node(metadata, engines)
        refused = auto_is_refused(engines[2], table)
        stop = threading.Event()
        writers = [
            Writer(f"writer{n}", engine, table, hold_ms=20, stop=stop)
            for n, engine in enumerate(engines, start=1)
        ]
        reader = Tailer(engines[2], table, SETTLE, stop=stop)
        print(f"\n3 writers (one per node, ULIDs minted in the client) for {seconds:.0f} s;")
        print(
            "1 reader tails node3 in id order with follow(..., "
            f"settle=timedelta(seconds={SETTLE.total_seconds():.0f})) ..."
        )
        for thread in (*writers, reader):
            thread.start()
        time.sleep(seconds)
        stop.set()
        for thread in (*writers, reader):
            thread.join(60)
        reader.drain()

        print("\nwriters:")
        for writer in writers:
            errors = dict(writer.errors) or "no errors"
            rate = len(writer.acked) / writer.seconds if writer.seconds else 0.0
            print(
                f"  {writer.name} on node{writer.name[-1]}: {len(writer.acked)} rows"
                f" ({rate:.0f}/s), {errors}"
            )
        orders = []
        for number, engine in enumerate(engines, start=1):
            with engine.connect() as conn:
                conn.execute(sa.text("SET SESSION wsrep_sync_wait = 1"))
                orders.append(
                    list(conn.execute(sa.select(table.c.id).order_by(table.c.id)).scalars())
                )
            print(f"  node{number}: {len(orders[-1])} rows")
        written = {row_id for writer in writers for row_id in writer.acked}
        same_order = all(order == orders[0] for order in orders)
        missed = written - set(reader.seen)
        in_order = reader.seen == sorted(set(reader.seen))
        print(f"\nORDER BY id identical on all three nodes: {same_order}")
        print(
            f"reader on node3: {len(reader.seen)} rows in {reader.pages} pages, "
            f"{len(missed)} missed, in id order without repeats: {in_order}"
        )
        ok = refused and same_order and not missed and in_order and set(orders[0]) == written
        print("OK" if ok else "FAILED")
        return 0 if ok else 1
    finally:
        if keep:
            with engines[0].begin() as conn:
                conn.execute(sa.text("DROP TABLE IF EXISTS demo_feed"))
        for engine in engines:
            engine.dispose()
        if not keep:
            print("\ntearing the cluster down ...", flush=True)
            galera.stop()
        print(f"done in {time.monotonic() - began:.1f} s")
