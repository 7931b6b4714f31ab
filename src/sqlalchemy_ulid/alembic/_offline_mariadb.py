"""``add_ulid_column(..., online=True)`` in offline (``--sql``) mode, on MariaDB.

The script gets the online op's MariaDB phases in order, for the
``mariadb`` client (which stops at the first error): ``ADD COLUMN ...,
ALGORITHM=INSTANT``, ``SET DEFAULT`` with ``server_default=True``, the
batched backfill, then ``MODIFY ... NOT NULL`` and the unique key in one
``ALTER TABLE ..., ALGORITHM=INPLACE, LOCK=NONE``. Each statement commits
on its own (MariaDB's DDL always does; the client runs in autocommit).

The pre-check and the backfill are anonymous compound statements
(``BEGIN NOT ATOMIC ... END``, MariaDB 10.1.1+), between ``DELIMITER``
lines. Both look the table up in ``information_schema`` when the script
runs, so it needs no database to be written: an InnoDB table without a
FULLTEXT or SPATIAL index, a single-column primary key, and a time column
that is a DATETIME, a TIMESTAMP or an integer of Unix milliseconds, as the
op requires online; anything else stops the script before any change with
``SIGNAL SQLSTATE '45000'``, naming it. The backfill builds its batch
statements around the key column it found and runs them with ``EXECUTE
IMMEDIATE`` until a batch fills no row, committing after each one.

The ids are computed in SQL: the row's time in Unix milliseconds (the
session's time zone is set to UTC, so a DATETIME is read as UTC and a
TIMESTAMP converted to it; microsecond arithmetic, floored), the rows of
one millisecond numbered in key order within a batch (16 bits), then 64
random bits. Before each batch, its rows are checked: a NULL time, one
before 1970 or past the ULID range stops the script naming the row and
the value. The fill itself only dates rows in range, so a row changed in
between is left NULL (and the next batch's check names it): no id of
another time is ever stored.

The script sets a known ``sql_mode`` (strict, so ``NOT NULL`` refuses a
NULL rather than store empty bytes; no ``NO_BACKSLASH_ESCAPES``, which the
string literals here assume), UTC and the lock timeouts for its session,
and restores them at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .._dialects import dialect_row, mysql_ulid_sql
from .._types import ULIDType
from ._inspect import quote, safe_name

if TYPE_CHECKING:
    from alembic.runtime.migration import MigrationContext

    from ._add import AddULIDColumnOp

__all__ = ["add_offline_mariadb"]

#: The largest Unix millisecond a ULID holds (48 bits).
_MAX_MS = 2**48 - 1
#: Placeholders in a batch template for what is found when the script runs.
_KEY, _MILLIS = "\0key\0", "\0millis\0"
_INTEGERS = "'tinyint', 'smallint', 'mediumint', 'int', 'bigint'"


def _literal(text: str) -> str:
    """A MariaDB string literal (the script turns NO_BACKSLASH_ESCAPES off)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def _comment(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")


def _compound(body: str) -> str:
    """``body`` between DELIMITER lines, with a delimiter that does not occur in it."""
    mark = "$$"
    while mark in body:
        mark += "$"
    return f"DELIMITER {mark}\nBEGIN NOT ATOMIC\n{body}END\n{mark}\nDELIMITER ;"


def _signal(message: str, limit: int = 128) -> str:
    """SIGNAL with ``message`` (SQL of a string), cut to ``limit`` characters.

    MySQL keeps 128 characters of MESSAGE_TEXT, MariaDB 512; the block's
    ``message`` variable must hold ``limit``.
    """
    # SIGNAL takes a variable or a literal only, not an expression.
    return (
        f"SET message = LEFT({message}, {limit});\n"
        "    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = message;"
    )


class _Script:
    """The names of one op, as the script's SQL needs them."""

    def __init__(self, context: MigrationContext, op: AddULIDColumnOp) -> None:
        dialect = context.dialect
        self.op = op
        self.table = quote(dialect, op.table_name, op.schema)
        self.column = quote(dialect, op.column_name)
        self.when = quote(dialect, op.from_column)
        self.type_sql = ULIDType(op.storage).load_dialect_impl(dialect).compile(dialect=dialect)
        self.constraint = quote(
            dialect,
            op.constraint_name or safe_name(f"uq_{op.table_name}_{op.column_name}", dialect),
        )
        self.default_sql = (
            str(op.make_server_default(dialect).compile(dialect=dialect))
            if op.server_default
            else None
        )
        self.schema = "DATABASE()" if op.schema is None else _literal(op.schema)
        self.where = f"TABLE_SCHEMA = {self.schema} AND TABLE_NAME = {_literal(op.table_name)}"
        self.label = _comment(f"{op.table_name}.{op.column_name}")

    def lookups(self) -> str:
        """Compound-statement SQL that sets key_column and millis, or SIGNALs what is wrong."""
        op, where = self.op, self.where
        name = _literal(op.table_name)
        time_name = _literal(f"{op.table_name}.{op.from_column}")
        timestamp_ms = _literal(
            f"FLOOR(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', {self.when}) / 1000)"
        )
        return f"""\
  SELECT MAX(ENGINE) INTO table_engine FROM information_schema.TABLES WHERE {where};
  IF table_engine IS NULL THEN
    {_signal(f"CONCAT('add_ulid_column: there is no table ', {name})")}
  END IF;
  IF table_engine <> 'InnoDB' THEN
    {_signal(f"CONCAT('add_ulid_column(online=True) needs an InnoDB table; ', {name}, ' is ', table_engine)")}
  END IF;
  SELECT GROUP_CONCAT(DISTINCT CONCAT(INDEX_NAME, ' (', INDEX_TYPE, ')')) INTO special
    FROM information_schema.STATISTICS WHERE {where} AND INDEX_TYPE IN ('FULLTEXT', 'SPATIAL');
  IF special IS NOT NULL THEN
    {_signal(f"CONCAT('add_ulid_column: ', {name}, ' has ', special, ': no instant or LOCK=NONE change')")}
  END IF;
  SELECT COUNT(*), MAX(COLUMN_NAME) INTO key_count, key_column
    FROM information_schema.STATISTICS WHERE {where} AND INDEX_NAME = 'PRIMARY';
  IF key_count <> 1 THEN
    {_signal(f"CONCAT('add_ulid_column: ', {name}, ' needs a single-column primary key; it has ', key_count, ' columns')")}
  END IF;
  SELECT MAX(DATA_TYPE), MAX(COLUMN_TYPE) INTO time_type, time_column_type
    FROM information_schema.COLUMNS WHERE {where} AND COLUMN_NAME = {_literal(op.from_column)};
  IF time_type IS NULL THEN
    {_signal(f"CONCAT('add_ulid_column: there is no column ', {time_name})")}
  END IF;
  SET millis = CASE WHEN time_type IN ('datetime', 'timestamp') THEN {timestamp_ms}
    WHEN time_type IN ({_INTEGERS}) THEN {_literal(self.when)} END;
  IF millis IS NULL THEN
    {_signal(f"CONCAT('add_ulid_column: ', {time_name}, ' is ', time_column_type, ', not a DATETIME, TIMESTAMP or integer of Unix ms')")}
  END IF;
  SELECT MAX(COLUMN_TYPE) INTO id_type
    FROM information_schema.COLUMNS WHERE {where} AND COLUMN_NAME = {_literal(op.column_name)};
  IF id_type IS NOT NULL AND id_type <> {_literal(self.type_sql.lower())} THEN
    {_signal(f"CONCAT('add_ulid_column: ', {_literal(f'{op.table_name}.{op.column_name}')}, ' exists as ', id_type, ', not {self.type_sql.lower()}')")}
  END IF;
"""  # noqa: E501  (SQL lines, kept whole for the reader of the script)

    def check_block(self) -> str:
        return (
            "-- The table, its primary key and its time column, checked before any change\n"
            + _compound(_DECLARATIONS + self.lookups())
        )

    def batch(self, template: str) -> str:
        """SQL of a CONCAT() that is ``template`` with the key column and millis found."""
        parts: list[str] = []
        for i, piece in enumerate(template.split(_KEY)):
            if i:
                parts.append("key_sql")
            for j, bit in enumerate(piece.split(_MILLIS)):
                if j:
                    parts.append("millis")
                if bit:
                    parts.append(_literal(bit))
        return f"CONCAT({', '.join(parts)})"

    def backfill_block(self) -> str:
        op, table, column = self.op, self.table, self.column
        rows = (
            f"SELECT {_KEY} AS k, {self.when} AS v, {_MILLIS} AS ms FROM {table} "
            f"WHERE {column} IS NULL ORDER BY {_KEY} LIMIT {op.batch_size}"
        )
        check = (
            f"SELECT r.k, r.v INTO @sqlalchemy_ulid_key, @sqlalchemy_ulid_time FROM ({rows}) AS r "
            f"WHERE r.ms IS NULL OR r.ms NOT BETWEEN 0 AND {_MAX_MS} ORDER BY r.k LIMIT 1"
        )
        ulid = mysql_ulid_sql("b.ms", "UNHEX(LPAD(HEX(b.tie), 4, '0')), RANDOM_BYTES(8)")
        fill = (
            f"UPDATE {table} AS t JOIN (SELECT b.k, {ulid} AS ulid FROM ("
            "SELECT c.k, c.ms, ROW_NUMBER() OVER (PARTITION BY c.ms ORDER BY c.k) AS tie "
            f"FROM ({rows}) AS c WHERE c.ms BETWEEN 0 AND {_MAX_MS}) AS b) AS s "
            f"ON t.{_KEY} = s.k SET t.{column} = s.ulid WHERE t.{column} IS NULL"
        )
        bad = _literal(f"add_ulid_column: {op.table_name}.{op.from_column} of the row with ")
        pause = f"\n      DO SLEEP({op.pause:g});" if op.pause else ""
        body = f"""{_DECLARATIONS}  DECLARE key_sql TEXT;
  DECLARE check_sql, fill_sql LONGTEXT;
  DECLARE filled, total BIGINT DEFAULT 0;
{self.lookups()}  SET key_sql = CONCAT('`', REPLACE(key_column, '`', '``'), '`');
  SET check_sql = {self.batch(check)};
  SET fill_sql = {self.batch(fill)};
  REPEAT
    SET @sqlalchemy_ulid_key = NULL, @sqlalchemy_ulid_time = NULL;
    EXECUTE IMMEDIATE check_sql;
    IF @sqlalchemy_ulid_key IS NOT NULL THEN
      {_signal(f"CONCAT({bad}, key_column, ' = ', @sqlalchemy_ulid_key, ' is ', COALESCE(@sqlalchemy_ulid_time, 'NULL'), ': out of the ULID range')")}
    END IF;
    EXECUTE IMMEDIATE fill_sql;
    SET filled = ROW_COUNT();
    COMMIT;
    IF filled > 0 THEN
      SET total = total + filled;
      SELECT CONCAT('add_ulid_column: ', total, ' rows of ', {_literal(self.label)}, ' filled') AS progress;{pause}
    END IF;
  UNTIL filled = 0 END REPEAT;
"""  # noqa: E501
        return f"""\
-- Phase 2: the backfill, {op.batch_size} rows a transaction, in key order. This block
-- checks each batch's times, fills the batch and commits, until a batch fills no row;
-- run it again after an interruption: it goes on where it stopped.
{_compound(body)}"""


#: Local variables; none is named like a column of information_schema (a
#: variable hides a column of its name in the statements of the block).
_DECLARATIONS = """\
  DECLARE table_engine, key_column, time_type VARCHAR(64) CHARACTER SET utf8mb4;
  DECLARE special, time_column_type, id_type, millis TEXT CHARACTER SET utf8mb4;
  DECLARE key_count INT;
  DECLARE message VARCHAR(128) CHARACTER SET utf8mb4;
"""

#: What the script's session changes, saved in user variables and restored.
_SAVED = (
    ("sql_mode", "@sqlalchemy_ulid_sql_mode"),
    ("time_zone", "@sqlalchemy_ulid_time_zone"),
    ("lock_wait_timeout", "@sqlalchemy_ulid_lock_wait"),
    ("innodb_lock_wait_timeout", "@sqlalchemy_ulid_row_wait"),
)


def add_offline_mariadb(
    context: MigrationContext, op: AddULIDColumnOp, timeout: float, out: Callable[[str], None]
) -> None:
    """Write the online op's MariaDB phases into the ``--sql`` script."""
    script = _Script(context, op)
    table, column = script.table, script.column
    locks = dialect_row(context.dialect).locks
    assert locks is not None
    out(
        f"-- add_ulid_column({_comment(op.table_name)}.{_comment(op.column_name)}, "
        "online=True), for MariaDB 10.10+: each statement below commits on its own. "
        "Run the script with the mariadb client, which stops at the first error. If a "
        "statement fails with 'Lock wait timeout exceeded', run it again and go on from there."
    )
    saved = ", ".join(f"{user} = @@SESSION.{name}" for name, user in _SAVED)
    out(f"SET {saved};")
    out("SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION', time_zone = '+00:00';")
    # Whole seconds, at least one: offline no retry follows a lock wait of 0.
    for statement in locks.set(max(1.0, timeout), False):
        out(f"{statement};")
    out(script.check_block())
    out(
        f"-- Phase 1: the column, nullable (instant: no table rebuild)\nALTER TABLE {table} "
        f"ADD COLUMN IF NOT EXISTS {column} {script.type_sql} NULL, ALGORITHM=INSTANT;"
    )
    restate = f"MODIFY {column} {script.type_sql} NOT NULL"
    if script.default_sql is not None:
        out(
            f"-- New rows get ids from the database from here on\nALTER TABLE {table} "
            f"ALTER COLUMN {column} SET DEFAULT {script.default_sql};"
        )
        restate += f" DEFAULT {script.default_sql}"
    out(script.backfill_block())
    clauses = [restate]
    if op.unique:
        clauses.append(f"ADD UNIQUE KEY IF NOT EXISTS {script.constraint} ({column})")
    out(
        "-- Phase 3: NOT NULL and the unique key, the table rebuilt while writers go on. "
        f"If this fails with 'Data truncated' or 'Invalid use of NULL value', rows were "
        f"written without {_comment(op.column_name)}: run the block above again, then this"
        f"\nALTER TABLE {table} {', '.join(clauses)}, ALGORITHM=INPLACE, LOCK=NONE;"
    )
    restore = ", ".join(f"SESSION {name} = {user}" for name, user in _SAVED)
    out(f"SET {restore};")
