"""alter_ulid_storage(online=True) on PostgreSQL: one plan, run online or written as a script.

* golden: the DDL the online runner sends is, statement for statement and in
  order, the plan's (the index builds are the rows its queries return), the
  script holds each of them, and the copy's batches online are the script's
  batch template with its slots filled;
* for a NOT NULL column, SET NOT NULL reads no row (the equality check
  implies it), and an equality check without it gets a NOT NULL check;
* a conversion begun by the previous release, its state in
  ``ulid_storage_conversions``, is taken over and resumed after its last key.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.engine import Engine

import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _offline_scripts import op_sql
from conftest import Backend, private_engine
from sqlalchemy_ulid.alembic._plan.database import database_for
from sqlalchemy_ulid.alembic._plan.state import STATE_TABLE, literal
from sqlalchemy_ulid.alembic._plan.step import Plan
from sqlalchemy_ulid.alembic._storage._op import AlterULIDStorageOp
from sqlalchemy_ulid.alembic._storage._target import LEGACY_TABLE, target_of
from sqlalchemy_ulid.alembic.postgresql.storage_copy import copy_batch, fill_slots
from test_alembic_storage_online import _create, _values

#: Long enough that the shadow index names are hashed.
TABLE = "storage_plan_items_with_a_name_long_enough_to_hash_it"
ROWS = 120
BATCH = 25


@pytest.fixture
def pg(backends: dict[str, Backend]) -> Iterator[Engine]:
    def drop(engine: Engine) -> None:
        with engine.begin() as conn:
            conn.exec_driver_sql(f'DROP TABLE IF EXISTS "{TABLE}" CASCADE')
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {LEGACY_TABLE}")
            conn.exec_driver_sql(
                f"DELETE FROM {STATE_TABLE} WHERE target = '{TABLE}.ref'"
                if sa.inspect(conn).has_table(STATE_TABLE)
                else "SELECT 1"
            )

    with private_engine(backends["postgresql"], drop) as engine:
        yield engine


def _op() -> AlterULIDStorageOp:
    return AlterULIDStorageOp(
        TABLE, "ref", from_storage="text", to_storage="auto", online=True, batch_size=BATCH
    )


def _online(engine: Engine) -> list[tuple[str, Any]]:
    """Run the op online; return the statements sent, with their parameters."""
    seen: list[tuple[str, Any]] = []

    def hook(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        seen.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", hook)
    try:
        _online_op(engine)
    finally:
        sa.event.remove(engine, "before_cursor_execute", hook)
    # psycopg's pyformat: a % in SQL text is sent doubled.
    return [(s.replace("%%", "%"), p) for s, p in seen]


def _plan(engine: Engine) -> Plan:
    return database_for(engine.dialect).alter_storage(target_of(_op(), engine.dialect), None)


def _run_step(conn: sa.Connection, plan: Plan, label: str) -> None:
    """The first statement of the plan's step ``label``, sent by hand."""
    step = next(s for s in plan.steps if s.label == label)
    conn.exec_driver_sql(step.statements[0].replace("%", "%%"))


def _start_by_hand(conn: sa.Connection, plan: Plan) -> None:
    """The shadow column and its trigger, as a run killed in its copy left them."""
    for statement in next(s for s in plan.steps if s.label == "add shadow").statements[1:]:
        conn.exec_driver_sql(statement)
    for label in ("trigger function", "trigger"):
        _run_step(conn, plan, label)


def _script(engine: Engine) -> str:
    return op_sql("postgresql", _op())


def test_online_sends_the_plans_ddl_and_batches_and_the_script_holds_them(pg: Engine) -> None:
    _create(pg, TABLE, "text", ROWS)
    before = _values(pg, TABLE, "text")
    plan = _plan(pg)
    with pg.connect() as conn:
        # What the plan's generated steps make of this table, before it changes.
        generated = {
            step.label: [
                str(r[0]) for r in conn.exec_driver_sql(step.statements[0].replace("%", "%%"))
            ]
            for step in plan.steps
            if step.generated
        }
    sent = _online(pg)
    assert _values(pg, TABLE, "auto") == before
    texts = [s for s, _ in sent]
    ddl = [s for step in plan.steps if step.kind == "ddl" for s in step.statements]
    # Every step still to do on a fresh table, in order; undoing and taking
    # over earlier state aside, and converting again and validating once more
    # (only after the first validation failed).
    # ref is NOT NULL: its equality check proves that too ("same check, not
    # null"), so no check of its own is made, validated or dropped.
    skipped = {"earlier state", "undo", "convert again", "validate same", "same check"}
    skipped |= {"not null check", "validate not null", "drop not null check"}
    wanted = [
        s
        for step in plan.steps
        if step.kind == "ddl" and step.label not in skipped
        for s in step.statements
    ]
    assert [s for s in texts if s in ddl] == wanted
    # The index builds are the rows of the plan's query, sent as they were made.
    builds = [
        s for s in texts if s.startswith("CREATE UNIQUE INDEX") or s.startswith("CREATE INDEX")
    ]
    assert builds == generated["indexes"]
    assert len(builds) == 2
    # Nothing else changed the schema.
    changes = [s for s in texts if re.match(r"\s*(ALTER|CREATE|DROP|COMMENT|LOCK|DO)\b", s)]
    allowed = set(ddl) | set(builds)
    state = database_for(pg.dialect).state
    allowed |= {state.create_sql(STATE_TABLE), f"DROP TABLE IF EXISTS {STATE_TABLE}"}
    assert [s for s in changes if s not in allowed and "CREATE TABLE IF NOT EXISTS" not in s] == []
    # The copy: the one batch template, its slots the parameters.
    t = target_of(_op(), pg.dialect)
    first = fill_slots(copy_batch(t, "id", "integer", False, "%(n)s"), "%(high)s", "%(last)s")
    after = fill_slots(copy_batch(t, "id", "integer", True, "%(n)s"), "%(high)s", "%(last)s")
    batches = [(s, p) for s, p in sent if s.startswith("WITH batch AS")]
    assert [s for s, _ in batches] == [first] + [after] * (len(batches) - 1)
    assert len(batches) == ROWS // BATCH + 2  # the last full one, then the empty one
    assert all(p["n"] == BATCH for _, p in batches)
    script = _script(pg)
    for statement in ddl:
        assert statement in script, statement
    for template in (copy_batch(t, "%1$I", "%2$s", a, str(BATCH)) for a in (False, True)):
        slots = fill_slots(template.replace("%", "%%"), "$2", "$1")
        assert slots.replace("%%1$I", "%1$I").replace("%%2$s", "%2$s") in script
    for step in plan.steps:
        if step.generated:
            assert f"SELECT q.s FROM ({step.statements[0]}) AS q(s)" in script


def test_a_conversion_begun_by_the_previous_release_is_resumed(pg: Engine) -> None:
    _create(pg, TABLE, "text", ROWS)
    before = _values(pg, TABLE, "text")
    q = f'"{TABLE}"'
    # As the previous release left it, killed inside its copy: its state
    # table and row (the last key copied: 50), the shadow and its trigger.
    with pg.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {LEGACY_TABLE} (table_name TEXT NOT NULL, column_name TEXT NOT NULL, "
            "last_key TEXT, PRIMARY KEY (table_name, column_name))"
        )
        conn.exec_driver_sql(f"INSERT INTO {LEGACY_TABLE} VALUES ({literal(TABLE)}, 'ref', '50')")
    plan = _plan(pg)
    t = target_of(_op(), pg.dialect)
    with pg.begin() as conn:
        _start_by_hand(conn, plan)
        conn.exec_driver_sql(f"UPDATE {q} SET ref = ref WHERE id <= 50")
    sent = _online(pg)
    batches = [p for s, p in sent if s.startswith("WITH batch AS")]
    # It went on after the last key copied, and copied only the rows after it.
    assert batches[0]["last"] == "50"
    assert _values(pg, TABLE, "auto") == before
    with pg.connect() as conn:
        inspector = sa.inspect(conn)
        assert not inspector.has_table(LEGACY_TABLE)
        assert (
            not inspector.has_table(STATE_TABLE)
            or not conn.exec_driver_sql(
                f"SELECT 1 FROM {STATE_TABLE} WHERE target = {literal(t.target)}"
            ).first()
        )
        assert "ref__ulid" not in {c["name"] for c in inspector.get_columns(TABLE)}


def _scans_of(engine: Engine, marks: tuple[str, ...]) -> dict[str, int]:
    """Run the op online; the table's sequential scans during each statement holding a mark.

    Read in the statement's own transaction (``pg_stat_xact_user_tables``),
    before and after it, on its connection.
    """
    scans: dict[str, int] = {}

    def count(cursor: Any) -> int:
        with cursor.connection.cursor() as own:
            own.execute(
                "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = to_regclass(%s)",
                (f'"{TABLE}"',),
            )
            return int(own.fetchone()[0])

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        for mark in marks:
            if mark in statement:
                scans[mark] = -count(cursor)

    def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        for mark in marks:
            if mark in statement:
                scans[mark] += count(cursor)

    sa.event.listen(engine, "before_cursor_execute", before)
    sa.event.listen(engine, "after_cursor_execute", after)
    try:
        _online_op(engine)
    finally:
        sa.event.remove(engine, "before_cursor_execute", before)
        sa.event.remove(engine, "after_cursor_execute", after)
    return scans


def _online_op(engine: Engine) -> None:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"transactional_ddl": True})
        with context.begin_transaction():
            Operations(context).invoke(_op())


def test_set_not_null_reads_no_row_after_the_equality_check(pg: Engine) -> None:
    _create(pg, TABLE, "text", ROWS)
    before = _values(pg, TABLE, "text")
    scans = _scans_of(pg, ("VALIDATE CONSTRAINT", "SET NOT NULL"))
    assert _values(pg, TABLE, "auto") == before
    # The validation read the table (the count works); SET NOT NULL did not:
    # the validated check (shadow IS NOT NULL AND ...) implies it.
    assert scans["VALIDATE CONSTRAINT"] >= 1
    assert scans["SET NOT NULL"] == 0


def test_an_equality_check_without_not_null_gets_its_own_not_null_check(pg: Engine) -> None:
    _create(pg, TABLE, "text", ROWS)
    before = _values(pg, TABLE, "text")
    plan = _plan(pg)
    t = target_of(_op(), pg.dialect)
    # As an earlier release left it: the copy done, its equality check
    # (without the shadow's NOT NULL) validated.
    with pg.begin() as conn:
        _start_by_hand(conn, plan)
        conn.exec_driver_sql(f'UPDATE "{TABLE}" SET ref = ref')
        conn.exec_driver_sql(f'UPDATE "{TABLE}" SET {t.shadow} = {t.converted.replace("%", "%%")}')
        _run_step(conn, plan, "same check")
        conn.exec_driver_sql(f'ALTER TABLE "{TABLE}" VALIDATE CONSTRAINT {t.same}')
    scans = _scans_of(pg, ("SET NOT NULL", t.check))
    assert _values(pg, TABLE, "auto") == before
    # Its own NOT NULL check was made (and validated): SET NOT NULL read no row.
    assert t.check in scans
    assert scans["SET NOT NULL"] == 0
