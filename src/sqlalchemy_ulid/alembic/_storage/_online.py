"""``alter_ulid_storage(..., online=True)`` on PostgreSQL: its plan, run or written.

The plan (``postgresql/storage.py``: a shadow column kept in step by a
trigger, a copy, checks validated while writers go on, indexes built
``CONCURRENTLY``, a short swap) is one: online, the engine's runner
(``_plan/run.py``) executes it; offline (``--sql``), the PostgreSQL
renderer writes it as a script for ``psql``. This module gives it what
only Python has: the copy's batches (walked in key order, the last key
kept in the state table), the op's own reading of a DEFAULT, and the
values that are not ids, named in :class:`~sqlalchemy_ulid.InvalidULID`.
:func:`run_storage_plan` runs a conversion's plan on either database
(``_shadow`` runs MariaDB's through it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from alembic.operations import Operations
from sqlalchemy.engine import Connection

from ..._dialects import dialect_row
from .._inspect import column_state, run
from .._online import check_online_context, phases_block
from .._plan.database import database_for
from .._plan.run import run_plan
from .._plan.state import literal
from ..postgresql.storage_copy import copy_batch, copy_position, fill_slots
from ._target import STATE_LOCK, Target, target_of
from ._values import check_text, convert_default

if TYPE_CHECKING:
    from .._plan.database import Database
    from .._plan.step import Plan
    from ._op import AlterULIDStorageOp

__all__ = ["Done", "alter_online", "run_storage_plan"]

#: The script's session, for its blocks: each reads what committed before it
#: (under REPEATABLE READ a copy batch that waited for a writer's row fails,
#: and the swap would check a stale catalog), and no role's statement_timeout
#: cancels the copy (one DO statement) or an index build on every rerun; each
#: lock wait stays bounded by lock_timeout.
_SESSION = "SET default_transaction_isolation = 'read committed';\nSET statement_timeout = 0;\n"
_RESET = "RESET default_transaction_isolation;\nRESET statement_timeout;\n"


def alter_online(operations: Operations, op: AlterULIDStorageOp) -> None:
    """Run ``op``'s plan on PostgreSQL, or write it into the ``--sql`` script."""
    context = operations.get_context()
    database = database_for(context.dialect)
    target = target_of(op, context.dialect)
    if context.as_sql:
        plan = database.alter_storage(target, None)
        with context.autocommit_block():
            context.impl.static_output(
                _done_notice(target) + _SESSION + database.render(plan) + _RESET
            )
        return
    check_online_context(operations, op.op_name)
    connection = operations.get_bind()
    plan = database.alter_storage(target, lambda c: _Copy(c, op, target).batches())
    with phases_block(operations):
        try:
            run_storage_plan(
                connection, plan, database, op, lambda: _before_changes(connection, op, target)
            )
        except sa.exc.DBAPIError as exc:
            if not exc.connection_invalidated:
                _name_bad_values(connection, op, target, exc)
            raise


class Done(Exception):
    """Every step of the plan is done already: a rerun after success changes nothing."""


def run_storage_plan(
    connection: Connection,
    plan: Plan,
    database: Database,
    op: AlterULIDStorageOp,
    before_changes: Callable[[], None],
) -> None:
    """Run a storage conversion's plan; ``before_changes`` raises :class:`Done` when done."""
    try:
        run_plan(
            connection,
            plan,
            database,
            progress=op.progress,
            sized_by_time=op.sized_by_time,
            before_changes=before_changes,
        )
    except Done:
        return


def _done(t: Target) -> str:
    """SQL true when the column is converted and nothing of a conversion is left.

    (No state table of an earlier release either: the plan takes that over.)
    """
    return (
        f"{t.col_kind} = {literal(t.to_kind)} AND {t.shadow_kind} IS NULL "
        f"AND to_regclass({t.legacy_lit}) IS NULL"
    )


def _done_notice(t: Target) -> str:
    done = _done(t)
    message = literal(
        f"{t.op}: {t.table_name}.{t.column_name} is {t.to_kind} storage already: the rest "
        "of this script does nothing"
    )
    return f"DO $ulid$ BEGIN IF ({done}) THEN RAISE NOTICE '%', {message}; END IF; END $ulid$;\n"


def _before_changes(connection: Connection, op: AlterULIDStorageOp, t: Target) -> None:
    """After the checks, before any change: the op's own reading of the DEFAULT; the state table.

    Raises :class:`Done` when the column is converted already (no state
    table is made for nothing).

    The state table is created under the lock the earlier release's
    conversions took too: two conversions starting at once would both
    create it, one failing.
    """
    if run(connection, f"SELECT {_done(t)}").scalar():
        raise Done
    state = column_state(connection, op.table_name, op.column_name, op.schema)
    if state is not None and op.found_kind(state.type, None) == t.from_kind:
        sql = op.convert_sql(dialect_row(connection.dialect))
        assert sql is not None
        convert_default(state.default, op, connection.dialect, sql, t.to_kind)
    database = database_for(connection.dialect)
    create = database.state.create_sql(t.state)
    run(connection, f"BEGIN; {STATE_LOCK}; {create}; COMMIT")


def _name_bad_values(
    connection: Connection, op: AlterULIDStorageOp, t: Target, exc: BaseException
) -> None:
    """A step failed on a value that is not an id (written after the check): name it."""
    if t.bad is None:
        return
    # Only while the column is still in from_storage: the check reads it as such.
    if run(connection, f"SELECT {t.col_kind} = {literal(t.from_kind)}").scalar():
        check_text(connection, t.table, t.column, t.bad_value(t.column), op, exc)


class _Copy:
    """The copy's Python body: batches in key order up to the highest key at the start."""

    def __init__(self, connection: Connection, op: AlterULIDStorageOp, t: Target) -> None:
        self.connection, self.op, self.t = connection, op, t

    def batches(self) -> Callable[[int], int]:
        connection, t = self.connection, self.t
        key, key_type = connection.execute(
            sa.text(
                "SELECT quote_ident(a.attname), format_type(a.atttypid, a.atttypmod) "
                "FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = i.indkey[0] WHERE i.indrelid = to_regclass(:t) AND i.indisprimary"
            ),
            {"t": t.table},
        ).one()
        last: list[Any] = [run(connection, f"SELECT {copy_position(t)}").scalar()]
        # The trigger existed before this read: a row with a higher key was
        # written after it, through it (the equality check proves it later).
        high = run(
            connection,
            f"SELECT CAST(t.{key} AS TEXT) FROM {t.table} AS t ORDER BY t.{key} DESC LIMIT 1",
        ).scalar()

        def batch(limit: int) -> int:
            if high is None:
                return 0
            statement = copy_batch(t, key, key_type, last[0] is not None, ":n")
            statement = fill_slots(statement, ":high", ":last")
            params = {"high": high, "last": last[0], "n": limit}
            top, moved = connection.execute(sa.text(statement), params).one()
            if top is None:
                return 0
            last[0] = top
            # A batch of rows the trigger had done still moves the copy on.
            return max(1, int(moved))

        return batch
