"""The MariaDB offline storage script's first block: refuse what online refuses.

It repeats, as the script runs and before any change, every refusal of
``_shadow._Shadow.refuse``: each one a ``SIGNAL SQLSTATE '45000'`` naming
what it found (messages are cut to MariaDB's 512 characters). With the
column already in the new storage it refuses nothing: the last block only
removes what an interrupted run left.
"""

from __future__ import annotations

from .._offline_mariadb import _comment, _literal
from .._plan.render_mariadb import compound, signal
from ._offline_mariadb_sql import DEFAULT_DECLARATIONS, Names, declarations, lookups, new_default

__all__ = ["check_block"]


def check_block(n: Names) -> str:
    """The read-only block that stops the script, naming the cause, before any change."""
    op = n.op
    name, where = _literal(op.table_name), n.where(n.name)
    label = f"{op.op_name}({op.table_name}, online=True)"
    says = _literal(f"{label}: ")
    column = _literal(f"{op.table_name}.{op.column_name}")
    nothing = _literal("; nothing was changed")
    body = f"""\
  IF v_cols IS NULL THEN
    {signal(f"CONCAT({says}, {name}, ' does not exist', {nothing})")}
  END IF;
  IF v_has_column = 0 THEN
    {signal(f"CONCAT({says}, {name}, ' has no column ', {n.column_lit})")}
  END IF;
  IF NOT v_kind <=> {_literal(n.to_kind)} THEN
    IF v_kind <=> 'holding' THEN
      {signal(f"CONCAT({column}, ' is VARBINARY: a conversion without online=True was interrupted; rerun it without online=True')")}
    END IF;
    IF NOT v_kind <=> {_literal(n.from_kind)} THEN
      {signal(f"CONCAT({column}, ' is neither {n.from_kind} nor {n.to_kind} storage', {nothing})")}
    END IF;
    SELECT (SELECT ENGINE FROM information_schema.TABLES WHERE {where}) INTO v_engine;
    IF NOT v_engine <=> 'InnoDB' THEN
      {signal(f"CONCAT({says}, 'needs an InnoDB table; ', {name}, ' is ', COALESCE(v_engine, '?'))")}
    END IF;
    IF v_key_count <> 1 THEN
      {signal(f"CONCAT({says}, 'needs a single-column primary key on ', {name}, {nothing})")}
    END IF;
    SELECT (SELECT GROUP_CONCAT(CONSTRAINT_NAME, ' (', TABLE_NAME, ' references ',
        REFERENCED_TABLE_NAME, ')' SEPARATOR '; ') FROM information_schema.REFERENTIAL_CONSTRAINTS
      WHERE CONSTRAINT_SCHEMA = {n.schema} AND (TABLE_NAME = {name} OR REFERENCED_TABLE_NAME = {name}))
      INTO v_found;
    IF v_found IS NOT NULL THEN
      {signal(f"CONCAT({says}, 'foreign keys use the table: ', v_found, {nothing})")}
    END IF;
    SELECT (SELECT GROUP_CONCAT(TRIGGER_NAME SEPARATOR ', ') FROM information_schema.TRIGGERS
      WHERE EVENT_OBJECT_SCHEMA = {n.schema} AND EVENT_OBJECT_TABLE = {name}
      AND TRIGGER_NAME NOT IN ({n.trigger_list})) INTO v_found;
    IF v_found IS NOT NULL THEN
      {signal(f"CONCAT({says}, {name}, ' has triggers (', v_found, '): they would not follow the swap', {nothing})")}
    END IF;
    IF v_old_cols IS NOT NULL THEN
      {signal(f"CONCAT({says}, 'a table is named ', {_literal(n.old_name)}, ', which the swap needs', {nothing})")}
    END IF;
    IF v_new_cols IS NOT NULL AND NOT (
        (v_new_cols <=> v_cols AND v_new_kind <=> {_literal(n.to_kind)})
        OR (v_new_cols <=> v_cols AND v_new_kind <=> {_literal(n.from_kind)} AND NOT EXISTS (
          SELECT 1 FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = {n.schema}
          AND TRIGGER_NAME IN ({n.trigger_list})))) THEN
      {signal(f"CONCAT({says}, 'a table of another shape is named ', {_literal(n.shadow_name)}, {nothing})")}
    END IF;
{_indent(new_default(n))}{_values(n)}  END IF;
"""  # noqa: E501  (SQL lines, kept whole for the reader of the script)
    extra = DEFAULT_DECLARATIONS + (
        "  DECLARE v_engine VARCHAR(64) CHARACTER SET utf8mb4;\n"
        "  DECLARE v_found, v_bad TEXT CHARACTER SET utf8mb4;\n"
    )
    return f"-- {_comment(label)}: the table checked before any change\n" + compound(
        declarations() + extra + lookups(n) + body
    )


def _indent(sql: str) -> str:
    return "".join("  " + line if line.strip() else line for line in sql.splitlines(True))


def _values(n: Names) -> str:
    op = n.op
    if not op.checked_before(n.from_kind):
        return ""
    column = n.column
    shown = column if n.from_kind in ("text", "hex") else f"HEX({column})"
    holds = _literal(
        f"{op.table_name}.{op.column_name} holds values that are not {op.values_name} (e.g. "
    )
    bad = n.sql.bad_text(column, n.from_kind)
    return f"""\
    SET v_bad = (SELECT {shown} FROM {n.table} WHERE {column} IS NOT NULL AND {bad} LIMIT 1);
    IF v_bad IS NOT NULL THEN
      {signal(f"CONCAT({holds}, v_bad, ')', {_literal('; nothing was changed')})")}
    END IF;
"""
