"""``alter_ulid_storage(..., online=True)`` in offline (``--sql``) mode, on MariaDB.

The script has the shadow-table phases of the online op (``_shadow``), for
``mariadb --batch < script.sql`` (the client stops at the first error; it
runs in autocommit, so each statement commits on its own). Each phase is an
anonymous compound statement (``BEGIN NOT ATOMIC``) that reads
``information_schema`` first (``_offline_mariadb_sql.lookups``) and does
only what is left, so the whole script can be run again after a kill at any
point, and does nothing after success:

0. the run's own lock (``GET_LOCK``, the name an online run takes), or a
   stop before any change while another run holds it; given back at the end;
   the check (``mysql.storage_checks.shadow_checks``, which the online op asks
   too): everything the online op refuses stops the script with
   ``SIGNAL`` before any change (a column that is neither storage or is left
   ``VARBINARY``, no single-column primary key, not InnoDB, foreign keys,
   triggers of the user's, ``_<t>__old`` or another ``_<t>__new``, a DEFAULT
   that cannot be carried, values that are not ids);
1. ``CREATE TABLE _<t>__new LIKE <t>`` and the final ``MODIFY`` on it, with
   the nullability, COMMENT and converted DEFAULT found when it runs;
2. the three triggers, built from the column list found (generated columns
   skipped) with the op's conversion SQL, by ``EXECUTE IMMEDIATE``;
3. the copy in key order, ``batch_size`` rows a transaction, from the first
   key ``_<t>__new`` lacks up to the highest key once the triggers exist
   (after a check of the values, which the triggers guard from then on);
4. both counts in one statement, the ``AUTO_INCREMENT`` counter carried,
   ``RENAME TABLE`` (atomic);
5. the triggers and ``_<t>__old`` dropped (or, when the column is already
   in the new storage, the leftovers of an interrupted run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from alembic.operations import Operations

from ..._convert_sql import ConvertSQL
from ..._dialects import dialect_row
from .._locks import DEFAULT_LOCK_TIMEOUT
from .._offline_mariadb import _SAVED
from .._plan.database import database_for
from .._plan.render_mariadb import checks_block, comment, compound, lit, run_lock_sql, signal
from .._primary_key._offline_mariadb_sql import quoted
from ..mysql.storage_checks import shadow_checks
from ._offline_mariadb_sql import (
    DEFAULT_DECLARATIONS,
    Names,
    declarations,
    lookups,
    new_default,
)

if TYPE_CHECKING:
    from ._op import AlterULIDStorageOp

__all__ = ["alter_shadow_offline"]

#: What this script's session also changes, saved and restored as _SAVED.
_MORE_SAVED = (
    ("group_concat_max_len", "@sqlalchemy_ulid_concat"),
    ("character_set_client", "@sqlalchemy_ulid_client"),
    ("character_set_results", "@sqlalchemy_ulid_results"),
    ("collation_connection", "@sqlalchemy_ulid_collation"),
)
#: Tries of a copy batch that a deadlock or a row lock timeout stopped.
_TRIES = 5


def alter_shadow_offline(
    operations: Operations, op: AlterULIDStorageOp, sql: ConvertSQL, from_kind: str, to_kind: str
) -> None:
    """Write the shadow-table phases into the ``--sql`` script (see the module docstring)."""
    context = operations.get_context()
    n = Names(context.dialect, op, sql, from_kind, to_kind)
    timeout = DEFAULT_LOCK_TIMEOUT if op.lock_timeout is None else op.lock_timeout
    locks = dialect_row(context.dialect).locks
    assert locks is not None
    out = context.impl.static_output
    out(_header(n))
    saved = ", ".join(f"{user} = @@SESSION.{name}" for name, user in _SAVED)
    more = ", ".join(f"{user} = @@SESSION.{name}" for name, user in _MORE_SAVED)
    out(f"SET {saved}, {more};")
    # The online op's session (the driver's): utf8mb4, whose literals mix with
    # the conversion's ASCII text, and which the triggers keep.
    out("SET NAMES utf8mb4;")
    out(
        "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION', "
        "time_zone = '+00:00', group_concat_max_len = 4294967295, max_statement_time = 0;"
    )
    # Whole seconds, at least one: offline no retry follows a lock wait of 0.
    for statement in locks.set(max(1.0, timeout), False):
        out(f"{statement};")
    take_lock, give_back_lock = run_lock_sql(
        database_for(context.dialect).state, op.op_name, n.target, op.schema
    )
    out(take_lock)
    label = comment(f"{op.op_name}({op.table_name}, online=True)")
    out(f"-- {label}: the table checked before any change")
    out(checks_block(shadow_checks(n)))
    out(_shadow_block(n))
    out(_trigger_block(n))
    out(_copy_block(n))
    out(_swap_block(n))
    out(_clean_up_block(n))
    out(give_back_lock)
    restore = ", ".join(f"SESSION {name} = {user}" for name, user in _SAVED)
    more = ", ".join(f"SESSION {name} = {user}" for name, user in _MORE_SAVED)
    out(f"SET {restore}, {more};")


def _header(n: Names) -> str:
    return (
        f"-- {n.label}, {n.from_kind} -> {n.to_kind}, online=True, for MariaDB 10.11+:\n"
        "-- run this with the mariadb client (mariadb --batch < script.sql), which stops at\n"
        "-- the first error. Each block commits on its own; writers go on throughout. If a\n"
        "-- statement fails (a lock wait timeout, a value that is not an id), fix the cause\n"
        "-- and run the script again from this comment (Alembic's own statements before it\n"
        "-- may not rerun): each block reads information_schema first and does only what is\n"
        "-- left; the copy goes on from the first row the new table lacks. Run after\n"
        "-- success, it does nothing."
    )


def _in_progress(n: Names) -> str:
    """SQL true while the table's column is in the old storage."""
    return f"v_kind <=> {lit(n.from_kind)}"


def _block(comment: str, n: Names, body: str, extra: str = "") -> str:
    return f"{comment}\n" + compound(declarations() + extra + lookups(n) + body)


def _shadow_block(n: Names) -> str:
    op = n.op
    nullable = (
        "IS_NULLABLE = 'YES'" if op.nullable is None else ("TRUE" if op.nullable else "FALSE")
    )
    modify = (
        f"CONCAT({lit(f'ALTER TABLE {n.shadow} MODIFY {n.column} {n.type_sql}')}, "
        "IF(v_nullable, ' NULL', ' NOT NULL'), "
        "IF(v_default IS NULL, '', CONCAT(' DEFAULT ', v_default)), "
        "IF(v_note = '', '', CONCAT(' COMMENT ', QUOTE(v_note))))"
    )
    column = (
        f"FROM information_schema.COLUMNS WHERE {n.where(n.name)} AND COLUMN_NAME = {n.column_lit}"
    )
    body = f"""\
  IF {_in_progress(n)} THEN
    IF v_new_cols IS NULL THEN
      CREATE TABLE {n.shadow} LIKE {n.table};
      SET v_new_kind = v_kind;
    END IF;
    IF v_new_kind <=> {lit(n.from_kind)} THEN
{new_default(n)}      SELECT (SELECT {nullable} {column}), (SELECT COLUMN_COMMENT {column})
        INTO v_nullable, v_note;
      EXECUTE IMMEDIATE {modify};
    END IF;
  END IF;
"""
    extra = DEFAULT_DECLARATIONS + (
        "  DECLARE v_nullable BOOLEAN;\n  DECLARE v_note TEXT CHARACTER SET utf8mb4;\n"
    )
    return _block(
        f"-- Phase 1: the new table {comment(n.shadow_name)}, empty, its column in the new\n"
        "-- storage (instant: no row to convert)",
        n,
        body,
        extra,
    )


def _row_lists(n: Names, row: str) -> str:
    """SQL of the written columns' values of ``row`` as the new table stores them."""
    value = f"IF(COLUMN_NAME = {n.column_lit}, {lit(n.converted(row))}, "
    value += f"CONCAT({lit(row + '.')}, {quoted('COLUMN_NAME')}))"
    return f"GROUP_CONCAT({value} ORDER BY ORDINAL_POSITION SEPARATOR ', ')"


def _key_sql(n: Names, row: str) -> str:
    """SQL of the key of ``row`` as the new table stores it."""
    plain = f"CONCAT({lit(row + '.')}, v_qkey)"
    converted = lit(n.converted(row))
    # Compared with the new table's key, the text takes that column's collation
    # (its literals have the session's, which an ascii_bin column refuses).
    collated = (
        f"IF(v_key_collation IS NULL, {converted}, CONCAT('CONVERT(', {converted}, "
        "' USING ', v_key_charset, ') COLLATE ', v_key_collation))"
    )
    return f"IF(v_key = {n.column_lit}, {collated}, {plain})"


_LISTS = """\
  DECLARE v_qkey TEXT CHARACTER SET utf8mb4;
  DECLARE v_key_charset, v_key_collation VARCHAR(64) CHARACTER SET utf8mb4;
  DECLARE v_names, v_new_values, v_t_values LONGTEXT CHARACTER SET utf8mb4;
"""


def _lists(n: Names) -> str:
    """SQL setting the quoted key, the written columns and their values (NEW and t)."""
    written = f"FROM information_schema.COLUMNS WHERE {n.where(n.name)} AND IS_GENERATED = 'NEVER'"
    key = f"FROM information_schema.COLUMNS WHERE {n.where(n.shadow_name)} AND COLUMN_NAME = v_key"
    return f"""\
  SET v_qkey = {quoted("v_key")};
  SELECT (SELECT CHARACTER_SET_NAME {key}), (SELECT COLLATION_NAME {key})
    INTO v_key_charset, v_key_collation;
  SELECT GROUP_CONCAT({quoted("COLUMN_NAME")} ORDER BY ORDINAL_POSITION SEPARATOR ', '),
    {_row_lists(n, "NEW")}, {_row_lists(n, "t")}
    INTO v_names, v_new_values, v_t_values {written};
"""


def _trigger_block(n: Names) -> str:
    shadow = lit(n.shadow)
    head = {
        event: lit(f"CREATE TRIGGER {sql} AFTER {event.upper()} ON {n.table} FOR EACH ROW ")
        for event, sql in n.trigger_sql.items()
    }
    mirror = f"'REPLACE INTO ', {shadow}, ' (', v_names, ') VALUES (', v_new_values, ')'"
    old_key = _key_sql(n, "OLD")
    forget = f"'DELETE FROM ', {shadow}, ' WHERE ', {shadow}, '.', v_qkey, ' = ', {old_key}"
    moved = "'NOT (OLD.', v_qkey, ' <=> NEW.', v_qkey, ')'"
    sqls = {
        "delete": f"CONCAT({head['delete']}, {forget})",
        "update": f"CONCAT({head['update']}, 'BEGIN IF ', {moved}, ' THEN ', {forget}, "
        f"'; END IF; ', {mirror}, '; END')",
        "insert": f"CONCAT({head['insert']}, {mirror})",
    }
    creates = "".join(
        f"""\
    IF NOT EXISTS (SELECT 1 FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = {n.schema}
        AND TRIGGER_NAME = {lit(n.triggers[event])}) THEN
      EXECUTE IMMEDIATE {sqls[event]};
    END IF;
"""
        for event in ("delete", "update", "insert")
    )
    body = f"""\
  IF {_in_progress(n)} AND v_new_kind <=> {lit(n.to_kind)} THEN
{_lists(n)}{creates}  END IF;
"""
    return _block(
        "-- Phase 2: triggers on the table mirror every write into the new table from here\n"
        "-- on, converting the column (a value that is not an id makes that write fail)",
        n,
        body,
        _LISTS,
    )


def _triggers_exist(n: Names) -> str:
    return (
        f"(SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = {n.schema} "
        f"AND TRIGGER_NAME IN ({n.trigger_list})) = 3"
    )


def _copy_block(n: Names) -> str:
    op, table, shadow = n.op, lit(n.table), lit(n.shadow)
    column = n.column
    bad = n.sql.bad_text(column, n.from_kind)
    shown = column if n.from_kind in ("text", "hex") else f"HEX({column})"
    not_ids = lit(f"{op.op_name}: {op.table_name}.{op.column_name} holds ")
    not_ids_end = lit(f", which is not one of the {op.values_name}; nothing was copied")
    check = ""
    if op.checked_before(n.from_kind):
        check = f"""\
    -- The triggers guard every write from here on: a value that is not an id
    -- written before them is named now (a batch would fail on it unnamed).
    SET v_bad = (SELECT {shown} FROM {n.table} WHERE {column} IS NOT NULL AND {bad} LIMIT 1);
    IF v_bad IS NOT NULL THEN
      {signal(f"CONCAT({not_ids}, v_bad, {not_ids_end})")}
    END IF;
"""
    step = f"""CONCAT('SELECT MAX(k) INTO @sqlalchemy_ulid_high FROM (SELECT ', v_qkey,
        ' AS k FROM ', {table}, ' WHERE ', v_qkey, IF(v_first, ' >= ', ' > '),
        '@sqlalchemy_ulid_low AND ', v_qkey, ' <= @sqlalchemy_ulid_top ORDER BY ', v_qkey,
        ' LIMIT {int(op.batch_size)}) AS b')"""
    copy = f"""CONCAT('INSERT IGNORE INTO ', {shadow}, ' (', v_names, ') SELECT ', v_t_values,
        ' FROM ', {table}, ' AS t WHERE t.', v_qkey, IF(v_first, ' >= ', ' > '),
        '@sqlalchemy_ulid_low AND t.', v_qkey, ' <= @sqlalchemy_ulid_high ORDER BY t.', v_qkey,
        ' LOCK IN SHARE MODE')"""
    missing = f"""CONCAT('SELECT MIN(t.', v_qkey, ') INTO @sqlalchemy_ulid_low FROM ', {table},
        ' AS t LEFT JOIN ', {shadow}, ' AS s ON s.', v_qkey, ' = ', {_key_sql(n, "t")},
        ' WHERE s.', v_qkey, ' IS NULL')"""
    stopped = lit(f"{op.op_name}: a copy batch of {op.table_name} failed {_TRIES} times ")
    label = lit(f" rows of {op.table_name} copied")
    pause = f"\n      DO SLEEP({op.pause:g});" if op.pause else ""
    body = f"""\
  IF {_in_progress(n)} AND v_new_kind <=> {lit(n.to_kind)} AND {_triggers_exist(n)} THEN
{check}{_lists(n)}    -- The highest key now: a row above it was written through the triggers.
    EXECUTE IMMEDIATE CONCAT('SELECT MAX(', v_qkey, ') INTO @sqlalchemy_ulid_top FROM ', {table});
    SET @sqlalchemy_ulid_low = NULL;
    EXECUTE IMMEDIATE {missing};
    SET v_first = TRUE;
    WHILE @sqlalchemy_ulid_low IS NOT NULL AND @sqlalchemy_ulid_top IS NOT NULL DO
      SET @sqlalchemy_ulid_high = NULL;
      SET v_step_sql = {step};
      SET v_copy_sql = {copy};
      EXECUTE IMMEDIATE v_step_sql;
      IF @sqlalchemy_ulid_high IS NULL THEN
        SET @sqlalchemy_ulid_low = NULL;
      ELSE
        SET v_try = 0, v_failed = 1;
        WHILE v_failed AND v_try < {_TRIES} DO
          SET v_try = v_try + 1, v_failed = 0;
          BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1205 SET v_failed = 1;
            EXECUTE IMMEDIATE v_copy_sql;
            SET v_copied = ROW_COUNT();
          END;
          IF v_failed THEN
            DO SLEEP(0.05 * v_try);
          END IF;
        END WHILE;
        IF v_failed THEN
          {signal(f"CONCAT({stopped}, '(deadlock or lock wait timeout): run the script again')")}
        END IF;
        SET v_total = v_total + v_copied;
        SELECT CONCAT({lit(op.op_name + ": ")}, v_total, {label}) AS progress;
        SET @sqlalchemy_ulid_low = @sqlalchemy_ulid_high, v_first = FALSE;{pause}
      END IF;
    END WHILE;
  END IF;
"""
    extra = _LISTS + (
        "  DECLARE v_step_sql, v_copy_sql LONGTEXT CHARACTER SET utf8mb4;\n"
        "  DECLARE v_bad TEXT CHARACTER SET utf8mb4;\n"
        "  DECLARE v_first, v_failed BOOLEAN DEFAULT TRUE;\n"
        "  DECLARE v_try INT DEFAULT 0;\n"
        "  DECLARE v_copied, v_total BIGINT DEFAULT 0;\n"
    )
    return _block(
        f"-- Phase 3: the copy, {op.batch_size} rows a transaction in primary-key order, up to\n"
        "-- the highest key when it starts (later rows came through the triggers). Run again\n"
        "-- after an interruption, it goes on from the first row the new table lacks.",
        n,
        body,
        extra,
    )


def _swap_block(n: Names) -> str:
    op = n.op
    differ = lit(f"{op.op_name}: {op.table_name} has ")
    rerun = lit(": nothing was swapped; run the script again (the copy goes on)")
    body = f"""\
  IF {_in_progress(n)} AND v_new_kind <=> {lit(n.to_kind)} AND {_triggers_exist(n)} THEN
    -- One statement: both counts from one read view (the triggers write both
    -- tables in the writer's transaction).
    SELECT (SELECT COUNT(*) FROM {n.table}), (SELECT COUNT(*) FROM {n.shadow})
      INTO v_rows, v_new_rows;
    IF v_rows <> v_new_rows THEN
      {signal(f"CONCAT({differ}, v_rows, ' rows and the new table ', v_new_rows, {rerun})")}
    END IF;
    -- CREATE TABLE ... LIKE started the counter again: the keys of rows deleted
    -- from the end would be given out twice.
    SELECT (SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE {n.where(n.name)})
      INTO v_counter;
    IF v_counter IS NOT NULL THEN
      EXECUTE IMMEDIATE CONCAT({lit(f"ALTER TABLE {n.shadow} AUTO_INCREMENT = ")}, v_counter);
    END IF;
    RENAME TABLE {n.table} TO {n.old}, {n.shadow} TO {n.table};
    SELECT {lit(f"{op.op_name}: {op.table_name}.{op.column_name} converted")} AS progress;
  END IF;
"""
    extra = "  DECLARE v_rows, v_new_rows, v_counter BIGINT UNSIGNED;\n"
    return _block(
        "-- Phase 4: the row counts compared, the AUTO_INCREMENT counter carried, then one\n"
        "-- atomic RENAME TABLE swaps the two (the triggers follow the old table)",
        n,
        body,
        extra,
    )


def _clean_up_block(n: Names) -> str:
    drops = "".join(
        f"""\
    IF EXISTS (SELECT 1 FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = {n.schema}
        AND TRIGGER_NAME = {lit(name)}) THEN
      DROP TRIGGER {n.trigger_sql[event]};
    END IF;
"""
        for event, name in n.triggers.items()
    )
    old = lit(n.from_kind)
    body = f"""\
  IF v_kind <=> {lit(n.to_kind)} THEN
{drops}    -- Only a table of our own shape, its column still in the old storage.
    IF v_old_cols <=> v_cols AND v_old_kind <=> {old} THEN
      DROP TABLE {n.old};
    END IF;
    IF v_new_cols <=> v_cols AND v_new_kind <=> {old} THEN
      DROP TABLE {n.shadow};
    END IF;
  END IF;
"""
    return _block(
        "-- Phase 5: the triggers and the old table dropped (also what an interrupted run\n"
        "-- left, or the new table of a conversion being undone)",
        n,
        body,
    )
