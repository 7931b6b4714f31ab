"""convert_primary_key_to_ulid / restore_legacy_primary_key offline (--sql) on PostgreSQL.

The scripts are written by the real ``alembic upgrade --sql`` /
``downgrade --sql`` (a revision range, as a deployment writes them) and run
by the real ``psql`` client, stopping at the first error. The schema of
``test_alembic_primary_key`` (four tables, a two-level chain, a
self-reference, a nullable foreign key): the joins are the same after each
step, the schema is the one the online op makes, every refusal stops the
script before any change, and the script killed at each phase (psql stopped
at a boundary, or its session terminated while it waits inside a phase)
finishes when run again.
"""

from __future__ import annotations

import io
import itertools
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.util import CommandError
from sqlalchemy.engine import Connection, Engine

import _clients
import _offline_scripts
import _writers
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from conftest import Backend, private_engine
from sqlalchemy_ulid._time import to_ms
from sqlalchemy_ulid.alembic import ConversionRefused
from test_alembic_primary_key import (
    VERSION_TABLE,
    _check_ulids,
    _drop,
    _interrupted_upgrade,
    _seed,
    _snapshot,
)

#: psql's application name, to find its session in pg_stat_activity.
APP = "ulid_pk_offline_test"

ENV_PY = f"""
from alembic import context
import sqlalchemy_ulid.alembic

attributes = context.config.attributes
if context.is_offline_mode():
    context.configure(
        url=attributes["url"], literal_binds=True, version_table={VERSION_TABLE!r},
        output_buffer=attributes["buffer"],
    )
else:
    context.configure(connection=attributes["connection"], version_table={VERSION_TABLE!r})
with context.begin_transaction():
    context.run_migrations()
"""


@pytest.fixture
def pg(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["postgresql"], _drop) as engine:
        yield engine


def _project(
    tmp_path: Path, engine: Engine, *, table: str = "pk_customers", up: str = "", down: str = ""
) -> Config:
    """An Alembic project in tmp_path; the database stamped at the base revision."""
    up = up or "from_time='created_at'"
    revisions = _offline_scripts.key_revisions(table, up, down)
    config = _offline_scripts.project(tmp_path, ENV_PY, revisions)
    config.attributes["url"] = engine.url.render_as_string(hide_password=False)
    with engine.connect() as conn:
        config.attributes["connection"] = conn
        command.stamp(config, "pk0000")
        conn.commit()
    return config


def _script(config: Config, action: str) -> str:
    """The real ``alembic upgrade/downgrade --sql`` output, between the two revisions."""
    buffer = io.StringIO()
    config.attributes["buffer"] = buffer
    if action == "upgrade":
        command.upgrade(config, "pk0000:pk0001", sql=True)
    else:
        command.downgrade(config, "pk0001:pk0000", sql=True)
    return buffer.getvalue()


def _ok(engine: Engine, script: str) -> str:
    return _clients.psql(engine, script, app=APP, check=True).stderr


# -- the schema, as the catalog has it -------------------------------------------------

_CATALOG = {
    "columns": """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), col_description(c.oid, a.attnum),
               a.attidentity
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE c.relnamespace = to_regnamespace(:schema) AND c.relkind = 'r'
        AND a.attnum > 0 AND NOT a.attisdropped""",
    "constraints": """
        SELECT c.relname, con.conname, con.contype, pg_get_constraintdef(con.oid)
        FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid
        WHERE c.relnamespace = to_regnamespace(:schema)""",
    "indexes": """
        SELECT c.relname, i.relname, pg_get_indexdef(i.oid)
        FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
        JOIN pg_class c ON c.oid = x.indrelid
        WHERE c.relnamespace = to_regnamespace(:schema)""",
    "tables": """
        SELECT relname FROM pg_class
        WHERE relnamespace = to_regnamespace(:schema) AND relkind = 'r'""",
}


def _catalog(engine: Engine, schema: str = "public") -> dict[str, list[tuple[Any, ...]]]:
    """Columns (type, NOT NULL, default, comment), constraints and indexes, as text."""
    quoted = engine.dialect.identifier_preparer.quote_schema(schema)
    with engine.connect() as conn:
        return {
            name: sorted(
                tuple(row)
                for row in conn.execute(sa.text(sql), {"schema": quoted})
                if row[0] != VERSION_TABLE
            )
            for name, sql in _CATALOG.items()
        }


def _online(config: Config, engine: Engine, action: str) -> None:
    with engine.connect() as conn:
        config.attributes["connection"] = conn
        if action == "upgrade":
            command.upgrade(config, "pk0001")
        else:
            command.downgrade(config, "pk0000")
        conn.commit()


def _version(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}").scalar()


# -- upgrade, downgrade, upgrade; the same schema as online ------------------------------


def test_upgrade_downgrade_upgrade_by_psql_keeps_every_join_and_matches_online(
    pg: Engine, tmp_path: Path
) -> None:
    _seed(pg)
    before = _snapshot(pg)
    legacy = _catalog(pg)
    config = _project(tmp_path, pg)
    up, down = _script(config, "upgrade"), _script(config, "downgrade")
    assert "psql -v ON_ERROR_STOP=1" in up
    assert "lock timeout" in up

    log = _ok(pg, up)
    assert "pk_customers done" in log
    assert _snapshot(pg) == before
    _check_ulids(pg)
    assert _version(pg) == "pk0001"
    converted = _catalog(pg)
    assert "given ULIDs" not in _ok(pg, up)  # a rerun after success does nothing
    assert _catalog(pg) == converted

    _ok(pg, down)
    assert _snapshot(pg) == before
    assert _catalog(pg) == legacy
    assert _version(pg) == "pk0000"
    assert "already done" in _ok(pg, down)
    assert _catalog(pg) == legacy

    _ok(pg, up)
    assert _snapshot(pg) == before
    assert _catalog(pg) == converted
    _check_ulids(pg)

    # The online op, from the same start, makes the same schema.
    _drop(pg)
    _seed(pg)
    config = _project(tmp_path, pg)
    _online(config, pg, "upgrade")
    assert _catalog(pg) == converted
    _online(config, pg, "downgrade")
    assert _catalog(pg) == legacy


@pytest.mark.parametrize("storage", ["auto", "binary"])
def test_ids_from_now_sort_like_the_old_keys_across_batches(
    pg: Engine, tmp_path: Path, storage: str
) -> None:
    _seed(pg)
    before = _snapshot(pg)
    options = f"batch_size=4, storage={storage!r}"
    config = _project(tmp_path, pg, up=options, down="batch_size=4")
    started = int(time.time() * 1000) - 1
    log = _ok(pg, _script(config, "upgrade"))
    finished = int(time.time() * 1000) + 1
    assert "28 rows of pk_customers.id given ULIDs" in log  # in batches of 4
    assert _snapshot(pg) == before
    with pg.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT legacy_id, id FROM pk_customers ORDER BY legacy_id"
        ).all()
        key_type = conn.exec_driver_sql(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'pk_orders'::regclass AND attname = 'customer_id'"
        ).scalar()
    assert key_type == ("uuid" if storage == "auto" else "bytea")
    ids = [bytes(row[1]) if storage == "binary" else row[1].bytes for row in rows]
    assert ids == sorted(ids)
    assert len(set(ids)) == 30
    # Each batch its own millisecond, later than the one before: at most a
    # few past the clock.
    assert all(started <= int.from_bytes(i[:6], "big") <= finished + 8 for i in ids)
    _ok(pg, _script(config, "downgrade"))
    assert _snapshot(pg) == before


def test_more_rows_in_one_millisecond_than_a_16_bit_counter_keep_their_order(
    pg: Engine, tmp_path: Path
) -> None:
    """An imported table whose rows share one created_at: 70,000 ids, in key order."""
    rows = 70_000
    with pg.begin() as conn:
        conn.exec_driver_sql("DROP TABLE IF EXISTS pk_flat")
        conn.exec_driver_sql(
            "CREATE TABLE pk_flat (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)"
        )
        conn.exec_driver_sql(
            "INSERT INTO pk_flat SELECT g, '2020-01-01 00:00:00+00' "
            f"FROM generate_series(1, {rows}) g"
        )
    try:
        options = "from_time='created_at', batch_size=20000"
        config = _project(tmp_path, pg, table="pk_flat", up=options)
        _ok(pg, _script(config, "upgrade"))
        with pg.connect() as conn:
            ids = [
                row[0].bytes
                for row in conn.exec_driver_sql("SELECT id FROM pk_flat ORDER BY legacy_id")
            ]
    finally:
        with pg.begin() as conn:
            conn.exec_driver_sql("DROP TABLE IF EXISTS pk_flat")
    assert len(ids) == rows
    assert {int.from_bytes(i[:6], "big") for i in ids} == {1577836800000}
    assert all(a < b for a, b in itertools.pairwise(ids)), "ids out of key order"


def test_a_uuid_key_by_psql(pg: Engine, tmp_path: Path) -> None:
    with pg.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE pk_customers (id uuid PRIMARY KEY, created_at timestamp NOT NULL, "
            "name text NOT NULL)"
        )
        conn.exec_driver_sql(
            "CREATE TABLE pk_orders (id int PRIMARY KEY, customer_id uuid "
            "CONSTRAINT fk_pk_orders_customer REFERENCES pk_customers, note text NOT NULL)"
        )
        conn.exec_driver_sql(
            "INSERT INTO pk_customers SELECT gen_random_uuid(), "
            "timestamp '2023-03-01 08:00' + i * interval '1 ms', 'c' || i "
            "FROM generate_series(1, 10) AS i"
        )
        conn.exec_driver_sql(
            "INSERT INTO pk_orders SELECT i, CASE WHEN i %% 3 > 0 THEN (SELECT id FROM "
            "pk_customers WHERE name = 'c' || (1 + i %% 10)) END, 'o' || i "
            "FROM generate_series(1, 20) AS i"
        )
    query = (
        "SELECT o.note, c.name FROM pk_orders o LEFT JOIN pk_customers c ON c.id = o.customer_id"
    )
    with pg.connect() as conn:
        before = sorted(tuple(r) for r in conn.exec_driver_sql(query))
        keys = set(conn.exec_driver_sql("SELECT id FROM pk_customers").scalars())
        legacy = _catalog(pg)
    config = _project(tmp_path, pg)
    _ok(pg, _script(config, "upgrade"))
    with pg.connect() as conn:
        assert sorted(tuple(r) for r in conn.exec_driver_sql(query)) == before
        assert set(conn.exec_driver_sql("SELECT legacy_id FROM pk_customers").scalars()) == keys
        made = conn.exec_driver_sql("SELECT id, created_at FROM pk_customers").all()
    assert all(
        int.from_bytes(i.bytes[:6], "big") == to_ms(t.replace(tzinfo=timezone.utc)) for i, t in made
    )
    _ok(pg, _script(config, "downgrade"))
    with pg.connect() as conn:
        assert sorted(tuple(r) for r in conn.exec_driver_sql(query)) == before
    assert _catalog(pg) == legacy


def test_a_script_of_the_other_direction_left_unfinished_is_refused(
    pg: Engine, tmp_path: Path
) -> None:
    _seed(pg)
    config = _project(tmp_path, pg)
    up, down = _script(config, "upgrade"), _script(config, "downgrade")
    _ok(pg, up[: up.index("-- Phase 2:")])  # stopped after its shadow columns
    schema = _catalog(pg)
    done = _clients.psql(pg, down, app=APP)
    assert done.returncode != 0
    assert "an unfinished convert_primary_key_to_ulid of pk_customers" in done.stderr
    assert "pk_orders.customer_id__ulid" in done.stderr
    assert _catalog(pg) == schema
    _ok(pg, up)  # the upgrade script finishes
    _check_ulids(pg)


def test_script_refuses_dry_run_and_other_zones_before_writing(pg: Engine, tmp_path: Path) -> None:
    config = _project(tmp_path, pg, up="dry_run=True")
    with pytest.raises(CommandError, match="needs a database"):
        _script(config, "upgrade")
    config = _project(
        tmp_path,
        pg,
        up="from_time='created_at', timezone=__import__('datetime').timezone("
        "__import__('datetime').timedelta(hours=2))",
    )
    with pytest.raises(CommandError, match="as UTC only"):
        _script(config, "upgrade")


# -- refusals: the script stops before any change ------------------------------------------


def _exec(*statements: str) -> Callable[[Engine], None]:
    def run(engine: Engine) -> None:
        with engine.begin() as conn:
            for statement in statements:
                conn.exec_driver_sql(statement)

    return run


REFUSALS = [
    # a composite key
    ("pk_pairs", "",
     _exec("CREATE TABLE pk_pairs (a int NOT NULL, b int NOT NULL, PRIMARY KEY (a, b))"),
     "composite primary key (a, b)"),
    # a key neither integer nor UUID
    ("pk_pairs", "",
     _exec("CREATE TABLE pk_pairs (a text PRIMARY KEY)"), "only integer and UUID"),
    # the legacy_id column is already there
    ("pk_customers", "from_time='created_at'",
     _exec("ALTER TABLE pk_customers ADD COLUMN legacy_id int"),
     "already has a column legacy_id"),
    # a user's column named like the shadow
    ("pk_customers", "from_time='created_at'",
     _exec("ALTER TABLE pk_orders ADD COLUMN customer_id__ulid int"),
     "pk_orders already has a column customer_id__ulid"),
    # from_time names no column
    ("pk_customers", "from_time='born_at'", None, "has no column born_at"),
    # a date would date the ids at midnight
    ("pk_customers", "from_time='day'",
     _exec("ALTER TABLE pk_customers ADD COLUMN day date NOT NULL DEFAULT '2024-01-01'"),
     "pk_customers.day is date, not a timestamp"),
    # seconds, not milliseconds
    ("pk_customers", "from_time='epoch'",
     _exec("ALTER TABLE pk_customers ADD COLUMN epoch float8 NOT NULL DEFAULT 1.5"),
     "not a timestamp or an integer of Unix milliseconds"),
    # NULL times
    ("pk_customers", "from_time='seen_at'",
     _exec("ALTER TABLE pk_customers ADD COLUMN seen_at timestamp",
           "UPDATE pk_customers SET seen_at = created_at WHERE id > 3"),
     "pk_customers.seen_at is NULL in 3 rows"),
    # a time before 1970
    ("pk_customers", "from_time='created_at'",
     _exec("UPDATE pk_customers SET created_at = '1969-12-31 23:59:59' WHERE id = 5"),
     "created_at = 1969-12-31 23:59:59 is out of the ULID range"),
    # past the ULID range (integer milliseconds)
    ("pk_customers", "from_time='ms'",
     _exec("ALTER TABLE pk_customers ADD COLUMN ms bigint NOT NULL DEFAULT 281474976710656"),
     "ms = 281474976710656 is out of the ULID range"),
    # a foreign key from another schema
    ("pk_customers", "from_time='created_at'",
     _exec("CREATE SCHEMA pk_elsewhere",
           "CREATE TABLE pk_elsewhere.invoices (id int PRIMARY KEY, customer_id int "
           "CONSTRAINT fk_invoices_customer REFERENCES public.pk_customers (id))"),
     "fk_invoices_customer on pk_elsewhere.invoices"),
    # a composite foreign key
    ("pk_customers", "from_time='created_at'",
     _exec("ALTER TABLE pk_customers ADD CONSTRAINT uq_pk_id_name UNIQUE (id, name)",
           "CREATE TABLE pk_pairs (id int PRIMARY KEY, c int, n varchar(20), "
           "CONSTRAINT fk_pairs_two FOREIGN KEY (c, n) REFERENCES pk_customers (id, name))"),
     "composite foreign key fk_pairs_two on pk_pairs(c, n)"),
    # a trigger
    ("pk_customers", "from_time='created_at'",
     _exec("CREATE FUNCTION pk_touch() RETURNS trigger LANGUAGE plpgsql AS "
           "$$ BEGIN RETURN NEW; END $$",
           "CREATE TRIGGER pk_orders_touch BEFORE UPDATE ON pk_orders "
           "FOR EACH ROW EXECUTE FUNCTION pk_touch()"),
     "pk_orders_touch (on pk_orders)"),
    # a view
    ("pk_customers", "from_time='created_at'",
     _exec("CREATE VIEW pk_customer_names AS SELECT id, name FROM pk_customers"),
     "pk_customer_names (on pk_customers)"),
    # a partial index on a referencing column
    ("pk_customers", "from_time='created_at'",
     _exec("CREATE INDEX ix_pk_orders_some ON pk_orders (customer_id) WHERE note <> ''"),
     "ix_pk_orders_some on pk_orders uses pk_orders.customer_id with a WHERE clause"),
    # a CHECK constraint the swap's DROP COLUMN would drop
    ("pk_customers", "from_time='created_at'",
     _exec("ALTER TABLE pk_orders ADD CONSTRAINT ck_pk_orders_positive CHECK (customer_id > 0)"),
     "pk_orders.customer_id is used by constraint ck_pk_orders_positive on table pk_orders"),
    # a DEFAULT on a referencing column
    ("pk_customers", "from_time='created_at'",
     _exec("ALTER TABLE pk_orders ALTER COLUMN customer_id SET DEFAULT 1"),
     "pk_orders.customer_id is used by its DEFAULT"),
    # a referencing column that also references a table the op does not convert
    ("pk_customers", "from_time='created_at'",
     _exec("CREATE TABLE pk_pairs (id int PRIMARY KEY)",
           "INSERT INTO pk_pairs SELECT generate_series(1, 30)",
           "ALTER TABLE pk_orders ADD CONSTRAINT fk_pk_orders_pair FOREIGN KEY (customer_id) "
           "REFERENCES pk_pairs (id)"),
     "the foreign key fk_pk_orders_pair on pk_orders references pk_pairs"),
    # a NOT VALID foreign key whose rows reference nothing
    ("pk_customers", "from_time='created_at'",
     _exec("ALTER TABLE pk_orders DROP CONSTRAINT fk_pk_orders_customer",
           "INSERT INTO pk_orders VALUES (99, 999, 'orphan')",
           "ALTER TABLE pk_orders ADD CONSTRAINT fk_pk_orders_customer FOREIGN KEY (customer_id) "
           "REFERENCES pk_customers (id) NOT VALID"),
     "the foreign key fk_pk_orders_customer on pk_orders is NOT VALID, and 1 rows"),
    # an index with an operator class of its own
    ("pk_customers", "from_time='created_at'",
     _exec("CREATE INDEX ix_pk_orders_hash ON pk_orders USING hash (customer_id)"),
     "ix_pk_orders_hash on pk_orders uses pk_orders.customer_id with USING hash"),
]  # fmt: skip


#: Where the online op's message differs from the script's, and why: (the
#: script's message, what online says in its place).
REFUSED_ONLINE = {
    # The ids' times are checked as the ids are made (staged before any DDL),
    # from the milliseconds; the script checks the column and names its value.
    "created_at = 1969-12-31 23:59:59 is out of the ULID range": "-1000 ms is outside 0 .. 2**48",
    "ms = 281474976710656 is out of the ULID range": "281474976710656 ms is outside 0 .. 2**48",
}


@pytest.mark.parametrize(
    ("table", "up", "setup", "message"),
    REFUSALS,
    ids=[
        "composite key", "text key", "legacy_id taken", "shadow taken", "no from_time",
        "date", "seconds", "NULL times", "before 1970", "past 10889", "other schema",
        "composite fk", "trigger", "view", "partial index", "check", "default",
        "fk elsewhere", "not valid", "hash index",
    ],
)  # fmt: skip
def test_every_refusal_stops_the_script_and_the_online_op_before_any_change(
    pg: Engine,
    tmp_path: Path,
    table: str,
    up: str,
    setup: Callable[[Engine], None] | None,
    message: str,
) -> None:
    """Each refusal of the script, and of the online op: with the same words, nothing changed."""
    _seed(pg)
    try:
        if setup is not None:
            setup(pg)
        before, schema = _snapshot(pg), _catalog(pg)
        config = _project(tmp_path, pg, table=table, up=up or "batch_size=10")
        with pytest.raises(ValueError) as refused:  # noqa: PT011 (its words are read below)
            _online(config, pg, "upgrade")
        # A name quoted ('legacy_id') online, bare in the script: the same words.
        assert REFUSED_ONLINE.get(message, message) in str(refused.value).replace("'", "")
        assert _snapshot(pg) == before
        done = _clients.psql(pg, _script(config, "upgrade"), app=APP)
        assert done.returncode != 0
        assert message in done.stderr, done.stderr
        assert _snapshot(pg) == before
        assert _catalog(pg) == schema
        assert _version(pg) == "pk0000"
    finally:
        with pg.begin() as conn:
            conn.exec_driver_sql("DROP SCHEMA IF EXISTS pk_elsewhere CASCADE")
            conn.exec_driver_sql("DROP VIEW IF EXISTS pk_customer_names")
            conn.exec_driver_sql("DROP TABLE IF EXISTS pk_pairs CASCADE")
            conn.exec_driver_sql("DROP TRIGGER IF EXISTS pk_orders_touch ON pk_orders")
            conn.exec_driver_sql("DROP FUNCTION IF EXISTS pk_touch()")


def test_an_unfinished_online_conversion_makes_the_script_refuse(
    pg: Engine, tmp_path: Path
) -> None:
    _seed(pg)
    before = _snapshot(pg)
    config = _project(tmp_path, pg)
    script = _script(config, "upgrade")
    # The online op killed after its first shadow column.
    _interrupted_upgrade(pg, config, "ALTER TABLE PK_ORDERS ADD COLUMN", kill=True)
    schema = _catalog(pg)
    done = _clients.psql(pg, script, app=APP)
    assert done.returncode != 0
    assert "started online is recorded in public.ulid_key_conversions" in done.stderr
    assert "rerun that migration online" in done.stderr
    assert _catalog(pg) == schema
    _online(config, pg, "upgrade")  # online finishes it
    assert _snapshot(pg) == before
    _check_ulids(pg)


def test_the_online_op_refuses_an_unfinished_script_and_names_it(
    pg: Engine, tmp_path: Path
) -> None:
    _seed(pg)
    before = _snapshot(pg)
    config = _project(tmp_path, pg)
    script = _script(config, "upgrade")
    done = _clients.psql(
        pg, script[: script.index("-- Phase 2:")], app=APP
    )  # the shadows, then stopped
    assert done.returncode == 0, done.stderr
    schema = _catalog(pg)
    with pytest.raises(ConversionRefused, match=r"offline \(--sql\) script of this conversion"):
        _online(config, pg, "upgrade")
    assert _catalog(pg) == schema
    _ok(pg, script)  # the script finishes it
    assert _snapshot(pg) == before
    _check_ulids(pg)


# -- killed, then run again ------------------------------------------------------------------


def _cut(script: str) -> list[tuple[str, str]]:
    """The script stopped after each phase: (the phase, the part that ran)."""
    marks = [
        ("SET lock_timeout", "before the plan"),
        ("-- Phase 1:", "after the plan"),
        ("-- Phase 2:", "after the shadows"),
        ("-- Phase 3:", "after the key's fill"),
        ("-- Phase 4:", "after the fills"),
        ("RESET lock_timeout;", "in the swap, before its commit"),
    ]
    return [(name, script[: script.index(mark)]) for mark, name in marks if mark in script]


def _finishes(pg: Engine, script: str, before: Any, reference: Any, where: str) -> None:
    _ok(pg, script)
    assert _snapshot(pg) == before, where
    assert _catalog(pg) == reference, where
    again = _ok(pg, script)
    assert "already done" in again, where
    assert _catalog(pg) == reference, where


def test_the_script_stopped_after_each_phase_then_rerun(pg: Engine, tmp_path: Path) -> None:
    _seed(pg)
    before, legacy = _snapshot(pg), _catalog(pg)
    config = _project(tmp_path, pg, up="from_time='created_at', batch_size=7")
    up, down = _script(config, "upgrade"), _script(config, "downgrade")
    _ok(pg, up)
    converted = _catalog(pg)
    for action, script, start, reference in (("upgrade", up, legacy, converted),
                                             ("downgrade", down, converted, legacy)):  # fmt: skip
        cuts = _cut(script)
        assert len(cuts) == (6 if action == "upgrade" else 5), [c[0] for c in cuts]
        for where, part in cuts:
            _drop(pg)
            _seed(pg)
            _project(tmp_path, pg, up="from_time='created_at', batch_size=7")
            if action == "downgrade":
                _ok(pg, up)
            assert _catalog(pg) == start
            done = _clients.psql(pg, part, app=APP)
            assert done.returncode == 0, done.stderr
            assert _snapshot(pg) == before, f"{action} {where}"
            _finishes(pg, script, before, reference, f"{action} {where}")
            if action == "upgrade":
                _check_ulids(pg)


def _blocked(pg: Engine, hold: str, script: subprocess.Popen[str], wait: float = 60) -> int:
    """The pid of the script's session once it waits for the lock ``hold`` took."""
    deadline = time.monotonic() + wait
    with pg.connect() as conn:
        while time.monotonic() < deadline:
            if script.poll() is not None:  # it ended without waiting: say how
                _, err = script.communicate()
                pytest.fail(f"the script ended before waiting behind {hold}:\n{err[-3000:]}")
            pid = conn.exec_driver_sql(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %(app)s "
                "AND datname = current_database() "
                "AND wait_event_type = 'Lock'",
                {"app": APP},
            ).scalar()
            conn.rollback()
            if pid is not None:
                return int(pid)
            time.sleep(0.02)
    pytest.fail(f"the script never waited behind {hold}")


KILLS = [
    # inside phase 1: the shadows of the first tables are committed
    ("upgrade", None, "SELECT 1 FROM pk_orders LIMIT 1", "added pk_customers.id__ulid"),
    # inside the key's fill: its first batches are committed, the last one
    # ending inside a millisecond that the next batch shares (the shadows
    # added by a first run: their ALTER would wait for the row lock too)
    ("upgrade", "-- Phase 2:", "SELECT 1 FROM pk_customers WHERE id = 29 FOR UPDATE",
     "28 rows of pk_customers.id given ULIDs"),
    # inside the fills by a join
    ("upgrade", "-- Phase 3:", "SELECT 1 FROM pk_orders WHERE id = 3 FOR UPDATE",
     "pk_customers.referrer_id filled from pk_customers"),
    # inside the swap: it waits for its LOCK TABLE
    ("upgrade", "-- Phase 4:", "SELECT 1 FROM pk_account_events LIMIT 1",
     "pk_account_events.account_id filled from pk_accounts"),
    # the same in the downgrade
    ("downgrade", None, "SELECT 1 FROM pk_orders LIMIT 1",
     "added pk_customers.referrer_id__legacy"),
    ("downgrade", "-- Phase 3:", "SELECT 1 FROM pk_orders WHERE customer_id IS NOT NULL "
     "LIMIT 1 FOR UPDATE", "pk_customers.referrer_id filled from pk_customers"),
    ("downgrade", "-- Phase 4:", "SELECT 1 FROM pk_account_events LIMIT 1",
     "pk_account_events.account_id filled from pk_accounts"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("action", "first", "hold", "progress"),
    KILLS,
    ids=["prepare", "fill", "join", "swap", "down-prepare", "down-join", "down-swap"],
)
def test_the_session_terminated_inside_a_phase_then_rerun(
    pg: Engine, tmp_path: Path, action: str, first: str | None, hold: str, progress: str
) -> None:
    _seed(pg)
    before, legacy = _snapshot(pg), _catalog(pg)
    options = "from_time='created_at', batch_size=7, lock_timeout=30"
    config = _project(tmp_path, pg, up=options, down="lock_timeout=30")
    up, down = _script(config, "upgrade"), _script(config, "downgrade")
    script_text = up
    if action == "downgrade":
        _ok(pg, up)
        script_text = down
    version = _version(pg)
    if first is not None:
        _ok(pg, script_text[: script_text.index(first)])
    args, env = _clients.psql_args(pg), _clients.psql_env(pg, APP)
    blocker = pg.connect()
    try:
        blocker.exec_driver_sql(hold).all()  # holds its lock until the rollback
        path = tmp_path / "script.sql"
        path.write_text(script_text)
        script = subprocess.Popen(
            [*args[:-1], str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env,
        )  # fmt: skip
        try:
            pid = _blocked(pg, hold, script)
            with pg.connect() as admin:
                admin.exec_driver_sql(f"SELECT pg_terminate_backend({pid})")
            _, err = script.communicate(timeout=30)
        finally:
            if script.poll() is None:
                script.kill()
                script.wait(timeout=10)
        assert script.returncode != 0
        assert "terminat" in err, err
        assert progress in err, err
    finally:
        blocker.rollback()
        blocker.close()
    assert _snapshot(pg) == before
    assert _version(pg) == version
    _ok(pg, script_text)
    assert _snapshot(pg) == before
    if action == "upgrade":
        _check_ulids(pg)
        assert _version(pg) == "pk0001"
    else:
        assert _catalog(pg) == legacy
        assert _version(pg) == "pk0000"


def test_a_lock_timeout_is_retried_then_stops_the_script_and_the_rerun_finishes(
    pg: Engine, tmp_path: Path
) -> None:
    _seed(pg)
    before = _snapshot(pg)
    config = _project(tmp_path, pg, up="from_time='created_at', lock_timeout=0.05")
    up = _script(config, "upgrade")
    reader = pg.connect()
    try:
        reader.exec_driver_sql("SELECT count(*) FROM pk_orders").all()  # holds its lock
        started = time.monotonic()
        done = _clients.psql(pg, up, app=APP)
        assert time.monotonic() - started < 30
    finally:
        reader.rollback()
        reader.close()
    assert done.returncode != 0
    assert "lock timeout on pk_orders, try 3 of 4" in done.stderr
    assert "canceling statement due to lock timeout" in done.stderr
    assert _snapshot(pg) == before
    assert _version(pg) == "pk0000"
    _ok(pg, up)
    assert _snapshot(pg) == before
    _check_ulids(pg)


# -- writers while the script runs -------------------------------------------------------------


def test_two_writers_insert_while_the_script_runs(pg: Engine, tmp_path: Path) -> None:
    """Writers through every phase, the swap included; none is cancelled.

    The two writers take the tables in opposite orders (a customer, then its
    order; an order, then its foreign-key check of the customer), so that
    the swap, holding one table while it waits for the next, meets each of
    them in a deadlock. The swap lets go before the server would cancel the
    writer, and tries again; it gets every lock in a moment between writes.
    (Writers that never pause can keep it from ever getting them: it then
    stops on its lock timeout, as the docs say, and the rerun goes on.)
    """
    _seed(pg)
    with pg.begin() as conn:  # more customers: the fill takes many batches
        conn.exec_driver_sql(
            "INSERT INTO pk_customers (id, created_at, name) SELECT i, "
            "timestamp '2023-03-02' + i * interval '1 millisecond', 'c' || i "
            "FROM generate_series(31, 3000) AS i"
        )
        conn.exec_driver_sql("SELECT setval('pk_customers_id_seq', 3000)")
        conn.exec_driver_sql("SELECT setval('pk_orders_id_seq', 1000)")
    config = _project(tmp_path, pg, up="from_time='created_at', batch_size=50")
    up = _script(config, "upgrade")
    written: dict[str, int] = {"customers": 0, "orders": 0, "events": 0}

    def customers_and_orders(conn: Connection, n: int) -> bool:
        try:
            conn.exec_driver_sql(
                "WITH c AS (INSERT INTO pk_customers (created_at, name) "
                f"VALUES (now(), 'w{n}') RETURNING id) "
                f"INSERT INTO pk_orders (customer_id, note) SELECT id, 'w{n}' FROM c"
            )
        except sa.exc.IntegrityError:
            return False  # swapped: the key has no default any more, as online
        written["customers"] += 1
        written["orders"] += 1
        return True

    def orders_and_events(conn: Connection, n: int) -> bool:
        conn.exec_driver_sql(
            "INSERT INTO pk_orders (customer_id, note) SELECT id, "
            f"'x{n}' FROM pk_customers WHERE name = 'c{1 + n % 30}'"
        )
        conn.exec_driver_sql(
            "INSERT INTO pk_account_events (id, account_id, kind) SELECT "
            f"{1000 + n}, customer_id, 'x{n}' FROM pk_accounts "
            f"WHERE plan = 'p{1 + n % 20}'"
        )
        written["orders"] += 1
        written["events"] += 1
        return True

    def write(conn: Connection, writer: int, i: int) -> bool:
        return (customers_and_orders, orders_and_events)[writer](conn, i + 1)

    with _writers.Loop(
        pg,
        2,
        write,
        begin=lambda conn, n: conn.execution_options(isolation_level="AUTOCOMMIT"),
        pause=0.002,  # an application pauses between writes (see above)
        join=30,
    ) as writers:
        deadline = time.monotonic() + 10
        while min(written.values()) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        started = dict(written)
        log = _ok(pg, up)
        during = {name: written[name] - started[name] for name in written}
        time.sleep(0.1)
    writers.check()
    assert "pk_customers done" in log
    assert during["customers"] > 0, during
    assert during["events"] > 0, during
    with pg.connect() as conn:
        counts = conn.exec_driver_sql(
            "SELECT (SELECT count(*) FROM pk_customers), (SELECT count(*) FROM pk_orders), "
            "(SELECT count(*) FROM pk_account_events)"
        ).one()
        assert tuple(counts) == (
            3000 + written["customers"],
            50 + written["orders"],
            40 + written["events"],
        )
        # Every row has a ULID and its old key; every reference joins.
        assert (
            conn.exec_driver_sql(
                "SELECT count(*) FROM pk_customers WHERE id IS NULL OR legacy_id IS NULL"
            ).scalar()
            == 0
        )
        joined = conn.exec_driver_sql(
            "SELECT count(*) FROM pk_orders o JOIN pk_customers c ON c.id = o.customer_id"
        ).scalar()
        assert joined == counts[1]
        assert (
            conn.exec_driver_sql(  # a writer's order references its own customer
                "SELECT count(*) FROM pk_orders o JOIN pk_customers c ON c.id = o.customer_id "
                "WHERE o.note LIKE 'w%%' AND o.note <> c.name"
            ).scalar()
            == 0
        )
        assert (
            conn.exec_driver_sql(
                "SELECT count(*) FROM pk_account_events e JOIN pk_accounts a "
                "ON a.customer_id = e.account_id"
            ).scalar()
            == counts[2]
        )
        invalid = conn.exec_driver_sql(
            "SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND NOT convalidated"
        ).scalar()
        assert invalid == 0


# -- quoted names in another schema ------------------------------------------------------------

ODD_SCHEMA = "Pk Schema"


def test_quoted_mixed_case_names_in_another_schema(pg: Engine, tmp_path: Path) -> None:
    """A quote, a percent, a space and capitals in every kind of name the script uses."""
    q = pg.dialect.identifier_preparer.quote  # doubles % for the driver
    schema = q(ODD_SCHEMA)
    parent_name, child_name = q("Kun'de"), q("Bestell 100%")
    parent, child = f"{schema}.{parent_name}", f"{schema}.{child_name}"
    key, when, name, referrer, ref = q("Id"), q("Erstellt"), q("Name"), q("Werber"), q("Kunde%Id")
    with pg.begin() as conn:
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
        conn.exec_driver_sql(
            f'CREATE TABLE {parent} ({key} serial CONSTRAINT "Kunde PK" PRIMARY KEY, '
            f"{when} timestamptz NOT NULL, {name} text NOT NULL, "
            f'{referrer} int CONSTRAINT "fk Werber" REFERENCES {parent} ({key}))'
        )
        conn.exec_driver_sql(
            f"CREATE TABLE {child} (id int PRIMARY KEY, {ref} int NOT NULL "
            f'CONSTRAINT "fk Kunde" REFERENCES {parent} ({key}) ON DELETE CASCADE '
            "DEFERRABLE INITIALLY DEFERRED)"
        )
        conn.exec_driver_sql(f'CREATE INDEX "ix Kunde" ON {child} ({ref})')
        conn.exec_driver_sql(f"COMMENT ON COLUMN {child}.{ref} IS 'who, 100%%'")
        conn.exec_driver_sql(
            f"INSERT INTO {parent} ({when}, {name}, {referrer}) SELECT "
            "timestamptz '2024-05-01 12:00+02' + i * interval '1 second', 'n' || i, "
            "NULLIF(i - 1, 0) FROM generate_series(1, 12) AS i"
        )
        conn.exec_driver_sql(
            f"INSERT INTO {child} SELECT i, 1 + i %% 12 FROM generate_series(1, 30) AS i"
        )
    query = (
        f"SELECT b.id, k.{name}, w.{name} FROM {child} b JOIN {parent} k ON k.{key} = b.{ref} "
        f"LEFT JOIN {parent} w ON w.{key} = k.{referrer}"
    )

    def joins() -> list[tuple[Any, ...]]:
        with pg.connect() as conn:
            return sorted(tuple(r) for r in conn.exec_driver_sql(query))

    try:
        before, legacy = joins(), _catalog(pg, ODD_SCHEMA)
        config = _project(
            tmp_path, pg, table="Kun'de", up=f"from_time='Erstellt', schema={ODD_SCHEMA!r}",
            down=f"schema={ODD_SCHEMA!r}",
        )  # fmt: skip
        up, down = _script(config, "upgrade"), _script(config, "downgrade")
        _ok(pg, up)
        assert joins() == before
        converted = _catalog(pg, ODD_SCHEMA)
        columns = {(r[0], r[1]): r for r in converted["columns"]}
        assert columns[("Kun'de", "Id")][2] == "uuid"
        assert columns[("Bestell 100%", "Kunde%Id")][5] == "who, 100%"
        foreign_key = (
            'FOREIGN KEY ("Kunde%Id") REFERENCES "Pk Schema"."Kun\'de"("Id") '
            "ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED"
        )
        assert ("Bestell 100%", "fk Kunde", "f", foreign_key) in converted["constraints"]
        with pg.connect() as conn:
            made = conn.exec_driver_sql(f"SELECT {key}, {when} FROM {parent}").all()
        assert len(made) == 12
        assert all(int.from_bytes(i.bytes[:6], "big") == to_ms(t) for i, t in made)
        assert "already done" in _ok(pg, up)
        _ok(pg, down)
        assert joins() == before
        assert _catalog(pg, ODD_SCHEMA) == legacy
    finally:
        with pg.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
