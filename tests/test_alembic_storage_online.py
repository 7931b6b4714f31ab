"""``alter_ulid_storage(..., online=True)`` on PostgreSQL, on a table writers keep using.

Writer threads insert rows and change the ULID column of rows they own while
the op runs, each statement timed. Afterwards every row holds exactly the
value last written to it (or seeded), converted; the longest wait stays well
under a second; and the schema is the one the one-transaction op makes on an
identical table. The op is killed at every phase boundary and inside its
copy: the rerun finishes, and a second rerun sends no DDL.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.engine import Connection, Engine

import _databases
import _writers
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _sessions import session_killer
from conftest import Backend, private_engine, recording
from sqlalchemy_ulid import ULID, InvalidULID, ULIDType, new_ulid
from sqlalchemy_ulid.alembic import BackfillProgress

TABLE = "so_items"
TWIN = "so_twin"
#: The longest a writer may wait beyond the machine's own stalls (the longest
#: write of a table the op does not touch, in the same run): a metadata change
#: plus one batch's row locks.
WRITER_BOUND = 1.0
DEFAULT = ULID("01ARZ3NDEKTSV4RRFFQ69G5FAV")


@pytest.fixture
def engine(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["postgresql"], _drop) as engine:
        yield engine


_drop = _databases.dropper(TABLE, TWIN, views=["so_view"], conversions=[TABLE, TWIN])


def _create(engine: Engine, name: str, storage: str, rows: int, *, key: bool = False) -> None:
    """A table whose ``ref`` (or, with ``key``, its primary key) is a ULID column."""
    type_ = ULIDType(storage)  # type: ignore[arg-type]
    literal = type_.literal_processor(engine.dialect)(DEFAULT)
    table = sa.Table(
        name,
        sa.MetaData(),
        sa.Column("id", type_ if key else sa.Integer, primary_key=True, autoincrement=False),
        sa.Column(
            "ref", type_, nullable=False, server_default=sa.text(literal), comment="a 100% ref"
        ),
        sa.Column("other", type_, nullable=True),
        sa.Column("n", sa.Integer),
        sa.UniqueConstraint("ref", name=f"uq_{name}_ref"),
        sa.Index(f"ix_{name}_n_ref", "n", "ref"),
    )
    with engine.begin() as conn:
        table.create(conn)
        values = [
            {"id": new_ulid() if key else i, "ref": new_ulid(), "other": new_ulid(), "n": i}
            for i in range(rows)
        ]
        for start in range(0, rows, 5000):
            conn.execute(table.insert(), values[start : start + 5000])


def _run(
    engine: Engine, name: str, from_: str, to: str, column: str = "ref", **options: Any
) -> None:
    """Run the op as ``alembic upgrade`` does: in a transaction Alembic began."""
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"transactional_ddl": True})
        with context.begin_transaction():
            Operations(context).alter_ulid_storage(
                name, column, from_storage=from_, to_storage=to, **options
            )


def _schema(engine: Engine, name: str) -> dict[str, Any]:
    inspector = sa.inspect(engine)
    columns = {
        c["name"]: (str(c["type"]), c["nullable"], c.get("default"), c.get("comment"))
        for c in inspector.get_columns(name)
    }
    return {
        "columns": columns,
        "pk": inspector.get_pk_constraint(name)["constrained_columns"],
        "unique": sorted(
            (u["name"].replace(name, "T"), tuple(u["column_names"]))
            for u in inspector.get_unique_constraints(name)
        ),
        "indexes": sorted(
            (i["name"].replace(name, "T"), tuple(i["column_names"]), i["unique"])
            for i in inspector.get_indexes(name)
        ),
        "checks": inspector.get_check_constraints(name),
        "triggers": _scalar(
            engine,
            f"SELECT count(*) FROM pg_trigger WHERE tgrelid = '{name}'::regclass "
            "AND NOT tgisinternal",
        ),
    }


def _scalar(engine: Engine, sql: str) -> Any:
    with engine.connect() as conn:
        return conn.exec_driver_sql(sql).scalar()


def _values(engine: Engine, name: str, storage: str, key: str | None = None) -> dict[Any, ULID]:
    """Each row's ``ref`` by its id (``key``: the id's storage, when it is a ULID)."""
    id_type = sa.Integer() if key is None else ULIDType(key)  # type: ignore[arg-type]
    t = sa.table(name, sa.column("id", id_type), sa.column("ref", ULIDType(storage)))  # type: ignore[arg-type]
    with engine.connect() as conn:
        return {row[0]: row[1] for row in conn.execute(sa.select(t.c.id, t.c.ref))}


class Writers(_writers.SwapFollowers):
    """Threads that insert rows and change the ``ref`` of rows they own, timed.

    Each writer binds values in the old storage until the swap starts, then
    in the new one (as an application deployed for either storage would).
    """

    def __init__(
        self, engine: Engine, storage: str, new: str, owned: list[int], count: int = 3
    ) -> None:
        super().__init__(engine, count)
        self.binds = [
            ULIDType(s).bind_processor(engine.dialect)  # type: ignore[arg-type]
            for s in (storage, new)
        ]
        self.expected: dict[int, ULID | None] = {}
        self.owned = owned

    def _timed(self, conn: Connection, sql: str, params: dict[str, Any], ref: ULID) -> bool:
        def send(swapping: bool) -> None:
            bind = self.binds[swapping]
            conn.execute(sa.text(sql), {**params, "r": bind(ref) if bind is not None else ref})

        return self.attempt(conn, send)

    def write(self, conn: Connection, n: int) -> None:
        count = len(self.threads)
        rng = random.Random(n)
        mine = [k for k in self.owned if k % count == n]
        key = 10_000_000 + n * 1_000_000
        insert = f"INSERT INTO {TABLE} (id, ref, n) VALUES (:k, :r, 0)"
        update = f"UPDATE {TABLE} SET ref = :r WHERE id = :k"
        while not self.stop.is_set():
            new, changed = new_ulid(), new_ulid()
            target = rng.choice(mine)
            if self._timed(conn, insert, {"k": key}, new):
                self.expected[key] = new
            if self._timed(conn, update, {"k": target}, changed):
                self.expected[target] = changed
            key += 1
            time.sleep(0.002)

    def check(self, stall: float = 0.0) -> None:
        """Fail on an error, too few writes, or a wait longer than the bound past ``stall``."""
        super().check()
        assert len(self.expected) > 20, "the writers hardly wrote: the test proves nothing"
        self.check_waits(WRITER_BOUND, stall)


PAIRS = [("text", "auto"), ("auto", "text"), ("text", "binary"), ("binary", "auto")]


@pytest.mark.parametrize(("from_", "to"), PAIRS)
def test_writers_keep_flowing_and_every_value_is_converted(
    engine: Engine, from_: str, to: str
) -> None:
    rows = 20_000
    _create(engine, TABLE, from_, rows)
    _create(engine, TWIN, from_, 10)
    before = _values(engine, TABLE, from_)
    reports: list[BackfillProgress] = []
    writers = Writers(engine, from_, to, list(before))
    unwatch = writers.watch("LOCK TABLE")
    try:
        with _writers.Control(engine, "so_control") as control, writers:
            _run(engine, TABLE, from_, to, online=True, batch_size=2000, progress=reports.append)
    finally:
        unwatch()
    writers.check(control.stall())
    after = _values(engine, TABLE, to)
    expected = {**before, **writers.expected}
    assert after == expected  # every row: its last written value, converted; none lost
    _run(engine, TWIN, from_, to)  # the one-transaction op
    assert _schema(engine, TABLE) == _schema(engine, TWIN)
    # The last conversion drops the table that remembered it.
    assert _scalar(engine, "SELECT to_regclass('sqlalchemy_ulid_migrations')") is None
    assert reports
    assert [r.rows_done for r in reports] == sorted(r.rows_done for r in reports)
    # Back again (the downgrade), online too.
    _run(engine, TABLE, to, from_, online=True, batch_size=5000)
    _run(engine, TWIN, to, from_)
    assert _values(engine, TABLE, from_) == expected
    assert _schema(engine, TABLE) == _schema(engine, TWIN)


@pytest.mark.parametrize(("from_", "to"), [("text", "auto"), ("auto", "binary")])
def test_the_primary_key_itself_is_converted_walking_its_old_values(
    engine: Engine, from_: str, to: str
) -> None:
    _create(engine, TABLE, from_, 3000, key=True)
    _create(engine, TWIN, from_, 10, key=True)
    before = _values(engine, TABLE, from_, key=from_)
    _run(engine, TABLE, from_, to, "id", online=True, batch_size=700)
    _run(engine, TWIN, from_, to, "id")
    assert _values(engine, TABLE, from_, key=to) == before
    assert _schema(engine, TABLE) == _schema(engine, TWIN)


def _nth_batch(n: int) -> Callable[[str, int], bool]:
    seen = [0]

    def pick(statement: str, count: int) -> bool:
        if statement.startswith("WITH batch"):
            seen[0] += 1
        return seen[0] == n

    return pick


def _before(part: str) -> Callable[[str, int], bool]:
    return lambda statement, count: part in statement


KILL_POINTS: dict[str, Callable[[str, int], bool]] = {
    "before ADD COLUMN": _before("ADD COLUMN"),
    "before the trigger": _before("CREATE TRIGGER"),
    "inside the copy": _nth_batch(3),
    "before the equality check": _before("IS NOT DISTINCT FROM"),
    "before its validation": _before("VALIDATE CONSTRAINT"),
    "before SET NOT NULL": _before("SET NOT NULL"),
    "before the unique index": _before("CREATE UNIQUE INDEX CONCURRENTLY"),
    "before the other index": _before("CREATE INDEX CONCURRENTLY"),
    "before the swap": _before("LOCK TABLE"),
}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_killed_at_each_phase_then_rerun_finishes_and_a_second_rerun_is_a_no_op(
    engine: Engine, point: str
) -> None:
    _create(engine, TABLE, "text", 3000)
    _create(engine, TWIN, "text", 10)
    before = _values(engine, TABLE, "text")
    done = session_killer(engine, KILL_POINTS[point])
    try:
        with pytest.raises(sa.exc.DBAPIError):
            _run(engine, TABLE, "text", "auto", online=True, batch_size=500)
    finally:
        assert done()
    with recording(engine) as seen:
        _run(engine, TABLE, "text", "auto", online=True, batch_size=500)
    if point == "inside the copy":
        # Two batches were committed: the rerun starts after them.
        batches = [s for s in seen if s.startswith("WITH batch")]
        assert len(batches) == 3000 // 500 - 2 + 1
    assert _values(engine, TABLE, "auto") == before
    _run(engine, TWIN, "text", "auto")
    assert _schema(engine, TABLE) == _schema(engine, TWIN)
    with recording(engine) as seen:
        _run(engine, TABLE, "text", "auto", online=True)
    assert not [s for s in seen if s.split()[0].upper() in ("ALTER", "CREATE", "DROP", "UPDATE")]


def test_a_writer_cannot_store_a_non_ulid_while_the_op_runs(engine: Engine) -> None:
    _create(engine, TABLE, "text", 1000)
    errors: list[BaseException] = []

    def bad_write(report: BackfillProgress) -> None:
        if errors:
            return
        try:
            with engine.begin() as conn:
                conn.exec_driver_sql(
                    f"UPDATE {TABLE} SET ref = 'not-a-ulid-at-all-xxxxxxxx' WHERE id = 999"
                )
        except sa.exc.DBAPIError as exc:
            errors.append(exc)

    _run(engine, TABLE, "text", "auto", online=True, batch_size=200, progress=bad_write)
    assert errors
    assert "not a ULID" in str(errors[0])
    assert len(_values(engine, TABLE, "auto")) == 1000


def test_a_bad_value_written_past_the_trigger_stops_the_copy_and_a_rerun_after_fixing_finishes(
    engine: Engine,
) -> None:
    _create(engine, TABLE, "text", 2000)
    before = _values(engine, TABLE, "text")
    written = []

    def sneak(report: BackfillProgress) -> None:
        if written:
            return
        # A session that skips triggers (logical replication's apply, a
        # restore) writes a value that is not a ULID ahead of the copy.
        with engine.begin() as conn:
            conn.exec_driver_sql("SET LOCAL session_replication_role = replica")
            conn.exec_driver_sql(
                f"UPDATE {TABLE} SET ref = 'ILLEGALLULIDTEXT0000000000' WHERE id = 1900"
            )
        written.append(1)

    with pytest.raises(InvalidULID, match="ILLEGALLULIDTEXT"):
        _run(engine, TABLE, "text", "auto", online=True, batch_size=300, progress=sneak)
    # Nothing wrong stored: the row's shadow is empty, the column unchanged.
    assert _scalar(engine, f"SELECT ref__ulid IS NULL FROM {TABLE} WHERE id = 1900")
    with engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {TABLE} SET ref = '{before[1900]}' WHERE id = 1900")
    _run(engine, TABLE, "text", "auto", online=True, batch_size=300)
    assert _values(engine, TABLE, "auto") == before


def test_a_valid_value_written_past_the_trigger_behind_the_copy_is_caught(engine: Engine) -> None:
    _create(engine, TABLE, "text", 2000)
    before = _values(engine, TABLE, "text")
    new = new_ulid()

    def sneak(report: BackfillProgress) -> None:
        if report.rows_done >= 1000 and before[5] != new:
            with engine.begin() as conn:
                conn.exec_driver_sql("SET LOCAL session_replication_role = replica")
                conn.exec_driver_sql(f"UPDATE {TABLE} SET ref = '{new}' WHERE id = 5")
            before[5] = new

    _run(engine, TABLE, "text", "auto", online=True, batch_size=300, progress=sneak)
    assert _values(engine, TABLE, "auto") == before


def test_refusals_before_any_ddl(engine: Engine) -> None:
    _create(engine, TABLE, "text", 10)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE VIEW so_view AS SELECT ref FROM {TABLE}")
    with recording(engine) as seen, pytest.raises(ValueError, match="so_view"):
        _run(engine, TABLE, "text", "auto", online=True)
    assert not [s for s in seen if s.split()[0].upper() in ("ALTER", "CREATE", "INSERT")]
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP VIEW so_view")
        conn.exec_driver_sql(f"CREATE INDEX ix_partial ON {TABLE} (ref) WHERE n > 3")
    with recording(engine) as seen, pytest.raises(ValueError, match=r"ix_partial.*WHERE"):
        _run(engine, TABLE, "text", "auto", online=True)
    assert not [s for s in seen if s.split()[0].upper() in ("ALTER", "CREATE", "INSERT")]
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP INDEX ix_partial")
        conn.exec_driver_sql(f"ALTER TABLE {TABLE} DROP CONSTRAINT {TABLE}_pkey")
    with pytest.raises(ValueError, match="single-column primary key"):
        _run(engine, TABLE, "text", "auto", online=True)


@pytest.mark.parametrize(
    "options",
    [
        {"batch_size": 0},  # no rows a batch
        {"batch_size": True},  # a bool is not a count
        {"pause": -1},  # sleeping backwards
        {"progress": "print"},  # not callable
    ],
)
def test_bad_options_refused_when_the_op_is_built(options: dict[str, Any]) -> None:
    from sqlalchemy_ulid.alembic import AlterULIDStorageOp

    with pytest.raises((ValueError, TypeError)):
        AlterULIDStorageOp(
            TABLE, "ref", from_storage="text", to_storage="auto", online=True, **options
        )


def test_sqlite_refuses_online() -> None:
    engine = sa.create_engine("sqlite://")
    with engine.connect() as conn:
        conn.exec_driver_sql("CREATE TABLE t (id INTEGER PRIMARY KEY, ref CHAR(26))")
        with pytest.raises(ValueError, match="SQLite"):
            Operations(MigrationContext.configure(conn)).alter_ulid_storage(
                "t", "ref", from_storage="text", to_storage="binary", online=True
            )


def test_a_position_left_by_an_abandoned_conversion_is_forgotten(engine: Engine) -> None:
    _create(engine, TABLE, "text", 1000)
    before = _values(engine, TABLE, "text")
    done = session_killer(engine, _nth_batch(2))
    try:
        with pytest.raises(sa.exc.DBAPIError):
            _run(engine, TABLE, "text", "auto", online=True, batch_size=300)
    finally:
        assert done()
    # Abandoned by hand: the shadow column dropped, the recorded position kept.
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TRIGGER so_items_ref__ulid_sync ON {TABLE}")
        conn.exec_driver_sql(f"ALTER TABLE {TABLE} DROP COLUMN ref__ulid CASCADE")
    _run(engine, TABLE, "text", "auto", online=True, batch_size=300)
    assert _values(engine, TABLE, "auto") == before


def test_the_copy_ends_while_writers_keep_adding_rows_past_it(engine: Engine) -> None:
    _create(engine, TABLE, "text", 1000)
    calls = []

    def insert_ahead(report: BackfillProgress) -> None:
        calls.append(report)
        assert len(calls) < 100, "the copy keeps chasing the writers' new rows"
        with engine.begin() as conn:
            conn.exec_driver_sql(
                f"INSERT INTO {TABLE} (id, ref, n) VALUES ({5000 + len(calls)}, '{new_ulid()}', 0)"
            )

    _run(engine, TABLE, "text", "auto", online=True, batch_size=100, progress=insert_ahead)
    assert len(calls) == 10  # the rows that were there when the copy began
    assert len(_values(engine, TABLE, "auto")) == 1010


def test_online_conversion_is_refused_on_sqlite_before_any_change(tmp_path: Any) -> None:
    # SQLite's dialect row has no lock waits to bound: online=True is refused,
    # by the row, not by the dialect's name.
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'online.db'}")
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE sq_online (id INTEGER PRIMARY KEY, ref CHAR(26))")
            conn.exec_driver_sql(f"INSERT INTO sq_online VALUES (1, '{new_ulid()}')")
            ops = Operations(MigrationContext.configure(conn))
            with pytest.raises(ValueError, match="SQLite has one writer at a time"):
                ops.alter_ulid_storage(
                    "sq_online", "ref", from_storage="text", to_storage="binary", online=True
                )
            declared = conn.exec_driver_sql(
                "SELECT type FROM pragma_table_info('sq_online') WHERE name = 'ref'"
            ).scalar()
            assert declared == "CHAR(26)"
    finally:
        engine.dispose()
