"""Alembic ops that create and drop the server-side ``gen_ulid()`` and ``gen_uuid7()``.

Importing this module registers ``op.create_ulid_function``,
``op.drop_ulid_function``, ``op.create_uuid7_function`` and
``op.drop_uuid7_function`` on Alembic's ``Operations``;
:mod:`sqlalchemy_ulid.alembic` imports it, and that import is the user's
opt-in.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic.operations import MigrateOperation, Operations

from .._defaults import (
    drop_ulid_function,
    drop_ulid_function_ddl,
    install_ulid_function,
    ulid_function_ddl,
)
from .._uuid7_defaults import (
    drop_uuid7_function,
    drop_uuid7_function_ddl,
    install_uuid7_function,
    uuid7_function_ddl,
)

__all__ = [
    "CreateULIDFunctionOp",
    "CreateUUID7FunctionOp",
    "DropULIDFunctionOp",
    "DropUUID7FunctionOp",
]


@Operations.register_operation("create_ulid_function")
class CreateULIDFunctionOp(MigrateOperation):
    """Create the server-side ``gen_ulid()`` function."""

    @classmethod
    def create_ulid_function(cls, operations: Operations) -> None:
        """Create ``gen_ulid()`` (see :func:`sqlalchemy_ulid.install_ulid_function`).

        Offline it writes the ``CREATE FUNCTION`` statements into the script.
        SQLite keeps no functions in the database: online the function is
        defined on the migration's connection, offline nothing is written.

        Args:
            operations: supplied by Alembic (call it as ``op.create_ulid_function``).
        """
        operations.invoke(cls())

    def reverse(self) -> DropULIDFunctionOp:
        return DropULIDFunctionOp()


@Operations.register_operation("drop_ulid_function")
class DropULIDFunctionOp(MigrateOperation):
    """Drop the server-side ``gen_ulid()`` function."""

    @classmethod
    def drop_ulid_function(cls, operations: Operations) -> None:
        """Drop ``gen_ulid()`` if it exists (a no-op on SQLite).

        Args:
            operations: supplied by Alembic (call it as ``op.drop_ulid_function``).
        """
        operations.invoke(cls())

    def reverse(self) -> CreateULIDFunctionOp:
        return CreateULIDFunctionOp()


def _run_statements(operations: Operations, statements: Sequence[str]) -> None:
    for statement in statements:
        operations.execute(statement)


@Operations.implementation_for(CreateULIDFunctionOp)
def _create_ulid_function(operations: Operations, op: CreateULIDFunctionOp) -> None:
    context = operations.migration_context
    if context.as_sql:
        _run_statements(operations, ulid_function_ddl(context.dialect))
    else:
        install_ulid_function(operations.get_bind())


@Operations.implementation_for(DropULIDFunctionOp)
def _drop_ulid_function(operations: Operations, op: DropULIDFunctionOp) -> None:
    context = operations.migration_context
    if context.as_sql:
        _run_statements(operations, drop_ulid_function_ddl(context.dialect))
    else:
        drop_ulid_function(operations.get_bind())


# -- gen_uuid7() -------------------------------------------------------------------


@Operations.register_operation("create_uuid7_function")
class CreateUUID7FunctionOp(MigrateOperation):
    """Create the server-side ``gen_uuid7()`` function."""

    @classmethod
    def create_uuid7_function(cls, operations: Operations) -> None:
        """Create ``gen_uuid7()`` (see :func:`sqlalchemy_ulid.install_uuid7_function`).

        Online, the function suits the server's version (on PostgreSQL 18+
        it calls ``uuidv7()``; PostgreSQL 12 and MariaDB before 10.10 are
        refused). Offline it writes the PostgreSQL 13+ / MariaDB 10.10+
        statements into the script. SQLite: as ``op.create_ulid_function``.

        Args:
            operations: supplied by Alembic (call it as ``op.create_uuid7_function``).
        """
        operations.invoke(cls())

    def reverse(self) -> DropUUID7FunctionOp:
        return DropUUID7FunctionOp()


@Operations.register_operation("drop_uuid7_function")
class DropUUID7FunctionOp(MigrateOperation):
    """Drop the server-side ``gen_uuid7()`` function."""

    @classmethod
    def drop_uuid7_function(cls, operations: Operations) -> None:
        """Drop ``gen_uuid7()`` if it exists (a no-op on SQLite).

        Args:
            operations: supplied by Alembic (call it as ``op.drop_uuid7_function``).
        """
        operations.invoke(cls())

    def reverse(self) -> CreateUUID7FunctionOp:
        return CreateUUID7FunctionOp()


@Operations.implementation_for(CreateUUID7FunctionOp)
def _create_uuid7_function(operations: Operations, op: CreateUUID7FunctionOp) -> None:
    context = operations.migration_context
    if context.as_sql:
        _run_statements(operations, uuid7_function_ddl(context.dialect))
    else:
        install_uuid7_function(operations.get_bind())


@Operations.implementation_for(DropUUID7FunctionOp)
def _drop_uuid7_function(operations: Operations, op: DropUUID7FunctionOp) -> None:
    context = operations.migration_context
    if context.as_sql:
        _run_statements(operations, drop_uuid7_function_ddl(context.dialect))
    else:
        drop_uuid7_function(operations.get_bind())
