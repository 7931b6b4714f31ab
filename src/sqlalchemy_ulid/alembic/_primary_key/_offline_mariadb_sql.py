"""Small SQL builders shared by the MariaDB key-conversion script's blocks.

The script's compound statements build their DDL and DML as strings when
they run (the names come from ``information_schema``): these helpers write
the SQL of those strings, and the names the script knows when it is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..._types import ULIDType
from .._inspect import quote, safe_name
from .._names import shadow_name_mariadb
from .._plan.render_mariadb import lit
from ._checks import OFFLINE_STEPS_TABLE

if TYPE_CHECKING:
    from sqlalchemy.engine import Dialect

    from ._ops import _KeyOp

__all__ = [
    "ONLINE_TABLE",
    "STEPS_TABLE",
    "Names",
    "concat",
    "has_columns",
    "quoted",
    "safe_name_sql",
    "shadow_sql",
    "table_sql",
]

#: The table that holds an offline conversion's steps while it runs (the
#: online op refuses a table named there).
STEPS_TABLE = OFFLINE_STEPS_TABLE
#: The online op's state table: a row there is a conversion the script must not touch.
ONLINE_TABLE = "ulid_key_conversions"
#: The identifier limit of MariaDB/MySQL names, in bytes.
_LIMIT = 64


def quoted(expr: str) -> str:
    """SQL of ``expr`` (SQL of a name) quoted as an identifier."""
    return f"CONCAT('`', REPLACE({expr}, '`', '``'), '`')"


def safe_name_sql(expr: str) -> str:
    """SQL of :func:`~.._inspect.safe_name` of ``expr`` (NULL: a long non-ASCII name).

    Python shortens a name over 64 bytes to its first 55 bytes, ``_`` and 8
    hex digits of its SHA-1; the same for ASCII names here. A longer name
    with other characters gives NULL: the script refuses it.
    """
    return (
        f"CASE WHEN LENGTH({expr}) <= {_LIMIT} THEN {expr} "
        f"WHEN LENGTH({expr}) = CHAR_LENGTH({expr}) "
        f"THEN CONCAT(LEFT({expr}, {_LIMIT - 9}), '_', LEFT(SHA1({expr}), 8)) END"
    )


def shadow_sql(table: str, column: str, suffix: str) -> str:
    """SQL of the shadow column's name: :func:`~.._names.shadow_name`, as online.

    A conversion an earlier release began under a SHA-1 name
    (:func:`safe_name_sql`) goes on under it, as online.
    """
    new = shadow_name_mariadb(column, suffix)
    legacy = safe_name_sql(f"CONCAT({column}, {lit(suffix)})")

    def named(name: str) -> str:
        return (
            "SELECT 1 FROM information_schema.COLUMNS c2 WHERE c2.TABLE_SCHEMA = v_schema "
            f"AND c2.TABLE_NAME = {table} AND c2.COLUMN_NAME = {name}"
        )

    return (
        f"CASE WHEN EXISTS ({named(legacy)}) AND NOT EXISTS ({named(new)}) "
        f"THEN {legacy} ELSE {new} END"
    )


def concat(template: str, values: dict[str, str]) -> str:
    """SQL of a CONCAT() that is ``template`` with each ``{name}`` replaced by SQL."""
    parts: list[str] = []
    text, position = "", 0
    while position < len(template):
        start = template.find("{", position)
        end = template.find("}", start) if start >= 0 else -1
        if start < 0 or end < 0:
            text += template[position:]
            break
        name = template[start + 1 : end]
        if name not in values:  # a brace of the SQL itself (or of a name)
            text += template[position : start + 1]
            position = start + 1
            continue
        text += template[position:start]
        if text:
            parts.append(lit(text))
        text = ""
        parts.append(values[name])
        position = end + 1
    if text:
        parts.append(lit(text))
    return f"CONCAT({', '.join(parts)})" if parts else "''"


@dataclass(frozen=True)
class Names:
    """What the script knows when it is written: the op's names, as SQL pieces."""

    op_name: str
    direction: Literal["ulid", "legacy"]
    table: str
    legacy_id: str
    from_time: str | None
    batch_size: int
    #: the new columns' type (the ULID direction)
    ulid_type: str
    #: the shadow columns' suffix
    suffix: str
    #: the unique constraint the legacy values keep
    legacy_unique: str
    #: ``schema``. (quoted), or empty
    prefix: str
    #: SQL of the schema's name
    schema_sql: str

    @classmethod
    def of(
        cls, dialect: Dialect, op: _KeyOp, direction: Literal["ulid", "legacy"], name: str
    ) -> Names:
        ulid_type = str(ULIDType(op.storage).load_dialect_impl(dialect).compile(dialect=dialect))
        return cls(
            op_name=name,
            direction=direction,
            table=op.table_name,
            legacy_id=op.legacy_id,
            from_time=op.from_time,
            batch_size=op.batch_size,
            ulid_type=ulid_type,
            suffix="__ulid" if direction == "ulid" else "__legacy",
            legacy_unique=safe_name(f"uq_{op.table_name}_{op.legacy_id}", dialect),
            prefix="" if op.schema is None else quote(dialect, op.schema) + ".",
            schema_sql="DATABASE()" if op.schema is None else lit(op.schema),
        )

    def qualified(self, expr: str) -> str:
        """SQL of the schema-qualified, quoted name of the table named by ``expr``."""
        if not self.prefix:
            return quoted(expr)
        return f"CONCAT({lit(self.prefix)}, {quoted(expr)})"

    def where(self, table_sql: str) -> str:
        """``information_schema`` condition: the schema, and the table ``table_sql``."""
        return f"TABLE_SCHEMA = {self.schema_sql} AND TABLE_NAME = {table_sql}"

    @property
    def steps_table(self) -> str:
        return f"{self.prefix}`{STEPS_TABLE}`"

    @property
    def name_sql(self) -> str:
        return lit(self.table)


def table_sql(n: Names) -> str:
    """The op's table, schema-qualified and quoted, as the script's SQL names it."""
    return f"{n.prefix}`{n.table.replace('`', '``')}`"


def has_columns(schema: str, pairs: list[tuple[str, str]]) -> str:
    """SQL of a guard statement: ``@sqlalchemy_ulid_todo`` is 1 if every column exists.

    ``pairs`` are SQL of (table name, column name), read when the plan is made.
    """
    conditions = ", ' OR ', ".join(
        f"'(TABLE_NAME = ', QUOTE({table}), ' AND COLUMN_NAME = ', QUOTE({column}), ')'"
        for table, column in pairs
    )
    return (
        f"CONCAT('SELECT COUNT(*) = {len(pairs)} INTO @sqlalchemy_ulid_todo FROM "
        f"information_schema.COLUMNS WHERE TABLE_SCHEMA = ', QUOTE({schema}), ' AND (', "
        f"{conditions}, ')')"
    )
