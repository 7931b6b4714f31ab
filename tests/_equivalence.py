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
import io
import random
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection, Engine

import _clients
import _script_cuts as cuts
from conftest import Backend, private_engine

#: Every version table of these tests starts so: dropped with the tables, left out of snapshots.
VERSION_PREFIX = "eqv_version"

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
        versions = where / "versions"
        versions.mkdir(parents=True)
        (where / "env.py").write_text(_ENV_PY.format(table=self.version_table))
        (versions / "e0.py").write_text(
            _REVISION.format(revision="e0", down_revision=None, up="pass", down="pass")
        )
        (versions / "e1.py").write_text(
            _REVISION.format(revision="e1", down_revision="e0", up=up, down=down)
        )
        self.config = Config()
        self.config.set_main_option("script_location", str(where))
        self.config.set_main_option(
            "sqlalchemy.url", engine.url.render_as_string(hide_password=False)
        )
        self.config.attributes["configure_logger"] = False

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


def run_script(engine: Engine, script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with the database's own client, stopping at the first error."""
    runner = _RUNNERS[engine.url.get_backend_name()]
    return runner(engine, script)


def applied(engine: Engine, script: str, what: str = "script") -> str:
    """Run ``script``; fail the test, showing the client's output, if it did not succeed."""
    done = run_script(engine, script)
    assert done.returncode == 0, f"{what} failed:\n{done.stderr[-3000:]}\n{done.stdout[-1500:]}"
    return done.stderr + done.stdout


_RUNNERS: dict[str, Callable[[Engine, str], subprocess.CompletedProcess[str]]] = {
    "postgresql": lambda engine, script: _clients.psql(engine, script, timeout=120),
    "mysql": lambda engine, script: _clients.mariadb(engine, script, "--unbuffered"),
}


# --- what a database holds --------------------------------------------------------------------


def objects(engine: Engine) -> set[tuple[str, str]]:
    """Every table, view, sequence, trigger and routine of the test's schema (or database)."""
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(_OBJECTS[engine.url.get_backend_name()]).all()
    return {(kind, name) for kind, name in rows if not name.startswith(VERSION_PREFIX)}


_OBJECTS = {
    "postgresql": (
        "SELECT 'relation', relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'S') "
        "UNION ALL SELECT 'function', p.oid::regprocedure::text FROM pg_proc p "
        "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = current_schema()"
    ),
    "mysql": (
        "SELECT 'relation', table_name FROM information_schema.tables "
        "WHERE table_schema = DATABASE() "
        "UNION ALL SELECT 'routine', CONCAT(routine_type, ' ', routine_name) "
        "FROM information_schema.routines WHERE routine_schema = DATABASE()"
    ),
}


def reset(engine: Engine, baseline: set[tuple[str, str]]) -> None:
    """Drop every object not in ``baseline`` (and the projects' version tables)."""
    with engine.connect() as conn:
        extra = objects(engine) - baseline
        versions = conn.exec_driver_sql(_OBJECTS[engine.url.get_backend_name()]).all()
    extra |= {(kind, name) for kind, name in versions if name.startswith(VERSION_PREFIX)}
    quote = engine.dialect.identifier_preparer.quote
    with engine.begin() as conn:
        if engine.url.get_backend_name() == "mysql":
            conn.exec_driver_sql("SET SESSION foreign_key_checks = 0")
        for kind, name in sorted(extra):
            if kind == "relation":
                cascade = " CASCADE" if engine.url.get_backend_name() == "postgresql" else ""
                conn.exec_driver_sql(f"DROP TABLE IF EXISTS {quote(name)}{cascade}")
            elif kind == "function":
                conn.exec_driver_sql(f"DROP FUNCTION IF EXISTS {name} CASCADE")
            else:
                routine, routine_name = name.split(" ", 1)
                conn.exec_driver_sql(f"DROP {routine} IF EXISTS {quote(routine_name)}")


def schema(engine: Engine, tables: list[str]) -> dict[str, Any]:
    """What the op leaves, by the catalog: the objects there and each table's full shape."""
    found: dict[str, Any] = {"objects": sorted(objects(engine))}
    with engine.connect() as conn:
        for table in tables:
            found[table] = _SHAPES[engine.url.get_backend_name()](conn, table)
    return found


def _pg_shape(conn: Connection, table: str) -> dict[str, Any]:
    oid = conn.execute(
        sa.text("SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relname = :t"), {"t": table}
    ).scalar_one()  # fmt: skip
    queries = {
        "columns": "SELECT attname, format_type(atttypid, atttypmod), attnotnull, "
        "pg_get_expr(d.adbin, d.adrelid), col_description(attrelid, attnum), attidentity "
        "FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid "
        "AND d.adnum = a.attnum WHERE attrelid = :o AND attnum > 0 AND NOT attisdropped "
        "ORDER BY attnum",
        "constraints": "SELECT conname, contype, pg_get_constraintdef(oid), convalidated, "
        "obj_description(oid, 'pg_constraint') FROM pg_constraint WHERE conrelid = :o "
        "ORDER BY conname",
        "indexes": "SELECT c.relname, pg_get_indexdef(x.indexrelid), x.indisvalid, "
        "x.indisprimary, x.indisreplident, obj_description(c.oid, 'pg_class') FROM pg_index x "
        "JOIN pg_class c ON c.oid = x.indexrelid WHERE x.indrelid = :o ORDER BY c.relname",
        "triggers": "SELECT tgname FROM pg_trigger WHERE tgrelid = :o AND NOT tgisinternal "
        "ORDER BY tgname",
        "sequences": "SELECT a.attname, pg_get_serial_sequence(:t, a.attname) "
        "FROM pg_attribute a WHERE attrelid = :o AND attnum > 0 AND NOT attisdropped "
        "AND pg_get_serial_sequence(:t, a.attname) IS NOT NULL ORDER BY 1",
        "comment": "SELECT obj_description(:o, 'pg_class')",
    }
    quoted = conn.dialect.identifier_preparer.quote(table).replace("%%", "%")
    return {
        name: [tuple(row) for row in conn.execute(sa.text(sql), {"o": oid, "t": quoted})]
        for name, sql in queries.items()
    }


def _mariadb_shape(conn: Connection, table: str) -> dict[str, Any]:
    quoted = conn.dialect.identifier_preparer.quote(table)
    triggers = conn.execute(
        sa.text("SELECT trigger_name FROM information_schema.triggers "
                "WHERE event_object_schema = DATABASE() AND event_object_table = :t "
                "ORDER BY trigger_name"), {"t": table}
    ).scalars().all()  # fmt: skip
    return {
        "create": conn.exec_driver_sql(f"SHOW CREATE TABLE {quoted}").one()[1],
        "triggers": list(triggers),
    }


_SHAPES: dict[str, Callable[[Connection, str], dict[str, Any]]] = {
    "postgresql": _pg_shape,
    "mysql": _mariadb_shape,
}


def rows(engine: Engine, queries: list[str], fresh: bool) -> list[list[tuple[Any, ...]]]:
    """The rows of ``queries``; with ``fresh``, a new id (16 bytes or a UUID) is its millisecond.

    The random part of a new ULID or UUIDv7 differs between two runs; its time
    part (the first 48 bits) and its rank, which the queries read with a
    window function, must not.
    """
    found: list[list[tuple[Any, ...]]] = []
    for sql in queries:
        try:
            with engine.connect() as conn:
                found.append(
                    [tuple(_value(v, fresh) for v in row) for row in conn.exec_driver_sql(sql)]
                )
        except sa.exc.DBAPIError as exc:  # a state half-way through: a column not there yet
            found.append([("cannot read", type(exc.orig).__name__)])
    return found


def _value(value: Any, fresh: bool) -> Any:
    if isinstance(value, str) and len(value) == 36 and value.count("-") == 4:
        value = uuid.UUID(value)
    if isinstance(value, bytes | bytearray) and len(value) == 16:
        value = uuid.UUID(bytes=bytes(value))
    if isinstance(value, uuid.UUID):
        return ("ms", value.int >> 80) if fresh else value
    if isinstance(value, datetime):
        return value.replace(tzinfo=None)
    return value


def state(engine: Engine, tables: list[str], queries: list[str], fresh: bool) -> dict[str, Any]:
    """Schema and data together: what two runs must agree on."""
    return {**schema(engine, tables), "rows": rows(engine, queries, fresh)}


def diff(left: dict[str, Any], right: dict[str, Any]) -> str:
    """A short account of where two states differ (for assertion messages)."""
    lines = []
    for key in sorted(set(left) | set(right)):
        if left.get(key) != right.get(key):
            lines.append(f"{key}:\n  A: {left.get(key)!r:.1500}\n  B: {right.get(key)!r:.1500}")
    return "\n".join(lines)


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

    @property
    def name(self) -> str:
        return f"{self.label or self.op}-{self.backend}"

    def param(self) -> Any:
        return pytest.param(self, id=self.name)


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
        reset(self.engine, self.baseline)
        self.case.create(self.engine)
        self.projects += 1
        where = self.tmp_path / f"p{self.projects}"
        project = Project(where, self.engine, up or self.case.up, self.case.down)
        project.online("upgrade", "e0" if self.case.action == "upgrade" else "e1")
        return project

    def state(self) -> dict[str, Any]:
        return state(self.engine, self.case.tables, self.case.queries, self.case.fresh)

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
        baseline = objects(engine)
        try:
            yield Run(case, engine, tmp_path, baseline)
        finally:
            reset(engine, baseline)


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
        done = run_script(run.engine, run.script(project))
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
