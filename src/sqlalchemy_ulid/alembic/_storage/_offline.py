r"""``alter_ulid_storage(..., online=True)`` in offline (``--sql``) mode, on PostgreSQL.

The script has the online op's phases (``_online``), in order, for
``psql -f`` outside a transaction (it sets ``ON_ERROR_STOP`` itself; Alembic's
``autocommit_block()`` writes the ``COMMIT`` before them). Each phase is a
``DO`` block that reads the catalog first and does only what is left:

0. an interrupted conversion the other way is undone; then a read-only
   check refuses what online refuses (``_offline_check``);
1. the state table and its row; the shadow column;
2. the trigger and its function (the op's conversion SQL);
3. the copy, one batch a transaction, its last key kept in the state
   table (a rerun goes on after it);
4. the equality ``CHECK``, ``NOT VALID`` then validated;
5. NOT NULL for a NOT NULL column (read as the script runs);
6. the indexes, ``CREATE INDEX CONCURRENTLY``, which cannot run in a ``DO``
   block: a ``SELECT`` writes the statements and psql's ``\gexec`` runs
   them (first dropping an INVALID leftover of a killed build);
7. the swap, one transaction, which first proves that every earlier phase
   finished, and carries the DEFAULT and COMMENT.

After success the column is in ``to_storage`` with no shadow beside it,
and every block does nothing: the script can be rerun whole at any time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from alembic.operations import Operations

from ..._dialects import dialect_row
from .._concurrent_index import _INDEX_WAIT
from .._locks import DEFAULT_LOCK_TIMEOUT
from .._offline import _comment, _dollar_quoted, _literal
from ._offline_check import check_block, forget, outside_block, undo_block
from ._offline_sql import (
    Names,
    build_indexes,
    drop_invalid_indexes,
    names_for,
    shadow_index_sql,
)

if TYPE_CHECKING:
    from ._op import AlterULIDStorageOp

__all__ = ["alter_offline"]


def alter_offline(operations: Operations, op: AlterULIDStorageOp) -> None:
    """Write the online conversion's phases into the ``--sql`` script."""
    context = operations.get_context()
    dialect = context.dialect
    sql = op.convert_sql(dialect_row(dialect))
    assert sql is not None
    n = names_for(op, dialect, sql)
    timeout = DEFAULT_LOCK_TIMEOUT if op.lock_timeout is None else op.lock_timeout
    out = context.impl.static_output
    with context.autocommit_block():
        out(_header(op, n))
        # psql goes on after a failed statement unless told not to: a
        # refusal would then be followed by the phases it refused.
        out("\\set ON_ERROR_STOP on")
        # Each block's statements read what committed before them: under a
        # REPEATABLE READ or SERIALIZABLE default a copy batch that waited
        # for a writer's row fails, and the swap would check a stale catalog.
        out("SET default_transaction_isolation = 'read committed';")
        # The copy is one statement however many batches it commits, and an
        # index build one: a role's statement_timeout would cancel them on
        # every rerun. Each lock wait is bounded by lock_timeout instead.
        out("SET statement_timeout = 0;")
        out(f"SET lock_timeout = '{max(1, round(timeout * 1000))}ms';")
        out(outside_block(n))
        out(undo_block(n))
        out(check_block(op, n, dialect))
        out(_start_block(n))
        out(_trigger_block(n))
        out(_copy_block(op, n))
        out(_prove_block(n))
        out(_not_null_block(n))
        out(
            "-- Phase 6: each index, unique constraint and primary key on the column, built\n"
            "-- again on the new column while writers go on. CREATE INDEX CONCURRENTLY cannot\n"
            "-- run in a DO block: each SELECT writes the statements, psql's \\gexec runs them.\n"
            "-- A build that fails or is killed leaves an INVALID index: the first SELECT\n"
            "-- drops it when the script is run again."
        )
        out(f"SET lock_timeout = '{round(max(timeout, _INDEX_WAIT) * 1000)}ms';")
        out(drop_invalid_indexes(n))
        out(build_indexes(n))
        out(f"SET lock_timeout = '{max(1, round(timeout * 1000))}ms';")
        out(_swap_block(n))
        out("RESET lock_timeout;")
        out("RESET default_transaction_isolation;")
        out("RESET statement_timeout;")


def _header(op: AlterULIDStorageOp, n: Names) -> str:
    where = f"{_comment(op.table_name)}.{_comment(op.column_name)}"
    return (
        f"-- {n.op}({where}, {n.from_kind} -> {n.to_kind}, online=True): run this with\n"
        "-- psql -f (it needs psql: phase 6 uses \\gexec; it sets ON_ERROR_STOP itself, so\n"
        "-- psql stops at the first error), outside a transaction (not psql -1): each block\n"
        "-- commits on its own. Writers go on throughout. If a statement fails (a lock\n"
        "-- timeout, a value that is not an id), fix the cause and run the script again\n"
        "-- from this comment (Alembic's own statements before it may not rerun): each\n"
        "-- block reads the catalog first and does only what is left; the copy goes on\n"
        "-- after its last batch. Run after success, it does nothing."
    )


def _block(comment: str, body: str) -> str:
    return f"{comment}\nDO {_dollar_quoted('ulid', body)};"


def _start_block(n: Names) -> str:
    return _block(
        "-- Phase 1: the conversion's row in ulid_storage_conversions; the new column,\n"
        "-- nullable (a metadata change: no table rewrite)",
        f"""
DECLARE
  v_fresh boolean := {n.shadow_kind} IS NULL;
BEGIN
  IF {n.col_kind} IS DISTINCT FROM {_literal(n.from_kind)} THEN
    RETURN;
  END IF;
  PERFORM pg_advisory_xact_lock(hashtext({_literal("sqlalchemy_ulid.ulid_storage_conversions")}));
  CREATE TABLE IF NOT EXISTS {n.state} (table_name TEXT NOT NULL, column_name TEXT NOT NULL,
    last_key TEXT, PRIMARY KEY (table_name, column_name));
  IF v_fresh THEN
    -- A fresh start forgets a copy position an abandoned conversion left.
    INSERT INTO {n.state} (table_name, column_name) VALUES ({n.row_values})
      ON CONFLICT (table_name, column_name) DO UPDATE SET last_key = NULL;
    COMMIT;
    ALTER TABLE {n.table} ADD COLUMN {n.shadow} {n.new_type} NULL;
  ELSE
    INSERT INTO {n.state} (table_name, column_name) VALUES ({n.row_values})
      ON CONFLICT (table_name, column_name) DO NOTHING;
  END IF;
END
""",
    )


def _trigger_block(n: Names) -> str:
    function = (
        f"CREATE OR REPLACE FUNCTION {n.function}() RETURNS trigger LANGUAGE plpgsql AS "
        + _dollar_quoted("fn", f" BEGIN NEW.{n.shadow} := {n.converted_new}; RETURN NEW; END ")
    )
    return _block(
        "-- Phase 2: a trigger keeps the new column in step with every write from here on\n"
        "-- (the conversion SQL fails on a value that is not an id: that write fails)",
        f"""
BEGIN
  IF NOT ({n.in_progress}) THEN
    RETURN;
  END IF;
  {function};
  IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass({n.table_lit})
      AND tgname = {n.trigger_lit}) THEN
    CREATE TRIGGER {n.trigger} BEFORE INSERT OR UPDATE ON {n.table}
      FOR EACH ROW EXECUTE FUNCTION {n.function}();
  END IF;
END
""",
    )


def _copy_block(op: AlterULIDStorageOp, n: Names) -> str:
    # format() templates: %1$I is the key column, %2$s its type; $1 the last
    # key copied, $2 the highest key when the copy began (later rows came
    # through the trigger). A % of a name is doubled.
    table, column, shadow, state = (
        x.replace("%", "%%") for x in (n.table, n.column, n.shadow, n.state)
    )
    row = n.row.replace("%", "%%")

    def batch(after: bool) -> str:
        where = "%1$I <= CAST($2 AS %2$s)" + (" AND %1$I > CAST($1 AS %2$s)" if after else "")
        return _dollar_quoted(
            "batch",
            f"WITH batch AS (SELECT %1$I AS k FROM {table} WHERE {where} ORDER BY %1$I "
            f"LIMIT {op.batch_size}), top AS (SELECT k FROM batch ORDER BY k DESC LIMIT 1), "
            f"moved AS (UPDATE {table} AS t SET {column} = t.{column} FROM batch "
            f"WHERE t.%1$I = batch.k AND t.{shadow} IS NULL AND t.{column} IS NOT NULL "
            f"RETURNING 1), mark AS (UPDATE {state} SET last_key = (SELECT CAST(k AS TEXT) "
            f"FROM top) WHERE {row} AND EXISTS (SELECT 1 FROM top) RETURNING 1) "
            "SELECT (SELECT CAST(k AS TEXT) FROM top), (SELECT count(*) FROM moved)",
        )

    pause = f"\n    PERFORM pg_sleep({op.pause:g});" if op.pause else ""
    stopped = _literal(f"{n.op}: the copy of {op.table_name}.{op.column_name} stopped: ")
    return _block(
        f"-- Phase 3: the copy, {op.batch_size} rows a transaction in primary-key order; each\n"
        "-- batch records its last key, so a rerun goes on after it. A value that is not an\n"
        "-- id (written before the trigger existed) stops it, naming the value: nothing is\n"
        "-- stored; delete or fix that row and run the script again.",
        f"""
DECLARE
  v_key_column name;
  v_key_type text;
  v_last text;
  v_high text;
  v_top text;
  v_moved bigint;
  v_total bigint := 0;
BEGIN
  IF NOT ({n.in_progress}) THEN
    RETURN;
  END IF;
  SELECT a.attname, format_type(a.atttypid, a.atttypmod) INTO v_key_column, v_key_type
    FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
    WHERE i.indrelid = to_regclass({n.table_lit}) AND i.indisprimary;
  SELECT last_key INTO v_last FROM {n.state} WHERE {n.row};
  EXECUTE format('SELECT CAST(t.%1$I AS TEXT) FROM %2$s AS t ORDER BY t.%1$I DESC LIMIT 1',
    v_key_column, {n.table_lit}) INTO v_high;
  LOOP
    EXIT WHEN v_high IS NULL;
    BEGIN
      IF v_last IS NULL THEN
        EXECUTE format({batch(False)}, v_key_column, v_key_type) INTO v_top, v_moved USING v_last, v_high;
      ELSE
        EXECUTE format({batch(True)}, v_key_column, v_key_type) INTO v_top, v_moved USING v_last, v_high;
      END IF;
    EXCEPTION WHEN invalid_text_representation OR data_exception THEN
      RAISE EXCEPTION '%', {stopped} || SQLERRM;
    END;
    EXIT WHEN v_top IS NULL;
    v_last := v_top;
    v_total := v_total + v_moved;
    RAISE NOTICE '%', {_literal(f"{n.op}: copied ")} || v_total || {_literal(f" rows of {op.table_name}.{op.column_name}")};
    COMMIT;{pause}
  END LOOP;
END
""",  # noqa: E501
    )


def _prove_block(n: Names) -> str:
    return _block(
        "-- Phase 4: proof that every row's new value is its converted old one, even rows a\n"
        "-- session that skips triggers wrote: a CHECK, NOT VALID, then VALIDATE (writers go\n"
        "-- on). Rows that fail it are converted again, then it is validated again.",
        f"""
DECLARE
  v_fixed bigint;
BEGIN
  IF NOT ({n.in_progress}) THEN
    RETURN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = to_regclass({n.table_lit})
      AND conname = {n.same_lit}) THEN
    ALTER TABLE {n.table} ADD CONSTRAINT {n.same}
      CHECK ({n.shadow} IS NOT DISTINCT FROM {n.converted}) NOT VALID;
    COMMIT;
  END IF;
  FOR v_round IN 1..3 LOOP
    EXIT WHEN (SELECT convalidated FROM pg_constraint
      WHERE conrelid = to_regclass({n.table_lit}) AND conname = {n.same_lit});
    BEGIN
      ALTER TABLE {n.table} VALIDATE CONSTRAINT {n.same};
    EXCEPTION WHEN check_violation THEN
      IF v_round = 3 THEN
        RAISE;
      END IF;
      UPDATE {n.table} SET {n.shadow} = {n.converted}
        WHERE {n.shadow} IS DISTINCT FROM {n.converted};
      GET DIAGNOSTICS v_fixed = ROW_COUNT;
      RAISE WARNING '%', v_fixed || {_literal(" rows were written without the trigger; converted again")};
    END;
    COMMIT;
  END LOOP;
END
""",  # noqa: E501
    )


def _not_null_block(n: Names) -> str:
    attr = (
        "(SELECT attnotnull FROM pg_attribute WHERE attrelid = to_regclass({}) "
        "AND attname = {} AND attnum > 0 AND NOT attisdropped)"
    )
    check = (
        f"(SELECT convalidated FROM pg_constraint WHERE conrelid = to_regclass({n.table_lit}) "
        f"AND conname = {n.check_lit})"
    )
    return _block(
        "-- Phase 5: a NOT NULL column's new column made NOT NULL without a long lock: a\n"
        "-- CHECK, NOT VALID, validated, then SET NOT NULL (instant: the check proves it)",
        f"""
BEGIN
  IF NOT ({n.in_progress}) THEN
    RETURN;
  END IF;
  IF {attr.format(n.table_lit, n.column_lit)} AND NOT {attr.format(n.table_lit, n.shadow_lit)} THEN
    IF {check} IS NULL THEN
      ALTER TABLE {n.table} ADD CONSTRAINT {n.check} CHECK ({n.shadow} IS NOT NULL) NOT VALID;
      COMMIT;
    END IF;
    IF NOT {check} THEN
      ALTER TABLE {n.table} VALIDATE CONSTRAINT {n.check};
      COMMIT;
    END IF;
    ALTER TABLE {n.table} ALTER COLUMN {n.shadow} SET NOT NULL;
    COMMIT;
  END IF;
  IF {check} IS NOT NULL THEN
    ALTER TABLE {n.table} DROP CONSTRAINT {n.check};
  END IF;
END
""",
    )


def _swap_block(n: Names) -> str:
    unfinished = _literal(f"{n.op}: the swap found an earlier phase unfinished (")
    rerun = _literal("); nothing was changed: run the whole script again")
    return _block(
        "-- Phase 7: the swap, one transaction under the lock timeout: the trigger and the\n"
        "-- old column go, the new column takes its name, its indexes the old names and\n"
        "-- constraints; the DEFAULT (converted) and the COMMENT are carried",
        f"""
DECLARE
  v_rel regclass := to_regclass({n.table_lit});
  v_old_default text;
  v_new_default text;
  v_note text;
  r record;
  v_names text[] := '{{}}';
  v_shadows text[] := '{{}}';
  v_kinds text[] := '{{}}';
BEGIN
  IF v_rel IS NULL OR NOT ({n.in_progress}) THEN
    RETURN;
  END IF;
  LOCK TABLE {n.table} IN ACCESS EXCLUSIVE MODE;
  IF NOT COALESCE((SELECT convalidated FROM pg_constraint WHERE conrelid = v_rel
      AND conname = {n.same_lit}), FALSE) THEN
    RAISE EXCEPTION '%', {unfinished} || 'phase 4' || {rerun};
  END IF;
  IF EXISTS (SELECT 1 FROM pg_attribute o, pg_attribute s WHERE o.attrelid = v_rel
      AND s.attrelid = v_rel AND o.attname = {n.column_lit} AND s.attname = {n.shadow_lit}
      AND o.attnotnull AND NOT s.attnotnull) THEN
    RAISE EXCEPTION '%', {unfinished} || 'phase 5' || {rerun};
  END IF;
  FOR r IN SELECT i.relname AS name, c.contype, {shadow_index_sql("i.relname")} AS shadow
      FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
      LEFT JOIN pg_constraint c ON c.conindid = x.indexrelid AND c.conrelid = x.indrelid
      WHERE x.indrelid = v_rel AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = v_rel
        AND a.attnum = ANY (x.indkey) AND a.attname = {n.column_lit}) ORDER BY 1 LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_index y JOIN pg_class j ON j.oid = y.indexrelid
        WHERE y.indrelid = v_rel AND j.relname = r.shadow AND y.indisvalid) THEN
      RAISE EXCEPTION '%', {unfinished} || 'phase 6: no valid index ' || r.shadow || {rerun};
    END IF;
    v_names := v_names || r.name::text;
    v_shadows := v_shadows || r.shadow;
    v_kinds := v_kinds || COALESCE(r.contype::text, '');
  END LOOP;
  SELECT pg_get_expr(d.adbin, d.adrelid), col_description(v_rel, a.attnum)
    INTO v_old_default, v_note FROM pg_attribute a
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attrelid = v_rel AND a.attname = {n.column_lit};
  IF v_old_default IS NOT NULL THEN
    EXECUTE format({_dollar_quoted("t", "SELECT CAST(" + n.convert_template + " AS text)")},
      v_old_default) INTO v_new_default;
  END IF;
  DROP TRIGGER {n.trigger} ON {n.table};
  DROP FUNCTION {n.function}();
  -- Drops the old indexes and constraints with it; no data is rewritten.
  ALTER TABLE {n.table} DROP COLUMN {n.column};
  ALTER TABLE {n.table} RENAME COLUMN {n.shadow} TO {n.column};
  FOR i IN 1..COALESCE(array_length(v_names, 1), 0) LOOP
    IF v_kinds[i] IN ('p', 'u') THEN
      EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I %s USING INDEX %I', {n.table_lit},
        v_names[i], CASE v_kinds[i] WHEN 'p' THEN 'PRIMARY KEY' ELSE 'UNIQUE' END, v_shadows[i]);
    ELSE
      EXECUTE format('ALTER INDEX %s%I RENAME TO %I', {n.schema_prefix_lit}, v_shadows[i], v_names[i]);
    END IF;
  END LOOP;
  IF v_new_default IS NOT NULL THEN
    -- Untyped: the literal takes the column's own type, as the online op's does.
    EXECUTE format('ALTER TABLE %s ALTER COLUMN %s SET DEFAULT %L', {n.table_lit},
      {_literal(n.column)}, v_new_default);
  END IF;
  IF v_note IS NOT NULL THEN
    EXECUTE format('COMMENT ON COLUMN %s.%s IS %L', {n.table_lit}, {_literal(n.column)}, v_note);
  END IF;
{forget(n)}
  RAISE NOTICE '%', {_literal(f"{n.op}: converted ")} || {n.table_lit} || '.' || {n.column_lit};
END
""",  # noqa: E501
    )
