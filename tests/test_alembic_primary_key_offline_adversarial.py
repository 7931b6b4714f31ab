"""The offline PostgreSQL key conversion on schemas a user has: found by trying to break it.

Each test builds its own tables (``adv_*``), writes the scripts with the
real ``alembic upgrade --sql`` / ``downgrade --sql`` and runs them with the
real ``psql`` (stopping at the first error). What it checks: a referencing
table that is partitioned converts (its partitions carry the parent's
foreign key, which the script must not treat as theirs); whatever the
swap's ``DROP COLUMN`` would drop with a referencing column (a CHECK, an
exclusion constraint, a generated column, a foreign key to a table that
does not change, column GRANTs) stops the script before any change, rather
than vanish or fail inside the swap; and the comments on the constraints
and indexes the swap recreates come back with them.
"""

from __future__ import annotations

import os
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

import _clients
import _databases
import _writers
from _sessions import Release, wait_for, waiting
from conftest import Backend, private_engine
from sqlalchemy_ulid.alembic import ConversionRefused
from test_alembic_primary_key_offline_postgresql import (
    APP,
    _ok,
    _online,
    _project,
    _script,
    _version,
)

TABLES = ("adv_events", "adv_slots", "adv_orders", "adv_regions", "adv_customers")


#: A role of this process's own: roles are the server's, and other test runs
#: (another pytest-xdist worker, another CI job) may grant and drop theirs at once.
READER = f"adv_reader_{os.getpid()}"


_drop = _databases.dropper(
    *TABLES,
    "alembic_version_pk_test",
    "ulid_key_conversions",  # online's state
    also=[
        f"DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{READER}') "
        f"THEN DROP OWNED BY {READER}; DROP ROLE {READER}; END IF; END $$"
    ],
)


@pytest.fixture
def pg(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["postgresql"], _drop) as engine:
        yield engine


def _run(engine: Engine, *statements: str) -> None:
    with engine.begin() as conn:
        for statement in statements:
            conn.exec_driver_sql(statement)


def _rows(engine: Engine, sql: str) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return sorted(tuple(r) for r in conn.exec_driver_sql(sql))


_CUSTOMERS = (
    "CREATE TABLE adv_customers (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
    "created_at timestamp NOT NULL, name text NOT NULL)",
    "INSERT INTO adv_customers (created_at, name) SELECT timestamp '2024-01-01' "
    "+ g * interval '1 second', 'c' || g FROM generate_series(1, 12) AS g",
)

#: Every table's columns, constraints and indexes, with their comments
#: (partitioned tables and their partitions too).
_SCHEMA = """
    SELECT 'column', c.relname, a.attname, format_type(a.atttypid, a.atttypmod)
           || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END,
           col_description(c.oid, a.attnum)
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    WHERE c.relname LIKE 'adv%%' AND c.relkind IN ('r', 'p') AND a.attnum > 0
    AND NOT a.attisdropped
    UNION ALL
    SELECT 'constraint', c.relname, con.conname, pg_get_constraintdef(con.oid),
           obj_description(con.oid, 'pg_constraint')
    FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid
    WHERE c.relname LIKE 'adv%%'
    UNION ALL
    SELECT 'index', c.relname, i.relname, pg_get_indexdef(i.oid) || CASE WHEN x.indisvalid
           THEN '' ELSE ' (INVALID)' END, obj_description(i.oid, 'pg_class')
    FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class c ON c.oid = x.indrelid
    WHERE c.relname LIKE 'adv%%'
"""


def _schema(engine: Engine) -> list[tuple[Any, ...]]:
    return _rows(engine, _SCHEMA)


# -- a partitioned referencing table ---------------------------------------------------------


def test_a_partitioned_table_that_references_the_key(pg: Engine, tmp_path: Path) -> None:
    """Its partitions hold clones of its foreign key: the script converts the parent."""
    setup = (
        *_CUSTOMERS,
        "CREATE TABLE adv_events (id int, at date NOT NULL, customer_id bigint NOT NULL "
        "CONSTRAINT fk_adv_events_customer REFERENCES adv_customers ON DELETE CASCADE, "
        "PRIMARY KEY (id, at)) PARTITION BY RANGE (at)",
        "CREATE TABLE adv_events_2024 PARTITION OF adv_events "
        "FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')",
        "CREATE TABLE adv_events_2025 PARTITION OF adv_events "
        "FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')",
        "CREATE INDEX ix_adv_events_customer ON adv_events (customer_id, at)",
        "INSERT INTO adv_events SELECT g, date '2024-06-01' + g * 15, 1 + g %% 12 "
        "FROM generate_series(1, 30) AS g",
    )
    _run(pg, *setup)
    joins = (
        "SELECT e.id, e.at, c.name FROM adv_events e JOIN adv_customers c ON c.id = e.customer_id"
    )
    before, legacy = _rows(pg, joins), _schema(pg)
    config = _project(tmp_path, pg, table="adv_customers", up="from_time='created_at'")
    up, down = _script(config, "upgrade"), _script(config, "downgrade")
    _ok(pg, up)
    assert _version(pg) == "pk0001"
    assert _rows(pg, joins) == before
    converted = _schema(pg)
    found = {(kind, table, name): definition for kind, table, name, definition, _ in converted}
    assert found[("column", "adv_events_2024", "customer_id")] == "uuid NOT NULL"
    assert found[("constraint", "adv_events", "fk_adv_events_customer")] == (
        "FOREIGN KEY (customer_id) REFERENCES adv_customers(id) ON DELETE CASCADE"
    )
    # The index is the partitioned one it was, built on every partition.
    assert found[("index", "adv_events", "ix_adv_events_customer")] == (
        "CREATE INDEX ix_adv_events_customer ON ONLY public.adv_events "
        "USING btree (customer_id, at)"
    )
    partition_indexes = [
        row for row in converted if row[0] == "index" and row[1].startswith("adv_events_20")
    ]
    assert len(partition_indexes) == 4  # each partition: its primary key and the index
    assert not any("INVALID" in row[3] for row in converted)
    # Each partition enforces the foreign key: an id that is not a customer's fails.
    with pytest.raises(sa.exc.IntegrityError):
        _run(pg, "INSERT INTO adv_events VALUES (99, '2025-02-01', gen_random_uuid())")
    _run(pg, "DELETE FROM adv_customers WHERE name = 'c1'")  # the cascade reaches them
    assert len(_rows(pg, "SELECT 1 FROM adv_events")) == len(before) - sum(
        1 for row in before if row[2] == "c1"
    )
    assert "already done" in _ok(pg, up)
    _ok(pg, down)
    assert _version(pg) == "pk0000"
    assert _schema(pg) == legacy
    # The online op, from the same start, makes the same schema.
    _drop(pg)
    _run(pg, *setup)
    config = _project(tmp_path, pg, table="adv_customers", up="from_time='created_at'")
    _online(config, pg, "upgrade")
    assert _schema(pg) == converted


# -- what DROP COLUMN would take with a referencing column: refused before any change ------

USED = [
    # a CHECK constraint would be dropped with the column
    ("ALTER TABLE adv_orders ADD CONSTRAINT ck_adv_orders_who "
     "CHECK (customer_id IS NOT NULL OR guest IS NOT NULL)",
     "constraint ck_adv_orders_who on table adv_orders"),
    # an exclusion constraint too (its index is not the op's to rebuild)
    ("ALTER TABLE adv_orders ADD CONSTRAINT ex_adv_orders_one "
     "EXCLUDE USING btree (customer_id WITH =, guest WITH =)",
     "constraint ex_adv_orders_one on table adv_orders"),
    # a generated column makes DROP COLUMN fail inside the swap
    ("ALTER TABLE adv_orders ADD COLUMN tag text "
     "GENERATED ALWAYS AS ('C' || customer_id::text) STORED",
     "the generated column tag"),
    # column privileges go with the column
    (f"CREATE ROLE {READER}", f"GRANT SELECT (customer_id) ON adv_orders TO {READER}",
     "GRANTs on the column"),
    # a foreign key to a table that keeps its integer key
    ("ALTER TABLE adv_orders ADD CONSTRAINT fk_adv_orders_region "
     "FOREIGN KEY (customer_id) REFERENCES adv_regions (id)",
     "fk_adv_orders_region on adv_orders references adv_regions, which this op does not "
     "convert"),
    # a DEFAULT of the old type would be dropped with the column
    ("ALTER TABLE adv_orders ALTER COLUMN customer_id SET DEFAULT 1", "its DEFAULT"),
]  # fmt: skip


#: Each case of USED, as a test parameter.
USED_CASES = pytest.mark.parametrize(
    ("setup", "message"),
    [(row[:-1], row[-1]) for row in USED],
    ids=["check", "exclusion", "generated", "grant", "other fk", "default"],
)


def _orders_with(pg: Engine, setup: tuple[str, ...]) -> None:
    """Customers, and orders referencing them, with one case of USED on the orders."""
    _run(
        pg,
        *_CUSTOMERS,
        "CREATE TABLE adv_regions (id bigint PRIMARY KEY)",
        "INSERT INTO adv_regions SELECT generate_series(1, 12)",
        "CREATE TABLE adv_orders (id int PRIMARY KEY, customer_id bigint "
        "REFERENCES adv_customers, guest text)",
        "INSERT INTO adv_orders SELECT g, 1 + g %% 12, NULL FROM generate_series(1, 20) AS g",
        *setup,
    )


@USED_CASES
def test_what_the_swap_would_drop_with_a_column_stops_the_script_first(
    pg: Engine, tmp_path: Path, setup: tuple[str, ...], message: str
) -> None:
    _orders_with(pg, setup)
    rows = "SELECT o.id, c.name FROM adv_orders o JOIN adv_customers c ON c.id = o.customer_id"
    before, schema = _rows(pg, rows), _schema(pg)
    config = _project(tmp_path, pg, table="adv_customers", up="from_time='created_at'")
    done = _clients.psql(pg, _script(config, "upgrade"), app=APP)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr
    assert "adv_orders.customer_id" in done.stderr, done.stderr
    assert "added" not in done.stderr  # stopped in the plan: no shadow column
    assert _schema(pg) == schema
    assert _rows(pg, rows) == before
    assert _version(pg) == "pk0000"


# -- comments on what the swap recreates ------------------------------------------------------


def test_comments_on_recreated_constraints_and_indexes_come_back(
    pg: Engine, tmp_path: Path
) -> None:
    _run(
        pg,
        *_CUSTOMERS,
        "CREATE TABLE adv_orders (id int PRIMARY KEY, customer_id bigint NOT NULL "
        "CONSTRAINT fk_adv_orders_customer REFERENCES adv_customers, note text NOT NULL, "
        "CONSTRAINT uq_adv_orders_note UNIQUE (customer_id, note))",
        "CREATE TABLE adv_slots (customer_id bigint CONSTRAINT pk_adv_slots PRIMARY KEY "
        "CONSTRAINT fk_adv_slots_customer REFERENCES adv_customers, size int NOT NULL)",
        "CREATE INDEX ix_adv_orders_customer ON adv_orders (customer_id)",
        "COMMENT ON CONSTRAINT fk_adv_orders_customer ON adv_orders IS 'who ordered, 100%%'",
        "COMMENT ON CONSTRAINT uq_adv_orders_note ON adv_orders IS 'one note each'",
        "COMMENT ON CONSTRAINT pk_adv_slots ON adv_slots IS 'one slot per customer'",
        "COMMENT ON CONSTRAINT adv_customers_pkey ON adv_customers IS 'the customer'",
        "COMMENT ON INDEX ix_adv_orders_customer IS 'for the customer''s orders'",
        "INSERT INTO adv_orders SELECT g, 1 + g %% 12, 'n' || g FROM generate_series(1, 20) AS g",
        "INSERT INTO adv_slots SELECT g, g FROM generate_series(1, 6) AS g",
    )
    comments = (
        "SELECT conname, obj_description(oid, 'pg_constraint') FROM pg_constraint "
        "WHERE conrelid::regclass::text LIKE 'adv%%' UNION ALL "
        "SELECT relname, obj_description(oid, 'pg_class') FROM pg_class "
        "WHERE relname = 'ix_adv_orders_customer'"
    )
    legacy, noted = _schema(pg), _rows(pg, comments)
    assert ("fk_adv_orders_customer", "who ordered, 100%") in noted
    config = _project(tmp_path, pg, table="adv_customers", up="from_time='created_at'")
    _ok(pg, _script(config, "upgrade"))
    kept = dict(_rows(pg, comments))
    assert {name: kept.get(name) for name, _ in noted} == dict(noted)
    _ok(pg, _script(config, "downgrade"))
    assert _schema(pg) == legacy


# -- from_time values the ULID cannot date -----------------------------------------------------


@pytest.mark.parametrize(
    ("column_type", "value"),
    [("timestamptz", "infinity"), ("timestamp", "-infinity"), ("timestamp", "1969-12-31 23:59")],
)
def test_a_from_time_out_of_range_stops_the_script_naming_it(
    pg: Engine, tmp_path: Path, column_type: str, value: str
) -> None:
    _run(
        pg,
        *_CUSTOMERS,
        f"ALTER TABLE adv_customers ADD COLUMN seen {column_type}",
        "UPDATE adv_customers SET seen = created_at",
        f"UPDATE adv_customers SET seen = '{value}' WHERE name = 'c5'",
    )
    schema = _schema(pg)
    config = _project(tmp_path, pg, table="adv_customers", up="from_time='seen'")
    done = _clients.psql(pg, _script(config, "upgrade"), app=APP)
    assert done.returncode != 0
    assert f"adv_customers.seen = {value}" in done.stderr, done.stderr
    assert "is out of the ULID range" in done.stderr
    assert _schema(pg) == schema


# -- an application's row lock during the fills -------------------------------------------------


@pytest.mark.parametrize(
    ("hold", "phase"),
    [
        ("SELECT 1 FROM adv_customers WHERE name = 'c7' FOR UPDATE", "-- Phase 2:"),
        ("SELECT 1 FROM adv_orders WHERE id = 7 FOR UPDATE", "-- Phase 3:"),
    ],
    ids=["key fill", "join fill"],
)
def test_a_row_locked_for_a_while_during_a_fill_delays_the_script_only(
    pg: Engine, tmp_path: Path, hold: str, phase: str
) -> None:
    """A batch that waits past lock_timeout for a row is tried again, as DDL is."""
    _run(
        pg,
        *_CUSTOMERS,
        "CREATE TABLE adv_orders (id int PRIMARY KEY, customer_id bigint NOT NULL "
        "REFERENCES adv_customers, note text NOT NULL)",
        "INSERT INTO adv_orders SELECT g, 1 + g %% 12, 'n' || g FROM generate_series(1, 20) AS g",
    )
    rows = "SELECT o.note, c.name FROM adv_orders o JOIN adv_customers c ON c.id = o.customer_id"
    before = _rows(pg, rows)
    config = _project(
        tmp_path, pg, table="adv_customers", up="from_time='created_at', lock_timeout=0.2"
    )
    up = _script(config, "upgrade")
    _ok(pg, up[: up.index(phase)])  # the phases before it, done
    holder = pg.connect()
    try:
        holder.exec_driver_sql(hold).all()  # an application's transaction, open for a while

        # Once the script waits for the row, past one lock_timeout.
        releaser = Release(pg, holder.rollback, application=APP, after=0.5, bound=20)
        try:
            log = _ok(pg, up)
        finally:
            releaser.join(timeout=30)
    finally:
        holder.close()
    assert releaser.seen, "the script never waited for the row"
    assert "lock timeout on" in log, log
    assert _version(pg) == "pk0001"
    assert _rows(pg, rows) == before


def test_rows_a_not_valid_foreign_key_lets_reference_nothing_stop_the_script_first(
    pg: Engine, tmp_path: Path
) -> None:
    """They would have no new value: the swap would refuse at every rerun."""
    _run(
        pg,
        *_CUSTOMERS,
        "CREATE TABLE adv_orders (id int PRIMARY KEY, customer_id bigint)",
        "INSERT INTO adv_orders SELECT g, g FROM generate_series(1, 14) AS g",  # 13, 14: none
        "ALTER TABLE adv_orders ADD CONSTRAINT fk_adv_orders_customer "
        "FOREIGN KEY (customer_id) REFERENCES adv_customers NOT VALID",
    )
    schema = _schema(pg)
    config = _project(tmp_path, pg, table="adv_customers", up="from_time='created_at'")
    up = _script(config, "upgrade")
    done = _clients.psql(pg, up, app=APP)
    assert done.returncode != 0
    assert (
        "the foreign key fk_adv_orders_customer on adv_orders is NOT VALID, and 2 rows of "
        "adv_orders.customer_id reference no row of adv_customers"
    ) in done.stderr, done.stderr
    assert _schema(pg) == schema
    _run(pg, "DELETE FROM adv_orders WHERE id > 12")  # orphans gone: it converts, NOT VALID
    _ok(pg, up)
    found = {(row[1], row[2]): row[3] for row in _schema(pg)}
    assert found[("adv_orders", "fk_adv_orders_customer")] == (
        "FOREIGN KEY (customer_id) REFERENCES adv_customers(id) NOT VALID"
    )


# -- two runs of the script at once -------------------------------------------------------------


def test_a_run_whose_plan_another_run_finished_stops_at_its_swap_and_says_why(
    pg: Engine, tmp_path: Path
) -> None:
    _run(
        pg,
        *_CUSTOMERS,
        "CREATE TABLE adv_orders (id int PRIMARY KEY, customer_id bigint NOT NULL "
        "REFERENCES adv_customers)",
        "INSERT INTO adv_orders SELECT g, 1 + g %% 12 FROM generate_series(1, 20) AS g",
    )
    rows = "SELECT o.id, c.name FROM adv_orders o JOIN adv_customers c ON c.id = o.customer_id"
    before = _rows(pg, rows)
    config = _project(tmp_path, pg, table="adv_customers", up="from_time='created_at'")
    up = _script(config, "upgrade")
    args, env = _clients.psql_args(pg), _clients.psql_env(pg, APP)
    first = subprocess.Popen(
        args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env,
    )  # fmt: skip
    assert first.stdin is not None
    assert first.stdout is not None
    deadline = threading.Timer(60, first.kill)  # a bound on the readline below
    deadline.start()
    try:
        first.stdin.write(up[: up.index("-- Phase 4:")] + "\n\\echo planned\n")
        first.stdin.flush()
        assert first.stdout.readline().strip() == "planned"  # its plan read, its fills done
        # A second run of the script is refused before any change: the first holds the
        # run's lock (test_alembic_run_lock.py).
        refused = _clients.psql(pg, up, app=APP)
        assert refused.returncode != 0
        assert "is under way" in refused.stderr, refused.stderr
        assert _rows(pg, rows) == before
        # Without that lock (a script of an earlier release), the second runs start to
        # end, and the swap's own guard stops the first.
        _ok(pg, _without_run_lock(up))
        _, err = first.communicate(up[up.index("-- Phase 4:") :], timeout=60)
    finally:
        deadline.cancel()
        if first.poll() is None:
            first.kill()
            first.wait(timeout=10)
    assert first.returncode != 0
    assert "adv_customers.id__ulid, adv_orders.customer_id__ulid are gone" in err, err
    assert "Nothing was swapped" in err
    assert _version(pg) == "pk0001"
    assert _rows(pg, rows) == before
    assert "already done" in _ok(pg, up)


def _without_run_lock(script: str) -> str:
    """``script`` without its first block, the one that takes the run's lock."""
    start = script.index("-- this run's lock, held to the end")
    end = script.index("$ulid$;", start) + len("$ulid$;")
    return script[:start] + script[end:]


# -- the swap's locks and an application's transaction -------------------------------------------


def test_the_swap_taking_its_locks_never_deadlocks_an_application_transaction(
    pg: Engine, tmp_path: Path
) -> None:
    """The swap holds the first table while it waits for the next: it gives up first.

    The swap locks the referencing tables first (adv_orders, adv_events,
    then adv_customers). An application's transaction holds adv_customers
    (an update) and then reads adv_orders, which the swap has locked while
    it waits for adv_events (a reader's) and then adv_customers: a cycle.
    Had the swap waited its full lock_timeout, PostgreSQL would end the
    application's transaction as a deadlock; it must back off, let it
    finish, and take the locks after.
    """
    _run(
        pg,
        *_CUSTOMERS,
        "CREATE TABLE adv_orders (id int PRIMARY KEY, customer_id bigint NOT NULL "
        "REFERENCES adv_customers, note text)",
        "CREATE TABLE adv_events (id int PRIMARY KEY, customer_id bigint NOT NULL "
        "REFERENCES adv_customers)",
        "INSERT INTO adv_orders SELECT g, 1 + g %% 12 FROM generate_series(1, 20) AS g",
        "INSERT INTO adv_events SELECT g, 1 + g %% 12 FROM generate_series(1, 20) AS g",
    )
    config = _project(
        tmp_path, pg, table="adv_customers", up="from_time='created_at', lock_timeout=1"
    )
    up = _script(config, "upgrade")
    _ok(pg, up[: up.index("-- Phase 4:")])
    reader, application = pg.connect(), pg.connect()
    errors: list[BaseException] = []
    try:
        reader.exec_driver_sql("SELECT 1 FROM adv_events LIMIT 1").all()
        application.exec_driver_sql("UPDATE adv_customers SET name = 'seen' WHERE name = 'c1'")

        def read_customers() -> None:
            try:
                application.exec_driver_sql("SELECT count(*) FROM adv_orders").all()
                application.commit()
            except BaseException as exc:  # reported by the test
                errors.append(exc)

        args, env = _clients.psql_args(pg), _clients.psql_env(pg, APP)
        path = tmp_path / "script.sql"
        path.write_text(up)
        script = subprocess.Popen(
            [*args[:-1], str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env,
        )  # fmt: skip
        try:
            # The swap holds adv_orders and waits for adv_events.
            waited = wait_for(pg, lambda conn: waiting(conn, application=APP), 20)
            assert waited, "the script never waited for the row"
            blocked = threading.Thread(target=read_customers)
            blocked.start()
            time.sleep(0.2)
            reader.rollback()  # the swap goes on to adv_customers, which the application holds
            blocked.join(timeout=30)
            _, err = script.communicate(timeout=60)
        finally:
            if script.poll() is None:
                script.kill()
                script.wait(timeout=10)
    finally:
        reader.close()
        application.close()
    assert not errors, errors
    assert script.returncode == 0, err
    assert "adv_customers done" in err
    assert _version(pg) == "pk0001"
    assert _rows(pg, "SELECT name FROM adv_customers WHERE legacy_id = 1") == [("seen",)]


@USED_CASES
def test_the_online_op_refuses_the_same_before_any_change(
    pg: Engine, tmp_path: Path, setup: tuple[str, ...], message: str
) -> None:
    _orders_with(pg, setup)
    schema = _schema(pg)
    config = _project(tmp_path, pg, table="adv_customers", up="from_time='created_at'")
    with pytest.raises(ConversionRefused) as refused:
        _online(config, pg, "upgrade")
    assert message in str(refused.value)
    assert "adv_orders.customer_id" in str(refused.value)
    assert _schema(pg) == schema
    assert _version(pg) == "pk0000"


def test_writers_moving_and_deleting_references_throughout_lose_nothing(
    pg: Engine, tmp_path: Path
) -> None:
    """Two writers change foreign keys in a loop: each row keeps the last one it got.

    Each statement locks adv_orders, then checks its customer: the swap,
    locking the referencing table first, takes its locks between them.
    """
    _run(
        pg,
        "CREATE TABLE adv_customers (id serial PRIMARY KEY, created_at timestamptz NOT NULL, "
        "referrer_id int REFERENCES adv_customers)",
        "INSERT INTO adv_customers (created_at, referrer_id) SELECT timestamptz '2024-01-01' "
        "+ (g / 3) * interval '1 ms', NULLIF(g - 1, 0) FROM generate_series(1, 20000) AS g",
        "CREATE TABLE adv_orders (id int PRIMARY KEY, customer_id int NOT NULL "
        "REFERENCES adv_customers)",
        "INSERT INTO adv_orders SELECT g, 1 + g %% 20000 FROM generate_series(1, 10000) AS g",
    )
    config = _project(
        tmp_path, pg, table="adv_customers", up="from_time='created_at', batch_size=2000"
    )
    up = _script(config, "upgrade")
    wanted: dict[int, int | None] = {}  # order id -> the customer it got last (None: deleted)
    picks = [random.Random(seed) for seed in (1, 2)]

    def autocommit(conn: sa.Connection, n: int) -> None:
        # The driver's own cursor: as fast as an application's loop.
        conn.connection.driver_connection.autocommit = True  # type: ignore[union-attr]

    def write(conn: sa.Connection, n: int, i: int) -> None:
        pick, seed = picks[n], n + 1
        order = 2 * pick.randint(1, 5000) - seed % 2  # its own orders
        customer = pick.randint(1, 20000)
        cursor = conn.connection.cursor()
        if pick.random() < 0.75:
            cursor.execute(
                "UPDATE adv_orders SET customer_id = %s WHERE id = %s", (customer, order)
            )
            if cursor.rowcount:
                wanted[order] = customer
        else:
            cursor.execute("DELETE FROM adv_orders WHERE id = %s", (order,))
            wanted[order] = None

    # A writer ends once swapped: the column is a ULID now.
    ends = psycopg.errors.DatatypeMismatch
    with _writers.Loop(pg, 2, write, begin=autocommit, ends=ends, settle=0.2, join=30) as writers:
        log = _ok(pg, up)
    writers.check()
    assert "adv_customers done" in log
    assert len(wanted) > 100
    found = dict(
        _rows(
            pg,
            "SELECT o.id, c.legacy_id FROM adv_orders o JOIN adv_customers c "
            "ON c.id = o.customer_id",
        )
    )
    assert len(found) == len(_rows(pg, "SELECT id FROM adv_orders"))
    assert {order: found.get(order) for order in wanted} == wanted


# -- the session's settings: a role's or database's defaults ----------------------------------


def test_a_statement_timeout_of_the_role_does_not_cancel_the_phases(
    pg: Engine, tmp_path: Path
) -> None:
    """Each phase is one statement, however many batches it commits."""
    _run(
        pg,
        "CREATE TABLE adv_customers (id int PRIMARY KEY, created_at timestamptz NOT NULL)",
        "INSERT INTO adv_customers SELECT g, timestamptz '2024-01-01' + g * interval '1 ms' "
        "FROM generate_series(1, 50000) AS g",
        "CREATE TABLE adv_orders (id int PRIMARY KEY, customer_id int NOT NULL "
        "REFERENCES adv_customers)",
        "INSERT INTO adv_orders SELECT g, 1 + g %% 50000 FROM generate_series(1, 50000) AS g",
    )
    config = _project(
        tmp_path, pg, table="adv_customers", up="from_time='created_at', batch_size=5000"
    )
    done = _clients.psql(
        pg, _script(config, "upgrade"), app=APP, env={"PGOPTIONS": "-c statement_timeout=20ms"}
    )
    assert done.returncode == 0, done.stderr
    assert "adv_customers done" in done.stderr
    assert _version(pg) == "pk0001"


def test_a_repeatable_read_default_does_not_fail_a_batch_that_waited_for_a_writer(
    pg: Engine, tmp_path: Path
) -> None:
    _run(
        pg,
        *_CUSTOMERS,
        "CREATE TABLE adv_orders (id int PRIMARY KEY, customer_id bigint NOT NULL "
        "REFERENCES adv_customers)",
        "INSERT INTO adv_orders SELECT g, 1 + g %% 12 FROM generate_series(1, 20) AS g",
    )
    config = _project(
        tmp_path, pg, table="adv_customers", up="from_time='created_at', lock_timeout=5"
    )
    up = _script(config, "upgrade")
    _ok(pg, up[: up.index("-- Phase 2:")])
    writer = pg.connect()
    try:
        writer.exec_driver_sql("UPDATE adv_customers SET name = 'c7!' WHERE name = 'c7'")

        # Once the batch waits for the writer's row.
        committer = Release(pg, writer.commit, application=APP, bound=20)
        try:
            options = "-c default_transaction_isolation=repeatable\\ read"
            done = _clients.psql(pg, up, app=APP, env={"PGOPTIONS": options})
        finally:
            committer.join(timeout=30)
    finally:
        writer.close()
    assert committer.seen, "the script never waited for the row"
    assert done.returncode == 0, done.stderr
    assert _version(pg) == "pk0001"
    assert _rows(pg, "SELECT name FROM adv_customers WHERE legacy_id = 7") == [("c7!",)]
