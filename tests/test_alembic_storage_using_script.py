"""The one-transaction storage op's ``--sql`` script on PostgreSQL refuses what online refuses.

The script is one ``DO`` block that reads the column as it runs (the
twins of online and offline, their reruns and stops are in
``test_offline_equivalence.py``). Here, the column's DEFAULT: online
refuses one that is not a literal id before any change, and so must the
script, with the same meaning, leaving the column as it was; a literal id
is carried. A foreign key on the column is refused as online refuses it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.engine import Engine

import _clients
import _databases
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _offline_scripts import op_sql
from conftest import Backend, private_engine
from sqlalchemy_ulid import ULID

TABLE = "using_items"
PARENT = "using_parents"

#: (op, the column's type, from storage, to storage, a DEFAULT online refuses)
REFUSED = [
    # not a literal
    ("alter_ulid_storage", "char(26)", "text", "auto", "upper('01arz3ndektsv4rrffq69g5fav')"),
    # a literal that is not a ULID
    ("alter_ulid_storage", "char(26)", "text", "auto", "'not-a-ulid'"),
    # a uuid of version 4, not 7
    ("alter_uuid7_storage", "uuid", "native", "text", "'9b2f6a52-6d1c-4c1e-9d2b-2a4f7e0c1d3e'"),
]


@pytest.fixture
def engine(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["postgresql"], _drop) as engine:
        yield engine


_drop = _databases.dropper(TABLE, PARENT)


def _column(engine: Engine) -> tuple[str, str | None]:
    with engine.connect() as conn:
        row = conn.execute(
            sa.text(
                "SELECT format_type(a.atttypid, a.atttypmod), pg_get_expr(d.adbin, d.adrelid) "
                "FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid "
                "AND d.adnum = a.attnum WHERE a.attrelid = CAST(:t AS regclass) "
                "AND a.attname = 'ref'"
            ),
            {"t": TABLE},
        ).one()
    return row[0], row[1]


def _script(op: str, from_storage: str, to_storage: str) -> str:
    return op_sql(
        "postgresql",
        lambda ops: getattr(ops, op)(
            TABLE, "ref", from_storage=from_storage, to_storage=to_storage, nullable=True
        ),
    )


def _online(engine: Engine, op: str, from_storage: str, to_storage: str) -> None:
    with engine.begin() as conn:
        getattr(Operations(MigrationContext.configure(conn)), op)(
            TABLE, "ref", from_storage=from_storage, to_storage=to_storage
        )


@pytest.mark.parametrize(("op", "type_", "from_storage", "to_storage", "default"), REFUSED)
def test_a_default_online_refuses_the_script_refuses_too(
    engine: Engine, op: str, type_: str, from_storage: str, to_storage: str, default: str
) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (id int PRIMARY KEY, ref {type_} DEFAULT {default})"
        )
    before = _column(engine)
    with pytest.raises(ValueError, match="cannot be carried to the new storage; nothing was"):
        _online(engine, op, from_storage, to_storage)
    assert _column(engine) == before
    done = _clients.psql(engine, _script(op, from_storage, to_storage), timeout=60)
    assert done.returncode != 0
    assert "cannot be carried to the new storage; nothing was changed" in done.stderr
    assert _column(engine) == before


def test_a_literal_default_is_carried_and_a_rerun_does_nothing(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (id int PRIMARY KEY, "
            "ref char(26) DEFAULT '01ARZ3NDEKTSV4RRFFQ69G5FAV')"
        )
    script = _script("alter_ulid_storage", "text", "auto")
    for _ in range(2):
        done = _clients.psql(engine, script, timeout=60)
        assert done.returncode == 0, done.stderr
        assert _column(engine) == (
            "uuid",
            f"'{ULID('01ARZ3NDEKTSV4RRFFQ69G5FAV').to_uuid()}'::uuid",
        )
    assert "is uuid storage already: nothing to do" in done.stderr


def test_a_foreign_key_on_the_column_is_refused_before_any_change(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE {PARENT} (ref char(26) PRIMARY KEY)")
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (id int PRIMARY KEY, ref char(26) REFERENCES {PARENT})"
        )
    before = _column(engine)
    with pytest.raises(ValueError, match="is used by foreign keys"):
        _online(engine, "alter_ulid_storage", "text", "auto")
    done = _clients.psql(engine, _script("alter_ulid_storage", "text", "auto"), timeout=60)
    assert done.returncode != 0
    assert "is used by foreign keys" in done.stderr
    assert _column(engine) == before
