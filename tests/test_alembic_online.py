"""``add_ulid_column(..., online=True)`` on a table that writers keep using.

On PostgreSQL and MariaDB: writers insert and update single rows while the
op runs, and each statement's latency is recorded. The longest must stay
under one bound, the same at 2,000 and at 20,000 rows (the one-transaction
op would hold writers for the whole backfill). Then the pre-existing rows
are unchanged, every row has a valid id, and the schema is what the
one-transaction op makes. The op is killed inside its backfill and at phase
boundaries; the rerun finishes, and a second rerun changes nothing.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from alembic.util import CommandError
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Connection, Engine

import _databases
import _writers
import sqlalchemy_ulid.alembic
from _offline_scripts import run_online
from _sessions import session_killer
from conftest import Backend, private_engine, recording
from sqlalchemy_ulid import ULID
from sqlalchemy_ulid._time import to_ms
from sqlalchemy_ulid.alembic import BackfillProgress

TABLE = "online_orders"
DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql")
BASE = datetime(2021, 3, 1, 8, 0, 0)
#: The longest a writer may wait, whatever the table's size, beyond the
#: machine's own stalls (the longest write of a table the op does not touch,
#: in the same run): a metadata change plus one batch's row locks.
WRITER_BOUND = 1.5


@pytest.fixture(params=["postgresql", "mysql"])
def server(request: pytest.FixtureRequest, backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends[request.param], _drop) as engine:
        with engine.begin() as conn:
            _ops(conn).create_ulid_function()
        yield engine


_drop = _databases.dropper(TABLE)


def _ops(conn: Connection) -> Operations:
    return Operations(MigrationContext.configure(conn))


def _table() -> sa.Table:
    return sa.Table(
        TABLE,
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("created_at", DATETIME, nullable=False),
        sa.Column("note", sa.String(20)),
    )


def _seed(engine: Engine, rows: int) -> None:
    table = _table()
    with engine.begin() as conn:
        table.create(conn)
        # Three rows a millisecond, so batches hold ties.
        conn.execute(
            table.insert(),
            [
                {"id": i, "created_at": BASE + timedelta(milliseconds=i // 3), "note": f"n{i}"}
                for i in range(1, rows + 1)
            ],
        )


def _online(engine: Engine, **options: Any) -> None:
    """Run the op as `alembic upgrade` does: in a transaction that Alembic began."""
    options.setdefault("server_default", True)
    options.setdefault("batch_size", 1000)
    run_online(
        engine,
        lambda op: op.add_ulid_column(TABLE, "public_id", "created_at", online=True, **options),
    )


def _checksum(engine: Engine, below: int) -> str:
    table = _table()
    with engine.connect() as conn:
        rows = conn.execute(sa.select(table).where(table.c.id < below).order_by(table.c.id))
        return hashlib.sha256(repr(rows.all()).encode()).hexdigest()


def _check_ids(engine: Engine, seeded: int) -> int:
    """Every row has a distinct id; a seeded row's id carries its time. Return the count."""
    table = sa.Table(
        TABLE, sa.MetaData(), sa.Column("id", sa.Integer), sa.Column("created_at", DATETIME),
        sa.Column("public_id", sqlalchemy_ulid.ULIDType()),
    )  # fmt: skip
    with engine.connect() as conn:
        rows = conn.execute(sa.select(table)).all()
    ids = [r.public_id for r in rows]
    assert all(isinstance(i, ULID) for i in ids)
    assert len(set(ids)) == len(ids)
    for row in rows:
        if row.id <= seeded:
            assert row.public_id.timestamp_ms == to_ms(row.created_at.replace(tzinfo=timezone.utc))
    # Ties within a batch are in key order.
    ties = sorted((r for r in rows if r.id <= 3 * 100), key=lambda r: r.id)
    for a, b in itertools.pairwise(ties):
        if a.created_at == b.created_at and (a.id - 1) // 1000 == (b.id - 1) // 1000:
            assert a.public_id < b.public_id
    return len(rows)


def _schema(engine: Engine) -> tuple[bool, list[list[str]], list[str]]:
    inspector = sa.inspect(engine)
    column = next(c for c in inspector.get_columns(TABLE) if c["name"] == "public_id")
    unique = sorted(u["column_names"] for u in inspector.get_unique_constraints(TABLE))
    checks = [c["name"] or "" for c in inspector.get_check_constraints(TABLE)]
    return bool(column["nullable"]), unique, checks


class Writers(_writers.Writers):
    """Threads inserting new rows and updating them, one statement at a time, timed."""

    def __init__(self, engine: Engine, count: int = 3) -> None:
        super().__init__(engine, count, settle=0.05)
        self.written: list[int] = []

    def write(self, conn: Connection, n: int) -> None:
        key = 10_000_000 + n * 1_000_000
        while not self.stop.is_set():
            # The application does not know the new column yet.
            self.send(
                conn,
                f"INSERT INTO {TABLE} (id, created_at, note) "
                f"VALUES ({key}, '2030-01-01 00:00:00', 'new')",
            )
            self.send(conn, f"UPDATE {TABLE} SET note = 'updated' WHERE id = {key}")
            self.written.append(key)
            key += 1
            time.sleep(0.002)

    def check(self, stall: float = 0.0) -> None:
        """Fail on an error, too few writes, or a wait longer than the bound past ``stall``."""
        super().check()
        assert len(self.written) > 10, "the writers hardly wrote: the test proves nothing"
        self.check_waits(WRITER_BOUND, stall)


@pytest.mark.parametrize("rows", [2_000, 20_000])
def test_writers_keep_flowing_whatever_the_size(server: Engine, rows: int) -> None:
    _seed(server, rows)
    checksum = _checksum(server, rows + 1)
    reports: list[BackfillProgress] = []
    with _writers.Control(server, "online_control") as control, Writers(server) as writers:
        _online(server, progress=reports.append)
    writers.check(control.stall())
    assert _checksum(server, rows + 1) == checksum
    assert _check_ids(server, rows) == rows + len(writers.written)
    nullable, unique, checks = _schema(server)
    assert not nullable
    assert unique == [["public_id"]]
    assert not [c for c in checks if "not_null" in c]
    assert reports, "no progress was reported"
    # Rows the writers inserted before the DEFAULT existed are backfilled too.
    assert reports[-1].rows_done >= rows
    assert [r.rows_done for r in reports] == sorted(r.rows_done for r in reports)


def _killed_run(engine: Engine, when: Callable[[str, int], bool]) -> None:
    """Run the op and kill its session before the first statement ``when`` picks."""
    done = session_killer(engine, when)
    try:
        with pytest.raises(sa.exc.DBAPIError):
            _online(engine, batch_size=500)
    finally:
        killed = done()
    assert killed


def _updates(seen: list[str]) -> int:
    return sum(1 for s in seen if s.lstrip().upper().startswith("UPDATE"))


def _alter(*parts: str) -> Callable[[str, int], bool]:
    return lambda s, n: any(all(p in s for p in part.split("&")) for part in parts)


#: where the session is killed: before the first statement the predicate picks
#: (None: the third batch's UPDATE, two batches committed, the rest NULL)
KILL_POINTS: dict[str, Callable[[str, int], bool] | None] = {
    "inside the backfill": None,
    "before the NOT NULL check": _alter("NOT VALID", "MODIFY&NOT NULL"),
    "before SET NOT NULL": _alter("SET NOT NULL", "MODIFY&NOT NULL"),
    "before the unique index": _alter("CREATE UNIQUE INDEX", "ALGORITHM=INPLACE"),
    "before the constraint": _alter("USING INDEX", "ALGORITHM=INPLACE"),
}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_killed_then_rerun_finishes_and_a_second_rerun_is_a_no_op(
    server: Engine, point: str
) -> None:
    rows = 2_000
    _seed(server, rows)
    checksum = _checksum(server, rows + 1)
    updates: list[str] = []

    def third_update(s: str, n: int) -> bool:
        if s.lstrip().upper().startswith("UPDATE"):
            updates.append(s)
        return len(updates) == 3

    _killed_run(server, KILL_POINTS[point] or third_update)
    assert _checksum(server, rows + 1) == checksum
    if point == "inside the backfill":
        with server.connect() as conn:
            filled = conn.exec_driver_sql(
                f"SELECT COUNT(*) FROM {TABLE} WHERE public_id IS NOT NULL"
            ).scalar()
        assert filled == 1000  # two batches of 500 committed, the third killed

    with recording(server) as seen_rerun:
        _online(server, batch_size=500)
    if point == "inside the backfill":
        assert _updates(seen_rerun) == 2  # the rest only: 1,000 rows in two batches
    assert _checksum(server, rows + 1) == checksum
    assert _check_ids(server, rows) == rows
    after = _schema(server)
    assert after[0] is False
    assert after[1] == [["public_id"]]

    with recording(server) as again:
        _online(server, batch_size=500)
    changes = [
        s for s in again if s.lstrip().upper().startswith(("ALTER", "UPDATE", "CREATE UNIQUE"))
    ]
    assert changes == []
    assert _schema(server) == after


def test_an_invalid_index_left_by_a_failed_build_is_dropped_and_rebuilt(
    backends: dict[str, Backend],
) -> None:
    """PostgreSQL: a failed CREATE INDEX CONCURRENTLY leaves an INVALID index."""
    backend = backends["postgresql"]
    assert backend.url is not None
    engine = sa.create_engine(backend.url, poolclass=sa.pool.NullPool)
    try:
        _drop(engine)
        _seed(engine, 100)
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            # Same name, on a column with duplicates: the build fails, INVALID.
            with pytest.raises(sa.exc.IntegrityError):
                conn.exec_driver_sql(
                    f"CREATE UNIQUE INDEX CONCURRENTLY uq_{TABLE}_public_id ON {TABLE} (created_at)"
                )
            assert (
                conn.exec_driver_sql(
                    "SELECT indisvalid FROM pg_index WHERE indexrelid = "
                    f"'uq_{TABLE}_public_id'::regclass"
                ).scalar()
                is False
            )
        with engine.begin() as conn:
            _ops(conn).create_ulid_function()
        _online(engine)
        nullable, unique, _ = _schema(engine)
        assert (nullable, unique) == (False, [["public_id"]])
        _check_ids(engine, 100)
    finally:
        _drop(engine)
        engine.dispose()


def test_refuses_a_transaction_alembic_did_not_begin(server: Engine) -> None:
    _seed(server, 10)
    with (
        server.begin() as conn,
        recording(server) as seen,
        pytest.raises(CommandError, match="transaction that Alembic did"),
    ):
        _ops(conn).add_ulid_column(TABLE, "public_id", "created_at", online=True)
    assert not [s for s in seen if s.lstrip().upper().startswith(("ALTER", "UPDATE"))]
    assert "public_id" not in [c["name"] for c in sa.inspect(server).get_columns(TABLE)]


def test_composite_key_refused_before_any_ddl(server: Engine) -> None:
    with server.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (a INTEGER, b INTEGER, created_at TIMESTAMP NULL, "
            "PRIMARY KEY (a, b))"
        )
    with pytest.raises(ValueError, match="single-column primary key"), recording(server) as seen:
        _online(server)
    assert not [s for s in seen if s.lstrip().upper().startswith("ALTER")]


def test_a_time_before_1970_refused_before_any_ddl(server: Engine) -> None:
    _seed(server, 10)
    with server.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {TABLE} SET created_at = '1969-12-31 23:00:00' WHERE id = 5")
    with pytest.raises(ValueError, match="1970 to 10889"), recording(server) as seen:
        _online(server)
    assert not [s for s in seen if s.lstrip().upper().startswith("ALTER")]


def test_sqlite_refuses_online(backends: dict[str, Backend]) -> None:
    backend = backends["sqlite"]
    assert backend.engine is not None
    engine = backend.engine
    _drop(engine)
    _seed(engine, 5)
    try:
        with (
            recording(engine) as seen,
            engine.connect() as conn,
            MigrationContext.configure(conn).begin_transaction(),
        ):
            context = MigrationContext.configure(conn)
            with pytest.raises(ValueError, match="SQLite"):
                Operations(context).add_ulid_column(TABLE, "public_id", "created_at", online=True)
        assert not [s for s in seen if s.lstrip().upper().startswith("ALTER")]
    finally:
        _drop(engine)


@pytest.mark.parametrize(
    "options",
    [
        {"pause": -1},  # a negative pause
        {"pause": float("nan")},  # not a number of seconds
        {"lock_timeout": 0},  # no wait at all
        {"lock_timeout": timedelta(seconds=-1)},  # negative, as a timedelta
        {"batch_size": 0},  # an empty batch
        {"batch_size": True},  # a bool is not a size
        {"batch_size": 1_000_001},  # past the cap
        {"batch_size": 2**64},  # past any LIMIT the databases take
    ],
)
def test_bad_options_refused_when_the_op_is_built(options: dict[str, Any]) -> None:
    from sqlalchemy_ulid.alembic import AddULIDColumnOp

    with pytest.raises(ValueError, match=r"pause|lock_timeout|batch_size"):
        AddULIDColumnOp(TABLE, "public_id", "created_at", online=True, **options)


def test_huge_batch_size_refused_before_any_sql(server: Engine) -> None:
    # It once passed the check; ADD COLUMN ran, then the LIMIT failed in the driver.
    _seed(server, 3)
    with pytest.raises(ValueError, match="batch_size"):
        _online(server, batch_size=2**64)
    with server.connect() as conn:
        columns = sa.inspect(conn).get_columns(TABLE)
    assert [c["name"] for c in columns] == ["id", "created_at", "note"]


def test_online_add_on_a_table_whose_name_has_a_percent(server: Engine) -> None:
    # PostgreSQL's batch UPDATE escaped the % twice: UPDATE "on%line" failed after ADD COLUMN.
    name = "on%line"
    quoted = server.dialect.identifier_preparer.quote(name)  # % doubled for the driver
    when = "timestamp" if server.dialect.name == "postgresql" else "datetime(6)"
    with server.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {quoted}")
        conn.exec_driver_sql(f"CREATE TABLE {quoted} (id int PRIMARY KEY, created_at {when})")
        conn.exec_driver_sql(f"INSERT INTO {quoted} VALUES (1, '2024-01-01'), (2, '2024-01-02')")
    try:
        with server.connect() as conn:
            context = MigrationContext.configure(conn)
            with context.begin_transaction(), context.begin_transaction(_per_migration=True):
                Operations(context).add_ulid_column(name, "public_id", "created_at", online=True)
        table = sa.Table(
            name, sa.MetaData(), sa.Column("id", sa.Integer), sa.Column("created_at", DATETIME),
            sa.Column("public_id", sqlalchemy_ulid.ULIDType()),
        )  # fmt: skip
        with server.connect() as conn:
            rows = conn.execute(sa.select(table).order_by(table.c.id)).all()
        assert [r.public_id.timestamp_ms for r in rows] == [
            to_ms(r.created_at.replace(tzinfo=timezone.utc)) for r in rows
        ]
    finally:
        with server.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {quoted}")


def test_null_time_written_during_the_backfill_is_reported_clearly(server: Engine) -> None:
    # It ended with a bare TypeError from the time conversion, naming nothing.
    _seed(server, 3)
    written: list[int] = []

    def write_a_row_without_a_time(_: BackfillProgress) -> None:
        if not written:
            written.append(99)
            with server.begin() as conn:
                conn.execute(
                    sa.text(f"ALTER TABLE {TABLE} MODIFY created_at DATETIME(6) NULL")
                    if server.dialect.name != "postgresql"
                    else sa.text(f"ALTER TABLE {TABLE} ALTER COLUMN created_at DROP NOT NULL")
                )
                conn.execute(sa.text(f"INSERT INTO {TABLE} (id, created_at) VALUES (99, NULL)"))

    with pytest.raises(ValueError, match=rf"{TABLE}\.created_at of the row with id = 99") as caught:
        _online(server, batch_size=1, server_default=False, progress=write_a_row_without_a_time)
    assert "rerun the migration" in str(caught.value)
    # The rows before it kept their ids; once the row has a time, a rerun finishes.
    with server.begin() as conn:
        conn.execute(sa.text(f"UPDATE {TABLE} SET created_at = :t WHERE id = 99"), {"t": BASE})
    _online(server, batch_size=1, server_default=False)
    table = sa.Table(
        TABLE, sa.MetaData(), sa.Column("id", sa.Integer), sa.Column("created_at", DATETIME),
        sa.Column("public_id", sqlalchemy_ulid.ULIDType()),
    )  # fmt: skip
    with server.connect() as conn:
        rows = conn.execute(sa.select(table).order_by(table.c.id)).all()
    assert [r.id for r in rows] == [1, 2, 3, 99]
    assert [r.public_id.timestamp_ms for r in rows] == [
        to_ms(r.created_at.replace(tzinfo=timezone.utc)) for r in rows
    ]


@pytest.mark.parametrize("online", [True, False], ids=["online", "one-transaction"])
def test_mariadb_timestamp_column_is_read_in_utc_whatever_the_session_zone(
    backends: dict[str, Backend], online: bool
) -> None:
    # A TIMESTAMP stored as 12:00 UTC read as 17:00 in a '+05:00' session: ids 5 hours late.
    url = backends["mysql"].url
    if url is None:
        pytest.fail(f"backend missing: {backends['mysql'].reason}", pytrace=False)
    utc = sa.create_engine(url, poolclass=sa.pool.NullPool)
    app = sa.create_engine(
        url, poolclass=sa.pool.NullPool, connect_args={"init_command": "SET time_zone = '+05:00'"}
    )
    try:
        with utc.begin() as conn:
            conn.exec_driver_sql("SET time_zone = '+00:00'")
            conn.exec_driver_sql("DROP TABLE IF EXISTS online_ts")
            conn.exec_driver_sql(
                "CREATE TABLE online_ts (id int PRIMARY KEY, created_at TIMESTAMP(3) NOT NULL)"
            )
            conn.exec_driver_sql(
                "INSERT INTO online_ts VALUES (1, '2024-01-01 12:00:00.000'), "
                "(2, '2024-07-01 23:30:00.250')"
            )
        with app.connect() as conn:
            context = MigrationContext.configure(conn)
            with context.begin_transaction(), context.begin_transaction(_per_migration=True):
                Operations(context).add_ulid_column(
                    "online_ts", "public_id", "created_at", online=online
                )
            # The session's own time zone is put back.
            assert conn.exec_driver_sql("SELECT @@SESSION.time_zone").scalar() == "+05:00"
        with utc.connect() as conn:
            stored = conn.exec_driver_sql("SELECT public_id FROM online_ts ORDER BY id").scalars()
            made = [ULID.from_bytes(raw).datetime.isoformat() for raw in stored]
        assert made == ["2024-01-01T12:00:00+00:00", "2024-07-01T23:30:00.250000+00:00"]
    finally:
        with utc.begin() as conn:
            conn.exec_driver_sql("DROP TABLE IF EXISTS online_ts")
        utc.dispose()
        app.dispose()


def test_a_server_default_whose_function_is_missing_is_refused_before_any_ddl(
    backends: dict[str, Backend],
) -> None:
    """PostgreSQL without gen_ulid(): the DEFAULT is tried first, not after ADD COLUMN.

    (MariaDB's DEFAULT is an expression of built-in functions.)
    """
    with private_engine(backends["postgresql"], _drop) as server:
        _seed(server, 10)
        with server.begin() as conn:
            _ops(conn).drop_ulid_function()
        try:
            with recording(server) as seen, pytest.raises(ValueError, match="create_ulid_function"):
                _online(server)
            assert not [s for s in seen if s.split()[0].upper() in ("ALTER", "CREATE", "UPDATE")]
            assert "public_id" not in {c["name"] for c in sa.inspect(server).get_columns(TABLE)}
        finally:
            with server.begin() as conn:
                _ops(conn).create_ulid_function()
