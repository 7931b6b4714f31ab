"""The steps of the MariaDB key-conversion script, built by its plan block.

SQL that runs inside the plan block (``_offline_mariadb_plan``) once the
columns are known: it writes one row per step into a temporary table, with
the DDL or DML of the step as text, the online op's phases in order:

1. a nullable shadow column beside each changing column;
2. (to ULIDs) the key's shadow filled in batches, dated from ``from_time``
   (or now, in key order);
3. each referencing shadow filled by a join on what it references;
4. the swap, under ``LOCK TABLES ... WRITE`` on every table: the catch-up
   (rows written since), a check that no row lacks its new value, the
   foreign keys dropped, one atomic ``ALTER TABLE`` per table (columns
   swapped, primary key, indexes recreated; on the key's table the legacy
   column keeps the old values, unique), and the foreign keys recreated.

A step with a guard runs only while the guard finds its columns (a swap
already made is not made twice); ``always`` steps (the lock, the catch-up
and the checks) run on every run of the script, the others once.
"""

from __future__ import annotations

from ..._dialects import mysql_ulid_sql
from .._offline_mariadb import _MAX_MS
from .._plan.render_mariadb import lit
from ._offline_mariadb_sql import Names, concat, has_columns, quoted

__all__ = ["plan_steps"]

_STEP = (
    "INSERT INTO sqlalchemy_ulid_pk_steps (label, always, batched, guard, setup, each_batch, body)"
)


def _key_fill(n: Names, table: str) -> tuple[str, str, str]:
    """SQL of (setup, each batch, batch) text for the key's shadow."""
    values = {"kq": "v_kq", "sq": "v_sq", "millis": "v_millis", "key": "QUOTE(v_key)"}
    limit = n.batch_size
    if n.from_time is None:
        setup = (
            "SELECT COALESCE(MAX(CAST(CONV(HEX(LEFT(ulid_r1.{sq}, 6)), 16, 10) AS SIGNED)), -1) "
            f"INTO @sqlalchemy_ulid_ms FROM {table} AS ulid_r1"
        )
        # Each batch a millisecond of its own, later than every id given so far.
        each = (
            "SET @sqlalchemy_ulid_ms = GREATEST(FLOOR(UNIX_TIMESTAMP(SYSDATE(3)) * 1000), "
            "@sqlalchemy_ulid_ms + 1)"
        )
        ulid = mysql_ulid_sql(
            "@sqlalchemy_ulid_ms", "UNHEX(LPAD(HEX(c.tie), 4, '0')), RANDOM_BYTES(8)"
        )
        batch = (
            f"UPDATE {table} AS ulid_t1 JOIN (SELECT c.k, {ulid} AS ulid FROM ("
            "SELECT r.k, ROW_NUMBER() OVER (ORDER BY r.k) AS tie FROM ("
            f"SELECT ulid_r1.{{kq}} AS k FROM {table} AS ulid_r1 WHERE ulid_r1.{{sq}} IS NULL "
            f"ORDER BY ulid_r1.{{kq}} LIMIT {limit}) AS r) AS c) AS s ON ulid_t1.{{kq}} = s.k "
            "SET ulid_t1.{sq} = s.ulid WHERE ulid_t1.{sq} IS NULL"
        )
        return concat(setup, values), concat(each, values), concat(batch, values)
    assert n.from_time is not None
    when = f"ulid_r1.`{n.from_time.replace('`', '``')}`"
    rows = (
        f"SELECT ulid_r1.{{kq}} AS k, {when} AS v, {{millis}} AS ms FROM {table} AS ulid_r1 "
        f"WHERE ulid_r1.{{sq}} IS NULL ORDER BY ulid_r1.{{kq}} LIMIT {limit}"
    )
    message = lit(f"{n.table}.{n.from_time} of the row with ")
    in_range = f"c.ms BETWEEN 0 AND {_MAX_MS}"
    check = (
        f"SELECT CONCAT({message}, {{key}}, ' = ', r.k, ' is ', "
        "COALESCE(r.v, 'NULL'), ': outside the ULID range (1970 to 10889)') "
        f"INTO @sqlalchemy_ulid_bad FROM ({rows}) AS r "
        f"WHERE r.ms IS NULL OR r.ms NOT BETWEEN 0 AND {_MAX_MS} ORDER BY r.k LIMIT 1"
    )
    # Ties count up over the whole table, as online: _TIES keeps, per
    # millisecond, the last tie given (tie) and the last this batch gives (next).
    ties = (
        f"CREATE OR REPLACE TEMPORARY TABLE {_TIES} (ms BIGINT NOT NULL PRIMARY KEY, "
        "tie BIGINT NOT NULL, next BIGINT NOT NULL) "
        f"SELECT {_part('ulid_r1.{sq}', 1, 6)} AS ms, MAX({_part('ulid_r1.{sq}', 7, 2)}) AS tie, "
        f"MAX({_part('ulid_r1.{sq}', 7, 2)}) AS next FROM {table} AS ulid_r1 "
        "WHERE ulid_r1.{sq} IS NOT NULL GROUP BY 1"
    )
    promote = f"UPDATE {_TIES} SET tie = next WHERE next <> tie"
    plan = (
        f"INSERT INTO {_TIES} (ms, tie, next) SELECT c.ms, 0, COUNT(*) FROM ({rows}) AS c "
        f"WHERE {in_range} GROUP BY c.ms ON DUPLICATE KEY UPDATE next = tie + VALUES(next)"
    )
    overflow = (
        f"SELECT CONCAT({lit(f'more than 65535 rows of {n.table} have the time ')}, ms, "
        "' (Unix ms): no room for their ties') "
        f"INTO @sqlalchemy_ulid_bad FROM {_TIES} WHERE next > 65535 LIMIT 1"
    )
    ulid = mysql_ulid_sql("b.ms", "UNHEX(LPAD(HEX(b.tie), 4, '0')), RANDOM_BYTES(8)")
    batch = (
        f"UPDATE {table} AS ulid_t1 JOIN (SELECT b.k, {ulid} AS ulid FROM ("
        "SELECT c.k, c.ms, ROW_NUMBER() OVER (PARTITION BY c.ms ORDER BY c.k) "
        f"+ COALESCE(x.tie, 0) AS tie FROM ({rows}) AS c LEFT JOIN {_TIES} AS x "
        f"ON x.ms = c.ms WHERE {in_range}) AS b) AS s "
        "ON ulid_t1.{kq} = s.k SET ulid_t1.{sq} = s.ulid WHERE ulid_t1.{sq} IS NULL"
    )
    each = ", CHAR(0 USING utf8mb4), ".join(
        concat(statement, values) for statement in (check, promote, plan, overflow)
    )
    return concat(ties, values), f"CONCAT({each})", concat(batch, values)


#: The session's ties per millisecond while the key is filled from a time column.
_TIES = "sqlalchemy_ulid_pk_ties"


def _part(column: str, start: int, length: int) -> str:
    """SQL of bytes ``start`` to ``start + length - 1`` of a ULID, as an integer."""
    return f"CAST(CONV(HEX(SUBSTR({column}, {start}, {length})), 16, 10) AS SIGNED)"


def _fill_key(n: Names, table: str, always: int) -> str:
    setup, each, batch = _key_fill(n, table)
    label = lit(f"fill {n.table}.") + ", v_shadow_name"
    guard = has_columns("v_schema", [(n.name_sql, "v_shadow_name")]) if always else "NULL"
    verb = "catch up: " if always else ""
    return (
        f"  {_STEP}\n    VALUES (CONCAT({lit(verb)}, {label}, ' with new ULIDs'), "
        f"{always}, 1, {guard}, {setup}, {each}, {batch});\n"
    )


def _number(alias: str) -> str:
    """SQL of the table's number in the plan: its aliases are ulid_t1, ulid_p1, ulid_r1..."""
    return f"(SELECT MIN(z.id) FROM sqlalchemy_ulid_pk_cols z WHERE z.tbl = {alias}.tbl)"


def _concat(*parts: str) -> str:
    return f"CONCAT({', '.join(parts)})"


def _referencing(n: Names, *, catch_up: bool) -> str:
    """One step per referencing column: its shadow filled by a join on its parent."""
    source = "p.shadow"
    if n.direction == "legacy":
        source = f"IF(p.id = 1, {lit(n.legacy_id)}, p.shadow)"
    tx, tp = _number("x"), _number("p")
    t, r = ("'ulid_t'", tx), ("'ulid_p'", tp)
    child_shadow = (*t, "'.'", quoted("x.shadow"))
    new = (*r, "'.'", quoted(source))
    join = _concat(
        "'UPDATE '", n.qualified("x.tbl"), "' AS '", *t, "' JOIN '", n.qualified("p.tbl"),
        "' AS '", *r, "' ON '", *t, "'.'", quoted("x.col"), "' = '", *r, "'.'", quoted("p.col"),
        "' SET '", *child_shadow, "' = '", *new, "' WHERE '", *child_shadow, "' IS NULL'",
        *(("' OR '", *child_shadow, "' <> '", *new) if catch_up else ()),
    )  # fmt: skip
    joined = (
        "FROM sqlalchemy_ulid_pk_cols x JOIN sqlalchemy_ulid_pk_cols p "
        "ON p.tbl = x.ptbl AND p.col = x.pcol WHERE x.id > 1 ORDER BY x.id"
    )
    if not catch_up:
        return (
            f"  {_STEP}\n    SELECT CONCAT('fill ', x.tbl, '.', x.shadow, ' by a join on ', "
            f"p.tbl), 0, 0, NULL, NULL, NULL, {join}\n    {joined};\n"
        )
    guard = has_columns("v_schema", [("x.tbl", "x.shadow"), ("p.tbl", source)])
    cleared = _concat(
        "'UPDATE '", n.qualified("x.tbl"), "' AS '", *t, "' SET '", *child_shadow,
        "' = NULL WHERE '", *t, "'.'", quoted("x.col"), "' IS NULL AND '", *child_shadow,
        "' IS NOT NULL'",
    )  # fmt: skip
    return (
        f"  {_STEP}\n    SELECT CONCAT('catch up: ', x.tbl, '.', x.shadow, ' by a join on ', "
        f"p.tbl), 1, 0, {guard}, NULL, NULL, {join}\n    {joined};\n"
        f"  {_STEP}\n    SELECT CONCAT('catch up: ', x.tbl, '.', x.shadow, ' cleared where ', "
        f"x.col, ' is NULL'), 1, 0, {guard}, NULL, NULL, {cleared}\n    {joined};\n"
    )


def _checks(n: Names) -> str:
    """Under the lock: no row may lack its new value (a nullable reference would be lost)."""
    has_shadow = "x.id > 1" if n.direction == "legacy" else "TRUE"
    guard = has_columns("v_schema", [("x.tbl", "x.shadow")])
    prefix = lit(f"{n.op_name}: ")
    alias = ("'ulid_r'", _number("x"))
    each = _concat(
        "'SELECT CONCAT('", f"QUOTE(CONCAT({prefix}, x.tbl, '.', x.col, ' has '))",
        "', COUNT(*), '' rows without a new value after the catch-up: stop writes to it and "
        "run the script again'') INTO @sqlalchemy_ulid_bad FROM '", n.qualified("x.tbl"),
        "' AS '", *alias, "' WHERE '", *alias, "'.'", quoted("x.shadow"), "' IS NULL'",
        f"IF(x.id > 1, CONCAT(' AND ', {', '.join(alias)}, '.', {quoted('x.col')}, "
        "' IS NOT NULL'), '')",
        "' HAVING COUNT(*) > 0'",
    )  # fmt: skip
    return (
        f"  {_STEP}\n    SELECT CONCAT('check every row of ', x.tbl, '.', x.shadow, "
        f"' has a value'), 1, 0, {guard}, NULL, {each}, NULL\n"
        f"    FROM sqlalchemy_ulid_pk_cols x WHERE {has_shadow} ORDER BY x.id;\n"
    )


def _lock(n: Names) -> str:
    """LOCK TABLES: each table under its name and its three aliases, and the steps table."""
    name = n.qualified("t.tbl")
    each = _concat(
        name, "' WRITE, '", name, "' AS ulid_t'", "t.id", "' WRITE, '", name, "' AS ulid_p'",
        "t.id", "' READ, '", name, "' AS ulid_r'", "t.id", "' READ'",
    )  # fmt: skip
    return (
        f"  {_STEP}\n    SELECT 'lock the tables (LOCK TABLES ... WRITE) for the swap', 1, 0, "
        f"NULL, NULL, NULL, CONCAT('LOCK TABLES ', GROUP_CONCAT({each} SEPARATOR ', '), "
        f"{lit(', ' + n.steps_table + ' WRITE')})\n"
        "    FROM (SELECT tbl, MIN(id) AS id FROM sqlalchemy_ulid_pk_cols GROUP BY tbl) AS t;\n"
    )


def _foreign_keys(n: Names, *, add: bool) -> str:
    if not add:
        body = (
            f"CONCAT('ALTER TABLE ', {n.qualified('f.tbl')}, ' DROP FOREIGN KEY IF EXISTS ', "
            f"{quoted('f.name')})"
        )
        label = "CONCAT('drop foreign key ', f.name, ' on ', f.tbl)"
    else:
        body = (
            f"CONCAT('ALTER TABLE ', {n.qualified('f.tbl')}, ' ADD CONSTRAINT ', "
            f"{quoted('f.name')}, "
            f"' FOREIGN KEY IF NOT EXISTS (', {quoted('f.col')}, ') REFERENCES ', "
            f"{n.qualified('f.rtbl')}, ' (', {quoted('f.rcol')}, ')', "
            "IF(f.del = 'RESTRICT', '', CONCAT(' ON DELETE ', f.del)), "
            "IF(f.upd = 'RESTRICT', '', CONCAT(' ON UPDATE ', f.upd)))"
        )
        label = "CONCAT('create foreign key ', f.name, ' on ', f.tbl)"
    return (
        f"  {_STEP}\n    SELECT {label}, 0, 0, NULL, NULL, NULL, {body}\n"
        "    FROM sqlalchemy_ulid_pk_fks f ORDER BY f.id;\n"
    )


_INDEX = (
    "SELECT s.INDEX_NAME AS name, CONCAT(IF(MAX(s.NON_UNIQUE) = 0, 'UNIQUE ', ''), 'INDEX ', "
    + quoted("s.INDEX_NAME")
    + ", ' (', GROUP_CONCAT(CONCAT("
    + quoted("s.COLUMN_NAME")
    + ", IF(s.SUB_PART IS NULL, '', CONCAT('(', s.SUB_PART, ')'))) ORDER BY s.SEQ_IN_INDEX "
    "SEPARATOR ', '), ')', IF(MAX(s.INDEX_COMMENT) <> '', CONCAT(' COMMENT ', "
    "QUOTE(MAX(s.INDEX_COMMENT))), '')) AS def FROM information_schema.STATISTICS s "
    "WHERE s.TABLE_SCHEMA = v_schema AND s.TABLE_NAME = v_ptbl AND s.INDEX_NAME <> 'PRIMARY' "
    "AND s.INDEX_NAME IN (SELECT s2.INDEX_NAME FROM information_schema.STATISTICS s2 "
    "JOIN sqlalchemy_ulid_pk_cols x ON x.tbl = s2.TABLE_NAME AND x.col = s2.COLUMN_NAME "
    "WHERE s2.TABLE_SCHEMA = v_schema AND s2.TABLE_NAME = v_ptbl AND x.id > 1) "
    "GROUP BY s.INDEX_NAME"
)


#: The primary key's COMMENT clause ('' without one): part of the index, added again with it.
_PK_COMMENT = (
    "(SELECT IF(MAX(s.INDEX_COMMENT) <> '', CONCAT(' COMMENT ', QUOTE(MAX(s.INDEX_COMMENT))), '') "
    "FROM information_schema.STATISTICS s WHERE s.TABLE_SCHEMA = v_schema "
    "AND s.TABLE_NAME = v_ptbl AND s.INDEX_NAME = 'PRIMARY')"
)


def _root_clauses(n: Names) -> tuple[str, str, str]:
    """SQL of the key table's own clauses: (before, the columns, after)."""
    legacy = f"`{n.legacy_id.replace('`', '``')}`"
    unique = f"`{n.legacy_unique.replace('`', '``')}`"
    if n.direction == "ulid":
        return (
            lit("DROP PRIMARY KEY"),
            f"CONCAT('RENAME COLUMN ', v_kq, {lit(' TO ' + legacy)}, ', CHANGE COLUMN ', "
            "v_sq, ' ', v_kq, ' ', v_new_type, ' NOT NULL')",
            f"CONCAT('ADD PRIMARY KEY (', v_kq, ')', {_PK_COMMENT}, "
            f"{lit(f', ADD UNIQUE KEY {unique} ({legacy})')})",
        )
    return (
        lit("DROP PRIMARY KEY"),
        f"CONCAT('DROP COLUMN ', v_kq, {lit(', RENAME COLUMN ' + legacy + ' TO ')}, v_kq)",
        f"CONCAT('ADD PRIMARY KEY (', v_kq, ')', {_PK_COMMENT}, {lit(f', DROP INDEX {unique}')})",
    )


def _swaps(n: Names) -> str:
    """One atomic ALTER TABLE per table, in plan order."""
    before, columns, after = _root_clauses(n)
    marker = "v_shadow_name" if n.direction == "ulid" else lit(n.legacy_id)
    change = (
        f"CONCAT('CHANGE COLUMN ', {quoted('shadow')}, ' ', {quoted('col')}, ' ', v_new_type, "
        "IF(nullable, ' NULL', ' NOT NULL'), "
        "IF(comment IS NULL, '', CONCAT(' COMMENT ', QUOTE(comment))))"
    )
    pk = "IF(in_pk > 0 AND pk_cols = 1, col, NULL)"
    return f"""\
  SET v_i = 0;
  swaps: LOOP
    SELECT MIN(x.id) INTO v_i FROM sqlalchemy_ulid_pk_cols x WHERE x.id > v_i
      AND NOT EXISTS (SELECT 1 FROM sqlalchemy_ulid_pk_cols y WHERE y.tbl = x.tbl AND y.id < x.id);
    IF v_i IS NULL THEN
      LEAVE swaps;
    END IF;
    SELECT tbl, shadow INTO v_ptbl, v_pcol FROM sqlalchemy_ulid_pk_cols WHERE id = v_i;
    SELECT GROUP_CONCAT(CONCAT('DROP COLUMN ', {quoted("col")}) ORDER BY id SEPARATOR ', '),
      GROUP_CONCAT({change} ORDER BY id SEPARATOR ', '), MAX({pk})
      INTO v_setup, v_each, v_found FROM sqlalchemy_ulid_pk_cols WHERE tbl = v_ptbl AND id > 1;
    SELECT GROUP_CONCAT(CONCAT('DROP INDEX ', {quoted("i.name")}) ORDER BY i.name SEPARATOR ', '),
      GROUP_CONCAT(CONCAT('ADD ', i.def) ORDER BY i.name SEPARATOR ', ')
      INTO v_text, v_body FROM ({_INDEX}) AS i;
    IF v_i = 1 THEN
      SET v_body = CONCAT_WS(', ', {before}, v_text, v_setup, {columns}, v_each, {after}, v_body),
        v_pcol = {marker};
    ELSE
      SET v_body = CONCAT_WS(', ', IF(v_found IS NULL, NULL, 'DROP PRIMARY KEY'), v_text, v_setup,
        v_each, IF(v_found IS NULL, NULL, CONCAT('ADD PRIMARY KEY (', {quoted("v_found")}, ')', {_PK_COMMENT})), v_body);
    END IF;
    {_STEP}
      VALUES (CONCAT('swap the columns of ', v_ptbl), 0, 0,
        {has_columns("v_schema", [("v_ptbl", "v_pcol")])}, NULL, NULL,
        CONCAT('ALTER TABLE ', {n.qualified("v_ptbl")}, ' ', v_body));
  END LOOP swaps;
"""  # noqa: E501


def plan_steps(n: Names) -> str:
    """SQL (inside the plan block) that writes every step into the temporary steps table."""
    has_shadow = "x.id > 1" if n.direction == "legacy" else "TRUE"
    table = f"{n.prefix}`{n.table.replace('`', '``')}`"
    shadows = (
        f"  {_STEP}\n    SELECT CONCAT('add ', x.tbl, '.', x.shadow, ' (nullable)'), 0, 0, NULL, "
        f"NULL, NULL, CONCAT('ALTER TABLE ', {n.qualified('x.tbl')}, ' ADD COLUMN IF NOT EXISTS ', "
        f"{quoted('x.shadow')}, ' ', v_new_type, ' NULL')\n"
        f"    FROM sqlalchemy_ulid_pk_cols x WHERE {has_shadow} ORDER BY x.id;\n"
    )
    sql = (
        "  SELECT shadow INTO v_shadow_name FROM sqlalchemy_ulid_pk_cols WHERE id = 1;\n"
        f"  SET v_sq = {quoted('v_shadow_name')};\n" + shadows
    )
    if n.direction == "ulid":
        sql += _fill_key(n, table, 0)
    sql += _referencing(n, catch_up=False) + _lock(n)
    if n.direction == "ulid":
        sql += _fill_key(n, table, 1)
    sql += _referencing(n, catch_up=True) + _checks(n)
    sql += _foreign_keys(n, add=False) + _swaps(n) + _foreign_keys(n, add=True)
    return sql
