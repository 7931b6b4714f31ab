"""PostgreSQL's migration planners, catalog and script renderer.

Registered for the ``postgresql`` dialect (:class:`PostgreSQL`); the engine
finds it with :func:`~.._plan.database.database_for`.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql.ranges import AbstractRange
from sqlalchemy.engine import Connection

from .._inspect import run
from .._plan.database import Database, DDLFrame, FillRows
from .._plan.render_pg import render_pg
from .._plan.step import Plan, Step
from .._proxy import behind_a_proxy
from .add_column import plan_add_column
from .catalog import LOCKS, RUNNER, STATE, UNBOUNDED, KeyCatalog
from .fill import fill_batch
from .primary_key import postgresql_script
from .storage import plan_storage
from .storage_checks import in_place_checks
from .storage_using import using_script

__all__ = ["PostgreSQL"]

logger = logging.getLogger("alembic.runtime.migration")

#: A concurrent build waits for every older transaction, but writers never
#: wait for it: each try may wait this long.
CONCURRENT_WAIT = 30.0


def _ms(seconds: float) -> str:
    return f"'{max(1, round(seconds * 1000))}ms'"


class PostgreSQL(Database):
    """PostgreSQL 11+ (``COMMIT`` inside ``DO`` blocks)."""

    __dialect__ = ("postgresql",)
    state = STATE
    locks = LOCKS
    key_catalog = KeyCatalog
    # check_violation (VALIDATE), not_null_violation (SET NOT NULL)
    late_row_codes = frozenset({"23514", "23502"})
    script_kinds = ("uuid", "binary")

    def add_column(self, op: Any, facts: Any) -> Plan:
        """See :meth:`Database.add_column`."""
        return plan_add_column(op, facts)

    def primary_key_script(
        self, operations: Any, op: Any, direction: Literal["ulid", "legacy"], name: str
    ) -> None:
        """See :meth:`Database.primary_key_script`."""
        postgresql_script(operations, op, direction, name)

    def alter_storage(self, target: Any, copy: Any) -> Plan:
        """See :meth:`Database.alter_storage`."""
        return plan_storage(target, copy)

    def storage_script(self, target: Any) -> str | None:
        """See :meth:`Database.storage_script`."""
        return using_script(target)

    def storage_checks(self, target: Any) -> list[Step]:
        """See :meth:`Database.storage_checks`."""
        return in_place_checks(target)

    def fill_batch(self, connection: Connection, rows: FillRows) -> int:
        """See :meth:`Database.fill_batch`."""
        return fill_batch(connection, rows)

    def fill_key_refusal(self, key_type: Any) -> str | None:
        """See :meth:`Database.fill_key_refusal`; and a money, tsvector or range key.

        Their values come back from the driver as text or objects that go
        back as another type (``money >= numeric`` has no operator).
        """
        if isinstance(key_type, (postgresql.MONEY, postgresql.TSVECTOR, AbstractRange)):
            return (
                f"a primary key of type {key_type.__class__.__name__} cannot be sent back as "
                "the values read from it, so the backfill could not find its rows again"
            )
        return super().fill_key_refusal(key_type)

    def render(self, plan: Plan) -> str:
        """See :meth:`Database.render`."""
        return render_pg(plan, self.state, self.quote_table(plan.schema))

    def ddl_frame(self, seconds: float) -> DDLFrame:
        """See :meth:`Database.ddl_frame`."""
        # SET LOCAL: the timeouts end with the step's transaction, on any pooler.
        return DDLFrame(
            ["BEGIN", f"SET LOCAL lock_timeout = {_ms(seconds)}", UNBOUNDED],
            lambda statement: statement,
            ["COMMIT"],
            ["ROLLBACK"],
        )

    def unbounded_frame(self) -> DDLFrame:
        """See :meth:`Database.unbounded_frame`."""
        # READ COMMITTED whatever the engine's level: each statement sees the
        # rows committed before it, as in autocommit, and the session keeps
        # no snapshot between statements (one would hold back VACUUM and the
        # concurrent index builds, and a batch would fail on a row a writer
        # changed since the transaction's first statement).
        return DDLFrame(
            ["BEGIN ISOLATION LEVEL READ COMMITTED", UNBOUNDED, RUNNER],
            lambda statement: statement,
            ["COMMIT"],
            ["ROLLBACK"],
        )

    def run_concurrent(self, connection: Connection, statement: str, seconds: float) -> None:
        """See :meth:`Database.run_concurrent`."""
        # Outside a transaction SET LOCAL does nothing: on a direct connection
        # the session's own setting is set for the one statement and put back
        # after it; through a pooler the two could land on two server
        # sessions, so it runs under the server's own (writers never wait
        # for a concurrent build).
        if behind_a_proxy(connection):
            logger.warning(
                "%s: the connection goes through a proxy or pooler; it runs under the "
                "server's own lock_timeout and statement_timeout (a statement_timeout of "
                "the role or database can cancel it). Run migrations on a direct "
                "connection for a bounded wait and no statement timeout",
                " ".join(statement.split())[:80],
            )
            run(connection, statement)
            return
        # A role's or database's statement_timeout would cancel a build that
        # waits for older transactions (it waits for every one, writers or
        # not) and leave its index INVALID, on every rerun: the build runs
        # without one, its lock waits bounded by lock_timeout.
        saved = run(
            connection,
            "SELECT current_setting('lock_timeout'), current_setting('statement_timeout')",
        ).one()
        run(connection, f"SET lock_timeout = {_ms(max(seconds, CONCURRENT_WAIT))}")
        run(connection, "SET statement_timeout = 0")
        try:
            run(connection, statement)
        finally:
            if not connection.invalidated:
                for name, value in zip(("lock_timeout", "statement_timeout"), saved, strict=True):
                    run(connection, f"SET {name} = '" + str(value).replace("'", "''") + "'")
