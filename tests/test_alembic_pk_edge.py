"""op.convert_primary_key_to_ulid on unusual schemas: refused before any change, or kept.

Each test here was a defect: a user's column named like the op's shadow, an
index on a referencing column with options the op cannot recreate, the
options of a referencing foreign key and the comment of its column, a table
name with ``%`` or a backtick, an empty ``legacy_id``. Real PostgreSQL and
MariaDB.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.engine import Engine

import _clients
import _databases
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _offline_scripts import run_online
from conftest import Backend, private_engine
from sqlalchemy_ulid.alembic import ConversionRefused
from test_alembic_primary_key_offline_postgresql import APP, _ok, _project, _script

TABLES = ("adv_kid", "adv_par", "ulid_key_conversions", "alembic_version_pk_test")


_drop = _databases.dropper(*TABLES)


@pytest.fixture(params=["postgresql", "mysql"])
def converting(request: pytest.FixtureRequest, backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends[request.param], _drop) as engine:
        yield engine


@pytest.fixture
def pg_converting(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["postgresql"], _drop) as engine:
        yield engine


@pytest.fixture
def maria_converting(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["mysql"], _drop) as engine:
        yield engine


def _convert(engine: Engine, table: str, **options: Any) -> None:
    """Run the op as `alembic upgrade` does."""
    run_online(engine, lambda op: op.convert_primary_key_to_ulid(table, **options))


def _columns(engine: Engine, table: str) -> list[str]:
    with engine.connect() as conn:
        return [c["name"] for c in sa.inspect(conn).get_columns(table)]


def _no_state(engine: Engine) -> bool:
    with engine.connect() as conn:
        return not sa.inspect(conn).has_table("ulid_key_conversions")


# -- a column named like one the op adds ---------------------------------------------


@pytest.mark.parametrize("legacy_id", ["legacy_id", "id__ulid"])
def test_a_user_column_named_like_the_shadow_is_refused(converting: Engine, legacy_id: str) -> None:
    with converting.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE adv_par (id int PRIMARY KEY, id__ulid varchar(20) NOT NULL)"
        )
        conn.exec_driver_sql("INSERT INTO adv_par VALUES (1, 'keep1'), (2, 'keep2')")
    with pytest.raises(ConversionRefused, match=r"adv_par already has a column 'id__ulid'"):
        _convert(converting, "adv_par", legacy_id=legacy_id)
    with converting.connect() as conn:
        rows = conn.exec_driver_sql("SELECT id, id__ulid FROM adv_par ORDER BY id").all()
    assert [tuple(r) for r in rows] == [(1, "keep1"), (2, "keep2")]
    assert _columns(converting, "adv_par") == ["id", "id__ulid"]
    assert _no_state(converting)


def test_a_referencing_table_with_a_column_named_like_its_shadow_is_refused(
    converting: Engine,
) -> None:
    with converting.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE adv_par (id int PRIMARY KEY)")
        conn.exec_driver_sql(
            "CREATE TABLE adv_kid (cid int PRIMARY KEY, par_id int REFERENCES adv_par (id), "
            "par_id__ulid varchar(20))"
        )
        conn.exec_driver_sql("INSERT INTO adv_par VALUES (1)")
        conn.exec_driver_sql("INSERT INTO adv_kid VALUES (1, 1, 'keep')")
    with pytest.raises(ConversionRefused, match=r"adv_kid already has a column 'par_id__ulid'"):
        _convert(converting, "adv_par")
    assert _columns(converting, "adv_par") == ["id"]
    assert _columns(converting, "adv_kid") == ["cid", "par_id", "par_id__ulid"]
    assert _no_state(converting)


def test_a_legacy_id_named_like_a_shadow_on_the_same_table_is_refused(
    converting: Engine,
) -> None:
    with converting.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE adv_par (id int PRIMARY KEY)")
    with pytest.raises(ConversionRefused, match=r"legacy_id='id__ulid'"):
        _convert(converting, "adv_par", legacy_id="id__ulid")
    assert _columns(converting, "adv_par") == ["id"]
    assert _no_state(converting)


# -- empty legacy_id ----------------------------------------------------------------


@pytest.mark.parametrize("legacy_id", ["", "  "])
def test_empty_legacy_id_refused_before_any_sql(converting: Engine, legacy_id: str) -> None:
    with converting.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE adv_par (id int PRIMARY KEY)")
        conn.exec_driver_sql("INSERT INTO adv_par VALUES (1), (2)")
    with converting.connect() as conn:
        context = MigrationContext.configure(conn)
        with pytest.raises(ValueError, match="legacy_id"), context.begin_transaction():
            Operations(context).convert_primary_key_to_ulid("adv_par", legacy_id=legacy_id)
    assert _columns(converting, "adv_par") == ["id"]
    assert _no_state(converting)


# -- indexes and foreign keys with options -------------------------------------------


def _kid_indexes(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'adv_kid'"
        ).all()
    return {name: definition for name, definition in rows}


@pytest.mark.parametrize(
    "index_sql",
    [
        "CREATE INDEX adv_kid_active ON adv_kid (par_id) WHERE active",
        "CREATE INDEX adv_kid_hash ON adv_kid USING hash (par_id)",
        "CREATE UNIQUE INDEX adv_kid_one_active ON adv_kid (par_id) WHERE active",
        "CREATE INDEX adv_kid_multi ON adv_kid (active DESC, par_id) INCLUDE (cid)",
        "CREATE INDEX adv_kid_desc ON adv_kid (par_id DESC NULLS LAST)",
        "CREATE INDEX adv_kid_expr ON adv_kid (par_id, (cid + 1))",
    ],
)
def test_an_index_the_op_cannot_recreate_is_refused_and_kept(
    pg_converting: Engine, index_sql: str
) -> None:
    with pg_converting.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE adv_par (id int PRIMARY KEY)")
        conn.exec_driver_sql(
            "CREATE TABLE adv_kid (cid int PRIMARY KEY, "
            "par_id int REFERENCES adv_par (id), active bool NOT NULL)"
        )
        conn.exec_driver_sql(index_sql)
        conn.exec_driver_sql("INSERT INTO adv_par VALUES (1), (2)")
        conn.exec_driver_sql(
            "INSERT INTO adv_kid VALUES (1, 1, true), (2, 1, false), (3, 1, false)"
        )
    name = index_sql.split()[3 if index_sql.startswith("CREATE UNIQUE") else 2]
    before = _kid_indexes(pg_converting)
    with pytest.raises(ConversionRefused, match=rf"index {name} on adv_kid"):
        _convert(pg_converting, "adv_par")
    assert _kid_indexes(pg_converting) == before
    assert _columns(pg_converting, "adv_kid") == ["cid", "par_id", "active"]
    assert _no_state(pg_converting)


_KID_INDEX_DEFS = (
    "SELECT i.relname, pg_get_indexdef(i.oid), obj_description(i.oid, 'pg_class') "
    "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
    "WHERE x.indrelid = 'adv_kid'::regclass AND NOT x.indisprimary ORDER BY 1"
)


@pytest.mark.parametrize(
    "index_sql",
    [
        "CREATE INDEX adv_kid_ff ON adv_kid (par_id) WITH (fillfactor = 70)",
        "CREATE UNIQUE INDEX adv_kid_nnd ON adv_kid (par_id, active) NULLS NOT DISTINCT "
        "WITH (fillfactor = 70)",
        # pg_get_constraintdef prints no storage parameters: neither way keeps them here.
        "ALTER TABLE adv_kid ADD CONSTRAINT adv_kid_uq UNIQUE NULLS NOT DISTINCT (par_id, cid)",
    ],
)
@pytest.mark.parametrize("mode", ["online", "offline"])
def test_storage_parameters_and_nulls_not_distinct_come_back_online_and_offline(
    pg_converting: Engine, tmp_path: Path, index_sql: str, mode: str
) -> None:
    """Online and the offline script both recreate the index as it was, both ways."""
    name = next(w for w in index_sql.split() if w.startswith("adv_kid_"))
    with pg_converting.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE adv_par (id int PRIMARY KEY)")
        conn.exec_driver_sql(
            "CREATE TABLE adv_kid (cid int PRIMARY KEY, "
            "par_id int REFERENCES adv_par (id), active bool NOT NULL)"
        )
        conn.exec_driver_sql(index_sql)
        if "CONSTRAINT" not in index_sql:
            conn.exec_driver_sql(f"COMMENT ON INDEX {name} IS 'kept, 100%%'")
        conn.exec_driver_sql("INSERT INTO adv_par VALUES (1), (2)")
        conn.exec_driver_sql("INSERT INTO adv_kid VALUES (1, 1, true), (2, 2, false)")
    with pg_converting.connect() as conn:
        before = conn.exec_driver_sql(_KID_INDEX_DEFS).all()
    assert [row[0] for row in before] == [name]
    assert ("WITH (fillfactor" in index_sql) == ("fillfactor" in before[0][1])
    if mode == "offline":
        config = _project(tmp_path, pg_converting, table="adv_par", up="legacy_id='legacy_id'")
        _ok(pg_converting, _script(config, "upgrade"))
    else:
        _convert(pg_converting, "adv_par")
    with pg_converting.connect() as conn:
        assert conn.exec_driver_sql(_KID_INDEX_DEFS).all() == before
        assert (
            conn.exec_driver_sql(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = 'adv_kid'::regclass AND attname = 'par_id'"
            ).scalar()
            != "integer"
        )
        if "NULLS NOT DISTINCT" in index_sql:
            assert "NULLS NOT DISTINCT" in before[0][1]
    if mode == "offline":
        _ok(pg_converting, _script(config, "downgrade"))
    else:
        with pg_converting.connect() as conn:
            context = MigrationContext.configure(conn)
            with context.begin_transaction():
                Operations(context).restore_legacy_primary_key("adv_par")
    with pg_converting.connect() as conn:
        assert conn.exec_driver_sql(_KID_INDEX_DEFS).all() == before
        assert conn.exec_driver_sql("SELECT cid, par_id FROM adv_kid ORDER BY cid").all() == [
            (1, 1),
            (2, 2),
        ]


def test_an_operator_class_of_the_new_type_is_refused_online_and_offline(
    pg_converting: Engine, tmp_path: Path
) -> None:
    """Recreated as the catalog prints it, it would not apply to the restored integer."""
    with pg_converting.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE adv_par (id int PRIMARY KEY)")
        conn.exec_driver_sql(
            "CREATE TABLE adv_kid (cid int PRIMARY KEY, par_id int REFERENCES adv_par (id))"
        )
        conn.exec_driver_sql("INSERT INTO adv_par VALUES (1), (2)")
        conn.exec_driver_sql("INSERT INTO adv_kid VALUES (1, 1), (2, 2)")
    _convert(pg_converting, "adv_par", storage="text")
    with pg_converting.begin() as conn:
        conn.exec_driver_sql("CREATE INDEX adv_kid_pat ON adv_kid (par_id bpchar_pattern_ops)")
        before = conn.exec_driver_sql(_KID_INDEX_DEFS).all()
    refusal = (
        "the index adv_kid_pat on adv_kid uses adv_kid.par_id with the operator class "
        "bpchar_pattern_ops, which this op does not recreate"
    )
    with pg_converting.connect() as conn:
        context = MigrationContext.configure(conn)
        with pytest.raises(ConversionRefused, match=refusal), context.begin_transaction():
            Operations(context).restore_legacy_primary_key("adv_par")
    assert _columns(pg_converting, "adv_kid") == ["cid", "par_id"]
    config = _project(tmp_path, pg_converting, table="adv_par")
    done = _clients.psql(pg_converting, _script(config, "downgrade"), app=APP)
    assert done.returncode != 0
    assert refusal in done.stderr
    assert _columns(pg_converting, "adv_kid") == ["cid", "par_id"]
    with pg_converting.connect() as conn:
        assert conn.exec_driver_sql(_KID_INDEX_DEFS).all() == before
    assert _no_state(pg_converting)


def test_a_descending_index_is_refused_on_mariadb(maria_converting: Engine) -> None:
    with maria_converting.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE adv_par (id int PRIMARY KEY)")
        conn.exec_driver_sql(
            "CREATE TABLE adv_kid (cid int PRIMARY KEY, par_id int, "
            "KEY adv_kid_desc (par_id DESC), FOREIGN KEY (par_id) REFERENCES adv_par (id))"
        )
    with pytest.raises(ConversionRefused, match=r"index adv_kid_desc on adv_kid .*DESC"):
        _convert(maria_converting, "adv_par")
    assert _columns(maria_converting, "adv_kid") == ["cid", "par_id"]
    assert _no_state(maria_converting)


def test_referencing_foreign_key_and_column_keep_their_options(pg_converting: Engine) -> None:
    with pg_converting.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE adv_par (id int PRIMARY KEY)")
        conn.exec_driver_sql(
            "CREATE TABLE adv_kid (cid int PRIMARY KEY, par_id int NOT NULL, "
            "CONSTRAINT adv_kid_fk FOREIGN KEY (par_id) REFERENCES adv_par (id) "
            "ON UPDATE CASCADE DEFERRABLE INITIALLY DEFERRED)"
        )
        conn.exec_driver_sql("COMMENT ON COLUMN adv_kid.par_id IS 'the parent''s 100%%'")
        conn.exec_driver_sql("INSERT INTO adv_par VALUES (1), (2)")
        conn.exec_driver_sql("INSERT INTO adv_kid VALUES (1, 1), (2, 2)")
    _convert(pg_converting, "adv_par")
    with pg_converting.connect() as conn:
        definition = conn.exec_driver_sql(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'adv_kid_fk'"
        ).scalar()
        comment = conn.exec_driver_sql(
            "SELECT col_description('adv_kid'::regclass, attnum) FROM pg_attribute "
            "WHERE attrelid = 'adv_kid'::regclass AND attname = 'par_id'"
        ).scalar()
    assert "ON UPDATE CASCADE DEFERRABLE INITIALLY DEFERRED" in str(definition), definition
    assert comment == "the parent's 100%"
    with pg_converting.connect() as conn:  # and back again
        context = MigrationContext.configure(conn)
        with context.begin_transaction():
            Operations(context).restore_legacy_primary_key("adv_par")
    with pg_converting.connect() as conn:
        assert (
            conn.exec_driver_sql(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'adv_kid_fk'"
            ).scalar()
            == definition
        )
        assert (
            conn.exec_driver_sql(
                "SELECT col_description('adv_kid'::regclass, attnum) FROM pg_attribute "
                "WHERE attrelid = 'adv_kid'::regclass AND attname = 'par_id'"
            ).scalar()
            == "the parent's 100%"
        )
        assert conn.exec_driver_sql("SELECT cid, par_id FROM adv_kid ORDER BY cid").all() == [
            (1, 1),
            (2, 2),
        ]


def test_referencing_column_keeps_its_comment_on_mariadb(maria_converting: Engine) -> None:
    with maria_converting.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE adv_par (id int PRIMARY KEY)")
        conn.exec_driver_sql(
            "CREATE TABLE adv_kid (cid int PRIMARY KEY, "
            "par_id int NOT NULL COMMENT 'the parent''s 100%%', "
            "FOREIGN KEY (par_id) REFERENCES adv_par (id))"
        )
        conn.exec_driver_sql("INSERT INTO adv_par VALUES (1), (2)")
        conn.exec_driver_sql("INSERT INTO adv_kid VALUES (1, 1), (2, 2)")
    _convert(maria_converting, "adv_par")
    with maria_converting.connect() as conn:
        info = {c["name"]: c for c in sa.inspect(conn).get_columns("adv_kid")}
    assert info["par_id"]["comment"] == "the parent's 100%"
    assert info["par_id"]["nullable"] is False


# -- names with % or ` ------------------------------------------------------------------


@pytest.fixture
def odd_names(converting: Engine) -> Iterator[tuple[Engine, str, str]]:
    server = converting
    parent, kid = "adv%par", "adv%par_kid"
    prep = server.dialect.identifier_preparer
    # quote() doubles % for the driver already.
    quoted_parent, quoted_kid = prep.quote(parent), prep.quote(kid)

    def drop() -> None:
        with server.begin() as conn:
            for name in ("ulid_key_conversions", quoted_kid, quoted_parent):
                conn.exec_driver_sql(f"DROP TABLE IF EXISTS {name}")

    drop()
    when = "timestamp" if server.dialect.name == "postgresql" else "datetime(6)"
    with server.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {quoted_parent} (id int PRIMARY KEY, created_at {when} NOT NULL)"
        )
        conn.exec_driver_sql(
            f"CREATE TABLE {quoted_kid} (id int PRIMARY KEY, p int REFERENCES {quoted_parent} (id))"
        )
        conn.exec_driver_sql(
            f"INSERT INTO {quoted_parent} VALUES (1, '2024-01-01'), (2, '2024-01-02')"
        )
        conn.exec_driver_sql(f"INSERT INTO {quoted_kid} VALUES (1, 1), (2, 2)")
    yield server, parent, kid
    drop()


def test_convert_a_table_whose_name_has_a_percent(odd_names: tuple[Engine, str, str]) -> None:
    engine, parent, kid = odd_names
    _convert(engine, parent, from_time="created_at")
    assert set(_columns(engine, kid)) == {"id", "p"}
    assert set(_columns(engine, parent)) == {"id", "created_at", "legacy_id"}
    with engine.connect() as conn:
        prep = engine.dialect.identifier_preparer
        joined = conn.exec_driver_sql(
            f"SELECT k.id, p.legacy_id FROM {prep.quote(kid)} k "
            f"JOIN {prep.quote(parent)} p ON p.id = k.p ORDER BY k.id"
        ).all()
    assert [tuple(r) for r in joined] == [(1, 1), (2, 2)]
    assert _no_state(engine)


_drop_backtick = _databases.dropper("ulid_key_conversions", "`adv``kid`", "`adv``par`")


@pytest.fixture
def backtick(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["mysql"], _drop_backtick) as engine:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE `adv``par` (id int PRIMARY KEY)")
            conn.exec_driver_sql(
                "CREATE TABLE `adv``kid` (id int PRIMARY KEY, p int REFERENCES `adv``par` (id))"
            )
            conn.exec_driver_sql("INSERT INTO `adv``par` VALUES (1), (2)")
            conn.exec_driver_sql("INSERT INTO `adv``kid` VALUES (1, 1), (2, 2)")
        yield engine


@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")
def test_mariadb_foreign_key_reflection_missed_is_refused(backtick: Engine) -> None:
    with pytest.raises(ConversionRefused, match=r"adv`kid"):
        _convert(backtick, "adv`par")
    with backtick.connect() as conn:
        kids = dict(conn.exec_driver_sql("SELECT id, p FROM `adv``kid`").all())
    assert _columns(backtick, "adv`par") == ["id"]
    assert kids == {1: 1, 2: 2}
    assert _no_state(backtick)
