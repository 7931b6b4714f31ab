"""Black-box equivalence of an op's online run and its offline (``--sql``) script.

Everything here goes through the public surface only: a real Alembic
project (one revision that calls the op, ``alembic upgrade`` online or
``upgrade --sql`` from the revision before it, so the script updates its
version table and can be run again whole), the real ``psql`` / ``mariadb``
clients, and the database's catalog. Nothing imports the library's
internal modules, so the tests hold whatever the ops are rewritten into.

The script is cut at statement boundaries by :func:`boundaries`, a small
splitter for psql scripts (quotes, dollar quotes, comments, backslash
commands such as ``\\gexec``) and for mariadb client scripts
(``DELIMITER`` lines, quotes, comments).
"""

from __future__ import annotations

import io
import os
import random
import re
import subprocess
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection, Engine

import _clients

#: Every version table of these tests starts so: dropped with the tables, left out of snapshots.
VERSION_PREFIX = "eqv_version"
#: The seed of the cut points (printed by every test that uses it, for reproduction).
SEED = int(os.environ.get("SQLALCHEMY_ULID_EQUIVALENCE_SEED", "31"))
#: At most this many cut points per op and database.
CUTS = int(os.environ.get("SQLALCHEMY_ULID_EQUIVALENCE_CUTS", "6"))

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


def run(engine: Engine, script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with the database's own client, stopping at the first error."""
    runner = _RUNNERS[engine.url.get_backend_name()]
    return runner(engine, script)


def applied(engine: Engine, script: str, what: str = "script") -> str:
    """Run ``script``; fail the test, showing the client's output, if it did not succeed."""
    done = run(engine, script)
    assert done.returncode == 0, f"{what} failed:\n{done.stderr[-3000:]}\n{done.stdout[-1500:]}"
    return done.stderr + done.stdout


_RUNNERS: dict[str, Callable[[Engine, str], subprocess.CompletedProcess[str]]] = {
    "postgresql": lambda engine, script: _clients.psql(engine, script, timeout=120),
    "mysql": lambda engine, script: _clients.mariadb(engine, script, "--unbuffered"),
}


# --- cutting a script at its statement boundaries ---------------------------------------------


def boundaries(script: str, client: str) -> list[int]:
    """The offsets just after each statement of ``script`` (a psql or mariadb client script).

    Each offset is at the end of the line the statement ends on; ``script[:offset]``
    is the script stopped after that statement. Client commands other than
    ``\\gexec`` (``\\set``, ``DELIMITER``) are not boundaries of their own.
    """
    split = _psql_ends if client == "postgresql" else _mariadb_ends
    ends = []
    for end in split(script):
        line_end = script.find("\n", end)
        ends.append(len(script) if line_end < 0 else line_end + 1)
    return sorted(set(ends))


def cut_points(script: str, client: str, seed: int = SEED, cuts: int = CUTS) -> list[int]:
    """At most ``cuts`` boundaries (not the last), chosen by ``seed``: the statement counts."""
    inner = boundaries(script, client)[:-1]
    chosen = random.Random(seed).sample(range(len(inner)), min(cuts, len(inner)))
    return sorted(chosen)


def cut(script: str, client: str, k: int) -> str:
    """``script`` stopped after its statement ``k`` (0-based)."""
    return script[: boundaries(script, client)[k]]


def _psql_ends(script: str) -> Iterator[int]:
    i, n, has_sql = 0, len(script), False
    while i < n:
        ch = script[i]
        if script.startswith("--", i):
            i = _line_end(script, i)
        elif script.startswith("/*", i):
            i = script.find("*/", i + 2) % (n + 1) + 2
        elif ch == "'":
            escapes = i > 0 and script[i - 1] in "eE"
            i = _quoted(script, i, "'", escapes)
            has_sql = True
        elif ch == '"':
            i = _quoted(script, i, '"', False)
            has_sql = True
        elif ch == "$" and (tag := re.match(r"\$([A-Za-z_]\w*)?\$", script[i:])):
            close = script.find(tag.group(0), i + len(tag.group(0)))
            i = (close if close >= 0 else n) + len(tag.group(0))
            has_sql = True
        elif ch == "\\":
            end = _line_end(script, i)
            if script.startswith("\\g", i):  # \g, \gexec, \gset: send the query buffer
                yield end - 1
                has_sql = False
            i = end
        elif ch == ";":
            if has_sql:
                yield i
            has_sql = False
            i += 1
        else:
            has_sql = has_sql or not ch.isspace()
            i += 1


def _mariadb_ends(script: str) -> Iterator[int]:
    i, n, has_sql, delimiter = 0, len(script), False, ";"
    while i < n:
        ch = script[i]
        at_line_start = i == 0 or script[i - 1] == "\n"
        if at_line_start and not has_sql and script[i : i + 10].upper() == "DELIMITER ":
            end = _line_end(script, i)
            delimiter = script[i + 10 : end].strip()
            i = end
        elif script.startswith("-- ", i) or ch == "#":
            i = _line_end(script, i)
        elif script.startswith("/*", i):
            i = script.find("*/", i + 2) % (n + 1) + 2
        elif ch in "'\"`":
            i = _quoted(script, i, ch, ch != "`")
            has_sql = True
        elif script.startswith(delimiter, i):
            if has_sql:
                yield i + len(delimiter) - 1
            has_sql = False
            i += len(delimiter)
        else:
            has_sql = has_sql or not ch.isspace()
            i += 1


def _line_end(script: str, i: int) -> int:
    end = script.find("\n", i)
    return len(script) if end < 0 else end + 1


def _quoted(script: str, i: int, quote: str, escapes: bool) -> int:
    """The offset after the quoted text starting at ``i`` (a doubled quote stays inside)."""
    j = i + 1
    while j < len(script):
        if escapes and script[j] == "\\":
            j += 2
        elif script[j] == quote:
            if script.startswith(quote * 2, j):
                j += 2
            else:
                return j + 1
        else:
            j += 1
    return j


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
    with engine.connect() as conn:
        return [
            [tuple(_value(v, fresh) for v in row) for row in conn.exec_driver_sql(sql)]
            for sql in queries
        ]


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
