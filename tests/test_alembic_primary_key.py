"""op.convert_primary_key_to_ulid and its reverse, through real Alembic commands.

A schema of four tables on PostgreSQL and MariaDB: customers (the key that
changes, with a nullable self-reference), accounts (whose primary key is
also a foreign key to customers), account events (a second level: they
reference accounts' key) and orders (a plain foreign key). Row counts and
the results of joins over every foreign key must be the same before, after
the upgrade, after the downgrade and after a second upgrade; a kill (or a
failing statement) at each phase boundary, of the upgrade and of the
downgrade, must leave a state the rerun finishes, and a second rerun must
do nothing.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.operations import Operations
from alembic.util import CommandError
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Engine

import _databases
import _offline_scripts
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _sessions import kill_session, session_id
from conftest import Backend, connection_env_py, private_engine, recording
from sqlalchemy_ulid import ULID
from sqlalchemy_ulid.alembic import ConversionRefused
from sqlalchemy_ulid.alembic._locks import LockTimeoutError
from sqlalchemy_ulid.alembic._primary_key._plan import STATE_TABLE

VERSION_TABLE = "alembic_version_pk_test"
TABLES = ("pk_account_events", "pk_orders", "pk_accounts", "pk_customers")
DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql")
BASE = datetime(2023, 3, 1, 8, 0, 0)

ENV_PY = connection_env_py(VERSION_TABLE)

REVISION = """
from alembic import op

revision = "pk0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.convert_primary_key_to_ulid("pk_customers", from_time="created_at", {extra})


def downgrade():
    op.restore_legacy_primary_key("pk_customers", {extra})
"""


class Interrupted(Exception):
    """The fault a hook raises in place of a statement."""


_drop = _databases.dropper(
    *TABLES, "pk_pairs", VERSION_TABLE, STATE_TABLE, views=["pk_customer_names"]
)


def _seed(engine: Engine) -> None:
    metadata = sa.MetaData()
    customers = sa.Table(
        "pk_customers",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("created_at", DATETIME, nullable=False),
        sa.Column("name", sa.String(20), nullable=False),
        sa.Column(
            "referrer_id",
            sa.Integer,
            sa.ForeignKey("pk_customers.id", name="fk_pk_customers_referrer"),
            nullable=True,
        ),
    )
    accounts = sa.Table(
        "pk_accounts",
        metadata,
        sa.Column(
            "customer_id",
            sa.Integer,
            sa.ForeignKey("pk_customers.id", name="fk_pk_accounts_customer", ondelete="CASCADE"),
            primary_key=True,
            autoincrement=False,
        ),
        sa.Column("plan", sa.String(20), nullable=False),
    )
    events = sa.Table(
        "pk_account_events",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "account_id",
            sa.Integer,
            sa.ForeignKey("pk_accounts.customer_id", name="fk_pk_events_account"),
            nullable=False,
            index=True,
        ),
        sa.Column("kind", sa.String(20), nullable=False),
    )
    orders = sa.Table(
        "pk_orders",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "customer_id",
            sa.Integer,
            sa.ForeignKey("pk_customers.id", name="fk_pk_orders_customer"),
            nullable=False,
        ),
        sa.Column("note", sa.String(20), nullable=False),
        sa.Index("ix_pk_orders_customer_note", "customer_id", "note"),
    )
    with engine.begin() as conn:
        metadata.create_all(conn)
        conn.execute(
            customers.insert(),
            [
                {
                    "id": i,
                    # ties: two customers per millisecond
                    "created_at": BASE + timedelta(milliseconds=i // 2),
                    "name": f"c{i}",
                    "referrer_id": None if i % 3 == 0 or i == 1 else i - 1,
                }
                for i in range(1, 31)
            ],
        )
        conn.execute(accounts.insert(), [{"customer_id": i, "plan": f"p{i}"} for i in range(1, 21)])
        conn.execute(
            events.insert(),
            [{"id": i, "account_id": 1 + i % 20, "kind": f"k{i}"} for i in range(1, 41)],
        )
        conn.execute(
            orders.insert(),
            [{"id": i, "customer_id": 1 + (i * 7) % 30, "note": f"o{i}"} for i in range(1, 51)],
        )


JOINS = {
    "counts": "SELECT (SELECT COUNT(*) FROM pk_customers), (SELECT COUNT(*) FROM pk_accounts), "
    "(SELECT COUNT(*) FROM pk_account_events), (SELECT COUNT(*) FROM pk_orders)",
    "referrers": "SELECT c.name, r.name FROM pk_customers c "
    "LEFT JOIN pk_customers r ON r.id = c.referrer_id",
    "events": "SELECT e.kind, a.plan, c.name FROM pk_account_events e "
    "JOIN pk_accounts a ON a.customer_id = e.account_id "
    "JOIN pk_customers c ON c.id = a.customer_id",
    "orders": "SELECT o.note, c.name, c.created_at FROM pk_orders o "
    "JOIN pk_customers c ON c.id = o.customer_id",
}


def _snapshot(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Row counts and every join's rows, without the key values themselves."""
    with engine.connect() as conn:
        return {
            name: sorted(tuple(row) for row in conn.exec_driver_sql(sql))
            for name, sql in JOINS.items()
        }


def _schema(engine: Engine) -> dict[str, Any]:
    with engine.connect() as conn:
        inspector = sa.inspect(conn)
        found: dict[str, Any] = {}
        for table in TABLES:
            found[table] = {
                "columns": sorted(
                    (c["name"], str(c["type"].compile(dialect=conn.dialect)), c["nullable"])
                    for c in inspector.get_columns(table)
                ),
                "pk": inspector.get_pk_constraint(table)["constrained_columns"],
                "fks": sorted(
                    (f["name"], tuple(f["constrained_columns"]), f["referred_table"])
                    for f in inspector.get_foreign_keys(table)
                ),
                "indexes": sorted(
                    (i["name"], tuple(i["column_names"]), bool(i["unique"]))
                    for i in inspector.get_indexes(table)
                ),
            }
        found["state"] = inspector.has_table(STATE_TABLE)
    return found


def _check_ulids(engine: Engine) -> None:
    """Each customer's id is a ULID dated from created_at; legacy_id the old id."""
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT id, legacy_id, created_at, name FROM pk_customers"
        ).all()
    assert len(rows) == 30
    for raw, legacy, created, name in rows:
        ulid = ULID.from_bytes(raw) if isinstance(raw, bytes) else ULID.from_uuid(raw)
        assert ulid.datetime == created.replace(tzinfo=timezone.utc)
        assert name == f"c{legacy}"
    ordered = sorted(rows, key=lambda r: r[1])
    ids = [r[0] if isinstance(r[0], bytes) else r[0].bytes for r in ordered]
    assert ids == sorted(ids), "new ids sort like the old keys (ties in key order)"


def _project(tmp_path: Path, extra: str = "") -> Config:
    return _offline_scripts.project(
        tmp_path, ENV_PY, {"pk0001_convert": REVISION.format(extra=extra)}
    )


def _alembic(config: Config, engine: Engine, action: str) -> None:
    with engine.connect() as conn:
        config.attributes["connection"] = conn
        if action == "upgrade":
            command.upgrade(config, "head")
        else:
            command.downgrade(config, "base")


def test_upgrade_downgrade_upgrade_keeps_every_join(server: Engine, tmp_path: Path) -> None:
    _seed(server)
    before = _snapshot(server)
    legacy_schema = _schema(server)
    config = _project(tmp_path)

    _alembic(config, server, "upgrade")
    assert _snapshot(server) == before
    converted = _schema(server)
    _check_ulids(server)
    assert converted["pk_customers"]["pk"] == ["id"]
    assert converted["pk_accounts"]["pk"] == ["customer_id"]
    for table in TABLES:  # every foreign key and index is back under its name
        assert converted[table]["fks"] == legacy_schema[table]["fks"], table
        assert {i[0] for i in legacy_schema[table]["indexes"]} <= {
            i[0] for i in converted[table]["indexes"]
        }
    assert not converted["state"]

    _alembic(config, server, "downgrade")
    assert _snapshot(server) == before
    assert _schema(server) == legacy_schema

    _alembic(config, server, "upgrade")
    assert _snapshot(server) == before
    assert _schema(server) == converted
    _check_ulids(server)


# -- kill and rerun --------------------------------------------------------------------


def _normal(statement: str) -> str:
    return " ".join(statement.split()).upper()


#: One boundary per phase: (pattern, take the first or the last match).
PHASES = [
    (r"INSERT INTO ULID_KEY_CONVERSIONS", "first"),  # the plan stored
    (r"ALTER TABLE \S+ ADD COLUMN", "first"),  # the shadow columns
    (r"UPDATE PK_CUSTOMERS(, \S+)? SET (PK_CUSTOMERS\.)?ID__ULID", "first"),  # the key's fill
    (r"UPDATE PK_CUSTOMERS(, \S+)? SET (PK_CUSTOMERS\.)?REFERRER_ID__ULID", "first"),
    (r"UPDATE PK_ACCOUNTS SET", "first"),  # the fills by a join, each level
    (r"UPDATE PK_ORDERS SET", "first"),
    (r"UPDATE PK_ACCOUNT_EVENTS SET", "first"),
    (r"LOCK TABLE", "first"),  # the swap (PostgreSQL)
    (r"ALTER TABLE \S+ DROP (CONSTRAINT|FOREIGN KEY)", "first"),
    (r"ALTER TABLE \S+ RENAME COLUMN", "first"),
    (r"ALTER TABLE \S+ ADD CONSTRAINT \S+ FOREIGN KEY", "last"),
    (r"INSERT INTO ALEMBIC_VERSION", "first"),  # the revision recorded
]


def _boundaries(statements: list[str], phases: list[tuple[str, str]] | None = None) -> list[str]:
    """The start of the statement that opens each phase (and a few swap steps).

    By text, not position: reflection does not send the same reads on
    every run.
    """
    found = []
    for pattern, which in PHASES if phases is None else phases:
        matches = [_normal(s) for s in statements if re.match(pattern, _normal(s))]
        if matches:
            found.append((matches[0] if which == "first" else matches[-1])[:90])
    return found


def _migrate(config: Config, action: str) -> None:
    if action == "upgrade":
        command.upgrade(config, "head")
    else:
        command.downgrade(config, "base")


def _interrupted_upgrade(
    engine: Engine, config: Config, at: str, kill: bool, action: str = "upgrade"
) -> None:
    session = [0]
    fired = [False]

    def hook(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not fired[0] and _normal(statement).startswith(at):
            fired[0] = True
            if kill:
                kill_session(engine, session[0])
            else:
                raise Interrupted(at)

    with engine.connect() as conn:
        session[0] = session_id(conn)
        config.attributes["connection"] = conn
        sa.event.listen(engine, "before_cursor_execute", hook)
        try:
            with pytest.raises(sa.exc.DBAPIError if kill else Interrupted):
                _migrate(config, action)
        finally:
            sa.event.remove(engine, "before_cursor_execute", hook)


@pytest.mark.parametrize("kill", [False, True], ids=["statement fails", "session killed"])
def test_interrupted_at_each_phase_then_rerun(server: Engine, tmp_path: Path, kill: bool) -> None:
    _seed(server)
    before = _snapshot(server)
    config = _project(tmp_path)
    with recording(server) as statements:
        _alembic(config, server, "upgrade")
    reference = _schema(server)
    boundaries = _boundaries(statements)
    assert len(boundaries) >= (12 if server.dialect.name == "postgresql" else 11), boundaries
    if not kill:
        # A failing statement is the same fault as a kill, but for the DDL
        # (the connection stays): at the DDL boundaries only, to stay quick.
        boundaries = [b for b in boundaries if b.startswith(("ALTER TABLE", "LOCK"))]

    for at in boundaries:
        _drop(server)
        _seed(server)
        _interrupted_upgrade(server, config, at, kill)
        if server.dialect.name == "postgresql" or not at.startswith("ALTER TABLE"):
            # On MariaDB each swap step commits: the tables are mid-swap
            # until the rerun. Elsewhere the joins are as they were.
            assert _snapshot(server) == before, f"joins changed after a fault at {at}"
        _alembic(config, server, "upgrade")  # the rerun finishes
        where = at
        assert _snapshot(server) == before, where
        assert _schema(server) == reference, where
        _check_ulids(server)
        with recording(server) as again:
            _alembic(config, server, "upgrade")  # already at head: nothing runs
        assert not [s for s in again if s.lstrip().upper().startswith(("ALTER", "UPDATE"))]


def _convert(engine: Engine, **options: Any) -> str | None:
    """The op from Python, in a migration transaction as env.py makes one."""
    with engine.connect() as conn:
        context = MigrationContext.configure(conn)
        with context.begin_transaction():
            return Operations(context).convert_primary_key_to_ulid("pk_customers", **options)


def test_a_second_run_of_the_op_is_a_no_op(server: Engine) -> None:
    _seed(server)
    _convert(server, from_time="created_at")
    schema = _schema(server)
    with recording(server) as statements:
        text = _convert(server, from_time="created_at")
    assert text is not None
    assert "already done" in text
    assert not [s for s in statements if s.lstrip().upper().startswith(("ALTER", "UPDATE"))]
    assert _schema(server) == schema


# -- dry run and refusals -------------------------------------------------------------------


def test_dry_run_names_the_plan_and_changes_nothing(server: Engine, tmp_path: Path) -> None:
    _seed(server)
    schema = _schema(server)
    with recording(server) as statements:
        text = _convert(server, from_time="created_at", dry_run=True)
    assert text is not None
    for line in (
        "pk_customers: 30 rows",
        "pk_accounts: 20 rows",
        "pk_account_events: 40 rows",
        "pk_orders: 50 rows",
        "pk_customers.referrer_id",
        "pk_account_events.account_id",
        "foreign key fk_pk_orders_customer",
        "index ix_pk_orders_customer_note",
        "swap",
    ):
        assert line in text, line
    reads = ("SELECT", "SHOW", "WITH", "DESCRIBE")
    assert not [s for s in statements if not s.lstrip().upper().startswith(reads)]
    assert _schema(server) == schema

    # The real command line: the plan is printed and the revision not recorded.
    revision = REVISION.format(extra="dry_run=True")
    ini = _offline_scripts.project(
        tmp_path, _CLI_ENV, {"pk0001_convert": revision}, ini=_CLI_LOGGING
    ).config_file_name
    assert ini is not None
    url = server.url.render_as_string(hide_password=False)
    result = subprocess.run(
        [sys.executable, "-m", "alembic", "-c", ini, "-x", f"url={url}", "upgrade", "head"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "dry run, nothing was changed" in result.stderr + result.stdout
    assert "pk_orders: 50 rows" in result.stderr + result.stdout
    assert _schema(server) == schema
    with server.connect() as conn:
        assert (
            not sa.inspect(conn).has_table(VERSION_TABLE)
            or not conn.exec_driver_sql(f"SELECT * FROM {VERSION_TABLE}").all()
        )


#: ``alembic.ini``'s logging, as ``alembic init`` writes it: the op's plan is printed.
_CLI_LOGGING = """
[loggers]
keys = root,alembic
[handlers]
keys = console
[formatters]
keys = generic
[logger_root]
level = WARNING
handlers = console
[logger_alembic]
level = INFO
handlers =
qualname = alembic
[handler_console]
class = StreamHandler
args = (sys.stderr,)
formatter = generic
[formatter_generic]
format = %%(levelname)s %%(message)s
"""

_CLI_ENV = f"""
import sqlalchemy as sa
from logging.config import fileConfig
from alembic import context
import sqlalchemy_ulid.alembic

fileConfig(context.config.config_file_name)
url = context.get_x_argument(as_dictionary=True)["url"]
with sa.create_engine(url, poolclass=sa.pool.NullPool).connect() as connection:
    context.configure(connection=connection, version_table={VERSION_TABLE!r})
    with context.begin_transaction():
        context.run_migrations()
"""


def _refused(engine: Engine, table: str = "pk_customers") -> str:
    schema = _schema(engine)
    with engine.connect() as conn:
        ops = Operations(MigrationContext.configure(conn))
        with pytest.raises(ConversionRefused) as info:
            ops.convert_primary_key_to_ulid(table)
    assert _schema(engine) == schema
    return str(info.value)


def test_refuses_a_legacy_id_column_that_is_already_there(server: Engine) -> None:
    _seed(server)
    with server.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE pk_customers ADD COLUMN legacy_id INTEGER NULL")
    assert "already has a column 'legacy_id'" in _refused(server)


def test_refuses_a_composite_key(server: Engine) -> None:
    _seed(server)
    with server.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE pk_pairs (a INTEGER NOT NULL, b INTEGER NOT NULL, PRIMARY KEY (a, b))"
        )
    assert "composite primary key (a, b)" in _refused(server, "pk_pairs")


def test_refuses_a_view_and_names_it(server: Engine) -> None:
    _seed(server)
    with server.begin() as conn:
        conn.exec_driver_sql("CREATE VIEW pk_customer_names AS SELECT id, name FROM pk_customers")
    assert "pk_customer_names (on pk_customers)" in _refused(server)


def test_refuses_a_trigger_and_names_it(server: Engine) -> None:
    _seed(server)
    with server.begin() as conn:
        if server.dialect.name == "postgresql":
            conn.exec_driver_sql(
                "CREATE FUNCTION pk_touch() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RETURN NEW; END $$"
            )
            conn.exec_driver_sql(
                "CREATE TRIGGER pk_orders_touch BEFORE UPDATE ON pk_orders "
                "FOR EACH ROW EXECUTE FUNCTION pk_touch()"
            )
        else:
            conn.exec_driver_sql(
                "CREATE TRIGGER pk_orders_touch BEFORE UPDATE ON pk_orders "
                "FOR EACH ROW SET NEW.note = NEW.note"
            )
    try:
        assert "pk_orders_touch (on pk_orders)" in _refused(server)
    finally:
        with server.begin() as conn:
            conn.exec_driver_sql(
                "DROP TRIGGER IF EXISTS pk_orders_touch"
                + (" ON pk_orders" if server.dialect.name == "postgresql" else "")
            )
            if server.dialect.name == "postgresql":
                conn.exec_driver_sql("DROP FUNCTION IF EXISTS pk_touch()")


def test_refuses_offline_mode_and_sqlite(engine: Engine, backend: Backend) -> None:
    if backend.name == "postgresql":
        # Offline on PostgreSQL: a script (test_alembic_primary_key_offline_postgresql);
        # a dry run needs the database.
        context = MigrationContext.configure(
            dialect_name=engine.dialect.name, opts={"as_sql": True}
        )
        with pytest.raises(CommandError, match="needs a database"):
            Operations(context).convert_primary_key_to_ulid("pk_customers", dry_run=True)
        return
    if backend.name != "sqlite":
        context = MigrationContext.configure(
            dialect_name=engine.dialect.name, opts={"as_sql": True}
        )
        # MariaDB writes a script offline (test_alembic_primary_key_offline_mariadb);
        # a dry run there cannot be written.
        options = {"dry_run": True} if backend.name == "mysql" else {}
        with pytest.raises(CommandError, match="offline"):
            Operations(context).convert_primary_key_to_ulid("pk_customers", **options)
        return
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE pk_lonely (id INTEGER PRIMARY KEY)")
        try:
            with pytest.raises(ConversionRefused, match="not sqlite"):
                Operations(MigrationContext.configure(conn)).convert_primary_key_to_ulid(
                    "pk_lonely"
                )
        finally:
            conn.exec_driver_sql("DROP TABLE pk_lonely")


# -- ids from now, UUID keys, lock timeouts ----------------------------------------------


def test_ids_from_now_follow_the_old_key_order(server: Engine) -> None:
    _seed(server)
    before = _snapshot(server)
    start = datetime.now(timezone.utc) - timedelta(seconds=1)
    _convert(server)
    assert _snapshot(server) == before
    with server.connect() as conn:
        rows = conn.exec_driver_sql("SELECT legacy_id, id FROM pk_customers").all()
    ulids = [
        (legacy, ULID.from_bytes(raw) if isinstance(raw, bytes) else ULID.from_uuid(raw))
        for legacy, raw in rows
    ]
    assert all(start <= u.datetime <= datetime.now(timezone.utc) for _, u in ulids)
    by_legacy = [u for _, u in sorted(ulids, key=lambda pair: pair[0])]
    assert by_legacy == sorted(by_legacy)


def test_a_uuid_key(server: Engine) -> None:
    """A native UUID key converts; a UUID kept as text is refused."""
    metadata = sa.MetaData()
    tokens = sa.Table(
        "pk_customers",  # dropped by the fixture
        metadata,
        sa.Column("id", sa.Uuid, primary_key=True),
        sa.Column("created_at", DATETIME, nullable=False),
        sa.Column("name", sa.String(20), nullable=False),
    )
    uses = sa.Table(
        "pk_orders",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("customer_id", sa.Uuid, sa.ForeignKey("pk_customers.id"), nullable=True),
        sa.Column("note", sa.String(20), nullable=False),
    )
    keys = [uuid.uuid4() for _ in range(10)]
    with server.begin() as conn:
        metadata.create_all(conn)
        conn.execute(
            tokens.insert(),
            [{"id": k, "created_at": BASE, "name": f"c{i}"} for i, k in enumerate(keys)],
        )
        conn.execute(
            uses.insert(),
            [
                {"id": i, "customer_id": keys[i % 10] if i % 3 else None, "note": f"o{i}"}
                for i in range(1, 21)
            ],
        )
    query = (
        "SELECT o.note, c.name FROM pk_orders o LEFT JOIN pk_customers c ON c.id = o.customer_id"
    )
    with server.connect() as conn:
        before = sorted(tuple(r) for r in conn.exec_driver_sql(query))
    with server.connect() as conn:
        key_type = sa.inspect(conn).get_columns("pk_customers")[0]["type"]
    if not isinstance(key_type, sa.Uuid):
        # Stored as text (sa.Uuid on MariaDB before SQLAlchemy 2.1 is CHAR(32)).
        schema = _schema_of(server, "pk_customers")
        with pytest.raises(ConversionRefused, match="only integer and UUID"):
            _convert(server, from_time="created_at")
        assert _schema_of(server, "pk_customers") == schema
        return
    _convert(server, from_time="created_at")
    with server.connect() as conn:
        assert sorted(tuple(r) for r in conn.exec_driver_sql(query)) == before
        legacy = {
            uuid.UUID(str(r[0])) for r in conn.exec_driver_sql("SELECT legacy_id FROM pk_customers")
        }
        ids = [
            ULID.from_bytes(r[0]) if isinstance(r[0], bytes) else ULID.from_uuid(r[0])
            for r in conn.exec_driver_sql("SELECT id FROM pk_customers")
        ]
    assert legacy == set(keys)
    assert all(u.datetime == BASE.replace(tzinfo=timezone.utc) for u in ids)


def _schema_of(engine: Engine, table: str) -> list[Any]:
    with engine.connect() as conn:
        return [(c["name"], str(c["type"])) for c in sa.inspect(conn).get_columns(table)]


def test_a_blocking_reader_makes_the_ddl_give_up_then_the_rerun_finishes(server: Engine) -> None:
    _seed(server)
    before = _snapshot(server)
    reader = server.connect()
    try:
        reader.exec_driver_sql("SELECT COUNT(*) FROM pk_orders").all()  # holds its lock
        started = time.monotonic()
        with pytest.raises(LockTimeoutError) as info:
            _convert(server, from_time="created_at", lock_timeout=0.2)
        assert time.monotonic() - started < 30
        assert "pk_orders" in str(info.value)
    finally:
        reader.rollback()
        reader.close()
    assert _snapshot(server) == before
    _convert(server, from_time="created_at", lock_timeout=0.2)
    assert _snapshot(server) == before
    _check_ulids(server)


def test_refuses_a_foreign_key_in_another_schema(backends: dict[str, Backend]) -> None:
    """PostgreSQL only: on MariaDB a schema is a database, and the suite has just its own."""
    backend = backends["postgresql"]
    assert backend.url is not None
    engine = sa.create_engine(backend.url, poolclass=sa.pool.NullPool)
    try:
        _drop(engine)
        _seed(engine)
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP SCHEMA IF EXISTS pk_elsewhere CASCADE")
            conn.exec_driver_sql("CREATE SCHEMA pk_elsewhere")
            conn.exec_driver_sql(
                "CREATE TABLE pk_elsewhere.invoices (id INTEGER PRIMARY KEY, customer_id INTEGER "
                "CONSTRAINT fk_invoices_customer REFERENCES public.pk_customers (id))"
            )
        message = _refused(engine)
        assert "fk_invoices_customer on pk_elsewhere.invoices" in message
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP SCHEMA IF EXISTS pk_elsewhere CASCADE")
        _drop(engine)
        engine.dispose()


def test_refuses_null_times_before_any_ddl(server: Engine) -> None:
    _seed(server)
    with server.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE pk_customers ADD COLUMN seen_at TIMESTAMP NULL")
        conn.exec_driver_sql("UPDATE pk_customers SET seen_at = created_at WHERE id > 3")
    schema = _schema(server)
    with recording(server) as statements, pytest.raises(ConversionRefused, match="NULL in 3"):
        _convert(server, from_time="seen_at")
    assert not [s for s in statements if s.lstrip().upper().startswith(("ALTER", "UPDATE"))]
    assert _schema(server) == schema


#: The downgrade's phases: shadows, fills by a join, the swap, the stamp.
DOWNGRADE_PHASES = [
    (r"ALTER TABLE \S+ ADD COLUMN", "first"),
    (r"UPDATE PK_ACCOUNTS(, \S+)? SET", "first"),
    (r"UPDATE PK_ACCOUNT_EVENTS(, \S+)? SET", "first"),
    (r"LOCK TABLE", "first"),
    (r"ALTER TABLE \S+ DROP (CONSTRAINT|FOREIGN KEY)", "first"),
    (r"ALTER TABLE PK_CUSTOMERS DROP COLUMN ID", "first"),
    (r"ALTER TABLE \S+ RENAME COLUMN", "last"),
    (r"ALTER TABLE \S+ ADD CONSTRAINT \S+ FOREIGN KEY", "last"),
    (r"DELETE FROM ALEMBIC_VERSION", "first"),
]


def test_downgrade_killed_at_each_phase_then_rerun(server: Engine, tmp_path: Path) -> None:
    _seed(server)
    before = _snapshot(server)
    legacy_schema = _schema(server)
    config = _project(tmp_path)
    _alembic(config, server, "upgrade")
    with recording(server) as statements:
        _alembic(config, server, "downgrade")
    assert _schema(server) == legacy_schema
    boundaries = _boundaries(statements, DOWNGRADE_PHASES)
    assert len(boundaries) >= (9 if server.dialect.name == "postgresql" else 8), boundaries
    for at in boundaries:
        _drop(server)
        _seed(server)
        _alembic(config, server, "upgrade")
        _interrupted_upgrade(server, config, at, kill=True, action="downgrade")
        _alembic(config, server, "downgrade")  # the rerun finishes
        assert _snapshot(server) == before, at
        assert _schema(server) == legacy_schema, at


@pytest.mark.parametrize(
    ("first", "bound"),
    [
        ("UPDATE pk_orders SET note = 'w' WHERE id = 1", 0.3),
        ("UPDATE pk_customers SET name = name WHERE id = 2", 0.9),
    ],
    ids=["child-then-parent", "parent-then-child"],
)
def test_a_writer_between_two_tables_is_not_the_swaps_deadlock_victim(
    backends: dict[str, Backend], first: str, bound: float
) -> None:
    """A writer holding one of the tables, then writing an order, while the swap locks.

    The swap locks the referencing tables before the key's table. A writer
    that has written pk_orders and then inserts an order (its foreign-key
    check reads pk_customers), the usual order of an application's writes,
    is waited for. Had the swap taken pk_customers first, the writer would
    wait for it while the swap waits for pk_orders: a deadlock, in which
    PostgreSQL cancels one of them. A writer that has written pk_customers
    first meets the swap holding pk_orders: once the swap holds a lock it
    waits for the next one less than the server's deadlock_timeout (1 s),
    then lets go of its locks and tries again, so the writer goes on.
    """
    with private_engine(backends["postgresql"], _drop) as pg:
        _seed(pg)
        with pg.connect() as conn:
            customer = conn.exec_driver_sql("SELECT min(id) FROM pk_customers").scalar()
        at_lock, held = threading.Event(), threading.Event()

        def before_the_lock(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if statement.lstrip().upper().startswith("LOCK TABLE") and not at_lock.is_set():
                at_lock.set()
                assert held.wait(10)

        outcome: list[BaseException | str] = []

        def migrate() -> None:
            try:
                _convert(pg, from_time="created_at", lock_timeout=5)
                outcome.append("done")
            except BaseException as exc:  # reported below
                outcome.append(exc)

        sa.event.listen(pg, "before_cursor_execute", before_the_lock)
        migration = threading.Thread(target=migrate)
        migration.start()
        writer = pg.connect()
        try:
            assert at_lock.wait(60)
            writer.exec_driver_sql(first)
            held.set()
            for _ in range(200):  # the swap now waits for pk_orders
                waiting = writer.exec_driver_sql(
                    "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE NOT l.granted AND l.pid <> pg_backend_pid() "
                    "AND a.datname = current_database()"
                ).scalar()
                if waiting:
                    break
                time.sleep(0.05)
            assert waiting, "the swap never waited for the writer"
            started = time.monotonic()
            writer.execute(
                sa.text(
                    "INSERT INTO pk_orders (id, customer_id, note) "
                    "SELECT max(id) + 1, :c, 'w2' FROM pk_orders"
                ),
                {"c": customer},
            )
            waited = time.monotonic() - started
            writer.commit()
        finally:
            writer.close()
            held.set()
            migration.join(60)
            sa.event.remove(pg, "before_cursor_execute", before_the_lock)
        assert outcome == ["done"], outcome
        assert waited < bound, waited
        _check_ulids(pg)
