"""What ``alter_ulid_storage(online=True)`` refuses on PostgreSQL, as check steps.

Each check is SQL (a guard true when the op must refuse, and the text it
refuses with), asked online before any change and written as the script's
first block: the online op and the script refuse the same things with the
same words. All but the first few apply only while the column is still in
``from_storage``: a conversion done, or one the other way to undo, is no
reason to refuse.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..._errors import InvalidULID
from .._names import shadow_name_pg
from .._plan.step import Step
from .catalog import IN_RUNNER, column_where, literal, rewrite_users

if TYPE_CHECKING:
    from .._storage._target import Target

__all__ = ["INHERITED", "in_place_checks", "storage_checks"]

#: Why a partitioned table, a partition or a table with inheritance is
#: refused: the shadow column, the trigger, the copy, the concurrent index
#: builds and the swap all act on one table on its own.
INHERITED = (
    "partitioned, a partition or in an inheritance tree: online=True converts a "
    "table on its own (its shadow column, trigger, copy, concurrent index builds "
    "and swap do not reach partitions or inherited tables)"
)
_PARAM = re.compile(r"(?<!:):([a-z_]+)\b")
_NOTHING = "; nothing was changed"
_REBUILT = (
    " with a WHERE clause, expressions, INCLUDE columns, DESC or NULLS FIRST or another "
    "method than btree"
)


def _attribute(t: Target, name: str, where: str = "TRUE") -> str:
    return column_where(t.table_lit, name, where)


def _check(label: str, guard: str, *message: str, error: type[ValueError] = ValueError) -> Step:
    return Step(label, "check", guard=guard, message=" || ".join(message), error=error)


def _as_from_kind(t: Target) -> str:
    """The column as a value of ``from_storage``, SQL that parses whatever the column's type.

    A guard is parsed whole before it runs: a column already converted
    must still parse in the value check, which its gate then skips.
    """
    cast = {"uuid": "::text::uuid", "binary": "::text::bytea"}.get(t.from_kind, "::text")
    return f"{t.column}{cast}"


def storage_checks(t: Target) -> list[Step]:
    """The checks of the conversion ``t``, in the order they are asked."""
    rel = f"to_regclass({t.table_lit})"
    op = literal(f"{t.op}: ")
    where = literal(f"{t.table_name}.{t.column_name}")
    nothing = literal(_NOTHING)
    frm, to = literal(t.from_kind), literal(t.to_kind)
    # Still in from_storage: what follows applies to a conversion to make.
    todo = f"({t.col_kind} IS NOT DISTINCT FROM {frm})"
    catalog = t.catalog
    tables = f"({literal(t.table_name)})"
    triggers = _inline(catalog.triggers, schema=t.schema_sql, tables=tables)
    views = _inline(catalog.views, schema=t.schema_sql, tables=tables)
    dependants = _inline(
        catalog.dependants,
        table=t.table_lit,
        column=t.column_lit,
        same=t.same_lit,
        check=t.check_lit,
    )
    options = (
        f"SELECT * FROM ({_inline(catalog.index_options, schema=t.schema_sql, table=literal(t.table_name), column=t.column_lit)}) "  # noqa: E501
        "AS o(relname, method, pred, exprs, incl, ord, rest) "
        "WHERE o.relname NOT LIKE '%\\_\\_ulid' "
        "AND (o.method <> 'btree' OR o.pred OR o.exprs OR o.incl OR o.ord OR o.rest <> '')"
    )
    constraints = (
        "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_constraint c "
        f"ON c.conindid = x.indexrelid AND c.conrelid = x.indrelid WHERE x.indrelid = {rel} "
        "AND (c.contype NOT IN ('p', 'u') OR c.condeferrable) AND EXISTS (SELECT 1 FROM "
        "pg_attribute a WHERE a.attrelid = x.indrelid AND a.attnum = ANY (x.indkey) "
        f"AND a.attname = {t.column_lit})"
    )
    foreign = (
        "FROM pg_constraint c JOIN pg_attribute a ON a.attname = "
        f"{t.column_lit} AND a.attrelid = {rel} WHERE c.contype = 'f' AND ((c.conrelid = {rel} "
        f"AND a.attnum = ANY (c.conkey)) OR (c.confrelid = {rel} AND a.attnum = ANY (c.confkey)))"
    )
    # Index names are the schema's: a relation of the name an index is built
    # again under made the swap refuse after the whole copy, on every rerun.
    rebuilt = shadow_name_pg("i.relname", "__ulid")
    taken = (
        "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class s "
        f"ON s.relnamespace = i.relnamespace AND s.relname = {rebuilt} "
        f"WHERE x.indrelid = {rel} AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = "
        f"x.indrelid AND a.attnum = ANY (x.indkey) AND a.attname = {t.column_lit}) AND NOT EXISTS "
        "(SELECT 1 FROM pg_index y WHERE y.indexrelid = s.oid AND y.indrelid = x.indrelid)"
    )
    keys = f"(SELECT count(*) FROM pg_index i, unnest(i.indkey) k WHERE i.indrelid = {rel} AND i.indisprimary)"  # noqa: E501
    column_row = (
        "FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = "
        f"a.attnum WHERE a.attrelid = {rel} AND a.attname = {t.column_lit} AND a.attnum > 0 "
        "AND NOT a.attisdropped"
    )
    default = f"(SELECT pg_get_expr(d.adbin, d.adrelid) {column_row})"
    literal_default = f"substring({default} FROM '^''([^'']*)''')"
    default_bad = f"{default} !~ '^''[^'']*''(::[a-z ]+)?$'" + (
        f" OR {t.bad_value(literal_default)}" if t.from_kind in ("text", "hex") else ""
    )
    checks = [
        _check(
            "outside a transaction",
            # The online runner asks its checks in a transaction of its own.
            f"now() <> statement_timestamp() AND {IN_RUNNER} IS NOT TRUE",
            literal(
                f"{t.op}: run this script outside a transaction (not psql -1 or "
                "--single-transaction, not after BEGIN): its blocks commit phase by phase; "
                "nothing was changed"
            ),
        ),
        _check(
            "table", f"{rel} IS NULL", op, literal(f"there is no table {t.table_name!r}"), nothing
        ),
        _check(
            "not inherited",
            f"EXISTS (SELECT 1 FROM pg_class WHERE oid = {rel} AND (relkind = 'p' OR EXISTS "
            "(SELECT 1 FROM pg_inherits WHERE inhrelid = oid OR inhparent = oid)))",
            op,
            literal(f"{t.table_name} is {INHERITED}"),
            nothing,
        ),
        _check(
            "column",
            f"NOT {_attribute(t, t.column_lit)}",
            op,
            literal(f"{t.table_name} has no column {t.column_name!r}"),
            nothing,
        ),
        _check(
            "column type",
            f"{t.col_kind} IS DISTINCT FROM {frm} AND {t.col_kind} IS DISTINCT FROM {to}",
            op,
            where,
            "' is '",
            f"(SELECT format_type(a.atttypid, a.atttypmod) {column_row})",
            literal(
                f", which is neither {t.from_kind} nor {t.to_kind} storage: nothing was changed"
            ),
        ),
        _check(
            "shadow name",
            f"{todo} AND {_attribute(t, t.shadow_lit)} AND {t.shadow_kind} IS DISTINCT FROM {to}",
            op,
            literal(f"{t.table_name} already has a column "),
            t.shadow_lit,
            literal(", the name this op gives the converted values: rename that column first"),
        ),
        _check(
            "trigger name",
            f"{todo} AND NOT {_attribute(t, t.shadow_lit)} AND EXISTS (SELECT 1 FROM pg_trigger "
            f"WHERE tgrelid = {rel} AND tgname = {t.trigger_lit})",
            op,
            literal("a trigger named "),
            t.trigger_lit,
            literal(" exists already, the name this op gives its own: rename it first"),
            nothing,
        ),
        _check(
            "foreign keys",
            f"{todo} AND EXISTS (SELECT 1 {foreign})",
            op,
            where,
            literal(" is used by foreign keys ("),
            f"(SELECT string_agg(c.conname, ', ' ORDER BY c.conname) {foreign})",
            literal(
                f"); nothing was changed. Drop those foreign keys, convert the key and every "
                f"column referencing it with {t.op}, then create the foreign keys again "
                "(see 'Keys with foreign keys' in the docs)"
            ),
        ),
        _check(
            "single-column primary key",
            f"{todo} AND {keys} <> 1",
            literal(
                f"{t.op}(online=True) needs a single-column primary key on {t.table_name} "
                "to walk it in batches; it has "
            ),
            f"{keys}::text",
            literal(" columns"),
        ),
        _check(
            "triggers and views",
            f"{todo} AND (EXISTS (SELECT 1 FROM ({triggers}) AS t(n, r) WHERE t.n <> "
            f"{t.trigger_lit}) OR EXISTS (SELECT 1 FROM ({views}) AS v(n, r)))",
            op,
            literal("triggers or views depend on "),
            literal(t.table_name),
            "' ('",
            f"(SELECT string_agg(DISTINCT d.n, ', ') FROM (SELECT n FROM ({triggers}) AS t(n, r) "
            f"WHERE t.n <> {t.trigger_lit} UNION SELECT n FROM ({views}) AS v(n, r)) AS d)",
            literal(
                f"), and their SQL may name {t.column_name}, which the swap replaces; nothing "
                "was changed. Drop them before the conversion and create them again after it"
            ),
        ),
        _check(
            "nothing else uses the column",
            f"{todo} AND EXISTS ({dependants})",
            op,
            where,
            literal(" is used by "),
            f"(SELECT string_agg(DISTINCT d.n, ', ') FROM ({dependants}) AS d(n))",
            literal(
                ": the swap drops the old column, which would drop them or fail; nothing was "
                "changed. Drop them before the conversion and create them again after it"
            ),
        ),
        _check(
            "indexes built again the same",
            f"{todo} AND EXISTS ({options})",
            f"(SELECT {op} || 'the index ' || o.relname || ' uses ' || {t.column_lit} || CASE "
            f"WHEN o.rest = '' OR o.method <> 'btree' OR o.pred OR o.exprs OR o.incl OR o.ord "
            f"THEN {literal(_REBUILT)} ELSE ' with ' || o.rest END || "
            f"{literal(', which this op does not build again' + _NOTHING)} FROM ({options}) AS o "
            "ORDER BY o.relname LIMIT 1)",
        ),
        _check(
            "index names free",
            f"{todo} AND EXISTS (SELECT 1 {taken})",
            op,
            literal("the index "),
            f"(SELECT min(i.relname || ' is built again as ' || s.relname) {taken})",
            literal(
                ", a name another relation of the schema has: rename that relation first; "
                "nothing was changed"
            ),
        ),
        _check(
            "constraints built again the same",
            f"{todo} AND EXISTS (SELECT 1 {constraints})",
            op,
            literal("the constraint "),
            f"(SELECT min(i.relname) {constraints})",
            literal(
                f" uses {t.column_name} in a way this op does not build again (exclusion or "
                "deferrable): nothing was changed"
            ),
        ),
        _check(
            "default carried",
            f"{todo} AND {default} IS NOT NULL AND ({default_bad})",
            op,
            where,
            literal(" has DEFAULT "),
            default,
            literal(
                ", which cannot be carried to the new storage; nothing was changed. Drop the "
                "default, convert, then set a new one"
            ),
        ),
    ]
    if t.nullable is not None:
        checks.append(
            _check(
                "nullable as given",
                f"{todo} AND {_attribute(t, t.column_lit, 'a.attnotnull')} = {'TRUE' if t.nullable else 'FALSE'}",  # noqa: E501
                op,
                where,
                literal(
                    f" is {'NOT NULL' if t.nullable else 'nullable'}, but the op was given "
                    f"nullable={t.nullable}"
                ),
                nothing,
            )
        )
    if t.bad is not None:
        value = _as_from_kind(t)
        bad = f"FROM {t.table} WHERE {t.column} IS NOT NULL AND {t.bad_value(value)}"
        checks.append(
            _check(
                "values",
                f"CASE WHEN {todo} THEN EXISTS (SELECT 1 {bad}) ELSE FALSE END",
                op,
                where,
                literal(f" holds values that are not {t.values_name} (e.g. "),
                "(SELECT string_agg(v, ', ') FROM (SELECT quote_literal("
                f"{t.column}::text) AS v {bad} LIMIT 3) AS e)",
                "')'",
                nothing,
                error=InvalidULID,
            )
        )
    return checks


def _inline(query: str | None, **params: str) -> str:
    """``query`` with its ``:name`` parameters replaced by the given SQL (literals)."""
    assert query is not None

    def value(match: re.Match[str]) -> str:
        return params.get(match.group(1), match.group(0))

    return _PARAM.sub(value, query)


def in_place_checks(t: Target) -> list[Step]:
    """What the one-transaction op refuses besides (asked online, and first in its script).

    A view or rule reading the column: PostgreSQL refuses its ``ALTER ...
    TYPE``, after the op has read the column.
    """
    users = rewrite_users(t.table_lit, t.column_lit)
    return [
        _check(
            "views and rules",
            f"({t.col_kind} IS NOT DISTINCT FROM {literal(t.from_kind)}) AND EXISTS ({users})",
            literal(f"{t.op}: {t.table_name}.{t.column_name} is read by "),
            f"(SELECT string_agg(DISTINCT u.name, ', ') FROM ({users}) AS u)",
            literal(
                ", and PostgreSQL changes the type of no column a view or rule uses; nothing "
                "was changed. Drop them before the conversion and create them again after it"
            ),
        )
    ]
