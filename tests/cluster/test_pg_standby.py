"""ULID keys on a real PostgreSQL primary + streaming hot standby."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from clusters import PgStandby
from clusters.workload import (
    Observer,
    Tailer,
    Writer,
    feed_table,
    percentile,
)

from sqlalchemy_ulid import (
    ULID,
    MonotonicGenerator,
    SettleError,
    created_between,
    created_since,
    follow,
    new_ulid,
    paginate,
)

pytestmark = pytest.mark.cluster

Engines = tuple[sa.Engine, sa.Engine]


def wait_replayed(primary: sa.Engine, standby: sa.Engine, timeout: float = 30.0) -> None:
    """Wait until the standby replayed everything the primary has written so far."""
    with primary.connect() as conn:
        lsn = conn.execute(sa.text("SELECT pg_current_wal_lsn()::text")).scalar_one()
    deadline = time.monotonic() + timeout
    with standby.connect() as conn:
        while True:
            done = conn.execute(
                sa.text("SELECT pg_last_wal_replay_lsn() >= CAST(:lsn AS pg_lsn)"), {"lsn": lsn}
            ).scalar_one()
            conn.rollback()
            if done:
                return
            assert time.monotonic() < deadline, "the standby did not catch up"
            time.sleep(0.02)


@pytest.fixture
def feed(pg_engines: Engines, request: pytest.FixtureRequest) -> Iterator[sa.Table]:
    primary, standby = pg_engines
    metadata = sa.MetaData()
    table = feed_table(metadata, "feed_" + request.node.name.removeprefix("test_")[:40])
    metadata.drop_all(primary)
    metadata.create_all(primary)
    wait_replayed(primary, standby)
    yield table
    metadata.drop_all(primary)


def tail(conn: sa.Connection, table: sa.Table, cursor: object, settle: timedelta) -> list[object]:
    """One poll of a tailing reader: the library's paginate(..., settle=...)."""
    page = paginate(conn, sa.select(table.c.id), table.c.id, after=cursor, settle=settle)
    return list(page.items)


def ids(engine: sa.Engine, table: sa.Table) -> list[object]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(table.c.id).order_by(table.c.id)).scalars())


def test_the_standby_streams_and_refuses_writes(pg_engines: Engines, feed: sa.Table) -> None:
    primary, standby = pg_engines
    with primary.connect() as conn:
        assert conn.execute(sa.text("SELECT pg_is_in_recovery()")).scalar_one() is False
    with standby.connect() as conn:
        assert conn.execute(sa.text("SELECT pg_is_in_recovery()")).scalar_one() is True
        with pytest.raises(sa.exc.InternalError, match="read-only transaction"):
            conn.execute(feed.insert().values(id=new_ulid(), writer="x", seq=0))


def test_keyset_pages_and_created_since_are_served_by_the_standby(
    pg_engines: Engines, feed: sa.Table
) -> None:
    primary, standby = pg_engines
    start = 1_760_000_000_000  # one row per 10 ms from here
    ticks = iter(range(start, start + 10 * 400, 10))
    make = MonotonicGenerator(clock=lambda: next(ticks))
    rows = [{"id": make(), "writer": "primary", "seq": n} for n in range(400)]
    with primary.begin() as conn:
        conn.execute(feed.insert(), rows)
    wait_replayed(primary, standby)

    expected = ids(primary, feed)
    assert len(expected) == 400
    pages, cursor = [], None
    with standby.connect() as conn:
        for _ in range(20):
            page = paginate(conn, sa.select(feed.c.id), feed.c.id, after=cursor, limit=64)
            pages.append(list(page.items))
            if not page.has_more:
                break
            cursor = page.next_cursor
        since = datetime.fromtimestamp((start + 10 * 300) / 1000, timezone.utc)
        recent = (
            conn.execute(
                sa.select(feed.c.seq).where(created_since(feed.c.id, since)).order_by(feed.c.id)
            )
            .scalars()
            .all()
        )
        window = conn.execute(
            sa.select(sa.func.count()).where(created_between(feed.c.id, start + 1000, start + 2000))
        ).scalar_one()
    assert [row_id for page in pages for row_id in page] == expected
    assert [len(page) for page in pages] == [64] * 6 + [16]
    assert recent == list(range(300, 400))
    assert window == 100


def test_tail_from_the_standby_with_a_fixed_settle_misses_nothing(
    pg_engines: Engines, feed: sa.Table, measured: list[str]
) -> None:
    primary, standby = pg_engines
    # Measured lag is ~0.2 s on loopback; 2 s keeps a wide margin when CI is busy.
    settle = timedelta(seconds=2)
    stop = threading.Event()
    writers = [Writer(f"w{n}", primary, feed, hold_ms=20, stop=stop) for n in (1, 2, 3)]
    tail = Tailer(standby, feed, settle, stop=stop)
    unsettled = Tailer(standby, feed, timedelta(0), stop=stop)
    observer = Observer(standby, feed, stop=stop)
    threads = [*writers, tail, unsettled, observer]
    for thread in threads:
        thread.start()
    replay_lags = []
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        with primary.connect() as conn:
            lag = conn.execute(
                sa.text("SELECT EXTRACT(EPOCH FROM replay_lag) * 1000 FROM pg_stat_replication")
            ).scalar()
        if lag is not None:
            replay_lags.append(float(lag))
        time.sleep(0.2)
    stop.set()
    for thread in threads:
        thread.join(60)
    wait_replayed(primary, standby)
    tail.drain()
    unsettled.drain()

    everything = ids(primary, feed)
    assert len(everything) > 200
    assert tail.seen == everything  # 0 missed, none twice, in id order
    lags = observer.lags_ms()
    assert max(lags) < settle.total_seconds() * 1000
    commit = [ms - row_id.timestamp_ms for w in writers for row_id, ms in w.acked.items()]
    replay = [
        observer.visible_at[row_id] - ms
        for w in writers
        for row_id, ms in w.acked.items()
        if row_id in observer.visible_at
    ]
    missed_unsettled = len(set(everything) - set(unsettled.seen))
    measured.append(
        f"pg standby tail (3 writers on the primary, 0-20 ms transactions, {len(everything)} rows):"
        f" id->commit p50 {percentile(commit, 0.5):.0f} / p99 {percentile(commit, 0.99):.0f}"
        f" / max {max(commit)} ms; commit->visible on standby p50 {percentile(replay, 0.5):.0f}"
        f" / p99 {percentile(replay, 0.99):.0f} / max {max(replay)} ms; id->visible max"
        f" {max(lags)} ms; pg_stat_replication.replay_lag max"
        f" {max(replay_lags, default=0):.1f} ms; settle=2s missed 0; settle=0 missed"
        f" {missed_unsettled}"
    )


def test_settle_auto_on_the_standby_cannot_see_the_primarys_open_transaction(
    pg_engines: Engines, feed: sa.Table
) -> None:
    # settle="auto" holds the horizon at the oldest open writer. On a standby
    # no writer runs: pg_stat_activity there never shows the primary's
    # transactions, so nothing would hold the horizon back. That is why the
    # library refuses "auto" on a standby.
    primary, standby = pg_engines
    early = new_ulid()
    with primary.connect() as writer_conn:
        writer_conn.execute(feed.insert().values(id=early, writer="slow", seq=1))
        time.sleep(0.05)
        with primary.begin() as conn:
            conn.execute(feed.insert().values(id=new_ulid(), writer="fast", seq=2))
        wait_replayed(primary, standby)
        open_sql = sa.text(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend'"
        )
        with primary.connect() as conn:
            assert conn.execute(open_sql).scalar_one() >= 1
        with standby.connect() as conn:
            assert conn.execute(open_sql).scalar_one() == 0
            with pytest.raises(SettleError, match="standby"):
                paginate(conn, sa.select(feed.c.id), feed.c.id, settle="auto")
            # A horizon with nothing open to hold it back is the standby's clock.
            page = tail(conn, feed, None, settle=timedelta(0))
        assert len(page) == 1
        assert page[0] > early
        writer_conn.commit()
    wait_replayed(primary, standby)
    with standby.connect() as conn:
        assert early not in tail(conn, feed, page[-1], settle=timedelta(0))  # missed
        assert conn.execute(sa.select(feed.c.id).where(feed.c.id == early)).scalar_one() == early


def test_settle_auto_is_refused_on_the_standby_only(pg_engines: Engines, feed: sa.Table) -> None:
    primary, standby = pg_engines
    row_id = ULID.from_parts(int(time.time() * 1000) - 60_000, 1)  # long settled
    with primary.begin() as conn:
        conn.execute(feed.insert().values(id=row_id, writer="w", seq=1))
    wait_replayed(primary, standby)
    everything = sa.select(feed.c.id)
    with primary.connect() as conn:
        assert list(paginate(conn, everything, feed.c.id, settle="auto").items) == [row_id]
    with standby.connect() as conn:
        with pytest.raises(SettleError, match=r"hot standby \(pg_is_in_recovery\(\) is true\)"):
            paginate(conn, everything, feed.c.id, settle="auto")
        conn.rollback()
        fixed = paginate(conn, everything, feed.c.id, settle=timedelta(0))
        assert list(fixed.items) == [row_id]
    # follow() defaults to "auto": it raises at its first poll on the standby.
    with pytest.raises(SettleError, match="standby"):
        next(follow(standby, everything, feed.c.id))
    page = next(follow(standby, everything, feed.c.id, settle=timedelta(0)))
    assert list(page.items) == [row_id]
    assert list(next(follow(primary, everything, feed.c.id)).items) == [row_id]


@pytest.mark.parametrize("synchronous", [False, True], ids=["async", "synchronous"])
def test_failover_to_the_promoted_standby(
    pg_standby: PgStandby,
    pg_engines: Engines,
    feed: sa.Table,
    measured: list[str],
    synchronous: bool,
) -> None:
    # Last in this module: it destroys the pair, and rebuilds it at the end.
    primary, standby = pg_engines
    try:
        if synchronous:
            with primary.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(sa.text("ALTER SYSTEM SET synchronous_standby_names = '*'"))
                conn.execute(sa.text("SELECT pg_reload_conf()"))
        stop = threading.Event()
        before = [Writer(f"w{n}", primary, feed, hold_ms=5, stop=stop) for n in (1, 2)]
        for writer in before:
            writer.start()
        time.sleep(2)
        pg_standby.crash_primary()
        began = time.monotonic()
        pg_standby.promote()
        promote_seconds = time.monotonic() - began
        stop.set()
        for writer in before:
            writer.join(30)
        # The application reconnects to the new primary and goes on minting ids.
        after_stop = threading.Event()
        after = [Writer(f"v{n}", standby, feed, rows=100, stop=after_stop) for n in (1, 2)]
        for writer in after:
            writer.start()
        for writer in after:
            writer.join(30)
        assert all(not writer.errors for writer in after)

        acked_before = {row_id for w in before for row_id in w.acked}
        in_doubt = set().union(*(w.in_doubt for w in before))
        acked_after = {row_id for w in after for row_id in w.acked}
        with standby.connect() as conn:
            assert conn.execute(sa.text("SELECT pg_is_in_recovery()")).scalar_one() is False
            present = list(conn.execute(sa.select(feed.c.id).order_by(feed.c.id)).scalars())
        assert len(present) == len(set(present))  # nothing twice
        assert set(present) <= acked_before | in_doubt | acked_after  # nothing from nowhere
        assert acked_after <= set(present)
        old = [row_id for row_id in present if row_id not in acked_after]
        # No sequence to repair after failover: new ids sort after the old rows.
        assert min(acked_after) > max(old)
        lost = acked_before - set(present)
        if synchronous:
            assert not lost  # every acknowledged commit had reached the standby
        measured.append(
            f"pg failover ({'synchronous' if synchronous else 'async'} replication):"
            f" promoted in {promote_seconds:.1f} s; {len(acked_before)} rows acknowledged"
            f" before the crash, {len(lost)} lost; 200 rows written after, ids after all old rows"
        )
    finally:
        pg_standby.stop()
        pg_standby.start()
        primary.dispose()
        standby.dispose()
