"""Writers and tailing readers shared by the cluster tests, ``make cluster-demo`` and the benchmark.

A :class:`Writer` inserts rows with client-side ULID keys, one transaction
per row, and records which ids the database acknowledged. A :class:`Tailer`
follows the table in id order behind a fixed horizon (``settle``), as a feed
consumer would. An :class:`Observer` notes when each row first becomes
visible on its server, to measure how far behind the writers a reader is.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from sqlalchemy_ulid import ULID, MonotonicGenerator, ULIDType, after, created_before, created_since


def feed_table(metadata: sa.MetaData, name: str = "feed") -> sa.Table:
    """The table every workload writes: a ULID primary key and who wrote the row."""
    return sa.Table(
        name,
        metadata,
        sa.Column("id", ULIDType(), primary_key=True),
        sa.Column("writer", sa.String(16), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
    )


def server_now(conn: Connection) -> datetime:
    """The serving database's clock (UTC, aware): the reader's "now" for the horizon."""
    if conn.dialect.name == "postgresql":
        value = conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
    else:
        value = conn.execute(sa.text("SELECT UTC_TIMESTAMP(6)")).scalar_one()
    assert isinstance(value, datetime)
    return value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)


def tail_page(
    conn: Connection, table: sa.Table, cursor: ULID | None, settle: timedelta, limit: int = 500
) -> list[ULID]:
    """The next ids after ``cursor``, only those older than ``server_now - settle``.

    This is the fixed-horizon tail that ``paginate(..., settle=...)`` will
    provide (issue: tail-safe paging, not merged on this branch).
    TODO(lead, after merging tail-safe paging): replace the body with
    ``paginate(conn, sa.select(table.c.id), table.c.id, after=cursor,
    limit=limit, settle=settle).items``.
    """
    horizon = server_now(conn) - settle
    stmt = sa.select(table.c.id).where(created_before(table.c.id, horizon))
    if cursor is not None:
        stmt = stmt.where(after(table.c.id, cursor))
    return list(conn.execute(stmt.order_by(table.c.id).limit(limit)).scalars())


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
    """Follow ``table`` in id order on ``engine`` behind ``settle``; collect what it saw."""

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
        self.polls = 0

    def poll(self) -> int:
        """Read every page available now; return how many rows it added."""
        added = 0
        with self.engine.connect() as conn:
            while True:
                page = tail_page(
                    conn, self.table, self.seen[-1] if self.seen else None, self.settle
                )
                self.seen.extend(page)
                added += len(page)
                if len(page) < 500:
                    break
        self.polls += 1
        return added

    def run(self) -> None:
        """Poll every ``interval`` s until stopped."""
        started = time.monotonic()
        while not self.stop_event.is_set() and time.monotonic() - started < self.max_seconds:
            self.poll()
            time.sleep(self.interval)

    def drain(self) -> None:
        """After the writers stopped: wait out the horizon, then read the rest."""
        time.sleep(self.settle.total_seconds() + 0.2)
        self.poll()


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


def auto_settle_refusal(conn: Connection) -> str | None:
    """Why ``settle="auto"`` cannot be sound on this server, or None where it can.

    "auto" holds a tail's horizon behind the oldest transaction still open on
    the server it reads from. That is sound only where every writer's open
    transaction is visible from there:

    * a Galera node knows only its own open transactions; one open on
      another node shows up nowhere until it commits;
    * a PostgreSQL hot standby runs no writers at all: the open transactions
      live on the primary.

    This is the check the library's ``paginate(..., settle="auto")`` should
    refuse with (to be wired by the lead after the tail-safe paging merge).
    """
    if conn.dialect.name == "postgresql":
        if conn.execute(sa.text("SELECT pg_is_in_recovery()")).scalar_one():
            return (
                "a PostgreSQL standby: the transactions still open live on the primary; "
                "give settle a fixed timedelta covering commit latency plus replay lag"
            )
        return None
    if conn.dialect.name in ("mysql", "mariadb"):
        row = conn.execute(sa.text("SHOW GLOBAL VARIABLES LIKE 'wsrep_on'")).first()
        if row is not None and str(row[1]).upper() == "ON":
            return (
                "a Galera node sees only its own open transactions, not those open on "
                "the other nodes; give settle a fixed timedelta covering commit latency "
                "plus certification and apply lag"
            )
    return None


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
