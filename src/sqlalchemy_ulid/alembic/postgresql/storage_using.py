"""The ``--sql`` script of the one-transaction storage op on PostgreSQL.

``alter_ulid_storage`` / ``alter_uuid7_storage`` without ``online=True``
convert the column with one ``ALTER TABLE ... ALTER COLUMN ... TYPE ...
USING``. Online the op reads the column first; the script is one ``DO``
block that reads the catalog as it runs, so it ends as the online op does
and can be run again, whole, after it finished or was stopped anywhere
(the block commits all or nothing). It runs without the session's
``statement_timeout`` (reset after it):

1. the refusals the online op makes before any change (no table, no
   column, a type of neither storage; while still to convert: foreign keys
   on the column, a DEFAULT that is not a literal id, a view or rule
   reading the column), raised before any DDL, with the same meaning;
2. a column already in the new storage: a notice, nothing else;
3. a literal DEFAULT converted by the op's own conversion SQL (one that
   does not convert is refused), dropped, the ``ALTER ... USING``, then the
   converted DEFAULT set again. Indexes, constraints, nullability and the
   comment stay, as ``ALTER ... TYPE`` keeps them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._plan.render_pg import dollar_quoted
from .catalog import literal
from .storage_checks import in_place_checks, storage_checks

if TYPE_CHECKING:
    from .._storage._target import Target

__all__ = ["using_script"]

#: The checks of the online plan that the one-transaction op makes too (the
#: others are about its shadow column, trigger and concurrent builds).
_CHECKS = ("table", "column", "column type", "foreign keys")
#: A literal, perhaps cast: ``'...'`` or ``'...'::uuid``.
_LITERAL = "'^''[^'']*''(::[a-z ]+)?$'"


def using_script(t: Target) -> str:
    """The script's one ``DO`` block (and a comment before it)."""
    checks = "".join(
        f"  IF ({step.guard}) THEN\n    RAISE EXCEPTION '%', {step.message};\n  END IF;\n"
        for step in [*(s for s in storage_checks(t) if s.label in _CHECKS), *in_place_checks(t)]
    )
    where = f"{t.table_name}.{t.column_name}"
    done = literal(f"{t.op}: {where} is {t.to_kind} storage already: nothing to do")
    refused = literal(
        ", which cannot be carried to the new storage; nothing was changed. Drop the "
        "default, convert, then set a new one"
    )
    convert = dollar_quoted("t", "SELECT CAST(" + t.convert_template + " AS text)")
    body = f"""
DECLARE
  v_default text;
  v_new text;
BEGIN
{checks}  IF {t.col_kind} = {literal(t.to_kind)} THEN
    RAISE NOTICE '%', {done};
    RETURN;
  END IF;
  SELECT pg_get_expr(d.adbin, d.adrelid) INTO v_default FROM pg_attrdef d
    JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
    WHERE d.adrelid = to_regclass({t.table_lit}) AND a.attname = {t.column_lit};
  IF v_default IS NOT NULL THEN
    IF v_default ~ {_LITERAL} THEN
      BEGIN
        EXECUTE format({convert}, v_default) INTO v_new;
      EXCEPTION WHEN OTHERS THEN
        v_new := NULL;
      END;
    END IF;
    IF v_new IS NULL THEN
      RAISE EXCEPTION '%', {literal(f"{t.op}: {where} has DEFAULT ")} || v_default || {refused};
    END IF;
    -- PostgreSQL casts a DEFAULT to the new type, and no cast exists: it goes first.
    ALTER TABLE {t.table} ALTER COLUMN {t.column} DROP DEFAULT;
  END IF;
  ALTER TABLE {t.table} ALTER COLUMN {t.column} TYPE {t.new_type} USING {t.converted};
  IF v_new IS NOT NULL THEN
    -- Untyped: the literal takes the column's own type.
    EXECUTE format('ALTER TABLE %s ALTER COLUMN %s SET DEFAULT %L', {t.table_lit},
      {literal(t.column)}, v_new);
  END IF;
END
"""
    # The ALTER rewrites the table in one statement: a role's or database's
    # statement_timeout would cancel it on a big table.
    return (
        f"-- {t.op}: one block, all or nothing; a rerun after it finished does nothing\n"
        "SET statement_timeout = 0;\n"
        f"DO {dollar_quoted('ulid', body)};\n"
        "RESET statement_timeout;\n"
    )
