"""The plan of ``add_ulid_column(online=True)`` / ``add_uuid7_column(online=True)`` on MariaDB.

1. checks: an InnoDB table without FULLTEXT or SPATIAL index (InnoDB could
   neither add the column instantly nor rebuild the table while writers go
   on), a single-column primary key, the time column and its type, and a
   column of the new name of another type;
2. ``ADD COLUMN ..., ALGORITHM=INSTANT``; with ``server_default=True``
   ``SET DEFAULT``;
3. the fill, a batch a transaction, in key order;
4. ``MODIFY ... NOT NULL`` (``ALGORITHM=INPLACE, LOCK=NONE``: the table is
   rebuilt while writers go on);
5. with ``unique=True``: ``ADD UNIQUE KEY`` (``LOCK=NONE``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..._dialects import mysql_ulid_sql
from .._plan.step import Plan, Step, null_fill_step
from .catalog import column, column_exists, lit, table_where

if TYPE_CHECKING:
    from .._add import AddNames

__all__ = ["plan_add_column"]

#: The largest Unix millisecond a ULID holds (48 bits).
MAX_MS = 2**48 - 1
#: The last 10 bytes of an id, by key kind: the row's rank among the batch's
#: rows of its millisecond (a ULID: 16 bits, then 64 random ones; a UUIDv7:
#: version 7 and a 12-bit counter, then the variant and 62 random bits).
_TAILS = {
    "ulid": "UNHEX(LPAD(HEX(b.tie), 4, '0')), RANDOM_BYTES(8)",
    "uuid7": "UNHEX(LPAD(HEX(28672 + b.tie), 4, '0')), "
    "UNHEX(HEX((ORD(RANDOM_BYTES(1)) & 63) | 128)), RANDOM_BYTES(7)",
}
_NAMES = {"ulid": "ULID", "uuid7": "UUIDv7"}
_INTEGERS = "'tinyint', 'smallint', 'mediumint', 'int', 'bigint'"
_SPECIAL = (
    ": with such an index InnoDB can neither add a column instantly nor rebuild the table "
    "while writers go on (ALGORITHM=INSTANT / LOCK=NONE). Nothing was changed; run {op} "
    "without online=True in a quiet period, or drop the index first"
)
_OTHER = ", not {type} (storage={storage!r}); nothing was changed"
#: Placeholders in a batch template for what the script finds when it runs.
_KEY, _MILLIS = "\0key\0", "\0millis\0"


def _checks(n: AddNames, where: str) -> list[Step]:
    stats = f"FROM information_schema.STATISTICS WHERE {where}"
    time_col = (
        f"FROM information_schema.COLUMNS WHERE {where} AND COLUMN_NAME = {lit(n.from_column)}"
    )
    new_col = f"FROM information_schema.COLUMNS WHERE {where} AND COLUMN_NAME = {lit(n.column)}"
    tables = f"FROM information_schema.TABLES WHERE {where}"
    base = n.type_sql.split(" ")[0].split("(")[0].lower()
    special = "INDEX_TYPE IN ('FULLTEXT', 'SPATIAL')"
    return [
        Step(
            "table exists",
            "check",
            guard=f"NOT EXISTS (SELECT 1 {tables})",
            message=lit(f"{n.op_name}: there is no table {n.table}"),
        ),
        Step(
            "innodb",
            "check",
            guard=f"EXISTS (SELECT 1 {tables} AND ENGINE <> 'InnoDB')",
            message=(
                f"(SELECT CONCAT({lit(f'{n.op_name}(online=True) needs an InnoDB table; ')}, "
                f"{lit(n.table + ' is ')}, ENGINE) {tables})"
            ),
        ),
        Step(
            "no fulltext or spatial index",
            "check",
            guard=f"EXISTS (SELECT 1 {stats} AND {special})",
            message=(
                f"(SELECT CONCAT({lit(n.table + ' has ')}, GROUP_CONCAT(DISTINCT CONCAT("
                f"INDEX_NAME, ' (', INDEX_TYPE, ')')), {lit(_SPECIAL.format(op=n.op_name))}) "
                f"{stats} AND {special})"
            ),
        ),
        Step(
            "single-column primary key",
            "check",
            guard=f"(SELECT COUNT(*) {stats} AND INDEX_NAME = 'PRIMARY') <> 1",
            message=(
                f"CONCAT({lit(f'{n.op_name}(online=True) needs a single-column primary key on ')}, "
                f"{lit(f'{n.table} to walk it in batches; it has ')}, "
                f"(SELECT COUNT(*) {stats} AND INDEX_NAME = 'PRIMARY'), ' columns')"
            ),
        ),
        Step(
            "time column exists",
            "check",
            guard=f"NOT EXISTS (SELECT 1 {time_col})",
            message=lit(f"{n.op_name}: there is no column {n.table}.{n.from_column}"),
        ),
        Step(
            "time column type",
            "check",
            guard=(
                f"EXISTS (SELECT 1 {time_col} AND DATA_TYPE NOT IN "
                f"('datetime', 'timestamp', {_INTEGERS}))"
            ),
            message=(
                f"(SELECT CONCAT({lit(f'{n.op_name}: {n.table}.{n.from_column} is ')}, "
                f"COLUMN_TYPE, {lit(', not a DATETIME, TIMESTAMP or integer of Unix ms')}) "
                f"{time_col})"
            ),
        ),
        Step(
            "no other column of the name",
            "check",
            guard=f"EXISTS (SELECT 1 {new_col} AND DATA_TYPE <> {lit(base)})",
            message=(
                f"(SELECT CONCAT({lit(f'{n.table}.{n.column} exists as ')}, COLUMN_TYPE, "
                f"{lit(_OTHER.format(type=n.type_sql.lower(), storage=n.storage))}) "
                f"{new_col})"
            ),
        ),
    ]


def plan_add_column(n: AddNames, online: Any = None) -> Plan:
    """The op's plan; ``online`` (a Backfill) gives the fill its Python body."""
    where = table_where(n.table, n.schema)
    table, col = n.table_sql, n.column_sql
    nullable = column(where, n.column, "IS_NULLABLE = 'YES'")
    steps = _checks(n, where)
    steps.append(
        Step(
            "add column",
            "ddl",
            (f"ALTER TABLE {table} ADD COLUMN {col} {n.type_sql} NULL, ALGORITHM=INSTANT",),
            guard=f"NOT {column_exists(where, n.column)}",
        )
    )
    restate = f"MODIFY {col} {n.type_sql} NOT NULL"
    if n.default_sql is not None:
        restate += f" DEFAULT {n.default_sql}"
        steps.append(
            Step(
                "set default",
                "ddl",
                (f"ALTER TABLE {table} ALTER COLUMN {col} SET DEFAULT {n.default_sql}",),
                guard=column(
                    where, n.column, "(COLUMN_DEFAULT IS NULL OR COLUMN_DEFAULT = 'NULL')"
                ),
            )
        )
    steps.append(_fill(n, online, nullable))
    steps.append(
        Step(
            "not null",
            "ddl",
            (f"ALTER TABLE {table} {restate}, ALGORITHM=INPLACE, LOCK=NONE",),
            guard=nullable,
            refill=True,
        )
    )
    if n.unique:
        unique = (
            "EXISTS (SELECT 1 FROM information_schema.STATISTICS s WHERE "
            f"{table_where(n.table, n.schema, 's.')} AND s.NON_UNIQUE = 0 AND s.COLUMN_NAME = "
            f"{lit(n.column)} AND (SELECT COUNT(*) FROM information_schema.STATISTICS s2 WHERE "
            f"{table_where(n.table, n.schema, 's2.')} AND s2.INDEX_NAME = s.INDEX_NAME) = 1)"
        )
        steps.append(
            Step(
                "unique key",
                "ddl",
                (
                    f"ALTER TABLE {table} ADD CONSTRAINT {n.constraint_sql} UNIQUE ({col}), "
                    "ALGORITHM=INPLACE, LOCK=NONE",
                ),
                guard=f"NOT {unique}",
            )
        )
    return Plan(
        op=n.op_name,
        target=n.target,
        steps=tuple(steps),
        lock_timeout=n.lock_timeout,
        batch_size=n.batch_size,
        pause=n.pause,
        schema=n.schema,
    )


def _concat(template: str) -> str:
    """SQL of a CONCAT() that is ``template`` with the key column and millis found."""
    parts: list[str] = []
    for i, piece in enumerate(template.split(_KEY)):
        if i:
            parts.append("key_sql")
        for j, bit in enumerate(piece.split(_MILLIS)):
            if j:
                parts.append("millis")
            if bit:
                parts.append(lit(bit))
    return f"CONCAT({', '.join(parts)})"


def _fill(n: AddNames, online: Any, nullable: str) -> Step:
    """The backfill: Python ids online (``online``: a Backfill), SQL ids offline."""
    where = table_where(n.table, n.schema)
    table, column_sql, when = n.table_sql, n.column_sql, n.from_sql
    rows = (
        f"SELECT {_KEY} AS k, {when} AS v, {_MILLIS} AS ms FROM {table} "
        f"WHERE {column_sql} IS NULL ORDER BY {_KEY} LIMIT {n.batch_size}"
    )
    check = (
        f"SELECT r.k, r.v INTO @sqlalchemy_ulid_key, @sqlalchemy_ulid_time FROM ({rows}) AS r "
        f"WHERE r.ms IS NULL OR r.ms NOT BETWEEN 0 AND {MAX_MS} ORDER BY r.k LIMIT 1"
    )
    ulid = mysql_ulid_sql("b.ms", _TAILS[n.key])
    fill = (
        f"UPDATE {table} AS t JOIN (SELECT b.k, {ulid} AS ulid FROM ("
        "SELECT c.k, c.ms, ROW_NUMBER() OVER (PARTITION BY c.ms ORDER BY c.k) AS tie "
        f"FROM ({rows}) AS c WHERE c.ms BETWEEN 0 AND {MAX_MS}) AS b) AS s "
        f"ON t.{_KEY} = s.k SET t.{column_sql} = s.ulid WHERE t.{column_sql} IS NULL"
    )
    bad = lit(f"{n.op_name}: {n.table}.{n.from_column} of the row with ")
    timestamp_ms = lit(f"FLOOR(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', {when}) / 1000)")
    pause = f"\n      DO SLEEP({n.pause:g});" if n.pause else ""
    declare = """\
    DECLARE key_column, time_type VARCHAR(64) CHARACTER SET utf8mb4;
    DECLARE millis, key_sql TEXT CHARACTER SET utf8mb4;
    DECLARE check_sql, fill_sql LONGTEXT;
    DECLARE filled, total BIGINT DEFAULT 0;
    DECLARE message VARCHAR(512) CHARACTER SET utf8mb4;
"""
    script = f"""\
    SELECT MAX(COLUMN_NAME) INTO key_column
      FROM information_schema.STATISTICS WHERE {where} AND INDEX_NAME = 'PRIMARY';
    SELECT MAX(DATA_TYPE) INTO time_type
      FROM information_schema.COLUMNS WHERE {where} AND COLUMN_NAME = {lit(n.from_column)};
    SET millis = CASE WHEN time_type IN ('datetime', 'timestamp') THEN {timestamp_ms}
      ELSE {lit(when)} END;
    SET key_sql = CONCAT('`', REPLACE(key_column, '`', '``'), '`');
    SET check_sql = {_concat(check)};
    SET fill_sql = {_concat(fill)};
    REPEAT
      SET @sqlalchemy_ulid_key = NULL, @sqlalchemy_ulid_time = NULL;
      EXECUTE IMMEDIATE check_sql;
      IF @sqlalchemy_ulid_key IS NOT NULL THEN
        SET message = LEFT(CONCAT({bad}, key_column, ' = ', @sqlalchemy_ulid_key, ' is ', COALESCE(@sqlalchemy_ulid_time, 'NULL'), ': out of the {_NAMES[n.key]} range'), 512);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = message;
      END IF;
      EXECUTE IMMEDIATE fill_sql;
      SET filled = ROW_COUNT();
      COMMIT;
      IF filled > 0 THEN
        SET total = total + filled;
        SELECT CONCAT({lit(n.op_name + ": ")}, total, ' rows of ', {lit(f"{n.table}.{n.column}")}, ' filled') AS progress;{pause}
      END IF;
    UNTIL filled = 0 END REPEAT;"""  # noqa: E501

    return null_fill_step(
        table=n.table,
        column=n.column,
        table_sql=table,
        column_sql=column_sql,
        nullable=nullable,
        script=script,
        declare=declare,
        online=online,
    )
