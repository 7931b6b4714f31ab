"""``alter_ulid_storage(..., online=True)`` on MariaDB/MySQL: its plan, run or written.

The plan (``mysql/storage.py``: a shadow table kept in step by triggers, a
copy in key order, an atomic ``RENAME TABLE``) is one: online, the
engine's runner (``_plan/run.py``) executes it, holding the run's lock
(``GET_LOCK``, the script's too) from before its checks to its end;
offline (``--sql``), the MariaDB renderer writes it as a script for the
``mariadb`` client. A rerun after success changes nothing: the column is
converted and nothing of a run is left, so not even the state table is
made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from alembic.operations import Operations

from ..._convert_sql import ConvertSQL
from .._inspect import run, strict_mode
from .._online import check_online_context, phases_block
from .._plan.database import database_for
from ..mysql.storage import done_sql
from ..mysql.storage_copy import copy_online
from ..mysql.storage_target import Names
from ._online import Done, run_storage_plan

if TYPE_CHECKING:
    from ._op import AlterULIDStorageOp

__all__ = ["alter_shadow"]


def alter_shadow(
    operations: Operations, op: AlterULIDStorageOp, sql: ConvertSQL, from_kind: str, to_kind: str
) -> None:
    """Run ``op``'s plan online, or write it into the ``--sql`` script."""
    context = operations.get_context()
    database = database_for(context.dialect)
    n = Names(context.dialect, op, sql, from_kind, to_kind)
    if context.as_sql:
        context.impl.static_output(database.render(database.alter_storage(n, None)))
        return
    check_online_context(operations, op.op_name)
    connection = operations.get_bind()
    plan = database.alter_storage(n, lambda c: copy_online(c, n))

    def before_changes() -> None:
        if run(connection, f"SELECT {done_sql(n)}").scalar():
            raise Done

    with phases_block(operations), strict_mode(connection):
        run_storage_plan(connection, plan, database, op, before_changes)
