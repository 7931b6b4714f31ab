"""The names and SQL pieces of the offline (``--sql``) storage conversion script.

The script is written without a database: what online reads from the
catalog before it starts (the column's type and nullability, its DEFAULT
and COMMENT, the primary key, the indexes) the script reads as it runs.
Every phase asks the same two questions first: is the conversion in
progress (the column in ``from_storage``, the shadow in ``to_storage``
beside it), or done (the column in ``to_storage``, no shadow)?
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ..._convert_sql import ConvertSQL
from .._inspect import quote, safe_name, unescape_percent
from .._names import shadow_name_pg
from .._offline import _literal
from ._online import STATE_TABLE
from ._plan import _compiled

if TYPE_CHECKING:
    from ._op import AlterULIDStorageOp

__all__ = [
    "Names",
    "build_indexes",
    "drop_invalid_indexes",
    "inline",
    "names_for",
    "shadow_index_sql",
]

#: Where a conversion template takes the value to convert (``format()``'s %1$s).
_SLOT = "\x00value\x00"
_PARAM = re.compile(r"(?<!:):([a-z_]+)\b")


@dataclass(frozen=True)
class Names:
    """Every name the script uses: quoted for SQL, and as literals for the catalog."""

    op: str
    table: str  # quoted, schema-qualified
    table_lit: str  # the quoted name as a literal, for to_regclass()
    schema_prefix_lit: str  # '"schema".' or '' as a literal
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
    state_lit: str
    row: str  # WHERE clause of this conversion's row in the state table
    row_values: str  # its two values, for an INSERT
    from_kind: str
    to_kind: str
    new_type: str
    #: SQL converting the column (``converted``), ``NEW``'s column
    #: (``converted_new``), and a format() template converting %1$s
    converted: str
    converted_new: str
    convert_template: str
    #: SQL true for a non-NULL column value that may not be converted (None: none)
    bad: str | None
    col_kind: str  # SQL: the kind the column holds now (NULL: no such column)
    shadow_kind: str
    in_progress: str  # SQL true while the conversion is under way


def names_for(op: AlterULIDStorageOp, dialect: Any, sql: ConvertSQL) -> Names:
    """Compute the script's names for ``op`` (the same names the online op uses)."""
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
    table_lit = _literal(table)

    def kind_of(name: str) -> str:
        return (
            f"(SELECT {kind_sql(op, 'a')} FROM pg_attribute a WHERE a.attrelid = "
            f"to_regclass({table_lit}) AND a.attname = {_literal(name)} "
            "AND a.attnum > 0 AND NOT a.attisdropped)"
        )

    shadow = quote(dialect, shadow_name)
    checked = op.checked_before(from_kind)
    return Names(
        op=op.op_name,
        table=table,
        table_lit=table_lit,
        schema_prefix_lit=_literal(prefix),
        column=column,
        column_lit=_literal(op.column_name),
        shadow=shadow,
        shadow_lit=_literal(shadow_name),
        trigger=quote(dialect, trigger),
        trigger_lit=_literal(trigger),
        function=quote(dialect, trigger, op.schema),
        function_lit=_literal(quote(dialect, trigger, op.schema) + "()"),
        check=quote(dialect, check),
        check_lit=_literal(check),
        same=quote(dialect, same),
        same_lit=_literal(same),
        state=quote(dialect, STATE_TABLE, op.schema),
        state_lit=_literal(quote(dialect, STATE_TABLE, op.schema)),
        row=f"table_name = {_literal(op.table_name)} AND column_name = {_literal(op.column_name)}",
        row_values=f"{_literal(op.table_name)}, {_literal(op.column_name)}",
        from_kind=from_kind,
        to_kind=to_kind,
        new_type=_compiled(op.column_type(op.to_storage, dialect), dialect),
        converted=sql.convert(column, from_kind, to_kind),
        converted_new=sql.convert(f"NEW.{column}", from_kind, to_kind),
        convert_template=template,
        bad=sql.bad_text(column, from_kind) if checked else None,
        col_kind=kind_of(op.column_name),
        shadow_kind=kind_of(shadow_name),
        in_progress=(
            f"{kind_of(op.column_name)} = {_literal(from_kind)} "
            f"AND {kind_of(shadow_name)} = {_literal(to_kind)}"
        ),
    )


def kind_sql(op: AlterULIDStorageOp, alias: str) -> str:
    """SQL naming the storage kind a ``pg_attribute`` row holds, by the op's own rules.

    The op decides from a reflected type (``found_kind``); the script asks
    it about each type the catalog may hold, once, while it is written.
    """

    def kind(type_: sa.types.TypeEngine[Any]) -> str:
        found = op.found_kind(type_, None)
        return "NULL" if found is None else _literal(found)

    by_length = " ".join(f"WHEN {n} THEN {kind(sa.CHAR(n))}" for n in (26, 32, 36))
    return (
        f"CASE WHEN {alias}.atttypid = 'uuid'::regtype THEN {kind(sa.Uuid())} "
        f"WHEN {alias}.atttypid = 'bytea'::regtype THEN {kind(sa.LargeBinary())} "
        f"WHEN {alias}.atttypid IN ('bpchar'::regtype, 'varchar'::regtype, 'text'::regtype) "
        f"THEN CASE {alias}.atttypmod - 4 {by_length} ELSE {kind(sa.String())} END END"
    )


def shadow_index_sql(name: str) -> str:
    """SQL of the name an index (named by the SQL ``name``) gets on the shadow column.

    :func:`~.._names.shadow_name`, as online. The name lasts only until the
    swap, which gives the index its own back.
    """
    return shadow_name_pg(name, "__ulid")


def inline(query: str, **params: str) -> str:
    """``query`` with its ``:name`` parameters replaced by the given SQL (literals)."""

    def value(match: re.Match[str]) -> str:
        return params.get(match.group(1), match.group(0))

    return _PARAM.sub(value, query)


def drop_invalid_indexes(n: Names) -> str:
    r"""psql: a SELECT whose rows (run by ``\gexec``) drop INVALID indexes on the shadow."""
    return (
        "SELECT format('DROP INDEX CONCURRENTLY IF EXISTS %I.%I', s.nspname, i.relname) "
        "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        "JOIN pg_namespace s ON s.oid = i.relnamespace "
        "JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = ANY (x.indkey) "
        f"WHERE x.indrelid = to_regclass({n.table_lit}) AND NOT x.indisvalid "
        f"AND a.attname = {n.shadow_lit} \\gexec"
    )


def build_indexes(n: Names) -> str:
    r"""psql: a SELECT whose rows (run by ``\gexec``) build the missing shadow indexes."""
    columns = (
        f"(SELECT string_agg(quote_ident(CASE WHEN a.attname = {n.column_lit} "
        f"THEN {n.shadow_lit} ELSE a.attname END), ', ' ORDER BY k.o) "
        "FROM unnest(x.indkey) WITH ORDINALITY k(n, o) "
        "JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.n)"
    )
    return (
        "SELECT format('CREATE %sINDEX CONCURRENTLY %I ON %s (%s)', "
        f"CASE WHEN x.indisunique THEN 'UNIQUE ' ELSE '' END, {shadow_index_sql('i.relname')}, "
        f"{n.table_lit}, {columns}) "
        "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        f"WHERE x.indrelid = to_regclass({n.table_lit}) AND ({n.in_progress}) "
        "AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = x.indrelid "
        f"AND a.attnum = ANY (x.indkey) AND a.attname = {n.column_lit}) "
        "AND NOT EXISTS (SELECT 1 FROM pg_class s WHERE s.relnamespace = i.relnamespace "
        f"AND s.relname = {shadow_index_sql('i.relname')}) ORDER BY i.relname \\gexec"
    )
