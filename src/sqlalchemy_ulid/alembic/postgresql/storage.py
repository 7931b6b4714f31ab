"""The plan of ``alter_ulid_storage``/``alter_uuid7_storage(online=True)`` on PostgreSQL.

A shadow column, then a swap; no step makes a writer wait longer than a
metadata change. The plan is written from names alone: its guards and
statements read the catalog as they run, so the one plan runs online and
renders as the ``psql`` script.

1. the checks (``storage_checks``), before any change;
2. an interrupted conversion the other way is undone (its shadow, trigger
   and function dropped; the column and its values were never changed);
3. ``ADD COLUMN <col>__ulid`` (nullable, the new type: no rewrite), the
   trigger that sets it from the column on every INSERT and every UPDATE
   that changes the column (``UPDATE OF`` the column: the copy's own
   UPDATE does not fire it; the conversion SQL fails on a value that is
   not an id: no write stores a wrong one);
4. the copy, in key order: each batch sets the shadow of the rows still
   without one to their converted column, and records its last key in
   the state row (``copy:<key>``): a rerun goes on after it;
5. a ``CHECK`` that the shadow equals the converted column, ``NOT VALID``
   then validated (writers go on): proof even for rows a session that
   skips triggers wrote. Only when that validation fails are the rows
   that differ converted again, and the check validated once more: each
   row is converted twice (the copy, the proof), not three times;
6. for a NOT NULL column the check of step 5 is ``shadow IS NOT NULL AND
   ...``: once validated, ``SET NOT NULL`` is instant (PostgreSQL sees
   the check implies it: no scan). An equality check without it (an
   earlier release's) gets ``CHECK (shadow IS NOT NULL) NOT VALID``,
   validated, then dropped after ``SET NOT NULL``;
7. each index, unique constraint and primary key on the column built again
   on the shadow ``CONCURRENTLY`` (an INVALID leftover dropped first);
8. the swap, one transaction under ``lock_timeout``: the trigger and old
   column go, the shadow takes the name, its indexes the old names and
   constraints, the DEFAULT (converted) and COMMENT are carried.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._names import shadow_name_pg
from .._plan.render_pg import dollar_quoted
from .._plan.step import Fill, Plan, Step
from .catalog import column_where, constraint_exists, literal
from .storage_checks import storage_checks
from .storage_copy import COPY_DECLARE, copy_script, no_online

if TYPE_CHECKING:
    from .._storage._target import Target

__all__ = ["plan_storage"]


def _attr(t: Target, name: str, where: str = "TRUE") -> str:
    return column_where(t.table_lit, name, where)


def _constraint(t: Target, name: str, where: str = "TRUE") -> str:
    return constraint_exists(t.table_lit, name, where)


def _do(body: str) -> str:
    return f"DO {dollar_quoted('ulid', body)}"


def plan_storage(t: Target, copy: Any = None) -> Plan:
    """The op's plan; ``copy(connection)`` (online) starts the copy's Python batches."""
    table, shadow = t.table, t.shadow
    going = f"({t.in_progress})"
    frm, to = literal(t.from_kind), literal(t.to_kind)
    same_exists = _constraint(t, t.same_lit)
    same_open = _constraint(t, t.same_lit, "NOT c.convalidated")
    check_exists = _constraint(t, t.check_lit)
    check_open = _constraint(t, t.check_lit, "NOT c.convalidated")
    column_not_null = _attr(t, t.column_lit, "a.attnotnull")
    must_not_null = f"{column_not_null} AND {_attr(t, t.shadow_lit, 'NOT a.attnotnull')}"
    # The equality check begins with the shadow's NOT NULL, as PostgreSQL prints it.
    same_not_null = _constraint(
        t,
        t.same_lit,
        "strpos(pg_get_constraintdef(c.oid), 'CHECK (((' || "
        f"quote_ident({t.shadow_lit}) || ' IS NOT NULL) AND ') = 1",
    )
    trigger_exists = (
        f"EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass({t.table_lit}) "
        f"AND tgname = {t.trigger_lit})"
    )
    steps = storage_checks(t)
    steps += [
        Step(
            "earlier state",
            "ddl",
            (_adopt(t),),
            # The table of an earlier release (its row for this column, if any, is
            # taken over; the table goes when that leaves it empty).
            guard=f"to_regclass({t.legacy_lit}) IS NOT NULL",
        ),
        Step(
            "undo",
            "ddl",
            (
                _do(
                    f" BEGIN RAISE NOTICE '%', {literal(f'{t.op}: undoing the interrupted conversion of ')}"  # noqa: E501
                    f" || {t.table_lit} || '.' || {t.column_lit}; END "
                ),
                f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE",
                f"DROP TRIGGER IF EXISTS {t.trigger} ON {table}",
                f"DROP FUNCTION IF EXISTS {t.function}()",
                f"ALTER TABLE {table} DROP COLUMN {shadow}",
                f"DELETE FROM {t.state} WHERE {t.copy_row}",
            ),
            guard=(
                f"{t.col_kind} = {to} AND {t.shadow_kind} = {frm} "
                # A row with a step: a run got somewhere (a new run's row has none yet).
                f"AND EXISTS (SELECT 1 FROM {t.state} WHERE {t.row} AND step <> '')"
            ),
        ),
        Step(
            "add shadow",
            "ddl",
            (
                # A fresh start forgets a copy position an abandoned conversion left.
                f"DELETE FROM {t.state} WHERE {t.copy_row}",
                f"ALTER TABLE {table} ADD COLUMN {shadow} {t.new_type} NULL",
            ),
            guard=f"{t.col_kind} = {frm} AND NOT {_attr(t, t.shadow_lit)}",
        ),
        Step(
            "trigger function",
            "ddl",
            (
                f"CREATE OR REPLACE FUNCTION {t.function}() RETURNS trigger LANGUAGE plpgsql AS "
                + dollar_quoted(
                    "fn",
                    # An UPDATE that leaves the column as it was keeps the
                    # shadow it had: the copy's own UPDATE sets it (one
                    # conversion a row), a writer's leaves it (converted
                    # already, or still to copy).
                    f" BEGIN IF TG_OP = 'INSERT' OR NEW.{t.column} IS DISTINCT FROM "
                    f"OLD.{t.column} THEN NEW.{shadow} := {t.converted_new}; END IF; "
                    "RETURN NEW; END ",
                ),
            ),
            # Replaced until the trigger uses it: a leftover of another run is not trusted.
            guard=f"{going} AND NOT {trigger_exists}",
        ),
        Step(
            "trigger",
            "ddl",
            (
                # OF the column: an UPDATE that does not set it (the copy's)
                # does not call the function at all.
                f"CREATE TRIGGER {t.trigger} BEFORE INSERT OR UPDATE OF {t.column} ON {table} "
                f"FOR EACH ROW EXECUTE FUNCTION {t.function}()",
            ),
            guard=f"{going} AND NOT {trigger_exists}",
        ),
        Step(
            "copy",
            "fill",
            guard=(
                f"{going} AND NOT {same_exists} AND COALESCE((SELECT step FROM {t.state} "
                f"WHERE {t.row}), '') <> 'copy'"
            ),
            fill=Fill(
                copy if copy is not None else no_online,
                copy_script(t),
                declare=COPY_DECLARE,
                table=t.table_name,
                column=t.column_name,
            ),
        ),
        Step(
            "same check",
            "ddl",
            (
                f"ALTER TABLE {table} ADD CONSTRAINT {t.same} "
                f"CHECK ({shadow} IS NOT DISTINCT FROM {t.converted}) NOT VALID",
            ),
            guard=f"{going} AND NOT {same_exists} AND NOT {column_not_null}",
        ),
        Step(
            "same check, not null",
            "ddl",
            (
                # Validated, it proves the shadow NOT NULL too: SET NOT NULL
                # then reads no row (PostgreSQL sees the CHECK implies it).
                f"ALTER TABLE {table} ADD CONSTRAINT {t.same} CHECK ({shadow} IS NOT NULL "
                f"AND {shadow} IS NOT DISTINCT FROM {t.converted}) NOT VALID",
            ),
            guard=f"{going} AND NOT {same_exists} AND {column_not_null}",
        ),
        Step(
            "try validate same",
            "ddl",
            (
                _do(
                    f" BEGIN ALTER TABLE {table} VALIDATE CONSTRAINT {t.same}; "
                    "EXCEPTION WHEN check_violation THEN RAISE NOTICE '%', "
                    f"{literal(f'{t.op}: some rows differ from their conversion; converting them again')}; "  # noqa: E501
                    "END "
                ),
            ),
            # The one scan that converts every row again, in the usual case:
            # it proves the copy. A row a session that skips triggers wrote
            # makes it fail (nothing is validated): the two steps below
            # convert such rows again, then validate.
            guard=f"{going} AND {same_open}",
        ),
        Step(
            "convert again",
            "ddl",
            (
                _do(
                    " DECLARE fixed bigint; BEGIN "
                    f"UPDATE {table} SET {shadow} = {t.converted} "
                    f"WHERE {shadow} IS DISTINCT FROM {t.converted}; "
                    "GET DIAGNOSTICS fixed = ROW_COUNT; IF fixed > 0 THEN RAISE WARNING '%', "
                    f"fixed || {literal(' rows were written without the trigger; converted again')}"
                    "; END IF; END "
                ),
            ),
            # Rows a session that skips triggers wrote (the check failed on
            # them): one scan, before the validation again, that writes only those.
            guard=f"{going} AND {same_open}",
        ),
        Step(
            "validate same",
            "ddl",
            (f"ALTER TABLE {table} VALIDATE CONSTRAINT {t.same}",),
            guard=f"{going} AND {same_open}",
            refill=True,
        ),
        Step(
            "not null check",
            "ddl",
            (
                f"ALTER TABLE {table} ADD CONSTRAINT {t.check} CHECK ({shadow} IS NOT NULL) "
                "NOT VALID",
            ),
            # Only for an equality check without the NOT NULL (an earlier
            # release's): SET NOT NULL would read the table under its lock.
            guard=f"{going} AND {must_not_null} AND NOT {check_exists} AND NOT {same_not_null}",
        ),
        Step(
            "validate not null",
            "ddl",
            (f"ALTER TABLE {table} VALIDATE CONSTRAINT {t.check}",),
            guard=f"{going} AND {must_not_null} AND {check_open}",
            refill=True,
        ),
        Step(
            "set not null",
            "ddl",
            (f"ALTER TABLE {table} ALTER COLUMN {shadow} SET NOT NULL",),
            guard=f"{going} AND {must_not_null}",
        ),
        Step(
            "drop not null check",
            "ddl",
            (f"ALTER TABLE {table} DROP CONSTRAINT {t.check}",),
            guard=f"{going} AND {check_exists}",
        ),
        Step(
            "drop invalid indexes",
            "concurrent",
            (_drop_invalid(t),),
            guard=going,
            generated=True,
        ),
        Step("indexes", "concurrent", (_build_indexes(t),), guard=going, generated=True),
        Step(
            "swap",
            "ddl",
            (
                f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE",
                _swap(t),
                f"DELETE FROM {t.state} WHERE {t.copy_row}",
            ),
            guard=going,
        ),
    ]
    return Plan(
        op=t.op,
        target=t.target,
        steps=tuple(steps),
        lock_timeout=t.lock_timeout,
        batch_size=t.batch_size,
        pause=t.pause,
        schema=t.schema,
    )


def _drop_invalid(t: Target) -> str:
    """A query of the statements dropping INVALID indexes on the shadow (a killed build's)."""
    return (
        "SELECT format('DROP INDEX CONCURRENTLY IF EXISTS %I.%I', s.nspname, i.relname) "
        "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        "JOIN pg_namespace s ON s.oid = i.relnamespace "
        "JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = ANY (x.indkey) "
        f"WHERE x.indrelid = to_regclass({t.table_lit}) AND NOT x.indisvalid "
        f"AND a.attname = {t.shadow_lit} ORDER BY i.relname"
    )


def _shadow_index(name: str) -> str:
    return shadow_name_pg(name, "__ulid")


def _build_indexes(t: Target) -> str:
    """A query of the statements building the shadow's missing indexes."""
    columns = (
        f"(SELECT string_agg(quote_ident(CASE WHEN a.attname = {t.column_lit} "
        f"THEN {t.shadow_lit} ELSE a.attname END), ', ' ORDER BY k.o) "
        "FROM unnest(x.indkey) WITH ORDINALITY k(n, o) "
        "JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.n)"
    )
    return (
        "SELECT format('CREATE %sINDEX CONCURRENTLY %I ON %s (%s)', "
        f"CASE WHEN x.indisunique THEN 'UNIQUE ' ELSE '' END, {_shadow_index('i.relname')}, "
        f"{t.table_lit}, {columns}) "
        "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        f"WHERE x.indrelid = to_regclass({t.table_lit}) "
        "AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = x.indrelid "
        f"AND a.attnum = ANY (x.indkey) AND a.attname = {t.column_lit}) "
        "AND NOT EXISTS (SELECT 1 FROM pg_class s WHERE s.relnamespace = i.relnamespace "
        f"AND s.relname = {_shadow_index('i.relname')}) ORDER BY i.relname"
    )


def _swap(t: Target) -> str:
    """The swap, under the table's lock: it proves every earlier step done, then swaps."""
    unfinished = literal(f"{t.op}: the swap found an earlier step unfinished (")
    rerun = literal("); nothing was changed: run the op again")
    return _do(f"""
DECLARE
  v_rel regclass := to_regclass({t.table_lit});
  v_old_default text;
  v_new_default text;
  v_note text;
  v_not_null name;
  v_shadow_not_null name;
  r record;
  v_names text[] := '{{}}';
  v_shadows text[] := '{{}}';
  v_kinds text[] := '{{}}';
BEGIN
  IF NOT COALESCE((SELECT convalidated FROM pg_constraint WHERE conrelid = v_rel
      AND conname = {t.same_lit}), FALSE) THEN
    RAISE EXCEPTION '%', {unfinished} || 'validate same' || {rerun};
  END IF;
  IF EXISTS (SELECT 1 FROM pg_attribute o, pg_attribute s WHERE o.attrelid = v_rel
      AND s.attrelid = v_rel AND o.attname = {t.column_lit} AND s.attname = {t.shadow_lit}
      AND o.attnotnull AND NOT s.attnotnull) THEN
    RAISE EXCEPTION '%', {unfinished} || 'set not null' || {rerun};
  END IF;
  FOR r IN SELECT i.relname AS name, c.contype, {_shadow_index("i.relname")} AS shadow
      FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
      LEFT JOIN pg_constraint c ON c.conindid = x.indexrelid AND c.conrelid = x.indrelid
      WHERE x.indrelid = v_rel AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = v_rel
        AND a.attnum = ANY (x.indkey) AND a.attname = {t.column_lit}) ORDER BY 1 LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_index y JOIN pg_class j ON j.oid = y.indexrelid
        WHERE y.indrelid = v_rel AND j.relname = r.shadow AND y.indisvalid) THEN
      RAISE EXCEPTION '%', {unfinished} || 'indexes: no valid index ' || r.shadow || {rerun};
    END IF;
    v_names := v_names || r.name::text;
    v_shadows := v_shadows || r.shadow;
    v_kinds := v_kinds || COALESCE(r.contype::text, '');
  END LOOP;
  SELECT pg_get_expr(d.adbin, d.adrelid), col_description(v_rel, a.attnum)
    INTO v_old_default, v_note FROM pg_attribute a
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attrelid = v_rel AND a.attname = {t.column_lit};
  IF v_old_default IS NOT NULL THEN
    EXECUTE format({dollar_quoted("t", "SELECT CAST(" + t.convert_template + " AS text)")},
      v_old_default) INTO v_new_default;
  END IF;
  -- PostgreSQL 18 keeps NOT NULL as a named constraint: the column's name
  -- goes to the shadow's once the old one is dropped.
  v_not_null := ({_not_null_name(t)});
  DROP TRIGGER {t.trigger} ON {t.table};
  DROP FUNCTION {t.function}();
  -- Drops the old indexes and constraints with it; no data is rewritten.
  ALTER TABLE {t.table} DROP COLUMN {t.column};
  ALTER TABLE {t.table} RENAME COLUMN {t.shadow} TO {t.column};
  v_shadow_not_null := ({_not_null_name(t)});
  IF v_shadow_not_null <> v_not_null THEN
    EXECUTE format('ALTER TABLE %s RENAME CONSTRAINT %I TO %I', {t.table_lit},
      v_shadow_not_null, v_not_null);
  END IF;
  FOR i IN 1..COALESCE(array_length(v_names, 1), 0) LOOP
    IF v_kinds[i] IN ('p', 'u') THEN
      EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I %s USING INDEX %I', {t.table_lit},
        v_names[i], CASE v_kinds[i] WHEN 'p' THEN 'PRIMARY KEY' ELSE 'UNIQUE' END, v_shadows[i]);
    ELSE
      EXECUTE format('ALTER INDEX %s%I RENAME TO %I', {t.schema_prefix_lit}, v_shadows[i],
        v_names[i]);
    END IF;
  END LOOP;
  IF v_new_default IS NOT NULL THEN
    -- Untyped: the literal takes the column's own type.
    EXECUTE format('ALTER TABLE %s ALTER COLUMN %s SET DEFAULT %L', {t.table_lit},
      {literal(t.column)}, v_new_default);
  END IF;
  IF v_note IS NOT NULL THEN
    EXECUTE format('COMMENT ON COLUMN %s.%s IS %L', {t.table_lit}, {literal(t.column)}, v_note);
  END IF;
  RAISE NOTICE '%', {literal(f"{t.op}: converted ")} || {t.table_lit} || '.' || {t.column_lit};
END
""")


def _not_null_name(t: Target) -> str:
    """The name of the column's NOT NULL constraint (PostgreSQL 18+; NULL before)."""
    return (
        "SELECT c.conname FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid "
        "AND a.attnum = c.conkey[1] WHERE c.conrelid = v_rel AND c.contype = 'n' "
        f"AND a.attname = {t.column_lit}"
    )


def _adopt(t: Target) -> str:
    """Take over a conversion an earlier release began: its copy position, then its row.

    That release kept ``(table_name, column_name, last_key)`` in a table of
    its own, created and dropped under an advisory lock (taken here too).
    """
    legacy = f"FROM {t.legacy} WHERE {t.legacy_row}"
    return _do(f"""
DECLARE
  v_last text;
  v_empty boolean;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('sqlalchemy_ulid.ulid_storage_conversions'));
  EXECUTE {literal(f"SELECT last_key {legacy}")} INTO v_last;
  IF v_last IS NOT NULL THEN
    INSERT INTO {t.state} (op, target, plan, step) VALUES ({literal(t.copy_op)},
      {literal(t.target)}, 'copy', v_last) ON CONFLICT (op, target) DO NOTHING;
  END IF;
  EXECUTE {literal(f"DELETE {legacy}")};
  EXECUTE {literal(f"SELECT NOT EXISTS (SELECT 1 FROM {t.legacy})")} INTO v_empty;
  IF v_empty THEN
    EXECUTE {literal(f"DROP TABLE {t.legacy}")};
  END IF;
END
""")
