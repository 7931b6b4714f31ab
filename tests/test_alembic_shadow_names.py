"""The names of shadow columns and indexes: one function, online and in the scripts.

Online the ops named a long shadow with SHA-1, the offline scripts with MD5
(PostgreSQL's key conversion refused it instead): a rerun of one did not find
what the other built. Now ``_names.shadow_name`` is the one rule, and its SQL
twins are checked against it on the real servers, for generated names.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

import _databases
from conftest import Backend, private_engine
from sqlalchemy_ulid.alembic._names import (
    legacy_shadow_name,
    resumed_name,
    shadow_name,
    shadow_name_mariadb,
    shadow_name_pg,
)
from test_alembic_primary_key import VERSION_TABLE
from test_alembic_primary_key_offline_postgresql import _catalog, _ok, _online, _project, _script

#: Letters of one to four bytes, a quote, a percent, a backslash.
_ALPHABET = "abcxyz_09'%\\éßЖ中𝄞"


def _names(seed: int, count: int = 60) -> list[str]:
    """Names from 1 to 70 bytes, many around the 57-64 byte edges."""
    rng = random.Random(seed)
    names = []
    while len(names) < count:
        size = rng.choice([rng.randint(1, 70), rng.randint(54, 66)])
        name = ""
        while len((name + "x").encode()) <= size:
            name += rng.choice(_ALPHABET)
        if name:
            names.append(name)
    return names


def _literal(text: str, backslashes: bool) -> str:
    text = text.replace("'", "''")
    return "'" + (text.replace("\\", "\\\\") if backslashes else text) + "'"


@pytest.mark.parametrize("database", ["postgresql", "mysql"])
@pytest.mark.parametrize("suffix", ["__ulid", "__legacy"])
def test_the_scripts_name_a_shadow_as_the_online_ops_do(
    backends: dict[str, Backend], database: str, suffix: str
) -> None:
    limit = 63 if database == "postgresql" else 64
    with private_engine(backends[database]) as engine, engine.connect() as conn:
        for name in _names(seed=len(suffix)):
            if database == "postgresql":
                sql = shadow_name_pg(_literal(name, False), suffix)
            else:
                sql = shadow_name_mariadb(_literal(name, True), suffix)
            found = conn.exec_driver_sql(f"SELECT {sql.replace('%', '%%')}").scalar()
            expected = shadow_name(name, suffix, limit)
            assert found == expected, name
            assert len(expected.encode()) <= limit


def test_a_run_begun_under_the_old_sha1_name_goes_on_under_it() -> None:
    dialect = sa.create_engine("postgresql+psycopg://").dialect
    long = "a_referencing_column_whose_name_is_far_too_long_for_a_suffix_"
    new = shadow_name(long, "__ulid", 63)
    old = legacy_shadow_name(long, "__ulid", dialect)
    assert new != old
    assert old.startswith(long[:40])
    assert resumed_name(new, old, {"id", old}) == old  # only the old one is there
    assert resumed_name(new, old, {"id"}) == new  # a new run
    assert resumed_name(new, old, {"id", old, new}) == new
    short = shadow_name("customer_id", "__ulid", 63)
    assert short == legacy_shadow_name("customer_id", "__ulid", dialect) == "customer_id__ulid"


# -- the offline key conversion on PostgreSQL takes a long column name -----------------

_LONG = "customer_reference_with_a_name_long_enough_to_need_a_hash_0123"  # 63 bytes


_drop = _databases.dropper(
    "pk_customer_notes", "pk_customers", VERSION_TABLE, "ulid_key_conversions"
)


def _seed(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE pk_customers (id int PRIMARY KEY, created_at timestamp NOT NULL)"
        )
        conn.exec_driver_sql(
            f"CREATE TABLE pk_customer_notes (id int PRIMARY KEY, {_LONG} int "
            "REFERENCES pk_customers (id))"
        )
        conn.exec_driver_sql("INSERT INTO pk_customers VALUES (1, '2024-01-01'), (2, '2024-01-02')")
        conn.exec_driver_sql("INSERT INTO pk_customer_notes VALUES (1, 1), (2, 2), (3, NULL)")


@pytest.fixture
def pg(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["postgresql"], _drop) as engine:
        yield engine


def test_offline_key_conversion_converts_a_column_whose_shadow_needs_a_hash(
    pg: Engine, tmp_path: Path
) -> None:
    # The script refused it ('longer than PostgreSQL allows: run this migration online').
    _seed(pg)
    config = _project(tmp_path, pg)
    _ok(pg, _script(config, "upgrade"))
    offline = _catalog(pg)
    with pg.connect() as conn:
        joined = conn.exec_driver_sql(
            f"SELECT n.id, c.legacy_id FROM pk_customer_notes n "
            f"LEFT JOIN pk_customers c ON c.id = n.{_LONG} ORDER BY n.id"
        ).all()
    assert [tuple(r) for r in joined] == [(1, 1), (2, 2), (3, None)]
    # The online op, on a twin, ends in the same schema.
    _drop(pg)
    _seed(pg)
    config = _project(tmp_path, pg)
    _online(config, pg, "upgrade")
    assert _catalog(pg) == offline
