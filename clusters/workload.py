"""Writers and tailing readers shared by the cluster tests, ``make cluster-demo`` and the benchmark.

A :class:`Writer` inserts rows with client-side ULID keys, one transaction
per row, and records which ids the database acknowledged. A :class:`Tailer`
follows the table in id order with the library's own feed API
(``follow(..., settle=timedelta(...))``), as a feed consumer would. An
:class:`Observer` notes when each row first becomes visible on its server, to
measure how far behind the writers a reader is.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sqlalchemy_ulid import ULID, MonotonicGenerator, ULIDType, created_since, follow, paginate


def feed_table(metadata: sa.MetaData, name: str = "feed") -> sa.Table:
    """The table every workload writes: a ULID primary key and who wrote the row."""
    return sa.Table(
        name,
        metadata,
        sa.Column("id", ULIDType(), primary_key=True),
        sa.Column("writer", sa.String(16), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
    )


def now_ms() -> int:
    """Wall clock in Unix milliseconds (the clock the ULIDs carry)."""
    return time.time_ns() // 1_000_000


def error_kind(exc: BaseException) -> str:
    """A short name for a database error: its server error code, or its class."""
    orig = getattr(exc, "orig", exc)
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int):
        return {
            1062: "duplicate key (1062)",
            1213: "deadlock/certification (1213)",
            1205: "lock wait timeout (1205)",
            1047: "node not ready (1047)",
            2003: "cannot connect (2003)",
            2006: "server gone (2006)",
            2013: "connection lost (2013)",
        }.get(args[0], f"error {args[0]}")
    sqlstate = getattr(orig, "sqlstate", None)
    return f"sqlstate {sqlstate}" if sqlstate else type(orig).__name__


class Writer(threading.Thread):
    """Insert rows into ``table`` on ``engine``, one transaction each, until stopped.

    Each writer is one application server: it has its own ULID generator.
    ``hold_ms`` keeps each transaction open for a random time up to that
    long between minting the id and committing, as real request handlers
    do; that is what makes id order differ from commit order.
    """

    def __init__(
        self,
        name: str,
        engine: Engine,
        table: sa.Table,
        *,
        rows: int | None = None,
        hold_ms: float = 0.0,
        stop: threading.Event | None = None,
        max_seconds: float = 120.0,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.engine, self.table, self.rows, self.hold_ms = engine, table, rows, hold_ms
        self.stop_event = stop or threading.Event()
        self.max_seconds = max_seconds
        self.generator = MonotonicGenerator()
        self.acked: dict[ULID, int] = {}  # id -> Unix ms when the commit returned
        self.in_doubt: set[ULID] = set()  # commit sent, connection lost: maybe written
        self.errors: Counter[str] = Counter()
        self.seconds = 0.0

    def run(self) -> None:
        """Write until stopped, ``rows`` are written or ``max_seconds`` have passed."""
        started = time.monotonic()
        seq = 0
        rng = random.Random(self.name)
        while not self.stop_event.is_set() and (self.rows is None or seq < self.rows):
            if time.monotonic() - started > self.max_seconds:
                break
            seq += 1
            new_id = None
            inserted = False
            try:
                with self.engine.connect() as conn:
                    new_id = self.generator()
                    conn.execute(self.table.insert().values(id=new_id, writer=self.name, seq=seq))
                    inserted = True
                    if self.hold_ms:
                        time.sleep(rng.uniform(0, self.hold_ms) / 1000)
                    conn.commit()
                    self.acked[new_id] = now_ms()
            except Exception as exc:  # driver errors too: a dying node fails the pool's reset
                self.errors[error_kind(exc)] += 1
                if inserted and new_id is not None and new_id not in self.acked:
                    # The commit may have reached the cluster before the error.
                    self.in_doubt.add(new_id)
                time.sleep(0.05)
        self.seconds = time.monotonic() - started


class Tailer(threading.Thread):
    """Follow ``table`` in id order on ``engine`` with ``follow(..., settle=settle)``.

    ``seen`` collects every id delivered, in delivery order. Each poll runs on
    a fresh autocommit connection (what ``follow`` does with an engine), so
    the server's default isolation level does not matter.
    """

    PAGE = 500

    def __init__(
        self,
        engine: Engine,
        table: sa.Table,
        settle: timedelta,
        *,
        stop: threading.Event,
        interval: float = 0.02,
        max_seconds: float = 180.0,
    ) -> None:
        super().__init__(name=f"tail-{settle.total_seconds()}", daemon=True)
        self.engine, self.table, self.settle = engine, table, settle
        self.stop_event, self.interval, self.max_seconds = stop, interval, max_seconds
        self.seen: list[ULID] = []
        self.pages = 0
        self.failure: Exception | None = None  # what ended run() early, raised by drain()

    def run(self) -> None:
        """Follow the table until ``stop`` is set (or ``max_seconds`` have passed)."""
        # A bound in time even if nobody sets stop: the timer sets it.
        deadline = threading.Timer(self.max_seconds, self.stop_event.set)
        deadline.daemon = True
        deadline.start()
        try:
            for page in follow(
                self.engine,
                sa.select(self.table.c.id),
                self.table.c.id,
                after=self.seen[-1] if self.seen else None,
                settle=self.settle,
                limit=self.PAGE,
                interval=self.interval,
                stop=self.stop_event,
            ):
                self.seen.extend(page.items)
                self.pages += 1
        except Exception as exc:  # kept for drain(), which the test or demo calls
            self.failure = exc
        finally:
            deadline.cancel()

    def drain(self) -> None:
        """After the writers stopped: wait out the horizon, then read the rest."""
        if self.failure is not None:
            raise self.failure
        time.sleep(self.settle.total_seconds() + 0.2)
        reader = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        with reader.connect() as conn:
            while True:
                page = paginate(
                    conn,
                    sa.select(self.table.c.id),
                    self.table.c.id,
                    after=self.seen[-1] if self.seen else None,
                    settle=self.settle,
                    limit=self.PAGE,
                )
                self.seen.extend(page.items)
                self.pages += bool(page.items)
                if not page.has_more:
                    return


class Observer(threading.Thread):
    """Note when each row first shows up on ``engine`` (scanning a recent window, no cursor)."""

    def __init__(
        self,
        engine: Engine,
        table: sa.Table,
        *,
        stop: threading.Event,
        window: timedelta = timedelta(seconds=10),
        interval: float = 0.01,
        max_seconds: float = 180.0,
    ) -> None:
        super().__init__(name="observer", daemon=True)
        self.engine, self.table, self.window = engine, table, window
        self.stop_event, self.interval, self.max_seconds = stop, interval, max_seconds
        self.visible_at: dict[ULID, int] = {}

    def run(self) -> None:
        """Scan the recent window every ``interval`` s until stopped."""
        started = time.monotonic()
        with self.engine.connect() as conn:
            while not self.stop_event.is_set() and time.monotonic() - started < self.max_seconds:
                since = datetime.now(timezone.utc) - self.window
                ids = (
                    conn.execute(
                        sa.select(self.table.c.id).where(created_since(self.table.c.id, since))
                    )
                    .scalars()
                    .all()
                )
                conn.rollback()  # a fresh snapshot for the next scan
                seen_ms = now_ms()
                for row_id in ids:
                    self.visible_at.setdefault(row_id, seen_ms)
                time.sleep(self.interval)

    def lags_ms(self) -> list[int]:
        """For each row seen: ms from its id's timestamp to its first sighting here."""
        return [seen - row_id.timestamp_ms for row_id, seen in self.visible_at.items()]


def percentile(values: list[int] | list[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``values`` by nearest rank; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def create_on_every_node(metadata: sa.MetaData, engines: list[Engine]) -> None:
    """Create ``metadata``'s tables through the first node; return once every node has them.

    Galera runs DDL in total order on every node, but the other nodes apply it
    a moment after the first one returns; a writer on another node could
    otherwise still find no table. ``wsrep_sync_wait = 1`` makes a read wait
    until the node applied everything committed before it (on PostgreSQL,
    where engines are a primary and its standbys, use the replay position).
    """
    metadata.create_all(engines[0])
    for engine in engines[1:]:
        with engine.connect() as conn:
            conn.execute(sa.text("SET SESSION wsrep_sync_wait = 1"))
            for table in metadata.sorted_tables:
                conn.execute(sa.select(sa.literal(1)).select_from(table).limit(0)).all()
