"""Black-box equivalence of an op's online run and its offline (``--sql``) script.

Everything here goes through the public surface only: a real Alembic
project (one revision that calls the op, ``alembic upgrade`` online or
``upgrade --sql`` from the revision before it, so the script updates its
version table and can be run again whole), the real ``psql`` / ``mariadb``
clients, and the database's catalog. Nothing imports the library's
internal modules, so the tests hold whatever the ops are rewritten into.

The script is cut at statement boundaries by ``_script_cuts``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy.engine import Engine

import _clients
import _offline_scripts
import _script_cuts as cuts
from _db_state import VERSION_PREFIX, diff, objects, reset, state
from conftest import Backend, private_engine

_ENV_PY = """
from alembic import context
import sqlalchemy_ulid.alembic

if context.is_offline_mode():
    context.configure(
        url=context.config.get_main_option("sqlalchemy.url"), version_table={table!r}
    )
else:
    context.configure(
        connection=context.config.attributes["connection"], version_table={table!r}
    )
with context.begin_transaction():
    context.run_migrations()
"""

_REVISION = '''
import datetime

from alembic import op

revision = {revision!r}
down_revision = {down_revision!r}
branch_labels = None
depends_on = None
UTC = datetime.timezone.utc


class Stop(Exception):
    """Raised from ``progress=`` to interrupt an online run after its first batch."""


def stop(progress):
    raise Stop(progress)


def upgrade():
    {up}


def downgrade():
    {down}
'''


class Project:
    """An Alembic project in ``where``: revision ``e0`` (nothing), ``e1`` (the op)."""

    def __init__(self, where: Path, engine: Engine, up: str, down: str = "pass") -> None:
        self.engine = engine
        self.version_table = f"{VERSION_PREFIX}_{where.name}"[:60]
        revisions = {
            "e0": _REVISION.format(revision="e0", down_revision=None, up="pass", down="pass"),
            "e1": _REVISION.format(revision="e1", down_revision="e0", up=up, down=down),
        }
        env_py = _ENV_PY.format(table=self.version_table)
        self.config = _offline_scripts.project(where, env_py, revisions, engine=engine)

    def online(self, action: str, revision: str) -> None:
        """``alembic upgrade|downgrade <revision>`` on a connection of the test's engine."""
        with self.engine.connect() as conn:
            self.config.attributes["connection"] = conn
            try:
                getattr(command, action)(self.config, revision)
                conn.commit()
            finally:
                del self.config.attributes["connection"]

    def script(self, action: str = "upgrade") -> str:
        """The ``--sql`` output from ``e0`` to ``e1`` (or back), as the CLI writes it."""
        buffer = io.StringIO()
        self.config.output_buffer = buffer
        try:
            if action == "upgrade":
                command.upgrade(self.config, "e0:e1", sql=True)
            else:
                command.downgrade(self.config, "e1:e0", sql=True)
        finally:
            self.config.output_buffer = None
        return buffer.getvalue()


# --- running a script -------------------------------------------------------------------------


def applied(engine: Engine, script: str, what: str = "script") -> str:
    """Run ``script``; fail the test, showing the client's output, if it did not succeed."""
    done = _clients.run(engine, script)
    assert done.returncode == 0, f"{what} failed:\n{done.stderr[-3000:]}\n{done.stdout[-1500:]}"
    return done.stderr + done.stdout


# --- one op on one database, and the checks every op gets ------------------------------------


@dataclass
class Case:
    """One op on one database: how to make its tables, call it, and read what it left.

    ``action`` is the migration under test: ``upgrade`` (from ``e0``), or
    ``downgrade`` (from ``e1``, reached online first).
    """

    backend: str
    op: str
    tables: list[str]
    create: Callable[[Engine], None]
    up: str
    queries: list[str]
    fresh: bool  # the op makes new ids (compared by their time and rank)
    down: str = "pass"
    action: str = "upgrade"
    label: str = ""  # the case's name in test ids, when not the op's
    schema: str | None = None  # PostgreSQL: the tables are in this schema (made, then dropped)

    @property
    def name(self) -> str:
        return f"{self.label or self.op}-{self.backend}"

    def param(self) -> Any:
        """The case as a test parameter, marked with its backend (for ``--only-backends``)."""
        return pytest.param(self, id=self.name, marks=pytest.mark.backends(self.backend))


def in_schema(case: Case, schema: str) -> Case:
    """``case`` with its tables in ``schema`` (PostgreSQL), and ``schema=`` given to the op."""

    def create(engine: Engine) -> None:
        case.create(engine.execution_options(schema_translate_map={None: schema}))

    def qualified(call: str) -> str:
        return call if call == "pass" else f"{call[:-1]}, schema={schema!r})"

    queries = case.queries
    for table in case.tables:
        for spelled in (f'"{table}"', table):
            pattern = re.compile(rf'(?<![\w."]){re.escape(spelled)}(?![\w"])')
            queries = [pattern.sub(f"{schema}.{spelled}", query) for query in queries]
    return dataclasses.replace(
        case,
        create=create,
        up=qualified(case.up),
        down=qualified(case.down),
        queries=queries,
        tables=[f"{schema}.{table}" for table in case.tables],
        schema=schema,
        label=f"{case.label or case.op}[schema]",
    )


@dataclass(frozen=True)
class Defect:
    """A defect a test found: the test is an expected failure (strict) where ``on`` holds."""

    reason: str
    on: Callable[[Engine], bool] = lambda engine: True


def postgresql_18(engine: Engine) -> bool:
    """PostgreSQL 18 or later (where ``uuidv7()`` is built in)."""
    version = engine.dialect.server_version_info or (0,)
    return engine.url.get_backend_name() == "postgresql" and version >= (18,)


@dataclass
class Run:
    """One case on its server: the tables made fresh, a project per run, the state read."""

    case: Case
    engine: Engine
    tmp_path: Path
    baseline: set[tuple[str, str]]
    projects: int = 0

    def fresh(self, up: str | None = None) -> Project:
        """Everything the last run made dropped, the tables made again, a new project."""
        reset(self.engine, self.baseline, self.case.schema)
        self.case.create(self.engine)
        self.projects += 1
        where = self.tmp_path / f"p{self.projects}"
        project = Project(where, self.engine, up or self.case.up, self.case.down)
        project.online("upgrade", "e0" if self.case.action == "upgrade" else "e1")
        return project

    def state(self) -> dict[str, Any]:
        case = self.case
        return state(self.engine, case.tables, case.queries, case.fresh, case.schema)

    def online(self, project: Project | None = None) -> dict[str, Any]:
        project = project or self.fresh()
        project.online(self.case.action, "e1" if self.case.action == "upgrade" else "e0")
        return self.state()

    def script(self, project: Project) -> str:
        return project.script(self.case.action)

    def offline(self) -> tuple[str, dict[str, Any]]:
        script = self.script(self.fresh())
        applied(self.engine, script)
        return script, self.state()

    def cut(self, k: int) -> Project:
        """A fresh run whose script was stopped after statement ``k``."""
        project = self.fresh()
        head = cuts.cut(self.script(project), self.case.backend, k)
        applied(self.engine, head, f"the script up to statement {k}")
        return project


@contextlib.contextmanager
def running(
    request: pytest.FixtureRequest,
    backends: dict[str, Backend],
    tmp_path: Path,
    defects: dict[tuple[str, str], Defect],
) -> Iterator[Run]:
    """The ``run`` fixture of the test modules: the case their parameter names.

    ``defects`` maps (case name, test function name) to a defect found: that
    test is then a strict expected failure, on the servers the defect is on.
    """
    case: Case = request.param
    with private_engine(backends[case.backend]) as engine:
        defect = defects.get((case.name, request.node.originalname))
        with engine.connect():  # the server's version, read on connect
            pass
        if defect is not None and defect.on(engine):
            request.applymarker(pytest.mark.xfail(strict=True, reason=defect.reason))
        if case.schema is not None:
            with engine.begin() as conn:
                conn.exec_driver_sql(f"CREATE SCHEMA {case.schema}")
        baseline = objects(engine, case.schema)
        try:
            yield Run(case, engine, tmp_path, baseline)
        finally:
            reset(engine, baseline, case.schema)
            if case.schema is not None:
                with engine.begin() as conn:
                    conn.exec_driver_sql(f"DROP SCHEMA {case.schema} CASCADE")


def check_same(run: Run) -> None:
    """The online run and the offline script end the same."""
    online = run.online()
    _, offline = run.offline()
    assert online == offline, "online (A) and offline (B) differ:\n" + diff(online, offline)


def check_second_run(run: Run) -> None:
    """The script run whole a second time succeeds and changes nothing."""
    script, first = run.offline()
    applied(run.engine, script, "the second run")
    again = run.state()
    assert again == first, "first run (A), second run (B):\n" + diff(first, again)


def check_cuts(
    run: Run, finish: Callable[[Project], None] | None = None, most: int = cuts.CUTS
) -> None:
    """The script stopped after statement k, then finished (by default rerun whole), ends clean."""
    script, clean = run.offline()
    backend = run.case.backend
    points = cuts.cut_points(script, backend, cuts=most)
    total = len(cuts.boundaries(script, backend))
    print(f"seed {cuts.SEED}: cut after statements {points} of {total}")
    for k in points:
        project = run.cut(k)
        if finish is None:
            applied(run.engine, run.script(project), f"the rerun after statement {k}")
        else:
            finish(project)
        after = run.state()
        assert after == clean, (
            f"stopped after statement {k} (seed {cuts.SEED}); clean (A), finished (B):\n"
            + diff(clean, after)
        )


class Interrupted(Exception):
    """Raised by a hook in place of the online run's statement ``n``: the run stops there."""


@contextlib.contextmanager
def stopped_at(engine: Engine, n: int | None) -> Iterator[list[str]]:
    """Count the statements sent on ``engine``; with ``n``, statement ``n`` (1-based) fails."""
    sent: list[str] = []

    def hook(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)
        if len(sent) == n:
            raise Interrupted(statement[:200])

    sa.event.listen(engine, "before_cursor_execute", hook)
    try:
        yield sent
    finally:
        sa.event.remove(engine, "before_cursor_execute", hook)


def _finish(run: Run, project: Project, mode: str) -> str | None:
    """Finish the op in ``mode``; None when done, else what refused (or failed)."""
    if mode == "offline":
        done = _clients.run(run.engine, run.script(project))
        return None if done.returncode == 0 else (done.stderr + done.stdout)[-1500:]
    try:
        run.online(project)
    except Exception as exc:  # a refusal: the test checks nothing changed
        return f"{type(exc).__name__}: {exc}"[:1500]
    return None


def check_cross(run: Run, first: str, may_refuse: bool, most: int = 3) -> None:
    """Stopped in ``first`` mode, finished in the other, ends as a clean run.

    With ``may_refuse`` (the docs say the other mode refuses a run it did not
    start), the other mode may refuse instead: then it must change nothing,
    and ``first`` mode must finish the run. ``first`` is ``offline`` (the
    script stopped after a statement) or ``online`` (a statement of the online
    run fails, as if the session were killed there).
    """
    script, clean = run.offline()
    other = "online" if first == "offline" else "offline"
    if first == "offline":
        points = cuts.cut_points(script, run.case.backend, cuts=most)
    else:
        project = run.fresh()
        with stopped_at(run.engine, None) as sent:
            run.online(project)
        points = sorted(random.Random(cuts.SEED).sample(range(2, len(sent)), most))
    print(f"seed {cuts.SEED}: {first} run stopped at statements {points}")
    for k in points:
        if first == "offline":
            project = run.cut(k)
        else:
            project = run.fresh()
            with stopped_at(run.engine, k), pytest.raises(Interrupted):
                run.online(project)
        before = run.state()
        refused = _finish(run, project, other)
        where = f"{first} stopped at statement {k} (seed {cuts.SEED}), finished {other}"
        if refused is not None:
            assert may_refuse, f"{where}: it failed:\n{refused}"
            now = run.state()
            assert now == before, f"{where}: refused, but changed (A before, B after):\n" + diff(
                before, now
            )
            refused = _finish(run, project, first)
            assert refused is None, f"{where}: refused, then {first} failed:\n{refused}"
        after = run.state()
        assert after == clean, f"{where}; clean (A), finished (B):\n" + diff(clean, after)
