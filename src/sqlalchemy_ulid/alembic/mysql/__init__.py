"""MariaDB's (and MySQL's) migration planners, catalog and script renderer.

Registered for the ``mysql`` and ``mariadb`` dialects (:class:`MariaDB`);
the engine finds it with :func:`~.._plan.database.database_for`.
"""

from __future__ import annotations

from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Connection

from .._inspect import run
from .._plan.database import Database, DDLFrame, FillRows
from .._plan.render_mariadb import lock_wrapped, render_mariadb
from .._plan.step import Plan
from .add_column import plan_add_column
from .catalog import LOCKS, STATE, KeyCatalog
from .fill import fill_batch
from .primary_key import mariadb_script
from .storage import plan_storage

__all__ = ["MariaDB"]

_SAVE = (
    "SET @sqlalchemy_ulid_lock_wait = @@SESSION.lock_wait_timeout, "
    "@sqlalchemy_ulid_row_wait = @@SESSION.innodb_lock_wait_timeout"
)
_RESTORE = (
    "SET SESSION lock_wait_timeout = @sqlalchemy_ulid_lock_wait, "
    "innodb_lock_wait_timeout = @sqlalchemy_ulid_row_wait"
)


class MariaDB(Database):
    """MariaDB (and, online, MySQL)."""

    __dialect__ = ("mysql", "mariadb")
    state = STATE
    locks = LOCKS
    key_catalog = KeyCatalog
    # data truncated, invalid use of NULL, column cannot be NULL
    late_row_codes = frozenset({1265, 1138, 1048})
    script_kinds = ("binary",)

    def add_column(self, op: Any, facts: Any) -> Plan:
        """See :meth:`Database.add_column`."""
        return plan_add_column(op, facts)

    def alter_storage(self, target: Any, copy: Any) -> Plan:
        """See :meth:`Database.alter_storage` (``target``: ``storage_target.Names``)."""
        return plan_storage(target, copy)

    def primary_key_script(
        self, operations: Any, op: Any, direction: Literal["ulid", "legacy"], name: str
    ) -> None:
        """See :meth:`Database.primary_key_script`."""
        mariadb_script(operations, op, direction, name)

    def fill_batch(self, connection: Connection, rows: FillRows) -> int:
        """See :meth:`Database.fill_batch`."""
        return fill_batch(connection, rows, mariadb=getattr(self.dialect, "is_mariadb", False))

    def fill_key_refusal(self, key_type: Any) -> str | None:
        """See :meth:`Database.fill_key_refusal`; and an ENUM or SET key.

        Such a key sorts by its members' numbers but compares with a text
        by the text: the walk in key order (``key > last``) would skip rows.
        """
        if isinstance(key_type, (sa.Enum, mysql.SET)):
            return (
                f"a primary key of type {key_type.__class__.__name__} sorts by its members' "
                "numbers but compares with text as text, so a walk in key order would skip rows"
            )
        return super().fill_key_refusal(key_type)

    def render(self, plan: Plan) -> str:
        """See :meth:`Database.render`."""
        return render_mariadb(plan, self.state, self.quote_table(plan.schema))

    def ddl_frame(self, seconds: float) -> DDLFrame:
        """See :meth:`Database.ddl_frame`."""
        if getattr(self.dialect, "is_mariadb", False):
            # The timeout is the statement's alone: nothing is left on the session.
            return DDLFrame([], lambda statement: lock_wrapped(statement, seconds), [], [])
        # MySQL has no SET STATEMENT: the session's, put back after the step.
        whole = int(seconds)
        return DDLFrame(
            [
                _SAVE,
                f"SET SESSION lock_wait_timeout = {whole}, "
                f"innodb_lock_wait_timeout = {max(1, whole)}",
            ],
            lambda statement: statement,
            [_RESTORE],
            [_RESTORE],
        )

    def run_concurrent(self, connection: Connection, statement: str, seconds: float) -> None:
        """See :meth:`Database.run_concurrent`."""
        run(connection, statement)
