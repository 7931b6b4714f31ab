"""The Alembic op that converts a ULID column between text and binary storage.

``op.alter_ulid_storage`` runs the conversion as SQL in the database (the
``convert`` field of the dialect's row in ``_dialects``), so it also works in
offline (``--sql``) mode. Importing this module registers it on Alembic's
``Operations``; :mod:`sqlalchemy_ulid.alembic` imports it, and that import is
the user's opt-in.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic.operations import MigrateOperation, Operations
from alembic.util import CommandError
from sqlalchemy.engine import Connection

from ._codec import InvalidULID
from ._dialects import dialect_row, dialects_with
from ._types import Storage, ULIDType, _check_storage

__all__ = ["AlterULIDStorageOp"]


@Operations.register_operation("alter_ulid_storage")
class AlterULIDStorageOp(MigrateOperation):
    """Convert a ULID column between text and binary storage in place."""

    def __init__(
        self,
        table_name: str,
        column_name: str,
        *,
        from_storage: Storage,
        to_storage: Storage,
        nullable: bool | None = None,
        schema: str | None = None,
        copy_from: sa.Table | None = None,
    ) -> None:
        _check_storage(from_storage)
        _check_storage(to_storage)
        self.table_name = table_name
        self.column_name = column_name
        self.from_storage: Storage = from_storage
        self.to_storage: Storage = to_storage
        self.nullable = nullable
        self.schema = schema
        self.copy_from = copy_from

    @classmethod
    def alter_ulid_storage(
        cls,
        operations: Operations,
        table_name: str,
        column_name: str,
        *,
        from_storage: Storage,
        to_storage: Storage,
        nullable: bool | None = None,
        schema: str | None = None,
        copy_from: sa.Table | None = None,
    ) -> None:
        """Convert a ULID column's storage, keeping every value.

        ``from_storage`` and ``to_storage`` are :class:`~sqlalchemy_ulid.ULIDType`
        storages: ``"text"`` is ``CHAR(26)`` (or any ``CHAR``/``VARCHAR``
        holding ULID text, either case), ``"auto"`` is ``UUID`` on PostgreSQL
        and 16-byte binary elsewhere, ``"binary"`` is 16-byte binary
        (``BYTEA`` on PostgreSQL). Undo it by swapping the two.

        The conversion runs in the database, as SQL, so it works offline
        (``--sql``) as well:

        * PostgreSQL: one ``ALTER TABLE ... ALTER COLUMN ... TYPE ... USING``.
        * MySQL / MariaDB: ``MODIFY`` to ``VARBINARY(26)``, one ``UPDATE``,
          ``MODIFY`` to the final type. Indexes and constraints on the column
          stay; a column referenced by a foreign key cannot change type.
        * SQLite: one ``UPDATE`` (SQLite columns hold any value), then the
          table is recreated with the new declared type (batch mode; in
          offline mode pass ``copy_from``, since nothing can be reflected).
          SQLite before 3.41 has no ``unhex()``; online, the op defines it
          on the connection.

        Online, text values are checked first: if any is not a ULID, the op
        raises :class:`~sqlalchemy_ulid.InvalidULID` before changing anything.

        Args:
            operations: supplied by Alembic (call it as ``op.alter_ulid_storage``).
            table_name: the table.
            column_name: the ULID column.
            from_storage: its current storage.
            to_storage: the storage to convert to.
            nullable: whether the column is nullable (MySQL restates it in
                ``MODIFY``). Online it is read from the database if omitted;
                offline it is required.
            schema: the table's schema.
            copy_from: the table's definition, for SQLite in offline mode.

        Raises:
            InvalidULID: (online) a text value is not a ULID.
            ValueError: both storages are the same kind on this database.
            alembic.util.CommandError: offline without ``nullable``.
        """
        operations.invoke(
            cls(
                table_name,
                column_name,
                from_storage=from_storage,
                to_storage=to_storage,
                nullable=nullable,
                schema=schema,
                copy_from=copy_from,
            )
        )

    def reverse(self) -> AlterULIDStorageOp:
        return AlterULIDStorageOp(
            self.table_name,
            self.column_name,
            from_storage=self.to_storage,
            to_storage=self.from_storage,
            nullable=self.nullable,
            schema=self.schema,
            copy_from=self.copy_from,
        )


def _column_nullable(connection: Connection, op: AlterULIDStorageOp) -> bool:
    for column in sa.inspect(connection).get_columns(op.table_name, schema=op.schema):
        if column["name"] == op.column_name:
            return bool(column["nullable"])
    raise ValueError(f"{op.table_name} has no column {op.column_name!r}")


def _sqlite_unhex(text: str) -> bytes:
    return bytes.fromhex(text)


def _define_unhex(connection: Connection) -> None:
    """Give an older SQLite connection the ``unhex()`` that 3.41 builds in."""
    import sqlite3

    driver = connection.connection.driver_connection
    # A capability check, not a dialect check: only a sqlite3 connection
    # from a library older than 3.41 lacks it (same meaning as the built-in).
    if isinstance(driver, sqlite3.Connection) and sqlite3.sqlite_version_info < (3, 41):
        driver.create_function("unhex", 1, _sqlite_unhex, deterministic=True)


@Operations.implementation_for(AlterULIDStorageOp)
def _alter_ulid_storage(operations: Operations, op: AlterULIDStorageOp) -> None:
    context = operations.migration_context
    dialect = context.dialect
    row = dialect_row(dialect)
    sql = row.convert
    if sql is None:
        raise NotImplementedError(
            f"converting ULID storage is not implemented for {dialect.name!r} "
            f"(supported: {dialects_with(lambda row: row.convert)})"
        )
    from_kind = row.kind(op.from_storage)
    to_kind = row.kind(op.to_storage)
    if from_kind == to_kind:
        raise ValueError(
            f"{op.from_storage!r} and {op.to_storage!r} are both {from_kind} storage "
            f"on {dialect.name}: nothing to convert"
        )
    column = dialect.identifier_preparer.quote(op.column_name)
    table = dialect.identifier_preparer.format_table(sa.table(op.table_name, schema=op.schema))
    converted = sql.from_hex[to_kind](sql.to_hex[from_kind](column))

    nullable = op.nullable
    if not context.as_sql:
        connection = operations.get_bind()
        if nullable is None:
            nullable = _column_nullable(connection, op)
        if from_kind == "text":
            _check_text(connection, table, column, sql.bad_text(column), op)
        _define_unhex(connection)
    elif nullable is None:
        raise CommandError(
            f"alter_ulid_storage({op.table_name!r}, {op.column_name!r}): pass nullable= "
            "in offline mode (the column's nullability cannot be read from a database)"
        )

    old_type, new_type = ULIDType(op.from_storage), ULIDType(op.to_storage)
    if sql.alter_using:
        # concat() skips NULLs: without the CASE a NULL would become ''.
        converted = f"CASE WHEN {column} IS NULL THEN NULL ELSE {converted} END"
        operations.alter_column(
            op.table_name,
            op.column_name,
            type_=new_type,
            existing_type=old_type,
            existing_nullable=nullable,
            schema=op.schema,
            postgresql_using=converted,
        )
        return
    if sql.holding is not None:
        operations.alter_column(
            op.table_name,
            op.column_name,
            type_=sql.holding(),
            existing_type=old_type,
            existing_nullable=nullable,
            schema=op.schema,
        )
    operations.execute(f"UPDATE {table} SET {column} = {converted} WHERE {column} IS NOT NULL")
    with operations.batch_alter_table(
        op.table_name, schema=op.schema, copy_from=op.copy_from
    ) as batch:
        batch.alter_column(
            op.column_name,
            type_=new_type,
            existing_type=sql.holding() if sql.holding is not None else old_type,
            existing_nullable=nullable,
        )


def _check_text(
    connection: Connection, table: str, column: str, bad: str, op: AlterULIDStorageOp
) -> None:
    rows = connection.exec_driver_sql(
        f"SELECT {column} FROM {table} WHERE {column} IS NOT NULL AND {bad}"
    ).fetchmany(3)
    if rows:
        examples = ", ".join(repr(row[0]) for row in rows)
        raise InvalidULID(
            f"{op.table_name}.{op.column_name} holds values that are not ULIDs "
            f"(e.g. {examples}); nothing was changed"
        )
