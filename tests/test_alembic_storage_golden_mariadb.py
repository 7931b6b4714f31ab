"""Golden test: the MariaDB shadow-table conversion online sends the plan the script renders.

``alter_ulid_storage`` / ``alter_uuid7_storage(online=True)`` is run online,
every statement it sends captured (SQLAlchemy's ``before_cursor_execute``),
and the ``--sql`` script of the same op is written. Then:

* the plan's statements, as the online runner sends them, are the
  script's, in the same order: each check (``SELECT CASE WHEN <guard> THEN
  <message> END``; the script's ``IF (<guard>) THEN SIGNAL``), each step's
  guard (``IF (<guard>) THEN``), each DDL statement with its lock timeout
  (``SET STATEMENT ... FOR``; the script's ``EXECUTE IMMEDIATE`` of the
  same text), each query that makes a statement as the step runs (the
  shadow's ``MODIFY``, the triggers, the counter: the script's ``FOR r IN
  (<query>)``), and the copy's query of the key and the column lists;
* what those queries made is the same: the online run and the script are
  each stopped before the copy (on twins of one table), and the shadow
  table (``SHOW CREATE TABLE``) and the three triggers (their statements)
  are compared.

What still differs is pinned in ``DRIFT``, each item with its reason; the
test fails on any other difference, and on a pinned one that is gone.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

import _clients
from conftest import recording
from sqlalchemy_ulid.alembic import BackfillProgress
from test_alembic_storage_offline_mariadb import (
    TABLE,
    _create,
    _model,
    _op_sql,
    server,
)

__all__ = ["server"]

#: (op, column, from, to)
CASES = [
    ("alter_ulid_storage", "id", "text", "binary"),
    ("alter_uuid7_storage", "ref", "text", "hex"),
]
#: How the plan's statements begin, as sent: checks and guards, framed DDL, the copy's query.
_PLAN_STATEMENTS = (
    "SELECT CASE WHEN ",
    "SET STATEMENT ",
    "SELECT CONCAT('`', REPLACE((SELECT MAX(",
)
_FRAME = re.compile(r"^SET STATEMENT lock_wait_timeout=\d+, innodb_lock_wait_timeout=\d+ FOR ")

#: Known drift, by op: statements online sends that the script does not have.
#: The copy's own batch statements are left out of the comparison: online
#: binds the batch's bounds, the script keeps them in user variables (both
#: from the templates of ``mysql/storage_copy.py``).
DRIFT: dict[str, list[str]] = {}


class _Stop(Exception):
    pass


def _run_online(engine: Engine, op: str, column: str, from_: str, to: str, **options: Any) -> None:
    from alembic.migration import MigrationContext
    from alembic.operations import Operations

    with engine.connect() as conn:
        context = MigrationContext.configure(conn)
        with context.begin_transaction(), context.begin_transaction(_per_migration=True):
            getattr(Operations(context), op)(
                TABLE, column, from_storage=from_, to_storage=to, online=True, **options
            )


def _sent(seen: list[str]) -> list[str]:
    """The plan's statements as sent: checks, guards, DDL (framed), queries making DDL, the copy's.

    The DDL a query made (after it, up to the next guard) is left out: the
    script makes it as it runs (``test_the_statements_made_as_it_runs_are_the_same``).
    """
    out, made = [], False
    for statement in seen:
        text = statement.replace("%%", "%")
        if text.startswith("SELECT CASE WHEN "):
            made = False
        if " AS ddl" in text:
            made = True
        elif made and _FRAME.match(text):
            continue
        if text.startswith(_PLAN_STATEMENTS) or " AS ddl" in text:
            out.append(text)
    return out


def _lit(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def _needle(statement: str) -> str:
    """What the script has for ``statement`` (as the runner sent it)."""
    check = re.match(r"^SELECT CASE WHEN (.*) THEN (.*) END$", statement, re.DOTALL)
    if statement.endswith(" THEN 1 ELSE 0 END"):
        guard = statement[len("SELECT CASE WHEN ") : -len(" THEN 1 ELSE 0 END")]
        return f"  IF {guard} THEN\n"
    if check is not None:
        return f"  IF ({check[1]}) THEN\n    SET message = LEFT({check[2]}, 512);"
    if _FRAME.match(statement):
        return f"EXECUTE IMMEDIATE {_lit(statement)};"
    if " AS ddl" in statement:
        return f"FOR r IN ({statement}) DO"
    return f"    {statement}\n      INTO v_qkey"


def _made(engine: Engine) -> dict[str, Any]:
    """The shadow table and the triggers, as the run left them before the copy."""
    with engine.connect() as conn:
        shadow = str(conn.exec_driver_sql(f"SHOW CREATE TABLE _{TABLE}__new").one()[1])
        triggers = dict(
            conn.exec_driver_sql(
                "SELECT TRIGGER_NAME, CONCAT(ACTION_TIMING, ' ', EVENT_MANIPULATION, ' ', "
                "ACTION_STATEMENT) FROM information_schema.TRIGGERS "
                "WHERE TRIGGER_SCHEMA = DATABASE() ORDER BY 1"
            ).all()
        )
    return {"shadow": re.sub(r" AUTO_INCREMENT=\d+", "", shadow), "triggers": triggers}


def _reset(engine: Engine, op: str, model: Any) -> None:
    from test_alembic_storage_offline_mariadb import _drop

    _drop(engine)
    _create(engine, op, model)


@pytest.mark.parametrize(("op", "column", "from_", "to"), CASES)
def test_online_sends_the_plan_the_script_renders(
    server: Engine, op: str, column: str, from_: str, to: str
) -> None:
    _create(server, op, _model(op, 30))
    with recording(server) as seen:
        _run_online(server, op, column, from_, to, batch_size=7)
    script = _op_sql(op, column, from_, to, batch_size=7)
    sent = _sent(seen)
    assert len(sent) > 20, "hardly anything was sent: the test proves nothing"
    # CREATE TABLE ... LIKE, RENAME, DROP TRIGGER x3, DROP TABLE; and the
    # MODIFY, the three triggers and the counter, made as they run.
    assert len([s for s in sent if _FRAME.match(s)]) == 6
    assert len([s for s in sent if " AS ddl" in s]) == 5
    # Checks, then the steps in order (a step's guard and its statements):
    # each one after the one before it in the script.
    online_only, at = [], 0
    for statement in sent:
        where = script.find(_needle(statement), at)
        if where < 0:
            online_only.append(statement)
        else:
            at = where
    assert online_only == DRIFT.get(op, []), "\n\n".join(online_only)


@pytest.mark.parametrize(("op", "column", "from_", "to"), CASES)
def test_the_statements_made_as_it_runs_are_the_same(
    server: Engine, op: str, column: str, from_: str, to: str
) -> None:
    model = _model(op, 30)
    _create(server, op, model)

    def stop(report: BackfillProgress) -> None:
        raise _Stop

    with pytest.raises(_Stop):
        _run_online(server, op, column, from_, to, batch_size=7, progress=stop)
    online = _made(server)
    _reset(server, op, model)
    script = _op_sql(op, column, from_, to, batch_size=7)
    marker = "-- Phase 3:"
    assert script.count(marker) == 1
    cut = _clients.mariadb(server, script.replace(marker, "KILL CONNECTION_ID();\n" + marker))
    assert cut.returncode != 0
    offline = _made(server)
    assert len(online["triggers"]) == 3
    assert offline == online
    with server.connect() as conn:
        assert conn.execute(sa.text(f"SELECT COUNT(*) FROM _{TABLE}__new")).scalar() == 0


def test_the_copy_aims_at_short_batches_while_they_hold_the_auto_inc_lock(server: Engine) -> None:
    """A table with AUTO_INCREMENT (MariaDB's default lock mode 1): 50 ms a batch, else 150 ms."""
    from sqlalchemy_ulid._dialects import dialect_row
    from sqlalchemy_ulid.alembic import AlterULIDStorageOp
    from sqlalchemy_ulid.alembic._plan.batches import BATCH_SECONDS
    from sqlalchemy_ulid.alembic._plan.database import database_for
    from sqlalchemy_ulid.alembic.mysql.storage_copy import AUTO_INC_BATCH_SECONDS
    from sqlalchemy_ulid.alembic.mysql.storage_target import Names

    op = "alter_ulid_storage"
    _create(server, op, _model(op, 3))
    ulid_op = AlterULIDStorageOp(TABLE, "id", from_storage="text", to_storage="binary", online=True)
    with server.connect() as conn:
        sql = ulid_op.convert_sql(dialect_row(conn.dialect))
        names = Names(conn.dialect, ulid_op, sql, "text", "binary")
        plan = database_for(conn.dialect).alter_storage(names, None)
        [copy] = [step for step in plan if step.kind == "fill"]
        assert copy.fill is not None
        assert copy.fill.seconds is not None
        mode = conn.exec_driver_sql("SELECT @@innodb_autoinc_lock_mode").scalar()
        assert copy.fill.seconds(conn) == (AUTO_INC_BATCH_SECONDS if mode < 2 else BATCH_SECONDS)
        conn.exec_driver_sql(f"ALTER TABLE {TABLE} MODIFY seq BIGINT NOT NULL")
        assert copy.fill.seconds(conn) == BATCH_SECONDS
