"""The offline PostgreSQL script's first block: the plan, found in the catalog, and the checks.

The block reads ``pg_catalog`` the way the online plan reads reflection
(``_plan.build_plan``): the single-column key, then, level by level, every
column that references a changing column (self-references too). It makes
the online op's refusals (``_checks.refuse_unsafe``; the triggers, views,
foreign keys in other schemas and index options with the very queries of
``_dialects.key_conversion_sql``) before any change, and stores the plan
in the session's temporary table ``ulid_pk_plan``, one row per changing
column in plan order: the blocks after it read it. A finished conversion
leaves that table empty, and every later block then does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.dialects import postgresql

from ..._dialects import key_conversion_sql
from .._names import shadow_name_pg
from .._offline import _MILLIS_BY_TYPE
from .._plan.render_pg import dollar_quoted
from .._plan.state import literal
from ._plan import STATE_TABLE

__all__ = ["Names", "declarations", "marker", "plan_block"]

#: The largest Unix millisecond a ULID holds (48 bits).
MAX_MS = 2**48 - 1


@dataclass(frozen=True)
class Names:
    """What the script needs from the op, fixed when it is written."""

    op_name: str
    direction: str
    table: str
    schema: str | None
    legacy_id: str
    from_time: str | None
    legacy_unique: str
    #: the ULID column type (the ulid direction); "" restoring
    new_type: str
    #: "uuid" or "binary"
    kind: str
    batch_size: int
    lock_tries: int

    @property
    def other_op(self) -> str:
        if self.direction == "ulid":
            return "restore_legacy_primary_key"
        return "convert_primary_key_to_ulid"

    @property
    def suffix(self) -> str:
        return "__ulid" if self.direction == "ulid" else "__legacy"


def declarations(names: Names) -> str:
    """The PL/pgSQL constants every block starts with (names as string literals)."""
    schema = literal(names.schema) if names.schema is not None else "NULL::text"
    return f"""\
  sch text := coalesce({schema}, current_schema());
  tbl text := {literal(names.table)};
  legacy text := {literal(names.legacy_id)};
"""


def marker(op_name: str) -> str:
    """SQL: the start of the comment a shadow column of ``op_name`` carries."""
    return f"{literal(f'sqlalchemy_ulid: {op_name} of ')} || tbl || ' (offline): new values of '"


def _query(sql: str, columns: str, select: str) -> str:
    """One of the online op's catalog queries, for ``EXECUTE ... USING sch, tables``."""
    bound = (
        sql.replace("IN :tables", "= ANY ($2)")
        .replace(":schema", "$1")
        .replace(":table", "$2")
        .replace(":column", "$3")
    )
    return literal(f"SELECT {select} FROM ({bound}) AS o({columns})")


#: What else uses a referencing column, which the swap's DROP COLUMN would
#: drop with it or fail on (the storage op's query: a CHECK or exclusion
#: constraint, a generated column, statistics, a policy, column GRANTs), for
#: ``EXECUTE ... USING`` the table (quoted) and the column; one text, or NULL.
_PG = key_conversion_sql(postgresql.dialect())  # type: ignore[no-untyped-call]
assert _PG is not None
assert _PG.dependants is not None
_USED = literal(
    "SELECT string_agg(DISTINCT u.n, ', ') FROM ("
    + _PG.dependants.replace(":table", "$1")
    .replace(":column", "$2")
    .replace(":same", "''")
    .replace(":check", "''")
    + ") AS u(n)"
)


def plan_block(names: Names) -> str:
    """The ``DO`` block that finds the plan and refuses what online refuses."""
    sql = key_conversion_sql(postgresql.dialect())  # type: ignore[no-untyped-call]
    assert sql is not None
    assert sql.index_options is not None
    op = names.op_name
    ulid = names.direction == "ulid"
    when = literal(names.from_time) if names.from_time is not None else "NULL::text"
    named = "string_agg(format('%s (on %s)', name, tbl), ', ' ORDER BY name, tbl)"
    triggers = _query(sql.triggers, "name, tbl", named)
    views = _query(sql.views, "name, tbl", named)
    elsewhere = _query(
        sql.foreign_keys_elsewhere,
        "name, nsp, tbl, referred",
        "string_agg(format('%s on %s.%s', name, nsp, tbl), ', ' ORDER BY name, nsp, tbl)",
    )
    index_options = _query(
        sql.index_options,
        "name, method, predicate, exprs, incl, desc_part",
        "name, concat_ws(', ', CASE WHEN method <> 'btree' THEN 'USING ' || method END, "
        "CASE WHEN predicate THEN 'a WHERE clause' END, "
        "CASE WHEN exprs THEN 'expressions' END, "
        "CASE WHEN incl THEN 'INCLUDE columns' END, "
        "CASE WHEN desc_part THEN 'DESC or NULLS FIRST' END) AS found",
    )
    assert sql.index_own_options is not None
    index_own_options = _query(sql.index_own_options, "name, found", "name, found")
    dependants = _USED
    key_checks = (
        f"""
  IF key_type NOT IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype, 'uuid'::regtype) THEN
    RAISE EXCEPTION '{op}: %.% is %: only integer and UUID primary keys are converted',
      tbl, key_col, key_type_sql;
  END IF;
  IF has_legacy THEN
    RAISE EXCEPTION '{op}: % already has a column % (legacy_id=)', tbl, legacy;
  END IF;
  shadow := {shadow_name_pg("key_col", names.suffix)};
  IF shadow = legacy THEN
    RAISE EXCEPTION '{op}: legacy_id=% is the name this op gives the new values of %.% before '
      'the swap: choose another name', legacy, tbl, key_col;
  END IF;
  new_type := {literal(names.new_type)};
  IF when_col IS NOT NULL THEN
    SELECT format_type(a.atttypid, a.atttypmod), {_MILLIS_BY_TYPE} INTO time_type, millis
      FROM pg_attribute a
      WHERE a.attrelid = key_rel AND a.attname = when_col AND a.attnum > 0 AND NOT a.attisdropped;
    IF time_type IS NULL THEN
      RAISE EXCEPTION '{op}: % has no column % (from_time=)', tbl, when_col;
    END IF;
    IF millis IS NULL THEN
      RAISE EXCEPTION '{op}: %.% is %, not a timestamp or an integer of Unix milliseconds '
        '(a date or a number of seconds would date the ids wrongly)', tbl, when_col, time_type;
    END IF;
    EXECUTE format('SELECT count(*) FROM %I.%I WHERE %I IS NULL', sch, tbl, when_col) INTO n;
    IF n > 0 THEN
      RAISE EXCEPTION '{op}: %.% is NULL in % rows: fill them before deriving ULIDs from it',
        tbl, when_col, n;
    END IF;
    -- An infinite time has no milliseconds: the CASE keeps it from the cast.
    EXECUTE format('SELECT %1$I::text FROM %2$I.%3$I WHERE CASE WHEN %1$I::text IN '
      '(''infinity'', ''-infinity'') THEN true ELSE NOT (%4$s BETWEEN 0 AND {MAX_MS}) END '
      'LIMIT 1', when_col, sch, tbl, millis) INTO bad;
    IF bad IS NOT NULL THEN
      RAISE EXCEPTION '{op}: %.% = % is out of the ULID range (1970 to 10889)',
        tbl, when_col, bad;
    END IF;
  END IF;"""
        if ulid
        else """
  shadow := NULL;
  SELECT format_type(atttypid, atttypmod) INTO new_type FROM pg_attribute
    WHERE attrelid = key_rel AND attname = legacy AND attnum > 0 AND NOT attisdropped;"""
    )
    done = (
        f"""has_legacy AND EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = key_rel
      AND contype = 'u' AND conname = {literal(names.legacy_unique)})"""
        if ulid
        else "NOT has_legacy"
    )
    body = f"""
DECLARE
{declarations(names)}  when_col text := {when};
  marker text := {marker(op)};
  other text := {marker(names.other_op)};
  ns oid;
  key_rel oid;
  key_pk name;
  keys int2[];
  key_col name;
  key_type regtype;
  key_type_sql text;
  has_legacy boolean;
  shadow text;
  new_type text;
  millis text;
  time_type text;
  bad text;
  found_names text;
  n bigint;
  i int := 0;
  last int := 0;
  r record;
  fk record;
  col record;
  ref_pk name;
  ref_keys int2[];
  tables name[];
BEGIN
  IF to_regclass('pg_temp.ulid_pk_plan') IS NOT NULL THEN
    DROP TABLE pg_temp.ulid_pk_plan;
  END IF;
  CREATE TEMP TABLE ulid_pk_plan (
    pos int PRIMARY KEY, relid oid NOT NULL, attnum int2 NOT NULL, tbl name NOT NULL,
    col name NOT NULL, parent int, shadow name, source name NOT NULL,
    nullable boolean NOT NULL, pk_name name, new_type text NOT NULL, millis text,
    key_type text);
  SELECT oid INTO ns FROM pg_namespace WHERE nspname = sch;
  key_rel := to_regclass(format('%I.%I', sch, tbl));
  IF key_rel IS NULL THEN
    RAISE EXCEPTION '{op}: there is no table %.%', sch, tbl;
  END IF;
  SELECT string_agg(format('%s.%s', c.relname, a.attname), ', ' ORDER BY c.relname, a.attname)
    INTO found_names
    FROM pg_description d JOIN pg_class c ON c.oid = d.objoid
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = d.objsubid
    WHERE d.classoid = 'pg_class'::regclass AND c.relnamespace = ns
    AND starts_with(d.description, other);
  IF found_names IS NOT NULL THEN
    RAISE EXCEPTION '{op}: an unfinished {names.other_op} of % (an offline script) left the '
      'columns %: run that script again to finish it first', tbl, found_names;
  END IF;
  IF to_regclass(format('%I.%I', sch, {literal(STATE_TABLE)})) IS NOT NULL THEN
    EXECUTE format('SELECT count(*) FROM %I.%I WHERE name = $1', sch, {literal(STATE_TABLE)})
      INTO n USING tbl;
    IF n > 0 THEN
      RAISE EXCEPTION '{op}: an unfinished conversion of % started online is recorded in '
        '%.{STATE_TABLE}: rerun that migration online (without --sql) to finish it',
        tbl, sch;
    END IF;
  END IF;
  has_legacy := EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = key_rel
    AND attname = legacy AND attnum > 0 AND NOT attisdropped);
  IF {done} THEN
    RAISE NOTICE '{op}: % is already done', tbl;
    RETURN;
  END IF;
  SELECT conname, conkey INTO key_pk, keys FROM pg_constraint
    WHERE conrelid = key_rel AND contype = 'p';
  IF keys IS NULL THEN
    RAISE EXCEPTION '{op}: % has no primary key', tbl;
  END IF;
  IF cardinality(keys) > 1 THEN
    SELECT string_agg(attname, ', ' ORDER BY array_position(keys, attnum)) INTO found_names
      FROM pg_attribute WHERE attrelid = key_rel AND attnum = ANY (keys);
    RAISE EXCEPTION '{op}: the table to convert, %, has a composite primary key (%): '
      'only single-column keys are converted', tbl, found_names;
  END IF;
  SELECT attname, atttypid, format_type(atttypid, atttypmod)
    INTO key_col, key_type, key_type_sql FROM pg_attribute
    WHERE attrelid = key_rel AND attnum = keys[1];
{key_checks}
  INSERT INTO pg_temp.ulid_pk_plan VALUES (0, key_rel, keys[1], tbl, key_col, NULL, shadow,
    coalesce(shadow, legacy), false, key_pk, new_type, millis, key_type_sql);
  -- Every column that references a changing column, level by level.
  LOOP
    SELECT * INTO r FROM pg_temp.ulid_pk_plan WHERE pos = i;
    EXIT WHEN NOT FOUND;
    FOR fk IN SELECT con.conname, con.conrelid, con.conkey, cl.relname, con.convalidated
        FROM pg_constraint con
        JOIN pg_class cl ON cl.oid = con.conrelid
        WHERE con.contype = 'f' AND con.confrelid = r.relid AND r.attnum = ANY (con.confkey)
        AND cl.relnamespace = ns AND con.conparentid = 0 ORDER BY cl.relname, con.conname LOOP
      IF cardinality(fk.conkey) <> 1 THEN
        SELECT string_agg(attname, ', ' ORDER BY array_position(fk.conkey, attnum))
          INTO found_names FROM pg_attribute
          WHERE attrelid = fk.conrelid AND attnum = ANY (fk.conkey);
        RAISE EXCEPTION '{op}: the composite foreign key % on %(%) references %: only '
          'single-column foreign keys are converted', fk.conname, fk.relname, found_names, r.tbl;
      END IF;
      CONTINUE WHEN EXISTS (SELECT 1 FROM pg_temp.ulid_pk_plan
        WHERE relid = fk.conrelid AND attnum = fk.conkey[1]);
      SELECT attname, NOT attnotnull AS nullable INTO col FROM pg_attribute
        WHERE attrelid = fk.conrelid AND attnum = fk.conkey[1];
      IF NOT fk.convalidated THEN
        -- A NOT VALID foreign key may have rows that reference nothing: no new value.
        EXECUTE format('SELECT count(*) FROM %I.%I AS c WHERE c.%I IS NOT NULL AND NOT EXISTS '
          '(SELECT 1 FROM %I.%I AS p WHERE p.%I = c.%I)', sch, fk.relname, col.attname, sch,
          r.tbl, r.col, col.attname) INTO n;
        IF n > 0 THEN
          RAISE EXCEPTION '{op}: the foreign key % on % is NOT VALID, and % rows of %.% reference '
            'no row of %: they would have no new value. Correct or delete them (then VALIDATE '
            'CONSTRAINT %) before the conversion', fk.conname, fk.relname, n, fk.relname,
            col.attname, r.tbl, fk.conname;
        END IF;
      END IF;
      ref_pk := NULL;
      ref_keys := NULL;
      SELECT conname, conkey INTO ref_pk, ref_keys FROM pg_constraint
        WHERE conrelid = fk.conrelid AND contype = 'p';
      IF fk.conkey[1] = ANY (ref_keys) AND cardinality(ref_keys) > 1 THEN
        SELECT string_agg(attname, ', ' ORDER BY array_position(ref_keys, attnum))
          INTO found_names FROM pg_attribute
          WHERE attrelid = fk.conrelid AND attnum = ANY (ref_keys);
        RAISE EXCEPTION '{op}: %.% references % and is part of the composite primary key (%) '
          'of %: only single-column keys are converted',
          fk.relname, col.attname, r.tbl, found_names, fk.relname;
      END IF;
      last := last + 1;
      INSERT INTO pg_temp.ulid_pk_plan VALUES (last, fk.conrelid, fk.conkey[1], fk.relname,
        col.attname, i, {shadow_name_pg("col.attname", names.suffix)},
        {shadow_name_pg("col.attname", names.suffix)},
        col.nullable, CASE WHEN ref_keys = ARRAY[fk.conkey[1]] THEN ref_pk END, new_type, NULL,
        NULL);
    END LOOP;
    i := i + 1;
  END LOOP;
  tables := ARRAY(SELECT DISTINCT p.tbl FROM pg_temp.ulid_pk_plan p);
  EXECUTE {elsewhere} INTO found_names USING sch, tables;
  IF found_names IS NOT NULL THEN
    RAISE EXCEPTION '{op}: foreign keys in other schemas reference the tables, and this op '
      'only alters tables in the key''s own schema: %. Drop them first and recreate them '
      'after the conversion', found_names;
  END IF;
  EXECUTE {triggers} INTO found_names USING sch, tables;
  IF found_names IS NOT NULL THEN
    RAISE EXCEPTION '{op}: triggers depend on the tables whose key columns would change: %. '
      'Drop them before the conversion and recreate them after it', found_names;
  END IF;
  EXECUTE {views} INTO found_names USING sch, tables;
  IF found_names IS NOT NULL THEN
    RAISE EXCEPTION '{op}: views depend on the tables whose key columns would change: %. '
      'Drop them before the conversion and recreate them after it', found_names;
  END IF;
  FOR r IN SELECT * FROM pg_temp.ulid_pk_plan ORDER BY pos LOOP
    IF r.pos > 0 THEN
      FOR col IN EXECUTE {index_own_options} USING sch, r.tbl, r.col LOOP
        RAISE EXCEPTION '{op}: the index % on % uses %.% with %, which this op does not '
          'recreate: drop the index before the conversion and create it again after it',
          col.name, r.tbl, r.tbl, r.col, col.found;
      END LOOP;
      FOR col IN EXECUTE {index_options} USING sch, r.tbl, r.col LOOP
        CONTINUE WHEN col.found = '';
        RAISE EXCEPTION '{op}: the index % on % uses %.% with %, which this op does not '
          'recreate: drop the index before the conversion and create it again after it',
          col.name, r.tbl, r.tbl, r.col, col.found;
      END LOOP;
      EXECUTE {dependants} INTO found_names USING format('%I.%I', sch, r.tbl), r.col;
      SELECT concat_ws(', ', found_names, CASE WHEN a.atthasdef THEN 'its DEFAULT' END,
          CASE WHEN a.attidentity <> '' THEN 'its IDENTITY' END, (SELECT string_agg(
            format('the foreign key %s on %s references %s, which this op does not convert',
            con.conname, r.tbl, con.confrelid::regclass), ', ' ORDER BY con.conname)
          FROM pg_constraint con WHERE con.conrelid = r.relid AND r.attnum = ANY (con.conkey)
          AND con.contype = 'f' AND con.conparentid = 0 AND NOT EXISTS (SELECT 1
            FROM pg_temp.ulid_pk_plan q WHERE q.relid = con.confrelid
            AND q.attnum = ANY (con.confkey))))
        INTO found_names FROM pg_attribute a WHERE a.attrelid = r.relid AND a.attnum = r.attnum;
      IF found_names <> '' THEN
        RAISE EXCEPTION '{op}: %.% is used by %: the swap drops the old column, which would '
          'drop them or fail; nothing was changed. Drop them before the conversion and '
          'create them again after it', r.tbl, r.col, found_names;
      END IF;
    END IF;
    CONTINUE WHEN r.shadow IS NULL;
    IF EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = r.relid AND a.attname = r.shadow
        AND a.attnum > 0 AND NOT a.attisdropped AND col_description(r.relid, a.attnum)
        IS DISTINCT FROM marker || r.tbl || '.' || r.col) THEN
      RAISE EXCEPTION '{op}: % already has a column %, the name this op gives the new '
        'values of %.% before the swap: rename that column first', r.tbl, r.shadow, r.tbl, r.col;
    END IF;
  END LOOP;
  SELECT count(*) INTO n FROM pg_temp.ulid_pk_plan;
  RAISE NOTICE '{op}: % changes % columns', tbl, n;
END
"""
    return (
        "-- The plan, from the catalog: the key and every column that references it, and\n"
        "-- what the op refuses, checked before any change\n"
        f"DO {dollar_quoted('plan', body)};"
    )
