"""The online run and the offline script of each op end the same (issue #31, "Done when").

Black box: a real Alembic project runs the op online, or writes its script
with ``alembic upgrade e0:e1 --sql`` for the real ``psql`` / ``mariadb``
client; only what the database holds afterwards is compared (every column,
type, nullability, DEFAULT, comment, constraint, index and trigger by the
catalog, the objects left in the schema, and every row). Twin runs use one
table name, one after the other, so hashed names must agree too: the names
are made long enough that the op's generated names (``uq_<table>_<column>``,
``<column>__ulid``, ``_<table>__new``) pass the server's limit.

This module: ``add_ulid_column`` / ``add_uuid7_column`` and
``alter_ulid_storage`` / ``alter_uuid7_storage``, ``online=True``, and the
storage ops' one-transaction scripts too, on PostgreSQL and MariaDB (and on
PostgreSQL 18 through CI's pg18 job: a defect found only there is expected
there only). ``test_offline_equivalence_2``: the primary-key ops.
For each: (1) online and offline end the same; (2) the script run whole a
second time changes nothing; (3) the script stopped after statement ``k``
(``k`` drawn by a seeded generator, printed), then run whole, ends as the
clean run; (4) a run stopped in one mode (the script
after statement ``k``; online, statement ``k`` failing) and finished in the
other ends the same: the add ops' docs say a run killed anywhere, online or
offline, is rerun from the start; the storage ops promise nothing across
modes, so there the other mode may refuse, changing nothing, and the first
mode must then finish. Defects found are strict expected failures
(``DEFECTS``), each naming what differs.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Engine

import _equivalence as eq
import _script_cuts as cuts
from conftest import Backend
from sqlalchemy_ulid import ULID

ROWS = 200
DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql")
BASE = datetime(2024, 3, 1, 8, 0, 0)
#: The server's identifier limit, in bytes (PostgreSQL) or characters (MariaDB).
LIMIT = {"postgresql": 63, "mysql": 64}


def _name(prefix: str, length: int) -> str:
    return (prefix + "_" + "x" * length)[:length]


# --- add_ulid_column / add_uuid7_column (online=True) -----------------------------------------


#: The time column's type, and its value for a moment (naive UTC).
TIMES: dict[str, tuple[sa.types.TypeEngine[Any], Callable[[datetime], Any]]] = {
    "naive": (DATETIME, lambda moment: moment),
    "aware": (
        sa.DateTime(timezone=True).with_variant(mysql.TIMESTAMP(fsp=6), "mysql"),
        lambda moment: moment.replace(tzinfo=timezone.utc),
    ),
    "millis": (
        sa.BigInteger(),
        lambda moment: int(moment.replace(tzinfo=timezone.utc).timestamp() * 1000),
    ),
}


def _timed_table(name: str, time: str) -> Callable[[Engine], None]:
    """``ROWS`` rows with a time column; one row in five shares the row before's time."""
    type_, convert = TIMES[time]
    rng = random.Random(cuts.SEED)
    moment, values = BASE, []
    for key in rng.sample(range(1, 10 * ROWS), ROWS):
        if rng.random() >= 0.2:
            moment += timedelta(milliseconds=rng.randint(1, 50), microseconds=rng.randint(0, 999))
        values.append({"id": key, "created_at": convert(moment)})

    def create(engine: Engine) -> None:
        table = sa.Table(
            name,
            sa.MetaData(),
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("created_at", type_, nullable=False),
        )
        with engine.begin() as conn:
            table.create(conn)
            conn.execute(table.insert(), values)

    return create


def _q(backend: str, name: str) -> str:
    return f'"{name}"' if backend == "postgresql" else f"`{name}`"


def _add_case(
    backend: str, op: str, column: str, time: str, server_default: bool, table: str = ""
) -> eq.Case:
    # uq_<table>_<column> passes the limit by a few characters: the op hashes it.
    table = table or _name(f"eqv_{op[4:8]}", LIMIT[backend] - len(column) - 2)
    name = _q(backend, table)
    call = (
        f"op.{op}({table!r}, {column!r}, 'created_at', online=True, timezone=UTC, "
        f"storage={STORAGE[backend]!r}, batch_size=1000, server_default={server_default})"
    )
    if server_default and backend == "postgresql":  # the DEFAULT's function, first
        call = f"op.create_{op.split('_')[1]}_function(); {call}"
    return eq.Case(
        backend,
        op,
        [table],
        _timed_table(table, time),
        call,
        [
            f"SELECT id, created_at, {column}, RANK() OVER (ORDER BY {column}) "
            f"FROM {name} ORDER BY id"
        ],
        fresh=True,
        down=f"op.drop_ulid_column({table!r}, {column!r})",
        label=op
        + ("[server_default]" if server_default else f"[{time}]")
        + ("[names]" if table.startswith("E") else ""),
    )


# --- alter_ulid_storage / alter_uuid7_storage (online=True) -----------------------------------


def _stored_table(name: str, column: str, ulid: bool, nullable: bool) -> Callable[[Engine], None]:
    """``ROWS`` rows of ids as text; NOT NULL, unique, a DEFAULT, or nullable with NULLs."""
    rng = random.Random(cuts.SEED)
    if ulid:
        texts = [str(ULID.from_bytes(rng.randbytes(16))) for _ in range(ROWS)]
    else:  # UUIDv7: 48 bits of milliseconds, version 7, variant 0b10, the rest random
        texts = [
            str(uuid.UUID(int=(rng.getrandbits(48) << 80) | (7 << 76) | (rng.getrandbits(12) << 64)
                          | (2 << 62) | rng.getrandbits(62)))
            for _ in range(ROWS)
        ]  # fmt: skip
    values = [
        {"id": i, column: None if nullable and i % 5 == 0 else text, "n": i % 7}
        for i, text in enumerate(texts, 1)
    ]
    default = str(ULID.from_bytes(bytes(16))) if ulid else "01890a5d-ac96-774b-bcce-b302099a8057"
    extra: list[Any] = [] if nullable else [sa.UniqueConstraint(column, name=f"uq_{name}"[:30])]

    def create(engine: Engine) -> None:
        table = sa.Table(
            name,
            sa.MetaData(),
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column(
                column,
                sa.CHAR(26 if ulid else 36),
                nullable=nullable,
                server_default=None if nullable else default,
                comment="the public id",
            ),
            sa.Column("n", sa.Integer),
            sa.Index(f"ix_{name}"[:30], "n", column),
            *extra,
        )
        with engine.begin() as conn:
            table.create(conn)
            conn.execute(table.insert(), values)

    return create


def _storage_case(
    backend: str, op: str, nullable: bool, table: str = "", column: str = "", online: bool = True
) -> eq.Case:
    limit = LIMIT[backend]
    # PostgreSQL: the shadow column <column>__ulid passes the limit; MariaDB: _<table>__new.
    column = column or (_name("ref", limit - 3) if backend == "postgresql" else "ref")
    table = table or _name(f"eqv_{op[6:10]}", 30 if backend == "postgresql" else limit - 3)
    to = STORAGE[backend]
    call = "op.{op}({table!r}, {column!r}, from_storage={a!r}, to_storage={b!r}%s)" % (
        ", online=True, batch_size=60" if online else f", nullable={nullable}"
    )
    return eq.Case(
        backend,
        op,
        [table],
        _stored_table(table, column, op == "alter_ulid_storage", nullable),
        call.format(op=op, table=table, column=column, a="text", b=to),
        [f"SELECT id, {_q(backend, column)}, n FROM {_q(backend, table)} ORDER BY id"],
        fresh=False,
        down=call.format(op=op, table=table, column=column, a=to, b="text"),
        label=op
        + ("[nullable]" if nullable else "")
        + ("" if online else "[one transaction]")
        + ("[names]" if table.startswith("E") else ""),
    )


STORAGE = {"postgresql": "auto", "mysql": "binary"}
#: The schema the ``[schema]`` cases' tables are in, not the connection's (PostgreSQL).
SCHEMA = "eqv_elsewhere"
CASES = (
    [
        case
        for backend in ("postgresql", "mysql")
        for case in (
            _add_case(backend, "add_ulid_column", "public_id", "naive", server_default=False),
            _add_case(backend, "add_ulid_column", "public_id", "naive", server_default=True),
            _add_case(backend, "add_uuid7_column", "uid7", "millis", server_default=False),
            _add_case(backend, "add_uuid7_column", "uid7", "aware", server_default=True),
            _storage_case(backend, "alter_ulid_storage", nullable=False),
            _storage_case(backend, "alter_ulid_storage", nullable=True),
            _storage_case(backend, "alter_uuid7_storage", nullable=False),
            # Mixed case and two-byte letters: fewer characters than the limit, more bytes.
            _add_case(backend, "add_ulid_column", "Públic", "naive", False, "Eqv_Ünï_" + "é" * 24),
            _storage_case(
                backend,
                "alter_ulid_storage",
                nullable=False,
                table="Eqv_Stör_" + "é" * (20 if backend == "postgresql" else 50),
                column="Réf_" + "é" * (29 if backend == "postgresql" else 20),
            ),
        )
    ]
    + [
        # The one-transaction ops (ALTER ... USING; MariaDB: MODIFY, UPDATE, MODIFY) as Alembic
        # renders them: their scripts too are to end as online, and rerun (issue #31).
        _storage_case(backend, op, nullable=nullable, online=False)
        for backend in ("postgresql", "mysql")
        for op in ("alter_ulid_storage", "alter_uuid7_storage")
        for nullable in (False, True)
    ]
    + [
        eq.in_schema(
            _add_case("postgresql", "add_ulid_column", "public_id", "naive", False), SCHEMA
        ),
        eq.in_schema(_storage_case("postgresql", "alter_ulid_storage", nullable=False), SCHEMA),
    ]
)
SAME = "test_online_run_and_offline_script_end_the_same"
SECOND = "test_the_script_run_whole_a_second_time_changes_nothing"
CUT = "test_the_script_stopped_after_any_statement_then_rerun_ends_as_a_clean_run"
OFFLINE_FIRST = "test_a_script_stopped_then_finished_online_ends_as_a_clean_run"
ONLINE_FIRST = "test_an_online_run_stopped_then_finished_by_the_script_ends_as_a_clean_run"
#: Defects found: (case name, test) -> the defect (a strict expected failure).
DEFECTS: dict[tuple[str, str], eq.Defect] = {}


def cases(op_prefix: str = "") -> list[Any]:
    return [case.param() for case in CASES if case.op.startswith(op_prefix)]


# --- the checks -------------------------------------------------------------------------------


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
def test_a_script_stopped_then_finished_online_ends_as_a_clean_run(run: eq.Run) -> None:
    # The add ops: "a run killed anywhere, online or offline, is rerun from the start and
    # skips what is done". The storage ops promise nothing across modes: a refusal that
    # changes nothing is allowed, and the script must then finish.
    eq.check_cross(run, "offline", may_refuse=not run.case.op.startswith("add_"))


@pytest.mark.parametrize("run", cases(), indirect=True)
def test_an_online_run_stopped_then_finished_by_the_script_ends_as_a_clean_run(
    run: eq.Run,
) -> None:
    eq.check_cross(run, "online", may_refuse=not run.case.op.startswith("add_"))
