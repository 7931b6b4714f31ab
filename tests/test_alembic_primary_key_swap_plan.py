"""The key conversion's swap is a list of engine steps, and it sends exactly them.

``_primary_key._phases.swap_steps`` turns the conversion's plan into
:class:`~sqlalchemy_ulid.alembic._plan.step.Step` objects: each its DDL and
a guard in SQL from the database's catalog (``alembic/<database>/catalog.py``).
Golden: the DDL the online op sends in its swap is the steps' statements, in
order; and once it finished every guard says "done", so that a rerun of the
steps changes nothing (a guard that stayed true would run its DDL again).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.engine import Engine

import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from conftest import Backend, private_engine, recording
from sqlalchemy_ulid.alembic._primary_key._phases import swap_steps
from sqlalchemy_ulid.alembic._primary_key._plan import Plan, build_plan
from test_alembic_primary_key import _drop, _seed

#: What the prepare phase sends before the swap: the shadow columns.
_PREPARE = "ADD COLUMN"


@pytest.fixture(params=["postgresql", "mysql"])
def server(request: pytest.FixtureRequest, backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends[request.param], _drop) as engine:
        yield engine


def _ddl(statements: list[str]) -> list[str]:
    starts = ("ALTER TABLE", "CREATE INDEX", "CREATE UNIQUE INDEX", "DROP INDEX", "COMMENT ON")
    return [s for s in statements if s.lstrip().upper().startswith(starts)]


def _plan(engine: Engine, direction: str) -> Plan:
    with engine.connect() as conn:
        return build_plan(
            conn,
            "pk_customers",
            direction=direction,  # type: ignore[arg-type]
            legacy_id="legacy_id",
            schema=None,
            from_time="created_at" if direction == "ulid" else None,
        )


def _op(engine: Engine, name: str, **options: object) -> None:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn)
        with context.begin_transaction():
            getattr(Operations(context), name)("pk_customers", **options)


def _check(engine: Engine, plan: Plan, sent: list[str]) -> None:
    with engine.connect() as conn:
        steps = swap_steps(conn, plan)
        expected = [s for step in steps for s in step.statements]
        left = [
            step.label
            for step in steps
            if conn.exec_driver_sql(
                f"SELECT CASE WHEN ({step.guard}) THEN 1 ELSE 0 END".replace("%", "%%")
            ).scalar()
        ]
    ddl = _ddl(sent)
    assert len(expected) > 10
    assert ddl[len(ddl) - len(expected) :] == expected
    assert all(_PREPARE in s.upper() for s in ddl[: len(ddl) - len(expected)])
    assert left == []


def test_the_swap_sends_its_steps_both_ways(server: Engine) -> None:
    _seed(server)
    plan = _plan(server, "ulid")
    with recording(server) as sent:
        _op(server, "convert_primary_key_to_ulid", from_time="created_at")
    _check(server, plan, sent)

    plan = _plan(server, "legacy")
    with recording(server) as sent:
        _op(server, "restore_legacy_primary_key")
    _check(server, plan, sent)
    with server.connect() as conn:
        assert "legacy_id" not in {c["name"] for c in sa.inspect(conn).get_columns("pk_customers")}
