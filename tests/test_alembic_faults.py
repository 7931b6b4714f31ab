"""The Alembic ops interrupted at every statement boundary, then rerun.

For each op, on PostgreSQL and MariaDB: make the statement at each boundary
fail (an exception from a ``before_cursor_execute`` hook), or kill the
session there from another connection (``pg_terminate_backend`` /
``KILL``). Then no row may be lost or changed, and a rerun must reach the
same schema and data as an uninterrupted run. A boundary is the point
before each statement that changes something: interrupting a read is the
same as interrupting before the next write.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable
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
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _sessions import kill_session, session_id
from conftest import recording
from sqlalchemy_ulid import ULID, ULIDType, new_ulid
from sqlalchemy_ulid._time import to_ms

TABLE = "fault_orders"
DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql")
READS = ("SELECT", "SHOW", "DESCRIBE", "WITH", "PRAGMA", "EXPLAIN")
BASE = datetime(2022, 6, 1, 12, 0, 0)
TEXTS = [str(new_ulid()) for _ in range(20)]


class Interrupted(Exception):
    """The fault a hook raises in place of a statement."""


_drop = _databases.dropper(TABLE)


def _op(conn: Connection) -> Operations:
    return Operations(MigrationContext.configure(conn))


# -- the scenarios ----------------------------------------------------------------


def _seed(engine: Engine) -> None:
    metadata = sa.MetaData()
    table = sa.Table(
        TABLE,
        metadata,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("created_at", DATETIME, nullable=False),
        sa.Column("ref", sa.CHAR(26), nullable=True, comment="partner id"),
        sa.Column("note", sa.String(20)),
        sa.UniqueConstraint("ref", name="uq_fault_orders_ref"),
    )
    rows = [
        {
            "id": i,
            # Ties: three rows per millisecond, keys out of time order.
            "created_at": BASE + timedelta(milliseconds=(i * 7) % 10),
            "ref": TEXTS[i] if i % 5 else None,
            "note": f"n{i}",
        }
        for i in range(1, 20)
    ]
    with engine.begin() as conn:
        metadata.create_all(conn)
        conn.execute(table.insert(), rows)


def _add(conn: Connection) -> None:
    _op(conn).add_ulid_column(TABLE, "public_id", "created_at", batch_size=4)


def _to_binary(conn: Connection) -> None:
    _op(conn).alter_ulid_storage(TABLE, "ref", from_storage="text", to_storage="auto")


def _to_text(conn: Connection) -> None:
    _op(conn).alter_ulid_storage(TABLE, "ref", from_storage="auto", to_storage="text")


def _drop_column(conn: Connection) -> None:
    _op(conn).drop_ulid_column(TABLE, "public_id")


def _run(engine: Engine, op: Callable[[Connection], None]) -> None:
    with engine.begin() as conn:
        op(conn)


#: name -> (preparation before the op, the op)
SCENARIOS: dict[str, tuple[list[Callable[[Connection], None]], Callable[[Connection], None]]] = {
    "add_ulid_column": ([], _add),
    "alter_ulid_storage text->auto": ([], _to_binary),
    "alter_ulid_storage auto->text": ([_to_binary], _to_text),
    "drop_ulid_column": ([_add], _drop_column),
}


# -- what must hold -----------------------------------------------------------------


def _checksum(engine: Engine) -> str:
    """The rows' original data: id, time, note and the ref as text."""
    with engine.connect() as conn:
        table = sa.Table(TABLE, sa.MetaData(), autoload_with=conn)
        rows = conn.execute(sa.select(table).order_by(table.c.id)).mappings().all()
    digest = hashlib.sha256()
    for row in rows:
        ref = row["ref"]
        if isinstance(ref, uuid.UUID):
            ref = str(ULID.from_uuid(ref))
        elif isinstance(ref, bytes):
            # 16 bytes converted, or text in MariaDB's VARBINARY(26) holding type
            ref = str(ULID.from_bytes(ref)) if len(ref) == 16 else ref.decode()
        digest.update(repr((row["id"], row["created_at"], row["note"], ref)).encode())
    return digest.hexdigest()


def _schema(engine: Engine) -> dict[str, Any]:
    with engine.connect() as conn:
        inspector = sa.inspect(conn)
        columns = {
            c["name"]: (
                str(c["type"].compile(dialect=conn.dialect)),
                c["nullable"],
                c.get("comment"),
            )
            for c in inspector.get_columns(TABLE)
        }
        uniques = sorted(
            (tuple(u["column_names"]), u["name"]) for u in inspector.get_unique_constraints(TABLE)
        )
    return {"columns": columns, "uniques": uniques}


def _public_ids(engine: Engine) -> list[tuple[int, datetime, ULID | None]]:
    table = sa.Table(
        TABLE,
        sa.MetaData(),
        sa.Column("id", sa.Integer),
        sa.Column("created_at", DATETIME),
        sa.Column("public_id", ULIDType()),
    )
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.select(table).order_by(table.c.id))]  # type: ignore[misc]


def _check_public_ids(engine: Engine) -> None:
    rows = _public_ids(engine)
    assert all(r[2] is not None for r in rows)
    for _, created, public_id in rows:
        assert public_id.timestamp_ms == to_ms(created.replace(tzinfo=timezone.utc))  # type: ignore[union-attr]
    by_time = sorted(rows, key=lambda r: (r[1], r[0]))
    assert [r[2] for r in by_time] == sorted(r[2] for r in rows)  # type: ignore[type-var]


# -- interrupting ------------------------------------------------------------------


def _boundaries(statements: list[str]) -> list[int]:
    """1-based positions of the statements that change something."""
    return [i + 1 for i, s in enumerate(statements) if not s.lstrip().upper().startswith(READS)]


def _interrupted_run(engine: Engine, op: Callable[[Connection], None], at: int, kill: bool) -> None:
    count = [0]
    session = [0]

    def hook(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        count[0] += 1
        if count[0] == at:
            if kill:
                kill_session(engine, session[0])
            else:
                raise Interrupted(f"statement {at}: {statement[:60]}")

    with engine.begin() as conn:
        session[0] = session_id(conn)

    def interrupted_op() -> None:
        with engine.begin() as conn:
            if session_id(conn) != session[0]:  # NullPool: a new session each time
                session[0] = session_id(conn)
            sa.event.listen(engine, "before_cursor_execute", hook)
            try:
                op(conn)
            finally:
                sa.event.remove(engine, "before_cursor_execute", hook)

    # The fault itself surfaces, not an error from the op's clean-up.
    with pytest.raises(sa.exc.DBAPIError if kill else Interrupted):
        interrupted_op()


@pytest.mark.parametrize("kill", [False, True], ids=["statement fails", "session killed"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_interrupted_at_every_boundary_then_rerun(
    server: Engine, scenario: str, kill: bool
) -> None:
    before, op = SCENARIOS[scenario]
    _seed(server)
    for step in before:
        _run(server, step)
    checksum = _checksum(server)
    with recording(server) as statements:
        _run(server, op)
    reference = _schema(server)
    boundaries = _boundaries(statements)
    assert boundaries, statements

    for at in boundaries:
        _drop(server)
        _seed(server)
        for step in before:
            _run(server, step)
        _interrupted_run(server, op, at, kill)
        assert _checksum(server) == checksum, f"rows changed after an interruption at {at}"
        _run(server, op)  # the rerun finishes the job
        assert _checksum(server) == checksum
        assert _schema(server) == reference, f"interrupted at {statements[at - 1][:80]}"
        if "public_id" in reference["columns"]:
            _check_public_ids(server)
        _run(server, op)  # and a rerun after success changes nothing
        assert _schema(server) == reference


# -- concurrent writers ---------------------------------------------------------------


def test_rows_written_during_the_backfill_get_ids_or_a_clear_refusal(server: Engine) -> None:
    _seed(server)
    table = sa.table(TABLE, sa.column("id"), sa.column("created_at"), sa.column("note"))

    def insert(conn: Connection, n: int, i: int) -> None:
        # Later than the seeded rows, in key order: ids made in a catch-up
        # round still sort like the rows' times.
        when = BASE + timedelta(hours=1, milliseconds=1000 + i)
        conn.execute(table.insert().values(id=1000 + i, created_at=when, note="late"))

    # The writer ends once the column is NOT NULL: the application's problem.
    writers = _writers.Loop(
        server, 1, insert, connection="write", ends=sa.exc.DBAPIError, settle=0.05
    )
    with writers:
        refusal = ""
        try:
            _run(server, _add)
        except CommandError as exc:  # MariaDB: writers outran the catch-up
            refusal = str(exc)
        if refusal:
            assert "rows were written" in refusal
            writers.halt()
            _run(server, _add)
    inserted = [1000 + i for i in range(writers.done)]
    rows = _public_ids(server)
    assert inserted, "the writer never wrote: the test proves nothing"
    assert {r[0] for r in rows} >= set(inserted)
    assert len(rows) == 19 + len(inserted)
    _check_public_ids(server)


def test_with_server_default_the_unchanged_application_keeps_writing(server: Engine) -> None:
    """The app's INSERTs that omit the new column get an id from the database,
    during the op and after it: no NULL rows, no NOT NULL violations."""
    _seed(server)
    with server.begin() as conn:
        _op(conn).create_ulid_function()  # PostgreSQL's DEFAULT calls gen_ulid()
    table = sa.table(TABLE, sa.column("id"), sa.column("created_at"), sa.column("note"))

    def insert(conn: Connection, n: int, i: int) -> None:
        conn.execute(table.insert().values(id=1000 + i, created_at=datetime.now(), note="app"))

    writers = _writers.Loop(server, 1, insert, connection="write", settle=0.05)
    try:
        with writers:
            with server.begin() as conn:
                _op(conn).add_ulid_column(
                    TABLE, "public_id", "created_at", batch_size=4, server_default=True
                )
            time.sleep(0.1)  # the application goes on writing after the migration
    finally:
        with server.begin() as conn:
            _op(conn).drop_ulid_column(TABLE, "public_id")
            _op(conn).drop_ulid_function()
    writers.check()
    assert writers.done


def test_server_default_rows_have_ids(server: Engine) -> None:
    _seed(server)
    with server.begin() as conn:
        _op(conn).create_ulid_function()
        _op(conn).add_ulid_column(TABLE, "public_id", "created_at", server_default=True)
        conn.execute(
            sa.text(f"INSERT INTO {TABLE} (id, created_at, note) VALUES (500, :t, 'app')"),
            {"t": datetime(2030, 1, 1)},
        )
    try:
        rows = {r[0]: r[2] for r in _public_ids(server)}
        assert rows[500] is not None
        assert abs(rows[500].timestamp_ms - time.time() * 1000) < 60_000  # made now, by the server
    finally:
        _drop(server)  # the column's DEFAULT depends on the function
        with server.begin() as conn:
            _op(conn).drop_ulid_function()
