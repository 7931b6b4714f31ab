"""The first block of the MariaDB key-conversion script: check, find, plan.

It finds the key and every column that references it in
``information_schema`` (the closure the online plan builds by reflection:
direct foreign keys, chains through referencing columns, self-references),
makes every refusal of the online op with ``SIGNAL``, and only then writes
the plan: one row per step, with the DDL and DML built from the names it
found, in ``ulid_key_conversions_offline``. The second block
(``_offline_mariadb_steps``) runs those rows. A plan already stored for the
table is continued; an online conversion in progress is refused.
"""

from __future__ import annotations

from ..._dialects._migration import (
    CHECK_CONSTRAINT,
    GENERATED_COLUMN,
    mysql_check_constraints,
    mysql_generated_columns,
)
from .._offline_mariadb import _INTEGERS, _MAX_MS
from .._plan.render_mariadb import compound, lit, signal
from ._checks import TAKEN_DEFAULT, TAKEN_END, TAKEN_FOREIGN_KEY
from ._offline_mariadb_sql import (
    ONLINE_TABLE,
    STEPS_TABLE,
    Names,
    concat,
    quoted,
    shadow_sql,
    table_sql,
)
from ._offline_mariadb_steps import plan_steps

__all__ = ["plan_block"]

_DECLARATIONS = """\
  DECLARE message VARCHAR(512) CHARACTER SET utf8mb4;
  DECLARE v_n, v_i BIGINT DEFAULT 0;
  DECLARE v_found, v_text, v_millis, v_time_type, v_time_column_type TEXT CHARACTER SET utf8mb4;
  DECLARE v_key_type, v_key_column_type, v_new_type, v_schema TEXT CHARACTER SET utf8mb4;
  DECLARE v_key, v_ptbl, v_pcol, v_shadow_name VARCHAR(64) CHARACTER SET utf8mb4;
  DECLARE v_kq, v_sq, v_setup, v_each, v_body LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_skipped, v_tries INT DEFAULT 0;
  DECLARE CONTINUE HANDLER FOR 1684 SET v_skipped = 1;
"""

#: The catalog is read again while information_schema skipped a table (error
#: 1684): a session holding a lock (the script's GET_LOCK) does not wait for
#: a table another session is changing, in this database or in another one
#: that has a table of the same name; what it read would lack that table.
#: Nothing is stored before the read is whole.
_WHOLE = """    IF v_skipped = 0 THEN
      LEAVE catalog;
    END IF;
    SET v_tries = v_tries + 1;
    IF v_tries = 50 THEN
      {refuse}
    END IF;
    DO SLEEP(0.1);
  END LOOP catalog;
"""

#: Temporary tables of the plan block (the session's own; gone with it).
_TEMPORARY = """\
  DROP TEMPORARY TABLE IF EXISTS sqlalchemy_ulid_pk_cols, sqlalchemy_ulid_pk_fks,
    sqlalchemy_ulid_pk_steps;
  CREATE TEMPORARY TABLE sqlalchemy_ulid_pk_cols (id INT AUTO_INCREMENT PRIMARY KEY,
    tbl VARCHAR(64) NOT NULL, col VARCHAR(64) NOT NULL, ptbl VARCHAR(64), pcol VARCHAR(64),
    shadow VARCHAR(64), nullable TINYINT NOT NULL, comment TEXT, in_pk TINYINT NOT NULL,
    pk_cols INT NOT NULL) CHARACTER SET utf8mb4;
  CREATE TEMPORARY TABLE sqlalchemy_ulid_pk_fks (id INT AUTO_INCREMENT PRIMARY KEY,
    name VARCHAR(64) NOT NULL, tbl VARCHAR(64) NOT NULL, col VARCHAR(64) NOT NULL,
    rtbl VARCHAR(64) NOT NULL, rcol VARCHAR(64) NOT NULL, del VARCHAR(64), upd VARCHAR(64))
    CHARACTER SET utf8mb4;
  CREATE TEMPORARY TABLE sqlalchemy_ulid_pk_steps (seq INT AUTO_INCREMENT PRIMARY KEY,
    label TEXT NOT NULL, always TINYINT NOT NULL DEFAULT 0, batched TINYINT NOT NULL DEFAULT 0,
    guard LONGTEXT, setup LONGTEXT, each_batch LONGTEXT, body LONGTEXT) CHARACTER SET utf8mb4;
"""


_SKIPPED = lit(
    "information_schema skipped tables that other sessions were changing, 50 times; "
    "run the script again when their DDL is done"
)


def _refuse(n: Names, message: str) -> str:
    return signal(f"CONCAT({lit(n.op_name + ': ')}, {message})")


def _state_checks(n: Names) -> str:
    """A stored offline plan is continued; an online one refused; a done op skipped."""
    table = n.name_sql
    other = "legacy" if n.direction == "ulid" else "ulid"
    t = lit(n.table)
    if n.direction == "ulid":
        done = (
            f"SELECT COUNT(*) INTO v_n FROM information_schema.STATISTICS WHERE {n.where(t)} "
            f"AND INDEX_NAME = {lit(n.legacy_unique)} "
            f"AND COLUMN_NAME = {lit(n.legacy_id)};\n"
            "  IF v_n > 0 THEN"
        )
    else:
        done = (
            f"SELECT COUNT(*) INTO v_n FROM information_schema.COLUMNS WHERE {n.where(t)} "
            f"AND COLUMN_NAME = {lit(n.legacy_id)};\n"
            "  IF v_n = 0 THEN"
        )
    return f"""\
  SELECT COUNT(*) INTO v_n FROM information_schema.TABLES WHERE {n.where(t)};
  IF v_n = 0 THEN
    {_refuse(n, lit("there is no table " + n.table))}
  END IF;
  SELECT COUNT(*) INTO v_n FROM information_schema.TABLES
    WHERE {n.where(lit(STEPS_TABLE))};
  IF v_n > 0 THEN
    SELECT MAX(body) INTO v_text FROM {n.steps_table} WHERE name = {table} AND seq = 0;
    IF v_text = {lit(other)} THEN
      {_refuse(n, lit(f"an unfinished {other} conversion of {n.table} is in {STEPS_TABLE}: run its script again first"))}
    END IF;
    IF v_text IS NOT NULL THEN
      SELECT {lit(f"{n.op_name}: continuing the plan stored in {STEPS_TABLE}")} AS progress;
      LEAVE main;
    END IF;
  END IF;
  SELECT COUNT(*) INTO v_n FROM information_schema.TABLES
    WHERE {n.where(lit(ONLINE_TABLE))};
  IF v_n > 0 THEN
    SELECT COUNT(*) INTO v_n FROM {n.prefix}`{ONLINE_TABLE}` WHERE name = {table};
    IF v_n > 0 THEN
      {_refuse(n, lit(f"an unfinished online conversion of {n.table} is recorded in {ONLINE_TABLE}: rerun that migration online"))}
    END IF;
  END IF;
  {done}
    SELECT {lit(f"{n.op_name}: {n.table} is already done")} AS progress;
    LEAVE main;
  END IF;
"""  # noqa: E501  (SQL lines, kept whole for the reader of the script)


def _key_checks(n: Names) -> str:
    """The key: one column, of the right type; legacy_id and from_time as the op needs."""
    t = lit(n.table)
    sql = f"""\
  SELECT COUNT(*), MAX(COLUMN_NAME), GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX SEPARATOR ', ')
    INTO v_n, v_key, v_found FROM information_schema.STATISTICS
    WHERE {n.where(t)} AND INDEX_NAME = 'PRIMARY';
  IF v_n = 0 THEN
    {_refuse(n, lit(n.table + " has no primary key"))}
  END IF;
  IF v_n > 1 THEN
    {_refuse(n, f"CONCAT({lit(n.table + ' has a composite primary key (')}, v_found, '): only single-column keys are converted')")}
  END IF;
  SELECT MAX(DATA_TYPE), MAX(COLUMN_TYPE) INTO v_key_type, v_key_column_type
    FROM information_schema.COLUMNS WHERE {n.where(t)} AND COLUMN_NAME = v_key;
  SELECT COUNT(*), MAX(COLUMN_TYPE) INTO v_n, v_text FROM information_schema.COLUMNS
    WHERE {n.where(t)} AND COLUMN_NAME = {lit(n.legacy_id)};
  SET v_kq = {quoted("v_key")}, v_schema = {n.schema_sql};
"""  # noqa: E501
    if n.direction == "legacy":
        return sql + "  SET v_new_type = v_text;\n"
    sql += f"""\
  IF v_key_type NOT IN ({_INTEGERS}, 'uuid') THEN
    {_refuse(n, f"CONCAT({lit(n.table + '.')}, v_key, ' is ', v_key_column_type, ': only integer and UUID primary keys are converted')")}
  END IF;
  IF v_n > 0 THEN
    {_refuse(n, lit(f"{n.table} already has a column {n.legacy_id!r} (legacy_id=)"))}
  END IF;
  SET v_new_type = {lit(n.ulid_type)};
"""  # noqa: E501
    if n.from_time is None:
        return sql
    when = f"ulid_r1.`{n.from_time.replace('`', '``')}`"
    time_name = f"{n.table}.{n.from_time}"
    exact = lit(f"FLOOR(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', {when}) / 1000)")
    out_of_range = concat(
        f"SELECT ulid_r1.{{kq}}, {when} INTO @sqlalchemy_ulid_key, @sqlalchemy_ulid_time "
        f"FROM {table_sql(n)} AS ulid_r1 WHERE ({{millis}}) NOT BETWEEN 0 AND {_MAX_MS} "
        "ORDER BY ulid_r1.{kq} LIMIT 1",
        {"kq": "v_kq", "millis": "v_millis"},
    )
    crowded = concat(
        "SELECT ms, COUNT(*) INTO @sqlalchemy_ulid_key, @sqlalchemy_ulid_time FROM "
        f"(SELECT {{millis}} AS ms FROM {table_sql(n)} AS ulid_r1) AS r "
        "GROUP BY ms HAVING COUNT(*) > 65535 LIMIT 1",
        {"millis": "v_millis"},
    )
    return (
        sql
        + f"""\
  SELECT MAX(DATA_TYPE), MAX(COLUMN_TYPE) INTO v_time_type, v_time_column_type
    FROM information_schema.COLUMNS WHERE {n.where(t)} AND COLUMN_NAME = {lit(n.from_time)};
  IF v_time_type IS NULL THEN
    {_refuse(n, lit(f"{n.table} has no column {n.from_time!r} (from_time=)"))}
  END IF;
  SET v_millis = CASE WHEN v_time_type IN ('datetime', 'timestamp') THEN {exact}
    WHEN v_time_type IN ({_INTEGERS}) THEN {lit(when)} END;
  IF v_millis IS NULL THEN
    {_refuse(n, f"CONCAT({lit(time_name + ' is ')}, v_time_column_type, ', not a DATETIME, TIMESTAMP or integer of Unix ms')")}
  END IF;
  SELECT COUNT(*) INTO v_n FROM {table_sql(n)} WHERE `{n.from_time.replace("`", "``")}` IS NULL;
  IF v_n > 0 THEN
    {_refuse(n, f"CONCAT({lit(time_name + ' is NULL in ')}, v_n, ' rows: fill them before deriving ULIDs from it')")}
  END IF;
  SET @sqlalchemy_ulid_key = NULL, @sqlalchemy_ulid_time = NULL;
  EXECUTE IMMEDIATE {out_of_range};
  IF @sqlalchemy_ulid_key IS NOT NULL THEN
    {_refuse(n, f"CONCAT({lit(time_name + ' of ')}, v_key, ' = ', @sqlalchemy_ulid_key, ' is ', @sqlalchemy_ulid_time, ': outside the ULID range (1970 to 10889)')")}
  END IF;
  SET @sqlalchemy_ulid_key = NULL, @sqlalchemy_ulid_time = NULL;
  EXECUTE IMMEDIATE {crowded};
  IF @sqlalchemy_ulid_key IS NOT NULL THEN
    {_refuse(n, f"CONCAT(@sqlalchemy_ulid_time, ' rows of ', {lit(time_name)}, ' are the millisecond ', @sqlalchemy_ulid_key, ': the script numbers at most 65535 (run this migration online)')")}
  END IF;
"""  # noqa: E501
    )


def _closure(n: Names) -> str:
    """Every column that references a changing column, breadth first, as online."""
    referencing = (
        "k.REFERENCED_TABLE_SCHEMA = v_schema AND k.TABLE_SCHEMA = v_schema "
        "AND k.REFERENCED_TABLE_NAME = v_ptbl AND k.REFERENCED_COLUMN_NAME = v_pcol"
    )
    in_pk = (
        "(SELECT COUNT(*) FROM information_schema.STATISTICS s WHERE s.TABLE_SCHEMA = v_schema "
        "AND s.TABLE_NAME = k.TABLE_NAME AND s.INDEX_NAME = 'PRIMARY'{also})"
    )
    return f"""\
  INSERT INTO sqlalchemy_ulid_pk_cols (tbl, col, shadow, nullable, in_pk, pk_cols)
    VALUES ({n.name_sql}, v_key, {shadow_sql(n.name_sql, "v_key", n.suffix)}, 0, 1, 1);
  SET v_i = 1;
  closure: LOOP
    SELECT MAX(tbl), MAX(col) INTO v_ptbl, v_pcol FROM sqlalchemy_ulid_pk_cols WHERE id = v_i;
    IF v_ptbl IS NULL THEN
      LEAVE closure;
    END IF;
    SELECT MIN(CONCAT(k.CONSTRAINT_NAME, ' on ', k.TABLE_NAME)) INTO v_found
      FROM information_schema.KEY_COLUMN_USAGE k WHERE {referencing}
      AND (SELECT COUNT(*) FROM information_schema.KEY_COLUMN_USAGE k2
        WHERE k2.CONSTRAINT_SCHEMA = k.CONSTRAINT_SCHEMA AND k2.TABLE_NAME = k.TABLE_NAME
        AND k2.CONSTRAINT_NAME = k.CONSTRAINT_NAME AND k2.REFERENCED_TABLE_NAME IS NOT NULL) > 1;
    IF v_found IS NOT NULL THEN
      {_refuse(n, "CONCAT('the composite foreign key ', v_found, ' references ', v_ptbl, ': only single-column foreign keys are converted')")}
    END IF;
    INSERT INTO sqlalchemy_ulid_pk_fks (name, tbl, col, rtbl, rcol, del, upd)
      SELECT k.CONSTRAINT_NAME, k.TABLE_NAME, k.COLUMN_NAME, v_ptbl, v_pcol, r.DELETE_RULE,
        r.UPDATE_RULE FROM information_schema.KEY_COLUMN_USAGE k
      JOIN information_schema.REFERENTIAL_CONSTRAINTS r ON r.CONSTRAINT_SCHEMA = k.CONSTRAINT_SCHEMA
        AND r.TABLE_NAME = k.TABLE_NAME AND r.CONSTRAINT_NAME = k.CONSTRAINT_NAME
      WHERE {referencing} ORDER BY k.TABLE_NAME, k.CONSTRAINT_NAME;
    INSERT INTO sqlalchemy_ulid_pk_cols (tbl, col, ptbl, pcol, shadow, nullable, comment, in_pk, pk_cols)
      SELECT DISTINCT k.TABLE_NAME, k.COLUMN_NAME, v_ptbl, v_pcol,
        {shadow_sql("k.TABLE_NAME", "k.COLUMN_NAME", n.suffix)},
        c.IS_NULLABLE = 'YES', NULLIF(c.COLUMN_COMMENT, ''),
        {in_pk.format(also=" AND s.COLUMN_NAME = k.COLUMN_NAME")}, {in_pk.format(also="")}
      FROM information_schema.KEY_COLUMN_USAGE k JOIN information_schema.COLUMNS c
        ON c.TABLE_SCHEMA = k.TABLE_SCHEMA AND c.TABLE_NAME = k.TABLE_NAME
        AND c.COLUMN_NAME = k.COLUMN_NAME
      WHERE {referencing} AND NOT EXISTS (SELECT 1 FROM sqlalchemy_ulid_pk_cols x
        WHERE x.tbl = k.TABLE_NAME AND x.col = k.COLUMN_NAME)
      ORDER BY k.TABLE_NAME, k.COLUMN_NAME;
    SET v_i = v_i + 1;
  END LOOP closure;
"""  # noqa: E501


def _plan_checks(n: Names) -> str:
    """What online refuses once it knows the columns: each names what it found."""
    has_shadow = "x.id > 1" if n.direction == "legacy" else "TRUE"
    tables = "(SELECT tbl FROM sqlalchemy_ulid_pk_cols)"
    option = "s.COLLATION = 'D' OR s.COLUMN_NAME IS NULL OR s.INDEX_TYPE <> 'BTREE'"
    checks = [
        (
            "SELECT MIN(CONCAT(tbl, '.', col, ' references ', ptbl, ' and is part of the composite "
            "primary key of ', tbl)) INTO v_found FROM sqlalchemy_ulid_pk_cols "
            "WHERE in_pk > 0 AND pk_cols > 1",
            "CONCAT(v_found, ': only single-column keys are converted')",
        ),
        (
            f"SELECT MIN(CONCAT(x.tbl, '.', x.col)) INTO v_found FROM sqlalchemy_ulid_pk_cols x "
            f"WHERE {has_shadow} AND x.shadow IS NULL",
            "CONCAT('the name of the new values of ', v_found, ' would be over 64 bytes: "
            "rename the column first')",
        ),
        (
            f"SELECT MIN(CONCAT(x.tbl, ' already has a column ', x.shadow, ', the name this op "
            "gives the new values of ', x.tbl, '.', x.col)) INTO v_found "
            "FROM sqlalchemy_ulid_pk_cols x JOIN information_schema.COLUMNS c "
            "ON c.TABLE_SCHEMA = v_schema AND c.TABLE_NAME = x.tbl AND c.COLUMN_NAME = x.shadow "
            f"WHERE {has_shadow}",
            "CONCAT(v_found, ' before the swap: rename that column first')",
        ),
        (
            "SELECT MIN(CONCAT('the index ', s.INDEX_NAME, ' on ', s.TABLE_NAME, ' uses ', x.tbl, "
            "'.', x.col)) INTO v_found FROM sqlalchemy_ulid_pk_cols x "
            "JOIN information_schema.STATISTICS s ON s.TABLE_SCHEMA = v_schema "
            "AND s.TABLE_NAME = x.tbl WHERE x.id > 1 AND s.INDEX_NAME <> 'PRIMARY' "
            f"AND ({option}) AND s.INDEX_NAME IN (SELECT s2.INDEX_NAME "
            "FROM information_schema.STATISTICS s2 WHERE s2.TABLE_SCHEMA = v_schema "
            "AND s2.TABLE_NAME = x.tbl AND s2.COLUMN_NAME = x.col)",
            "CONCAT(v_found, ' with DESC, an expression or a non-BTREE type, which this op "
            "does not recreate: drop it first')",
        ),
        (
            "SELECT GROUP_CONCAT(DISTINCT CONCAT(TRIGGER_NAME, ' (on ', EVENT_OBJECT_TABLE, ')') "
            "SEPARATOR ', ') INTO v_found FROM information_schema.TRIGGERS "
            f"WHERE EVENT_OBJECT_SCHEMA = v_schema AND EVENT_OBJECT_TABLE IN {tables}",
            "CONCAT('triggers depend on the tables whose key columns would change: ', v_found, "
            "'. Drop them first')",
        ),
        (
            "SELECT GROUP_CONCAT(DISTINCT CONCAT(v.TABLE_NAME, ' (on ', t.tbl, ')') "
            "SEPARATOR ', ') INTO v_found FROM information_schema.VIEWS v "
            "JOIN sqlalchemy_ulid_pk_cols t ON v.VIEW_DEFINITION LIKE CONCAT('%`', t.tbl, '`%') "
            "WHERE v.TABLE_SCHEMA = v_schema",
            "CONCAT('views depend on the tables whose key columns would change: ', v_found, "
            "'. Drop them first')",
        ),
        (
            "SELECT GROUP_CONCAT(DISTINCT CONCAT(CONSTRAINT_NAME, ' on ', CONSTRAINT_SCHEMA, '.', "
            "TABLE_NAME) SEPARATOR ', ') INTO v_found "
            "FROM information_schema.REFERENTIAL_CONSTRAINTS "
            "WHERE UNIQUE_CONSTRAINT_SCHEMA = v_schema AND CONSTRAINT_SCHEMA <> v_schema "
            f"AND REFERENCED_TABLE_NAME IN {tables}",
            "CONCAT('foreign keys in other schemas reference the tables: ', v_found, "
            "'. Drop them first')",
        ),
    ]
    checks.append(_taken_by_drop_column())
    if n.direction == "ulid":
        checks.append(
            (
                f"SELECT MAX(shadow) INTO v_found FROM sqlalchemy_ulid_pk_cols "
                f"WHERE id = 1 AND shadow = {lit(n.legacy_id)}",
                f"CONCAT('legacy_id=', {lit(repr(n.legacy_id))}, ' is the name this op "
                "gives the new key values before the swap: choose another name')",
            )
        )
    return "".join(
        f"  SET v_found = NULL;\n  {query};\n  IF v_found IS NOT NULL THEN\n"
        f"    {_refuse(n, message)}\n  END IF;\n"
        for query, message in checks
    )


def _taken_by_drop_column() -> tuple[str, str]:
    """The online op's check of what the swap's DROP COLUMN would take, in SQL.

    On the first referencing column (in plan order) that has them: the
    CHECK constraints and generated columns that use it (the online op's
    own queries), its
    DEFAULT (MariaDB writes a nullable column's missing one as ``NULL``),
    and the foreign keys from it to a column that does not change (another
    table's key, or one in another schema), which the swap would drop or
    fail on. The words are the online op's (``_checks``).
    """
    here = "g.TABLE_SCHEMA = v_schema AND g.TABLE_NAME = x.tbl"
    checks = "({})".format(
        mysql_check_constraints(
            "x.col",
            here,
            f"GROUP_CONCAT(DISTINCT {CHECK_CONSTRAINT} ORDER BY BINARY g.CONSTRAINT_NAME "
            "SEPARATOR ', ')",
        )
    )
    generated = "({})".format(
        mysql_generated_columns(
            "x.col",
            here,
            f"GROUP_CONCAT(DISTINCT {GENERATED_COLUMN} ORDER BY BINARY g.COLUMN_NAME "
            "SEPARATOR ', ')",
        )
    )
    foreign_key = concat(
        TAKEN_FOREIGN_KEY,
        {"name": "k.CONSTRAINT_NAME", "table": "x.tbl", "referred": "k.REFERENCED_TABLE_NAME"},
    )
    others = (
        f"(SELECT GROUP_CONCAT({foreign_key} ORDER BY k.CONSTRAINT_NAME SEPARATOR ', ') "
        "FROM information_schema.KEY_COLUMN_USAGE k WHERE k.TABLE_SCHEMA = v_schema "
        "AND k.TABLE_NAME = x.tbl AND k.COLUMN_NAME = x.col "
        "AND k.REFERENCED_TABLE_NAME IS NOT NULL AND (k.REFERENCED_TABLE_SCHEMA <> v_schema "
        "OR NOT EXISTS (SELECT 1 FROM sqlalchemy_ulid_pk_cols y "
        "WHERE y.tbl = k.REFERENCED_TABLE_NAME AND y.col = k.REFERENCED_COLUMN_NAME)))"
    )
    default = (
        "IF(c.COLUMN_DEFAULT IS NOT NULL AND c.COLUMN_DEFAULT <> 'NULL', "
        f"{lit(TAKEN_DEFAULT)}, NULL)"
    )
    query = (
        "SELECT MAX(CONCAT(t.tbl, '.', t.col, ' is used by ', t.what)) INTO v_found FROM "
        "(SELECT x.id, x.tbl, x.col, "
        f"CONCAT_WS(', ', {checks}, {generated}, {default}, {others}) AS what "
        "FROM sqlalchemy_ulid_pk_cols x JOIN information_schema.COLUMNS c "
        "ON c.TABLE_SCHEMA = v_schema AND c.TABLE_NAME = x.tbl AND c.COLUMN_NAME = x.col "
        "WHERE x.id > 1 HAVING what <> '' ORDER BY x.id LIMIT 1) AS t"
    )
    return query, f"CONCAT(v_found, {lit(TAKEN_END)})"


def _persist(n: Names) -> str:
    """The plan's first change: its steps stored, in one transaction."""
    columns = "label, always, batched, guard, setup, each_batch, body"
    return f"""\
  CREATE TABLE IF NOT EXISTS {n.steps_table} (name VARCHAR(190) NOT NULL, seq INT NOT NULL,
    label TEXT NOT NULL, always TINYINT NOT NULL DEFAULT 0, batched TINYINT NOT NULL DEFAULT 0,
    guard LONGTEXT, setup LONGTEXT, each_batch LONGTEXT, body LONGTEXT,
    done TINYINT NOT NULL DEFAULT 0, PRIMARY KEY (name, seq))
    ENGINE=InnoDB CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
  START TRANSACTION;
  INSERT INTO {n.steps_table} (name, seq, label, body, done)
    VALUES ({n.name_sql}, 0, 'plan', {lit(n.direction)}, 1);
  INSERT INTO {n.steps_table} (name, seq, {columns})
    SELECT {n.name_sql}, ROW_NUMBER() OVER (ORDER BY seq) * 10, {columns}
    FROM sqlalchemy_ulid_pk_steps ORDER BY seq;
  COMMIT;
  SELECT CONCAT({lit(n.op_name + ": ")}, ROW_NUMBER() OVER (ORDER BY seq), '. ', label)
    AS plan FROM sqlalchemy_ulid_pk_steps ORDER BY seq;
  DROP TEMPORARY TABLE sqlalchemy_ulid_pk_cols, sqlalchemy_ulid_pk_fks, sqlalchemy_ulid_pk_steps;
"""


def plan_block(n: Names) -> str:
    """The compound statement that checks everything, then stores the plan."""
    body = (
        _DECLARATIONS
        + "  main: BEGIN\n"
        + "  catalog: LOOP\n"
        + "    SET v_skipped = 0;\n"
        + _state_checks(n)
        + _key_checks(n)
        + _TEMPORARY
        + _closure(n)
        + _plan_checks(n)
        + plan_steps(n)
        + _WHOLE.format(refuse=_refuse(n, _SKIPPED))
        + _persist(n)
        + "  END main;\n"
    )
    return (
        "-- 1. Check and plan: the key, every column that references it (found in\n"
        "-- information_schema), everything the online op refuses; then the steps are\n"
        f"-- stored in {STEPS_TABLE}, the script's first change.\n" + compound(body)
    )
