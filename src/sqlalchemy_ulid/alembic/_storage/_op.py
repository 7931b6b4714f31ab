"""The Alembic op that converts a ULID column between text and binary storage.

``op.alter_ulid_storage`` runs the conversion as SQL in the database (the
``convert`` field of the dialect's row in ``_dialects``), so it also works in
offline (``--sql``) mode. Importing this module registers it on Alembic's
``Operations``; :mod:`sqlalchemy_ulid.alembic` imports it, and that import is
the user's opt-in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import sqlalchemy as sa
from alembic.operations import MigrateOperation, Operations
from alembic.util import CommandError
from sqlalchemy.engine import Connection

from ..._convert_sql import ConvertSQL
from ..._dialects import DialectRow, dialect_row, dialects_with
from ..._kinds import ULID_KEYS
from ..._types import Storage, ULIDType, _check_storage
from .._backfill import BackfillProgress, check_batch_options
from .._inspect import execute, plain_session, quote, refuse_column_checks, strict_mode
from .._locks import DEFAULT_LOCK_TIMEOUT, check_lock_timeout, lock_safe
from .._plan.database import database_for
from .._plan.run import run_checks
from ._target import target_of
from ._values import (
    ColumnPlan,
    check_text,
    convert_default,
    define_unhex,
    kind_of,
    read_column,
    refuse_text_lookalikes,
)

__all__ = ["AlterULIDStorageOp"]


@Operations.register_operation("alter_ulid_storage")
class AlterULIDStorageOp(MigrateOperation):
    """Convert a ULID column between text and binary storage in place."""

    op_name = "alter_ulid_storage"
    #: what the column's values are called in errors
    values_name = "ULIDs"

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
        online: bool = False,
        lock_timeout: float | timedelta | None = None,
        batch_size: int | None = None,
        pause: float | timedelta = 0.0,
        progress: Callable[[BackfillProgress], object] | None = None,
    ) -> None:
        self.check_storage(from_storage)
        self.check_storage(to_storage)
        self.online = online
        #: batches sized by time (about 150 ms each) unless the caller fixed their size
        self.sized_by_time = batch_size is None
        self.batch_size, self.pause, self.progress = check_batch_options(
            batch_size, pause, progress, online
        )
        self.lock_timeout = None if lock_timeout is None else check_lock_timeout(lock_timeout)
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
        online: bool = False,
        lock_timeout: float | timedelta | None = None,
        batch_size: int | None = None,
        pause: float | timedelta = 0.0,
        progress: Callable[[BackfillProgress], object] | None = None,
    ) -> None:
        """Convert a ULID column's storage, keeping every value.

        ``from_storage`` and ``to_storage`` are :class:`~sqlalchemy_ulid.ULIDType`
        storages: ``"text"`` is ``CHAR(26)`` (or any ``CHAR``/``VARCHAR``
        holding ULID text, either case), ``"auto"`` is ``UUID`` on PostgreSQL
        and 16-byte binary elsewhere, ``"binary"`` is 16-byte binary
        (``BYTEA`` on PostgreSQL). Undo it by swapping the two.

        The conversion runs in the database, as SQL, so it works offline
        (``--sql``) as well:

        * PostgreSQL: one ``ALTER TABLE ... ALTER COLUMN ... TYPE ... USING``;
          its ``--sql`` script is one ``DO`` block that reads the column as
          it runs (a rerun does nothing; the DEFAULT is carried, and what
          the online op refuses is refused, as online).
        * MySQL / MariaDB: ``MODIFY`` to ``VARBINARY(26)``, one ``UPDATE``,
          ``MODIFY`` to the final type. Indexes and constraints on the column
          stay; a column referenced by a foreign key cannot change type.
        * SQLite: one ``UPDATE`` (SQLite columns hold any value), then the
          table is recreated with the new declared type (batch mode; in
          offline mode pass ``copy_from``, since nothing can be reflected).
          SQLite before 3.41 has no ``unhex()``; online, the op defines it
          on the connection.

        The conversion SQL itself fails on a text value the parser would
        refuse (or a binary value that is not 16 bytes), online and in
        ``--sql`` scripts, whatever MariaDB's ``sql_mode``: no value can
        become a different id. Online, text values are also checked first:
        if any is not a ULID, the op raises
        :class:`~sqlalchemy_ulid.InvalidULID`, with examples, before
        changing anything.

        Online it reads the column first and is safe to rerun: a column
        already in ``to_storage`` is left alone, and after an interrupted
        MariaDB run (column left ``VARBINARY(26)``) it recognises whether
        the values were converted and finishes. Nullability, the
        ``COMMENT`` and a ULID literal ``DEFAULT`` are kept (any other
        DEFAULT is refused before any change, as is a column used by a
        foreign key: see "Keys with foreign keys" in the docs).

        Args:
            operations: supplied by Alembic (call it as ``op.alter_ulid_storage``).
            table_name: the table.
            column_name: the ULID column.
            from_storage: its current storage.
            to_storage: the storage to convert to.
            nullable: whether the column is nullable (MySQL restates it in
                ``MODIFY``). Online it is read from the database if omitted;
                offline it is required (except with ``online=True``, whose
                scripts read it as they run).
            schema: the table's schema.
            copy_from: the table's definition, for SQLite in offline mode.
            online: convert a live table while writers go on (see "Live
                tables" in the docs). PostgreSQL: a shadow column kept in step
                by a trigger, a batched copy, indexes built ``CONCURRENTLY``,
                then a short swap. MariaDB/MySQL: a shadow table, triggers
                that mirror writes, a copy in key order, then an atomic
                ``RENAME TABLE``. In ``--sql`` mode, PostgreSQL gets the
                same phases as a rerunnable script for ``psql`` (see
                "Offline (--sql) on PostgreSQL" in the docs), MariaDB the
                shadow-table steps as a rerunnable script for the
                ``mariadb`` client ("Offline (--sql) on MariaDB"); SQLite
                raises ``ValueError``.
            lock_timeout: seconds (or a timedelta) each ALTER may wait for
                its table lock before it retries (default 1 s); see
                :class:`~sqlalchemy_ulid.alembic.LockTimeoutError`.
            batch_size: with ``online=True``, rows copied per statement.
                Left out, the first batch is 5,000 rows and the next ones are
                sized to take about 150 ms each; the offline script uses
                5,000 (or the size given).
            pause: with ``online=True``, seconds (or a timedelta) to sleep
                between batches.
            progress: with ``online=True``, called after every batch with a
                :class:`~sqlalchemy_ulid.alembic.BackfillProgress`.

        Raises:
            InvalidULID: (online) a text value is not a ULID.
            ValueError: both storages are the same kind on this database;
                (online) the column is used by a foreign key, has a DEFAULT
                that cannot be converted, is of neither storage, or holds
                both converted and unconverted values.
            alembic.util.CommandError: offline without ``nullable`` (not
                needed with ``online=True``).
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
                online=online,
                lock_timeout=lock_timeout,
                batch_size=batch_size,
                pause=pause,
                progress=progress,
            )
        )

    def reverse(self) -> AlterULIDStorageOp:
        return type(self)(
            self.table_name,
            self.column_name,
            from_storage=self.to_storage,
            to_storage=self.from_storage,
            nullable=self.nullable,
            schema=self.schema,
            copy_from=self.copy_from,
            online=self.online,
            lock_timeout=self.lock_timeout,
            batch_size=self.batch_size,
            pause=self.pause,
            progress=self.progress,
        )

    # What a subclass for other keys (UUIDv7: _uuid7) overrides.

    @staticmethod
    def check_storage(storage: Any) -> None:
        """Refuse a storage option this op does not know (ValueError)."""
        _check_storage(storage)

    def convert_sql(self, row: DialectRow) -> ConvertSQL | None:
        """Return the dialect's conversion SQL for this op's keys (None: none)."""
        return ULID_KEYS.convert(row)

    def kind(self, storage: str, dialect: Any) -> str:
        """Return the storage kind ("uuid", "binary", "text") of a storage option."""
        return dialect_row(dialect).kind(storage)

    def found_kind(self, type_: sa.types.TypeEngine[Any], holding: int | None) -> str | None:
        """Return the kind a reflected type holds, "holding", or None (see kind_of)."""
        return kind_of(type_, holding)

    def checked_before(self, kind: str) -> bool:
        """Whether values of ``kind`` are checked (and named) before any DDL."""
        return kind == "text"

    def column_type(self, storage: str, dialect: Any) -> sa.types.TypeEngine[Any]:
        """Return the column type of a storage option."""
        return ULIDType(storage)  # type: ignore[arg-type]

    def refuse_lookalikes(self, connection: Connection, table: str, column: str) -> None:
        """Refuse text values that look converted in the MariaDB holding type."""
        refuse_text_lookalikes(connection, self, table, column)

    def default_in(
        self, default: str | None, dialect: Any, sql: ConvertSQL, to_kind: str
    ) -> str | None:
        """Return the column's DEFAULT in the new storage, or refuse it (ValueError)."""
        return convert_default(default, self, dialect, sql, to_kind)


@Operations.implementation_for(AlterULIDStorageOp)
@plain_session
def _alter_ulid_storage(operations: Operations, op: AlterULIDStorageOp) -> None:
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
