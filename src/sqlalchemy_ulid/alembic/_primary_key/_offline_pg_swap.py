"""The offline PostgreSQL script's phases after the plan: prepare, fill, swap.

Each block reads the plan the first block left in ``pg_temp.ulid_pk_plan``
(none left: the conversion is done, and the block does nothing). Prepare
adds each missing shadow column, marked by its comment, and commits; the
key's fill gives ULIDs in batches, each committed; each referencing shadow
is filled by a join, committed; the swap runs in the migration's
transaction: it locks the tables, catches up rows written since the fill,
then swaps the columns and keys and recreates every foreign key, unique
constraint and index from the text ``pg_get_constraintdef`` /
``pg_get_indexdef`` gave before (every name stays, so that text applies
after the swap).

The new ids: from ``from_time`` the time part is the row's time to the
millisecond (``_offline``'s expressions: a timestamp without time zone read
as UTC), and rows sharing a millisecond are numbered in (time, key) order
by one ordered pass into a temporary table, as the online op numbers them;
with no ``from_time``, each batch gets one millisecond, later than the one
before and than every id already given, and numbers its rows in key order,
so the new ids sort like the old keys. Both fills take their batches in
that order by an index (the temporary table's, or the key's), so each
batch costs the same however far the fill has gone.
"""

from __future__ import annotations

import textwrap

from .._plan.render_pg import dollar_quoted
from .._plan.state import literal
from ..postgresql.catalog import INDEX_ROWS, index_ddl
from ._offline_pg_plan import MAX_MS, Names, declarations, marker

__all__ = ["fill_key_block", "fill_referencing_block", "prepare_block", "swap_block"]


def _retrying(names: Names, statements: str, what: str) -> str:
    """PL/pgSQL running ``statements`` again after a lock timeout, a few times."""
    tries = names.lock_tries
    return f"""
    FOR attempt IN 1..{tries} LOOP
      BEGIN
{statements}
        EXIT;
      EXCEPTION WHEN lock_not_available THEN
        IF attempt = {tries} THEN
          RAISE;
        END IF;
        RAISE NOTICE '{names.op_name}: lock timeout on %, try % of {tries}', {what}, attempt;
        PERFORM pg_sleep(0.1 * 2 ^ attempt);
      END;
    END LOOP;"""


def prepare_block(names: Names) -> str:
    """Phase 1: the nullable shadow columns, each added and committed on its own."""
    add = """\
        EXECUTE format('ALTER TABLE %I.%I ADD COLUMN %I %s NULL', sch, r.tbl, r.shadow, r.new_type);
        EXECUTE format('COMMENT ON COLUMN %I.%I.%I IS %L', sch, r.tbl, r.shadow,
          marker || r.tbl || '.' || r.col);"""
    body = f"""
DECLARE
{declarations(names)}  marker text := {marker(names.op_name)};
  r record;
BEGIN
  FOR r IN SELECT * FROM pg_temp.ulid_pk_plan WHERE shadow IS NOT NULL ORDER BY pos LOOP
    CONTINUE WHEN EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = r.relid
      AND attname = r.shadow AND attnum > 0 AND NOT attisdropped);
{_retrying(names, add, "r.tbl")}
    RAISE NOTICE '{names.op_name}: added %.%', r.tbl, r.shadow;
    COMMIT;
  END LOOP;
END
"""
    return (
        "-- Phase 1: a nullable shadow column beside each changing column (a metadata\n"
        "-- change), each committed\n"
        f"DO {dollar_quoted('prepare', body)};"
    )


#: A new id as bytea: the 48-bit millisecond, a 32-bit tie number, 48 random
#: bits. Rows sharing a millisecond (an imported table may have millions
#: at one time) are numbered across batches, so the number gets 32 bits,
#: not the 16 of add_ulid_column's batches; past 2**31 rows in one
#: millisecond the cast to int fails and nothing is stored.
_ID_BYTEA = (
    "substring(int8send(b.ms) FROM 3) || int4send(b.rank::int)"
    " || substring(uuid_send(gen_random_uuid()) FROM 1 FOR 6)"
)
_ID_UUID = f"encode({_ID_BYTEA}, 'hex')::uuid"


def _key_fill(names: Names, *, commit: bool) -> str:
    """PL/pgSQL giving ULIDs to the key rows whose shadow is NULL, a batch at a time.

    From ``from_time``, one ordered pass (as online) numbers the rows that
    share a millisecond in (time, key) order into a temporary table, and the
    batches follow that order: the rows already given ids are a prefix of
    it, so a millisecond shared with the last id given (by a killed run)
    goes on counting from that id's number. With no ``from_time`` the
    batches follow the key, from the lowest key without an id.
    """
    ulid = _ID_UUID if names.kind == "uuid" else _ID_BYTEA
    head = "uuid_send(%3$I)" if names.kind == "uuid" else "%3$I"
    batch = names.batch_size
    # format() templates: %1$I schema, %2$I table, %3$I shadow, %4$I key,
    # %5$I from_time, %6$s its Unix milliseconds (or the key's type), %7$s,
    # %8$s the millisecond and tie number to go on from.
    out_of_range = literal(
        f"{names.op_name}: a from_time value is out of the ULID range (1970 to 10889) or NULL: "
    ).replace("%", "%%")
    stage = (
        "CREATE TEMP TABLE ulid_pk_ids AS SELECT row_number() OVER (ORDER BY r.v, r.k) AS seq, "
        "r.k, r.ms, row_number() OVER (PARTITION BY r.ms ORDER BY r.v, r.k) "
        "+ CASE WHEN r.ms = %7$s THEN %8$s ELSE 0 END AS rank FROM ("
        f"SELECT %4$I AS k, %5$I AS v, CASE WHEN %6$s BETWEEN 0 AND {MAX_MS} THEN %6$s ELSE "
        f"({out_of_range} || coalesce(%5$I::text, 'NULL'))::bigint END AS ms "
        "FROM %1$I.%2$I WHERE %3$I IS NULL) AS r"
    )
    by_time = (
        f"UPDATE %1$I.%2$I AS t SET %3$I = {ulid} FROM pg_temp.ulid_pk_ids AS b "
        "WHERE b.seq > $1 AND b.seq <= $1 + $2 AND t.%4$I = b.k AND t.%3$I IS NULL"
    )
    by_key = (
        "WITH u AS (UPDATE %1$I.%2$I AS t SET %3$I = s.ulid FROM ("
        f"SELECT b.k, {ulid} AS ulid FROM ("
        "SELECT r.k, $1::bigint AS ms, row_number() OVER (ORDER BY r.k) AS rank FROM ("
        "SELECT %4$I AS k FROM %1$I.%2$I WHERE %3$I IS NULL AND %4$I %7$s $2::%6$s "
        f"ORDER BY %4$I LIMIT {batch}) AS r) AS b) AS s "
        "WHERE t.%4$I = s.k AND t.%3$I IS NULL RETURNING t.%4$I AS k) "
        "SELECT count(*), (SELECT k::text FROM u ORDER BY k DESC LIMIT 1) FROM u"
    )
    first_key = "SELECT %4$I::text FROM %1$I.%2$I WHERE %3$I IS NULL ORDER BY %4$I LIMIT 1"
    latest = (
        "SELECT ('x' || encode(substring(h FROM 1 FOR 6), 'hex'))::bit(48)::bigint, "
        "('x' || encode(substring(h FROM 7 FOR 4), 'hex'))::bit(32)::bigint "
        f"FROM (SELECT {head} AS h FROM %1$I.%2$I WHERE %3$I IS NOT NULL "
        "ORDER BY %3$I DESC LIMIT 1) AS x"
    )
    commit_sql = "\n      COMMIT;" if commit else ""
    # A batch waits for an application's row locks at most lock_timeout,
    # then is tried again, as DDL is: the rows it has updated stay locked
    # while it waits, so a long wait would hold up writers to those rows.
    time_batch = f"""\
        EXECUTE format({dollar_quoted("batch", by_time)}, sch, k.tbl, k.shadow, k.col)
          USING done_rows, {batch};
        GET DIAGNOSTICS filled = ROW_COUNT;"""
    key_batch = f"""\
        EXECUTE format({dollar_quoted("batch", by_key)}, sch, k.tbl, k.shadow, k.col, NULL,
          k.key_type, op) INTO filled, from_key USING ms, from_key;"""
    time_retried = textwrap.indent(_retrying(names, time_batch, "k.tbl"), "  ")
    key_retried = textwrap.indent(_retrying(names, key_batch, "k.tbl"), "  ")
    return f"""
  EXECUTE format({dollar_quoted("latest", latest)}, sch, k.tbl, k.shadow) INTO last_ms, last_tie;
  last_ms := coalesce(last_ms, -1);
  last_tie := coalesce(last_tie, 0);
  IF k.millis IS NOT NULL THEN
    IF to_regclass('pg_temp.ulid_pk_ids') IS NOT NULL THEN
      DROP TABLE pg_temp.ulid_pk_ids;
    END IF;
    EXECUTE format({dollar_quoted("stage", stage)}, sch, k.tbl, k.shadow, k.col, when_col,
      k.millis, last_ms, last_tie);
    ALTER TABLE pg_temp.ulid_pk_ids ADD PRIMARY KEY (seq);
    SELECT count(*) INTO staged FROM pg_temp.ulid_pk_ids;
    done_rows := 0;
    WHILE done_rows < staged LOOP{time_retried}
      done_rows := done_rows + {batch};
      total := total + filled;
      RAISE NOTICE '{names.op_name}: % rows of %.% given ULIDs', total, k.tbl, k.col;{commit_sql}
    END LOOP;
    DROP TABLE pg_temp.ulid_pk_ids;
  ELSE
    EXECUTE format({dollar_quoted("first", first_key)}, sch, k.tbl, k.shadow, k.col)
      INTO from_key;
    op := '>=';
    WHILE from_key IS NOT NULL LOOP
      ms := greatest(
        floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint, last_ms + 1);{key_retried}
      EXIT WHEN filled = 0;
      last_ms := ms;
      op := '>';
      total := total + filled;
      RAISE NOTICE '{names.op_name}: % rows of %.% given ULIDs', total, k.tbl, k.col;{commit_sql}
    END LOOP;
  END IF;"""


def _key_declarations(names: Names) -> str:
    when = literal(names.from_time) if names.from_time is not None else "NULL::text"
    return (
        f"  when_col text := {when};\n  k record;\n  filled bigint;\n  total bigint := 0;\n"
        "  ms bigint;\n  last_ms bigint;\n  last_tie bigint;\n  staged bigint;\n"
        "  done_rows bigint;\n  from_key text;\n  op text;\n"
    )


def fill_key_block(names: Names) -> str:
    """Phase 2: the key's new ULIDs, in batches of ``batch_size`` rows, each committed."""
    body = f"""
DECLARE
{declarations(names)}{_key_declarations(names)}BEGIN
  SELECT * INTO k FROM pg_temp.ulid_pk_plan WHERE pos = 0;
  IF NOT FOUND OR k.shadow IS NULL THEN
    RETURN;
  END IF;{_key_fill(names, commit=True)}
END
"""
    return (
        f"-- Phase 2: the key's new ULIDs, {names.batch_size} rows a transaction, in "
        f"{'time' if names.from_time else 'key'} order;\n"
        "-- interrupted, the rerun goes on with the rows that have none\n"
        f"DO {dollar_quoted('fill', body)};"
    )


_JOIN = (
    "'UPDATE %1$I.%2$I AS c SET %3$I = p.%6$I FROM %1$I.%4$I AS p WHERE c.%5$I = p.%7$I "
    "AND c.%3$I {stale}', sch, r.tbl, r.shadow, p.tbl, r.col, p.source, p.col"
)


def fill_referencing_block(names: Names) -> str:
    """Phase 3: each referencing shadow by a join on what it references, each committed."""
    join = f"""\
        EXECUTE format({_JOIN.format(stale="IS NULL")});
        GET DIAGNOSTICS n = ROW_COUNT;"""
    body = f"""
DECLARE
{declarations(names)}  r record;
  p record;
  n bigint;
BEGIN
  FOR r IN SELECT * FROM pg_temp.ulid_pk_plan WHERE pos > 0 ORDER BY pos LOOP
    SELECT * INTO p FROM pg_temp.ulid_pk_plan WHERE pos = r.parent;{_retrying(names, join, "r.tbl")}
    RAISE NOTICE '{names.op_name}: % rows of %.% filled from %', n, r.tbl, r.col, p.tbl;
    COMMIT;
  END LOOP;
END
"""
    return (
        "-- Phase 3: each referencing column's new values, by a join, each committed\n"
        f"DO {dollar_quoted('fill', body)};"
    )


def swap_block(names: Names) -> str:
    """Phase 4: the catch-up and the swap, in one transaction under the tables' locks."""
    op = names.op_name
    unique = literal(names.legacy_unique)
    # One table at a time, the referencing tables before the tables they
    # reference (the order of a writer's own locks: its row, then the
    # foreign key's check of the referenced row). Holding the first, the
    # swap waits for each next one only so long that, all told, it gives up
    # before deadlock_timeout: an application's transaction waiting behind
    # a table the swap holds is never the one PostgreSQL ends as a deadlock.
    lock = """\
        FOREACH t IN ARRAY locks LOOP
          EXECUTE 'LOCK TABLE ' || t || ' IN ACCESS EXCLUSIVE MODE';
          PERFORM set_config('lock_timeout', step_ms || 'ms', true);
        END LOOP;
        PERFORM set_config('lock_timeout', full_wait, true);"""
    key_catch_up = (
        f"""
  IF k.shadow IS NOT NULL THEN{textwrap.indent(_key_fill(names, commit=False), "  ")}
  END IF;"""
        if names.direction == "ulid"
        else ""
    )
    if names.direction == "ulid":
        root = f"""
  EXECUTE format('ALTER TABLE %I.%I ADD CONSTRAINT %I UNIQUE (%I)', sch, k.tbl, {unique}, k.col);
  EXECUTE format('ALTER TABLE %I.%I DROP CONSTRAINT %I', sch, k.tbl, k.pk_name);
  EXECUTE format('ALTER TABLE %I.%I RENAME COLUMN %I TO %I', sch, k.tbl, k.col, legacy);
  EXECUTE format('ALTER TABLE %I.%I RENAME COLUMN %I TO %I', sch, k.tbl, k.shadow, k.col);
  EXECUTE format('COMMENT ON COLUMN %I.%I.%I IS NULL', sch, k.tbl, k.col);
  EXECUTE format('ALTER TABLE %I.%I ADD CONSTRAINT %I PRIMARY KEY (%I)', sch, k.tbl, k.pk_name,
    k.col);"""
    else:
        root = f"""
  EXECUTE format('ALTER TABLE %I.%I DROP CONSTRAINT %I', sch, k.tbl, k.pk_name);
  EXECUTE format('ALTER TABLE %I.%I DROP COLUMN %I', sch, k.tbl, k.col);
  EXECUTE format('ALTER TABLE %I.%I RENAME COLUMN %I TO %I', sch, k.tbl, legacy, k.col);
  EXECUTE format('ALTER TABLE %I.%I ADD CONSTRAINT %I PRIMARY KEY (%I)', sch, k.tbl, k.pk_name,
    k.col);
  IF EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = k.relid AND conname = {unique}) THEN
    EXECUTE format('ALTER TABLE %I.%I DROP CONSTRAINT %I', sch, k.tbl, {unique});
  END IF;"""
    index_sql = index_ddl("format('%I.%I', sch, t.relname)")
    body = f"""
DECLARE
{declarations(names)}{_key_declarations(names)}  r record;
  p record;
  d record;
  tables text;
  locks text[];
  t text;
  full_wait text;
  step_ms bigint;
  n bigint;
  missing text;
  note text;
  not_null name;
BEGIN
  SELECT * INTO k FROM pg_temp.ulid_pk_plan WHERE pos = 0;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  locks := ARRAY(SELECT format('%I.%I', sch, x.tbl) FROM (SELECT q.tbl, min(q.pos) AS first
    FROM pg_temp.ulid_pk_plan q GROUP BY q.tbl) AS x ORDER BY x.first DESC);
  tables := array_to_string(locks, ', ');
  full_wait := current_setting('lock_timeout');
  step_ms := greatest(1, floor(extract(epoch FROM current_setting('deadlock_timeout')::interval)
    * 800 / greatest(cardinality(locks) - 1, 1)));
  IF full_wait <> '0' THEN
    step_ms := least(step_ms, extract(epoch FROM full_wait::interval) * 1000);
  END IF;
{textwrap.indent(textwrap.dedent(_retrying(names, lock, "tables")), "  ")}
  -- The plan was read before the lock: its shadows must still be there (another
  -- run of the script may have finished the conversion meanwhile).
  SELECT string_agg(format('%s.%s', q.tbl, q.shadow), ', ' ORDER BY q.pos) INTO missing
    FROM pg_temp.ulid_pk_plan q WHERE q.shadow IS NOT NULL AND NOT EXISTS (SELECT 1
      FROM pg_attribute a WHERE a.attrelid = q.relid AND a.attname = q.shadow
      AND a.attnum > 0 AND NOT a.attisdropped);
  IF missing IS NOT NULL THEN
    RAISE EXCEPTION '{op}: the columns % are gone since this script read its plan (did '
      'another run of it finish?). Nothing was swapped; run the script again: it says '
      '"already done" if so', missing;
  END IF;
  -- Rows written since the fill, and references changed since.{key_catch_up}
  FOR r IN SELECT * FROM pg_temp.ulid_pk_plan WHERE pos > 0 ORDER BY pos LOOP
    SELECT * INTO p FROM pg_temp.ulid_pk_plan WHERE pos = r.parent;
    EXECUTE format({_JOIN.format(stale="IS DISTINCT FROM p.%6$I")});
    EXECUTE format('UPDATE %I.%I SET %I = NULL WHERE %I IS NULL AND %I IS NOT NULL',
      sch, r.tbl, r.shadow, r.col, r.shadow);
  END LOOP;
  FOR r IN SELECT * FROM pg_temp.ulid_pk_plan ORDER BY pos LOOP
    EXECUTE format('SELECT count(*) FROM %I.%I WHERE %I IS NULL', sch, r.tbl, r.source)
      || CASE WHEN r.pos > 0 THEN format(' AND %I IS NOT NULL', r.col) ELSE '' END INTO n;
    IF n > 0 THEN
      missing := concat_ws('; ', missing, format('%s.%s: %s rows', r.tbl, r.source, n));
    END IF;
  END LOOP;
  IF missing IS NOT NULL THEN
    RAISE EXCEPTION '{op}: rows without a new key value after the catch-up: %. Nothing was '
      'swapped; run the script again', missing;
  END IF;
  -- What is recreated after the swap, as the catalog prints it now, with its
  -- comment; step 0: a primary key's comment (the key is added again below).
  CREATE TEMP TABLE ulid_pk_redo ON COMMIT DROP AS
    SELECT 3 AS step, cl.relname AS tbl, con.conname AS name, pg_get_constraintdef(con.oid) AS def,
      obj_description(con.oid, 'pg_constraint') AS note
    FROM pg_constraint con JOIN pg_class cl ON cl.oid = con.conrelid
    WHERE con.contype = 'f' AND con.conparentid = 0 AND EXISTS (SELECT 1
      FROM pg_temp.ulid_pk_plan c WHERE c.pos > 0 AND c.relid = con.conrelid
      AND c.attnum = con.conkey[1])
    AND EXISTS (SELECT 1 FROM pg_temp.ulid_pk_plan q
      WHERE q.relid = con.confrelid AND q.attnum = ANY (con.confkey))
    UNION ALL
    SELECT 0, cl.relname, con.conname, NULL, obj_description(con.oid, 'pg_constraint')
    FROM pg_constraint con JOIN pg_class cl ON cl.oid = con.conrelid
    WHERE con.contype = 'p' AND obj_description(con.oid, 'pg_constraint') IS NOT NULL
    AND EXISTS (SELECT 1 FROM pg_temp.ulid_pk_plan c
      WHERE c.relid = con.conrelid AND c.pk_name = con.conname)
    UNION ALL
    -- Step 1 an index, 2 a unique constraint, made again by the text online makes.
    SELECT CASE WHEN c.oid IS NULL THEN 1 ELSE 2 END, t.relname, i.relname,
      {index_sql},
      coalesce(obj_description(c.oid, 'pg_constraint'), obj_description(x.indexrelid, 'pg_class'))
    {INDEX_ROWS}
    WHERE NOT x.indisprimary AND NOT EXISTS (SELECT 1 FROM pg_constraint con
      WHERE con.conindid = x.indexrelid AND con.conrelid = x.indrelid
      AND con.contype IN ('p', 'x'))
    AND EXISTS (SELECT 1 FROM pg_temp.ulid_pk_plan q
      WHERE q.pos > 0 AND q.relid = x.indrelid AND q.attnum = ANY (x.indkey::int2[]));
  FOR d IN SELECT * FROM pg_temp.ulid_pk_redo WHERE step = 3 ORDER BY tbl, name LOOP
    EXECUTE format('ALTER TABLE %I.%I DROP CONSTRAINT %I', sch, d.tbl, d.name);
  END LOOP;
  FOR r IN SELECT * FROM pg_temp.ulid_pk_plan WHERE pos > 0 ORDER BY pos LOOP
    note := col_description(r.relid, r.attnum);
    -- PostgreSQL 18 names a NOT NULL: the new column takes the old one's name.
    not_null := (SELECT c.conname FROM pg_constraint c WHERE c.conrelid = r.relid
      AND c.contype = 'n' AND c.conkey = ARRAY[r.attnum]::int2[]);
    IF r.pk_name IS NOT NULL THEN
      EXECUTE format('ALTER TABLE %I.%I DROP CONSTRAINT %I', sch, r.tbl, r.pk_name);
    END IF;
    EXECUTE format('ALTER TABLE %I.%I DROP COLUMN %I', sch, r.tbl, r.col);
    EXECUTE format('ALTER TABLE %I.%I RENAME COLUMN %I TO %I', sch, r.tbl, r.shadow, r.col);
    IF not_null IS NOT NULL THEN
      EXECUTE format('ALTER TABLE %I.%I ADD CONSTRAINT %I NOT NULL %I', sch, r.tbl, not_null,
        r.col);
    ELSIF NOT r.nullable THEN
      EXECUTE format('ALTER TABLE %I.%I ALTER COLUMN %I SET NOT NULL', sch, r.tbl, r.col);
    END IF;
    EXECUTE format('COMMENT ON COLUMN %I.%I.%I IS %L', sch, r.tbl, r.col, note);
    IF r.pk_name IS NOT NULL THEN
      EXECUTE format('ALTER TABLE %I.%I ADD CONSTRAINT %I PRIMARY KEY (%I)',
        sch, r.tbl, r.pk_name, r.col);
    END IF;
  END LOOP;{root}
  FOR d IN SELECT * FROM pg_temp.ulid_pk_redo ORDER BY step, tbl, name LOOP
    IF d.step IN (1, 2) THEN
      EXECUTE d.def;
    ELSIF d.step = 3 THEN
      EXECUTE format('ALTER TABLE %I.%I ADD CONSTRAINT %I %s', sch, d.tbl, d.name, d.def);
    END IF;
    CONTINUE WHEN d.note IS NULL;
    IF d.step = 1 THEN
      EXECUTE format('COMMENT ON INDEX %I.%I IS %L', sch, d.name, d.note);
    ELSE
      EXECUTE format('COMMENT ON CONSTRAINT %I ON %I.%I IS %L', d.name, sch, d.tbl, d.note);
    END IF;
  END LOOP;
  DELETE FROM pg_temp.ulid_pk_plan;
  RAISE NOTICE '{op}: % done', tbl;
END
"""
    return (
        "-- Phase 4: the swap, in the migration's transaction: lock the tables, give new\n"
        "-- values to rows written since the fill, swap the columns and the primary keys,\n"
        "-- recreate the foreign keys, unique constraints and indexes under their names\n"
        f"DO {dollar_quoted('swap', body)};"
    )
