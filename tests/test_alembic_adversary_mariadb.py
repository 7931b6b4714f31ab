"""The Alembic migration ops on MariaDB tables and sessions a user shaped to break them.

Each test is one attack: a session ``sql_mode`` set after connecting
(``ANSI_QUOTES``, ``NO_BACKSLASH_ESCAPES``), names with backticks, a CHECK
constraint on the column to drop... The op either refuses before any DDL
(a ValueError naming what is in the way) or does the right thing. What is
not fixed yet is a strict xfail naming the defect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.operations import Operations
from sqlalchemy.engine import Engine

import _clients
import _databases
from _adversary import execute, refused_before_ddl, rows, run_op, scalar
from _offline_scripts import VERSION_TABLE, alembic_sql
from conftest import Backend, private_engine
from sqlalchemy_ulid import ULID

TABLE = "adv_t"
STATE_TABLES = ("sqlalchemy_ulid_migrations", "ulid_storage_conversions", "ulid_key_conversions")
TEXT = [f"01ARZ3NDEKTSV4RRFFQ69G5FA{i}" for i in range(10)]


def _drop(engine: Engine) -> None:
    with engine.connect() as conn:
        names = conn.exec_driver_sql(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
            "AND (TABLE_NAME LIKE 'adv%%' OR TABLE_NAME LIKE '\\_adv%%' OR TABLE_NAME IN "
            f"{(*STATE_TABLES, VERSION_TABLE)!r})"
        ).scalars()
        tables = [f"`{name}`" for name in names]
    _databases.drop_tables(engine, *tables)


@pytest.fixture
def maria(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["mysql"], _drop) as engine:
        yield engine


def _table(engine: Engine, *more: str, ref: str = "`ref`") -> None:
    """10 rows: ``id`` AUTO_INCREMENT key, ``created_at``, ``ref`` CHAR(26) of ULID text."""
    execute(
        engine,
        f"CREATE TABLE {TABLE} (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
        f"created_at DATETIME(3) NOT NULL DEFAULT NOW(3), {ref} CHAR(26) NOT NULL)",
        *(f"INSERT INTO {TABLE} ({ref}) VALUES ('{value}')" for value in TEXT),
        *more,
    )


def _columns(engine: Engine) -> list[str]:
    return [
        name
        for (name,) in rows(
            engine,
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
            "AND TABLE_NAME = :t ORDER BY ORDINAL_POSITION",
            t=TABLE,
        )
    ]


def _mode(*modes: str) -> Callable[[sa.Connection], None]:
    def setup(conn: sa.Connection) -> None:
        for mode in modes:
            conn.exec_driver_sql(f"SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',{mode}')")

    return setup


def _run_in_mode(engine: Engine, call: Callable[[Operations], Any], *modes: str) -> str:
    """Run the op in a session with ``modes`` added; return the session's sql_mode after."""
    after: list[str] = []

    def op(operations: Operations) -> None:
        call(operations)

    with engine.connect() as conn:
        _mode(*modes)(conn)
        conn.commit()
        from alembic.migration import MigrationContext

        context = MigrationContext.configure(conn)
        with context.begin_transaction(), context.begin_transaction(_per_migration=True):
            op(Operations(context))
        after.append(str(conn.exec_driver_sql("SELECT @@SESSION.sql_mode").scalar()))
    return after[0]


def _binary(engine: Engine, column: str = "ref", order: str = "id") -> list[ULID]:
    return [
        ULID.from_bytes(bytes(value))
        for (value,) in rows(engine, f"SELECT {column} FROM {TABLE} ORDER BY {order}")
    ]


# -- sql_mode set on the session after SQLAlchemy connected ------------------------------

STORAGE = {"from_storage": "text", "to_storage": "binary"}


@pytest.mark.parametrize("online", [False, True], ids=["one-transaction", "online"])
@pytest.mark.parametrize("mode", ["ANSI_QUOTES", "NO_BACKSLASH_ESCAPES"])
def test_storage_conversion_under_a_session_sql_mode(
    maria: Engine, mode: str, online: bool
) -> None:
    # ANSI_QUOTES: reflection read no columns ("adv_t has no column 'ref'").
    _table(maria)
    after = _run_in_mode(
        maria, lambda op: op.alter_ulid_storage(TABLE, "ref", online=online, **STORAGE), mode
    )
    assert mode in after.split(",")  # put back
    assert _binary(maria) == [ULID(v) for v in TEXT]


@pytest.mark.parametrize("online", [False, True], ids=["one-transaction", "online"])
@pytest.mark.parametrize("mode", ["ANSI_QUOTES", "NO_BACKSLASH_ESCAPES"])
def test_add_then_drop_under_a_session_sql_mode(maria: Engine, mode: str, online: bool) -> None:
    # ANSI_QUOTES: add refused ("no column 'created_at'"); the drop did nothing at all.
    _table(maria)
    _run_in_mode(
        maria, lambda op: op.add_ulid_column(TABLE, "public_id", "created_at", online=online), mode
    )
    ids = _binary(maria, "public_id")
    assert len(set(ids)) == 10
    created = [v for (v,) in rows(maria, f"SELECT created_at FROM {TABLE} ORDER BY id")]
    assert [u.datetime.replace(tzinfo=None) for u in ids] == [
        c.replace(microsecond=c.microsecond // 1000 * 1000) for c in created
    ]
    _run_in_mode(maria, lambda op: op.drop_ulid_column(TABLE, "public_id"), mode)
    assert _columns(maria) == ["id", "created_at", "ref"]


@pytest.mark.parametrize("mode", ["ANSI_QUOTES", "NO_BACKSLASH_ESCAPES"])
def test_key_conversion_and_back_under_a_session_sql_mode(maria: Engine, mode: str) -> None:
    # ANSI_QUOTES: "adv_t has no primary key"; the restore did nothing at all.
    _table(maria)
    _run_in_mode(
        maria, lambda op: op.convert_primary_key_to_ulid(TABLE, from_time="created_at"), mode
    )
    assert sorted(_columns(maria)) == ["created_at", "id", "legacy_id", "ref"]
    assert len(set(_binary(maria, "id"))) == 10
    _run_in_mode(maria, lambda op: op.restore_legacy_primary_key(TABLE), mode)
    assert sorted(_columns(maria)) == ["created_at", "id", "ref"]
    assert [i for (i,) in rows(maria, f"SELECT id FROM {TABLE} ORDER BY id")] == list(range(1, 11))


# -- drop_ulid_column --------------------------------------------------------------------


def test_drop_a_column_a_check_constraint_names(maria: Engine) -> None:
    _table(maria)
    run_op(maria, lambda op: op.add_ulid_column(TABLE, "public_id", "created_at"))
    execute(maria, f"ALTER TABLE {TABLE} ADD CONSTRAINT ck_pub CHECK (public_id <> x'00')")
    seen = run_op(maria, lambda op: op.drop_ulid_column(TABLE, "public_id"))
    assert [s for s in seen if "DROP COLUMN" in s.upper()] == [
        f"ALTER TABLE {TABLE} DROP COLUMN public_id"
    ]
    assert _columns(maria) == ["id", "created_at", "ref"]
    assert (
        scalar(
            maria,
            "SELECT count(*) FROM information_schema.CHECK_CONSTRAINTS WHERE "
            "CONSTRAINT_SCHEMA = DATABASE() AND CONSTRAINT_NAME = 'ck_pub'",
        )
        == 0
    )


def _comment(engine: Engine) -> str:
    return str(
        scalar(
            engine,
            "SELECT COLUMN_COMMENT FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
            "AND TABLE_NAME = :t AND COLUMN_NAME = 'ref'",
            t=TABLE,
        )
    )


@pytest.mark.parametrize("online", [False, True], ids=["one-transaction", "online"])
def test_comment_with_a_backslash_under_no_backslash_escapes(maria: Engine, online: bool) -> None:
    # The comment is carried as a literal SQLAlchemy escapes with backslashes,
    # which the server kept as they are: x\y became x\\y.
    _table(maria, ref="ref")
    execute(maria, f"ALTER TABLE {TABLE} MODIFY ref CHAR(26) NOT NULL COMMENT 'x\\\\y''s'")
    assert _comment(maria) == "x\\y's"
    _run_in_mode(
        maria,
        lambda op: op.alter_ulid_storage(TABLE, "ref", online=online, **STORAGE),
        "NO_BACKSLASH_ESCAPES",
    )
    assert _comment(maria) == "x\\y's"
    assert _binary(maria) == [ULID(v) for v in TEXT]


# -- names with a backtick ---------------------------------------------------------------


@pytest.mark.parametrize("online", [False, True], ids=["one-transaction", "online"])
def test_storage_conversion_of_a_column_whose_name_has_a_backtick(
    maria: Engine, online: bool
) -> None:
    # SQLAlchemy reflects `re``f` as re``f: "adv_t has no column 're`f'".
    _table(maria, ref="`re``f`")
    run_op(maria, lambda op: op.alter_ulid_storage(TABLE, "re`f", online=online, **STORAGE))
    assert _binary(maria, "`re``f`") == [ULID(v) for v in TEXT]


@pytest.mark.parametrize("online", [False, True], ids=["one-transaction", "online"])
def test_add_and_drop_a_column_whose_name_has_a_backtick(maria: Engine, online: bool) -> None:
    # The one-transaction add failed on an assertion after its DDL.
    _table(maria)
    run_op(maria, lambda op: op.add_ulid_column(TABLE, "pub`id", "created_at", online=online))
    assert len(set(_binary(maria, "`pub``id`"))) == 10
    run_op(maria, lambda op: op.drop_ulid_column(TABLE, "pub`id"))
    assert _columns(maria) == ["id", "created_at", "ref"]


# -- names that need quoting -------------------------------------------------------------

#: (table, column): reserved words in mixed case; non-ASCII
NAMES = [("adv_Order", "select"), ("adv_Bücher", "Référence")]


@pytest.mark.parametrize(("table", "column"), NAMES, ids=["reserved", "unicode"])
@pytest.mark.parametrize("online", [False, True], ids=["one-transaction", "online"])
def test_every_op_on_names_that_need_quoting(
    maria: Engine, table: str, column: str, online: bool
) -> None:
    execute(
        maria,
        f"CREATE TABLE `{table}` (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
        f"created_at DATETIME(3) NOT NULL DEFAULT NOW(3), `{column}` CHAR(26) NOT NULL)",
        *(f"INSERT INTO `{table}` (`{column}`) VALUES ('{value}')" for value in TEXT),
    )
    run_op(maria, lambda op: op.alter_ulid_storage(table, column, online=online, **STORAGE))
    assert scalar(maria, f"SELECT count(DISTINCT `{column}`) FROM `{table}`") == 10
    assert scalar(maria, f"SELECT max(length(`{column}`)) FROM `{table}`") == 16
    run_op(maria, lambda op: op.add_ulid_column(table, "New Id", "created_at", online=online))
    assert scalar(maria, f"SELECT count(DISTINCT `New Id`) FROM `{table}`") == 10
    run_op(maria, lambda op: op.drop_ulid_column(table, "New Id"))
    run_op(maria, lambda op: op.convert_primary_key_to_ulid(table, from_time="created_at"))
    assert scalar(maria, f"SELECT count(DISTINCT id) FROM `{table}`") == 10
    run_op(maria, lambda op: op.restore_legacy_primary_key(table))
    assert scalar(maria, f"SELECT sum(id) FROM `{table}`") == 55
    assert sorted(
        c
        for (c,) in rows(
            maria,
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
            "AND TABLE_NAME = :t",
            t=table,
        )
    ) == sorted(["id", "created_at", column])


# -- the key conversion ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["VIRTUAL", "PERSISTENT", "VIRTUAL, KEY (k)"])
def test_generated_column_of_a_referencing_column_refused_before_any_ddl(
    maria: Engine, kind: str
) -> None:
    # The swap's DROP COLUMN failed (1054) halfway, the conversion left unfinished.
    execute(
        maria,
        f"CREATE TABLE {TABLE} (id INT NOT NULL PRIMARY KEY, "
        "created_at DATETIME(3) NOT NULL DEFAULT NOW(3))",
        f"INSERT INTO {TABLE} (id) VALUES (1), (2)",
        "CREATE TABLE adv_child (id INT NOT NULL PRIMARY KEY, parent_id INT, "
        f"k VARCHAR(40) AS (CONCAT('k', parent_id)) {kind}, "
        f"FOREIGN KEY (parent_id) REFERENCES {TABLE} (id))",
        "INSERT INTO adv_child (id, parent_id) VALUES (1, 1), (2, 2)",
    )
    with refused_before_ddl(maria, "adv_child.parent_id is used by the generated column k"):
        run_op(maria, lambda op: op.convert_primary_key_to_ulid(TABLE, from_time="created_at"))
    assert rows(maria, "SELECT k, parent_id FROM adv_child ORDER BY id") == [("k1", 1), ("k2", 2)]


def test_virtual_column_of_the_key_keeps_its_values_there_and_back(maria: Engine) -> None:
    # The key column is renamed to legacy_id, and the expression follows it.
    execute(
        maria,
        f"CREATE TABLE {TABLE} (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
        "created_at DATETIME(3) NOT NULL DEFAULT NOW(3), k VARCHAR(20) AS (CONCAT('k', id)))",
        f"INSERT INTO {TABLE} (created_at) VALUES (NOW(3)), (NOW(3))",
    )
    run_op(maria, lambda op: op.convert_primary_key_to_ulid(TABLE, from_time="created_at"))
    assert rows(maria, f"SELECT k, legacy_id FROM {TABLE} ORDER BY legacy_id") == [
        ("k1", 1),
        ("k2", 2),
    ]
    run_op(maria, lambda op: op.restore_legacy_primary_key(TABLE))
    assert rows(maria, f"SELECT k, id FROM {TABLE} ORDER BY id") == [("k1", 1), ("k2", 2)]


def test_key_names_with_double_quotes_under_ansi_quotes(maria: Engine) -> None:
    execute(
        maria,
        f'CREATE TABLE {TABLE} (`i"d` INT NOT NULL AUTO_INCREMENT PRIMARY KEY, '
        "created_at DATETIME(3) NOT NULL DEFAULT NOW(3))",
        f"INSERT INTO {TABLE} (created_at) VALUES (NOW(3)), (NOW(3))",
    )
    legacy = 'leg"acy'
    _run_in_mode(
        maria,
        lambda op: op.convert_primary_key_to_ulid(TABLE, from_time="created_at", legacy_id=legacy),
        "ANSI_QUOTES",
    )
    assert sorted(_columns(maria)) == ["created_at", 'i"d', legacy]
    assert len(set(_binary(maria, '`i"d`', order="1"))) == 2
    _run_in_mode(
        maria, lambda op: op.restore_legacy_primary_key(TABLE, legacy_id=legacy), "ANSI_QUOTES"
    )
    assert rows(maria, f'SELECT `i"d` FROM {TABLE} ORDER BY 1') == [(1,), (2,)]


USERS = {
    # the server dropped the column, then every INSERT failed (1054)
    "trigger": f"CREATE TRIGGER adv_tr BEFORE INSERT ON {TABLE} FOR EACH ROW "
    "SET NEW.ref = HEX(NEW.public_id)",
    # the server dropped the column, then every read of the view failed (1356)
    "view": f"CREATE VIEW adv_v AS SELECT id, public_id FROM {TABLE}",
}


@pytest.mark.parametrize("user", sorted(USERS))
def test_drop_refuses_a_column_a_trigger_or_view_names(maria: Engine, user: str) -> None:
    _table(maria)
    run_op(maria, lambda op: op.add_ulid_column(TABLE, "public_id", "created_at"))
    execute(maria, USERS[user])
    try:
        with refused_before_ddl(maria, f"named by the {user} adv_"):
            run_op(maria, lambda op: op.drop_ulid_column(TABLE, "public_id"))
    finally:
        execute(maria, "DROP VIEW IF EXISTS adv_v", "DROP TRIGGER IF EXISTS adv_tr")
    run_op(maria, lambda op: op.drop_ulid_column(TABLE, "public_id"))
    assert _columns(maria) == ["id", "created_at", "ref"]


@pytest.fixture
def other(maria: Engine) -> Iterator[str]:
    """A database of the test's own beside the worker's, given as ``schema=``."""
    name = f"{scalar(maria, 'SELECT DATABASE()')}_adv_other"
    execute(maria, f"DROP DATABASE IF EXISTS `{name}`", f"CREATE DATABASE `{name}`")
    yield name
    execute(maria, f"DROP DATABASE IF EXISTS `{name}`")


@pytest.mark.parametrize("online", [False, True], ids=["one-transaction", "online"])
def test_every_op_in_another_database(maria: Engine, other: str, online: bool) -> None:
    table = f"`{other}`.{TABLE}"
    execute(
        maria,
        f"CREATE TABLE {table} (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
        "created_at DATETIME(3) NOT NULL DEFAULT NOW(3), ref CHAR(26) NOT NULL)",
        *(f"INSERT INTO {table} (ref) VALUES ('{value}')" for value in TEXT),
    )
    run_op(
        maria,
        lambda op: op.alter_ulid_storage(TABLE, "ref", schema=other, online=online, **STORAGE),
    )
    assert scalar(maria, f"SELECT max(length(ref)) FROM {table}") == 16
    run_op(
        maria,
        lambda op: op.add_ulid_column(TABLE, "pid", "created_at", schema=other, online=online),
    )
    assert scalar(maria, f"SELECT count(DISTINCT pid) FROM {table}") == 10
    run_op(maria, lambda op: op.drop_ulid_column(TABLE, "pid", schema=other))
    run_op(
        maria,
        lambda op: op.convert_primary_key_to_ulid(TABLE, from_time="created_at", schema=other),
    )
    assert scalar(maria, f"SELECT count(DISTINCT id) FROM {table}") == 10
    run_op(maria, lambda op: op.restore_legacy_primary_key(TABLE, schema=other))
    assert scalar(maria, f"SELECT sum(id) FROM {table}") == 55
    assert _columns(maria) == []  # nothing made in the worker's own database


@pytest.mark.parametrize("online", [False, True], ids=["one-transaction", "online"])
def test_storage_conversion_refuses_a_check_on_the_column_before_any_ddl(
    maria: Engine, online: bool
) -> None:
    # One transaction: the column was left VARBINARY(26) when the CHECK failed
    # half-way (MariaDB's DDL commits); online: the copy failed, "rerun" forever.
    _table(maria, f"ALTER TABLE {TABLE} ADD CONSTRAINT ck_ref CHECK (length(ref) = 26)")
    with refused_before_ddl(maria, "CHECK constraint.s. ck_ref"):
        run_op(maria, lambda op: op.alter_ulid_storage(TABLE, "ref", online=online, **STORAGE))
    assert rows(maria, f"SELECT ref FROM {TABLE} ORDER BY id") == [(v,) for v in TEXT]
    execute(maria, f"ALTER TABLE {TABLE} DROP CONSTRAINT ck_ref")
    run_op(maria, lambda op: op.alter_ulid_storage(TABLE, "ref", online=online, **STORAGE))
    assert _binary(maria) == [ULID(v) for v in TEXT]


@pytest.mark.parametrize("user", sorted(USERS))
def test_the_drop_script_refuses_a_column_a_trigger_or_view_names(
    maria: Engine, tmp_path: Path, user: str
) -> None:
    # The --sql script dropped it all the same: every INSERT (the trigger) or
    # read of the view failed after.
    _table(maria)
    run_op(maria, lambda op: op.add_ulid_column(TABLE, "public_id", "created_at"))
    execute(maria, USERS[user])
    script = alembic_sql(maria, tmp_path, f'drop_ulid_column("{TABLE}", "public_id")')
    try:
        before = rows(maria, f"SELECT * FROM {TABLE} ORDER BY id")
        done = _clients.mariadb(maria, script)
        assert done.returncode != 0
        assert f"adv_t.public_id is named by the {user} adv_" in done.stderr, done.stderr
        assert rows(maria, f"SELECT * FROM {TABLE} ORDER BY id") == before
        assert scalar(
            maria,
            "SELECT count(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
            f"AND TABLE_NAME = '{TABLE}' AND INDEX_NAME = 'uq_adv_t_public_id'",
        )
    finally:
        execute(maria, "DROP VIEW IF EXISTS adv_v", "DROP TRIGGER IF EXISTS adv_tr")
    execute(maria, f"DROP TABLE IF EXISTS {VERSION_TABLE}")
    done = _clients.mariadb(maria, script)
    assert done.returncode == 0, done.stderr
    assert _columns(maria) == ["id", "created_at", "ref"]
