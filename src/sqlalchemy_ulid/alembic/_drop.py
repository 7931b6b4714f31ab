"""The Alembic op that drops a column made by ``add_ulid_column``.

Importing this module registers ``op.drop_ulid_column`` on Alembic's
``Operations``; :mod:`sqlalchemy_ulid.alembic` imports it, and that import
(or Alembic's plugin entry point) is the user's opt-in.
"""

from __future__ import annotations

from datetime import timedelta
from functools import partial

import sqlalchemy as sa
from alembic.operations import MigrateOperation, Operations

from .._dialects import dialect_row
from ._catalog import catalog_for
from ._inspect import column_state, plain_session, unique_name, unique_on
from ._invoke import invoke
from ._locks import DEFAULT_LOCK_TIMEOUT, check_lock_timeout, lock_safe

__all__ = ["DropULIDColumnOp"]


@Operations.register_operation("drop_ulid_column")
class DropULIDColumnOp(MigrateOperation):
    """Drop a column made by ``add_ulid_column``, with its unique constraint."""

    def __init__(
        self,
        table_name: str,
        column_name: str,
        *,
        unique: bool = True,
        constraint_name: str | None = None,
        schema: str | None = None,
        lock_timeout: float | timedelta | None = None,
    ) -> None:
        self.table_name = table_name
        self.column_name = column_name
        self.unique = unique
        self.constraint_name = constraint_name
        self.schema = schema
        self.lock_timeout = None if lock_timeout is None else check_lock_timeout(lock_timeout)

    @classmethod
    def drop_ulid_column(
        cls,
        operations: Operations,
        table_name: str,
        column_name: str,
        *,
        unique: bool = True,
        constraint_name: str | None = None,
        schema: str | None = None,
        lock_timeout: float | timedelta | None = None,
    ) -> None:
        """Drop a ULID column and its unique constraint (undoes ``add_ulid_column``).

        Works offline too. Online it drops whatever unique constraint or
        unique index covers just this column (PostgreSQL may have cut a long
        name), and does nothing if the column is gone (a rerun). On SQLite
        ``add_ulid_column`` makes a unique index, so this is ``DROP INDEX``
        and ``DROP COLUMN`` (SQLite 3.35+), offline as well; a table-level
        unique constraint is dropped by recreating the table (online).

        Args:
            operations: supplied by Alembic (call it as ``op.drop_ulid_column``).
            table_name: the table.
            column_name: the ULID column.
            unique: whether ``add_ulid_column`` made a unique constraint.
            constraint_name: its name; default ``uq_<table>_<column>``.
            schema: the table's schema.
            lock_timeout: seconds (or a timedelta) each ALTER may wait for
                its table lock before it retries (default 1 s); see
                :class:`~sqlalchemy_ulid.alembic.LockTimeoutError`.
        """
        invoke(cls, operations, locals())

    def reverse(self) -> MigrateOperation:
        raise NotImplementedError("add_ulid_column needs the timestamp column to date from")


@Operations.implementation_for(DropULIDColumnOp)
@plain_session
def _drop_ulid_column(operations: Operations, op: DropULIDColumnOp) -> None:
    context = operations.migration_context
    dialect = context.dialect
    by_index = dialect_row(dialect).unique_by_index
    name = op.constraint_name or unique_name(op.table_name, op.column_name, dialect)
    refusal = (
        f"drop_ulid_column: {op.table_name}.{op.column_name} is named by ",
        ", which would fail (or be dropped) once the column is gone; nothing was changed. "
        "Drop or change them first",
    )
    catalog = catalog_for(dialect)
    if context.as_sql:
        check = catalog.column_users_check(
            dialect, op.table_name, op.column_name, op.schema, refusal
        )
        if check is not None:  # refused in the script too, before any change
            context.impl.static_output(check)
        if op.unique and by_index:
            operations.drop_index(name, op.table_name, schema=op.schema)
        elif op.unique:
            operations.drop_constraint(name, op.table_name, type_="unique", schema=op.schema)
        operations.drop_column(op.table_name, op.column_name, schema=op.schema)
        return
    connection = operations.get_bind()
    if column_state(connection, op.table_name, op.column_name, op.schema) is None:
        return  # already dropped (a rerun)
    users = catalog.column_users(connection, op.table_name, op.column_name, op.schema)
    if users:
        raise ValueError(refusal[0] + ", ".join(users) + refusal[1])
    inspector = sa.inspect(connection)
    constraints = {
        str(u["name"])
        for u in inspector.get_unique_constraints(op.table_name, schema=op.schema)
        if u["column_names"] == [op.column_name]
    }
    # Every unique constraint or index on just this column goes with it,
    # whatever its name (PostgreSQL may have cut a long default name).
    uniques = unique_on(connection, op.table_name, op.column_name, op.schema)
    if not op.unique:
        uniques = []
    if dialect_row(dialect).locks is None:  # SQLite: the batch may copy the table
        with operations.batch_alter_table(op.table_name, schema=op.schema) as batch:
            for unique in uniques:
                if unique in constraints:
                    batch.drop_constraint(unique, type_="unique")
                else:
                    batch.drop_index(unique)
            batch.drop_column(op.column_name)
        return
    # One statement at a time, each waiting for its lock only lock_timeout:
    # on MariaDB each commits, so a retry must not repeat the one before.
    timeout = DEFAULT_LOCK_TIMEOUT if op.lock_timeout is None else op.lock_timeout
    for unique in uniques:
        if unique in constraints:
            drop = partial(
                operations.drop_constraint, unique, op.table_name, type_="unique", schema=op.schema
            )
        else:
            drop = partial(operations.drop_index, unique, op.table_name, schema=op.schema)
        lock_safe(connection, drop, f"DROP {unique}", lock_timeout=timeout)
    column = partial(operations.drop_column, op.table_name, op.column_name, schema=op.schema)
    lock_safe(connection, column, f"DROP COLUMN {op.column_name}", lock_timeout=timeout)
