"""``alter_ulid_storage(..., online=True)`` on MariaDB/MySQL: a shadow table.

InnoDB cannot change a column between ``CHAR(26)`` and ``BINARY(16)`` in
place: ``MODIFY`` copies the table while writers wait. So the op builds the
converted table beside the original and swaps the two, in steps that each
commit on their own and that a rerun recognises:

1. ``CREATE TABLE _<t>__new LIKE <t>``, then ``MODIFY`` its column to the
   new storage (the table is empty: instant);
2. three triggers on ``<t>`` (``AFTER DELETE``, ``AFTER UPDATE``, ``AFTER
   INSERT``, created in that order) that mirror every write into the
   shadow, converting the column with the one-transaction op's SQL: a value
   that is not a ULID makes the writer's statement fail;
3. the copy, in primary-key order up to the highest key when it begins,
   ``batch_size`` rows a statement:
   ``INSERT IGNORE ... SELECT ... LOCK IN SHARE MODE``. The shared locks
   make the copy read each row's committed value and hold it until the
   statement commits, so a writer's change lands either before the copy
   (and the copy skips the row the trigger wrote) or after it (and the
   trigger overwrites the copy);
4. both tables counted in one statement (one read view), the table's
   ``AUTO_INCREMENT`` counter given to the shadow, then
   ``RENAME TABLE <t> TO _<t>__old, _<t>__new TO <t>`` (atomic; the
   triggers follow ``_<t>__old``), then the triggers and ``_<t>__old`` are
   dropped.

The run holds its own lock from before its checks to its end (the
script's, ``GET_LOCK`` of the same name): a second run of the op on the
column, online or a script, is refused meanwhile before any change.

Killed and rerun, it finds the shadow and its triggers, and copies from the
first row of ``<t>`` the shadow lacks (INSERT IGNORE never overwrites a
mirrored row). With the column already converted it only removes what an
interrupted run left (triggers, ``_<t>__old``, or the shadow of a run that
is being undone).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from alembic.operations import Operations
from alembic.util import CommandError
from sqlalchemy.engine import Connection

from ..._convert_sql import ConvertSQL
from .._inspect import column_state, quote, safe_name, strict_mode
from .._locks import DEFAULT_LOCK_TIMEOUT, lock_safe, lock_safe_ddl
from .._online import check_online_context, phases_block
from .._plan.batches import BatchLoop, logger, run_batches
from .._plan.database import database_for
from .._plan.run import run_checks, run_lock
from ..mysql.storage_checks import shadow_checks
from ._offline_mariadb_sql import Names
from ._values import convert_default

if TYPE_CHECKING:
    from ._op import AlterULIDStorageOp

__all__ = ["alter_shadow"]

#: The triggers, in the order they are created (see the module docstring).
_EVENTS = ("delete", "update", "insert")
#: What a copy batch should take when writers wait for it whole (see
#: ``_Shadow._holds_auto_inc_lock``): their longest wait is about one batch.
AUTO_INC_BATCH_SECONDS = 0.05


def alter_shadow(
    operations: Operations, op: AlterULIDStorageOp, sql: ConvertSQL, from_kind: str, to_kind: str
) -> None:
    """Run ``op`` online through a shadow table (see the module docstring)."""
    if operations.migration_context.as_sql:
        from ._offline_mariadb import alter_shadow_offline

        alter_shadow_offline(operations, op, sql, from_kind, to_kind)
        return
    check_online_context(operations, op.op_name)
    connection = operations.get_bind()
    shadow = _Shadow(connection, op, sql, from_kind, to_kind)
    names = Names(connection.dialect, op, sql, from_kind, to_kind)
    database = database_for(connection.dialect)
    # The run's own lock, the one the script takes, before any change.
    with run_lock(connection, database, op.op_name, names.target, op.schema):
        if shadow.finished():
            with operations.get_context().autocommit_block():
                shadow.clean_up()
            return
        # The refusals, as the script asks them (mysql.storage_checks).
        run_checks(connection, shadow_checks(names))
        with phases_block(operations), strict_mode(connection):
            shadow.run(operations)


class _Shadow:
    """The names, the SQL and the steps; every check reads the database."""

    def __init__(
        self,
        connection: Connection,
        op: AlterULIDStorageOp,
        sql: ConvertSQL,
        from_kind: str,
        to_kind: str,
    ) -> None:
        dialect = connection.dialect
        self.connection, self.op, self.sql = connection, op, sql
        self.from_kind, self.to_kind = from_kind, to_kind
        self.name = op.table_name
        self.shadow_name = safe_name(f"_{op.table_name}__new", dialect)
        self.old_name = safe_name(f"_{op.table_name}__old", dialect)
        self.triggers = {
            event: safe_name(f"_{op.table_name}__ulid_{event[:3]}", dialect) for event in _EVENTS
        }
        self.table = quote(dialect, op.table_name, op.schema)
        self.shadow = quote(dialect, self.shadow_name, op.schema)
        self.old = quote(dialect, self.old_name, op.schema)
        self.column = op.column_name
        self.lock_timeout = DEFAULT_LOCK_TIMEOUT if op.lock_timeout is None else op.lock_timeout
        self.columns = self._columns(self.name)
        #: the columns a write sets: a generated column's value is the server's
        #: (a strict session refuses one given, and the writer's statement fails)
        self.written = self._columns(self.name, written=True)
        self.key = self._key()

    # -- reading ---------------------------------------------------------------

    def _rows(self, query: str, **params: Any) -> list[Any]:
        bound = {"schema": self.op.schema, **params}
        return list(self.connection.execute(sa.text(query), bound).all())

    def _columns(self, table: str, written: bool = False) -> list[str]:
        rows = self._rows(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :table "
            + ("AND IS_GENERATED = 'NEVER' " if written else "")
            + "ORDER BY ORDINAL_POSITION",
            table=table,
        )
        return [str(row[0]) for row in rows]

    def _table_field(self, field: str) -> Any:
        """A field of the table's row in ``information_schema.TABLES`` (None: no row)."""
        rows = self._rows(
            f"SELECT {field} FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :table",
            table=self.name,
        )
        return rows[0][0] if rows else None

    def _key(self) -> str | None:
        rows = self._rows(
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE "
            "WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :table "
            "AND CONSTRAINT_NAME = 'PRIMARY'",
            table=self.name,
        )
        return str(rows[0][0]) if len(rows) == 1 else None

    def _kind(self, table: str) -> str | None:
        state = column_state(self.connection, table, self.column, self.op.schema)
        if state is None:
            return None
        holding = None if self.sql.holding is None else self.sql.holding()
        return self.op.found_kind(state.type, getattr(holding, "length", None))

    def _exists(self, table: str) -> bool:
        return bool(self._columns(table))

    def _ours(self, table: str, kind: str) -> bool:
        """Whether ``table`` has the original's columns, ours in storage ``kind``."""
        return self._columns(table) == self.columns and self._kind(table) == kind

    def _trigger_tables(self) -> dict[str, str]:
        """Our triggers that exist: name -> the table they are on."""
        rows = self._rows(
            "SELECT TRIGGER_NAME, EVENT_OBJECT_TABLE FROM information_schema.TRIGGERS "
            "WHERE TRIGGER_SCHEMA = COALESCE(:schema, DATABASE())"
        )
        ours = set(self.triggers.values())
        return {str(r[0]): str(r[1]) for r in rows if str(r[0]) in ours}

    # -- before any DDL ----------------------------------------------------------

    def finished(self) -> bool:
        """Whether the column is already in the new storage (leftovers aside)."""
        if not self.columns:
            raise ValueError(f"{self.name} does not exist: nothing was changed")
        if self.column not in self.columns:
            raise ValueError(f"{self.name} has no column {self.column!r}")
        return self._kind(self.name) == self.to_kind

    # -- the steps ---------------------------------------------------------------

    def run(self, operations: Operations) -> None:
        created = False
        if not self._exists(self.shadow_name):
            self._ddl(f"CREATE TABLE {self.shadow} LIKE {self.table}")
            created = True
        if self._kind(self.shadow_name) == self.from_kind:
            self._alter_shadow(operations)
        existing = self._trigger_tables()
        for event in _EVENTS:
            if self.triggers[event] not in existing:
                self._ddl(self._trigger_sql(event))
        start = None if created else self._first_missing()
        if created or start is not None:
            self._copy(start)
        self._verify()
        self._carry_auto_increment()
        self._ddl(f"RENAME TABLE {self.table} TO {self.old}, {self.shadow} TO {self.table}")
        self.clean_up()

    def _ddl(self, statement: str) -> None:
        logger.info("%s online: %s", self.op.op_name, " ".join(statement.split())[:160])
        lock_safe_ddl(self.connection, [statement], lock_timeout=self.lock_timeout)

    def _alter_shadow(self, operations: Operations) -> None:
        """The one-transaction op's final MODIFY, on the empty shadow."""
        dialect = self.connection.dialect
        state = column_state(self.connection, self.shadow_name, self.column, self.op.schema)
        assert state is not None
        default = convert_default(state.default, self.op, dialect, self.sql, self.to_kind)

        def alter() -> None:
            operations.alter_column(
                self.shadow_name,
                self.column,
                schema=self.op.schema,
                type_=self.op.column_type(self.op.to_storage, dialect),
                existing_type=self.op.column_type(self.op.from_storage, dialect),
                existing_nullable=state.nullable if self.op.nullable is None else self.op.nullable,
                existing_server_default=None if default is None else sa.text(default),
                existing_comment=state.comment,
            )

        what = f"ALTER TABLE {self.shadow_name}"
        lock_safe(self.connection, alter, what, lock_timeout=self.lock_timeout)

    def _values(self, row: str) -> str:
        """The row's columns as the shadow stores them (``row``: NEW, OLD or a table)."""
        dialect = self.connection.dialect
        values = []
        for name in self.written:
            value = f"{row}.{quote(dialect, name)}"
            if name == self.column:
                value = self.sql.convert(value, self.from_kind, self.to_kind)
            values.append(value)
        return ", ".join(values)

    def _key_value(self, row: str) -> str:
        """The row's key as the shadow stores it, comparable with the shadow's key."""
        assert self.key is not None
        value = f"{row}.{quote(self.connection.dialect, self.key)}"
        if self.key != self.column:
            return value
        converted = self.sql.convert(value, self.from_kind, self.to_kind)
        # Text made from bytes has the session's collation, and "=" with the
        # shadow's key (ascii_bin for a ULID) is then an illegal mix (1267).
        rows = self._rows(
            "SELECT CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :table "
            "AND COLUMN_NAME = :column",
            table=self.shadow_name,
            column=self.key,
        )
        if not rows or rows[0][0] is None:
            return converted
        charset, collation = (str(v) for v in rows[0])
        if not (charset.isidentifier() and collation.isidentifier()):
            raise ValueError(f"unexpected collation {collation!r} of {self.shadow_name}")
        return f"CONVERT({converted} USING {charset}) COLLATE {collation}"

    def _trigger_sql(self, event: str) -> str:
        dialect = self.connection.dialect
        assert self.key is not None
        names = ", ".join(quote(dialect, name) for name in self.written)
        key = f"{self.shadow}.{quote(dialect, self.key)}"
        head = (
            f"CREATE TRIGGER {quote(dialect, self.triggers[event], self.op.schema)} "
            f"AFTER {event.upper()} ON {self.table} FOR EACH ROW "
        )
        mirror = f"REPLACE INTO {self.shadow} ({names}) VALUES ({self._values('NEW')})"
        if event == "insert":
            return head + mirror
        forget = f"DELETE FROM {self.shadow} WHERE {key} = {self._key_value('OLD')}"
        if event == "delete":
            return head + forget
        quoted_key = quote(dialect, self.key)
        # A changed key leaves its old row behind in the shadow: remove it.
        moved = f"NOT (OLD.{quoted_key} <=> NEW.{quoted_key})"
        return head + f"BEGIN IF {moved} THEN {forget}; END IF; {mirror}; END"

    def _first_missing(self) -> Any:
        """The first key of the table the shadow lacks (None: none): where the copy resumes."""
        assert self.key is not None
        key = quote(self.connection.dialect, self.key)
        return self.connection.execute(
            sa.text(
                f"SELECT MIN(t.{key}) FROM {self.table} AS t LEFT JOIN {self.shadow} AS s "
                f"ON s.{key} = {self._key_value('t')} WHERE s.{key} IS NULL"
            )
        ).scalar()

    def _copy(self, start: Any) -> None:
        """Copy the rows in key order, one statement (one transaction) per batch."""
        assert self.key is not None
        dialect = self.connection.dialect
        key = quote(dialect, self.key)
        names = ", ".join(quote(dialect, name) for name in self.written)
        # Where the next batch begins: its first key, or the key after it.
        low: list[Any] = [start, True]
        # The triggers existed before this read: a row with a higher key was
        # written after it, through them. Stopping here keeps writers that
        # add rows at the end from keeping the copy going.
        top = self.connection.execute(sa.text(f"SELECT MAX({key}) FROM {self.table}")).scalar()

        def above(column: str) -> str:
            if low[0] is None:
                return "1 = 1"
            return f"{column} {'>=' if low[1] else '>'} :low"

        def batch(limit: int) -> int | None:
            high = self.connection.execute(
                sa.text(
                    f"SELECT MAX(k) FROM (SELECT {key} AS k FROM {self.table} "
                    f"WHERE {above(key)} AND {key} <= :top "
                    f"ORDER BY {key} LIMIT {int(limit)}) AS batch"
                ),
                {"low": low[0], "top": top},
            ).scalar()
            if high is None:
                return None
            copy = sa.text(
                f"INSERT IGNORE INTO {self.shadow} ({names}) SELECT {self._values('t')} "
                f"FROM {self.table} AS t WHERE {above(f't.{key}')} AND t.{key} <= :high "
                f"ORDER BY t.{key} LOCK IN SHARE MODE"
            )
            copied = int(self.connection.execute(copy, {"low": low[0], "high": high}).rowcount)
            low[:] = [high, False]
            return copied

        if top is None:
            return
        op, total = self.op, int(self._table_field("TABLE_ROWS") or 0)
        loop = BatchLoop(op.table_name, self.column, op.batch_size, op.pause, op.progress, total)
        loop = replace(loop, what="copy", sized_by_time=op.sized_by_time)
        if self._holds_auto_inc_lock():
            loop = replace(loop, seconds=AUTO_INC_BATCH_SECONDS)
        run_batches(loop, batch)

    def _holds_auto_inc_lock(self) -> bool:
        """Whether a copy batch holds the shadow's AUTO-INC lock to its end.

        With ``innodb_autoinc_lock_mode`` 0 or 1 (MariaDB's default), an
        ``INSERT ... SELECT`` into a table with an ``AUTO_INCREMENT`` column
        takes the table's AUTO-INC lock for the whole statement, and every
        writer's trigger inserting into the shadow meanwhile waits for it:
        such batches aim at :data:`AUTO_INC_BATCH_SECONDS`.
        """
        if self._table_field("AUTO_INCREMENT") is None:
            return False
        mode = self.connection.execute(sa.text("SELECT @@innodb_autoinc_lock_mode")).scalar()
        return mode is None or int(mode) < 2

    def _carry_auto_increment(self) -> None:
        """Give the shadow the table's AUTO_INCREMENT counter before the swap.

        ``CREATE TABLE ... LIKE`` starts the counter again, and the copied
        rows only take it past the highest key left: the keys of rows
        deleted from the end would be given out again. A row inserted after
        this takes its key from the table's counter, and the trigger writing
        it moves the shadow's counter past it.
        """
        counter = self._table_field("AUTO_INCREMENT")
        if counter is not None:
            self._ddl(f"ALTER TABLE {self.shadow} AUTO_INCREMENT = {int(counter)}")

    def _verify(self) -> None:
        # One statement: both counts from one read view, and the triggers
        # write both tables in the writer's transaction.
        counts = f"SELECT (SELECT COUNT(*) FROM {self.table}), (SELECT COUNT(*) FROM {self.shadow})"
        table, shadow = self.connection.execute(sa.text(counts)).one()
        if table != shadow:
            raise CommandError(
                f"{self.op.op_name}({self.name!r}, online=True): {self.name} has {table} rows "
                f"and its converted copy {self.shadow_name} {shadow}; nothing was swapped. "
                "Rerun the migration: the copy resumes from the first missing row"
            )

    def clean_up(self) -> None:
        """Drop our triggers, the old table, or the shadow of a run being undone."""
        for trigger in self._trigger_tables():
            quoted = quote(self.connection.dialect, trigger, self.op.schema)
            self._ddl(f"DROP TRIGGER IF EXISTS {quoted}")
        for name, quoted in ((self.old_name, self.old), (self.shadow_name, self.shadow)):
            # Only a table of our own shape, its column still in the other storage.
            if self._exists(name) and self._ours(name, self.from_kind):
                self._ddl(f"DROP TABLE {quoted}")
