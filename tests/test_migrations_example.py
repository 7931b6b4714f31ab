"""migrations_example/ on every server: up, down, up again, and --sql."""

from __future__ import annotations

import dataclasses
import io
import shutil
import subprocess
import sys
from argparse import Namespace
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.util import CommandError
from sqlalchemy.engine import Engine

import _clients
import _databases
from conftest import Backend
from sqlalchemy_ulid import ULID, ULIDType, drop_ulid_function
from sqlalchemy_ulid._time import to_ms

ROOT = Path(__file__).resolve().parent.parent
INI = ROOT / "migrations_example" / "alembic.ini"
TABLES = ("invoices", "customers", "orders", "webhook_events", "alembic_version")
EVENT_IDS = {
    1: "01HF1Q8Z9K3J5X7V2N4M6P8R0T",
    2: "01HF1Q8ZA0BC2DE3FG4HJ5KM6N",
    3: "7ZZZZZZZZZZZZZZZZZZZZZZZZZ",
}


@pytest.fixture
def backend(backend: Backend, tmp_path: Path) -> Iterator[Backend]:
    """The backend, in a database of these tests' own.

    The example project keeps its revisions in ``alembic_version`` and
    autogenerate compares the whole database with its models: tables of
    another tool's (or another test's) must not be there.
    """
    if backend.name == "sqlite":
        url = f"sqlite:///{tmp_path}/example.sqlite3"
        engine = sa.create_engine(url)
        yield dataclasses.replace(backend, url=url, engine=engine)
        engine.dispose()
        return
    assert backend.url is not None
    with _databases.own_database(backend.url, "example") as url:
        engine = sa.create_engine(url)
        try:
            yield dataclasses.replace(backend, url=url, engine=engine)
        finally:
            engine.dispose()


_drop_all = _databases.dropper(*TABLES, also=[drop_ulid_function])


@pytest.fixture
def clean(engine: Engine) -> Iterator[Engine]:
    _drop_all(engine)
    yield engine
    _drop_all(engine)


def _config(backend: Backend, output: io.StringIO | None = None) -> Config:
    assert backend.url is not None
    config = Config(str(INI), cmd_opts=Namespace(x=[f"url={backend.url}"]), output_buffer=output)
    config.attributes["configure_logger"] = False  # leave pytest's logging alone
    return config


def _tables(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(sa.inspect(conn).get_table_names()) & set(TABLES)


def _check_head(engine: Engine, *, backfilled: bool = True) -> None:
    metadata = sa.MetaData()
    orders = sa.Table(
        "orders",
        metadata,
        sa.Column("id", sa.Integer),
        sa.Column("created_at", sa.DateTime),
        sa.Column("public_id", ULIDType()),
    )
    events = sa.Table(
        "webhook_events",
        metadata,
        sa.Column("id", sa.Integer),
        sa.Column("event_id", ULIDType(as_str=True)),
    )
    invoices = sa.Table(
        "invoices", metadata, sa.Column("id", ULIDType()), sa.Column("customer_id", ULIDType())
    )
    with engine.connect() as conn:
        assert dict(conn.execute(sa.select(events.c.id, events.c.event_id)).all()) == EVENT_IDS
        assert set(conn.scalars(sa.select(invoices.c.customer_id))) == {
            ULID("01HXA3V6PW7Q1NB5D4R8S2T0KM")
        }
        rows = conn.execute(sa.select(orders).order_by(orders.c.public_id)).all()
    if not backfilled:
        assert all(row.public_id is None for row in rows)
        return
    # Sorted by public id = sorted by creation time, ties (2 and 3) by id.
    assert [row.id for row in rows] == [4, 1, 2, 3]
    for row in rows:
        assert row.public_id.timestamp_ms == to_ms(row.created_at.replace(tzinfo=timezone.utc))
    assert rows[0].created_at == datetime(2023, 6, 30, 23, 59, 59, 999000)


def test_upgrade_downgrade_upgrade(clean: Engine, backend: Backend) -> None:
    config = _config(backend)
    command.upgrade(config, "head")
    _check_head(clean)
    command.downgrade(config, "base")
    assert _tables(clean) <= {"alembic_version"}
    command.upgrade(config, "head")
    _check_head(clean)
    # Step down one revision at a time: each downgrade works on its own.
    for target in ("0003", "0002", "0001", "base"):
        command.downgrade(config, target)
    assert _tables(clean) <= {"alembic_version"}


def _statements(script: str) -> list[str]:
    """Split a script on the ";" ending each statement, not those in $$-quoted bodies."""
    statements: list[str] = []
    current: list[str] = []
    for index, part in enumerate(script.split("$$")):
        if index % 2:  # inside a dollar-quoted function body
            current.append(f"$${part}$$")
            continue
        first, *rest = part.split(";\n")
        current.append(first)
        for piece in rest:
            statements.append("".join(current))
            current = [piece]
    statements.append("".join(current))
    return statements


def test_offline_sql_is_complete_and_runs(clean: Engine, backend: Backend) -> None:
    """`upgrade head --sql` writes a script the database runs to the same schema.

    On PostgreSQL revision 0003 writes the online op's phases, the backfill
    as a DO block that commits each batch, and psql runs the script to the
    end: orders.public_id is filled, NOT NULL and unique. Elsewhere the
    backfill depends on the rows, so offline it leaves orders.public_id NULL
    and says so in a comment.
    """
    output = io.StringIO()
    if backend.name == "sqlite":
        with pytest.raises(CommandError, match="no offline script for sqlite"):
            command.upgrade(_config(backend, output), "head", sql=True)
        return
    command.upgrade(_config(backend, output), "head", sql=True)
    script = output.getvalue()
    assert "UPDATE alembic_version SET version_num='0004'" in script
    if backend.name == "postgresql":
        assert "CREATE UNIQUE INDEX CONCURRENTLY" in script
        done = _clients.psql(clean, script, check=True)
        assert "rows of orders.public_id filled" in done.stderr
        _check_head(clean)
        with clean.connect() as conn:
            columns = {c["name"]: c for c in sa.inspect(conn).get_columns("orders")}
            unique = sa.inspect(conn).get_unique_constraints("orders")
        assert columns["public_id"]["nullable"] is False
        assert [u["column_names"] for u in unique] == [["public_id"]]
        return
    _clients.mariadb(clean, script, check=True)
    _check_head(clean)
    with clean.connect() as conn:
        columns = {c["name"]: c for c in sa.inspect(conn).get_columns("orders")}
        unique = sa.inspect(conn).get_unique_constraints("orders")
        # A row inserted without a public id gets one from the column's DEFAULT.
        conn.exec_driver_sql(
            "INSERT INTO orders (customer, total_cents, created_at) VALUES ('new', 1, NOW(6))"
        )
        made = conn.exec_driver_sql("SELECT public_id FROM orders WHERE customer = 'new'")
        assert len(ULID.from_bytes(made.scalar_one()).bytes) == 16
        conn.rollback()
    assert columns["public_id"]["nullable"] is False
    assert [u["column_names"] for u in unique] == [["public_id"]]


@pytest.fixture
def clean_mariadb(backends: dict[str, Backend]) -> Iterator[tuple[Backend, Engine]]:
    found = backends["mysql"]
    if found.url is None:
        pytest.fail(f"required backend missing: {found.reason}", pytrace=False)
    with _databases.own_database(found.url, "example") as url:
        engine = sa.create_engine(url)
        try:
            yield dataclasses.replace(found, url=url, engine=engine), engine
        finally:
            engine.dispose()


def test_offline_sql_stops_at_a_time_no_ulid_holds(clean_mariadb: tuple[Backend, Engine]) -> None:
    """MariaDB: a created_at before 1970 is left NULL, and NOT NULL stops the script."""
    backend, clean = clean_mariadb
    output = io.StringIO()
    command.upgrade(_config(backend, output), "0003", sql=True)
    script = output.getvalue()
    early = "INSERT INTO orders (id, customer, total_cents, created_at) VALUES (1, 'ada'"
    assert early in script
    script = script.replace("'2023-11-02 08:15:00.125000'", "'1969-12-31 23:59:59.999000'", 1)
    failed = _clients.mariadb(clean, script)
    assert failed.returncode != 0
    with clean.connect() as conn:
        rows = conn.exec_driver_sql("SELECT id, public_id FROM orders ORDER BY id").all()
    assert rows[0] == (1, None)  # never an id of a time it does not hold
    assert all(public_id is not None for _, public_id in rows[1:])


def test_alembic_cli(clean: Engine, backend: Backend, tmp_path: Path) -> None:
    """The real `alembic` command, as the README runs it."""
    assert backend.url is not None
    cli = [sys.executable, "-m", "alembic", "-c", str(INI), "-x", f"url={backend.url}"]
    result = subprocess.run(
        [*cli, "upgrade", "head"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Running upgrade 0003 -> 0004" in result.stderr
    _check_head(clean)
    # env.py's target metadata is the example's models: the migrated database
    # matches them, from the command line too.
    check = subprocess.run(
        [*cli, "check"], capture_output=True, text=True, cwd=ROOT, check=False, timeout=120
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "No new upgrade operations detected" in check.stdout + check.stderr
    _autogenerate_a_change(backend, tmp_path)
    command.downgrade(_config(backend), "base")
    assert _tables(clean) <= {"alembic_version"}


def _autogenerate_a_change(backend: Backend, tmp_path: Path) -> None:
    """A change to a copy of models.py becomes a revision, ULIDType rendered."""
    project = tmp_path / "project"
    shutil.copytree(
        ROOT / "migrations_example", project, ignore=shutil.ignore_patterns("*.sqlite3")
    )
    models = project / "models.py"
    text = models.read_text()
    anchor = "    name: Mapped[str] = mapped_column(sa.String(100))\n"
    assert anchor in text
    added = "    referrer: Mapped[ULID | None] = mapped_column(ULIDType())\n"
    models.write_text(text.replace(anchor, anchor + added))
    result = subprocess.run(
        [sys.executable, "-m", "alembic", "-c", str(project / "alembic.ini"),
         "-x", f"url={backend.url}", "revision", "--autogenerate", "-m", "referrer"],
        capture_output=True, text=True, cwd=ROOT, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (written,) = (project / "versions").glob("*referrer.py")
    revision = written.read_text()
    assert "down_revision = '0004'" in revision, revision
    assert "import sqlalchemy_ulid" in revision
    assert (
        "op.add_column('customers', sa.Column('referrer', "
        "sqlalchemy_ulid.ULIDType(), nullable=True))"
    ) in revision
    assert "drop_constraint" not in revision  # nothing else changed
