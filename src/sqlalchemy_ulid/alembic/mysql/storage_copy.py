"""The copy of ``alter_ulid_storage(online=True)`` on MariaDB: into the shadow, in key order.

The one ``fill`` step of the shadow-table plan (``storage.py``), with its
two bodies built from the same statement templates: online, Python walks
the batches (sized by time); in the script, a loop does. Both read the
quoted key, the written columns and their converted values from
``information_schema`` as they start (:func:`pieces`), copy from the first
row of the table the shadow lacks up to the highest key when they start (a
row above it came through the triggers), one ``INSERT IGNORE ... SELECT
... LOCK IN SHARE MODE`` a transaction, and end by counting both tables in
one statement (one read view; the triggers write both tables in the
writer's transaction): a difference stops the op before the swap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from alembic.util import CommandError
from sqlalchemy.engine import Connection

from ..._errors import InvalidULID
from .._inspect import run
from .._plan.render_mariadb import lit, signal
from .._primary_key._offline_mariadb_sql import concat, quoted

if TYPE_CHECKING:
    from .storage_target import Names

__all__ = ["AUTO_INC_BATCH_SECONDS", "COPY_DECLARE", "copy_online", "copy_script", "pieces"]

#: What a copy batch should take when writers wait for it whole (see
#: :func:`batch_seconds`): their longest wait is about one batch.
AUTO_INC_BATCH_SECONDS = 0.05
#: Tries of a script's copy batch that a deadlock or a row lock timeout stopped.
_TRIES = 5

# The statements, online and in the script; {into} is the script's "INTO @var".
_TOP = "SELECT MAX({key}){into} FROM {table}"
_MISSING = (
    "SELECT MIN(t.{key}){into} FROM {table} AS t LEFT JOIN {shadow} AS s "
    "ON s.{key} = {t_key} WHERE s.{key} IS NULL"
)
_STEP = (
    "SELECT MAX(k){into} FROM (SELECT {key} AS k FROM {table} WHERE {key}{cmp}{low} "
    "AND {key} <= {top} ORDER BY {key} LIMIT {limit}) AS b"
)
_COPY = (
    "INSERT IGNORE INTO {shadow} ({names}) SELECT {values} FROM {table} AS t "
    "WHERE t.{key}{cmp}{low} AND t.{key} <= {high} ORDER BY t.{key} LOCK IN SHARE MODE"
)
_COUNTS = "SELECT (SELECT COUNT(*) FROM {table}), (SELECT COUNT(*) FROM {shadow}){into}"


def _fill(template: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        template = template.replace("{" + name + "}", value)
    return template


def key_sql(n: Names) -> str:
    """SQL of the name of the table's primary key column (the checks: exactly one)."""
    return (
        "(SELECT MAX(COLUMN_NAME) FROM information_schema.KEY_COLUMN_USAGE "
        f"WHERE {n.where(n.name)} AND CONSTRAINT_NAME = 'PRIMARY')"
    )


def _written(n: Names) -> str:
    return f"FROM information_schema.COLUMNS WHERE {n.where(n.name)} AND IS_GENERATED = 'NEVER'"


def names_sql(n: Names) -> str:
    """SQL of the columns a write sets, quoted (a generated column's value is the server's)."""
    name = quoted("COLUMN_NAME")
    return f"(SELECT GROUP_CONCAT({name} ORDER BY ORDINAL_POSITION SEPARATOR ', ') {_written(n)})"


def values_sql(n: Names, row: str) -> str:
    """SQL of the written columns of ``row`` (NEW, t) as the shadow stores them."""
    value = f"IF(COLUMN_NAME = {n.column_lit}, {lit(n.converted(row))}, "
    value += f"CONCAT({lit(row + '.')}, {quoted('COLUMN_NAME')}))"
    return f"(SELECT GROUP_CONCAT({value} ORDER BY ORDINAL_POSITION SEPARATOR ', ') {_written(n)})"


def row_key_sql(n: Names, row: str) -> str:
    """SQL of the key of ``row`` (OLD, t) as the shadow stores it, comparable with the shadow's.

    Text made from bytes has the session's collation, and ``=`` with the
    shadow's key (``ascii_bin`` for a ULID) is then an illegal mix (1267):
    it takes the shadow key's own.
    """
    key = key_sql(n)
    found = (
        f"FROM information_schema.COLUMNS WHERE {n.where(n.shadow_name)} AND COLUMN_NAME = {key}"
    )
    charset, collation = f"(SELECT CHARACTER_SET_NAME {found})", f"(SELECT COLLATION_NAME {found})"
    converted = lit(n.converted(row))
    collated = (
        f"IF({collation} IS NULL, {converted}, CONCAT('CONVERT(', {converted}, "
        f"' USING ', {charset}, ') COLLATE ', {collation}))"
    )
    return f"IF({key} = {n.column_lit}, {collated}, CONCAT({lit(row + '.')}, {quoted(key)}))"


def pieces(n: Names) -> str:
    """A query of the quoted key, the written columns, their values from ``t``, and ``t``'s key."""
    return (
        f"SELECT {quoted(key_sql(n))}, {names_sql(n)}, {values_sql(n, 't')}, {row_key_sql(n, 't')}"
    )


def _bad_value(n: Names) -> str | None:
    """A query of a value that is not an id (None: the old storage's values are not checked)."""
    if not n.op.checked_before(n.from_kind):
        return None
    column = n.column
    shown = column if n.from_kind in ("text", "hex") else f"HEX({column})"
    bad = n.sql.bad_text(column, n.from_kind)
    return f"SELECT {shown} FROM {n.table} WHERE {column} IS NOT NULL AND {bad} LIMIT 1"


def _not_ids(n: Names) -> tuple[str, str]:
    op = n.op
    return (
        f"{op.op_name}: {op.table_name}.{op.column_name} holds ",
        f", which is not one of the {op.values_name}; nothing was copied",
    )


def _differ(n: Names) -> tuple[str, str, str]:
    """The refusal of the swap when the counts differ: its text around the two counts."""
    op = n.op
    return (
        f"{op.op_name}({op.table_name!r}, online=True): {op.table_name} has ",
        f" rows and its converted copy {n.shadow_name} ",
        "; nothing was swapped. Run it again: the copy goes on from the first missing row",
    )


def copy_online(connection: Connection, n: Names) -> Callable[[int], int]:
    """Begin the copy online; return its batch function (0: done, the counts equal)."""
    key, names, values, t_key = tuple(run(connection, pieces(n)).one())
    bad = _bad_value(n)
    found = None if bad is None else run(connection, bad).scalar()
    if found is not None:
        # Written after the checks, before the triggers: the triggers guard the rest.
        before, after = _not_ids(n)
        raise InvalidULID(f"{before}{found}{after}")
    slots = {"key": str(key), "table": n.table, "shadow": n.shadow, "into": ""}
    slots |= {"names": str(names), "values": str(values), "t_key": str(t_key)}
    top = run(connection, _fill(_TOP, slots)).scalar()
    low: list[Any] = [run(connection, _fill(_MISSING, slots)).scalar(), " >= "]

    def batch(limit: int) -> int:
        high = None
        if low[0] is not None and top is not None:
            step = _fill(_STEP, {**slots, "cmp": low[1], "low": ":low", "top": ":top"})
            step = step.replace("{limit}", str(int(limit)))
            high = connection.execute(sa.text(step), {"low": low[0], "top": top}).scalar()
        if high is None:
            _verify(connection, n, slots)
            return 0
        copy = _fill(_COPY, {**slots, "cmp": low[1], "low": ":low", "high": ":high"})
        copied = connection.execute(sa.text(copy), {"low": low[0], "high": high}).rowcount
        low[:] = [high, " > "]
        # A batch of rows the triggers had mirrored still moves the copy on.
        return max(1, int(copied))

    return batch


def _verify(connection: Connection, n: Names, slots: dict[str, str]) -> None:
    table, shadow = tuple(run(connection, _fill(_COUNTS, slots)).one())
    if table != shadow:
        before, middle, after = _differ(n)
        raise CommandError(f"{before}{table}{middle}{shadow}{after}")


def estimate_sql(n: Names) -> str:
    """A query of the table's estimated rows (for progress)."""
    return f"SELECT TABLE_ROWS FROM information_schema.TABLES WHERE {n.where(n.name)}"


def batch_seconds_sql(n: Names) -> str:
    """A query of 1 when a copy batch holds the shadow's AUTO-INC lock to its end.

    With ``innodb_autoinc_lock_mode`` 0 or 1 (MariaDB's default), an
    ``INSERT ... SELECT`` into a table with an ``AUTO_INCREMENT`` column
    takes the table's AUTO-INC lock for the whole statement, and every
    writer's trigger inserting into the shadow meanwhile waits for it: such
    batches aim at :data:`AUTO_INC_BATCH_SECONDS`.
    """
    return (
        "SELECT EXISTS (SELECT 1 FROM information_schema.TABLES WHERE "
        f"{n.where(n.name)} AND AUTO_INCREMENT IS NOT NULL) "
        "AND COALESCE(@@innodb_autoinc_lock_mode, 0) < 2"
    )


#: The script's copy block's declarations.
COPY_DECLARE = """\
    DECLARE v_qkey, v_t_key TEXT CHARACTER SET utf8mb4;
    DECLARE v_names, v_t_values LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_step_sql, v_copy_sql LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_bad TEXT CHARACTER SET utf8mb4;
    DECLARE v_first, v_failed BOOLEAN DEFAULT TRUE;
    DECLARE v_try INT DEFAULT 0;
    DECLARE v_copied, v_total BIGINT DEFAULT 0;
    DECLARE v_rows, v_new_rows BIGINT UNSIGNED;
    DECLARE message VARCHAR(512) CHARACTER SET utf8mb4;
"""


def copy_script(n: Names, batch_size: int, pause: float) -> str:
    """The copy as the script's loop (the same statements, built as it runs)."""
    op = n.op
    slots = {"key": "v_qkey", "table": lit(n.table), "shadow": lit(n.shadow)}
    slots |= {"names": "v_names", "values": "v_t_values", "t_key": "v_t_key"}
    cmp = "IF(v_first, ' >= ', ' > ')"
    top = concat(_TOP, {**slots, "into": lit(" INTO @sqlalchemy_ulid_top")})
    missing = concat(_MISSING, {**slots, "into": lit(" INTO @sqlalchemy_ulid_low")})
    step = concat(
        _STEP.replace("{limit}", str(int(batch_size))),
        {**slots, "into": lit(" INTO @sqlalchemy_ulid_high"), "cmp": cmp,
         "low": lit("@sqlalchemy_ulid_low"), "top": lit("@sqlalchemy_ulid_top")},
    )  # fmt: skip
    copy = concat(
        _COPY,
        {**slots, "cmp": cmp, "low": lit("@sqlalchemy_ulid_low"),
         "high": lit("@sqlalchemy_ulid_high")},
    )  # fmt: skip
    check = ""
    bad = _bad_value(n)
    if bad is not None:
        before, after = (lit(part) for part in _not_ids(n))
        check = f"""\
    -- The triggers guard every write from here on: a value that is not an id
    -- written before them is named now (a batch would fail on it unnamed).
    SET v_bad = ({bad});
    IF v_bad IS NOT NULL THEN
      {signal(f"CONCAT({before}, v_bad, {after})")}
    END IF;
"""
    stopped = lit(f"{op.op_name}: a copy batch of {op.table_name} failed {_TRIES} times ")
    label = lit(f" rows of {op.table_name} copied")
    sleep = f"\n        DO SLEEP({pause:g});" if pause else ""
    before, middle, after = (lit(part) for part in _differ(n))
    counts = _fill(_COUNTS, {"table": n.table, "shadow": n.shadow, "into": ""})
    return f"""\
{check}    SELECT {quoted(key_sql(n))}, {names_sql(n)}, {values_sql(n, "t")}, {row_key_sql(n, "t")}
      INTO v_qkey, v_names, v_t_values, v_t_key;
    -- The highest key now: a row above it was written through the triggers.
    EXECUTE IMMEDIATE {top};
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
        SET @sqlalchemy_ulid_low = @sqlalchemy_ulid_high, v_first = FALSE;{sleep}
      END IF;
    END WHILE;
    -- One statement: both counts from one read view.
    {counts} INTO v_rows, v_new_rows;
    IF v_rows <> v_new_rows THEN
      {signal(f"CONCAT({before}, v_rows, {middle}, v_new_rows, {after})")}
    END IF;"""
