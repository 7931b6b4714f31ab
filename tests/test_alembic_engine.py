"""The migration engine: one plan, run online or written as a script, for add_ulid_column.

On PostgreSQL and MariaDB, for ``add_ulid_column(..., online=True)``:

* golden: the DDL the online runner sends is, statement for statement and in
  order, the plan's, and the script the renderer writes holds each of them;
* online and offline on twin tables (the same names, long enough to be
  hashed) end in the same schema;
* the script run whole a second time is a no-op that succeeds;
* the script stopped after each step, then run again whole, ends in that
  schema too.

The fill is the one kind of step with two bodies (ids made in Python online,
in SQL offline): its batches are checked by the ids they leave, not by text.
"""

from __future__ import annotations

import io
import itertools
import logging
import re
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

import _clients
import _databases
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _offline_scripts import op_sql, run_online
from conftest import recording
from sqlalchemy_ulid import ULID
from sqlalchemy_ulid._time import to_ms
from sqlalchemy_ulid.alembic._add import AddULIDColumnOp, AddUUID7ColumnOp, add_names
from sqlalchemy_ulid.alembic._plan.batches import _MIN_BATCH, BATCH_SECONDS, _next_size
from sqlalchemy_ulid.alembic._plan.database import database_for
from sqlalchemy_ulid.alembic._plan.render_mariadb import lock_wrapped
from sqlalchemy_ulid.alembic._plan.run import run_plan
from sqlalchemy_ulid.alembic._plan.state import STATE_TABLE, literal
from sqlalchemy_ulid.alembic._plan.step import Plan, Step
from sqlalchemy_ulid.alembic.mysql.storage_copy import AUTO_INC_BATCH_SECONDS

#: Long enough that the default constraint and check names are hashed.
TABLE = "engine_orders_with_a_name_long_enough_for_hashed_constraint_names"[:60]
COLUMN = "public_id"
BASE = datetime(2024, 1, 1)
ROWS = 40


def _drop(engine: Engine) -> None:
    _databases.drop_tables(engine, _q(engine), STATE_TABLE)


def _q(engine: Engine) -> str:
    return engine.dialect.identifier_preparer.quote(TABLE)


def _seed(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {_q(engine)}")
        conn.exec_driver_sql(
            f"CREATE TABLE {_q(engine)} (id int PRIMARY KEY, created_at "
            f"{'timestamp' if engine.dialect.name == 'postgresql' else 'datetime(3)'} NOT NULL)"
        )
        rows = ", ".join(
            f"({i}, '{BASE + timedelta(milliseconds=i // 3)}')" for i in range(1, ROWS + 1)
        )
        conn.exec_driver_sql(f"INSERT INTO {_q(engine)} VALUES {rows}")


def _op(**options: Any) -> AddULIDColumnOp:
    return AddULIDColumnOp(TABLE, COLUMN, "created_at", online=True, batch_size=7, **options)


def _online(engine: Engine) -> list[str]:
    """Run the op online; return the statements sent."""
    with recording(engine) as seen:
        run_online(engine, _op())
    return seen


def _ok(engine: Engine, script: str) -> None:
    _clients.run(engine, script, check=True)


def _schema(engine: Engine) -> dict[str, Any]:
    """Columns (type, nullability), unique constraints and indexes, by name."""
    with engine.connect() as conn:
        inspector = sa.inspect(conn)
        return {
            "columns": [
                (c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(TABLE)
            ],
            "unique": sorted(
                (u["name"], tuple(u["column_names"]))
                for u in inspector.get_unique_constraints(TABLE)
            ),
            "indexes": sorted(
                (i["name"], tuple(i["column_names"]), bool(i["unique"]))
                for i in inspector.get_indexes(TABLE)
            ),
            "checks": sorted(c["name"] or "" for c in inspector.get_check_constraints(TABLE)),
            "state": inspector.has_table(STATE_TABLE),
        }


def _ids(engine: Engine) -> list[tuple[int, Any]]:
    with engine.connect() as conn:
        return [
            tuple(r)  # type: ignore[misc]
            for r in conn.exec_driver_sql(f"SELECT id, {COLUMN} FROM {_q(engine)} ORDER BY id")
        ]


def _check_ids(engine: Engine) -> None:
    rows = _ids(engine)
    assert len(rows) == ROWS
    made = [ULID.from_uuid(v) if not isinstance(v, bytes) else ULID.from_bytes(v) for _, v in rows]
    assert len(set(made)) == ROWS
    for (key, _), ulid in zip(rows, made, strict=True):
        expected = BASE.replace(tzinfo=timezone.utc) + timedelta(milliseconds=key // 3)
        assert ulid.timestamp_ms == to_ms(expected)


def _plan(engine: Engine) -> Plan:
    return database_for(engine.dialect).add_column(add_names(_op(), engine.dialect), None)


def _changes(plan: Plan) -> list[Step]:
    return [s for s in plan.steps if s.kind in ("ddl", "concurrent")]


def test_online_sends_the_plans_ddl_and_the_script_holds_it(server: Engine) -> None:
    _seed(server)
    seen = _online(server)
    plan = _plan(server)
    wanted = [statement for step in _changes(plan) for statement in step.statements]
    unwrapped = [re.sub(r"^SET STATEMENT .*? FOR ", "", s) for s in seen]
    sent = [s for s in unwrapped if s in wanted]
    # Every step was still to do on a new table (the INVALID index's drop aside).
    assert sent == [s for s in wanted if not s.startswith("DROP INDEX")]
    script = op_sql(server, _op())
    for statement in wanted:
        if server.dialect.name == "postgresql":
            assert statement in script or literal(statement) in script, statement
        else:
            assert literal(lock_wrapped(statement, 1.0), backslashes=True) in script, statement
    # The checks ran online, before the first change, as the script's first block.
    first_change = next(i for i, s in enumerate(unwrapped) if s in wanted)
    checks = [s for s in seen[:first_change] if "CASE WHEN" in s and "THEN" in s]
    assert len(checks) >= len(plan.checks)
    _check_ids(server)


def test_online_and_offline_end_in_the_same_schema(server: Engine) -> None:
    _seed(server)
    _online(server)
    _check_ids(server)
    online = _schema(server)
    assert not online["state"]  # a finished op leaves no state table
    assert any(name != name[:40] for name, *_ in online["unique"] + online["indexes"])
    _seed(server)
    script = op_sql(server, _op())
    _ok(server, script)
    _check_ids(server)
    assert _schema(server) == online
    ids = _ids(server)
    # The script again, whole: nothing to do, nothing changed.
    _ok(server, script)
    assert _schema(server) == online
    assert _ids(server) == ids


def _steps(script: str) -> list[int]:
    """Where each step of the script begins (its ``-- <label> (<kind>)`` title)."""
    return [
        m.start() for m in re.finditer(r"^-- [^\n]* \((ddl|concurrent|fill|batch)\)$", script, re.M)
    ]


def test_the_script_stopped_after_each_step_then_run_again_finishes(server: Engine) -> None:
    _seed(server)
    _online(server)
    reference = _schema(server)
    script = op_sql(server, _op())
    starts = _steps(script)
    assert len(starts) >= 4
    for stop in [*starts, len(script)]:
        _seed(server)
        head = script[:stop]
        if server.dialect.name == "postgresql":
            head = "\\set ON_ERROR_STOP on\n" + head
        _ok(server, head)
        _ok(server, script)
        assert _schema(server) == reference, stop
        _check_ids(server)


def test_a_plan_keeps_its_checks_before_any_change() -> None:
    check = Step("refuse", "check", guard="TRUE", message="'no'")
    change = Step("change", "ddl", ("ALTER TABLE t ADD COLUMN c int",), guard="TRUE")
    Plan("op", "t.c", (check, change), 1.0)
    with pytest.raises(ValueError, match="comes after a change"):
        Plan("op", "t.c", (change, check), 1.0)
    with pytest.raises(ValueError, match="needs a guard and a message"):
        Step("refuse", "check", guard="TRUE")
    with pytest.raises(ValueError, match="two steps are labelled"):
        Plan("op", "t.c", (change, change), 1.0)


@pytest.mark.parametrize("key", ["ulid", "uuid7"])
def test_the_script_dates_ids_of_either_kind_and_numbers_ties_in_key_order(
    server: Engine, key: str
) -> None:
    _seed(server)
    storage = "binary"
    op_class = AddULIDColumnOp if key == "ulid" else AddUUID7ColumnOp
    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect_name=server.dialect.name, opts={"as_sql": True, "output_buffer": buffer}
    )
    Operations(context).invoke(
        op_class(TABLE, COLUMN, "created_at", online=True, batch_size=9, storage=storage)
    )
    _ok(server, buffer.getvalue())
    rows = _ids(server)
    assert len({raw for _, raw in rows}) == ROWS
    for (key_a, raw_a), (key_b, raw_b) in itertools.pairwise(rows):
        assert len(raw_a) == 16
        ms = int.from_bytes(raw_a[:6], "big")
        expected = BASE.replace(tzinfo=timezone.utc) + timedelta(milliseconds=key_a // 3)
        assert ms == to_ms(expected)
        if key == "uuid7":
            made = uuid.UUID(bytes=bytes(raw_a))
            assert made.version == 7
            assert made.variant == uuid.RFC_4122
        # Ties in one batch (9 rows) are in key order.
        same_ms = raw_a[:6] == raw_b[:6]
        if same_ms and (key_a - 1) // 9 == (key_b - 1) // 9:
            assert raw_a < raw_b


def test_a_step_waits_for_its_lock_only_lock_timeout_long_then_tries_again(
    server: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    # A transaction that read the table holds a lock ADD COLUMN must wait for.
    # The step gives up after lock_timeout (SET LOCAL on PostgreSQL, SET
    # STATEMENT on MariaDB: a session setting would be the same wait), then
    # tries again; the reader ends meanwhile and the op finishes.
    _seed(server)
    reader = server.connect()
    reader.exec_driver_sql(f"SELECT * FROM {_q(server)} LIMIT 1").all()

    class Release(logging.Handler):
        """Ends the reader's transaction once the step has given up a first time."""

        def emit(self, record: logging.LogRecord) -> None:
            if "lock timeout" in record.getMessage() and not reader.closed:
                reader.rollback()

    release = Release()
    migration_log = logging.getLogger("alembic.runtime.migration")
    migration_log.addHandler(release)
    setting = (
        "SELECT current_setting('lock_timeout')"
        if server.dialect.name == "postgresql"
        else "SELECT @@SESSION.lock_wait_timeout, @@SESSION.innodb_lock_wait_timeout"
    )
    try:
        with (
            caplog.at_level("WARNING", logger="alembic.runtime.migration"),
            server.connect() as conn,
        ):
            before = tuple(conn.exec_driver_sql(setting).one())
            conn.commit()
            context = MigrationContext.configure(conn)
            with context.begin_transaction(), context.begin_transaction(_per_migration=True):
                Operations(context).invoke(_op(lock_timeout=1))
            # The op's own session: nothing of its lock timeouts is left on it.
            assert tuple(conn.exec_driver_sql(setting).one()) == before
    finally:
        migration_log.removeHandler(release)
        reader.close()
    assert any("lock timeout (1s)" in r.getMessage() for r in caplog.records)
    _check_ids(server)


@given(
    size=st.integers(min_value=1, max_value=1_000_000),
    elapsed=st.floats(min_value=0.0, max_value=600.0, allow_nan=False),
    cap=st.integers(min_value=100, max_value=1_000_000),
    seconds=st.sampled_from([BATCH_SECONDS, AUTO_INC_BATCH_SECONDS]),
)
def test_batches_sized_by_time_move_toward_the_target_by_half_or_double_at_most(
    size: int, elapsed: float, cap: int, seconds: float
) -> None:
    # The oracle: `seconds` a batch (150 ms, or the MariaDB copy's shorter
    # aim), a step of at most x2 or /2, within [100, cap].
    size = min(size, cap)
    new = _next_size(size, elapsed, cap, seconds)
    assert _MIN_BATCH <= new <= cap
    assert new <= max(_MIN_BATCH, size * 2)
    assert new >= min(cap, max(_MIN_BATCH, size // 2))
    if elapsed > 0:
        wanted = size * seconds / elapsed
        if size / 2 <= wanted <= size * 2 and _MIN_BATCH <= wanted <= cap:
            assert abs(new - wanted) <= 1


def _batch_plan(engine: Engine) -> Plan:
    """A plan of one check and one batch step: mark every row, 7 at a time."""
    table = _q(engine)
    if engine.dialect.name == "postgresql":
        statement = (
            f"UPDATE {table} SET marked = 1 WHERE id IN "
            f"(SELECT id FROM {table} WHERE marked IS NULL ORDER BY id LIMIT {{limit}})"
        )
    else:
        statement = (
            f"UPDATE {table} SET marked = 1 WHERE marked IS NULL ORDER BY id LIMIT {{limit}}"
        )
    return Plan(
        "mark_rows",
        TABLE,
        (
            Step(
                "no negative ids",
                "check",
                guard=f"EXISTS (SELECT 1 FROM {table} WHERE id < 0)",
                message="'mark_rows: a negative id'",
            ),
            Step(
                "mark",
                "batch",
                (statement,),
                guard=f"EXISTS (SELECT 1 FROM {table} WHERE marked IS NULL)",
            ),
        ),
        lock_timeout=1.0,
        batch_size=7,
    )


def test_a_batch_step_runs_online_and_in_the_script_to_the_same_end(server: Engine) -> None:
    database = database_for(server.dialect)
    plan = _batch_plan(server)
    for run in ("online", "script", "script again"):
        if run != "script again":
            _seed(server)
            with server.begin() as conn:
                conn.exec_driver_sql(f"ALTER TABLE {_q(server)} ADD COLUMN marked int NULL")
        if run == "online":
            with recording(server) as seen, server.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT")
                run_plan(conn, plan, database, sized_by_time=False)
            # Its batches: the plan's statement, 7 rows each, until one changed nothing.
            template = plan.steps[1].statements[0]
            sent = [s for s in seen if s == template.replace("{limit}", "7")]
            assert len(sent) == -(-ROWS // 7) + 1
        else:
            _ok(server, database.render(plan))
        with server.connect() as conn:
            assert (
                conn.exec_driver_sql(f"SELECT count(*) FROM {_q(server)} WHERE marked = 1").scalar()
                == ROWS
            )
            assert not sa.inspect(conn).has_table(STATE_TABLE)
    # A refusal comes before any change, online and in the script.
    with server.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {_q(server)} SET marked = NULL, id = -id WHERE id = 1")
    with server.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        with pytest.raises(ValueError, match="mark_rows: a negative id"):
            run_plan(conn, plan, database)
    refused = _clients.run(server, database.render(plan))
    assert refused.returncode != 0
    assert "mark_rows: a negative id" in refused.stderr
    with server.connect() as conn:
        assert (
            conn.exec_driver_sql(f"SELECT count(*) FROM {_q(server)} WHERE marked IS NULL").scalar()
            == 1
        )
