"""op.add_uuid7_column and op.create/drop_uuid7_function, through real Alembic commands."""

from __future__ import annotations

import io
import re
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.migration import MigrationContext
from alembic.operations import Operations
from alembic.util import CommandError
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Connection, Engine

import _databases
import _offline_scripts
import sqlalchemy_ulid.alembic
from _offline_scripts import run_online
from conftest import connection_env_py
from sqlalchemy_ulid import drop_uuid7_function, uuid7_min_at
from sqlalchemy_ulid._dialects import dialect_row

ORDERS = "u7ops_orders"
VERSION_TABLE = "alembic_version_u7ops"
DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql")
T0 = datetime(2024, 4, 5, 12, 0, tzinfo=timezone.utc)

ENV_PY = connection_env_py(VERSION_TABLE)

MIGRATION = f"""
from alembic import op

revision = "u7ops1"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_uuid7_function()
    op.add_uuid7_column({ORDERS!r}, "public_id", "created_at", server_default=True)


def downgrade():
    op.drop_ulid_column({ORDERS!r}, "public_id")
    op.drop_uuid7_function()
"""


_drop = _databases.dropper(ORDERS, VERSION_TABLE, also=[drop_uuid7_function])


@pytest.fixture
def clean(engine: Engine) -> Iterator[Engine]:
    _drop(engine)
    yield engine
    _drop(engine)


def _seed(engine: Engine, times: list[datetime | None]) -> None:
    table = sa.Table(
        ORDERS,
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("created_at", DATETIME, nullable=True),
    )
    naive = [None if t is None else t.replace(tzinfo=None) for t in times]  # stored as UTC
    with engine.begin() as conn:
        table.create(conn)
        conn.execute(table.insert(), [{"id": n, "created_at": t} for n, t in enumerate(naive)])


def _read(engine: Engine, storage: str = "auto") -> list[tuple[int, uuid.UUID]]:
    kind = dialect_row(engine.dialect).binary() if storage == "binary" else sa.Uuid()
    table = sa.Table(
        ORDERS, sa.MetaData(), sa.Column("id", sa.Integer), sa.Column("public_id", kind)
    )
    with engine.connect() as conn:
        rows = conn.execute(sa.select(table.c.id, table.c.public_id).order_by(table.c.id))
        return [
            (n, value if isinstance(value, uuid.UUID) else uuid.UUID(bytes=bytes(value)))
            for n, value in rows
        ]


def _op(conn: Connection) -> Operations:
    return Operations(MigrationContext.configure(conn))


# Rows 0-2 share a millisecond (ties go in key order); row 3 is earlier.
TIMES = [T0, T0, T0, T0 - timedelta(hours=1), T0 + timedelta(seconds=1)]


@pytest.mark.parametrize("storage", ["auto", "binary"])
def test_backfill_dates_uuid7s_from_the_rows(clean: Engine, storage: str) -> None:
    _seed(clean, TIMES)
    with clean.begin() as conn:
        _op(conn).add_uuid7_column(ORDERS, "public_id", "created_at", storage=storage)
    rows = _read(clean, storage)
    ids = [value for _, value in rows]
    for (_, value), when in zip(rows, TIMES, strict=True):
        assert value.version == 7
        assert value.variant == uuid.RFC_4122
        assert value.int >> 80 == uuid7_min_at(when).int >> 80
    assert ids[0] < ids[1] < ids[2]  # one millisecond: numbered in key order
    assert ids[3] < ids[0] < ids[4]  # otherwise in time order
    with clean.connect() as conn:
        column = {c["name"]: c for c in sa.inspect(conn).get_columns(ORDERS)}["public_id"]
        assert column["nullable"] is False
        uniques = sa.inspect(conn).get_unique_constraints(ORDERS)
        indexes = sa.inspect(conn).get_indexes(ORDERS)
    assert any(u["column_names"] == ["public_id"] for u in uniques) or any(
        i["column_names"] == ["public_id"] and i["unique"] for i in indexes
    )
    # A rerun finds the column full and changes nothing.
    with clean.begin() as conn:
        _op(conn).add_uuid7_column(ORDERS, "public_id", "created_at", storage=storage)
    assert _read(clean, storage) == rows


def test_null_times_are_refused_before_the_table_is_altered(clean: Engine) -> None:
    _seed(clean, [T0, None])
    with clean.begin() as conn, pytest.raises(ValueError, match="NULL in 1 rows"):
        _op(conn).add_uuid7_column(ORDERS, "public_id", "created_at")
    with clean.connect() as conn:
        assert "public_id" not in {c["name"] for c in sa.inspect(conn).get_columns(ORDERS)}


@pytest.mark.parametrize(
    ("storage", "why"),
    [("text", "no text storage for a UUID"), ("uuid", "the kind, not a storage"), ("", "empty")],
)
def test_unknown_storage_is_refused_before_any_sql(storage: Any, why: str) -> None:
    with pytest.raises(ValueError, match="storage must be one of"):
        sqlalchemy_ulid.alembic.AddUUID7ColumnOp("t", "c", "created_at", storage=storage)


def test_offline_mode_is_refused_clearly(engine: Engine) -> None:
    context = MigrationContext.configure(
        dialect_name=engine.dialect.name, opts={"as_sql": True, "output_buffer": io.StringIO()}
    )
    with pytest.raises(CommandError, match="add_uuid7_column cannot run in offline"):
        Operations(context).add_uuid7_column(ORDERS, "public_id", "created_at")


def test_function_ops_offline_write_the_ddl(engine: Engine) -> None:
    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect_name=engine.dialect.name, opts={"as_sql": True, "output_buffer": buffer}
    )
    Operations(context).create_uuid7_function()
    Operations(context).drop_uuid7_function()
    script = buffer.getvalue()
    if engine.dialect.name == "sqlite":
        assert "gen_uuid7" not in script  # SQLite keeps no functions in the database
    else:
        assert "CREATE" in script
        assert "gen_uuid7" in script
        assert "DROP FUNCTION IF EXISTS gen_uuid7" in script


def test_real_alembic_upgrade_and_downgrade(clean: Engine, tmp_path: Path) -> None:
    config = _offline_scripts.project(tmp_path, ENV_PY, {"u7ops1": MIGRATION}, template=True)
    _seed(clean, TIMES)
    if clean.dialect.name == "sqlite":
        # The SQLite function lives in the connection: register it for the
        # connection the DEFAULT runs on.
        from sqlalchemy_ulid import register_uuid7_function

        engine = sa.create_engine(clean.url)
        register_uuid7_function(engine)
    else:
        engine = clean
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
    backfilled = _read(engine)
    assert [v.int >> 80 for _, v in backfilled] == [uuid7_min_at(t).int >> 80 for t in TIMES]
    # The DEFAULT covers rows inserted without the column (raw SQL).
    with engine.begin() as conn:
        conn.exec_driver_sql(f"INSERT INTO {ORDERS} (id, created_at) VALUES (99, NULL)")
    made = dict(_read(engine))[99]
    assert made.version == 7
    assert made > max(v for _, v in backfilled)  # made now, after 2024
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "base")
    with engine.connect() as conn:
        assert "public_id" not in {c["name"] for c in sa.inspect(conn).get_columns(ORDERS)}
        if engine.dialect.name != "sqlite":
            with pytest.raises(sa.exc.DBAPIError):
                conn.execute(sa.text("SELECT gen_uuid7()"))
    if engine is not clean:
        engine.dispose()


def _online(engine: Engine, storage: str) -> None:
    """The op with online=True, as `alembic upgrade` runs it (in Alembic's transaction)."""
    run_online(
        engine,
        lambda op: op.add_uuid7_column(
            ORDERS,
            "public_id",
            "created_at",
            storage=storage,  # type: ignore[arg-type]
            online=True,
            server_default=True,
            batch_size=300,
        ),
    )


@pytest.mark.parametrize("storage", ["auto", "binary"])
def test_online_backfill_dates_uuid7s_and_new_rows_get_them(clean: Engine, storage: str) -> None:
    times = TIMES * 200  # 1,000 rows over 4 batches, with ties in every one
    _seed(clean, times)
    if clean.dialect.name == "sqlite":
        with pytest.raises(ValueError, match="SQLite"):
            _online(clean, storage)
        assert "public_id" not in {c["name"] for c in sa.inspect(clean).get_columns(ORDERS)}
        return
    with clean.begin() as conn:
        _op(conn).create_uuid7_function()
    _online(clean, storage)
    rows = _read(clean, storage)
    assert len({value for _, value in rows}) == len(times)
    for (_, value), when in zip(rows, times, strict=True):
        assert (value.version, value.variant) == (7, uuid.RFC_4122)
        assert value.int >> 80 == uuid7_min_at(when).int >> 80
    with clean.connect() as conn:
        column = {c["name"]: c for c in sa.inspect(conn).get_columns(ORDERS)}["public_id"]
        assert column["nullable"] is False
    # The column's DEFAULT gives a row inserted without it a UUIDv7 of now.
    with clean.begin() as conn:
        conn.execute(sa.text(f"INSERT INTO {ORDERS} (id, created_at) VALUES (5000, :t)"), {"t": T0})
    new = dict(_read(clean, storage))[5000]
    assert new.version == 7
    assert abs((new.int >> 80) - int(datetime.now(timezone.utc).timestamp() * 1000)) < 60_000
    # A rerun finds the work done and changes nothing.
    before = _read(clean, storage)
    _online(clean, storage)
    assert _read(clean, storage) == before


def test_online_offline_refuses_what_its_script_cannot_make(engine: Engine) -> None:
    # The script makes UUIDv7s in SQL into uuid or 16-byte columns; a hex
    # column (MariaDB's "auto") is refused, and SQLite has no script.
    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect_name=engine.dialect.name, opts={"as_sql": True, "output_buffer": buffer}
    )
    message = {
        "sqlite": "PostgreSQL and MariaDB only",
        "mysql": "offline needs binary storage, not 'hex'",
        "postgresql": "offline needs uuid or binary storage, not 'hex'",
    }[engine.dialect.name]
    with pytest.raises(CommandError, match=re.escape(message)):
        Operations(context).add_uuid7_column(
            ORDERS, "public_id", "created_at", online=True, storage="hex"
        )
    assert buffer.getvalue() == ""
