"""How ``alter_ulid_storage`` and ``alter_uuid7_storage`` run: one procedure per database.

The op classes (``_op``, ``_uuid7``) hold the options and what the key kind
decides; this module is the implementation Alembic calls for both: the
checks before any DDL, then one ``ALTER ... USING`` (PostgreSQL), the
resumable ``VARBINARY`` holding type (MariaDB/MySQL) or an ``UPDATE`` and a
table rebuild (SQLite), or the ``online=True`` paths (``_online``,
``_shadow``), or the ``--sql`` script. Importing it registers the
implementation of ``alter_ulid_storage``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import partial
from typing import Any

import sqlalchemy as sa
from alembic.operations import Operations
from alembic.util import CommandError

from ..._convert_sql import ConvertSQL
from ..._dialects import dialect_row, dialects_with
from .._inspect import execute, plain_session, quote, refuse_column_checks, strict_mode
from .._locks import DEFAULT_LOCK_TIMEOUT, lock_safe
from .._plan.database import database_for
from .._plan.run import run_checks
from ._op import AlterULIDStorageOp
from ._target import target_of
from ._values import (
    ColumnPlan,
    check_text,
    define_unhex,
    read_column,
)

__all__ = ["alter_storage"]


@Operations.implementation_for(AlterULIDStorageOp)
@plain_session
def alter_storage(operations: Operations, op: AlterULIDStorageOp) -> None:
    context = operations.migration_context
    dialect = context.dialect
    row = dialect_row(dialect)
    sql = op.convert_sql(row)
    if sql is None:
        raise NotImplementedError(
            f"{op.op_name} is not implemented for {dialect.name!r} "
            f"(supported: {dialects_with(op.convert_sql)})"
        )
    from_kind = op.kind(op.from_storage, dialect)
    to_kind = op.kind(op.to_storage, dialect)
    if from_kind == to_kind:
        raise ValueError(
            f"{op.from_storage!r} and {op.to_storage!r} are both {from_kind} storage "
            f"on {dialect.name}: nothing to convert"
        )
    if not context.as_sql:
        refuse_column_checks(
            operations.get_bind(),
            op.op_name,
            op.table_name,
            op.column_name,
            op.schema,
            lambda type_: op.found_kind(type_, None) == from_kind,
        )
    if op.online:
        # By the dialect row: no lock waits to bound (SQLite), or no
        # ALTER ... USING (MariaDB/MySQL: a shadow table instead).
        if row.locks is None:
            raise ValueError(
                f"{op.op_name}(online=True) is for PostgreSQL and MariaDB/MySQL, whose "
                "writers it keeps going; SQLite has one writer at a time: drop online=True"
            )
        if not sql.alter_using:
            from ._shadow import alter_shadow

            alter_shadow(operations, op, sql, from_kind, to_kind)
            return
        from ._online import alter_online

        alter_online(operations, op)
        return
    column = quote(dialect, op.column_name)
    table = quote(dialect, op.table_name, op.schema)
    converted = sql.convert(column, from_kind, to_kind)

    if context.as_sql:
        if op.nullable is None:
            raise CommandError(
                f"{op.op_name}({op.table_name!r}, {op.column_name!r}): pass nullable= "
                "in offline mode (the column's nullability cannot be read from a database)"
            )
        script = _script(op, dialect) if sql.alter_using else None
        if script is not None:
            # One block that reads the column as it runs (PostgreSQL): it
            # carries the DEFAULT as online does, and can be run again.
            context.impl.static_output(script)
            return
        if sql.holding is not None:
            # MariaDB: guarded blocks that read the column as they run.
            from ._one_mariadb import alter_in_place_script

            alter_in_place_script(operations, op, sql, from_kind, to_kind)
            return
        plan = ColumnPlan(nullable=op.nullable, to_holding=False)
        _convert(operations, op, plan, sql, table, column, converted)
        return
    connection = operations.get_bind()
    if sql.alter_using:  # PostgreSQL: a view or rule reading the column, as the script asks
        run_checks(connection, database_for(dialect).storage_checks(target_of(op, dialect)))
    if sql.holding is not None:
        # MariaDB: the refusals of the --sql script, asked from the same SQL.
        from ._one_mariadb import refuse_in_place

        refuse_in_place(connection, op, sql, from_kind, to_kind)
    plan = read_column(connection, op, sql, from_kind, to_kind, table, column)
    if plan.done:
        return
    define_unhex(connection)
    # PostgreSQL converts in one statement: a savepoint keeps the
    # transaction usable after a refusal, to find the values to name.
    savepoint = connection.begin_nested() if sql.alter_using else contextlib.nullcontext()
    with strict_mode(connection):
        try:
            with savepoint:
                _convert(operations, op, plan, sql, table, column, converted)
        except sa.exc.DBAPIError as exc:
            # A value that is not a ULID arrived after the check (or the
            # conversion found it): the statement failed, nothing was stored.
            if op.checked_before(from_kind) and not _connection_lost(exc):
                check_text(connection, table, column, sql.bad_text(column, from_kind), op, exc)
            raise


def _script(op: AlterULIDStorageOp, dialect: Any) -> str | None:
    """The database's own script of the op, or None (Alembic renders the statements)."""
    return database_for(dialect).storage_script(target_of(op, dialect))


def _connection_lost(exc: sa.exc.DBAPIError) -> bool:
    return bool(exc.connection_invalidated)


def _convert(
    operations: Operations,
    op: AlterULIDStorageOp,
    plan: ColumnPlan,
    sql: ConvertSQL,
    table: str,
    column: str,
    converted: str,
) -> None:
    dialect = operations.migration_context.dialect
    old_type = op.column_type(op.from_storage, dialect)
    new_type = op.column_type(op.to_storage, dialect)

    def alter(**changes: Any) -> None:
        """One ALTER of the column, waiting for its lock only briefly (see _ddl)."""
        change = partial(
            operations.alter_column, op.table_name, op.column_name, schema=op.schema, **changes
        )
        _ddl(operations, op, change)

    default = None if plan.default is None else sa.text(plan.default)
    if sql.alter_using:
        if plan.default is not None:
            # PostgreSQL converts the default by cast, not by USING.
            alter(server_default=None)
        alter(
            type_=new_type,
            existing_type=old_type,
            existing_nullable=plan.nullable,
            existing_comment=plan.comment,
            postgresql_using=converted,
        )
        if default is not None:
            alter(server_default=default)
        return
    holding = sql.holding() if sql.holding is not None else old_type
    if plan.to_holding:
        alter(
            type_=holding,
            existing_type=old_type,
            existing_nullable=plan.nullable,
            # MariaDB's MODIFY restates the whole column: without these the
            # DEFAULT and COMMENT go (and a rerun after a stop here could not
            # carry the DEFAULT it no longer finds).
            existing_server_default=(
                None if plan.old_default is None else sa.text(plan.old_default)
            ),
            existing_comment=plan.comment,
        )
    if plan.update:
        execute(operations, f"UPDATE {table} SET {column} = {converted} WHERE {column} IS NOT NULL")

    def final_type() -> None:
        with operations.batch_alter_table(
            op.table_name, schema=op.schema, copy_from=op.copy_from
        ) as batch:
            batch.alter_column(
                op.column_name,
                type_=new_type,
                existing_type=holding,
                existing_nullable=plan.nullable,
                existing_server_default=default,
                # SQLite's batch copies the reflected (old) DEFAULT unless told.
                server_default=False if default is None else default,
                existing_comment=plan.comment,
            )

    _ddl(operations, op, final_type)


def _ddl(operations: Operations, op: AlterULIDStorageOp, action: Callable[[], object]) -> None:
    """Run one ALTER so that it waits for its lock only ``lock_timeout`` (online)."""
    if operations.migration_context.as_sql:
        action()
        return
    timeout = DEFAULT_LOCK_TIMEOUT if op.lock_timeout is None else op.lock_timeout
    lock_safe(operations.get_bind(), action, f"ALTER TABLE {op.table_name}", lock_timeout=timeout)
