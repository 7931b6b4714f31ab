"""The SQL pieces of the MariaDB offline storage script (``_offline_mariadb``).

The script cannot read the table when it is written, so every block starts
with the same lookups in ``information_schema``: the storage kind of the
column in the table, in ``_<t>__new`` and in ``_<t>__old`` (the op's own
``found_kind`` decides each kind, asked once per reflected type here, so
the script and the online op agree), their column lists, and the primary
key. The conversion SQL of the op is fixed when the script is written; the
column lists, the key and the DEFAULT are spliced around it as it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ..._convert_sql import ConvertSQL
from .._inspect import quote, safe_name
from .._plan.render_mariadb import comment, lit, signal
from .._primary_key._offline_mariadb_sql import concat, quoted

if TYPE_CHECKING:
    from ._op import AlterULIDStorageOp

__all__ = [
    "DEFAULT_DECLARATIONS",
    "Names",
    "declarations",
    "default_value_sql",
    "lookups",
    "new_default",
]

_BINARY = "'binary', 'varbinary', 'tinyblob', 'blob', 'mediumblob', 'longblob'"
_TEXT = "'char', 'varchar', 'tinytext', 'text', 'mediumtext', 'longtext'"


class Names:
    """The names, kinds and conversion SQL of one op, as the script's SQL needs them."""

    def __init__(
        self, dialect: Any, op: AlterULIDStorageOp, sql: ConvertSQL, from_kind: str, to_kind: str
    ) -> None:
        self.op, self.sql, self.dialect = op, sql, dialect
        self.from_kind, self.to_kind = from_kind, to_kind
        self.name = op.table_name
        self.shadow_name = safe_name(f"_{op.table_name}__new", dialect)
        self.old_name = safe_name(f"_{op.table_name}__old", dialect)
        self.table = quote(dialect, op.table_name, op.schema)
        self.shadow = quote(dialect, self.shadow_name, op.schema)
        self.old = quote(dialect, self.old_name, op.schema)
        self.column = quote(dialect, op.column_name)
        self.column_lit = lit(op.column_name)
        self.schema = "DATABASE()" if op.schema is None else lit(op.schema)
        self.triggers = {
            event: safe_name(f"_{op.table_name}__ulid_{event[:3]}", dialect)
            for event in ("delete", "update", "insert")
        }
        self.trigger_sql = {e: quote(dialect, n, op.schema) for e, n in self.triggers.items()}
        self.trigger_list = ", ".join(lit(n) for n in self.triggers.values())
        self.type_sql = op.column_type(op.to_storage, dialect).compile(dialect=dialect)
        self.holding = getattr(sql.holding(), "length", None) if sql.holding else None
        self.label = comment(f"{op.op_name}({op.table_name}.{op.column_name})")
        #: the run's lock's target, as the other ops name theirs
        self.target = f"{op.table_name}.{op.column_name}"
        if op.schema is not None:
            self.target = f"{op.schema}.{self.target}"

    def where(self, table: str) -> str:
        return f"TABLE_SCHEMA = {self.schema} AND TABLE_NAME = {lit(table)}"

    def converted(self, row: str) -> str:
        """The column of ``row`` (NEW, OLD, t) converted, failing on a value that is not an id."""
        return self.sql.convert(f"{row}.{self.column}", self.from_kind, self.to_kind)

    def _kind(self, type_: sa.types.TypeEngine[Any]) -> str:
        found = self.op.found_kind(type_, self.holding)
        return "NULL" if found is None else lit(found)

    def kind_case(self) -> str:
        """SQL of the storage kind of a column of information_schema.COLUMNS."""
        holding = (
            ""
            if self.holding is None
            else f"WHEN DATA_TYPE = 'varbinary' AND CHARACTER_MAXIMUM_LENGTH = {self.holding} "
            f"THEN {self._kind(sa.VARBINARY(self.holding))} "
        )
        text = (
            f"CASE CHARACTER_MAXIMUM_LENGTH WHEN 36 THEN {self._kind(sa.CHAR(36))} "
            f"WHEN 32 THEN {self._kind(sa.CHAR(32))} ELSE {self._kind(sa.VARCHAR(40))} END"
        )
        return (
            f"CASE WHEN DATA_TYPE = 'uuid' THEN {self._kind(sa.Uuid())} {holding}"
            f"WHEN DATA_TYPE IN ({_BINARY}) THEN {self._kind(sa.BINARY(16))} "
            f"WHEN DATA_TYPE IN ({_TEXT}) THEN {text} END"
        )


def declarations() -> str:
    """Local variables; none is named like a column of information_schema."""
    return """\
  DECLARE v_kind, v_new_kind, v_old_kind VARCHAR(16) CHARACTER SET utf8mb4;
  DECLARE v_key VARCHAR(64) CHARACTER SET utf8mb4;
  DECLARE v_key_count, v_has_column INT DEFAULT 0;
  DECLARE v_cols, v_new_cols, v_old_cols LONGTEXT CHARACTER SET utf8mb4;
  DECLARE message VARCHAR(512) CHARACTER SET utf8mb4;
"""


def lookups(n: Names) -> str:
    """SQL setting the kinds, the column lists and the key of the three tables."""
    kind = n.kind_case()
    cols = quoted("COLUMN_NAME")
    lines = []
    for table, kind_var, cols_var in (
        (n.name, "v_kind", "v_cols"),
        (n.shadow_name, "v_new_kind", "v_new_cols"),
        (n.old_name, "v_old_kind", "v_old_cols"),
    ):
        where = n.where(table)
        lines.append(
            f"  SELECT (SELECT {kind} FROM information_schema.COLUMNS WHERE {where} "
            f"AND COLUMN_NAME = {n.column_lit}),\n"
            f"    (SELECT GROUP_CONCAT({cols} ORDER BY ORDINAL_POSITION SEPARATOR ', ') "
            f"FROM information_schema.COLUMNS WHERE {where})\n"
            f"    INTO {kind_var}, {cols_var};"
        )
    where = n.where(n.name)
    lines.append(
        "  SELECT COUNT(*), MAX(COLUMN_NAME) INTO v_key_count, v_key "
        f"FROM information_schema.KEY_COLUMN_USAGE WHERE {where} AND CONSTRAINT_NAME = 'PRIMARY';"
    )
    lines.append(
        "  SELECT COUNT(*) INTO v_has_column FROM information_schema.COLUMNS "
        f"WHERE {where} AND COLUMN_NAME = {n.column_lit};"
    )
    return "\n".join(lines) + "\n"


def _default_patterns(kind: str) -> list[tuple[str, str]]:
    """(REGEXP, SQL of the 32 hex digits or text it holds, from ``d``) per literal form."""
    inner = "SUBSTRING(d, 2, CHAR_LENGTH(d) - 2)"
    if kind == "text":
        return [("^'[0-9A-Za-z-]{26,36}'$", inner)]
    if kind == "hex":
        return [("^'[0-9A-Fa-f]{32}'$", inner)]
    uuid = "^'[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}'$"
    return [
        (uuid, f"REPLACE({inner}, '-', '')"),
        (r"^\(?unhex\('[0-9a-fA-F]{32}'\)\)?$", "SUBSTRING(d, LOCATE('''', d) + 1, 32)"),
    ]


def _matches(n: Names) -> str:
    """CASE branches: the hex digits or text a literal DEFAULT ``d`` holds."""
    return " ".join(
        f"WHEN d REGEXP {lit(pattern)} THEN {extract}"
        for pattern, extract in _default_patterns(n.from_kind)
    )


def default_value_sql(n: Names, default: str) -> tuple[str, str]:
    """SQL of the value a DEFAULT (SQL of its text) holds, and SQL true when it is an id."""
    value = f"(SELECT CASE {_matches(n)} END FROM (SELECT {default} AS d) AS x)"
    held = value if n.from_kind in ("text", "hex") else f"UNHEX({value})"
    return value, n.sql.check(held, n.from_kind) or "TRUE"


def new_default(n: Names) -> str:
    """SQL setting v_default to the column's DEFAULT in the new storage, or SIGNALling.

    A literal id of the old storage, as MariaDB reflects it, converted the
    way the online op converts it; any other DEFAULT stops the script.
    """
    op, sql = n.op, n.sql
    # The value as the old column holds it, from its text or hex digits.
    value = "v_value" if n.from_kind in ("text", "hex") else "UNHEX(v_value)"
    valid = sql.check(value, n.from_kind) or "TRUE"
    hex_sql = f"LOWER({sql.to_hex[n.from_kind](value)})"
    if n.to_kind == "binary" and sql.binary_default is not None:
        literal = concat(sql.binary_default("{hex}"), {"hex": "v_hex"})
    else:
        form = "text" if n.to_kind == "uuid" else n.to_kind
        literal = f"CONCAT('''', {sql.from_hex[form]('v_hex')}, '''')"
    matches = _matches(n)
    cannot = lit(f"{op.op_name}: {op.table_name}.{op.column_name} has DEFAULT ")
    after = lit(", which cannot be carried to the new storage; nothing was changed")
    return f"""\
  SELECT (SELECT COLUMN_DEFAULT FROM information_schema.COLUMNS WHERE {n.where(n.name)}
    AND COLUMN_NAME = {n.column_lit}) INTO v_old_default;
  SET v_default = NULL;
  IF v_old_default IS NOT NULL AND v_old_default <> 'NULL' THEN
    SET v_value = (SELECT CASE {matches} END FROM (SELECT v_old_default AS d) AS x);
    IF v_value IS NULL OR NOT COALESCE({valid}, FALSE) THEN
      {signal(f"CONCAT({cannot}, v_old_default, {after})")}
    END IF;
    SET v_hex = {hex_sql};
    SET v_default = {literal};
  END IF;
"""


#: The variables new_default() sets.
DEFAULT_DECLARATIONS = """\
  DECLARE v_old_default, v_default, v_value, v_hex TEXT CHARACTER SET utf8mb4;
"""
