"""The Alembic migration ops on PostgreSQL tables a user shaped to break them.

Each test is one attack: a table with a rule, a PostgreSQL 18 named NOT
NULL, a partitioned table, odd names, other schemas... The op either
refuses before any DDL (a ValueError naming what is in the way) or does the
right thing. What is not fixed yet is a strict xfail naming the defect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

import _clients
import _databases
import _sessions
from _adversary import execute, refused_before_ddl, rows, run_op, scalar
from _offline_scripts import VERSION_TABLE, alembic_sql
from conftest import Backend, private_engine

TABLE = "adv_t"
STATE_TABLES = ("sqlalchemy_ulid_migrations", "ulid_storage_conversions", "ulid_key_conversions")


_drop = _databases.dropper(
    TABLE,
    "adv_log",
    "adv_child",
    '"Order"',
    '"Bücher"',
    '"adv""we.ird"',
    *STATE_TABLES,
    VERSION_TABLE,
    views=["adv_v"],
    functions=["adv_f()"],
    schemas=["adv_other"],
)


@pytest.fixture
def pg(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["postgresql"], _drop) as engine:
        yield engine


def _table(engine: Engine, *more: str, table: str = TABLE, ref: str = "ref") -> None:
    """``table`` of 20 rows: ``id`` key, ``created_at``, ``ref`` CHAR(26) of ULID text."""
    execute(
        engine,
        f"CREATE TABLE {table} (id INT PRIMARY KEY, created_at TIMESTAMPTZ NOT NULL "
        f"DEFAULT now(), {ref} CHAR(26) NOT NULL)",
        f"INSERT INTO {table} (id, {ref}) SELECT g, '01ARZ3NDEKTSV4RRFFQ69G5FA' "
        "|| chr(48 + mod(g, 10)) FROM generate_series(1, 20) g",
        *more,
    )


def _server_version(engine: Engine) -> int:
    return int(scalar(engine, "SELECT current_setting('server_version_num')::int / 10000"))


def _to_native(table: str = TABLE, column: str = "ref", **options: object) -> object:
    return lambda op: op.alter_ulid_storage(
        table, column, from_storage="text", to_storage="native", **options
    )


RULE = (
    "CREATE TABLE adv_log (ref TEXT)",
    f"CREATE RULE r_adv AS ON INSERT TO {TABLE} DO ALSO INSERT INTO adv_log VALUES (NEW.ref)",
)


def test_rule_on_the_table_refused_before_the_online_swap(pg: Engine) -> None:
    # The rule names ref: DROP COLUMN fails after the whole copy (it did).
    _table(pg, *RULE)
    with refused_before_ddl(pg, "rule r_adv on adv_t"):
        run_op(pg, _to_native(online=True))
    assert rows(pg, f"SELECT count(*) FROM {TABLE} WHERE ref LIKE '01%'") == [(20,)]


def test_rule_on_the_table_refused_before_the_key_conversion(pg: Engine) -> None:
    # The rule names id: after the conversion it would silently read legacy_id.
    _table(pg, *RULE)
    execute(
        pg,
        f"CREATE OR REPLACE RULE r_adv AS ON INSERT TO {TABLE} DO ALSO "
        "INSERT INTO adv_log VALUES (NEW.id::text)",
    )
    with refused_before_ddl(pg, "rule r_adv on adv_t"):
        run_op(pg, lambda op: op.convert_primary_key_to_ulid(TABLE, from_time="created_at"))


def test_rule_on_a_referencing_table_refused_before_the_key_conversion(pg: Engine) -> None:
    _table(pg)
    execute(
        pg,
        f"CREATE TABLE adv_child (id INT PRIMARY KEY, parent_id INT REFERENCES {TABLE} (id))",
        "CREATE TABLE adv_log (ref TEXT)",
        "CREATE RULE r_child AS ON INSERT TO adv_child DO ALSO "
        "INSERT INTO adv_log VALUES (NEW.parent_id::text)",
    )
    with refused_before_ddl(pg, "rule r_child on adv_child"):
        run_op(pg, lambda op: op.convert_primary_key_to_ulid(TABLE, from_time="created_at"))


def test_named_not_null_keeps_its_name_through_the_online_swap(pg: Engine) -> None:
    if _server_version(pg) < 18:
        pytest.skip("NOT NULL is a named constraint from PostgreSQL 18")
    _table(
        pg,
        f"ALTER TABLE {TABLE} ALTER ref DROP NOT NULL",
        f"ALTER TABLE {TABLE} ADD CONSTRAINT ref_must NOT NULL ref",
    )
    run_op(pg, _to_native(online=True))
    named = rows(
        pg,
        "SELECT c.conname FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid "
        f"AND a.attnum = c.conkey[1] WHERE c.conrelid = '{TABLE}'::regclass "
        "AND c.contype = 'n' AND a.attname = 'ref'",
    )
    assert named == [("ref_must",)]
    assert (
        scalar(
            pg,
            f"SELECT format_type(atttypid, -1) FROM pg_attribute WHERE "
            f"attrelid = '{TABLE}'::regclass AND attname = 'ref'",
        )
        == "uuid"
    )


def test_default_not_null_name_is_the_columns_after_the_online_swap(pg: Engine) -> None:
    if _server_version(pg) < 18:
        pytest.skip("NOT NULL is a named constraint from PostgreSQL 18")
    _table(pg)
    run_op(pg, _to_native(online=True))
    names = {
        n
        for (n,) in rows(
            pg,
            "SELECT conname FROM pg_constraint WHERE conrelid = "
            f"'{TABLE}'::regclass AND contype = 'n'",
        )
    }
    assert names == {
        f"{TABLE}_id_not_null",
        f"{TABLE}_created_at_not_null",
        f"{TABLE}_ref_not_null",
    }


def _partitioned(engine: Engine) -> None:
    execute(
        engine,
        f"CREATE TABLE {TABLE} (id INT, created_at TIMESTAMPTZ NOT NULL DEFAULT now(), "
        "PRIMARY KEY (id)) PARTITION BY RANGE (id)",
        f"CREATE TABLE adv_child PARTITION OF {TABLE} FOR VALUES FROM (0) TO (1000)",
        f"INSERT INTO {TABLE} (id) SELECT generate_series(1, 20)",
    )


def test_partitioned_table_unique_online_add_refused_before_any_ddl(pg: Engine) -> None:
    # No index CONCURRENTLY on a partitioned table, no unique one without the
    # partition key: it failed after the column, the fill and NOT NULL.
    _partitioned(pg)
    with refused_before_ddl(pg, "partitioned table"):
        run_op(pg, lambda op: op.add_ulid_column(TABLE, "public_id", "created_at", online=True))
    assert (
        scalar(
            pg,
            "SELECT count(*) FROM information_schema.columns WHERE "
            f"table_name = '{TABLE}' AND column_name = 'public_id'",
        )
        == 0
    )


def test_partitioned_table_online_add_without_unique_runs(pg: Engine) -> None:
    _partitioned(pg)
    run_op(
        pg,
        lambda op: op.add_ulid_column(TABLE, "public_id", "created_at", online=True, unique=False),
    )
    assert scalar(pg, "SELECT count(*) FROM adv_child WHERE public_id IS NOT NULL") == 20


# -- names and schemas -------------------------------------------------------------------

#: (table, column, schema): names that need quoting, and a schema not on the search path
NAMES = [
    ("Order", "select", None),  # reserved words, mixed case
    ("Bücher", "Référence", None),  # non-ASCII
    ("adv_t", "ref", "adv_other"),  # another schema
    ('adv"we.ird', 'c"o.l', None),  # a double quote and a dot
]


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _named(engine: Engine, table: str, column: str, schema: str | None) -> str:
    q = f"{_q(schema)}.{_q(table)}" if schema else _q(table)
    if schema:
        execute(engine, f"CREATE SCHEMA {schema}")
    execute(
        engine,
        f"CREATE TABLE {q} (id INT PRIMARY KEY, created_at TIMESTAMPTZ NOT NULL "
        f"DEFAULT now(), {_q(column)} CHAR(26) NOT NULL)",
        f"INSERT INTO {q} (id, {_q(column)}) SELECT g, '01ARZ3NDEKTSV4RRFFQ69G5FA' "
        "|| chr(48 + mod(g, 10)) FROM generate_series(1, 20) g",
    )
    return q


@pytest.mark.parametrize(
    ("table", "column", "schema"), NAMES, ids=["reserved", "unicode", "schema", "quote"]
)
@pytest.mark.parametrize("online", [False, True], ids=["one-transaction", "online"])
def test_every_op_on_names_that_need_quoting(
    pg: Engine, table: str, column: str, schema: str | None, online: bool
) -> None:
    q = _named(pg, table, column, schema)
    run_op(
        pg,
        lambda op: op.alter_ulid_storage(
            table, column, from_storage="text", to_storage="native", schema=schema, online=online
        ),
    )
    assert scalar(pg, f"SELECT count(DISTINCT {_q(column)}) FROM {q}") == 10
    run_op(
        pg,
        lambda op: op.add_ulid_column(table, "New Id", "created_at", schema=schema, online=online),
    )
    assert scalar(pg, f'SELECT count(DISTINCT "New Id") FROM {q}') == 20
    run_op(pg, lambda op: op.drop_ulid_column(table, "New Id", schema=schema))
    run_op(
        pg, lambda op: op.convert_primary_key_to_ulid(table, from_time="created_at", schema=schema)
    )
    assert scalar(pg, f"SELECT count(DISTINCT id) FROM {q}") == 20
    run_op(pg, lambda op: op.restore_legacy_primary_key(table, schema=schema))
    assert scalar(pg, f"SELECT sum(id) FROM {q}") == 210
    columns = rows(
        pg,
        "SELECT column_name FROM information_schema.columns WHERE table_name = :t "
        "ORDER BY column_name",
        t=table,
    )
    assert sorted(c for (c,) in columns) == sorted(["id", "created_at", column])


# -- the session and other sessions ------------------------------------------------------


def _hold_a_snapshot_past(engine: Engine, statement: str, hold: float) -> _sessions.Release:
    """A reader holding a snapshot until ``statement`` has waited on a lock ``hold`` s.

    A concurrent index build waits for every older snapshot, whoever holds it.
    """
    return _sessions.hold(
        engine,
        "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
        "SELECT 1",
        end="rollback",
        like=statement + "%",
        after=hold,
        bound=60,
    )


def test_a_database_statement_timeout_does_not_cancel_the_concurrent_build(pg: Engine) -> None:
    # The build waits for a reader's older snapshot longer than the database's
    # statement_timeout: it was cancelled, its index left INVALID, on every rerun.
    _table(pg)
    database = scalar(pg, "SELECT current_database()")
    with pg.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f'ALTER DATABASE "{database}" SET statement_timeout = 300')
    try:
        reader = _hold_a_snapshot_past(pg, "CREATE UNIQUE INDEX CONCURRENTLY", 0.6)
        try:
            run_op(pg, lambda op: op.add_ulid_column(TABLE, "public_id", "created_at", online=True))
        finally:
            reader.join()
    finally:
        with pg.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f'ALTER DATABASE "{database}" RESET statement_timeout')
    assert rows(
        pg,
        "SELECT i.relname, x.indisvalid FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        f"WHERE x.indrelid = '{TABLE}'::regclass AND i.relname = 'uq_adv_t_public_id'",
    ) == [("uq_adv_t_public_id", True)]


@pytest.mark.parametrize("how", ["online", "offline"])
def test_key_conversion_keeps_the_not_null_names_there_and_back(
    pg: Engine, tmp_path: Path, how: str
) -> None:
    # A referencing column is dropped and its shadow renamed into place: its
    # NOT NULL came back as adv_child_parent_id_not_null (online, then offline).
    if _server_version(pg) < 18:
        pytest.skip("NOT NULL is a named constraint from PostgreSQL 18")
    execute(
        pg,
        f"CREATE TABLE {TABLE} (id INT CONSTRAINT id_must NOT NULL PRIMARY KEY, "
        "created_at TIMESTAMPTZ NOT NULL DEFAULT now())",
        f"INSERT INTO {TABLE} (id) SELECT generate_series(1, 5)",
        "CREATE TABLE adv_child (id INT PRIMARY KEY, parent_id INT CONSTRAINT pid_must "
        f"NOT NULL REFERENCES {TABLE} (id))",
        "INSERT INTO adv_child SELECT g, g FROM generate_series(1, 5) g",
    )
    names = (
        "SELECT a.attname, c.conname FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = "
        "c.conrelid AND a.attnum = c.conkey[1] WHERE c.contype = 'n' AND c.conrelid = "
        "to_regclass(:t) AND c.conname LIKE '%must' ORDER BY 1"
    )

    def run(call: str, online: Callable[[Any], object]) -> None:
        if how == "online":
            run_op(pg, online)
            return
        execute(pg, f"DROP TABLE IF EXISTS {VERSION_TABLE}")
        where = tmp_path / call.split("(")[0]
        done = _clients.psql(pg, alembic_sql(pg, where, call))
        assert done.returncode == 0, done.stderr[-2000:]

    run(
        f'convert_primary_key_to_ulid("{TABLE}", from_time="created_at")',
        lambda op: op.convert_primary_key_to_ulid(TABLE, from_time="created_at"),
    )
    assert rows(pg, names, t="adv_child") == [("parent_id", "pid_must")]
    assert rows(pg, names, t=TABLE) == [("legacy_id", "id_must")]
    run(
        f'restore_legacy_primary_key("{TABLE}")',
        lambda op: op.restore_legacy_primary_key(TABLE),
    )
    assert rows(pg, names, t="adv_child") == [("parent_id", "pid_must")]
    assert rows(pg, names, t=TABLE) == [("id", "id_must")]


def _writer_in_the_next_batch(
    engine: Engine, row: int
) -> tuple[Callable[[object], None], list[_sessions.Release]]:
    """A progress callback: after the first batch a writer locks ``row`` (in the next
    batch) and commits once the op's batch waits for it."""
    threads: list[_sessions.Release] = []

    def progress(_: object) -> None:
        if threads:
            return
        update = f"UPDATE {TABLE} SET created_at = created_at WHERE id = {row}"
        threads.append(_sessions.hold(engine, update, bound=60))

    return progress, threads


@pytest.mark.parametrize("op", ["add", "storage"])
def test_a_repeatable_read_database_default_and_a_writer_in_the_batch(pg: Engine, op: str) -> None:
    # Under REPEATABLE READ a batch that waited for a writer's row lock fails
    # ("could not serialize access"), on every rerun while writers write.
    _table(pg)
    database = scalar(pg, "SELECT current_database()")
    progress, threads = _writer_in_the_next_batch(pg, 8)
    with pg.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(
            f"ALTER DATABASE \"{database}\" SET default_transaction_isolation = 'repeatable read'"
        )
    try:
        if op == "add":
            run_op(
                pg,
                lambda o: o.add_ulid_column(
                    TABLE, "public_id", "created_at", online=True, batch_size=5, progress=progress
                ),
            )
        else:
            run_op(pg, _to_native(online=True, batch_size=5, progress=progress))
    finally:
        for thread in threads:
            thread.join()
        with pg.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f'ALTER DATABASE "{database}" RESET default_transaction_isolation')
    assert threads, "the writer never ran: the test proves nothing"
    column, kind = ("public_id", "uuid") if op == "add" else ("ref", "uuid")
    assert rows(
        pg,
        f"SELECT count({column}), count(DISTINCT {column}), "
        f"pg_typeof(min({column}::text)::{kind})::text FROM {TABLE}",
    ) == [(20, 20 if op == "add" else 10, "uuid")]


# -- drop_ulid_column --------------------------------------------------------------------

USERS = {
    # PL/pgSQL is not in pg_depend: the drop ran, then every INSERT failed
    "trigger": (
        "CREATE FUNCTION adv_f() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "NEW.n := length(NEW.public_id::text); RETURN NEW; END $$",
        f"CREATE TRIGGER adv_tr BEFORE INSERT ON {TABLE} FOR EACH ROW EXECUTE FUNCTION adv_f()",
    ),
    # the server refused the DROP COLUMN, after the unique constraint's drop
    "view": (f"CREATE VIEW adv_v AS SELECT id, public_id FROM {TABLE}",),
}


@pytest.mark.parametrize("user", sorted(USERS))
def test_drop_refuses_a_column_a_trigger_or_view_names(pg: Engine, user: str) -> None:
    _table(pg, f"ALTER TABLE {TABLE} ADD n INT")
    run_op(pg, lambda op: op.add_ulid_column(TABLE, "public_id", "created_at"))
    execute(pg, *USERS[user])
    with refused_before_ddl(pg, f"named by the {user} adv_"):
        run_op(pg, lambda op: op.drop_ulid_column(TABLE, "public_id"))
    execute(pg, "DROP VIEW IF EXISTS adv_v", f"DROP TRIGGER IF EXISTS adv_tr ON {TABLE}")
    run_op(pg, lambda op: op.drop_ulid_column(TABLE, "public_id"))
    execute(pg, f"INSERT INTO {TABLE} (id, ref) VALUES (99, '01ARZ3NDEKTSV4RRFFQ69G5FAV')")


@pytest.mark.parametrize("user", sorted(USERS))
def test_the_drop_script_refuses_a_column_a_trigger_or_view_names(
    pg: Engine, tmp_path: Path, user: str
) -> None:
    # The --sql script dropped it all the same (the view: the server refused
    # the DROP COLUMN, after the unique constraint's drop).
    _table(pg, f"ALTER TABLE {TABLE} ADD n INT")
    run_op(pg, lambda op: op.add_ulid_column(TABLE, "public_id", "created_at"))
    execute(pg, *USERS[user])
    script = alembic_sql(pg, tmp_path, f'drop_ulid_column("{TABLE}", "public_id")')
    before = rows(pg, f"SELECT * FROM {TABLE} ORDER BY id")
    done = _clients.psql(pg, script)
    assert done.returncode != 0
    assert f"adv_t.public_id is named by the {user} adv_" in done.stderr, done.stderr[-2000:]
    assert rows(pg, f"SELECT * FROM {TABLE} ORDER BY id") == before
    assert scalar(pg, "SELECT count(*) FROM pg_constraint WHERE conname = 'uq_adv_t_public_id'")
    execute(pg, "DROP VIEW IF EXISTS adv_v", f"DROP TRIGGER IF EXISTS adv_tr ON {TABLE}")
    done = _clients.psql(pg, script)
    assert done.returncode == 0, done.stderr[-2000:]
    assert rows(
        pg,
        "SELECT attname FROM pg_attribute WHERE attrelid = :t ::regclass AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum",
        t=TABLE,
    ) == [("id",), ("created_at",), ("ref",), ("n",)]


# -- the offline scripts refuse the same -------------------------------------------------

OFFLINE = {
    "storage with a rule": (
        RULE,
        f'alter_ulid_storage("{TABLE}", "ref", from_storage="text", to_storage="native", '
        "online=True)",
        "rule r_adv on adv_t",
    ),
    "key with a rule": (
        RULE,
        f'convert_primary_key_to_ulid("{TABLE}", from_time="created_at")',
        "rule r_adv on adv_t",
    ),
}


@pytest.mark.parametrize("case", sorted(OFFLINE))
def test_the_offline_script_refuses_before_any_change(
    pg: Engine, tmp_path: Path, case: str
) -> None:
    ddl, call, named = OFFLINE[case]
    _table(pg, *ddl)
    script = alembic_sql(pg, tmp_path, call)
    before = rows(pg, f"SELECT * FROM {TABLE} ORDER BY id")
    done = _clients.psql(pg, script)
    assert done.returncode != 0
    assert named in done.stderr, done.stderr[-2000:]
    assert rows(pg, f"SELECT * FROM {TABLE} ORDER BY id") == before
    assert rows(
        pg,
        "SELECT attname FROM pg_attribute WHERE attrelid = :t ::regclass AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum",
        t=TABLE,
    ) == [("id",), ("created_at",), ("ref",)]


def test_online_add_refuses_a_constraint_name_another_relation_has(pg: Engine) -> None:
    # Index names are the schema's: the build failed after the whole fill.
    _table(pg, "CREATE TABLE adv_log (x INT)", "CREATE INDEX uq_adv_t_public_id ON adv_log (x)")
    with refused_before_ddl(pg, "uq_adv_t_public_id of the unique constraint is taken"):
        run_op(pg, lambda op: op.add_ulid_column(TABLE, "public_id", "created_at", online=True))
    run_op(
        pg,
        lambda op: op.add_ulid_column(
            TABLE, "public_id", "created_at", online=True, constraint_name="uq_adv_public"
        ),
    )
    assert scalar(pg, f"SELECT count(DISTINCT public_id) FROM {TABLE}") == 20


def test_online_swap_refuses_an_index_name_another_relation_has(pg: Engine) -> None:
    # ix_ref is built again as ix_ref__ulid: the build was skipped, and the swap
    # refused after the whole copy ("run the op again"), on every rerun.
    _table(
        pg,
        f"CREATE INDEX ix_ref ON {TABLE} (ref)",
        "CREATE TABLE adv_log (x INT)",
        "CREATE INDEX ix_ref__ulid ON adv_log (x)",
    )
    with refused_before_ddl(pg, "ix_ref is built again as ix_ref__ulid"):
        run_op(pg, _to_native(online=True))
    execute(pg, "ALTER INDEX ix_ref__ulid RENAME TO adv_log_x")
    run_op(pg, _to_native(online=True))
    assert rows(
        pg,
        "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = :t ::regclass "
        "AND NOT indisprimary",
        t=TABLE,
    ) == [("ix_ref",)]


# -- the one-transaction storage op ------------------------------------------------------

READERS = {
    # PostgreSQL refused the ALTER ... TYPE (its own error, after the op read the column)
    "view": (f"CREATE VIEW adv_v AS SELECT id, ref FROM {TABLE}",),
    "rule": RULE,
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_one_transaction_storage_refuses_a_column_a_view_or_rule_reads(
    pg: Engine, tmp_path: Path, reader: str
) -> None:
    _table(pg, *READERS[reader])
    named = f"adv_t.ref is read by the {reader} "
    with refused_before_ddl(pg, named):
        run_op(pg, _to_native())
    script = alembic_sql(
        pg,
        tmp_path,
        f'alter_ulid_storage("{TABLE}", "ref", from_storage="text", to_storage="native", '
        "nullable=False)",
    )
    before = rows(pg, f"SELECT * FROM {TABLE} ORDER BY id")
    done = _clients.psql(pg, script)
    assert done.returncode != 0
    assert named in done.stderr, done.stderr[-2000:]
    assert rows(pg, f"SELECT * FROM {TABLE} ORDER BY id") == before
    assert (
        scalar(
            pg,
            f"SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            f"WHERE attrelid = '{TABLE}'::regclass AND attname = 'ref'",
        )
        == "character(26)"
    )
    execute(pg, "DROP VIEW IF EXISTS adv_v", f"DROP RULE IF EXISTS r_adv ON {TABLE}")
    run_op(pg, _to_native())
    assert scalar(pg, f"SELECT pg_typeof(ref)::text FROM {TABLE} LIMIT 1") == "uuid"
    done = _clients.psql(pg, script)  # converted already: a notice, nothing else
    assert done.returncode == 0, done.stderr[-2000:]


def test_one_transaction_uuid7_storage_refuses_a_column_a_view_reads(
    pg: Engine, tmp_path: Path
) -> None:
    execute(
        pg,
        f"CREATE TABLE {TABLE} (id INT PRIMARY KEY, ref TEXT NOT NULL)",
        f"INSERT INTO {TABLE} SELECT g, gen_random_uuid()::text FROM generate_series(1, 5) g",
        f"CREATE VIEW adv_v AS SELECT id, ref FROM {TABLE}",
    )
    call = f'alter_uuid7_storage("{TABLE}", "ref", from_storage="text", to_storage="native"'
    with refused_before_ddl(pg, "alter_uuid7_storage: adv_t.ref is read by the view adv_v"):
        run_op(
            pg,
            lambda op: op.alter_uuid7_storage(
                TABLE, "ref", from_storage="text", to_storage="native"
            ),
        )
    done = _clients.psql(pg, alembic_sql(pg, tmp_path, call + ", nullable=False)"))
    assert done.returncode != 0
    assert "adv_t.ref is read by the view adv_v" in done.stderr, done.stderr[-2000:]
    assert scalar(pg, f"SELECT pg_typeof(ref)::text FROM {TABLE} LIMIT 1") == "text"
