"""op.convert_primary_key_to_ulid and its reverse offline (--sql), run by the mariadb client.

The script is written by a real ``alembic upgrade --sql`` (and ``downgrade
--sql``) and applied with the real ``mariadb`` client, as a user applies it,
to the schema of ``test_alembic_primary_key`` (four tables, a two-level
chain, a self-reference, a nullable foreign key). The schema it leaves must
be the one the online op leaves (``SHOW CREATE TABLE`` and reflection), the
joins the same; it must refuse what the online op refuses before any
change; a kill of its session at every step, or of the client inside the
fill, must leave a state the rerun finishes; and rows written by two writers
while it runs must all end with a ULID and every foreign key holding.
"""

from __future__ import annotations

import io
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.util import CommandError
from sqlalchemy.engine import Engine

import _clients
import _databases
import _offline_scripts
import _writers
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from conftest import Backend, private_engine
from sqlalchemy_ulid import ULID, new_ulid
from sqlalchemy_ulid.alembic import ConversionRefused
from sqlalchemy_ulid.alembic._primary_key._offline_mariadb_sql import STEPS_TABLE
from sqlalchemy_ulid.alembic._primary_key._plan import STATE_TABLE
from test_alembic_primary_key import TABLES, _check_ulids, _seed, _snapshot

VERSION_TABLE = "alembic_version_pk_offline"
ORDER_COMMENT = "who's ordering"

ENV_PY = f"""
from alembic import context
import sqlalchemy_ulid.alembic

if context.is_offline_mode():
    context.configure(
        url=context.config.get_main_option("sqlalchemy.url"), version_table={VERSION_TABLE!r}
    )
else:
    context.configure(
        connection=context.config.attributes["connection"], version_table={VERSION_TABLE!r}
    )
with context.begin_transaction():
    context.run_migrations()
"""


_drop = _databases.dropper(
    *(f"`{name}`" for name in ("pk_pairs", "pk_texts", *TABLES, "pk_regions")),
    *(f"`{name}`" for name in (VERSION_TABLE, STATE_TABLE, STEPS_TABLE)),
    views=["pk_customer_names"],
    triggers=["pk_orders_touch"],
)


@pytest.fixture
def maria(backends: dict[str, Backend]) -> Iterator[Engine]:
    """A private engine (no pool) on MariaDB, the test's tables dropped before and after."""
    with private_engine(backends["mysql"], _drop) as engine:
        yield engine


def _seed_commented(engine: Engine) -> None:
    """The shared schema, and a comment on a referencing column (carried by the swap)."""
    _seed(engine)
    literal = "'" + ORDER_COMMENT.replace("\\", "\\\\").replace("'", "''") + "'"
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"ALTER TABLE pk_orders MODIFY customer_id INT NOT NULL COMMENT {literal}"
        )


def _project(
    tmp_path: Path, engine: Engine, extra: str = "", table: str = "pk_customers"
) -> Config:
    down = ", ".join(p for p in extra.split(", ") if p.startswith(("legacy_id", "schema")))
    revisions = _offline_scripts.key_revisions(table, extra, down)
    return _offline_scripts.project(tmp_path, ENV_PY, revisions, engine=engine)


def _online(config: Config, engine: Engine, action: str, revision: str) -> None:
    with engine.connect() as conn:
        config.attributes["connection"] = conn
        if action == "upgrade":
            command.upgrade(config, revision)
        elif action == "downgrade":
            command.downgrade(config, revision)
        else:
            command.stamp(config, revision)
        conn.commit()


def _script(config: Config, action: str) -> str:
    """The ``--sql`` output from pk0000 to pk0001 (or back), as the CLI writes it."""
    buffer = io.StringIO()
    config.output_buffer = buffer
    try:
        if action == "upgrade":
            command.upgrade(config, "pk0000:pk0001", sql=True)
        else:
            command.downgrade(config, "pk0001:pk0000", sql=True)
    finally:
        config.output_buffer = None
    return buffer.getvalue()


def _applied(engine: Engine, script: str) -> str:
    done = _clients.mariadb(engine, script, "--unbuffered")
    assert done.returncode == 0, done.stderr + done.stdout[-2000:]
    return done.stdout


def _schema(engine: Engine) -> dict[str, Any]:
    """SHOW CREATE TABLE of each table, and what reflection reads, and the tables there."""
    with engine.connect() as conn:
        inspector = sa.inspect(conn)
        found: dict[str, Any] = {
            "tables": sorted(inspector.get_table_names()),
        }
        for table in TABLES:
            found[table] = {
                "create": conn.exec_driver_sql(f"SHOW CREATE TABLE {table}").one()[1],
                "columns": [
                    (
                        c["name"],
                        str(c["type"].compile(dialect=conn.dialect)),
                        c["nullable"],
                        c.get("default"),
                        c.get("comment"),
                        c.get("autoincrement"),
                    )
                    for c in inspector.get_columns(table)
                ],
                "pk": inspector.get_pk_constraint(table),
                "fks": sorted(
                    (
                        f["name"],
                        tuple(f["constrained_columns"]),
                        f["referred_table"],
                        tuple(f["referred_columns"]),
                        tuple(sorted(f["options"].items())),
                    )
                    for f in inspector.get_foreign_keys(table)
                ),
                "indexes": sorted(
                    (i["name"], tuple(i["column_names"]), bool(i["unique"]))
                    for i in inspector.get_indexes(table)
                ),
                "unique": sorted(
                    (u["name"], tuple(u["column_names"]))
                    for u in inspector.get_unique_constraints(table)
                ),
            }
    return found


def _version(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return [r[0] for r in conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}")]


def _fresh(engine: Engine, config: Config) -> None:
    _drop(engine)
    _seed_commented(engine)
    _online(config, engine, "stamp", "pk0000")


# -- the round trip, against the online op ---------------------------------------------------


def test_upgrade_downgrade_upgrade_as_online(maria: Engine, tmp_path: Path) -> None:
    config = _project(tmp_path, maria, extra="from_time='created_at'")
    _fresh(maria, config)
    before = _snapshot(maria)
    _online(config, maria, "upgrade", "pk0001")
    online_up = _schema(maria)
    _online(config, maria, "downgrade", "pk0000")
    online_down = _schema(maria)
    assert ORDER_COMMENT in [c[4] for c in online_up["pk_orders"]["columns"]]

    upgrade, downgrade = _script(config, "upgrade"), _script(config, "downgrade")
    assert "BEGIN NOT ATOMIC" in upgrade
    assert "SET SESSION lock_wait_timeout = 1;" in upgrade  # lock_timeout's default
    _fresh(maria, config)
    out = _applied(maria, upgrade)
    assert "convert_primary_key_to_ulid: pk_customers done" in out
    assert _snapshot(maria) == before
    assert _schema(maria) == online_up
    _check_ulids(maria)
    assert _version(maria) == ["pk0001"]
    with maria.connect() as conn:
        ids = dict(conn.exec_driver_sql("SELECT legacy_id, id FROM pk_customers").all())

    again = _applied(maria, upgrade)  # after success: nothing to do
    assert "pk_customers is already done" in again
    assert "swap" not in again
    assert _schema(maria) == online_up
    with maria.connect() as conn:
        assert dict(conn.exec_driver_sql("SELECT legacy_id, id FROM pk_customers").all()) == ids

    _applied(maria, downgrade)
    assert _snapshot(maria) == before
    assert _schema(maria) == online_down
    assert _version(maria) == ["pk0000"]
    assert "is already done" in _applied(maria, downgrade)
    assert _schema(maria) == online_down

    _applied(maria, upgrade)
    assert _snapshot(maria) == before
    assert _schema(maria) == online_up
    _check_ulids(maria)


def test_ids_from_now_follow_the_old_key_order(maria: Engine, tmp_path: Path) -> None:
    # batch_size=7: the 30 keys in five batches, each a later millisecond.
    config = _project(tmp_path, maria, extra="batch_size=7")
    _fresh(maria, config)
    before = _snapshot(maria)
    start = datetime.now(timezone.utc) - timedelta(seconds=1)
    out = _applied(maria, _script(config, "upgrade"))
    assert out.count("rows filled") >= 5
    assert _snapshot(maria) == before
    with maria.connect() as conn:
        rows = conn.exec_driver_sql("SELECT legacy_id, id FROM pk_customers ORDER BY legacy_id")
        ulids = [ULID.from_bytes(raw) for _, raw in rows]
    assert ulids == sorted(ulids)
    assert len(set(ulids)) == 30
    assert all(start <= u.datetime <= datetime.now(timezone.utc) for u in ulids)


def test_ties_count_up_across_batches(maria: Engine, tmp_path: Path) -> None:
    # Two customers a millisecond, two rows a batch: every millisecond but the
    # first is split between two batches. Its second row must still sort after
    # its first, as online, where ties count up over the whole table.
    config = _project(tmp_path, maria, extra="from_time='created_at', batch_size=2")
    _fresh(maria, config)
    _applied(maria, _script(config, "upgrade"))
    _check_ulids(maria)
    with maria.connect() as conn:
        ties = [
            int.from_bytes(raw[6:8], "big")
            for raw in conn.exec_driver_sql(
                "SELECT id FROM pk_customers ORDER BY legacy_id"
            ).scalars()
        ]
    assert ties == [1] + [1, 2] * 14 + [1]


# -- refusals: before any change, naming what was found ---------------------------------------


def _refused(maria: Engine, config: Config, message: str) -> None:
    schema = _schema(maria)
    snapshot = _snapshot(maria)
    done = _clients.mariadb(maria, _script(config, "upgrade"), "--unbuffered")
    assert done.returncode != 0
    assert message in done.stderr, done.stderr
    assert "ERROR 1644 (45000)" in done.stderr  # our SIGNAL, not a failed statement
    assert _schema(maria) == schema
    assert _snapshot(maria) == snapshot
    assert _version(maria) == ["pk0000"]


REFUSALS = [
    # The key column holds text.
    ("CREATE TABLE pk_texts (id VARCHAR(10) PRIMARY KEY)", "pk_texts", "",
     "pk_texts.id is varchar(10): only integer and UUID primary keys"),
    # A composite key.
    ("CREATE TABLE pk_pairs (a INT NOT NULL, b INT NOT NULL, PRIMARY KEY (a, b))", "pk_pairs", "",
     "pk_pairs has a composite primary key (a, b)"),
    # legacy_id is taken.
    ("ALTER TABLE pk_customers ADD COLUMN legacy_id INT NULL", "pk_customers", "",
     "pk_customers already has a column 'legacy_id' (legacy_id=)"),
    # from_time names no column, or one that cannot date ids, or NULL, or before 1970.
    ("DO 0", "pk_customers", "from_time='nope'", "pk_customers has no column 'nope' (from_time=)"),
    ("ALTER TABLE pk_customers ADD COLUMN born DATE NULL", "pk_customers", "from_time='born'",
     "pk_customers.born is date, not a DATETIME, TIMESTAMP or integer"),
    ("ALTER TABLE pk_customers ADD COLUMN seen_at DATETIME NULL; "
     "UPDATE pk_customers SET seen_at = created_at WHERE id > 3", "pk_customers",
     "from_time='seen_at'", "pk_customers.seen_at is NULL in 3 rows"),
    ("UPDATE pk_customers SET created_at = '1969-12-31 23:59:59' WHERE id = 7", "pk_customers",
     "from_time='created_at'", "pk_customers.created_at of id = 7 is 1969-12-31 23:59:59"),
    ("ALTER TABLE pk_customers ADD COLUMN ms BIGINT NULL; UPDATE pk_customers SET ms = "
     "1700000000000; UPDATE pk_customers SET ms = 281474976710656 WHERE id = 9", "pk_customers",
     "from_time='ms'", "pk_customers.ms of id = 9 is 281474976710656: outside the ULID range"),
    # More rows in one millisecond than the script can number.
    ("INSERT INTO pk_customers (id, created_at, name) SELECT seq + 100, '2023-03-01 08:00:00', "
     "'x' FROM seq_1_to_65536", "pk_customers", "from_time='created_at'",
     "65537 rows of pk_customers.created_at are the millisecond 1677657600000"),
    # A composite foreign key to the key.
    ("ALTER TABLE pk_customers ADD UNIQUE KEY uq_id_name (id, name); "
     "CREATE TABLE pk_pairs (a INT, b VARCHAR(20), CONSTRAINT fk_pairs FOREIGN KEY (a, b) "
     "REFERENCES pk_customers (id, name))", "pk_customers", "",
     "the composite foreign key fk_pairs on pk_pairs references pk_customers"),
    # A trigger, a view.
    ("CREATE TRIGGER pk_orders_touch BEFORE UPDATE ON pk_orders FOR EACH ROW "
     "SET NEW.note = NEW.note", "pk_customers", "", "pk_orders_touch (on pk_orders)"),
    ("CREATE VIEW pk_customer_names AS SELECT id, name FROM pk_customers", "pk_customers", "",
     "pk_customer_names (on pk_customers)"),
    # A column named like a shadow the op adds.
    ("ALTER TABLE pk_orders ADD COLUMN customer_id__ulid BINARY(16) NULL", "pk_customers", "",
     "pk_orders already has a column customer_id__ulid"),
    # A descending index on a referencing column.
    ("CREATE INDEX ix_pk_orders_desc ON pk_orders (customer_id DESC)", "pk_customers", "",
     "the index ix_pk_orders_desc on pk_orders uses pk_orders.customer_id"),
    # An unfinished online conversion of the table.
    (f"CREATE TABLE {STATE_TABLE} (name VARCHAR(190) PRIMARY KEY, plan TEXT NOT NULL, "
     f"done TEXT NOT NULL); INSERT INTO {STATE_TABLE} VALUES ('pk_customers', '{{}}', '[]')",
     "pk_customers", "", "an unfinished online conversion of pk_customers"),
    # An unfinished offline downgrade of the table.
    (f"CREATE TABLE {STEPS_TABLE} (name VARCHAR(190) NOT NULL, seq INT NOT NULL, label TEXT, "
     f"body LONGTEXT, done TINYINT, PRIMARY KEY (name, seq)); INSERT INTO {STEPS_TABLE} "
     "VALUES ('pk_customers', 0, 'plan', 'legacy', 1)", "pk_customers", "",
     f"an unfinished legacy conversion of pk_customers is in {STEPS_TABLE}"),
    # No such table.
    ("DO 0", "pk_nothing", "", "there is no table pk_nothing"),
]  # fmt: skip


@pytest.mark.parametrize(("setup", "table", "extra", "message"), REFUSALS)
def test_refuses_before_any_change(
    maria: Engine, tmp_path: Path, setup: str, table: str, extra: str, message: str
) -> None:
    config = _project(tmp_path, maria, extra=extra, table=table)
    _fresh(maria, config)
    with maria.begin() as conn:
        for statement in setup.split("; "):
            conn.exec_driver_sql(statement)
    _refused(maria, config, message)


#: What the swap's DROP COLUMN would take with a referencing column: (setup, what is named).
TAKEN = [
    # A DEFAULT on a referencing column (dropped with it, without a word).
    ("ALTER TABLE pk_orders ALTER customer_id SET DEFAULT 1", "its DEFAULT"),
    # A foreign key from a referencing column to a table whose key does not change.
    ("CREATE TABLE pk_regions (id INT PRIMARY KEY); "
     "INSERT INTO pk_regions SELECT seq FROM seq_1_to_30; "
     "ALTER TABLE pk_orders ADD CONSTRAINT fk_pk_orders_region FOREIGN KEY (customer_id) "
     "REFERENCES pk_regions (id)",
     "the foreign key fk_pk_orders_region on pk_orders references pk_regions, which this op "
     "does not convert"),
    # Generated columns computed from a referencing column (DROP COLUMN failed halfway, 1054).
    ("ALTER TABLE pk_orders ADD COLUMN k2 VARCHAR(40) AS (CONCAT('k', customer_id)) PERSISTENT, "
     "ADD COLUMN K1 VARCHAR(40) AS (customer_id + 1) VIRTUAL, ADD KEY ix_pk_orders_k1 (K1)",
     "the generated column K1, the generated column k2"),
    # CHECK constraints naming a referencing column (dropped with it without a word, or
    # DROP COLUMN failed halfway, 1054), one of them written on the column.
    ("ALTER TABLE pk_orders ADD COLUMN lo INT NULL, ADD CONSTRAINT ck_pk_orders_lo "
     "CHECK (lo < customer_id), MODIFY customer_id INT NOT NULL CHECK (customer_id > 0)",
     "the CHECK constraint ck_pk_orders_lo, the CHECK constraint customer_id"),
]  # fmt: skip


@pytest.mark.parametrize("mode", ["offline", "online"])
@pytest.mark.parametrize(
    ("setup", "message"), TAKEN, ids=["default", "other fk", "generated", "check"]
)
def test_refuses_what_drop_column_would_take(
    maria: Engine, tmp_path: Path, mode: str, setup: str, message: str
) -> None:
    """Offline and online alike: named, before any change."""
    config = _project(tmp_path, maria, extra="from_time='created_at'")
    _fresh(maria, config)
    with maria.begin() as conn:
        for statement in setup.split("; "):
            conn.exec_driver_sql(statement)
    whole = f"pk_orders.customer_id is used by {message}: the swap drops the old column"
    if mode == "offline":
        _refused(maria, config, whole)
        return
    schema, snapshot = _schema(maria), _snapshot(maria)
    with pytest.raises(ConversionRefused) as refused:
        _online(config, maria, "upgrade", "pk0001")
    assert whole in str(refused.value)
    assert _schema(maria) == schema
    assert _snapshot(maria) == snapshot
    assert _version(maria) == ["pk0000"]


def test_the_downgrade_refuses_them_too(maria: Engine, tmp_path: Path) -> None:
    """Restoring, a DEFAULT on a converted referencing column is refused alike."""
    config = _project(tmp_path, maria, extra="from_time='created_at'")
    _fresh(maria, config)
    _applied(maria, _script(config, "upgrade"))
    with maria.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE pk_orders ALTER customer_id SET DEFAULT 'x'")
    schema, snapshot = _schema(maria), _snapshot(maria)
    whole = "pk_orders.customer_id is used by its DEFAULT: the swap drops the old column"
    done = _clients.mariadb(maria, _script(config, "downgrade"), "--unbuffered")
    assert done.returncode != 0
    assert whole in done.stderr, done.stderr
    assert "ERROR 1644 (45000)" in done.stderr
    with pytest.raises(ConversionRefused, match=whole):
        _online(config, maria, "downgrade", "pk0000")
    assert _schema(maria) == schema
    assert _snapshot(maria) == snapshot
    assert _version(maria) == ["pk0001"]


#: A comment with backslashes, a quote and a percent sign, carried by the swap.
BACKSLASHED = "C:\\new\\table \\' 100% \\n"


@pytest.mark.parametrize("mode", ["offline", "online"])
def test_a_comment_with_backslashes_is_kept(maria: Engine, tmp_path: Path, mode: str) -> None:
    config = _project(tmp_path, maria, extra="from_time='created_at'")
    _fresh(maria, config)
    with maria.begin() as conn:
        # The server's own quoting (QUOTE()): no client-side escaping to trust.
        literal = conn.execute(sa.text("SELECT QUOTE(:c)"), {"c": BACKSLASHED}).scalar_one()
        conn.exec_driver_sql(
            "ALTER TABLE pk_orders MODIFY customer_id INT NOT NULL COMMENT "
            + literal.replace("%", "%%")
        )
    comment = (
        "SELECT COLUMN_COMMENT FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = 'pk_orders' AND COLUMN_NAME = 'customer_id'"
    )
    with maria.connect() as conn:
        assert conn.exec_driver_sql(comment).scalar_one() == BACKSLASHED
    if mode == "offline":
        _applied(maria, _script(config, "upgrade"))
    else:
        _online(config, maria, "upgrade", "pk0001")
    _check_ulids(maria)
    with maria.connect() as conn:
        assert conn.exec_driver_sql(comment).scalar_one() == BACKSLASHED


def test_the_online_op_refuses_a_table_the_script_is_converting(
    maria: Engine, tmp_path: Path
) -> None:
    config = _project(tmp_path, maria, extra="from_time='created_at'")
    _fresh(maria, config)
    script = _script(config, "upgrade")
    _applied(maria, _split(script)[0])  # the plan stored, nothing else
    with pytest.raises(ConversionRefused, match="unfinished offline"):
        _online(config, maria, "upgrade", "pk0001")
    _applied(maria, script)
    _check_ulids(maria)


def test_tables_in_another_schema(maria: Engine, tmp_path: Path) -> None:
    """schema=: the script runs from the migration's database on another one's tables."""
    other = f"{maria.url.database}_elsewhere"
    with maria.begin() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{other}`")
        conn.exec_driver_sql(f"CREATE DATABASE `{other}`")
    elsewhere = sa.create_engine(maria.url.set(database=other), poolclass=sa.pool.NullPool)
    try:
        _seed(elsewhere)
        before = _snapshot(elsewhere)
        config = _project(tmp_path, maria, extra=f"from_time='created_at', schema={other!r}")
        _online(config, maria, "stamp", "pk0000")
        upgrade, downgrade = _script(config, "upgrade"), _script(config, "downgrade")
        _applied(maria, upgrade)
        assert _snapshot(elsewhere) == before
        _check_ulids(elsewhere)
        assert "already done" in _applied(maria, upgrade)
        _applied(maria, downgrade)
        assert _snapshot(elsewhere) == before
        with elsewhere.connect() as conn:
            names = {c["name"] for c in sa.inspect(conn).get_columns("pk_customers")}
            assert "legacy_id" not in names
            assert not sa.inspect(conn).has_table(STEPS_TABLE)
    finally:
        elsewhere.dispose()
        with maria.begin() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{other}`")


def test_a_lock_wait_is_bounded_and_the_rerun_finishes(maria: Engine, tmp_path: Path) -> None:
    config = _project(tmp_path, maria, extra="from_time='created_at'")  # lock_timeout: 1 s
    _fresh(maria, config)
    before = _snapshot(maria)
    script = _script(config, "upgrade")
    reader = maria.connect()
    try:
        reader.exec_driver_sql("SELECT COUNT(*) FROM pk_orders").all()  # holds its lock
        started = time.monotonic()
        done = _clients.mariadb(maria, script, "--unbuffered")
        elapsed = time.monotonic() - started
    finally:
        reader.rollback()
        reader.close()
    assert done.returncode != 0
    assert "a lock wait timed out 5 times at: add pk_orders.customer_id__ulid" in done.stderr
    assert elapsed < 30
    _applied(maria, script)
    assert _snapshot(maria) == before
    _check_ulids(maria)


def test_a_native_uuid_key(maria: Engine, tmp_path: Path) -> None:
    config = _project(tmp_path, maria)
    _fresh(maria, config)
    with maria.begin() as conn:
        for table in TABLES:
            conn.exec_driver_sql(f"DROP TABLE {table}")
        conn.exec_driver_sql(
            "CREATE TABLE pk_customers (id UUID PRIMARY KEY, created_at DATETIME(6) NOT NULL, "
            "name VARCHAR(20) NOT NULL)"
        )
        conn.exec_driver_sql(
            "CREATE TABLE pk_orders (id INT AUTO_INCREMENT PRIMARY KEY, customer_id UUID NULL, "
            "note VARCHAR(20) NOT NULL, CONSTRAINT fk_pk_orders_customer FOREIGN KEY "
            "(customer_id) REFERENCES pk_customers (id))"
        )
        conn.exec_driver_sql(
            "INSERT INTO pk_customers SELECT UUID(), '2024-01-01', CONCAT('c', seq) FROM seq_1_to_9"
        )
        conn.exec_driver_sql(
            "INSERT INTO pk_orders (customer_id, note) SELECT IF(seq %% 3, id, NULL), "
            "CONCAT('o', seq) FROM seq_1_to_9 JOIN pk_customers ON name = CONCAT('c', seq)"
        )
    query = (
        "SELECT o.note, c.name FROM pk_orders o LEFT JOIN pk_customers c ON c.id = o.customer_id"
    )
    with maria.connect() as conn:
        before = sorted(tuple(r) for r in conn.exec_driver_sql(query))
        keys = sorted(str(r[0]) for r in conn.exec_driver_sql("SELECT id FROM pk_customers"))
    _applied(maria, _script(config, "upgrade"))
    with maria.connect() as conn:
        assert sorted(tuple(r) for r in conn.exec_driver_sql(query)) == before
        rows = conn.exec_driver_sql("SELECT legacy_id, id FROM pk_customers ORDER BY legacy_id")
        pairs = [(str(legacy), ULID.from_bytes(raw)) for legacy, raw in rows]
    assert [legacy for legacy, _ in pairs] == keys
    assert [u for _, u in pairs] == sorted(u for _, u in pairs)  # in the old keys' order
    _applied(maria, _script(config, "downgrade"))
    with maria.connect() as conn:
        assert sorted(tuple(r) for r in conn.exec_driver_sql(query)) == before
        restored = conn.exec_driver_sql("SELECT id FROM pk_customers").scalars()
        assert sorted(str(key) for key in restored) == keys


def test_refuses_a_foreign_key_from_another_database(maria: Engine, tmp_path: Path) -> None:
    other = f"{maria.url.database}_elsewhere"
    config = _project(tmp_path, maria)
    _fresh(maria, config)
    with maria.begin() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{other}`")
        conn.exec_driver_sql(f"CREATE DATABASE `{other}`")
        conn.exec_driver_sql(
            f"CREATE TABLE `{other}`.invoices (id INT PRIMARY KEY, customer_id INT, "
            f"CONSTRAINT fk_invoices_customer FOREIGN KEY (customer_id) "
            f"REFERENCES `{maria.url.database}`.pk_customers (id))"
        )
    try:
        _refused(maria, config, f"fk_invoices_customer on {other}.invoices")
    finally:
        with maria.begin() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{other}`")


@pytest.mark.parametrize("mode", ["offline", "online"])
def test_refuses_a_foreign_key_to_another_database(
    maria: Engine, tmp_path: Path, mode: str
) -> None:
    """A referencing column's foreign key to a same-named table elsewhere: the swap drops it."""
    other = f"{maria.url.database}_elsewhere"
    config = _project(tmp_path, maria, extra="from_time='created_at'")
    _fresh(maria, config)
    with maria.begin() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{other}`")
        conn.exec_driver_sql(f"CREATE DATABASE `{other}`")
        conn.exec_driver_sql(f"CREATE TABLE `{other}`.pk_customers (id INT PRIMARY KEY)")
        conn.exec_driver_sql(f"INSERT INTO `{other}`.pk_customers SELECT id FROM pk_customers")
        conn.exec_driver_sql(
            "ALTER TABLE pk_orders ADD CONSTRAINT fk_pk_orders_elsewhere FOREIGN KEY "
            f"(customer_id) REFERENCES `{other}`.pk_customers (id)"
        )
    whole = (
        "pk_orders.customer_id is used by the foreign key fk_pk_orders_elsewhere on pk_orders "
        "references pk_customers, which this op does not convert: the swap drops the old column"
    )
    try:
        if mode == "offline":
            _refused(maria, config, whole)
            return
        schema, snapshot = _schema(maria), _snapshot(maria)
        with pytest.raises(ConversionRefused) as refused:
            _online(config, maria, "upgrade", "pk0001")
        assert whole in str(refused.value)
        assert _schema(maria) == schema
        assert _snapshot(maria) == snapshot
        assert _version(maria) == ["pk0000"]
    finally:
        with maria.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE pk_orders DROP FOREIGN KEY fk_pk_orders_elsewhere")
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{other}`")


def test_ddl_on_same_named_tables_in_another_database_does_not_stop_the_script(
    maria: Engine, tmp_path: Path
) -> None:
    """The script reads information_schema holding its lock, which makes the server skip
    a table another session is changing (ERROR 1684) where it reads other databases: it
    reads only its own, and reads its plan again until nothing was skipped."""
    other = f"{maria.url.database}_churn"
    config = _project(tmp_path, maria, extra="from_time='created_at'")
    _fresh(maria, config)
    before = _snapshot(maria)
    with maria.begin() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{other}`")
        conn.exec_driver_sql(f"CREATE DATABASE `{other}`")

    def churn(conn: Any, n: int, i: int) -> None:  # another database's migrations, our names
        name = f"`{other}`.`{TABLES[i % len(TABLES)]}`"
        conn.exec_driver_sql(f"CREATE TABLE {name} (id INT PRIMARY KEY, n INT)")
        conn.exec_driver_sql(f"ALTER TABLE {name} ADD COLUMN m INT")
        conn.exec_driver_sql(f"DROP TABLE {name}")

    try:
        with _writers.Loop(maria, 1, churn, settle=0.0) as churning:
            for action in ("upgrade", "downgrade", "upgrade"):  # three plans read under churn
                done = _clients.mariadb(maria, _script(config, action), "--show-warnings")
                assert done.returncode == 0, done.stderr[-2000:]
                assert "1684" not in done.stdout + done.stderr  # no table skipped, even quietly
        churning.check()
        assert churning.done > 0
    finally:
        with maria.begin() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{other}`")
    assert _snapshot(maria) == before
    _check_ulids(maria)


@pytest.mark.parametrize(
    ("extra", "error", "message"),
    [
        ("dry_run=True", CommandError, "dry_run=True) in offline (--sql) mode"),
        ("from_time='created_at', timezone=__import__('zoneinfo').ZoneInfo('Europe/Paris')",
         CommandError, "reads naive times as UTC only"),
        ("fold=0", CommandError, "fold= has no meaning"),
        ("storage='text'", CommandError, "needs binary storage"),
        ("batch_size=70000", ValueError, "batch_size is at most 65535"),
    ],
)  # fmt: skip
def test_refused_while_the_script_is_written(
    maria: Engine, tmp_path: Path, extra: str, error: type[Exception], message: str
) -> None:
    config = _project(tmp_path, maria, extra=extra)
    buffer = io.StringIO()
    config.output_buffer = buffer
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        command.upgrade(config, "pk0000:pk0001", sql=True)
    assert "convert_primary_key_to_ulid" not in buffer.getvalue()


# -- kill and rerun ----------------------------------------------------------------------------


def _split(script: str) -> tuple[str, str]:
    """The script up to its plan (block 1), and the rest: the same text, cut in two."""
    cut = script.index("-- 2. Run the steps")
    return script[:cut], script[cut:]


def _steps(engine: Engine) -> list[tuple[int, str]]:
    with engine.connect() as conn:
        return [
            (int(seq), str(label))
            for seq, label in conn.exec_driver_sql(
                f"SELECT seq, label FROM {STEPS_TABLE} WHERE seq > 0 ORDER BY seq"
            )
        ]


def _boundaries(steps: list[tuple[int, str]]) -> list[int]:
    """Before the first step of each phase, each table's swap and the last foreign key; the end.

    (Each table's swap is one atomic ALTER TABLE; between them the tables are
    half swapped, the state a rerun must finish.)
    """
    chosen, kinds = [], set()
    for seq, label in steps:
        kind = label.split(" ")[0]
        if kind not in kinds or kind == "swap":
            chosen.append(seq - 5)
        kinds.add(kind)
    return [*chosen, steps[-1][0] - 5, steps[-1][0] + 5]


def _killed_at(engine: Engine, script: str, seq: int) -> None:
    """Run the script with a step that kills its own session at ``seq``; then take it out."""
    head, _ = _split(script)
    _applied(engine, head)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"INSERT INTO {STEPS_TABLE} (name, seq, label, body) "
            f"SELECT name, {seq}, 'the test kills the session', 'KILL CONNECTION_ID()' "
            f"FROM {STEPS_TABLE} WHERE seq = 0"
        )
    done = _clients.mariadb(engine, script, "--unbuffered")
    assert done.returncode != 0
    assert "Connection was killed" in done.stderr, done.stderr[-500:]
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DELETE FROM {STEPS_TABLE} WHERE seq = {seq}")


@pytest.mark.parametrize("action", ["upgrade", "downgrade"])
def test_session_killed_at_each_step_then_rerun(maria: Engine, tmp_path: Path, action: str) -> None:
    config = _project(tmp_path, maria, extra="from_time='created_at'")
    _fresh(maria, config)
    before = _snapshot(maria)
    upgrade, downgrade = _script(config, "upgrade"), _script(config, "downgrade")
    script = upgrade if action == "upgrade" else downgrade
    if action == "downgrade":
        _applied(maria, upgrade)
    _applied(maria, _split(script)[0])
    boundaries = _boundaries(_steps(maria))
    assert len(boundaries) >= (13 if action == "upgrade" else 12), boundaries
    _applied(maria, script)
    reference = _schema(maria)
    for seq in boundaries:
        _fresh(maria, config)
        if action == "downgrade":
            _applied(maria, upgrade)
        _killed_at(maria, script, seq)
        out = _applied(maria, script)  # the rerun finishes
        assert "done" in out, seq
        assert _snapshot(maria) == before, seq
        assert _schema(maria) == reference, seq
        assert _version(maria) == ["pk0001" if action == "upgrade" else "pk0000"]
        if action == "upgrade":
            _check_ulids(maria)
        assert "already done" in _applied(maria, script), seq


def _more_customers(engine: Engine, count: int) -> None:
    """Customers 31 to ``count``, one millisecond apart, each with an order."""
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO pk_customers (id, created_at, name) "
            "SELECT seq, TIMESTAMPADD(MICROSECOND, seq * 1000, '2023-03-02'), CONCAT('c', seq) "
            f"FROM seq_31_to_{count}"
        )
        conn.exec_driver_sql(
            "INSERT INTO pk_orders (customer_id, note) "
            f"SELECT seq, CONCAT('m', seq) FROM seq_31_to_{count}"
        )


def _wait_for(what: str, check: Any, seconds: float = 30) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_client_killed_inside_the_fill_then_rerun(maria: Engine, tmp_path: Path) -> None:
    extra = "from_time='created_at', batch_size=50, lock_timeout=20"
    config = _project(tmp_path, maria, extra=extra)
    _fresh(maria, config)
    _more_customers(maria, 600)
    before = _snapshot(maria)
    script = _script(config, "upgrade")
    head, _ = _split(script)
    _applied(maria, head)
    fill = next(seq for seq, label in _steps(maria) if label.startswith("fill pk_customers"))
    with maria.begin() as conn:  # a pause before the fill, for the row lock to be taken
        conn.exec_driver_sql(
            f"INSERT INTO {STEPS_TABLE} (name, seq, label, body) SELECT name, {fill - 5}, "
            "'the test waits', 'DO GET_LOCK(''pk_offline_test'', 30)' "
            f"FROM {STEPS_TABLE} WHERE seq = 0"
        )
    blocker = maria.connect()
    client = None
    try:
        blocker.exec_driver_sql("DO GET_LOCK('pk_offline_test', 30)")
        client = subprocess.Popen(
            _clients.mariadb_args(maria, "--unbuffered"),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert client.stdin is not None
        client.stdin.write(script)
        client.stdin.close()

        def paused() -> bool:
            with maria.connect() as conn:
                return bool(
                    conn.exec_driver_sql(
                        "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                        "WHERE INFO LIKE 'DO GET_LOCK(%%' AND DB = DATABASE()"
                    ).scalar()
                )

        _wait_for("the script to reach the fill", paused)
        # A row in the middle of the table, locked: the fill waits at its batch.
        blocker.exec_driver_sql("SELECT id FROM pk_customers WHERE id = 300 FOR UPDATE").all()
        blocker.exec_driver_sql("DO RELEASE_LOCK('pk_offline_test')")

        def waiting() -> int | None:
            with maria.connect() as conn:
                # A row lock wait, or (as tests/_sessions.mariadb_held_up
                # says) a statement of the script held up for a second.
                return conn.exec_driver_sql(
                    "SELECT COALESCE((SELECT MAX(trx_mysql_thread_id) "
                    "FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'), "
                    "(SELECT MAX(ID) FROM information_schema.PROCESSLIST "
                    "WHERE DB = DATABASE() AND COMMAND = 'Query' AND TIME_MS >= 1000 "
                    "AND ID <> CONNECTION_ID() AND INFO NOT LIKE 'DO GET_LOCK(%%'))"
                ).scalar()

        session = _wait_for("the fill to wait for the locked row", waiting)
        with maria.connect() as conn:
            filled = dict(
                conn.exec_driver_sql(
                    "SELECT id, id__ulid FROM pk_customers WHERE id__ulid IS NOT NULL"
                ).all()
            )
        assert 0 < len(filled) < 600
        client.kill()  # the client, in the middle of the fill
        client.wait(timeout=30)
        with maria.connect() as conn:  # its session, still waiting on the server
            conn.exec_driver_sql(f"KILL {int(session)}")
    finally:
        blocker.rollback()
        blocker.close()
        if client is not None and client.poll() is None:
            client.kill()
            client.wait(timeout=30)

    def gone() -> bool:
        with maria.connect() as conn:
            return not conn.exec_driver_sql(
                f"SELECT 1 FROM information_schema.PROCESSLIST WHERE ID = {int(session)}"
            ).all()

    _wait_for("the killed session to end", gone)
    with maria.begin() as conn:
        conn.exec_driver_sql(f"DELETE FROM {STEPS_TABLE} WHERE seq = {fill - 5}")
    out = _applied(maria, script)
    assert "continuing the plan" in out
    assert _snapshot(maria) == before
    with maria.connect() as conn:
        rows = dict(conn.exec_driver_sql("SELECT legacy_id, id FROM pk_customers").all())
        ms = dict(
            conn.exec_driver_sql(
                "SELECT legacy_id, FLOOR(UNIX_TIMESTAMP(CONVERT_TZ(created_at, '+00:00', "
                "@@session.time_zone)) * 1000) FROM pk_customers"
            ).all()
        )
    assert all(rows[key] == value for key, value in filled.items()), "the rerun went on"
    assert len(set(rows.values())) == 600
    assert all(ULID.from_bytes(rows[key]).timestamp_ms == int(ms[key]) for key in rows)


# -- writers while the script runs ---------------------------------------------------------------

#: What a writer may meet while the tables are swapped: a lock wait past its
#: timeout, a deadlock, a table redefined under its transaction. It retries.
RETRIED = {1205, 1213, 1412}


def _write(conn: sa.Connection, kind: str, i: int, written: dict[str, int]) -> None:
    if kind == "orders":
        # customer_id takes whatever the key is: an int before the swap, a ULID after.
        conn.exec_driver_sql(
            "INSERT INTO pk_orders (customer_id, note) SELECT id, %s FROM pk_customers "
            "WHERE name = %s",
            (f"w{i}", f"c{1 + i % 600}"),
        )
        written["orders"] += 1
        return
    referrer = "SELECT id FROM pk_customers WHERE name = 'c5'"
    try:
        conn.exec_driver_sql(
            "INSERT INTO pk_customers (created_at, name, referrer_id) "
            f"SELECT UTC_TIMESTAMP(6), %s, ({referrer})",
            (f"w{i}",),
        )
        written["customers before"] += 1
    except sa.exc.OperationalError as exc:
        if exc.orig is None or exc.orig.args[0] != 1364:  # no default for id: swapped
            raise
        conn.rollback()
        conn.exec_driver_sql(
            "INSERT INTO pk_customers (id, created_at, name, referrer_id) "
            f"SELECT %s, UTC_TIMESTAMP(6), %s, ({referrer})",
            (new_ulid().bytes, f"w{i}"),
        )
        written["customers after"] += 1


def _writer(written: dict[str, int]) -> Callable[[sa.Connection, int, int], bool]:
    """Writer 0 inserts orders, writer 1 customers; a lock wait or deadlock is tried again."""
    deadline = time.monotonic() + 60  # bounded, whatever happens to the test

    def step(conn: sa.Connection, n: int, i: int) -> bool:
        try:
            _write(conn, ("orders", "customers")[n], i + 1, written)
            conn.commit()
        except sa.exc.DBAPIError as exc:
            conn.rollback()
            code = exc.orig.args[0] if exc.orig is not None else None
            if code not in RETRIED:
                raise
        return time.monotonic() < deadline

    return step


def _session_timeouts(conn: sa.Connection, n: int) -> None:
    conn.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 10, lock_wait_timeout = 10")
    conn.exec_driver_sql("SET SESSION time_zone = '+00:00'")


def test_two_writers_while_the_script_runs(maria: Engine, tmp_path: Path) -> None:
    config = _project(tmp_path, maria, extra="from_time='created_at', batch_size=40")
    _fresh(maria, config)
    _more_customers(maria, 600)
    script = _script(config, "upgrade")
    written = {"orders": 0, "customers before": 0, "customers after": 0}
    step = _writer(written)
    with _writers.Loop(
        maria, 2, step, begin=_session_timeouts, pause=0.003, join=30, daemon=True
    ) as writers:
        _wait_for("the writers to start", lambda: written["orders"] and written["customers before"])
        out = _applied(maria, script)
        _wait_for("writes after the swap", lambda: written["customers after"] >= 5)
    writers.check()
    assert "rows filled" in out
    with maria.connect() as conn:
        conn.exec_driver_sql("SET SESSION time_zone = '+00:00'")
        customers = conn.exec_driver_sql(
            "SELECT legacy_id, id, FLOOR(UNIX_TIMESTAMP(created_at) * 1000), name FROM pk_customers"
        ).all()
        orphans = conn.exec_driver_sql(
            "SELECT (SELECT COUNT(*) FROM pk_orders o LEFT JOIN pk_customers c "
            "ON c.id = o.customer_id WHERE c.id IS NULL), "
            "(SELECT COUNT(*) FROM pk_customers c LEFT JOIN pk_customers r "
            "ON r.id = c.referrer_id WHERE c.referrer_id IS NOT NULL AND r.id IS NULL), "
            "(SELECT COUNT(*) FROM pk_orders), "
            "(SELECT COUNT(*) FROM pk_orders WHERE note LIKE 'w%%'), "
            "(SELECT COUNT(*) FROM pk_customers WHERE name LIKE 'w%%' AND referrer_id IS NULL)"
        ).one()
        foreign_keys = conn.exec_driver_sql(
            "SELECT COUNT(*) FROM information_schema.REFERENTIAL_CONSTRAINTS "
            "WHERE CONSTRAINT_SCHEMA = DATABASE() AND REFERENCED_TABLE_NAME IN "
            "('pk_customers', 'pk_accounts')"
        ).scalar()
    assert written["customers before"]
    assert written["customers after"]
    assert len(customers) == 600 + written["customers before"] + written["customers after"]
    for legacy, raw, ms, name in customers:
        made = ULID.from_bytes(raw)
        if not name.startswith("w"):
            assert made.timestamp_ms == int(ms), legacy
        else:  # dated by the script from created_at, or by the writer
            assert abs(made.timestamp_ms - int(ms)) < 5000, legacy
    assert len({raw for _, raw, _, _ in customers}) == len(customers)
    assert orphans == (0, 0, 620 + written["orders"], written["orders"], 0)
    assert foreign_keys == 4


# -- names that need quoting -------------------------------------------------------------------

ODD_ROOT, ODD_CHILD = "Odd`Cust 'Omers", "odd orders%"
ODD_COMMENT = "it's a \\ test"


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _odd_drop(engine: Engine) -> None:
    with engine.begin() as conn:
        for name in (ODD_CHILD, ODD_ROOT):
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {_q(name)}".replace("%", "%%"))


def _odd_facts(engine: Engine) -> dict[str, Any]:
    """Joins over both foreign keys, and the columns and constraints as the catalog has them."""
    root, child = _q(ODD_ROOT), _q(ODD_CHILD)
    queries = {
        "orders": f"SELECT o.note, c.name FROM {child} o LEFT JOIN {root} c "
        "ON c.`Id` = o.`Cust``Id`",
        "referrers": f"SELECT c.name, r.name FROM {root} c LEFT JOIN {root} r "
        "ON r.`Id` = c.`Ref'Id`",
        "columns": "SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_KEY, EXTRA, "
        "COLUMN_COMMENT FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME IN (%s, %s)",
        "constraints": "SELECT CONSTRAINT_NAME, TABLE_NAME, REFERENCED_TABLE_NAME, DELETE_RULE "
        "FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = DATABASE() "
        "AND TABLE_NAME IN (%s, %s)",
        "indexes": "SELECT TABLE_NAME, INDEX_NAME, COLUMN_NAME, NON_UNIQUE "
        "FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME IN (%s, %s)",
    }
    with engine.connect() as conn:
        return {
            name: sorted(
                tuple(row)
                for row in conn.exec_driver_sql(
                    sql.replace("%", "%%") if "(%s" not in sql else sql,
                    (ODD_ROOT, ODD_CHILD) if "(%s" in sql else (),
                )
            )
            for name, sql in queries.items()
        }


def test_quoted_and_mixed_case_names(maria: Engine, tmp_path: Path) -> None:
    """A backtick, quotes, a space, a percent and capitals in every name the script builds."""
    _odd_drop(maria)
    root, child = _q(ODD_ROOT), _q(ODD_CHILD)
    comment = "'" + ODD_COMMENT.replace("\\", "\\\\").replace("'", "''") + "'"
    statements = [
        f"CREATE TABLE {root} (`Id` INT AUTO_INCREMENT PRIMARY KEY, `Created At` DATETIME(3) "
        "NOT NULL, name VARCHAR(20) NOT NULL, `Ref'Id` INT NULL, CONSTRAINT `fk Odd``Ref` "
        f"FOREIGN KEY (`Ref'Id`) REFERENCES {root} (`Id`) ON DELETE SET NULL)",
        f"CREATE TABLE {child} (id INT AUTO_INCREMENT PRIMARY KEY, `Cust``Id` INT NULL "
        f"COMMENT {comment}, note VARCHAR(20) NOT NULL, INDEX `ix Cust``Id` (`Cust``Id`, note), "
        f"CONSTRAINT `Fk Orders` FOREIGN KEY (`Cust``Id`) REFERENCES {root} (`Id`))",
        f"INSERT INTO {root} (`Id`, `Created At`, name, `Ref'Id`) VALUES "
        "(1, '2024-01-01 00:00:00.001', 'a', NULL), (2, '2024-01-01 00:00:00.002', 'b', 1), "
        "(3, '2024-01-01 00:00:00.002', 'c', 2)",
        f"INSERT INTO {child} (`Cust``Id`, note) VALUES (1, 'x'), (3, 'y'), (NULL, 'z')",
    ]
    with maria.begin() as conn:
        for statement in statements:
            conn.exec_driver_sql(statement.replace("%", "%%"))
    try:
        config = _project(
            tmp_path, maria, extra="from_time='Created At', legacy_id='Old Id'", table=ODD_ROOT
        )
        _online(config, maria, "stamp", "pk0000")
        before = _odd_facts(maria)
        _applied(maria, _script(config, "upgrade"))
        after = _odd_facts(maria)
        assert after["orders"] == before["orders"]
        assert after["referrers"] == before["referrers"]
        columns = {(t, c): rest for t, c, *rest in after["columns"]}
        assert columns[(ODD_ROOT, "Id")] == ["binary(16)", "NO", "PRI", "", ""]
        assert columns[(ODD_ROOT, "Old Id")] == ["int(11)", "NO", "UNI", "auto_increment", ""]
        assert columns[(ODD_CHILD, "Cust`Id")] == ["binary(16)", "YES", "MUL", "", ODD_COMMENT]
        assert columns[(ODD_ROOT, "Ref'Id")][:2] == ["binary(16)", "YES"]
        assert after["constraints"] == before["constraints"]
        assert ("odd orders%", "ix Cust`Id", "Cust`Id", 1) in after["indexes"]
        with maria.connect() as conn:
            ids = conn.exec_driver_sql(f"SELECT `Id` FROM {root} ORDER BY `Old Id`").scalars()
            assert [ULID.from_bytes(i).timestamp_ms for i in ids] == [
                1704067200001,
                1704067200002,
                1704067200002,
            ]
        _applied(maria, _script(config, "downgrade"))
        assert _odd_facts(maria) == before
    finally:
        _odd_drop(maria)
