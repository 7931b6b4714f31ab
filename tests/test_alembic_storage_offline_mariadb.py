"""``alter_ulid_storage`` / ``alter_uuid7_storage(online=True)`` offline on MariaDB.

The script is written by a real ``alembic upgrade --sql`` (and ``downgrade
--sql``) and run by the real ``mariadb`` client on the test database, in its
default settings (REPEATABLE READ). The end state is compared with the
online op's on the same rows: ``SHOW CREATE TABLE`` (the AUTO_INCREMENT
counter included), every value, and no table or trigger left beside it.
The client's connection is killed inside the copy and before each phase;
the whole script run again finishes, and run after success changes nothing.
"""

from __future__ import annotations

import io
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.engine import Connection, Engine

import _clients
import _databases
import _sessions
import _writers
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _offline_scripts import VERSION_TABLE, alembic_sql, op_sql, run_online
from conftest import Backend, private_engine
from sqlalchemy_ulid import ULID, new_ulid, new_uuid7

TABLE = "smo"
#: (op, column, from, to): the key itself, and a column with a DEFAULT.
CASES = [
    ("alter_ulid_storage", "id", "text", "binary"),
    ("alter_ulid_storage", "ref", "text", "binary"),
    ("alter_uuid7_storage", "id", "text", "binary"),
    ("alter_uuid7_storage", "ref", "text", "hex"),
]
DEFAULT_ULID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
DEFAULT_UUID7 = "01890a5d-ac96-774b-bcce-b302099a8057"


@pytest.fixture
def server(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["mysql"], _drop) as engine:
        yield engine


_drop = _databases.dropper(
    f"{TABLE}_child",
    TABLE,
    VERSION_TABLE,
    f"{TABLE}_session",
    triggers=[f"{TABLE}_mine"],
    conversions=[TABLE],
)


def _value(op: str) -> str:
    return str(new_uuid7()) if op == "alter_uuid7_storage" else str(new_ulid())


def _stored(op: str, text: str, to: str = "binary") -> Any:
    """What ``to`` storage holds for ``text`` (Python's converter): 16 bytes, or hex."""
    if op == "alter_ulid_storage":
        return ULID(text).bytes
    return uuid.UUID(text).hex if to == "hex" else uuid.UUID(text).bytes


def _model(op: str, rows: int) -> dict[str, tuple[str, int, str]]:
    """id text -> (note, n, ref text)."""
    return {_value(op): (f"n{i}", i, _value(op)) for i in range(rows)}


def _create(engine: Engine, op: str, model: dict[str, tuple[str, int, str]]) -> None:
    width = 36 if op == "alter_uuid7_storage" else 26
    default = DEFAULT_UUID7 if op == "alter_uuid7_storage" else DEFAULT_ULID
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (id CHAR({width}) NOT NULL COMMENT 'the key', "
            "seq BIGINT NOT NULL AUTO_INCREMENT, note VARCHAR(20) NOT NULL DEFAULT 'x', "
            f"n INT NULL, ref CHAR({width}) NULL DEFAULT '{default}' COMMENT 'a ref', "
            "g INT AS (n + 1) VIRTUAL, PRIMARY KEY (id), UNIQUE KEY uq_seq (seq), KEY ix_n (n)) "
            "ENGINE=InnoDB COMMENT='orders'"
        )
        if model:
            conn.execute(
                sa.text(f"INSERT INTO {TABLE} (id, note, n, ref) VALUES (:id, :note, :n, :ref)"),
                [{"id": k, "note": v[0], "n": v[1], "ref": v[2]} for k, v in model.items()],
            )
        # Rows deleted from the end: the counter is past the highest key left.
        conn.execute(
            sa.text(f"INSERT INTO {TABLE} (id, ref) VALUES (:id, NULL)"), {"id": _value(op)}
        )
        conn.exec_driver_sql(f"DELETE FROM {TABLE} ORDER BY seq DESC LIMIT 1")


def _state(engine: Engine) -> dict[str, Any]:
    """Everything the conversion may change: the table, its rows, what is beside it."""
    with engine.connect() as conn:
        ddl = str(conn.exec_driver_sql(f"SHOW CREATE TABLE {TABLE}").one()[1])
        rows = [
            tuple(r)
            for r in conn.exec_driver_sql(
                f"SELECT id, seq, note, n, ref, g FROM {TABLE} ORDER BY seq"
            )
        ]
        # This test's tables (the database may hold others').
        tables = sorted(
            str(r[0])
            for r in conn.exec_driver_sql("SHOW TABLES")
            if str(r[0]).startswith((TABLE, f"_{TABLE}"))
        )
        triggers = [str(r[0]) for r in conn.exec_driver_sql("SHOW TRIGGERS")]
    return {"ddl": ddl, "rows": rows, "tables": tables, "triggers": triggers}


def _created(engine: Engine) -> Any:
    with engine.connect() as conn:
        return conn.exec_driver_sql(
            "SELECT CREATE_TIME FROM information_schema.TABLES "
            f"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{TABLE}'"
        ).scalar()


def _call(op: str, column: str, from_: str, to: str, **options: Any) -> str:
    extra = "".join(f", {k}={v!r}" for k, v in options.items())
    storages = f'from_storage="{from_}", to_storage="{to}"'
    return f'{op}("{TABLE}", "{column}", {storages}, online=True{extra})'


def _op_sql(op: str, column: str, from_: str, to: str, **options: Any) -> str:
    """The op's own part of the script (rerun whole, without Alembic's bookkeeping)."""
    return op_sql(
        "mysql",
        lambda ops: getattr(ops, op)(
            TABLE, column, from_storage=from_, to_storage=to, online=True, **options
        ),
    )


def _online(engine: Engine, op: str, column: str, from_: str, to: str) -> None:
    run_online(
        engine,
        lambda ops: getattr(ops, op)(
            TABLE, column, from_storage=from_, to_storage=to, online=True, batch_size=7
        ),
    )


def _expected_rows(
    op: str, column: str, model: dict[str, tuple[str, int, str]], to: str = "binary"
) -> list[tuple[Any, ...]]:
    """The rows after the conversion, computed in Python (ordered by seq)."""
    rows = []
    for seq, (key, (note, n, ref)) in enumerate(model.items(), start=1):
        id_ = _stored(op, key, to) if column == "id" else key
        ref_ = _stored(op, ref, to) if column == "ref" else ref
        rows.append((id_, seq, note, n, ref_, n + 1))
    return rows


def _rerun_is_a_no_op(engine: Engine, script: str) -> None:
    before, created = _state(engine), _created(engine)
    again = _clients.mariadb(engine, script)
    assert again.returncode == 0, again.stderr
    assert "copied" not in again.stdout, again.stdout
    assert "converted" not in again.stdout, again.stdout
    assert _state(engine) == before
    assert _created(engine) == created  # no ALTER, no RENAME


@pytest.mark.parametrize(("op", "column", "from_", "to"), CASES)
def test_upgrade_and_downgrade_scripts_end_as_the_online_op(
    server: Engine, tmp_path: Path, op: str, column: str, from_: str, to: str
) -> None:
    model = _model(op, 40)
    _create(server, op, model)
    original = _state(server)
    _online(server, op, column, from_, to)
    online_up = _state(server)
    _online(server, op, column, to, from_)
    online_down = _state(server)
    assert online_down["rows"] == original["rows"]
    _drop(server)
    _create(server, op, model)

    call = _call(op, column, from_, to, batch_size=7)
    up = alembic_sql(server, tmp_path, call)
    assert "mariadb --batch" in up
    done = _clients.mariadb(server, up)
    assert done.returncode == 0, done.stderr
    assert _state(server) == online_up
    assert online_up["rows"] == _expected_rows(op, column, model, to)
    assert online_up["tables"] == [TABLE]
    assert online_up["triggers"] == []
    _rerun_is_a_no_op(server, _op_sql(op, column, from_, to, batch_size=7))

    done = _clients.mariadb(server, alembic_sql(server, tmp_path, call, down=True))
    assert done.returncode == 0, done.stderr
    assert _state(server) == online_down
    _rerun_is_a_no_op(server, _op_sql(op, column, to, from_, batch_size=7))


#: name -> (statements making the table refusable, a part of the message).
REFUSALS: dict[str, tuple[list[str], str]] = {
    # the copy walks a single-column key
    "composite key": ([f"ALTER TABLE {TABLE} DROP PRIMARY KEY, ADD PRIMARY KEY (id, seq)"],
                      "single-column primary key"),
    "not InnoDB": ([f"ALTER TABLE {TABLE} ENGINE=Aria"], "needs an InnoDB table"),
    # the RENAME would leave the foreign key on the old copy
    "foreign key": ([f"CREATE TABLE {TABLE}_child (id INT PRIMARY KEY, ref BIGINT, "
                     f"FOREIGN KEY (ref) REFERENCES {TABLE} (seq)) ENGINE=InnoDB"],
                    "foreign keys use the table"),
    # it would not follow the swap
    "own trigger": ([f"CREATE TRIGGER {TABLE}_mine BEFORE INSERT ON {TABLE} "
                     "FOR EACH ROW SET NEW.n = NEW.n"], "has triggers (smo_mine)"),
    "old name taken": ([f"CREATE TABLE _{TABLE}__old (x INT PRIMARY KEY)"], "_smo__old"),
    "new name taken": ([f"CREATE TABLE _{TABLE}__new (x INT PRIMARY KEY)"],
                       "another shape is named _smo__new"),
    # 'U' is not in Crockford's alphabet
    "not a ULID": ([f"UPDATE {TABLE} SET id = REPEAT('U', 26) ORDER BY seq LIMIT 1"],
                   "holds values that are not ULIDs (e.g. UUUU"),
    "default": ([f"ALTER TABLE {TABLE} ALTER COLUMN id SET DEFAULT 'nope'"],
                "has DEFAULT 'nope', which cannot be carried"),
    # an interrupted run of the one-transaction op
    "holding type": ([f"ALTER TABLE {TABLE} MODIFY id VARBINARY(26) NOT NULL"],
                     "is VARBINARY: a conversion without online=True"),
    "neither storage": ([f"ALTER TABLE {TABLE} MODIFY id DATETIME NOT NULL"], "is neither text"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusals_stop_the_script_before_any_change(server: Engine, case: str) -> None:
    setup, message = REFUSALS[case]
    op = "alter_ulid_storage"
    model = _model(op, 5) if case != "neither storage" else {}
    _create(server, op, model)
    with server.begin() as conn:
        for statement in setup:
            conn.exec_driver_sql(statement)
    before = _state(server)
    done = _clients.mariadb(server, _op_sql(op, "id", "text", "binary"))
    assert done.returncode != 0
    assert "ERROR 1644 (45000)" in done.stderr, done.stderr
    assert message in done.stderr, done.stderr
    assert _state(server) == before


def test_a_non_uuid7_already_there_is_refused_before_any_change(server: Engine) -> None:
    op = "alter_uuid7_storage"
    _create(server, op, _model(op, 5))
    with server.begin() as conn:  # a version 4 UUID
        conn.exec_driver_sql(f"UPDATE {TABLE} SET ref = '{uuid.uuid4()}' ORDER BY seq LIMIT 1")
    before = _state(server)
    done = _clients.mariadb(server, _op_sql(op, "ref", "text", "binary"))
    assert "holds values that are not UUIDv7s" in done.stderr, done.stderr
    assert _state(server) == before


#: Prepended to a script: the client's session id, for the test to KILL it.
NOTE_SESSION = (
    f"CREATE TABLE IF NOT EXISTS {TABLE}_session (id BIGINT);\n"
    f"INSERT INTO {TABLE}_session VALUES (CONNECTION_ID());\n"
)


def _session(engine: Engine) -> int | None:
    """The id of the last client session that ran NOTE_SESSION."""
    with engine.connect() as conn:
        found = conn.exec_driver_sql(f"SELECT MAX(id) FROM {TABLE}_session").scalar()
    return None if found is None else int(found)


def _count(engine: Engine, table: str) -> int:
    with engine.connect() as conn:
        try:
            return int(conn.exec_driver_sql(f"SELECT COUNT(*) FROM {table}").scalar() or 0)
        except sa.exc.ProgrammingError:
            return 0


def test_killed_inside_the_copy_the_rerun_goes_on_and_a_second_is_a_no_op(
    server: Engine,
) -> None:
    op = "alter_ulid_storage"
    model = _model(op, 300)
    _create(server, op, model)
    script = _op_sql(op, "id", "text", "binary", batch_size=10, pause=0.1)
    killed: list[int] = []

    def copying(conn: Connection) -> bool:
        if _count(server, f"_{TABLE}__new") >= 100:
            killed[:] = [session for session in [_session(server)] if session is not None]
        return bool(killed)

    watcher = _sessions.When(server, copying, lambda: _sessions.kill_session(server, killed[0]))
    first = _clients.mariadb(server, NOTE_SESSION + script)
    watcher.join(timeout=35)
    assert killed, first.stdout[-500:]
    assert first.returncode != 0
    assert 0 < _count(server, f"_{TABLE}__new") < 300
    again = _clients.mariadb(server, script)
    assert again.returncode == 0, again.stderr
    copied = [int(line.split(": ")[1].split()[0]) for line in again.stdout.splitlines()
              if " copied" in line]  # fmt: skip
    assert copied
    assert copied[-1] < 250
    assert _state(server)["rows"] == _expected_rows(op, "id", model)
    _rerun_is_a_no_op(server, script)


@pytest.mark.parametrize("phase", [1, 2, 3, 4, 5])
def test_killed_at_a_phase_boundary_the_rerun_finishes(server: Engine, phase: int) -> None:
    op, column = "alter_uuid7_storage", "id"
    model = _model(op, 30)
    _create(server, op, model)
    script = _op_sql(op, column, "text", "binary", batch_size=7)
    marker = f"-- Phase {phase}:"
    assert script.count(marker) == 1
    cut = _clients.mariadb(server, script.replace(marker, "KILL CONNECTION_ID();\n" + marker))
    assert cut.returncode != 0
    assert "Connection was killed" in cut.stderr or "server has gone away" in cut.stderr
    done = _clients.mariadb(server, script)
    assert done.returncode == 0, done.stderr
    state = _state(server)
    assert state["rows"] == _expected_rows(op, column, model)
    assert state["tables"] == [TABLE]
    assert state["triggers"] == []
    _rerun_is_a_no_op(server, script)


def _triggers(conn: Connection) -> bool:
    return (
        conn.exec_driver_sql(
            "SELECT COUNT(*) FROM information_schema.TRIGGERS "
            f"WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = '{TABLE}'"
        ).scalar()
        == 3
    )


def test_a_non_ulid_written_mid_script_fails_that_writers_statement(server: Engine) -> None:
    op = "alter_ulid_storage"
    model = _model(op, 200)
    _create(server, op, model)
    script = _op_sql(op, "ref", "text", "binary", batch_size=10, pause=0.02)
    failures: list[BaseException] = []

    def write_bad() -> None:
        with server.connect() as conn:
            conn.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 10")
            try:
                conn.exec_driver_sql(
                    f"INSERT INTO {TABLE} (id, ref) VALUES ('{new_ulid()}', '{'U' * 26}')"
                )
                conn.commit()
            except sa.exc.DBAPIError as exc:
                failures.append(exc)

    writer = _sessions.When(server, _triggers, write_bad)  # once they are there
    done = _clients.mariadb(server, script)
    writer.join(timeout=35)
    assert done.returncode == 0, done.stderr
    assert len(failures) == 1
    assert "out of range" in str(failures[0])
    assert _state(server)["rows"] == _expected_rows(op, "ref", model)  # stored nowhere


class _Writers(_writers.Writers):
    """Two threads inserting, updating and deleting rows of their own, each with its model.

    Past the swap the column is binary: a writer binds bytes from then on
    (as the application deployed with the migration would).
    """

    def __init__(self, engine: Engine, op: str, model: dict[str, tuple[str, int, str]]) -> None:
        super().__init__(engine, 2, settle=0.05)
        self.op = op
        self.writes = 0
        self.models: list[dict[int, tuple[str, int, str]]] = [{}, {}]
        with engine.connect() as conn:
            found = conn.exec_driver_sql(f"SELECT seq FROM {TABLE} ORDER BY seq")
            seqs = [int(r[0]) for r in found]
        for seq, (_key, value) in zip(seqs, model.items(), strict=True):
            self.models[seq % 2][seq] = value

    def begin(self, conn: Connection, n: int) -> None:
        conn.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 10")

    def _send(self, conn: Connection, step: int, seq: int | None, ref: str, binary: bool) -> None:
        model = self.models[step % 2 if seq is None else seq % 2]
        bound = _stored(self.op, ref) if binary else ref
        if step % 3 == 0 or seq is None:
            result = conn.execute(
                sa.text(f"INSERT INTO {TABLE} (id, n, ref) VALUES (:id, :n, :ref)"),
                {"id": _value(self.op), "n": step, "ref": bound},
            )
            new = int(result.lastrowid)
            conn.commit()
            self.models[new % 2][new] = ("x", step, ref)
            return
        if step % 3 == 1:
            conn.execute(
                sa.text(f"UPDATE {TABLE} SET n = :n, ref = :ref WHERE seq = :seq"),
                {"n": step, "ref": bound, "seq": seq},
            )
            conn.commit()
            model[seq] = (model[seq][0], step, ref)
            return
        conn.execute(sa.text(f"DELETE FROM {TABLE} WHERE seq = :seq"), {"seq": seq})
        conn.commit()
        del model[seq]

    def write(self, conn: Connection, n: int) -> None:
        rng, binary, step = random.Random(n), False, n
        deadline = time.monotonic() + 60  # bounded, whatever happens to the test
        while not self.stop.is_set() and time.monotonic() < deadline:
            step += 2  # writer n takes the rows whose seq has n's parity
            own = list(self.models[n])
            seq = rng.choice(own) if own else None
            for _ in range(2):
                try:
                    with self.timing():
                        self._send(conn, step, seq, _value(self.op), binary)
                    self.writes += 1
                    break
                except sa.exc.OperationalError as exc:
                    conn.rollback()  # a deadlock: rolled back, not applied
                    if exc.orig.args[0] != 1213:
                        raise
                    break
                except sa.exc.DataError as exc:
                    conn.rollback()
                    if binary or exc.orig.args[0] != 1406:  # text too long for BINARY(16)
                        raise
                    binary = True
            time.sleep(0.003)


def test_two_writers_during_the_script_the_table_ends_as_expected(server: Engine) -> None:
    op = "alter_ulid_storage"
    model = _model(op, 300)
    _create(server, op, model)
    script = _op_sql(op, "ref", "text", "binary", batch_size=20, pause=0.02)
    with _Writers(server, op, model) as writers:
        done = _clients.mariadb(server, script)
        during = writers.writes
        time.sleep(0.2)  # writes after the swap, too
    assert during > 50
    assert done.returncode == 0, done.stderr
    writers.check()
    expected = {
        seq: (note, n, _stored(op, ref))
        for m in writers.models
        for seq, (note, n, ref) in m.items()
    }
    with server.connect() as conn:
        found = {
            int(r[0]): (r[1], r[2], bytes(r[3]))
            for r in conn.exec_driver_sql(f"SELECT seq, note, n, ref FROM {TABLE}")
        }
    assert found == expected
    assert _state(server)["triggers"] == []


def test_the_phases_are_written_in_order() -> None:
    script = _op_sql("alter_ulid_storage", "id", "text", "binary")
    marks = ["checked before any change", *(f"-- Phase {i}:" for i in range(1, 6))]
    places = [script.index(mark) for mark in marks]
    assert places == sorted(places)
    assert "SET NAMES utf8mb4;" in script
    assert script.rstrip().endswith(";")


def test_a_non_ulid_written_before_the_triggers_stops_the_copy_naming_it(server: Engine) -> None:
    op = "alter_ulid_storage"
    model = _model(op, 20)
    _create(server, op, model)
    script = _op_sql(op, "ref", "text", "binary", batch_size=7)
    # Written after the check, before the triggers exist: only the copy can see it.
    bad = f"INSERT INTO {TABLE} (id, ref) VALUES ('{new_ulid()}', '{'U' * 26}');\n"
    done = _clients.mariadb(server, script.replace("-- Phase 2:", bad + "-- Phase 2:"))
    assert done.returncode != 0
    assert f"holds {'U' * 26}, which is not one of the ULIDs" in done.stderr, done.stderr
    assert _count(server, f"_{TABLE}__new") == 0  # stopped before the first batch
    with server.begin() as conn:
        conn.exec_driver_sql(f"DELETE FROM {TABLE} WHERE ref = '{'U' * 26}'")
    again = _clients.mariadb(server, script)
    assert again.returncode == 0, again.stderr
    assert _state(server)["rows"] == _expected_rows(op, "ref", model)


def test_the_script_sets_its_own_sql_mode_and_names(server: Engine, tmp_path: Path) -> None:
    # A client session that reads backslashes and double quotes otherwise, and
    # utf8mb3: the script's literals and the conversion's text still work.
    op = "alter_ulid_storage"
    model = _model(op, 10)
    _create(server, op, model)
    odd = "SET NAMES utf8mb3; SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES,ANSI_QUOTES';\n"
    for from_, to in (("text", "binary"), ("binary", "text")):
        done = _clients.mariadb(server, odd + _op_sql(op, "ref", from_, to) + "SELECT @@sql_mode;")
        assert done.returncode == 0, done.stderr
        assert "ANSI_QUOTES,NO_BACKSLASH_ESCAPES" in done.stdout  # given back
    assert _state(server)["rows"] == [
        (key, seq, note, n, ref, n + 1)
        for seq, (key, (note, n, ref)) in enumerate(model.items(), start=1)
    ]


def test_names_with_a_quote_a_backtick_and_a_percent(server: Engine) -> None:
    table, column = "o'd`r%", "i`d'x"
    quoted = "`o'd``r%`".replace("%", "%%")
    keys = [str(new_ulid()) for _ in range(5)]
    with server.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {quoted}")
        conn.exec_driver_sql(
            f"CREATE TABLE {quoted} (`i``d'x` CHAR(26) NOT NULL, `n o` INT, PRIMARY KEY (`i``d'x`))"
        )
        conn.exec_driver_sql(
            f"INSERT INTO {quoted} VALUES " + ", ".join(f"('{k}', {i})" for i, k in enumerate(keys))
        )
    try:
        for from_, to in (("text", "binary"), ("binary", "text")):
            buffer = io.StringIO()
            context = MigrationContext.configure(
                dialect_name="mysql", opts={"as_sql": True, "output_buffer": buffer}
            )
            Operations(context).alter_ulid_storage(
                table, column, from_storage=from_, to_storage=to, online=True
            )
            done = _clients.mariadb(server, buffer.getvalue())
            assert done.returncode == 0, done.stderr
            with server.connect() as conn:
                found = [r[0] for r in conn.exec_driver_sql(f"SELECT `i``d'x` FROM {quoted}")]
            assert sorted(found) == sorted(ULID(k).bytes if to == "binary" else k for k in keys)
    finally:
        with server.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {quoted}")
