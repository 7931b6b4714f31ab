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
``alter_ulid_storage`` / ``alter_uuid7_storage``, all ``online=True``, on
PostgreSQL and MariaDB. ``test_offline_equivalence_2``: the primary-key ops.
For each: (1) online and offline end the same; (2) the script run whole a
second time changes nothing; (3) the script stopped after statement ``k``
(``k`` drawn by a seeded generator, printed), then run whole, ends as the
clean run; (4) for the add ops, whose docs say a run killed anywhere,
online or offline, is rerun from the start, a run stopped in one mode and
finished in the other ends the same.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Engine

import _equivalence as eq
from conftest import Backend, private_engine
from sqlalchemy_ulid import ULID

ROWS = 200
DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql")
BASE = datetime(2024, 3, 1, 8, 0, 0)
#: The server's identifier limit, in bytes (PostgreSQL) or characters (MariaDB).
LIMIT = {"postgresql": 63, "mysql": 64}


@dataclass
class Case:
    """One op on one database: how to make its tables, call it, and read what it left."""

    backend: str
    op: str
    tables: list[str]
    create: Callable[[Engine], None]
    up: str
    queries: list[str]
    fresh: bool  # the op makes new ids (compared by their time and rank)
    down: str = "pass"
    xfail: dict[str, str] = field(default_factory=dict)  # test name -> defect

    @property
    def id(self) -> str:
        return f"{self.op}-{self.backend}"

    def param(self, test: str) -> Any:
        marks = []
        if test in self.xfail:
            marks.append(pytest.mark.xfail(strict=True, reason=self.xfail[test]))
        return pytest.param(self, id=self.id, marks=marks)


def _name(prefix: str, length: int) -> str:
    return (prefix + "_" + "x" * length)[:length]


# --- add_ulid_column / add_uuid7_column (online=True) -----------------------------------------


def _timed_table(name: str, ties: bool) -> Callable[[Engine], None]:
    def create(engine: Engine) -> None:
        table = sa.Table(
            name,
            sa.MetaData(),
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("created_at", DATETIME, nullable=False),
        )
        rng = random.Random(eq.SEED)
        moment, values = BASE, []
        for key in rng.sample(range(1, 10 * ROWS), ROWS):
            if not (ties and rng.random() < 0.2):
                moment += timedelta(milliseconds=rng.randint(1, 50), microseconds=rng.randint(0, 999))
            values.append({"id": key, "created_at": moment})
        with engine.begin() as conn:
            table.create(conn)
            conn.execute(table.insert(), values)

    return create


def _add_case(backend: str, op: str, column: str, storage: str, xfail: dict[str, str]) -> Case:
    # uq_<table>_<column> passes the limit by a few characters: the op hashes it.
    table = _name(f"eqv_{op[4:8]}", LIMIT[backend] - len(column) - 2)
    return Case(
        backend,
        op,
        [table],
        _timed_table(table, ties=True),
        f"op.{op}({table!r}, {column!r}, 'created_at', online=True, timezone=UTC, "
        f"storage={storage!r}, batch_size=1000)",
        [
            f"SELECT id, created_at, {column}, RANK() OVER (ORDER BY {column}) "
            f"FROM {table} ORDER BY id"
        ],
        fresh=True,
        down=f"op.drop_ulid_column({table!r}, {column!r})",
        xfail=xfail,
    )


# --- alter_ulid_storage / alter_uuid7_storage (online=True) -----------------------------------


def _stored_table(name: str, column: str, ulid: bool) -> Callable[[Engine], None]:
    rng = random.Random(eq.SEED)
    if ulid:
        texts = [str(ULID.from_bytes(rng.randbytes(16))) for _ in range(ROWS)]
    else:  # UUIDv7: 48 bits of milliseconds, version 7, variant 0b10, the rest random
        texts = [
            str(uuid.UUID(int=(rng.getrandbits(48) << 80) | (7 << 76) | (rng.getrandbits(12) << 64)
                          | (2 << 62) | rng.getrandbits(62)))
            for _ in range(ROWS)
        ]  # fmt: skip

    def create(engine: Engine) -> None:
        default = str(ULID.from_bytes(bytes(16))) if ulid else "01890a5d-ac96-774b-bcce-b302099a8057"
        table = sa.Table(
            name,
            sa.MetaData(),
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column(
                column,
                sa.CHAR(26 if ulid else 36),
                nullable=False,
                server_default=default,
                comment="the public id",
            ),
            sa.Column("n", sa.Integer),
            sa.UniqueConstraint(column, name=f"uq_{name}"[:30]),
            sa.Index(f"ix_{name}"[:30], "n", column),
        )
        values = [{"id": i, column: text, "n": i % 7} for i, text in enumerate(texts, 1)]
        with engine.begin() as conn:
            table.create(conn)
            conn.execute(table.insert(), values)

    return create


def _storage_case(backend: str, op: str, to: str, xfail: dict[str, str]) -> Case:
    ulid = op == "alter_ulid_storage"
    limit = LIMIT[backend]
    # PostgreSQL: the shadow column <column>__ulid passes the limit; MariaDB: _<table>__new.
    column = _name("ref", limit - 3) if backend == "postgresql" else "ref"
    table = _name(f"eqv_{op[6:10]}", 30 if backend == "postgresql" else limit - 3)
    return Case(
        backend,
        op,
        [table],
        _stored_table(table, column, ulid),
        f"op.{op}({table!r}, {column!r}, from_storage='text', to_storage={to!r}, "
        "online=True, batch_size=60)",
        [f"SELECT id, {column}, n FROM {table} ORDER BY id"],
        fresh=False,
        down=f"op.{op}({table!r}, {column!r}, from_storage={to!r}, to_storage='text', "
        "online=True, batch_size=60)",
        xfail=xfail,
    )


def cases(test: str) -> list[Any]:
    made = []
    for backend in ("postgresql", "mysql"):
        storage = "auto" if backend == "postgresql" else "binary"
        made += [
            _add_case(backend, "add_ulid_column", "public_id", storage, XFAIL.get(("add_ulid_column", backend), {})),
            _add_case(backend, "add_uuid7_column", "uid7", storage, XFAIL.get(("add_uuid7_column", backend), {})),
            _storage_case(backend, "alter_ulid_storage", storage, XFAIL.get(("alter_ulid_storage", backend), {})),
            _storage_case(backend, "alter_uuid7_storage", storage, XFAIL.get(("alter_uuid7_storage", backend), {})),
        ]
    return [case.param(test) for case in made]


#: Defects found: (op, backend) -> {test: one-line description}.
XFAIL: dict[tuple[str, str], dict[str, str]] = {}


# --- the runs ---------------------------------------------------------------------------------


@dataclass
class Run:
    """One case on its server: the tables made fresh, a project per run, the state read."""

    case: Case
    engine: Engine
    tmp_path: Path
    baseline: set[tuple[str, str]]
    projects: int = 0

    def fresh(self, up: str | None = None) -> eq.Project:
        """Everything the last run made dropped, the tables made again, a new project."""
        eq.reset(self.engine, self.baseline)
        self.case.create(self.engine)
        self.projects += 1
        project = eq.Project(
            self.tmp_path / f"p{self.projects}", self.engine, up or self.case.up, self.case.down
        )
        project.online("upgrade", "e0")
        return project

    def state(self) -> dict[str, Any]:
        return eq.state(self.engine, self.case.tables, self.case.queries, self.case.fresh)

    def online(self) -> dict[str, Any]:
        self.fresh().online("upgrade", "e1")
        return self.state()

    def offline(self) -> tuple[eq.Project, str, dict[str, Any]]:
        project = self.fresh()
        script = project.script()
        eq.applied(self.engine, script)
        return project, script, self.state()


@pytest.fixture
def run(request: pytest.FixtureRequest, backends: dict[str, Backend], tmp_path: Path) -> Iterator[Run]:
    case: Case = request.param
    with private_engine(backends[case.backend]) as engine:
        baseline = eq.objects(engine)
        try:
            yield Run(case, engine, tmp_path, baseline)
        finally:
            eq.reset(engine, baseline)


def _same(online: dict[str, Any], offline: dict[str, Any]) -> None:
    assert online == offline, "online (A) and offline (B) differ:\n" + eq.diff(online, offline)


@pytest.mark.parametrize("run", cases("ends_the_same"), indirect=True)
def test_online_run_and_offline_script_end_the_same(run: Run) -> None:
    online = run.online()
    _, _, offline = run.offline()
    _same(online, offline)


@pytest.mark.parametrize("run", cases("second_run"), indirect=True)
def test_the_script_run_whole_a_second_time_changes_nothing(run: Run) -> None:
    _, script, first = run.offline()
    eq.applied(run.engine, script, "the second run")
    again = run.state()
    assert again == first, "first run (A), second run (B):\n" + eq.diff(first, again)


@pytest.mark.parametrize("run", cases("cut"), indirect=True)
def test_the_script_stopped_after_any_statement_then_rerun_ends_as_a_clean_run(run: Run) -> None:
    _, script, clean = run.offline()
    client = run.case.backend
    points = eq.cut_points(script, client)
    print(f"seed {eq.SEED}: cut after statements {points} of {len(eq.boundaries(script, client))}")
    for k in points:
        project = run.fresh()
        eq.applied(run.engine, eq.cut(project.script(), client, k), f"the script up to statement {k}")
        eq.applied(run.engine, project.script(), f"the rerun after statement {k}")
        after = run.state()
        assert after == clean, f"cut after statement {k} (seed {eq.SEED}); clean (A), rerun (B):\n" + eq.diff(clean, after)


ADD_CASES = [p for p in cases("cross") if p.values[0].op.startswith("add_")]


@pytest.mark.parametrize("run", ADD_CASES, indirect=True)
def test_a_script_stopped_then_the_online_run_ends_as_a_clean_run(run: Run) -> None:
    _, script, clean = run.offline()
    client = run.case.backend
    points = eq.cut_points(script, client, cuts=3)
    print(f"seed {eq.SEED}: cut after statements {points}")
    for k in points:
        project = run.fresh()
        eq.applied(run.engine, eq.cut(project.script(), client, k), f"the script up to statement {k}")
        project.online("upgrade", "e1")
        after = run.state()
        assert after == clean, f"cut after statement {k}; clean (A), online rerun (B):\n" + eq.diff(clean, after)


@pytest.mark.parametrize("run", ADD_CASES, indirect=True)
def test_an_online_run_stopped_in_its_fill_then_the_script_ends_as_a_clean_run(run: Run) -> None:
    # Distinct times: ids of one millisecond are ordered within a batch only.
    _, _, clean = run.offline()
    stopped = run.fresh(run.case.up.replace("batch_size=1000", "batch_size=1000, progress=stop"))
    with pytest.raises(Exception) as stop:
        stopped.online("upgrade", "e1")
    assert type(stop.value).__name__ == "Stop", stop.value
    eq.applied(run.engine, stopped.script())
    after = run.state()
    assert after == clean, "clean (A), online stopped then script (B):\n" + eq.diff(clean, after)
