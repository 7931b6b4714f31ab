"""``alter_ulid_storage(..., online=True)`` on MariaDB: the shadow table, under writers.

Writers insert, update other columns, change the id and delete, each on
rows of its own, so the final table is known in Python: the expected rows
are computed with the Python converter (``ULID(text).bytes``) and compared
to the table after the op, row for row. The migration's session is killed
at each step and in the middle of the copy; the rerun ends in the same
table. The schema after equals the one-transaction op's.
"""

from __future__ import annotations

import random
import re
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
from _offline_scripts import op_sql
from _sessions import session_killer
from conftest import Backend, private_engine, recording
from sqlalchemy_ulid import ULID, new_ulid
from sqlalchemy_ulid.alembic import BackfillProgress

TABLE = "shadow_orders"
PLAIN = "shadow_plain"
#: The longest a writer may wait (a batch's row locks, or the RENAME's
#: metadata lock), on a loaded two-core machine.
WRITER_BOUND = 1.0
DDL = ("CREATE", "ALTER", "RENAME", "DROP", "INSERT", "REPLACE", "UPDATE", "DELETE")


@pytest.fixture
def server(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["mysql"], _drop) as engine:
        yield engine


_drop = _databases.dropper("shadow_child", TABLE, PLAIN, conversions=[TABLE])


def _create(engine: Engine, name: str = TABLE) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {name} (id CHAR(26) NOT NULL COMMENT 'the key', "
            "note VARCHAR(20) NOT NULL DEFAULT 'x', n INT NULL, "
            "ref CHAR(26) NULL DEFAULT '01ARZ3NDEKTSV4RRFFQ69G5FAV', "
            f"PRIMARY KEY (id), KEY ix_{name}_n (n)) ENGINE=InnoDB COMMENT='orders'"
        )


def _seed(engine: Engine, rows: int, name: str = TABLE) -> dict[str, tuple[str, int]]:
    """Create and fill the table; return id text -> (note, n)."""
    _create(engine, name)
    model = {str(new_ulid()): (f"n{i}", i) for i in range(rows)}
    with engine.begin() as conn:
        conn.execute(
            sa.text(f"INSERT INTO {name} (id, note, n) VALUES (:id, :note, :n)"),
            [{"id": k, "note": v[0], "n": v[1]} for k, v in model.items()],
        )
    return model


def _migrate(engine: Engine, reverse: bool = False, **options: Any) -> None:
    """Run the op as `alembic upgrade` does, in the transaction Alembic began."""
    storages = {"from_storage": "text", "to_storage": "binary"}
    if reverse:
        storages = {"from_storage": "binary", "to_storage": "text"}
    with engine.connect() as conn:
        conn.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 10")
        conn.commit()
        context = MigrationContext.configure(conn)
        with context.begin_transaction(), context.begin_transaction(_per_migration=True):
            Operations(context).alter_ulid_storage(
                TABLE,
                "id",
                online=True,
                batch_size=options.pop("batch_size", 1000),
                **storages,  # type: ignore[arg-type]
                **options,
            )


def _rows(engine: Engine) -> dict[bytes, tuple[str, int]]:
    with engine.connect() as conn:
        return {
            r[0]: (r[1], r[2]) for r in conn.exec_driver_sql(f"SELECT id, note, n FROM {TABLE}")
        }


def _expected(model: dict[str, tuple[str, int]]) -> dict[bytes, tuple[str, int]]:
    return {ULID(k).bytes: v for k, v in model.items()}


def _schema(engine: Engine, name: str) -> str:
    with engine.connect() as conn:
        ddl = str(conn.exec_driver_sql(f"SHOW CREATE TABLE {name}").one()[1])
    ddl = re.sub(r" AUTO_INCREMENT=\d+", "", ddl)
    return ddl.replace(name, "T")


class Writers(_writers.Writers):
    """Threads that insert, update, re-key and delete rows of their own, timed."""

    def __init__(self, engine: Engine, model: dict[str, tuple[str, int]], count: int = 3) -> None:
        super().__init__(engine, count, join=15, daemon=True)
        self.deadlocks = 0
        keys = list(model)
        self.models = [{k: model[k] for k in keys[n::count]} for n in range(count)]

    def _timed(
        self, conn: Connection, sql: str, params: dict[str, Any], binary: list[bool]
    ) -> bool:
        """Run one statement; True if it was applied.

        The application follows the swap as a redeploy would: when the
        column has become binary (text is too long for it, or a text key
        matches no row) it binds ids as bytes from then on, and retries.
        """
        started = time.monotonic()
        try:
            for _ in range(2):
                bound = {
                    k: (ULID(v).bytes if binary[0] and k in ("id", "new") else v)
                    for k, v in params.items()
                }
                try:
                    count = conn.execute(sa.text(sql), bound).rowcount
                    conn.commit()
                except sa.exc.DataError as exc:
                    conn.rollback()
                    if binary[0] or exc.orig.args[0] != 1406:
                        raise
                    binary[0] = True
                    continue
                if count == 0 and not binary[0]:
                    binary[0] = True
                    continue
                assert count == 1, (sql, params)
                return True
        except sa.exc.OperationalError as exc:
            conn.rollback()
            if exc.orig.args[0] != 1213:  # a deadlock: rolled back, not applied
                raise
            self.deadlocks += 1
            return False
        finally:
            self.latencies.append(time.monotonic() - started)
        raise AssertionError((sql, params))

    def begin(self, conn: Connection, n: int) -> None:
        conn.exec_driver_sql("SET SESSION max_statement_time = 10")

    def write(self, conn: Connection, n: int) -> None:
        model, seed = self.models[n], n
        rng = random.Random(seed)
        binary = [False]
        step = 0
        while not self.stop.is_set():
            step += 1
            kind = step % 4
            key = rng.choice(list(model)) if model else None
            if kind == 0 or key is None:
                new, value = str(new_ulid()), (f"w{seed}", step)
                sql = f"INSERT INTO {TABLE} (id, note, n) VALUES (:id, :note, :n)"
                params = {"id": new, "note": value[0], "n": value[1]}
                if self._timed(conn, sql, params, binary):
                    model[new] = value
            elif kind == 1:
                sql = f"UPDATE {TABLE} SET note = :note, n = :n WHERE id = :id"
                if self._timed(conn, sql, {"id": key, "note": "upd", "n": step}, binary):
                    model[key] = ("upd", step)
            elif kind == 2:
                new = str(new_ulid())
                sql = f"UPDATE {TABLE} SET id = :new WHERE id = :id"
                if self._timed(conn, sql, {"id": key, "new": new}, binary):
                    model[new] = model.pop(key)
            else:
                sql = f"DELETE FROM {TABLE} WHERE id = :id"
                if self._timed(conn, sql, {"id": key}, binary):
                    del model[key]
            time.sleep(0.002)

    def model(self) -> dict[str, tuple[str, int]]:
        return {k: v for m in self.models for k, v in m.items()}

    def check(self) -> None:
        super().check()
        assert len(self.latencies) > 100, "the writers hardly wrote: the test proves nothing"


@pytest.mark.parametrize("writers", [2, 4])
def test_writers_keep_going_and_the_table_is_exactly_converted(
    server: Engine, writers: int
) -> None:
    model = _seed(server, 20_000)
    reports: list[BackfillProgress] = []
    with Writers(server, model, writers) as running:
        _migrate(server, progress=reports.append)
    running.check()
    assert _rows(server) == _expected(running.model())
    assert max(running.latencies) < WRITER_BOUND, sorted(running.latencies)[-5:]
    assert reports
    assert reports[-1].rows_done > 0
    _seed(server, 3, PLAIN)
    with server.begin() as conn:
        Operations(MigrationContext.configure(conn)).alter_ulid_storage(
            PLAIN, "id", from_storage="text", to_storage="binary"
        )
    assert _schema(server, TABLE) == _schema(server, PLAIN)
    with server.connect() as conn:
        left = conn.exec_driver_sql(
            "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()"
        ).scalar()
    assert left == 0
    assert not sa.inspect(server).has_table(f"_{TABLE}__old")


def test_rerun_after_success_does_nothing_and_the_reverse_gives_the_text_back(
    server: Engine,
) -> None:
    model = _seed(server, 500)
    _migrate(server)
    with recording(server) as seen:
        _migrate(server)
    assert not [s for s in seen if s.lstrip().upper().startswith(DDL)]
    _migrate(server, reverse=True)
    with server.connect() as conn:
        rows = {
            r[0]: (r[1], r[2]) for r in conn.exec_driver_sql(f"SELECT id, note, n FROM {TABLE}")
        }
    assert rows == model
    _seed(server, 3, PLAIN)
    with server.begin() as conn:
        ops = Operations(MigrationContext.configure(conn))
        ops.alter_ulid_storage(PLAIN, "id", from_storage="text", to_storage="binary")
        ops.alter_ulid_storage(PLAIN, "id", from_storage="binary", to_storage="text")
    assert _schema(server, TABLE) == _schema(server, PLAIN)


def test_the_reverse_of_a_key_interrupted_then_rerun_after_writes(server: Engine) -> None:
    """binary -> text of the key: the rerun finds where the copy stopped, by the text key.

    The text made from the old key's bytes has the session's collation; the
    new key's is ascii_bin. Compared as they were, the rerun failed (1267).
    """
    model = _seed(server, 3000)
    _migrate(server)

    class Stop(Exception):
        pass

    def stop_after_a_batch(report: BackfillProgress) -> None:
        if report.rows_done >= 500:
            raise Stop

    with pytest.raises(Stop):
        _migrate(server, reverse=True, batch_size=500, progress=stop_after_a_batch)
    gone, changed = sorted(model)[:3], sorted(model)[-3:]
    with server.begin() as conn:  # through the triggers, on rows before and after the stop
        for key in gone:
            conn.execute(sa.text(f"DELETE FROM {TABLE} WHERE id = :id"), {"id": ULID(key).bytes})
            del model[key]
        for key in changed:
            conn.execute(
                sa.text(f"UPDATE {TABLE} SET note = 'z' WHERE id = :id"), {"id": ULID(key).bytes}
            )
            model[key] = ("z", model[key][1])
    _migrate(server, reverse=True, batch_size=500)
    with server.connect() as conn:
        rows = {
            r[0]: (r[1], r[2]) for r in conn.exec_driver_sql(f"SELECT id, note, n FROM {TABLE}")
        }
    assert rows == model


def _killed_run(engine: Engine, when: Callable[[str], bool]) -> None:
    """Run the op and kill its session before the first statement ``when`` picks."""
    done = session_killer(engine, lambda statement, _: when(statement))
    try:
        with pytest.raises(sa.exc.DBAPIError):
            _migrate(engine, batch_size=200)
    finally:
        killed = done()
    assert killed


def _nth(prefix: str, n: int) -> Callable[[str], bool]:
    """The ``n``-th statement beginning with ``prefix`` (its lock timeout's frame left out)."""
    seen = [0]

    def pick(statement: str) -> bool:
        text = " ".join(statement.split())
        if text.startswith("SET STATEMENT "):
            text = text.split(" FOR ", 1)[1]
        if text.startswith(prefix):
            seen[0] += 1
        return seen[0] == n

    return pick


KILL_POINTS = {
    "before the shadow's MODIFY": _nth("ALTER TABLE _shadow_orders__new", 1),
    "before the first trigger": _nth("CREATE TRIGGER", 1),
    "between two triggers": _nth("CREATE TRIGGER", 2),
    "before the last trigger": _nth("CREATE TRIGGER", 3),
    "mid-copy": _nth("INSERT IGNORE", 3),
    "before the count": _nth("SELECT (SELECT COUNT(*)", 1),
    "before the RENAME": _nth("RENAME TABLE", 1),
    "before the triggers are dropped": _nth("DROP TRIGGER", 1),
    "before the old table is dropped": _nth("DROP TABLE", 1),
}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_killed_at_each_step_then_rerun_ends_in_the_same_table(server: Engine, point: str) -> None:
    model = _seed(server, 1_000)
    _killed_run(server, KILL_POINTS[point])
    # Writes between the kill and the rerun: the triggers (if any) mirror them.
    # Killed after the swap, the column is binary already.
    binary = "binary" in str(sa.inspect(server).get_columns(TABLE)[0]["type"]).lower()

    def bind(text: str) -> Any:
        return ULID(text).bytes if binary else text

    with server.begin() as conn:
        first, second = list(model)[:2]
        new = str(new_ulid())
        for statement, key in [
            (f"DELETE FROM {TABLE} WHERE id = :id", first),
            (f"UPDATE {TABLE} SET note = 'late' WHERE id = :id", second),
            (f"INSERT INTO {TABLE} (id, note, n) VALUES (:id, 'new', 7)", new),
        ]:
            assert conn.execute(sa.text(statement), {"id": bind(key)}).rowcount == 1
    del model[first]
    model[second] = ("late", model[second][1])
    model[new] = ("new", 7)
    _migrate(server, batch_size=200)
    assert _rows(server) == _expected(model)
    _seed(server, 3, PLAIN)
    with server.begin() as conn:
        Operations(MigrationContext.configure(conn)).alter_ulid_storage(
            PLAIN, "id", from_storage="text", to_storage="binary"
        )
    assert _schema(server, TABLE) == _schema(server, PLAIN)
    inspector = sa.inspect(server)
    assert not inspector.has_table(f"_{TABLE}__old")
    assert not inspector.has_table(f"_{TABLE}__new")
    with recording(server) as seen:
        _migrate(server)
    assert not [s for s in seen if s.lstrip().upper().startswith(DDL)]


def test_a_bad_value_written_mid_copy_fails_that_insert(server: Engine) -> None:
    model = _seed(server, 2_000)
    failures: list[BaseException] = []
    state = {"copies": 0}

    def hook(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("INSERT IGNORE"):
            state["copies"] += 1
            if state["copies"] == 2:
                other = server.connect()
                try:
                    other.exec_driver_sql(
                        f"INSERT INTO {TABLE} (id, note) VALUES ('not-a-ulid-but-26-chars-ok', 'x')"
                    )
                    other.commit()
                except sa.exc.DBAPIError as exc:
                    failures.append(exc)
                finally:
                    other.close()

    sa.event.listen(server, "before_cursor_execute", hook)
    try:
        _migrate(server, batch_size=500)
    finally:
        sa.event.remove(server, "before_cursor_execute", hook)
    assert len(failures) == 1
    assert "not a ULID" in str(failures[0])
    assert _rows(server) == _expected(model)


def _refused(engine: Engine, match: str, error: type[Exception] = ValueError) -> None:
    with recording(engine) as seen, pytest.raises(error, match=match):
        _migrate(engine)
    assert not [s for s in seen if s.lstrip().upper().startswith(DDL)]


REFUSALS: dict[str, tuple[list[str], str]] = {
    # no primary key to walk
    "no primary key": (["ALTER TABLE shadow_orders DROP PRIMARY KEY"], "single-column primary"),
    # a composite key
    "composite key": (
        ["ALTER TABLE shadow_orders DROP PRIMARY KEY, ADD PRIMARY KEY (id, note)"],
        "single-column primary",
    ),
    # the RENAME would leave a foreign key on the old copy
    "foreign key to it": (
        [
            "CREATE TABLE shadow_child (id INT PRIMARY KEY, o CHAR(26), "
            "CONSTRAINT fk_shadow_child FOREIGN KEY (o) REFERENCES shadow_orders (id))"
        ],
        "fk_shadow_child",
    ),
    # a trigger of the application's own
    "a trigger": (
        ["CREATE TRIGGER trg_app AFTER INSERT ON shadow_orders FOR EACH ROW SET @x = 1"],
        "trg_app",
    ),
    # not InnoDB
    "MyISAM": (["ALTER TABLE shadow_orders ENGINE=MyISAM"], "InnoDB"),
    # the old table's name is taken
    "old name taken": (["CREATE TABLE _shadow_orders__old (x INT)"], "_shadow_orders__old"),
    # the shadow's name is taken by another table
    "shadow name taken": (["CREATE TABLE _shadow_orders__new (x INT)"], "_shadow_orders__new"),
    # a value that is not a ULID
    "bad text": (
        ["INSERT INTO shadow_orders (id, note) VALUES ('not-a-ulid-but-26-chars-ok', 'x')"],
        "not ULIDs",
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refused_before_any_ddl(server: Engine, case: str) -> None:
    setup, match = REFUSALS[case]
    _seed(server, 10)
    with server.begin() as conn:
        for statement in setup:
            conn.exec_driver_sql(statement)
    _refused(server, match)


def test_offline_writes_the_shadow_phases(server: Engine) -> None:
    # test_alembic_storage_offline_mariadb runs the script with the mariadb client.
    script = op_sql(
        "mysql",
        lambda ops: ops.alter_ulid_storage(
            TABLE, "id", from_storage="text", to_storage="binary", online=True
        ),
    )
    assert f"RENAME TABLE {TABLE} TO _{TABLE}__old, _{TABLE}__new TO {TABLE}" in script


def test_sqlite_online_is_a_value_error(backends: dict[str, Backend]) -> None:
    engine = sa.create_engine("sqlite://")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (id CHAR(26) PRIMARY KEY)")
        with pytest.raises(ValueError, match="SQLite has one writer"):
            Operations(MigrationContext.configure(conn)).alter_ulid_storage(
                "t", "id", from_storage="text", to_storage="binary", online=True
            )


@pytest.mark.parametrize(
    "options",
    [
        {"batch_size": 0},  # below 1
        {"batch_size": 1_000_001},  # above the cap
        {"batch_size": True},  # a bool is not a size
        {"pause": -1},  # negative
        {"progress": "print"},  # not callable
    ],
)
def test_bad_options_refused_when_the_op_is_built(options: dict[str, Any]) -> None:
    from sqlalchemy_ulid.alembic import AlterULIDStorageOp

    with pytest.raises((ValueError, TypeError)):
        AlterULIDStorageOp("t", "id", from_storage="text", to_storage="binary", **options)


def test_the_downgrade_of_an_interrupted_run_only_removes_the_shadow(server: Engine) -> None:
    model = _seed(server, 1_000)
    before = _schema(server, TABLE)
    _killed_run(server, KILL_POINTS["mid-copy"])
    _migrate(server, reverse=True)
    with server.connect() as conn:
        rows = {
            r[0]: (r[1], r[2]) for r in conn.exec_driver_sql(f"SELECT id, note, n FROM {TABLE}")
        }
        triggers = conn.exec_driver_sql(
            "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()"
        ).scalar()
    assert rows == model
    assert triggers == 0
    assert not sa.inspect(server).has_table(f"_{TABLE}__new")
    assert _schema(server, TABLE) == before


def test_a_nullable_column_with_a_ulid_default_gets_the_one_transaction_schema(
    server: Engine,
) -> None:
    """Not the key: ``ref`` is nullable, with a text DEFAULT that is carried over."""
    _seed(server, 300)
    with server.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {TABLE} SET ref = id WHERE MOD(n, 3) = 0")
        expected = {
            r[0]: None if r[1] is None else ULID(r[1]).bytes
            for r in conn.exec_driver_sql(f"SELECT id, ref FROM {TABLE}")
        }
    with server.connect() as conn:
        context = MigrationContext.configure(conn)
        with context.begin_transaction(), context.begin_transaction(_per_migration=True):
            Operations(context).alter_ulid_storage(
                TABLE, "ref", from_storage="text", to_storage="binary", online=True, batch_size=64
            )
    with server.connect() as conn:
        assert dict(conn.exec_driver_sql(f"SELECT id, ref FROM {TABLE}").all()) == expected
    _seed(server, 3, PLAIN)
    with server.begin() as conn:
        Operations(MigrationContext.configure(conn)).alter_ulid_storage(
            PLAIN, "ref", from_storage="text", to_storage="binary"
        )
    assert _schema(server, TABLE) == _schema(server, PLAIN)
    assert "DEFAULT" in _schema(server, TABLE).split("`ref`")[1].split("\n")[0]
