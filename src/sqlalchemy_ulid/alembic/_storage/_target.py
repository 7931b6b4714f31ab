"""What a storage conversion acts on, named once for its PostgreSQL plan.

The plan (``postgresql/storage.py``) is written without reading the
catalog, so that one plan runs online and renders as a ``psql`` script:
what online once read before it started (the column's type and
nullability, its DEFAULT and COMMENT, the primary key, the indexes) the
plan's guards and statements read as they run. This module gives it every
name, quoted for SQL and as a literal for the catalog, and the op's own
rules (its kinds, its conversion SQL) as SQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ..._dialects import dialect_row, key_conversion_sql
from .._inspect import quote, safe_name, unescape_percent
from .._locks import DEFAULT_LOCK_TIMEOUT
from .._plan.state import STATE_TABLE, literal

if TYPE_CHECKING:
    from ._op import AlterULIDStorageOp

__all__ = ["LEGACY_TABLE", "STATE_LOCK", "Target", "target_of"]

#: The state table of earlier releases (read, and emptied, by the plan).
LEGACY_TABLE = "ulid_storage_conversions"
#: Taken by the transactions that create, join or drop a state table.
STATE_LOCK = f"SELECT pg_advisory_xact_lock(hashtext('sqlalchemy_ulid.{LEGACY_TABLE}'))"

#: Where a conversion template takes the value to convert (``format()``'s %1$s).
_SLOT = "\x00value\x00"


@dataclass(frozen=True)
class Target:
    """Every name of one conversion: quoted for SQL, and as literals for the catalog."""

    op: str
    values_name: str
    table_name: str
    column_name: str
    schema: str | None
    #: the state table's target, ``[schema.]table.column``
    target: str
    table: str  # quoted, schema-qualified
    table_lit: str  # the quoted name as a literal, for to_regclass()
    schema_prefix_lit: str  # '"schema".' or '' as a literal
    #: SQL of the schema the table is in (the op's, or where to_regclass found it)
    schema_sql: str
    column: str
    column_lit: str
    shadow: str
    shadow_lit: str
    trigger: str
    trigger_lit: str
    function: str  # quoted, schema-qualified
    function_lit: str
    check: str
    check_lit: str
    same: str
    same_lit: str
    state: str  # the state table, quoted, schema-qualified
    #: WHERE clause of this conversion's row in the state table
    row: str
    #: the copy position's row in the state table (its step: the last key copied)
    copy_row: str
    copy_op: str
    legacy: str  # the legacy state table, quoted, schema-qualified
    legacy_lit: str  # its quoted name as a literal
    legacy_row: str  # its row's WHERE clause
    from_kind: str
    to_kind: str
    new_type: str
    #: SQL converting the column (``converted``), ``NEW``'s column
    #: (``converted_new``), the column of the table aliased ``t``
    #: (``converted_t``), and a format() template converting %1$s
    converted: str
    converted_new: str
    converted_t: str
    convert_template: str
    #: SQL true for a non-NULL value (at the slot) that may not be converted
    #: (None: none); see :meth:`bad_value`
    bad: str | None
    col_kind: str  # SQL: the kind the column holds now (NULL: no such column)
    shadow_kind: str
    in_progress: str  # SQL true while the conversion is under way
    nullable: bool | None
    lock_timeout: float
    batch_size: int
    pause: float
    #: the catalog queries of the key conversion (triggers, views, ...)
    catalog: Any

    def bad_value(self, value: str) -> str:
        """SQL true when the SQL ``value`` may not be converted (FALSE: none is checked)."""
        return "FALSE" if self.bad is None else self.bad.replace(_SLOT, value)


def target_of(op: AlterULIDStorageOp, dialect: Any) -> Target:
    """Name everything ``op`` acts on (the names online and offline share)."""
    sql = op.convert_sql(dialect_row(dialect))
    assert sql is not None
    from_kind, to_kind = op.kind(op.from_storage, dialect), op.kind(op.to_storage, dialect)
    table = quote(dialect, op.table_name, op.schema)
    column = quote(dialect, op.column_name)
    shadow_name = safe_name(f"{op.column_name}__ulid", dialect)
    base = f"{op.table_name}_{op.column_name}"
    trigger = safe_name(f"{base}__ulid_sync", dialect)
    check = safe_name(f"ck_{base}__ulid_not_null", dialect)
    same = safe_name(f"ck_{base}__ulid_same", dialect)
    preparer = dialect.identifier_preparer
    prefix = "" if op.schema is None else f"{preparer.quote_schema(op.schema)}."
    prefix = unescape_percent(dialect, prefix)
    template = sql.convert(_SLOT, from_kind, to_kind).replace("%", "%%").replace(_SLOT, "(%1$s)")
    table_lit = literal(table)

    def kind_of(name: str) -> str:
        return (
            f"(SELECT {_kind_sql(op, 'a')} FROM pg_attribute a WHERE a.attrelid = "
            f"to_regclass({table_lit}) AND a.attname = {literal(name)} "
            "AND a.attnum > 0 AND NOT a.attisdropped)"
        )

    target = f"{op.table_name}.{op.column_name}"
    if op.schema is not None:
        target = f"{op.schema}.{target}"
    schema_sql = (
        literal(op.schema)
        if op.schema is not None
        else (
            "(SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            f"WHERE c.oid = to_regclass({table_lit}))"
        )
    )
    checked = op.checked_before(from_kind)
    return Target(
        op=op.op_name,
        values_name=op.values_name,
        table_name=op.table_name,
        column_name=op.column_name,
        schema=op.schema,
        target=target,
        table=table,
        table_lit=table_lit,
        schema_prefix_lit=literal(prefix),
        schema_sql=schema_sql,
        column=column,
        column_lit=literal(op.column_name),
        shadow=quote(dialect, shadow_name),
        shadow_lit=literal(shadow_name),
        trigger=quote(dialect, trigger),
        trigger_lit=literal(trigger),
        function=quote(dialect, trigger, op.schema),
        function_lit=literal(quote(dialect, trigger, op.schema) + "()"),
        check=quote(dialect, check),
        check_lit=literal(check),
        same=quote(dialect, same),
        same_lit=literal(same),
        state=quote(dialect, STATE_TABLE, op.schema),
        row=f"op = {literal(op.op_name)} AND target = {literal(target)}",
        copy_row=f"op = {literal(op.op_name + ':copy')} AND target = {literal(target)}",
        copy_op=op.op_name + ":copy",
        legacy=quote(dialect, LEGACY_TABLE, op.schema),
        legacy_lit=literal(quote(dialect, LEGACY_TABLE, op.schema)),
        legacy_row=(
            f"table_name = {literal(op.table_name)} AND column_name = {literal(op.column_name)}"
        ),
        from_kind=from_kind,
        to_kind=to_kind,
        new_type=_compiled(op.column_type(op.to_storage, dialect), dialect),
        converted=sql.convert(column, from_kind, to_kind),
        converted_new=sql.convert(f"NEW.{column}", from_kind, to_kind),
        converted_t=sql.convert(f"t.{column}", from_kind, to_kind),
        convert_template=template,
        bad=sql.bad_text(_SLOT, from_kind) if checked else None,
        col_kind=kind_of(op.column_name),
        shadow_kind=kind_of(shadow_name),
        in_progress=(
            f"{kind_of(op.column_name)} = {literal(from_kind)} "
            f"AND {kind_of(shadow_name)} = {literal(to_kind)}"
        ),
        nullable=op.nullable,
        lock_timeout=DEFAULT_LOCK_TIMEOUT if op.lock_timeout is None else op.lock_timeout,
        batch_size=op.batch_size,
        pause=op.pause,
        catalog=key_conversion_sql(dialect),
    )


def _compiled(type_: sa.types.TypeEngine[Any], dialect: Any) -> str:
    """The column type as the dialect spells it (a TypeDecorator's implementation)."""
    if isinstance(type_, sa.types.TypeDecorator):
        type_ = type_.load_dialect_impl(dialect)
    return str(type_.compile(dialect=dialect))


def _kind_sql(op: AlterULIDStorageOp, alias: str) -> str:
    """SQL naming the storage kind a ``pg_attribute`` row holds, by the op's own rules.

    The op decides from a reflected type (``found_kind``); the plan asks it
    about each type the catalog may hold, once, while it is written.
    """

    def kind(type_: sa.types.TypeEngine[Any]) -> str:
        found = op.found_kind(type_, None)
        return "NULL" if found is None else literal(found)

    by_length = " ".join(f"WHEN {n} THEN {kind(sa.CHAR(n))}" for n in (26, 32, 36))
    return (
        f"CASE WHEN {alias}.atttypid = 'uuid'::regtype THEN {kind(sa.Uuid())} "
        f"WHEN {alias}.atttypid = 'bytea'::regtype THEN {kind(sa.LargeBinary())} "
        f"WHEN {alias}.atttypid IN ('bpchar'::regtype, 'varchar'::regtype, 'text'::regtype) "
        f"THEN CASE {alias}.atttypmod - 4 {by_length} ELSE {kind(sa.String())} END END"
    )
