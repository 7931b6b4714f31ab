"""What a storage conversion on MariaDB acts on, named once for its plan and its checks.

The plans (``mysql/storage.py``, the shadow table; ``_storage/_one_mariadb``,
one transaction) are written without reading the catalog, so that one plan
runs online and renders as a ``mariadb`` script: the storage kind of the
column in the table, in ``_<t>__new`` and in ``_<t>__old`` (the op's own
``found_kind`` decides each kind, asked once per reflected type here, so
online and offline agree), their column lists, the primary key and the
DEFAULT are read by SQL as it runs. The conversion SQL is fixed when the
plan is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ..._convert_sql import ConvertSQL
from .._inspect import quote, safe_name
from .._plan.render_mariadb import comment, lit, signal
from .._primary_key._offline_mariadb_sql import concat

if TYPE_CHECKING:
    from .._storage._op import AlterULIDStorageOp

__all__ = [
    "DEFAULT_DECLARATIONS",
    "Names",
    "default_clause_sql",
    "default_value_sql",
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
        """The condition naming ``table`` (in the op's schema) in ``information_schema``."""
        return f"TABLE_SCHEMA = {self.schema} AND TABLE_NAME = {lit(table)}"

    def converted(self, row: str) -> str:
        """The column of ``row`` (NEW, OLD, t) converted, failing on a value that is not an id."""
        return self.sql.convert(f"{row}.{self.column}", self.from_kind, self.to_kind)

    def kind_of(self, table: str) -> str:
        """SQL of the storage kind of the column in ``table`` (NULL: no such column)."""
        return (
            f"(SELECT {self.kind_case()} FROM information_schema.COLUMNS "
            f"WHERE {self.where(table)} AND COLUMN_NAME = {self.column_lit})"
        )

    def columns_of(self, table: str) -> str:
        """SQL of ``table``'s column names, in order (NULL: no such table)."""
        return (
            "(SELECT GROUP_CONCAT(COLUMN_NAME ORDER BY ORDINAL_POSITION SEPARATOR ', ') "
            f"FROM information_schema.COLUMNS WHERE {self.where(table)})"
        )

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


def _literal(n: Names, hex_sql: str) -> str:
    """SQL of the new storage's literal of the id whose hex digits ``hex_sql`` gives."""
    sql = n.sql
    if n.to_kind == "binary" and sql.binary_default is not None:
        return concat(sql.binary_default("{hex}"), {"hex": hex_sql})
    form = "text" if n.to_kind == "uuid" else n.to_kind
    return f"CONCAT('''', {sql.from_hex[form](hex_sql)}, '''')"


def default_clause_sql(n: Names, default: str) -> str:
    """SQL of `` DEFAULT <the DEFAULT (SQL of its text) converted>``, or '' (none).

    The checks refused, before any change, a DEFAULT that cannot be carried.
    """
    value, _valid = default_value_sql(n, default)
    held = value if n.from_kind in ("text", "hex") else f"UNHEX({value})"
    hex_sql = f"LOWER({n.sql.to_hex[n.from_kind](held)})"
    return (
        f"IF({default} IS NULL OR {default} = 'NULL', '', "
        f"CONCAT(' DEFAULT ', {_literal(n, hex_sql)}))"
    )


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
    literal = _literal(n, "v_hex")
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
