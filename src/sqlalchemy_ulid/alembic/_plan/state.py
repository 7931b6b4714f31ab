"""One state table for every op: ``sqlalchemy_ulid_migrations``.

A row per op and target (``add_ulid_column``, ``orders.public_id``) while
the op runs: the plan's digest and the last step done. A finished op
deletes its row, and the last one drops the table. The runner
and the scripts write it after each step, in the step's own transaction
where the database has one. The guards, not this row, decide what a rerun
does (a step killed between its DDL and its row is still skipped, since
its guard sees the change); the row says where an op stands and that the
plan a rerun makes is the one that began.

Releases before this one kept state in tables of their own; :func:`read_legacy`
reads them, so that a conversion they began is found by the new one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection

__all__ = [
    "STATE_TABLE",
    "LegacyState",
    "StateRow",
    "StateSQL",
    "TableLock",
    "read_legacy",
    "read_state",
    "under_way",
]

STATE_TABLE = "sqlalchemy_ulid_migrations"

#: The tables of earlier releases: (table, the op it belongs to).
LEGACY_TABLES = (
    ("ulid_storage_conversions", "alter_ulid_storage"),
    ("ulid_key_conversions", "convert_primary_key_to_ulid"),
    ("ulid_key_conversions_offline", "convert_primary_key_to_ulid"),
)


def literal(text: str, backslashes: bool = False) -> str:
    """A SQL string literal (``backslashes``: MariaDB's, which escape them)."""
    if backslashes:
        text = text.replace("\\", "\\\\")
    return "'" + text.replace("'", "''") + "'"


def under_way(op: str, target: str, again: str = "Run it again") -> str:
    """The refusal of a run while another run of ``op`` on ``target`` holds its lock."""
    return (
        f"{op}: another run of {op} on {target} is under way (another session holds its "
        f"lock); nothing was changed. {again} once that one has finished: it goes on from "
        "where that one stopped"
    )


class TableLock(NamedTuple):
    """The statements that take the state table's lock, give it back, and after a failure."""

    take: tuple[str, ...]
    give_back: tuple[str, ...]
    abort: tuple[str, ...]


@dataclass(frozen=True)
class StateSQL:
    """A database's SQL for the state table (each planner module has one)."""

    #: CREATE TABLE IF NOT EXISTS, ``{table}`` the quoted, qualified name
    create: str
    #: an upsert of one row, ``{table}``, ``{op}``, ``{target}``, ``{plan}``,
    #: ``{step}`` literals and ``{done}`` (TRUE/FALSE)
    upsert: str
    #: an insert of one row that keeps a row already there (same fields)
    insert_new: str = ""
    #: statements that take the state table's lock (opening a transaction where
    #: the lock lives in one), the ones that give it back, and after a failure;
    #: ``{database}`` in them is SQL of the state table's database (a named
    #: lock that is the server's, not the database's, is named after it)
    lock: tuple[str, ...] = ()
    unlock: tuple[str, ...] = ()
    abort: tuple[str, ...] = ()
    #: SQL of the session's own database, for ``{database}`` (no schema given)
    database: str = "''"
    #: SQL of the session's own schema, for ``{schema}`` in the run's lock
    #: (no schema given)
    schema: str = "''"
    #: SQL of 1 when this session took the run's own lock ``{name}`` (a
    #: literal) of the table in schema ``{schema}`` (SQL) without waiting, 0
    #: when another session holds it; and what gives it back before the
    #: session's transaction ends ("": its end does)
    claim: str = ""
    release: str = ""
    #: the same lock as a script takes it, for the session (the script's
    #: steps are many transactions): SQL true when taken without waiting,
    #: and SQL true when given back (false: this session did not hold it)
    script_claim: str = ""
    script_release: str = ""
    backslashes: bool = False

    def _run_lock_names(self, op: str, target: str, schema: str | None) -> dict[str, str]:
        """The run lock's name, for the templates: ``{name}`` (a literal) and ``{schema}``.

        The lock is the op's on the table in its schema: the op's ``schema=``
        when one is given, else the session's (SQL, read as the lock is
        taken). ``target`` without its schema goes into the name, so that
        ``schema="app"`` and no schema on a session whose schema is ``app``
        name the same lock. A short name: MariaDB takes 64 characters.
        """
        if schema is not None and target.startswith(f"{schema}."):
            target = target[len(schema) + 1 :]
        name = "sqlalchemy_ulid:" + hashlib.sha1(f"{op}:{target}".encode()).hexdigest()
        in_schema = self.schema if schema is None else literal(schema, self.backslashes)
        return {"name": literal(name), "schema": in_schema}

    def run_lock(self, op: str, target: str, schema: str | None = None) -> tuple[str, str]:
        """(take, give back) the lock of one run of ``op`` on ``target``, held while it runs.

        ``target`` may carry ``schema``'s name in front (a plan's target does).
        """
        names = self._run_lock_names(op, target, schema)
        return self.claim.format(**names), self.release.format(**names) if self.release else ""

    def script_lock(self, op: str, target: str, schema: str | None = None) -> tuple[str, str]:
        """(SQL true when taken, SQL true when given back): the run's lock, as a script takes it.

        The same lock as :meth:`run_lock`'s, held by the script's session
        from its start to its end: a script and an online run (or two
        scripts) of ``op`` on ``target`` never run at once.
        """
        names = self._run_lock_names(op, target, schema)
        return self.script_claim.format(**names), self.script_release.format(**names)

    def table_lock(self, schema: str | None) -> TableLock:
        """The state table's lock, for the state table of ``schema`` (None: the session's)."""
        database = self.database if schema is None else literal(schema, self.backslashes)

        def made(statements: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(s.format(database=database) for s in statements)

        return TableLock(made(self.lock), made(self.unlock), made(self.abort))

    def create_sql(self, table: str) -> str:
        """CREATE TABLE IF NOT EXISTS of the state table."""
        return self.create.format(table=table)

    def start_sql(
        self, table: str, op: str, target: str, plan: str, schema: str | None
    ) -> list[str]:
        """Under the lock: the table made if missing, the op's row added if missing.

        The row is there from the start, so that another op finishing
        meanwhile never drops the table under this one; its step stays
        empty until the first step is done. Two runners of one op on one
        target share the one row (its key).
        """

        def lit(text: str) -> str:
            return literal(text, self.backslashes)

        row = self.insert_new.format(
            table=table, op=lit(op), target=lit(target), plan=lit(plan), step="''", done="FALSE"
        )
        lock = self.table_lock(schema)
        return [*lock.take, self.create_sql(table), row, *lock.give_back]

    def finish_sql(self, table: str, op: str, target: str) -> tuple[str, str, str]:
        """(forget the op's row, SQL true when no row is left, drop the table).

        A finished op leaves nothing behind: autogenerate would offer to drop
        a table the models do not know.
        """
        return (
            f"DELETE FROM {table} WHERE op = {literal(op, self.backslashes)} "
            f"AND target = {literal(target, self.backslashes)}",
            f"NOT EXISTS (SELECT 1 FROM {table})",
            f"DROP TABLE IF EXISTS {table}",
        )

    def mark_sql(self, table: str, op: str, target: str, plan: str, step: str, done: bool) -> str:
        """The statement that records ``step`` of ``op`` on ``target`` as done."""

        def lit(text: str) -> str:
            return literal(text, self.backslashes)

        return self.upsert.format(
            table=table,
            op=lit(op),
            target=lit(target),
            plan=lit(plan),
            step=lit(step),
            done="TRUE" if done else "FALSE",
        )


@dataclass(frozen=True)
class StateRow:
    """A row of the state table."""

    op: str
    target: str
    plan: str
    step: str
    done: bool


def read_state(connection: Connection, op: str, target: str, schema: str | None) -> StateRow | None:
    """This op's row on ``target``, or None (no row, or no table yet)."""
    if not sa.inspect(connection).has_table(STATE_TABLE, schema=schema):
        return None
    table = sa.table(
        STATE_TABLE,
        *(sa.column(c) for c in ("op", "target", "plan", "step", "done")),
        schema=schema,
    )
    row = connection.execute(
        sa.select(table).where(table.c.op == op, table.c.target == target)
    ).first()
    if row is None:
        return None
    return StateRow(str(row.op), str(row.target), str(row.plan), str(row.step), bool(row.done))


@dataclass(frozen=True)
class LegacyState:
    """A conversion in flight under an earlier release's state table."""

    op: str
    #: ``table`` or ``table.column``
    target: str
    #: the table it was read from
    source: str
    #: the last step recorded (``None``: begun, no step recorded)
    step: str | None
    #: the row as it was stored
    detail: dict[str, Any]


def read_legacy(connection: Connection, schema: str | None = None) -> list[LegacyState]:
    """Every in-flight conversion recorded in an earlier release's state tables."""
    inspector = sa.inspect(connection)
    found: list[LegacyState] = []
    for name, op in LEGACY_TABLES:
        if not inspector.has_table(name, schema=schema):
            continue
        columns = [c["name"] for c in inspector.get_columns(name, schema=schema)]
        table = sa.table(name, *(sa.column(c) for c in columns), schema=schema)
        rows = [dict(row) for row in connection.execute(sa.select(table)).mappings()]
        if name == "ulid_key_conversions_offline":
            rows = _by_conversion(rows)
        found.extend(_legacy(name, op, row) for row in rows)
    return found


def _by_conversion(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The offline script's steps (a row each) as one row per conversion: its last done."""
    last: dict[str, dict[str, Any]] = {}
    for row in sorted(rows, key=lambda r: (str(r.get("name")), int(r.get("seq") or 0))):
        name = str(row.get("name"))
        if name not in last or row.get("done"):
            last[name] = row
    return list(last.values())


def _legacy(source: str, op: str, row: dict[str, Any]) -> LegacyState:
    if source == "ulid_storage_conversions":
        target = f"{row['table_name']}.{row['column_name']}"
        last = row.get("last_key")
        return LegacyState(op, target, source, None if last is None else f"copy:{last}", row)
    if source == "ulid_key_conversions":
        done = json.loads(row.get("done") or "[]")
        return LegacyState(op, str(row["name"]), source, done[-1] if done else None, row)
    # The offline MariaDB script's steps: one row a step, done or not.
    step = f"{row.get('seq')}:{row.get('label')}" if row.get("done") else None
    return LegacyState(op, str(row.get("name")), source, step, row)
