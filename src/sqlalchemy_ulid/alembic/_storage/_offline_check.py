"""The offline script's first blocks: undo an interrupted conversion the other way, then check.

The check repeats, as the script runs and before any change, every refusal
of the online op that needs the catalog (``_plan``): the column's type,
the shadow's name, foreign keys, the primary key, triggers and views,
whatever the swap's ``DROP COLUMN`` would drop, indexes it would not build
the same, the DEFAULT, and values that are not ids. Messages are built by
concatenation (``RAISE EXCEPTION '%', ...``), so a ``%`` in a name is text.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

from ..._dialects import key_conversion_sql
from .._offline import _dollar_quoted, _literal
from ._offline_sql import Names, inline
from ._plan import INHERITED

if TYPE_CHECKING:
    from ._op import AlterULIDStorageOp

__all__ = ["check_block", "forget", "outside_block", "undo_block"]


def _raise(*parts: str) -> str:
    """A RAISE EXCEPTION of the concatenated parts (SQL expressions)."""
    return f"RAISE EXCEPTION '%', {' || '.join(parts)};"


def outside_block(n: Names) -> str:
    """Stop, before any change, a script run inside a transaction (``psql -1``).

    The blocks commit phase by phase, which a transaction block forbids. A
    statement run on its own is the first of its transaction, which then
    started when the statement did.
    """
    body = f"""
BEGIN
  IF now() <> statement_timestamp() THEN
    RAISE EXCEPTION '%', {_literal(f"{n.op}: run this script outside a transaction (not psql -1 or --single-transaction, not after BEGIN): its blocks commit phase by phase; nothing was changed")};
  END IF;
END
"""  # noqa: E501
    return f"DO {_dollar_quoted('ulid', body)};"


def undo_block(n: Names) -> str:
    """Remove what an interrupted conversion the other way left (the online op's undo)."""
    body = f"""
BEGIN
  IF {n.col_kind} IS DISTINCT FROM {_literal(n.to_kind)}
     OR to_regclass({n.state_lit}) IS NULL THEN
    RETURN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM {n.state} WHERE {n.row}) THEN
    RETURN;
  END IF;
  IF {n.shadow_kind} IS NULL THEN
    -- Killed between recording its row and adding its column: only the row is left.
{textwrap.indent(forget(n), "  ")}
    RETURN;
  END IF;
  IF {n.shadow_kind} IS DISTINCT FROM {_literal(n.from_kind)} THEN
    RETURN;
  END IF;
  RAISE NOTICE '%', {_literal(f"{n.op}: undoing the interrupted conversion of ")}
    || {n.table_lit} || '.' || {n.column_lit};
  LOCK TABLE {n.table} IN ACCESS EXCLUSIVE MODE;
  DROP TRIGGER IF EXISTS {n.trigger} ON {n.table};
  DROP FUNCTION IF EXISTS {n.function}();
  ALTER TABLE {n.table} DROP COLUMN {n.shadow};
{forget(n)}
END
"""
    return (
        "-- An interrupted conversion the other way (the column still in the storage this\n"
        "-- converts to, a shadow beside it, or only its row): removed in one transaction,\n"
        "-- values unchanged\n"
        f"DO {_dollar_quoted('ulid', body)};"
    )


def forget(n: Names) -> str:
    """PL/pgSQL removing the conversion's row, and the state table after the last one."""
    return f"""\
  PERFORM pg_advisory_xact_lock(hashtext({_literal("sqlalchemy_ulid.ulid_storage_conversions")}));
  DELETE FROM {n.state} WHERE {n.row};
  IF NOT EXISTS (SELECT 1 FROM {n.state}) THEN
    DROP TABLE {n.state};
  END IF;"""


def check_block(op: AlterULIDStorageOp, n: Names, dialect: Any) -> str:
    """The read-only DO block that stops the script, naming the cause, before any change."""
    sql = key_conversion_sql(dialect)
    assert sql is not None
    assert sql.index_options is not None
    assert sql.dependants is not None
    # The catalog queries name a schema: the table's own, where to_regclass()
    # found it on the search_path (current_schema() is the first schema
    # there that exists, which may not hold the table).
    schema = (
        _literal(op.schema)
        if op.schema is not None
        else (
            "(SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            f"WHERE c.oid = to_regclass({n.table_lit}))"
        )
    )
    table, column = _literal(op.table_name), n.column_lit
    where = f"{table} || '.' || {column}"
    nothing = _literal("; nothing was changed")
    prefix = _literal(f"{n.op}: ")
    triggers = inline(sql.triggers, schema=schema, tables=f"({table})")
    views = inline(sql.views, schema=schema, tables=f"({table})")
    dependants = inline(
        sql.dependants, table=n.table_lit, column=column, same=n.same_lit, check=n.check_lit
    )
    options = inline(sql.index_options, schema=schema, table=table, column=column)
    nullable = ""
    if op.nullable is not None:
        nullable = f"""
  IF v_col_nullable IS DISTINCT FROM {"TRUE" if op.nullable else "FALSE"} THEN
    {_raise(prefix, where, _literal(f" is {'NOT NULL' if op.nullable else 'nullable'}, but the op was given nullable={op.nullable}"), nothing)}
  END IF;"""  # noqa: E501
    values = ""
    if n.bad is not None:
        todo = f"{n.column} IS NOT NULL AND {n.bad}"
        query = f"SELECT string_agg(quote_literal(v), ', ') FROM (SELECT {n.column}::text AS v FROM {n.table} WHERE {{}} LIMIT 3) AS e"  # noqa: E501
        values = f"""
  IF v_shadow_kind IS NULL THEN
    EXECUTE {_dollar_quoted("q", query.format(todo))} INTO v_found;
  ELSE
    EXECUTE {_dollar_quoted("q", query.format(f"{n.shadow} IS NULL AND {todo}"))} INTO v_found;
  END IF;
  IF v_found IS NOT NULL THEN
    {_raise(prefix, where, _literal(f" holds values that are not {op.values_name} (e.g. "), "v_found", "')'", nothing)}
  END IF;"""  # noqa: E501
    indexes = (
        "SELECT i.relname, c.contype, c.condeferrable FROM pg_index x "
        "JOIN pg_class i ON i.oid = x.indexrelid LEFT JOIN pg_constraint c "
        "ON c.conindid = x.indexrelid AND c.conrelid = x.indrelid WHERE x.indrelid = v_rel "
        "AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = x.indrelid "
        f"AND a.attnum = ANY (x.indkey) AND a.attname = {column})"
    )
    body = f"""
DECLARE
  v_rel regclass := to_regclass({n.table_lit});
  v_col_kind text := {n.col_kind};
  v_shadow_kind text := {n.shadow_kind};
  v_col_type text;
  v_col_nullable boolean;
  v_col_default text;
  v_found text;
  v_r record;
BEGIN
  IF v_rel IS NULL THEN
    {_raise(prefix, _literal("there is no table "), table, nothing)}
  END IF;
  IF (SELECT relkind FROM pg_class WHERE oid = v_rel) = 'p'
      OR EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = v_rel OR inhparent = v_rel) THEN
    {_raise(prefix, table, _literal(f" is {INHERITED}"), nothing)}
  END IF;
  SELECT format_type(a.atttypid, a.atttypmod), NOT a.attnotnull, pg_get_expr(d.adbin, d.adrelid)
    INTO v_col_type, v_col_nullable, v_col_default FROM pg_attribute a
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attrelid = v_rel AND a.attname = {column} AND a.attnum > 0 AND NOT a.attisdropped;
  IF v_col_type IS NULL THEN
    {_raise(prefix, table, _literal(" has no column "), column, nothing)}
  END IF;
  IF v_col_kind = {_literal(n.to_kind)} AND v_shadow_kind IS NULL THEN
    RAISE NOTICE '%', {prefix} || {where} || {_literal(f" is {n.to_kind} storage already: the rest of this script does nothing")};
    RETURN;
  END IF;
  IF v_col_kind IS DISTINCT FROM {_literal(n.from_kind)} THEN
    {_raise(prefix, where, "' is '", "v_col_type", _literal(f", which is neither {n.from_kind} nor {n.to_kind} storage"), nothing)}
  END IF;
  IF v_shadow_kind IS NOT NULL AND v_shadow_kind <> {_literal(n.to_kind)} THEN
    {_raise(prefix, table, _literal(" already has a column "), n.shadow_lit, _literal(", the name this op gives the converted values: rename that column first"), nothing)}
  END IF;
  IF v_shadow_kind IS NULL AND (to_regprocedure({n.function_lit}) IS NOT NULL OR EXISTS (
      SELECT 1 FROM pg_trigger WHERE tgrelid = v_rel AND tgname = {n.trigger_lit})) THEN
    {_raise(prefix, _literal("a trigger or function named "), n.trigger_lit, _literal(" exists already, the name this op gives its own: rename it first"), nothing)}
  END IF;
  SELECT string_agg(c.conname, ', ' ORDER BY c.conname) INTO v_found FROM pg_constraint c
    JOIN pg_attribute a ON a.attname = {column} AND a.attrelid = v_rel
    WHERE c.contype = 'f' AND ((c.conrelid = v_rel AND a.attnum = ANY (c.conkey))
      OR (c.confrelid = v_rel AND a.attnum = ANY (c.confkey)));
  IF v_found IS NOT NULL THEN
    {_raise(prefix, where, _literal(" is used by foreign keys ("), "v_found", _literal(f"); nothing was changed. Drop those foreign keys, convert the key and every column referencing it with {n.op}, then create the foreign keys again"))}
  END IF;
  IF (SELECT count(*) FROM pg_index i, unnest(i.indkey) k WHERE i.indrelid = v_rel AND i.indisprimary) <> 1 THEN
    {_raise(prefix, _literal("online=True needs a single-column primary key on "), table, _literal(" to walk it in batches"), nothing)}
  END IF;
  SELECT string_agg(DISTINCT t.n, ', ') INTO v_found FROM ({triggers}) AS t(n, r) WHERE t.n <> {n.trigger_lit};
  IF v_found IS NULL THEN
    SELECT string_agg(DISTINCT v.n, ', ') INTO v_found FROM ({views}) AS v(n, r);
  END IF;
  IF v_found IS NOT NULL THEN
    {_raise(prefix, _literal("triggers or views depend on "), table, "' ('", "v_found", _literal("), and their SQL may name "), column, _literal(", which the swap replaces; nothing was changed. Drop them before the conversion and create them again after it"))}
  END IF;
  SELECT string_agg(DISTINCT d.n, ', ') INTO v_found FROM ({dependants}) AS d(n);
  IF v_found IS NOT NULL THEN
    {_raise(prefix, where, _literal(" is used by "), "v_found", _literal(": the swap drops the old column, which would drop them or fail; nothing was changed. Drop them before the conversion and create them again after it"))}
  END IF;
  FOR v_r IN SELECT * FROM ({options}) AS o(relname, method, pred, exprs, incl, ord, rest) LOOP
    CONTINUE WHEN v_r.relname LIKE '%\\_\\_ulid';
    IF v_r.method <> 'btree' OR v_r.pred OR v_r.exprs OR v_r.incl OR v_r.ord THEN
      {_raise(prefix, _literal("the index "), "v_r.relname", _literal(" uses "), column, _literal(" with a WHERE clause, expressions, INCLUDE columns, DESC or NULLS FIRST or another method than btree, which this op does not build again"), nothing)}
    END IF;
    IF v_r.rest <> '' THEN
      {_raise(prefix, _literal("the index "), "v_r.relname", _literal(" uses "), column, _literal(" with "), "v_r.rest", _literal(", which this op does not build again"), nothing)}
    END IF;
  END LOOP;
  FOR v_r IN {indexes} LOOP
    IF v_r.contype NOT IN ('p', 'u') OR v_r.condeferrable THEN
      {_raise(prefix, _literal("the constraint "), "v_r.relname", _literal(" uses "), column, _literal(" in a way this op does not build again (exclusion or deferrable)"), nothing)}
    END IF;
  END LOOP;
  IF v_col_default IS NOT NULL THEN
    BEGIN
      IF v_col_default !~ '^''[^'']*''(::[a-z ]+)?$' THEN
        RAISE EXCEPTION 'not a literal';
      END IF;
      EXECUTE format({_dollar_quoted("t", "SELECT CAST(" + n.convert_template + " AS text)")}, v_col_default) INTO v_found;
    EXCEPTION WHEN OTHERS THEN
      {_raise(prefix, where, _literal(" has DEFAULT "), "v_col_default", _literal(", which cannot be carried to the new storage; nothing was changed. Drop the default, convert, then set a new one"))}
    END;
  END IF;{nullable}{values}
END
"""  # noqa: E501
    return (
        "-- Checked before any change: the script stops here, naming the cause, on a table\n"
        "-- the conversion cannot finish on (the online op refuses the same)\n"
        f"DO {_dollar_quoted('ulid', body)};"
    )
