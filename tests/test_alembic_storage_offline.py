"""``alter_ulid_storage`` / ``alter_uuid7_storage(..., online=True)`` offline (``--sql``).

The script is written by a real ``alembic upgrade --sql`` (and ``downgrade
--sql``) and applied with the real ``psql -v ON_ERROR_STOP=1``, as a user
applies it, on PostgreSQL in its default settings. The end state is
compared with the online op's on an identical table: types, nullability,
DEFAULT, COMMENT, indexes and constraints, and every value. psql's session
is killed inside the copy and at phase boundaries: the rerun finishes and a
second rerun does nothing. Writers go on while the script runs.
"""

from __future__ import annotations

import io
import textwrap
import threading
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
import _writers
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _offline_scripts import VERSION_TABLE, alembic_sql, op_sql
from _sessions import When, kill_application
from conftest import Backend, private_engine
from sqlalchemy_ulid import ULID, ULIDType, new_ulid, new_uuid7

#: The script's steps, by the phase of the op they are (a kill lands before one).
PHASES = {
    1: "-- add shadow (ddl)",
    2: "-- trigger function (ddl)",
    3: "-- copy (fill)",
    4: "-- same check (ddl)",
    5: "-- not null check (ddl)",
    6: "-- drop invalid indexes (concurrent)",
    7: "-- swap (ddl)",
}

TABLE = "sf_items"
TWIN = "sf_twin"
DEFAULT_ULID = ULID("01ARZ3NDEKTSV4RRFFQ69G5FAV")
DEFAULT_UUID7 = uuid.UUID("01890a5d-ac96-774b-bcce-b302099a8057")
#: (op, from_storage, to_storage)
CASES = [
    ("alter_ulid_storage", "text", "auto"),
    ("alter_ulid_storage", "text", "binary"),
    ("alter_uuid7_storage", "text", "auto"),
]


@pytest.fixture
def engine(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["postgresql"], _drop) as engine:
        yield engine


_drop = _databases.dropper(
    TABLE,
    TWIN,
    VERSION_TABLE,
    functions=[f"{name}_ref__ulid_sync()" for name in (TABLE, TWIN)],
    conversions=[TABLE, TWIN],
)


def _new(op: str) -> str:
    return str(new_ulid() if op == "alter_ulid_storage" else new_uuid7())


def _create(engine: Engine, name: str, op: str, values: dict[int, str]) -> None:
    """A table whose ``ref`` (text storage, NOT NULL, a DEFAULT, a COMMENT) is converted."""
    ulid = op == "alter_ulid_storage"
    type_: sa.types.TypeEngine[Any] = ULIDType("text") if ulid else sa.CHAR(36)
    default = f"'{DEFAULT_ULID}'" if ulid else f"'{DEFAULT_UUID7}'"
    table = sa.Table(
        name,
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column(
            "ref", type_, nullable=False, server_default=sa.text(default), comment="a 100% ref"
        ),
        sa.Column("n", sa.Integer),
        sa.UniqueConstraint("ref", name=f"uq_{name}_ref"),
        sa.Index(f"ix_{name}_n_ref", "n", "ref"),
    )
    with engine.begin() as conn:
        table.create(conn)
        if values:
            conn.execute(
                sa.text(f"INSERT INTO {name} (id, ref, n) VALUES (:id, :ref, :id)"),
                [{"id": i, "ref": v} for i, v in values.items()],
            )


def _values(engine: Engine, name: str, op: str) -> dict[int, str]:
    """Every row's ``ref``, read back in its canonical text, whatever the storage."""
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(f"SELECT id, ref FROM {name}").all()
    out = {}
    for key, value in rows:
        if isinstance(value, uuid.UUID):
            value = str(ULID.from_uuid(value)) if op == "alter_ulid_storage" else str(value)
        elif isinstance(value, bytes):
            as_uuid = uuid.UUID(bytes=value)
            value = str(ULID.from_bytes(value)) if op == "alter_ulid_storage" else str(as_uuid)
        out[key] = value.strip() if op == "alter_ulid_storage" else value
    return out


def _schema(engine: Engine, name: str) -> dict[str, Any]:
    inspector = sa.inspect(engine)
    return {
        "columns": [
            (c["name"], str(c["type"]), c["nullable"], c.get("default"), c.get("comment"))
            for c in inspector.get_columns(name)
        ],
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
            engine, f"SELECT count(*) FROM pg_trigger WHERE tgrelid = '{name}'::regclass"
        ),
        "leftovers": _scalar(engine, "SELECT to_regclass('sqlalchemy_ulid_migrations')::text"),
    }


def _scalar(engine: Engine, sql: str) -> Any:
    with engine.connect() as conn:
        return conn.exec_driver_sql(sql).scalar()


def _online(engine: Engine, name: str, op: str, from_: str, to: str) -> None:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"transactional_ddl": True})
        with context.begin_transaction():
            getattr(Operations(context), op)(
                name, "ref", from_storage=from_, to_storage=to, online=True
            )


def _op_sql(op: str, from_: str, to: str, **options: Any) -> str:
    """The op's own part of the script (rerun whole, without Alembic's bookkeeping)."""
    return op_sql(
        "postgresql",
        lambda ops: getattr(ops, op)(
            TABLE, "ref", from_storage=from_, to_storage=to, online=True, **options
        ),
        transactional_ddl=True,
    )


def _call(op: str, from_: str, to: str, **options: Any) -> str:
    extra = "".join(f", {k}={v!r}" for k, v in options.items())
    return f'{op}("{TABLE}", "ref", from_storage="{from_}", to_storage="{to}", online=True{extra})'


@pytest.mark.parametrize(("op", "from_", "to"), CASES)
def test_upgrade_and_downgrade_scripts_end_as_the_online_op(
    engine: Engine, tmp_path: Path, op: str, from_: str, to: str
) -> None:
    values = {i: _new(op) for i in range(1, 121)}
    _create(engine, TABLE, op, values)
    _create(engine, TWIN, op, values)
    up = alembic_sql(engine, tmp_path, _call(op, from_, to, batch_size=50))
    assert "\\gexec" in up
    assert "\\set ON_ERROR_STOP on\n" in up
    done = _clients.psql(engine, up)
    assert done.returncode == 0, done.stderr
    assert "copied 120 rows" in done.stderr
    _online(engine, TWIN, op, from_, to)
    assert _values(engine, TABLE, op) == values == _values(engine, TWIN, op)
    after = _schema(engine, TABLE)
    assert after == _schema(engine, TWIN)
    assert after["columns"][-1][1] != "CHAR(26)"  # converted
    assert after["leftovers"] is None

    down = alembic_sql(engine, tmp_path, _call(op, from_, to, batch_size=50), down=True)
    done = _clients.psql(engine, down)
    assert done.returncode == 0, done.stderr
    _online(engine, TWIN, op, to, from_)
    assert _values(engine, TABLE, op) == values == _values(engine, TWIN, op)
    assert _schema(engine, TABLE) == _schema(engine, TWIN)


def test_a_value_that_is_not_a_ulid_stops_the_script_before_any_change(engine: Engine) -> None:
    values = {1: _new("alter_ulid_storage"), 2: "UUUUUUUUUUUUUUUUUUUUUUUUUU"}
    _create(engine, TABLE, "alter_ulid_storage", values)
    before = _schema(engine, TABLE)
    done = _clients.psql(engine, _op_sql("alter_ulid_storage", "text", "auto"))
    assert done.returncode != 0
    assert "holds values that are not ULIDs (e.g. 'UUUUUUUUUUUUUUUUUUUUUUUUUU')" in done.stderr
    assert _schema(engine, TABLE) == before  # no column, trigger or state table
    assert _values(engine, TABLE, "alter_ulid_storage") == values


def test_a_non_uuid7_already_there_is_refused_naming_it(engine: Engine) -> None:
    v4 = str(uuid.uuid4())
    _create(engine, TABLE, "alter_uuid7_storage", {1: v4})
    before = _schema(engine, TABLE)
    done = _clients.psql(engine, _op_sql("alter_uuid7_storage", "text", "auto"))
    assert done.returncode != 0
    assert f"holds values that are not UUIDv7s (e.g. '{v4}')" in done.stderr
    assert _schema(engine, TABLE) == before


def test_refusals_the_online_op_makes_stop_the_script_before_any_change(engine: Engine) -> None:
    _create(engine, TABLE, "alter_ulid_storage", {1: _new("alter_ulid_storage")})
    script = _op_sql("alter_ulid_storage", "text", "auto")
    for setup, message, undo in [
        (f"CREATE VIEW sf_view AS SELECT ref FROM {TABLE}", "sf_view", "DROP VIEW sf_view"),
        (
            f"CREATE INDEX ix_partial ON {TABLE} (ref) WHERE n > 3",
            "the index ix_partial uses ref with a WHERE clause",
            "DROP INDEX ix_partial",
        ),
        (
            f"ALTER TABLE {TABLE} ADD CONSTRAINT ck_ref CHECK (ref <> '')",
            "is used by constraint ck_ref",
            f"ALTER TABLE {TABLE} DROP CONSTRAINT ck_ref",
        ),
        (
            f"ALTER TABLE {TABLE} ALTER COLUMN ref SET DEFAULT 'x' || 'y'",
            "has DEFAULT",
            f"ALTER TABLE {TABLE} ALTER COLUMN ref DROP DEFAULT",
        ),
    ]:
        with engine.begin() as conn:
            conn.exec_driver_sql(setup)
        before = _schema(engine, TABLE)
        done = _clients.psql(engine, script)
        assert done.returncode != 0
        assert message in done.stderr, done.stderr
        assert _schema(engine, TABLE) == before
        with engine.begin() as conn:
            conn.exec_driver_sql(undo)


class _Writers(_writers.Writers):
    """Two threads inserting and updating rows of their own while the script runs."""

    def __init__(self, engine: Engine, op: str, seeded: dict[int, str]) -> None:
        super().__init__(engine, 2, settle=0, join=30)
        self.op = op
        self.expected = dict(seeded)
        self.writes = 0
        self.lock = threading.Lock()

    def write(self, conn: Connection, writer: int) -> None:
        next_id = 100_000 * (writer + 1)
        mine = [k for k in self.expected if k % 2 == writer]
        while not self.stop.is_set() and not self._copy_done(conn):
            new, changed = _new(self.op), _new(self.op)
            target = mine[self.writes % len(mine)]
            with conn.begin():
                _writers.insert_and_change(conn, TABLE, next_id, new, target, changed)
            with self.lock:
                self.expected[next_id], self.expected[target] = new, changed
                self.writes += 1
            next_id += 1
            time.sleep(0.005)

    @staticmethod
    def _copy_done(conn: Any) -> bool:
        # Writers bind the old storage: they stop once the copy is proved
        # (phase 4), long before the swap changes the column's type.
        done = conn.exec_driver_sql(
            "SELECT count(*) FROM pg_constraint WHERE conname = 'ck_sf_items_ref__ulid_same'"
        ).scalar()
        conn.rollback()
        return bool(done)


def test_two_writers_during_the_script_every_row_converted(engine: Engine) -> None:
    op = "alter_ulid_storage"
    seeded = {i: _new(op) for i in range(1, 401)}
    _create(engine, TABLE, op, seeded)
    script = _op_sql(op, "text", "binary", batch_size=20, pause=0.05)
    with _Writers(engine, op, seeded) as writers:
        done = _clients.psql(engine, script)
    assert done.returncode == 0, done.stderr
    assert not writers.errors, writers.errors
    assert writers.writes > 10
    assert _values(engine, TABLE, op) == writers.expected
    assert _scalar(engine, f"SELECT count(*) FROM {TABLE} WHERE octet_length(ref) <> 16") == 0


def test_a_non_ulid_written_mid_script_fails_that_writers_statement(engine: Engine) -> None:
    op = "alter_ulid_storage"
    seeded = {i: _new(op) for i in range(1, 201)}
    _create(engine, TABLE, op, seeded)
    script = _op_sql(op, "text", "auto", batch_size=10, pause=0.05)
    failures: list[str] = []

    def write_bad() -> None:
        with engine.connect() as conn:
            try:
                with conn.begin():
                    conn.exec_driver_sql(
                        f"INSERT INTO {TABLE} (id, ref) VALUES (999, 'UUUUUUUUUUUUUUUUUUUUUUUUUU')"
                    )
            except sa.exc.DBAPIError as exc:
                failures.append(str(exc))

    thread = When(
        engine,
        lambda conn: conn.exec_driver_sql(
            "SELECT count(*) FROM pg_trigger WHERE tgname = 'sf_items_ref__ulid_sync'"
        ).scalar(),
        write_bad,
        anyway=True,
    )
    done = _clients.psql(engine, script)
    thread.join(timeout=30)
    assert done.returncode == 0, done.stderr
    assert len(failures) == 1
    assert "not a ULID: UUUU" in failures[0]
    assert _values(engine, TABLE, op) == seeded  # the row is nowhere


def _terminate_when(engine: Engine, app: str, sql: str) -> When:
    """Kill psql's session (by its application_name) once ``sql`` returns true."""

    def ready(conn: Connection) -> object:
        try:
            return conn.exec_driver_sql(sql).scalar()
        except sa.exc.ProgrammingError:  # the state table is not there yet
            return False

    return When(engine, ready, lambda: kill_application(engine, app))


def _finish_and_rerun(engine: Engine, script: str, op: str, values: dict[int, str]) -> str:
    """Rerun: it finishes, and a second rerun changes nothing. Returns the first rerun's log."""
    done = _clients.psql(engine, script)
    assert done.returncode == 0, done.stderr
    assert _values(engine, TABLE, op) == values
    after = _schema(engine, TABLE)
    _create(engine, TWIN, op, values)
    _online(engine, TWIN, op, "text", "auto")
    assert after == _schema(engine, TWIN)
    again = _clients.psql(engine, script)
    assert again.returncode == 0, again.stderr
    assert "the rest of this script does nothing" in again.stderr
    assert "copied" not in again.stderr
    assert "CREATE INDEX" not in again.stderr
    assert _schema(engine, TABLE) == after
    return done.stderr


def test_killed_inside_the_copy_the_rerun_goes_on_after_the_last_batch(engine: Engine) -> None:
    op = "alter_ulid_storage"
    values = {i: _new(op) for i in range(1, 301)}
    _create(engine, TABLE, op, values)
    script = _op_sql(op, "text", "auto", batch_size=20, pause=0.1)
    killer = _terminate_when(
        engine,
        "sf-kill",
        "SELECT count(*) FROM sqlalchemy_ulid_migrations "
        f"WHERE op = 'alter_ulid_storage:copy' AND target = '{TABLE}.ref'",
    )
    killed = _clients.psql(engine, script, app="sf-kill")
    killer.join(timeout=30)
    assert killed.returncode != 0
    log = _finish_and_rerun(engine, script, op, values)
    # The copy went on after the batches the killed run committed.
    copied = [
        int(line.split("copied ")[1].split()[0]) for line in log.splitlines() if "copied" in line
    ]
    assert copied
    assert copied[-1] < 300


@pytest.mark.parametrize("phase", [2, 3, 4, 5, 6, 7])
def test_killed_at_a_phase_boundary_the_rerun_finishes(engine: Engine, phase: int) -> None:
    op = "alter_ulid_storage"
    values = {i: _new(op) for i in range(1, 61)}
    _create(engine, TABLE, op, values)
    script = _op_sql(op, "text", "auto", batch_size=25)
    marker = PHASES[phase]
    assert script.count(marker) == 1
    cut = script.replace(marker, "SELECT pg_terminate_backend(pg_backend_pid());\n" + marker)
    killed = _clients.psql(engine, cut)
    assert killed.returncode != 0
    assert "terminating connection" in killed.stderr, killed.stderr
    _finish_and_rerun(engine, script, op, values)


def test_rows_written_without_the_trigger_are_converted_again_before_the_check(
    engine: Engine,
) -> None:
    op = "alter_ulid_storage"
    values = {i: _new(op) for i in range(1, 41)}
    _create(engine, TABLE, op, values)
    script = _op_sql(op, "text", "auto", batch_size=25)
    cut = script.replace(
        "-- same check (ddl)", "SELECT pg_terminate_backend(pg_backend_pid());\n" + PHASES[4]
    )
    assert _clients.psql(engine, cut).returncode != 0
    # A session that skips triggers (as logical replication's apply does).
    first, second = _new(op), _new(op)
    with engine.begin() as conn:
        conn.exec_driver_sql("SET LOCAL session_replication_role = replica")
        conn.exec_driver_sql(f"UPDATE {TABLE} SET ref = '{first}' WHERE id = 1")
        conn.exec_driver_sql(f"UPDATE {TABLE} SET ref = '{second}' WHERE id = 2")
    values[1], values[2] = first, second
    done = _clients.psql(engine, script)
    assert done.returncode == 0, done.stderr
    assert "2 rows were written without the trigger; converted again" in done.stderr
    assert _values(engine, TABLE, op) == values


def test_a_schema_and_names_with_a_quote_and_a_percent(engine: Engine) -> None:
    # A quote ends a string literal early; a percent is a placeholder in
    # format() and RAISE; the schema is quoted in the index renames.
    setup = textwrap.dedent(
        """\
        DROP SCHEMA IF EXISTS "sf sch%" CASCADE;
        CREATE SCHEMA "sf sch%";
        CREATE TABLE "sf sch%"."it's 50%" (id int PRIMARY KEY,
          "re'f%" char(26) NOT NULL DEFAULT '01ARZ3NDEKTSV4RRFFQ69G5FAV',
          CONSTRAINT "uq it's%" UNIQUE ("re'f%"));
        CREATE INDEX "ix 100%" ON "sf sch%"."it's 50%" (id, "re'f%");
        COMMENT ON COLUMN "sf sch%"."it's 50%"."re'f%" IS 'it''s 100%';
        INSERT INTO "sf sch%"."it's 50%" VALUES (1, '01ARZ3NDEKTSV4RRFFQ69G5FAW');
        """
    )
    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect_name="postgresql", opts={"as_sql": True, "output_buffer": buffer}
    )
    Operations(context).alter_ulid_storage(
        "it's 50%", "re'f%", schema="sf sch%", from_storage="text", to_storage="binary",
        online=True, batch_size=2,
    )  # fmt: skip
    try:
        assert _clients.psql(engine, setup).returncode == 0
        for _ in range(2):
            done = _clients.psql(engine, buffer.getvalue())
            assert done.returncode == 0, done.stderr
        assert "binary storage already: the rest of this script does nothing" in done.stderr
        inspector = sa.inspect(engine)
        column = next(
            c for c in inspector.get_columns("it's 50%", schema="sf sch%") if c["name"] == "re'f%"
        )
        assert (str(column["type"]), column["comment"]) == ("BYTEA", "it's 100%")
        assert sorted(i["name"] for i in inspector.get_indexes("it's 50%", schema="sf sch%")) == [
            "ix 100%",
            "uq it's%",
        ]
        with engine.connect() as conn:
            stored = conn.exec_driver_sql('SELECT "re\'f%%" FROM "sf sch%%"."it\'s 50%%"').scalar()
        assert ULID.from_bytes(stored) == ULID("01ARZ3NDEKTSV4RRFFQ69G5FAW")
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql('DROP SCHEMA IF EXISTS "sf sch%%" CASCADE')


def test_the_phases_are_written_in_order() -> None:
    script = _op_sql("alter_ulid_storage", "text", "auto")
    markers = ["checked before any change", *(PHASES[i] for i in range(1, 8))]
    positions = [script.index(marker) for marker in markers]
    assert positions == sorted(positions)
    assert script.count(" \\gexec\n") == 2
    assert script.count("COMMIT;") >= 5  # inside the blocks, one transaction each step


def test_an_invalid_index_left_by_a_failed_concurrent_build_is_built_again(
    engine: Engine,
) -> None:
    op = "alter_ulid_storage"
    values = {i: _new(op) for i in range(1, 41)}
    _create(engine, TABLE, op, values)
    script = _op_sql(op, "text", "auto", batch_size=25)
    cut = script.replace(
        "-- drop invalid indexes (concurrent)",
        "SELECT pg_terminate_backend(pg_backend_pid());\n" + PHASES[6],
    )
    assert _clients.psql(engine, cut).returncode != 0
    # A concurrent build that times out waiting for a writer leaves its index INVALID.
    autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
    with engine.connect() as writer, autocommit.connect() as builder:
        writer.exec_driver_sql(f"UPDATE {TABLE} SET n = n WHERE id = 1")
        builder.exec_driver_sql("SET lock_timeout = '200ms'")
        with pytest.raises(sa.exc.OperationalError, match="lock timeout"):
            builder.exec_driver_sql(
                f"CREATE INDEX CONCURRENTLY ix_sf_items_n_ref__ulid ON {TABLE} (n, ref__ulid)"
            )
        writer.rollback()
    assert (
        _scalar(engine, "SELECT count(*) FROM pg_index WHERE NOT indisvalid AND "
                "indexrelid = 'ix_sf_items_n_ref__ulid'::regclass") == 1
    )  # fmt: skip
    _finish_and_rerun(engine, script, op, values)


def test_the_primary_key_itself_converted(engine: Engine) -> None:
    op = "alter_ulid_storage"
    keys = sorted(_new(op) for _ in range(50))
    statements = textwrap.dedent(
        """\
        CREATE TABLE {t} (id char(26) PRIMARY KEY, n int);
        INSERT INTO {t} SELECT k, o FROM unnest(ARRAY[{keys}]) WITH ORDINALITY AS u(k, o);
        """
    )
    literal = ", ".join(f"'{k}'" for k in keys)
    for name in (TABLE, TWIN):
        assert _clients.psql(engine, statements.format(t=name, keys=literal)).returncode == 0
    script = op_sql(
        "postgresql",
        lambda ops: ops.alter_ulid_storage(
            TABLE, "id", from_storage="text", to_storage="auto", online=True, batch_size=20
        ),
    )
    done = _clients.psql(engine, script)
    assert done.returncode == 0, done.stderr
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"transactional_ddl": True})
        with context.begin_transaction():
            Operations(context).alter_ulid_storage(
                TWIN, "id", from_storage="text", to_storage="auto", online=True
            )
        stored = conn.exec_driver_sql(f"SELECT id FROM {TABLE} ORDER BY n").scalars().all()
    assert [str(ULID.from_uuid(v)) for v in stored] == keys
    assert _schema(engine, TABLE) == _schema(engine, TWIN)


def test_a_non_ulid_written_before_the_trigger_stops_the_rerun_naming_it(engine: Engine) -> None:
    op = "alter_ulid_storage"
    values = {i: _new(op) for i in range(1, 21)}
    _create(engine, TABLE, op, values)
    script = _op_sql(op, "text", "auto")
    cut = script.replace(
        "-- trigger function (ddl)", "SELECT pg_terminate_backend(pg_backend_pid());\n" + PHASES[2]
    )
    assert _clients.psql(engine, cut).returncode != 0
    with engine.begin() as conn:  # after the check, before the trigger
        conn.exec_driver_sql(f"INSERT INTO {TABLE} (id, ref) VALUES (99, 'ZZZZ')")
    done = _clients.psql(engine, script)
    assert done.returncode != 0
    assert "holds values that are not ULIDs (e.g. 'ZZZZ" in done.stderr
    assert _scalar(engine, f"SELECT count(*) FROM {TABLE} WHERE ref__ulid IS NOT NULL") == 0
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DELETE FROM {TABLE} WHERE id = 99")
    _finish_and_rerun(engine, script, op, values)
