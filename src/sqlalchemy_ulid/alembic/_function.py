"""Alembic ops that create and drop the server-side ``gen_ulid()`` and ``gen_uuid7()``.

Importing this module registers ``op.create_ulid_function``,
``op.drop_ulid_function``, ``op.create_uuid7_function`` and
``op.drop_uuid7_function`` on Alembic's ``Operations``;
:mod:`sqlalchemy_ulid.alembic` imports it, and that import is the user's
opt-in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from alembic.operations import MigrateOperation, Operations

from .._kinds import ULID_KEYS, UUID7_KEYS, KeyKind
from .._server_defaults import drop, drop_function_ddl, function_ddl, install

__all__ = [
    "CreateULIDFunctionOp",
    "CreateUUID7FunctionOp",
    "DropULIDFunctionOp",
    "DropUUID7FunctionOp",
]


@Operations.register_operation("create_ulid_function")
class CreateULIDFunctionOp(MigrateOperation):
    """Create the server-side ``gen_ulid()`` function."""

    kind: ClassVar[KeyKind] = ULID_KEYS

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

    kind: ClassVar[KeyKind] = ULID_KEYS

    @classmethod
    def drop_ulid_function(cls, operations: Operations) -> None:
        """Drop ``gen_ulid()`` if it exists (a no-op on SQLite).

        Args:
            operations: supplied by Alembic (call it as ``op.drop_ulid_function``).
        """
        operations.invoke(cls())

    def reverse(self) -> CreateULIDFunctionOp:
        return CreateULIDFunctionOp()


# -- gen_uuid7() -------------------------------------------------------------------


@Operations.register_operation("create_uuid7_function")
class CreateUUID7FunctionOp(MigrateOperation):
    """Create the server-side ``gen_uuid7()`` function."""

    kind: ClassVar[KeyKind] = UUID7_KEYS

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

    kind: ClassVar[KeyKind] = UUID7_KEYS

    @classmethod
    def drop_uuid7_function(cls, operations: Operations) -> None:
        """Drop ``gen_uuid7()`` if it exists (a no-op on SQLite).

        Args:
            operations: supplied by Alembic (call it as ``op.drop_uuid7_function``).
        """
        operations.invoke(cls())

    def reverse(self) -> CreateUUID7FunctionOp:
        return CreateUUID7FunctionOp()


# -- one implementation per op, for every kind ------------------------------------


def _run_statements(operations: Operations, statements: Sequence[str]) -> None:
    for statement in statements:
        operations.execute(statement)


@Operations.implementation_for(CreateULIDFunctionOp)
@Operations.implementation_for(CreateUUID7FunctionOp)
def _create_function(
    operations: Operations, op: CreateULIDFunctionOp | CreateUUID7FunctionOp
) -> None:
    context = operations.migration_context
    if context.as_sql:
        _run_statements(operations, function_ddl(op.kind, context.dialect))
    else:
        install(op.kind, operations.get_bind())


@Operations.implementation_for(DropULIDFunctionOp)
@Operations.implementation_for(DropUUID7FunctionOp)
def _drop_function(operations: Operations, op: DropULIDFunctionOp | DropUUID7FunctionOp) -> None:
    context = operations.migration_context
    if context.as_sql:
        _run_statements(operations, drop_function_ddl(op.kind, context.dialect))
    else:
        drop(op.kind, operations.get_bind())
