"""The plan of ``alter_ulid_storage(..., online=True)``: read, checked, before any DDL.

Everything the online conversion refuses is refused here, with a
``ValueError`` naming the object: foreign keys, views and triggers on the
table, indexes it would not build the same, a table without a
single-column primary key, a DEFAULT it cannot carry, values that are not
ULIDs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..._dialects import dialect_row, key_conversion_sql
from .._inspect import column_state, foreign_keys_on, index_features, quote, safe_name
from .._names import dialect_shadow_name, legacy_shadow_name, resumed_name
from ._values import check_text

if TYPE_CHECKING:
    from ._op import AlterULIDStorageOp

__all__ = ["INHERITED", "Index", "Plan", "build_plan"]

#: Why a partitioned table, a partition or a table with inheritance is
#: refused: the shadow column, the trigger, the copy, the concurrent index
#: builds and the swap all act on one table on its own.
INHERITED = (
    "partitioned, a partition or in an inheritance tree: online=True converts a "
    "table on its own (its shadow column, trigger, copy, concurrent index builds "
    "and swap do not reach partitions or inherited tables)"
)


@dataclass
class Index:
    """An index that uses the column, to be built again on the shadow."""

    name: str
    columns: list[str]
    unique: bool
    #: "p" or "u": the index backs that constraint (its name is the index's)
    constraint: str | None
    #: the index built on the shadow before the swap
    shadow: str = ""


@dataclass
class Plan:
    table: str
    column: str
    schema: str | None
    key: str
    key_type: str
    from_kind: str
    to_kind: str
    new_type: str
    nullable: bool
    default: str | None
    comment: str | None
    shadow: str
    trigger: str
    function: str
    check: str
    #: the CHECK that the shadow holds the converted value in every row
    same: str
    indexes: list[Index] = field(default_factory=list)

    def q(self, connection: Connection, name: str, schema: bool = False) -> str:
        return quote(connection.dialect, name, self.schema if schema else None)


def build_plan(connection: Connection, op: AlterULIDStorageOp) -> Plan | None:

    dialect = connection.dialect
    sql = op.convert_sql(dialect_row(dialect))
    assert sql is not None
    from_kind, to_kind = op.kind(op.from_storage, dialect), op.kind(op.to_storage, dialect)
    if from_kind == to_kind:
        raise ValueError(
            f"{op.from_storage!r} and {op.to_storage!r} are both {from_kind} storage "
            f"on {dialect.name}: nothing to convert"
        )
    if not sa.inspect(connection).has_table(op.table_name, schema=op.schema):
        raise ValueError(f"there is no table {op.table_name!r}; nothing was changed")
    table_sql = quote(dialect, op.table_name, op.schema)
    if connection.execute(
        sa.text(
            "SELECT relkind = 'p' OR EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = oid "
            "OR inhparent = oid) FROM pg_class WHERE oid = to_regclass(:table)"
        ),
        {"table": table_sql},
    ).scalar():
        raise ValueError(f"{op.table_name} is {INHERITED}; nothing was changed")
    state = column_state(connection, op.table_name, op.column_name, op.schema)
    if state is None:
        raise ValueError(f"{op.table_name} has no column {op.column_name!r}")
    shadow = safe_name(f"{op.column_name}__ulid", dialect)
    shadow_state = column_state(connection, op.table_name, shadow, op.schema)
    found = op.found_kind(state.type, None)
    if found == to_kind and shadow_state is None:
        return None  # converted already (a rerun after success)
    if found != from_kind:
        raise ValueError(
            f"{op.table_name}.{op.column_name} is {state.type}, which is neither "
            f"{from_kind} nor {to_kind} storage: nothing was changed"
        )
    if shadow_state is not None and op.found_kind(shadow_state.type, None) != to_kind:
        raise ValueError(
            f"{op.table_name} already has a column {shadow!r} of type {shadow_state.type}, "
            "the name this op gives the converted values: rename that column first"
        )
    references = foreign_keys_on(connection, op.table_name, op.column_name, op.schema)
    if references:
        raise ValueError(
            f"{op.table_name}.{op.column_name} is used by foreign keys "
            f"({'; '.join(references)}); nothing was changed. Drop those foreign keys, "
            f"convert the key and every column referencing it with {op.op_name}, "
            "then create the foreign keys again (see 'Keys with foreign keys' in the docs)"
        )
    inspector = sa.inspect(connection)
    keys = inspector.get_pk_constraint(op.table_name, schema=op.schema)["constrained_columns"]
    if len(keys) != 1:
        raise ValueError(
            f"{op.op_name}(online=True) needs a single-column primary key on "
            f"{op.table_name} to walk it in batches; it has {len(keys) or 'none'}"
        )
    names = f"{op.table_name}_{op.column_name}"
    plan = Plan(
        table=op.table_name,
        column=op.column_name,
        schema=op.schema,
        key=keys[0],
        key_type=_type_of(connection, table_sql, keys[0]),
        from_kind=from_kind,
        to_kind=to_kind,
        new_type=_compiled(op.column_type(op.to_storage, dialect), dialect),
        # The column's own nullability is carried (SET NOT NULL is phase 5).
        nullable=state.nullable,
        default=op.default_in(state.default, dialect, sql, to_kind),
        comment=state.comment,
        shadow=shadow,
        trigger=safe_name(f"{names}__ulid_sync", dialect),
        function=safe_name(f"{names}__ulid_sync", dialect),
        check=safe_name(f"ck_{names}__ulid_not_null", dialect),
        same=safe_name(f"ck_{names}__ulid_same", dialect),
    )
    _refuse_dependants(connection, plan)
    _refuse_used(connection, plan)
    plan.indexes = _indexes(connection, plan)
    if op.checked_before(from_kind):
        column_sql = quote(dialect, op.column_name)
        todo = sql.bad_text(column_sql, from_kind)
        if shadow_state is not None:
            todo = f"{quote(dialect, shadow)} IS NULL AND {todo}"
        check_text(connection, table_sql, column_sql, todo, op)
    return plan


def _compiled(type_: sa.types.TypeEngine[Any], dialect: Any) -> str:
    """The column type as the dialect spells it (a TypeDecorator's implementation)."""
    if isinstance(type_, sa.types.TypeDecorator):
        type_ = type_.load_dialect_impl(dialect)
    return str(type_.compile(dialect=dialect))


def _type_of(connection: Connection, table: str, column: str) -> str:
    """The column's type as the server spells it, without its collation (for a CAST)."""
    return str(
        connection.execute(
            sa.text(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = to_regclass(:table) AND attname = :column"
            ),
            {"table": table, "column": column},
        ).scalar_one()
    )


def _catalog_schema(connection: Connection, plan: Plan) -> str | None:
    """The schema the table is in: current_schema() may be another one.

    current_schema() is the first schema on the search_path that exists;
    the table may be found in a later one (as with a ``"$user"`` schema).
    """
    if plan.schema is not None:
        return plan.schema
    found: str | None = connection.execute(
        sa.text(
            "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.oid = to_regclass(:table)"
        ),
        {"table": plan.q(connection, plan.table)},
    ).scalar()
    return found


def _refuse_dependants(connection: Connection, plan: Plan) -> None:
    """Refuse views and triggers (other than ours): their SQL names the column."""
    sql = key_conversion_sql(connection.dialect)
    assert sql is not None
    schema = _catalog_schema(connection, plan)
    for what, query in (("triggers", sql.triggers), ("views", sql.views)):
        statement = sa.text(query).bindparams(sa.bindparam("tables", expanding=True))
        rows = connection.execute(statement, {"schema": schema, "tables": [plan.table]})
        names = sorted(name for name, _ in rows if name != plan.trigger)
        if names:
            raise ValueError(
                f"{what} depend on {plan.table} ({', '.join(names)}), and their SQL may "
                f"name {plan.column}, which the swap replaces; nothing was changed. Drop "
                "them before the conversion and create them again after it"
            )


def _refuse_used(connection: Connection, plan: Plan) -> None:
    """Refuse what uses the column and would not survive the swap's ``DROP COLUMN``."""
    sql = key_conversion_sql(connection.dialect)
    assert sql is not None
    assert sql.dependants is not None
    found = connection.execute(
        sa.text(sql.dependants),
        {
            "table": plan.q(connection, plan.table, schema=True),
            "column": plan.column,
            "same": plan.same,
            "check": plan.check,
        },
    ).scalars()
    names = sorted(set(found))
    if names:
        raise ValueError(
            f"{plan.table}.{plan.column} is used by {', '.join(names)}: the swap drops the "
            "old column, which would drop them or fail; nothing was changed. Drop them "
            "before the conversion and create them again after it"
        )


def _indexes(connection: Connection, plan: Plan) -> list[Index]:
    """The indexes on the column, refusing those the op would not build the same."""
    sql = key_conversion_sql(connection.dialect)
    assert sql is not None
    assert sql.index_options is not None
    params = {
        "schema": _catalog_schema(connection, plan),
        "table": plan.table,
        "column": plan.column,
    }
    for row in sorted(connection.execute(sa.text(sql.index_options), params).all()):
        # The shadow's own indexes (a rerun) are built by this op.
        found = [] if row[0].endswith("__ulid") else index_features(row)
        if found:
            raise ValueError(
                f"the index {row[0]} on {plan.table} uses {plan.column} with "
                f"{', '.join(found)}, which this op does not build again: nothing was "
                "changed. Drop the index before the conversion and create it after it"
            )
    rows = connection.execute(
        sa.text(
            "SELECT i.relname, x.indisunique, c.contype, c.condeferrable, "
            "ARRAY(SELECT a.attname FROM unnest(x.indkey) WITH ORDINALITY k(n, o) "
            "JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.n ORDER BY k.o) "
            "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
            "LEFT JOIN pg_constraint c ON c.conindid = x.indexrelid AND c.conrelid = x.indrelid "
            "WHERE x.indrelid = to_regclass(:table) AND EXISTS (SELECT 1 FROM pg_attribute a "
            "WHERE a.attrelid = x.indrelid AND a.attnum = ANY (x.indkey) AND a.attname = :column)"
        ),
        {"table": quote(connection.dialect, plan.table, plan.schema), "column": plan.column},
    ).all()
    # Shadow indexes an earlier release named (SHA-1 of a long name): resumed as they are.
    existing = set(
        connection.execute(
            sa.text(
                "SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
                "WHERE x.indrelid = to_regclass(:table)"
            ),
            {"table": quote(connection.dialect, plan.table, plan.schema)},
        ).scalars()
    )
    indexes: list[Index] = []
    for name, unique, contype, deferrable, names in sorted(rows):
        if contype not in (None, "p", "u") or deferrable:
            raise ValueError(
                f"the constraint {name} on {plan.table} uses {plan.column} in a way this op "
                "does not build again (exclusion or deferrable): nothing was changed"
            )
        indexes.append(
            Index(
                name,
                list(names),
                bool(unique),
                contype,
                resumed_name(
                    dialect_shadow_name(name, "__ulid", connection.dialect),
                    legacy_shadow_name(name, "__ulid", connection.dialect),
                    existing,
                ),
            )
        )
    return indexes
