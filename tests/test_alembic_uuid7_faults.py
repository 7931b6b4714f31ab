"""op.add_uuid7_column interrupted at every statement that changes something, by a
failing statement or a killed session, on PostgreSQL 15 and MariaDB 10.11; then rerun."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Connection, Engine

import _databases
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _sessions import kill_session, session_id
from conftest import recording
from sqlalchemy_ulid import uuid7_min_at
from sqlalchemy_ulid._dialects import dialect_row

TABLE = "u7_faults_orders"
READS = ("SELECT", "SHOW", "DESCRIBE", "WITH", "PRAGMA", "EXPLAIN", "SET")
DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql")
T0 = datetime(2024, 4, 5, 12, 0, 0)
ROWS = 40


class Interrupted(Exception):
    """The fault raised in place of a statement."""


_drop = _databases.dropper(TABLE)


def _seed(engine: Engine) -> None:
    table = sa.Table(
        TABLE,
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("created_at", DATETIME, nullable=False),
    )
    with engine.begin() as conn:
        table.create(conn)
        # three rows per millisecond: ties are numbered in key order
        conn.execute(
            table.insert(),
            [{"id": n, "created_at": T0 + timedelta(milliseconds=n // 3)} for n in range(ROWS)],
        )


def _add(storage: str) -> Any:
    def run(conn: Connection) -> None:
        Operations(MigrationContext.configure(conn)).add_uuid7_column(
            TABLE, "public_id", "created_at", storage=storage, batch_size=7
        )

    return run


def _run(engine: Engine, op: Any) -> None:
    with engine.begin() as conn:
        # Bounded: no statement of the op may wait or run for more than 20 s.
        conn.execute(
            sa.text("SET statement_timeout = '20s'" if _pg(conn) else "SET max_statement_time = 20")
        )
        op(conn)


def _pg(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql"


def _changes(statements: list[str]) -> list[tuple[str, int]]:
    """Each statement that changes something, as (its text, which occurrence of it).

    By text, not position: reflection queries are cached, so the reads of two
    runs differ in number.
    """
    seen: dict[str, int] = {}
    changes = []
    for statement in statements:
        if not statement.lstrip().upper().startswith(READS):
            seen[statement] = seen.get(statement, 0) + 1
            changes.append((statement, seen[statement]))
    return changes


def _interrupted_run(engine: Engine, op: Any, at: tuple[str, int], kill: bool) -> None:
    count = [0]

    def hook(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement != at[0]:
            return
        count[0] += 1
        if count[0] != at[1]:
            return
        if not kill:
            raise Interrupted(statement[:60])
        kill_session(engine, session)

    with engine.connect() as conn:
        session = session_id(conn)
        conn.execute(
            sa.text("SET statement_timeout = '20s'" if _pg(conn) else "SET max_statement_time = 20")
        )
        sa.event.listen(engine, "before_cursor_execute", hook)
        try:
            with pytest.raises(sa.exc.DBAPIError if kill else Interrupted):
                op(conn)
        finally:
            sa.event.remove(engine, "before_cursor_execute", hook)
        conn.rollback()  # what survives is what the server had committed


def _state(engine: Engine, storage: str) -> tuple[list[tuple[int, uuid.UUID]], dict[str, Any]]:
    kind = dialect_row(engine.dialect).binary() if storage == "binary" else sa.Uuid()
    table = sa.Table(
        TABLE,
        sa.MetaData(),
        sa.Column("id", sa.Integer),
        sa.Column("public_id", kind),
        sa.Column("created_at", DATETIME),
    )
    with engine.connect() as conn:
        inspector = sa.inspect(conn)
        columns = {c["name"]: (str(c["type"]), c["nullable"]) for c in inspector.get_columns(TABLE)}
        uniques = sorted(
            tuple(u["column_names"]) for u in inspector.get_unique_constraints(TABLE)
        ) + sorted(tuple(i["column_names"]) for i in inspector.get_indexes(TABLE) if i["unique"])
        if "public_id" not in columns:
            return [], {"columns": columns, "uniques": uniques}
        rows = conn.execute(
            sa.select(table.c.id, table.c.public_id, table.c.created_at).order_by(table.c.id)
        ).all()
    ids = []
    for n, value, created in rows:
        made = value if isinstance(value, uuid.UUID) else uuid.UUID(bytes=bytes(value))
        assert made.version == 7
        assert made.variant == uuid.RFC_4122
        assert made.int >> 80 == uuid7_min_at(created.replace(tzinfo=timezone.utc)).int >> 80
        ids.append((n, made))
    return ids, {"columns": columns, "uniques": uniques}


# PostgreSQL runs the op in one transaction, so one storage shows it; MariaDB
# commits each DDL statement, so both storages are interrupted there.
CASES = [
    ("postgresql", "auto", False),
    ("postgresql", "auto", True),
    ("mysql", "auto", False),
    ("mysql", "auto", True),
    ("mysql", "binary", True),
]


@pytest.mark.parametrize(
    ("server", "storage", "kill"),
    CASES,
    indirect=["server"],
    ids=[f"{b}-{s}-{'killed' if k else 'fails'}" for b, s, k in CASES],
)
def test_interrupted_at_every_change_then_rerun(server: Engine, storage: str, kill: bool) -> None:
    op = _add(storage)
    _seed(server)
    with recording(server) as recorded:
        _run(server, op)
    reference_ids, reference = _state(server, storage)
    assert [made for _, made in reference_ids] == sorted(made for _, made in reference_ids)
    changes = _changes(recorded)
    assert len(changes) >= 5, recorded  # the staging, the column, the fill, the constraints
    for at in changes:
        _drop(server)
        _seed(server)
        _interrupted_run(server, op, at, kill)
        _run(server, op)  # the rerun finishes the job
        ids, schema = _state(server, storage)
        assert schema == reference, f"interrupted at {at[0][:80]}"
        assert len(ids) == ROWS
        assert len({made for _, made in ids}) == ROWS
        assert [made for _, made in ids] == sorted(made for _, made in ids)
        _run(server, op)  # a rerun after success changes nothing
        assert _state(server, storage) == (ids, schema)
