"""ULID keys on a real 3-node MariaDB Galera cluster (multi-primary)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from clusters import Galera
from clusters.galera import node_status
from clusters.workload import (
    Observer,
    Tailer,
    Writer,
    create_on_every_node,
    feed_table,
    now_ms,
    percentile,
)

from sqlalchemy_ulid import (
    ULID,
    SettleError,
    ULIDType,
    follow,
    new_ulid,
    paginate,
    ulid_server_default,
)

pytestmark = pytest.mark.cluster


@pytest.fixture
def feed(galera_engines: list[sa.Engine], request: pytest.FixtureRequest) -> Iterator[sa.Table]:
    metadata = sa.MetaData()
    table = feed_table(metadata, "feed_" + request.node.name.removeprefix("test_")[:40])
    metadata.drop_all(galera_engines[0])
    create_on_every_node(metadata, galera_engines)  # DDL replicates in total order (TOI)
    yield table
    metadata.drop_all(galera_engines[0])


def synced_ids(engine: sa.Engine, table: sa.Table) -> list[object]:
    """ORDER BY id on one node, after it applied everything committed cluster-wide."""
    with engine.connect() as conn:
        conn.execute(sa.text("SET SESSION wsrep_sync_wait = 1"))
        return list(conn.execute(sa.select(table.c.id).order_by(table.c.id)).scalars())


def tail(conn: sa.Connection, table: sa.Table, cursor: object, settle: timedelta) -> list[object]:
    """One poll of a tailing reader: the library's paginate(..., settle=...)."""
    page = paginate(conn, sa.select(table.c.id), table.c.id, after=cursor, settle=settle)
    return list(page.items)


def checksum(engine: sa.Engine, table: sa.Table) -> tuple[int, int, int]:
    """(CHECKSUM TABLE, rows, distinct ids) on one node, after sync."""
    with engine.connect() as conn:
        conn.execute(sa.text("SET SESSION wsrep_sync_wait = 1"))
        total = conn.execute(sa.text(f"CHECKSUM TABLE {table.name}")).one()[1]
        rows, distinct = conn.execute(
            sa.select(sa.func.count(), sa.func.count(sa.distinct(table.c.id)))
        ).one()
    return int(total), int(rows), int(distinct)


def conflict_counters(galera: Galera) -> dict[int, tuple[int, int]]:
    """Per node: (certification failures, brute-force aborts) so far."""
    counters = {}
    for node in galera.nodes:
        status = node_status(node)
        counters[node.number] = (
            int(status["wsrep_local_cert_failures"]),
            int(status["wsrep_local_bf_aborts"]),
        )
    return counters


def test_cluster_is_row_based_with_galera_auto_increment(galera_engines: list[sa.Engine]) -> None:
    offsets = set()
    for engine in galera_engines:
        with engine.connect() as conn:
            settings = {str(k): str(v) for k, v in conn.execute(sa.text("SHOW GLOBAL VARIABLES"))}
            size = conn.execute(sa.text("SHOW STATUS LIKE 'wsrep_cluster_size'")).one()[1]
        assert settings["wsrep_on"] == "ON"
        assert settings["binlog_format"] == "ROW"
        assert settings["innodb_autoinc_lock_mode"] == "2"
        assert settings["wsrep_auto_increment_control"] == "ON"
        assert settings["auto_increment_increment"] == "3"
        offsets.add(settings["auto_increment_offset"])
        assert size == "3"
    assert offsets == {"1", "2", "3"}


def test_writers_on_three_nodes_converge_without_conflicts(
    galera: Galera, galera_engines: list[sa.Engine], feed: sa.Table, measured: list[str]
) -> None:
    before = conflict_counters(galera)
    writers = [
        Writer(f"w{n}", engine, feed, rows=300, hold_ms=5)
        for n, engine in enumerate(galera_engines, start=1)
    ]
    began = time.monotonic()
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(90)
    seconds = time.monotonic() - began
    assert all(not writer.is_alive() for writer in writers)

    # No id caused a duplicate key or a certification failure.
    assert [dict(writer.errors) for writer in writers] == [{}, {}, {}]
    assert conflict_counters(galera) == before
    written = sorted(row_id for writer in writers for row_id in writer.acked)
    assert len(written) == 900

    # Every node holds the same rows in the same ORDER BY id.
    orders = [synced_ids(engine, feed) for engine in galera_engines]
    assert orders[0] == orders[1] == orders[2] == written
    measured.append(
        f"galera: 3 writers x 300 single-row transactions in {seconds:.1f} s"
        f" ({900 / seconds:.0f} rows/s), 0 errors, 0 certification failures"
    )


def test_keyset_pages_are_the_same_whichever_node_serves_them(
    galera_engines: list[sa.Engine], feed: sa.Table
) -> None:
    writers = [Writer(f"w{n}", e, feed, rows=100) for n, e in enumerate(galera_engines, 1)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
    expected = synced_ids(galera_engines[0], feed)
    assert len(expected) == 300

    def pages(serve: list[sa.Engine]) -> list[list[object]]:
        out: list[list[object]] = []
        cursor = None
        for turn in range(100):
            with serve[turn % len(serve)].connect() as conn:
                conn.execute(sa.text("SET SESSION wsrep_sync_wait = 1"))
                page = paginate(conn, sa.select(feed.c.id), feed.c.id, after=cursor, limit=37)
            out.append(list(page.items))
            if not page.has_more:
                return out
            cursor = page.next_cursor
        raise AssertionError("paging did not end")

    per_node = [pages([engine]) for engine in galera_engines]
    assert per_node[0] == per_node[1] == per_node[2]
    # A client whose requests land on a different node each time (a load
    # balancer) walks the same pages.
    round_robin = pages(galera_engines)
    assert round_robin == per_node[0]
    assert [row_id for page in round_robin for row_id in page] == expected


def test_kill_a_node_mid_write_then_it_rejoins_by_ist_with_nothing_lost(
    galera: Galera, galera_engines: list[sa.Engine], feed: sa.Table, measured: list[str]
) -> None:
    stop = threading.Event()
    writers = [
        Writer(f"w{n}", engine, feed, hold_ms=5, stop=stop)
        for n, engine in enumerate(galera_engines, start=1)
    ]
    for writer in writers:
        writer.start()
    try:
        time.sleep(2)
        killed_at = now_ms()
        galera.kill(3)
        time.sleep(3)  # the survivors keep writing
        rejoin_began = time.monotonic()
        transfer = galera.restart(3)
        rejoin_seconds = time.monotonic() - rejoin_began
        rejoined_at = now_ms()
        # All three write again: wait (bounded) for node 3's writer to commit.
        until = time.monotonic() + 20
        while time.monotonic() < until and not any(
            ms > rejoined_at for ms in list(writers[2].acked.values())
        ):
            time.sleep(0.1)
        time.sleep(0.5)
    finally:
        stop.set()
        for writer in writers:
            writer.join(60)

    assert transfer == "IST"
    # The survivors went on writing while node 3 was down.
    for writer in writers[:2]:
        # While the survivors form their new view (they wait out the dead
        # node's suspect timeout) a statement may be told to retry: "node not
        # ready" (1047), or a COMMIT refused (1180, rolled back or in doubt,
        # both accounted for below). The writer retries; nothing else may fail.
        transient = {"node not ready (1047)", "error 1180", "deadlock/certification (1213)"}
        assert set(writer.errors) <= transient, writer.errors
        assert sum(killed_at < ms < rejoined_at for ms in writer.acked.values()) > 10
    # The writer on node 3 saw its connection die, and wrote again after the rejoin.
    assert writers[2].errors
    assert any(ms > rejoined_at for ms in writers[2].acked.values())

    acked = {row_id for writer in writers for row_id in writer.acked}
    in_doubt = set().union(*(writer.in_doubt for writer in writers))
    sums = [checksum(engine, feed) for engine in galera_engines]
    assert sums[0] == sums[1] == sums[2]  # same rows, same content, on every node
    _total, rows, distinct = sums[0]
    assert rows == distinct  # nothing duplicated
    present = set(synced_ids(galera_engines[2], feed))
    assert acked <= present  # nothing acknowledged was lost
    assert present - acked <= in_doubt  # and nothing appeared from nowhere

    # The longest wait between two commits of a survivor: how long the
    # cluster paused to notice the dead node.
    pause = max(
        max(b - a for a, b in itertools.pairwise(times))
        for times in (sorted(w.acked.values()) for w in writers[:2])
    )
    measured.append(
        f"galera kill -9 node3: survivors paused at most {pause} ms; node3 back by IST in"
        f" {rejoin_seconds:.1f} s; {rows} rows, identical CHECKSUM on 3 nodes,"
        f" 0 lost, 0 duplicated ({len(present - acked)} of {len(in_doubt)} in-doubt commits landed)"
    )


def test_tail_on_another_node_with_a_fixed_settle_misses_nothing(
    galera_engines: list[sa.Engine], feed: sa.Table, measured: list[str]
) -> None:
    # Measured lag is ~0.2 s on loopback; 2 s keeps a wide margin when CI is busy.
    settle = timedelta(seconds=2)
    stop = threading.Event()
    writers = [Writer(f"w{n}", galera_engines[n - 1], feed, hold_ms=20, stop=stop) for n in (1, 2)]
    reader = galera_engines[2]
    tail = Tailer(reader, feed, settle, stop=stop)
    unsettled = Tailer(reader, feed, timedelta(0), stop=stop)
    observer = Observer(reader, feed, stop=stop)
    threads = [*writers, tail, unsettled, observer]
    for thread in threads:
        thread.start()
    time.sleep(6)
    stop.set()
    for thread in threads:
        thread.join(60)
    tail.drain()
    unsettled.drain()

    everything = synced_ids(reader, feed)
    assert len(everything) > 200
    assert tail.seen == everything  # every row, once, in id order
    lags = observer.lags_ms()
    commit = [ms - row_id.timestamp_ms for w in writers for row_id, ms in w.acked.items()]
    apply = [
        observer.visible_at[row_id] - ms
        for w in writers
        for row_id, ms in w.acked.items()
        if row_id in observer.visible_at
    ]
    # What settle has to cover: from minting an id to the row being visible
    # on the reading node. 2 s leaves a wide margin over what we measured.
    assert max(lags) < settle.total_seconds() * 1000
    missed_unsettled = len(set(everything) - set(unsettled.seen))
    measured.append(
        f"galera tail on node3 (writers on node1+2, 0-20 ms transactions, {len(everything)} rows):"
        f" id->commit p50 {percentile(commit, 0.5):.0f} / p99 {percentile(commit, 0.99):.0f}"
        f" / max {max(commit)} ms; commit->visible on node3 p50 {percentile(apply, 0.5):.0f}"
        f" / p99 {percentile(apply, 0.99):.0f} / max {max(apply)} ms; id->visible max"
        f" {max(lags)} ms; settle=2s missed 0; settle=0 missed {missed_unsettled}"
    )


def test_settle_auto_cannot_see_another_nodes_open_transaction(
    galera_engines: list[sa.Engine], feed: sa.Table
) -> None:
    # What settle="auto" would rely on: the server holding back its horizon
    # for every open transaction. A Galera node knows only its own: a
    # transaction open on node 1 is invisible to node 2 until it commits,
    # so a tail on node 2 runs past it and never returns its row. That is
    # why the library refuses "auto" on a Galera node.
    first, second = galera_engines[0], galera_engines[1]
    early = new_ulid()
    with first.connect() as writer_conn:
        writer_conn.execute(feed.insert().values(id=early, writer="slow", seq=1))
        time.sleep(0.05)
        with second.begin() as conn:
            conn.execute(feed.insert().values(id=new_ulid(), writer="fast", seq=2))
        open_on = {}
        for number, engine in ((1, first), (2, second)):
            with engine.connect() as conn:
                open_on[number] = conn.execute(
                    sa.text("SELECT COUNT(*) FROM information_schema.INNODB_TRX")
                ).scalar_one()
        assert open_on[1] >= 1  # node 1 knows of its open transaction
        assert open_on[2] == 0  # node 2 does not: nothing would hold its horizon back
        with second.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            with pytest.raises(SettleError, match="Galera"):
                paginate(conn, sa.select(feed.c.id), feed.c.id, settle="auto")
            # A horizon with nothing open to hold it back is the node's clock.
            page = tail(conn, feed, None, settle=timedelta(0))
        assert len(page) == 1
        assert page[0] > early
        cursor = page[-1]
        time.sleep(0.01)
        writer_conn.commit()
    with second.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("SET SESSION wsrep_sync_wait = 1"))
        later = tail(conn, feed, cursor, settle=timedelta(0))
        assert early not in later  # the slow row landed behind the cursor: missed
        assert conn.execute(sa.select(feed.c.id).where(feed.c.id == early)).scalar_one() == early


def test_server_default_ulids_are_identical_on_every_node_only_with_row_events(
    galera_engines: list[sa.Engine],
) -> None:
    metadata = sa.MetaData()
    table = sa.Table(
        "server_made",
        metadata,
        sa.Column("id", ULIDType(), primary_key=True, server_default=ulid_server_default()),
        sa.Column("n", sa.Integer, nullable=False, unique=True),
    )
    metadata.drop_all(galera_engines[0])
    create_on_every_node(metadata, galera_engines)
    try:

        def per_node() -> list[list[tuple[object, int]]]:
            out = []
            for engine in galera_engines:
                with engine.connect() as conn:
                    conn.execute(sa.text("SET SESSION wsrep_sync_wait = 1"))
                    stmt = sa.select(table.c.id, table.c.n).order_by(table.c.n)
                    out.append([(row_id, n) for row_id, n in conn.execute(stmt)])
            return out

        # ROW events (the cluster's setting) carry the value the node computed.
        with galera_engines[1].begin() as conn:
            for n in range(20):
                conn.execute(sa.text("INSERT INTO server_made (n) VALUES (:n)"), {"n": n})
        rows = per_node()
        assert rows[0] == rows[1] == rows[2]
        assert len(rows[0]) == 20

        # A session may still switch to STATEMENT (MariaDB only warns); the
        # other nodes then re-run the default expression and make other ids.
        with galera_engines[1].begin() as conn:
            conn.execute(sa.text("SET SESSION binlog_format = 'STATEMENT'"))
            warning = conn.execute(sa.text("SHOW WARNINGS")).one()
            assert "Galera" in warning[2]
            assert "STATEMENT" in warning[2]
            for n in range(20, 30):
                conn.execute(sa.text("INSERT INTO server_made (n) VALUES (:n)"), {"n": n})
        rows = per_node()
        assert rows[0][:20] == rows[1][:20] == rows[2][:20]
        assert rows[1][20:] != rows[0][20:]
        assert rows[1][20:] != rows[2][20:]
        assert [n for _, n in rows[0]] == [n for _, n in rows[1]] == list(range(30))

        # Ids minted in the client are literals in the statement: the same everywhere.
        with galera_engines[1].begin() as conn:
            conn.execute(sa.text("SET SESSION binlog_format = 'STATEMENT'"))
            conn.execute(table.insert(), [{"id": new_ulid(), "n": n} for n in range(30, 40)])
        rows = per_node()
        assert rows[0][30:] == rows[1][30:] == rows[2][30:]
    finally:
        metadata.drop_all(galera_engines[0])


def test_the_nodes_clocks_agree_with_the_writers(galera_engines: list[sa.Engine]) -> None:
    # settle's horizon is the serving node's clock, ids carry the writers':
    # on one machine they agree, so settle only covers commit and apply lag.
    for engine in galera_engines:
        with engine.connect() as conn:
            value = conn.execute(sa.text("SELECT UTC_TIMESTAMP(6)")).scalar_one()
        assert isinstance(value, datetime)
        node_ms = value.replace(tzinfo=timezone.utc).timestamp() * 1000
        assert abs(node_ms - now_ms()) < 1000


def test_settle_auto_is_refused_on_every_galera_node_and_a_fixed_settle_works(
    galera_engines: list[sa.Engine], feed: sa.Table
) -> None:
    row_id = ULID.from_parts(int(time.time() * 1000) - 60_000, 1)  # long settled
    with galera_engines[0].begin() as conn:
        conn.execute(feed.insert().values(id=row_id, writer="w", seq=1))
    everything = sa.select(feed.c.id)
    for engine in galera_engines:
        read_committed = engine.execution_options(isolation_level="READ COMMITTED")
        with read_committed.connect() as conn:
            conn.execute(sa.text("SET SESSION wsrep_sync_wait = 1"))
            with pytest.raises(SettleError, match=r"Galera node \(wsrep_on = ON\)"):
                paginate(conn, everything, feed.c.id, settle="auto")
            fixed = paginate(conn, everything, feed.c.id, settle=timedelta(0))
            assert list(fixed.items) == [row_id]
            # A session that stops replicating its own writes still reads a
            # node the other nodes write to: still refused.
            conn.rollback()  # wsrep_on cannot change inside a transaction
            conn.execute(sa.text("SET SESSION wsrep_on = OFF"))
            try:
                with pytest.raises(SettleError, match="Galera"):
                    paginate(conn, everything, feed.c.id, settle="auto")
            finally:
                conn.invalidate()  # never hand a non-replicating session back to the pool
        # follow() defaults to "auto": it raises at its first poll.
        with pytest.raises(SettleError, match="Galera"):
            next(follow(engine, everything, feed.c.id))
        page = next(follow(engine, everything, feed.c.id, settle=timedelta(0)))
        assert list(page.items) == [row_id]
