"""The engine's state table reads the state tables of earlier releases.

A conversion begun by today's code (the key conversion's stored plan, the
online storage conversion's copy position) is found by
``_plan.state.read_legacy``, which the ported ops use to go on from it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from conftest import Backend, private_engine
from sqlalchemy_ulid.alembic._plan.state import read_legacy, read_state
from sqlalchemy_ulid.alembic._primary_key._fill import add_shadows
from sqlalchemy_ulid.alembic._primary_key._plan import build_plan
from sqlalchemy_ulid.alembic._primary_key._state import mark_done, save_state
from test_alembic_primary_key import (
    _check_ulids,
    _drop,  # noqa: F401  (the server fixture's clean-up)
)
from test_alembic_primary_key import _convert as _convert_pk
from test_alembic_primary_key import _seed as _seed_pk
from test_alembic_storage_online import _create, _run

ITEMS = "eng_legacy_items"


def test_a_key_conversion_in_flight_is_read(server: Engine) -> None:
    _seed_pk(server)
    with server.begin() as conn:
        plan = build_plan(
            conn, "pk_customers", direction="ulid", legacy_id="legacy_id", schema=None
        )
        save_state(conn, plan)
        mark_done(conn, plan, [], "prepare")
    with server.connect() as conn:
        found = read_legacy(conn)
        assert read_state(conn, "convert_primary_key_to_ulid", "pk_customers", None) is None
    assert [(s.op, s.target, s.source, s.step) for s in found] == [
        ("convert_primary_key_to_ulid", "pk_customers", "ulid_key_conversions", "prepare")
    ]


@pytest.fixture
def pg(backends: dict[str, Backend]) -> Iterator[Engine]:
    def drop(engine: Engine) -> None:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {ITEMS} CASCADE")
            conn.exec_driver_sql(
                "DO $$ BEGIN IF to_regclass('ulid_storage_conversions') IS NOT NULL THEN "
                f"DELETE FROM ulid_storage_conversions WHERE table_name = '{ITEMS}'; "
                "IF NOT EXISTS (SELECT 1 FROM ulid_storage_conversions) THEN "
                "DROP TABLE ulid_storage_conversions; END IF; END IF; END $$"
            )

    with private_engine(backends["postgresql"], drop) as engine:
        yield engine


def test_a_storage_conversion_in_flight_is_read(pg: Engine) -> None:
    _create(pg, ITEMS, "text", 3000)
    # As the previous release left a conversion killed inside its copy.
    with pg.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE ulid_storage_conversions (table_name TEXT NOT NULL, "
            "column_name TEXT NOT NULL, last_key TEXT, PRIMARY KEY (table_name, column_name))"
        )
        conn.exec_driver_sql(
            f"INSERT INTO ulid_storage_conversions VALUES ('{ITEMS}', 'ref', '1999')"
        )
    with pg.connect() as conn:
        found = [s for s in read_legacy(conn) if s.target == f"{ITEMS}.ref"]
    assert len(found) == 1
    assert found[0].op == "alter_ulid_storage"
    assert found[0].source == "ulid_storage_conversions"
    assert found[0].step == "copy:1999"
    # Today's op takes it over, finishes and forgets it.
    _run(pg, ITEMS, "text", "auto", online=True, batch_size=1000)
    with pg.connect() as conn:
        assert not [s for s in read_legacy(conn) if s.target == f"{ITEMS}.ref"]
        assert not sa.inspect(conn).has_table("ulid_storage_conversions")


#: What the stored plan of a foreign key or an index gained after the release
#: that wrote it (comments, NOT VALID, a unique constraint's index).
_ADDED_SINCE = ("comment", "validated", "constraint")


def test_a_key_conversion_stored_by_the_previous_release_resumes(server: Engine) -> None:
    """A plan stored without the fields added since (its JSON as that release wrote it)."""
    _seed_pk(server)
    with server.begin() as conn:
        plan = build_plan(
            conn,
            "pk_customers",
            direction="ulid",
            legacy_id="legacy_id",
            schema=None,
            from_time="created_at",
        )
        raw = json.loads(plan.to_json())
        for item in (*raw["foreign_keys"], *raw["indexes"]):
            for name in _ADDED_SINCE:
                item.pop(name, None)
        save_state(conn, plan)
        conn.execute(
            sa.text("UPDATE ulid_key_conversions SET plan = :plan WHERE name = 'pk_customers'"),
            {"plan": json.dumps(raw, sort_keys=True)},
        )
        add_shadows(conn, plan, 5.0)
        mark_done(conn, plan, [], "prepare")
    text = _convert_pk(server, from_time="created_at")
    assert text is not None
    assert "(done)" in text  # the stored plan, its prepare phase done, went on
    _check_ulids(server)
    with server.connect() as conn:
        assert not sa.inspect(conn).has_table("ulid_key_conversions")
