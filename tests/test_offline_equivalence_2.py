"""The primary-key ops: online and offline end the same, as ``test_offline_equivalence``.

``convert_primary_key_to_ulid`` and ``restore_legacy_primary_key``: the
checks of ``test_offline_equivalence`` (black box, through a real Alembic
project and the real ``psql`` / ``mariadb`` clients), on a key referenced by
a foreign key from another table and by a self-reference. The referencing
column's name is long enough that its shadow column (``<column>__ulid``)
passes the server's identifier limit, and the foreign key's and the index's
names are at the limit. The new ids are compared by their time and rank (the
random part differs between two runs), the restored keys exactly.

Across modes the docs promise a refusal, not a resume: a script stopped
before its swap is finished by the script (the online op refuses it), and
an online run stopped part-way by the online op (the script refuses it).
Each refusal must change nothing.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Engine

import _equivalence as eq
import _script_cuts as cuts
from _db_state import diff, reset
from conftest import Backend

CUSTOMERS, ORDERS = "eqv_customers", "eqv_orders"
DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql")
BASE = datetime(2024, 5, 1, 9, 30, 0)
#: The server's identifier limit, in bytes (PostgreSQL) or characters (MariaDB).
LIMIT = {"postgresql": 63, "mysql": 64}


def _name(prefix: str, length: int) -> str:
    return (prefix + "_" + "x" * length)[:length]


def _tables(backend: str) -> tuple[str, Callable[[Engine], None]]:
    """The referencing column's name, and how to make the two tables with their rows."""
    limit = LIMIT[backend]
    column = _name("customer", limit - 3)
    rng = random.Random(cuts.SEED)
    moment, customers = BASE, []
    for key in range(1, 61):
        if rng.random() >= 0.2:  # one in five shares the time of the customer before
            moment += timedelta(milliseconds=rng.randint(1, 40), microseconds=rng.randint(0, 999))
        referrer = rng.randint(1, key - 1) if key > 1 and rng.random() < 0.5 else None
        customers.append(
            {"id": key, "created_at": moment, "name": f"c{key}", "referrer_id": referrer}
        )
    orders = [
        {"id": key, column: rng.randint(1, 60), "note": f"n{key % 9}"} for key in range(1, 151)
    ]

    def create(engine: Engine) -> None:
        metadata = sa.MetaData()
        customer_table = sa.Table(
            CUSTOMERS,
            metadata,
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("created_at", DATETIME, nullable=False),
            sa.Column("name", sa.String(20), nullable=False),
            sa.Column(
                "referrer_id",
                sa.Integer,
                sa.ForeignKey(f"{CUSTOMERS}.id", name="fk_eqv_customers_referrer"),
                nullable=True,
            ),
        )
        order_table = sa.Table(
            ORDERS,
            metadata,
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column(
                column,
                sa.Integer,
                sa.ForeignKey(f"{CUSTOMERS}.id", name=_name("fk_eqv_orders_customer", limit)),
                nullable=False,
                comment="who's ordering",
            ),
            sa.Column("note", sa.String(20), nullable=False),
            sa.Index(_name("ix_eqv_orders_customer", limit), column, "note"),
        )
        with engine.begin() as conn:
            metadata.create_all(conn)
            conn.execute(customer_table.insert(), customers)
            conn.execute(order_table.insert(), orders)

    return column, create


def _case(backend: str, action: str) -> eq.Case:
    column, create = _tables(backend)
    converted = [
        f"SELECT c.legacy_id, c.created_at, c.name, c.id, RANK() OVER (ORDER BY c.id), "
        f"r.legacy_id FROM {CUSTOMERS} c LEFT JOIN {CUSTOMERS} r ON r.id = c.referrer_id "
        "ORDER BY c.legacy_id",
        f"SELECT o.id, o.note, c.legacy_id FROM {ORDERS} o "
        f"JOIN {CUSTOMERS} c ON c.id = o.{column} ORDER BY o.id",
    ]
    restored = [
        f"SELECT id, created_at, name, referrer_id FROM {CUSTOMERS} ORDER BY id",
        f"SELECT id, {column}, note FROM {ORDERS} ORDER BY id",
    ]
    return eq.Case(
        backend,
        "convert_primary_key_to_ulid" if action == "upgrade" else "restore_legacy_primary_key",
        [CUSTOMERS, ORDERS],
        create,
        f"op.convert_primary_key_to_ulid({CUSTOMERS!r}, from_time='created_at', timezone=UTC, "
        "batch_size=25)",
        converted if action == "upgrade" else restored,
        fresh=action == "upgrade",
        down=f"op.restore_legacy_primary_key({CUSTOMERS!r}, batch_size=25)",
        action=action,
    )


CASES = [
    _case(backend, action)
    for backend in ("postgresql", "mysql")
    for action in ("upgrade", "downgrade")
] + [
    eq.in_schema(_case("postgresql", action), "eqv_elsewhere")
    for action in ("upgrade", "downgrade")
]
#: Defects found: (case name, test) -> a one-line description.
DEFECTS: dict[tuple[str, str], eq.Defect] = {}


def cases() -> list[Any]:
    return [case.param() for case in CASES]


@pytest.fixture
def run(
    request: pytest.FixtureRequest, backends: dict[str, Backend], tmp_path: Path
) -> Iterator[eq.Run]:
    with eq.running(request, backends, tmp_path, DEFECTS) as made:
        yield made


@pytest.mark.parametrize("run", cases(), indirect=True)
def test_online_run_and_offline_script_end_the_same(run: eq.Run) -> None:
    eq.check_same(run)


@pytest.mark.parametrize("run", cases(), indirect=True)
def test_the_script_run_whole_a_second_time_changes_nothing(run: eq.Run) -> None:
    eq.check_second_run(run)


@pytest.mark.parametrize("run", cases(), indirect=True)
def test_the_script_stopped_after_any_statement_then_rerun_ends_as_a_clean_run(
    run: eq.Run,
) -> None:
    eq.check_cuts(run)


@pytest.mark.parametrize("run", cases(), indirect=True)
def test_a_script_stopped_then_the_online_op_refuses_or_finishes_it(run: eq.Run) -> None:
    eq.check_cross(run, "offline", may_refuse=True)


@pytest.mark.parametrize("run", cases(), indirect=True)
def test_an_online_run_stopped_then_the_script_refuses_or_finishes_it(run: eq.Run) -> None:
    eq.check_cross(run, "online", may_refuse=True)


@pytest.mark.parametrize("run", [c for c in cases() if "restore" in str(c.id)], indirect=True)
def test_the_downgrade_script_after_the_upgrade_script_gives_back_the_original_tables(
    run: eq.Run,
) -> None:
    reset(run.engine, run.baseline, run.case.schema)
    run.case.create(run.engine)
    original = run.state()
    project = eq.Project(run.tmp_path / "round", run.engine, run.case.up, run.case.down)
    project.online("upgrade", "e0")
    eq.applied(run.engine, project.script("upgrade"), "the upgrade script")
    eq.applied(run.engine, project.script("downgrade"), "the downgrade script")
    after = run.state()
    # A referencing column comes back last (a new column took its place): order aside.
    assert _unordered(after) == _unordered(original), (
        "original (A), after up and down (B):\n" + diff(original, after)
    )


def _unordered(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with each table's columns in name order (lines of MariaDB's SHOW CREATE)."""
    out = dict(state)
    for table, shape in state.items():
        if isinstance(shape, dict):
            out[table] = {
                **shape,
                **({"columns": sorted(shape["columns"])} if "columns" in shape else {}),
                **(
                    {"create": sorted(line.rstrip(",") for line in shape["create"].splitlines())}
                    if "create" in shape
                    else {}
                ),
            }
    return out
