"""The copy of ``alter_ulid_storage(online=True)`` on PostgreSQL: one batch, two loops.

Each batch takes the next keys after the last key copied, sets the shadow
of the rows from its first to its last key to their column converted (the
conversion SQL that the trigger runs; a row the trigger has done is
skipped: its shadow is set) and records its own last key in the state
table, in a row of its own (``<op>:copy``): a rerun goes on after it. The
online loop (Python, in ``_storage/_online``) and the script's loop
(PL/pgSQL, here) send the same batch, :func:`copy_batch`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._plan.render_pg import dollar_quoted
from .catalog import literal

if TYPE_CHECKING:
    from .._storage._target import Target

__all__ = ["COPY_DECLARE", "copy_batch", "copy_position", "copy_script", "fill_slots", "no_online"]


def copy_position(t: Target) -> str:
    """SQL of the last key the copy recorded (NULL: none), kept in a row of its own."""
    return f"(SELECT step FROM {t.state} WHERE {t.copy_row})"


def no_online(connection: Any) -> Any:
    """The online body of a plan made for a script: it has none."""
    raise RuntimeError("this plan was made for a script: it has no online copy")


COPY_DECLARE = (
    "  key_column name;\n  key_type text;\n  last_key text;\n  high text;\n  top text;\n"
    "  moved bigint;\n  total bigint := 0;\n"
)


#: Where :func:`copy_batch` takes the highest and the last key copied.
_HIGH, _LAST = "\x00high\x00", "\x00last\x00"


def copy_batch(t: Target, key: str, key_type: str, after: bool, size: str) -> str:
    """One copy batch: the rows after the last key, their shadow set to the converted column.

    ``key`` and ``key_type`` are SQL (or format() slots), ``size`` the row
    count; the slots ``high`` (the highest key when the copy began: later
    rows came through the trigger) and ``last`` (the last key copied) are
    filled by :func:`fill_slots`.
    """
    table, column, shadow = t.table, t.column, t.shadow
    where = f"{key} <= CAST({_HIGH} AS {key_type})"
    if after:
        where += f" AND {key} > CAST({_LAST} AS {key_type})"
    # The UPDATE finds the batch's rows by its first and last key, a range of
    # the primary key (the one snapshot: exactly the batch's rows), not by a
    # join with the batch: the planner knows nothing of the new shadow's
    # NULLs and would hash the whole table for that join, every batch.
    return (
        f"WITH batch AS (SELECT {key} AS k FROM {table} WHERE {where} ORDER BY {key} "
        f"LIMIT {size}), span AS (SELECT (SELECT k FROM batch ORDER BY k LIMIT 1) AS first_k, "
        "(SELECT k FROM batch ORDER BY k DESC LIMIT 1) AS last_k), "
        f"moved AS (UPDATE {table} AS t SET {shadow} = {t.converted_t} FROM span "
        f"WHERE t.{key} >= span.first_k AND t.{key} <= span.last_k AND t.{shadow} IS NULL "
        f"AND t.{column} IS NOT NULL RETURNING 1), "
        f"mark AS (INSERT INTO {t.state} (op, target, plan, step) "
        f"SELECT {literal(t.copy_op)}, {literal(t.target)}, 'copy', CAST(last_k AS TEXT) "
        "FROM span WHERE last_k IS NOT NULL "
        "ON CONFLICT (op, target) DO UPDATE SET step = EXCLUDED.step RETURNING 1) "
        "SELECT (SELECT CAST(last_k AS TEXT) FROM span), (SELECT count(*) FROM moved)"
    )


def fill_slots(batch: str, high: str, last: str) -> str:
    """:func:`copy_batch` with its slots filled (SQL: parameters or variables)."""
    return batch.replace(_HIGH, high).replace(_LAST, last)


def copy_script(t: Target) -> str:
    """The script's copy: a PL/pgSQL loop of :func:`copy_batch`, a commit after each."""

    def batch(after: bool) -> str:
        # A format() template: %1$I the key column, %2$s its type; a % of a name doubled.
        sql = copy_batch(t, "%1$I", "%2$s", after, str(t.batch_size))
        sql = sql.replace("%", "%%").replace("%%1$I", "%1$I").replace("%%2$s", "%2$s")
        return dollar_quoted("batch", fill_slots(sql, "$2", "$1"))

    pause = f"\n      PERFORM pg_sleep({t.pause:g});" if t.pause else ""
    stopped = literal(f"{t.op}: the copy of {t.table_name}.{t.column_name} stopped: ")
    copied = literal(f"{t.op}: copied ")
    rows = literal(f" rows of {t.table_name}.{t.column_name}")
    return f"""\
    SELECT a.attname, format_type(a.atttypid, a.atttypmod) INTO key_column, key_type
      FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
      WHERE i.indrelid = to_regclass({t.table_lit}) AND i.indisprimary;
    last_key := {copy_position(t)};
    EXECUTE format('SELECT CAST(t.%1$I AS TEXT) FROM %2$s AS t ORDER BY t.%1$I DESC LIMIT 1',
      key_column, {t.table_lit}) INTO high;
    LOOP
      EXIT WHEN high IS NULL;
      BEGIN
        IF last_key IS NULL THEN
          EXECUTE format({batch(False)}, key_column, key_type) INTO top, moved USING last_key, high;
        ELSE
          EXECUTE format({batch(True)}, key_column, key_type) INTO top, moved USING last_key, high;
        END IF;
      EXCEPTION WHEN invalid_text_representation OR data_exception THEN
        RAISE EXCEPTION '%', {stopped} || SQLERRM;
      END;
      EXIT WHEN top IS NULL;
      last_key := top;
      total := total + moved;
      RAISE NOTICE '%', {copied} || total || {rows};
      COMMIT;{pause}
    END LOOP;"""
