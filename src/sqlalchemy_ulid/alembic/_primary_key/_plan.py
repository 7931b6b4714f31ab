"""The plan of a primary-key conversion: found by reflection, checked, described.

``op.convert_primary_key_to_ulid`` and ``op.restore_legacy_primary_key``
(``_ops``) first build a :class:`Plan` here: the key column, every
column that references it (directly or through other referencing columns,
self-references included), the foreign keys and indexes to drop and
recreate, and the row counts. Everything they refuse is refused while the
plan is built, before any DDL. The plan is stored in a small table
(``ulid_key_conversions``) before the first change, so a rerun after a kill
continues the same plan even after foreign keys were dropped.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..._dialects import key_conversion_sql
from ..._types import Storage, ULIDType
from .._inspect import check_identifier, column_state, quote, run, safe_name
from .._names import shadow_column
from .._plan.database import database_for
from ._checks import ConversionRefused, has_shadow, refuse_unsafe

__all__ = [
    "STATE_TABLE",
    "ConversionRefused",
    "ForeignKeyDef",
    "IndexDef",
    "KeyColumn",
    "Plan",
    "build_plan",
    "describe",
]

Direction = Literal["ulid", "legacy"]

#: The table that remembers a conversion in progress (one row per table).
STATE_TABLE = "ulid_key_conversions"


@dataclass(frozen=True)
class KeyColumn:
    """A column whose values change: the key itself, or one that references it."""

    table: str
    column: str
    #: the column's type now, as the database's DDL
    type_sql: str
    nullable: bool
    #: the column is its table's whole primary key: the constraint's name
    #: ("" where the database does not name it)
    primary_key: str | None
    #: the (table, column) it references; None for the converted key
    parent: tuple[str, str] | None
    #: the column added beside it to receive the new values
    shadow: str
    #: the column's comment, given again to the column that replaces it
    comment: str | None = None
    #: its NOT NULL constraint's name (PostgreSQL 18+), given again likewise
    not_null: str | None = None
    #: the comment on its primary key (its constraint's, or its index's on MariaDB),
    #: given again likewise
    pk_comment: str | None = None


@dataclass(frozen=True)
class ForeignKeyDef:
    """A foreign key dropped before the swap and recreated after it."""

    name: str
    table: str
    column: str
    referred_table: str
    referred_column: str
    ondelete: str | None
    onupdate: str | None
    deferrable: bool | None = None
    initially: str | None = None
    match: str | None = None
    #: its comment, given back after the swap (``None``: none)
    comment: str | None = None
    #: false for PostgreSQL's NOT VALID, recreated NOT VALID
    validated: bool = True


@dataclass(frozen=True)
class IndexDef:
    """An index on a referencing column, dropped with it and recreated."""

    name: str
    table: str
    columns: tuple[str, ...]
    unique: bool
    #: its comment, given back after the swap (``None``: none)
    comment: str | None = None
    #: the index of a unique constraint (PostgreSQL), dropped and added as one
    constraint: bool = False
    #: the DDL that creates it again, as the catalog prints it (PostgreSQL: its
    #: storage parameters and NULLS NOT DISTINCT with it); None: from its columns
    definition: str | None = None


@dataclass
class Plan:
    """Everything a conversion will do, fixed before its first change."""

    direction: Direction
    schema: str | None
    table: str
    key: str
    legacy_id: str
    #: the type the changed columns get, as the database's DDL
    new_type: str
    #: the key first, then each referencing column after what it references
    columns: list[KeyColumn]
    foreign_keys: list[ForeignKeyDef]
    indexes: list[IndexDef]
    rows: dict[str, int]
    #: the unique constraint that keeps the legacy values unique
    legacy_unique: str
    from_time: str | None = None
    storage: str = "auto"
    notes: list[str] = field(default_factory=list)

    @property
    def tables(self) -> list[str]:
        """The tables the conversion changes, in plan order, each once."""
        return list(dict.fromkeys(c.table for c in self.columns))

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        raw = json.loads(text)
        raw["columns"] = [
            KeyColumn(**{**c, "parent": tuple(c["parent"]) if c["parent"] else None})
            for c in raw["columns"]
        ]
        raw["foreign_keys"] = [ForeignKeyDef(**f) for f in raw["foreign_keys"]]
        raw["indexes"] = [IndexDef(**{**i, "columns": tuple(i["columns"])}) for i in raw["indexes"]]
        return cls(**raw)


def _compiled(type_: sa.types.TypeEngine[Any], connection: Connection) -> str:
    return str(type_.compile(dialect=connection.dialect))


def build_plan(
    connection: Connection,
    table: str,
    *,
    direction: Direction,
    legacy_id: str,
    schema: str | None,
    storage: Storage = "auto",
    from_time: str | None = None,
) -> Plan:
    """Reflect the key and everything that references it; refuse what is unsafe.

    Raises:
        ConversionRefused: the table has no single-column key of the right
            type, a foreign key in another schema or a composite foreign
            key references it, or a trigger or view uses one of the tables.
    """
    dialect = connection.dialect
    if key_conversion_sql(dialect) is None:
        raise ConversionRefused(
            f"primary-key conversion supports PostgreSQL and MariaDB/MySQL, not {dialect.name}; "
            "on SQLite, recreate the tables with batch_alter_table"
        )
    inspector = sa.inspect(connection)
    if not inspector.has_table(table, schema=schema):
        raise ConversionRefused(f"there is no table {table!r}")
    key = _single_key(inspector, table, schema, "the table to convert")
    if key is None:
        raise ConversionRefused(f"{table} has no primary key")
    columns = {c["name"]: c for c in inspector.get_columns(table, schema=schema)}
    key_type = columns[key]["type"]
    check_identifier(legacy_id, "legacy_id", dialect)
    suffix = "__ulid" if direction == "ulid" else "__legacy"
    if direction == "ulid":
        if not isinstance(key_type, (sa.Integer, sa.Uuid)):
            raise ConversionRefused(
                f"{table}.{key} is {_compiled(key_type, connection)}: only integer and UUID "
                "primary keys are converted"
            )
        if legacy_id in columns:
            raise ConversionRefused(f"{table} already has a column {legacy_id!r} (legacy_id=)")
        if from_time is not None and from_time not in columns:
            raise ConversionRefused(f"{table} has no column {from_time!r} (from_time=)")
        new_type = _compiled(ULIDType(storage).load_dialect_impl(dialect), connection)
    else:
        if legacy_id not in columns:
            raise ConversionRefused(f"{table} has no column {legacy_id!r} to restore the key from")
        new_type = _compiled(columns[legacy_id]["type"], connection)
    pk_name = inspector.get_pk_constraint(table, schema=schema).get("name") or ""
    root = KeyColumn(
        table,
        key,
        _compiled(key_type, connection),
        False,
        pk_name,
        None,
        shadow_column(key, suffix, dialect, columns),
    )
    plan = Plan(
        direction=direction,
        schema=schema,
        table=table,
        key=key,
        legacy_id=legacy_id,
        new_type=new_type,
        columns=[root],
        foreign_keys=[],
        indexes=[],
        rows={},
        legacy_unique=safe_name(f"uq_{table}_{legacy_id}", dialect),
        from_time=from_time,
        storage=storage,
    )
    _follow_references(connection, inspector, plan, suffix)
    _read_catalog(connection, plan)
    refuse_unsafe(connection, inspector, plan)
    for name in plan.tables:
        count = connection.scalar(
            sa.select(sa.func.count()).select_from(sa.table(name, schema=schema))
        )
        plan.rows[name] = int(count or 0)
    if direction == "ulid" and from_time is not None:
        nulls = connection.scalar(
            sa.select(sa.func.count())
            .select_from(sa.table(table, sa.column(from_time), schema=schema))
            .where(sa.column(from_time).is_(None))
        )
        if nulls:
            raise ConversionRefused(
                f"{table}.{from_time} is NULL in {nulls} rows: fill them before deriving "
                "ULIDs from it"
            )
    return plan


def _single_key(inspector: Any, table: str, schema: str | None, what: str) -> str | None:
    keys = list(inspector.get_pk_constraint(table, schema=schema)["constrained_columns"])
    if len(keys) > 1:
        raise ConversionRefused(
            f"{what}, {table}, has a composite primary key ({', '.join(keys)}): "
            "only single-column keys are converted"
        )
    return keys[0] if keys else None


def _follow_references(connection: Connection, inspector: Any, plan: Plan, suffix: str) -> None:
    """Add every column that references a changing column, until none is left."""
    fks = inspector.get_multi_foreign_keys(schema=plan.schema)
    changing = [(plan.table, plan.key)]
    seen = set(changing)
    while changing:
        parent = changing.pop(0)
        for (_, table), table_fks in sorted(fks.items(), key=lambda item: item[0][1]):
            for fk in table_fks:
                if fk["referred_table"] != parent[0] or parent[1] not in fk["referred_columns"]:
                    continue
                if fk.get("referred_schema") not in (None, plan.schema):
                    continue
                if len(fk["constrained_columns"]) != 1:
                    raise ConversionRefused(
                        f"the composite foreign key {fk['name']} on {table}"
                        f"({', '.join(fk['constrained_columns'])}) references {parent[0]}: "
                        "only single-column foreign keys are converted"
                    )
                column = fk["constrained_columns"][0]
                options = fk.get("options") or {}
                kept = ("ondelete", "onupdate", "deferrable", "initially", "match")
                plan.foreign_keys.append(
                    ForeignKeyDef(fk["name"], table, column, *parent, *map(options.get, kept))
                )
                if (table, column) in seen:
                    continue
                seen.add((table, column))
                changing.append((table, column))
                names = [c["name"] for c in inspector.get_columns(table, schema=plan.schema)]
                shadow = shadow_column(column, suffix, connection.dialect, names)
                plan.columns.append(
                    _referencing(connection, inspector, plan, table, column, parent, shadow)
                )
                for index in inspector.get_indexes(table, schema=plan.schema):
                    if column in index["column_names"] and index["name"]:
                        definition = IndexDef(
                            index["name"],
                            table,
                            tuple(index["column_names"]),
                            bool(index["unique"]),
                        )
                        if definition not in plan.indexes:
                            plan.indexes.append(definition)


def _read_catalog(connection: Connection, plan: Plan) -> None:
    """What reflection leaves out (comments, NOT VALID, NOT NULL names): the swap keeps it."""
    catalog = database_for(connection.dialect).key_catalog

    def value(expression: Callable[..., str], table: str, name: str) -> Any:
        table_sql = quote(connection.dialect, table, plan.schema)
        return run(connection, f"SELECT {expression(table_sql, table, plan.schema, name)}").scalar()

    def read(expression: Callable[..., str], table: str, name: str) -> str | None:
        comment = value(expression, table, name)
        return None if comment is None else str(comment)

    plan.foreign_keys = [
        replace(
            fk,
            comment=read(catalog.constraint_comment, fk.table, fk.name),
            validated=bool(value(catalog.foreign_key_validated, fk.table, fk.name)),
        )
        for fk in plan.foreign_keys
    ]
    plan.columns = [
        replace(
            c,
            not_null=read(catalog.not_null_name, c.table, c.column) if c.parent else None,
            pk_comment=read(catalog.primary_key_comment, c.table, c.primary_key)
            if c.primary_key is not None
            else None,
        )
        for c in plan.columns
    ]
    indexes = []
    for ix in plan.indexes:
        constraint = bool(value(catalog.unique_constraint, ix.table, ix.name))
        comment = read(
            catalog.constraint_comment if constraint else catalog.index_comment, ix.table, ix.name
        )
        definition = read(catalog.index_definition, ix.table, ix.name)
        indexes.append(replace(ix, comment=comment, constraint=constraint, definition=definition))
    plan.indexes = indexes


def _referencing(
    connection: Connection,
    inspector: Any,
    plan: Plan,
    table: str,
    column: str,
    parent: tuple[str, str],
    shadow: str,
) -> KeyColumn:
    info = next(c for c in inspector.get_columns(table, schema=plan.schema) if c["name"] == column)
    pk = inspector.get_pk_constraint(table, schema=plan.schema)
    keys = list(pk["constrained_columns"])
    state = column_state(connection, table, column, plan.schema)
    if column in keys and len(keys) > 1:
        raise ConversionRefused(
            f"{table}.{column} references {parent[0]} and is part of the composite primary "
            f"key ({', '.join(keys)}) of {table}: only single-column keys are converted"
        )
    return KeyColumn(
        table,
        column,
        _compiled(info["type"], connection),
        bool(info["nullable"]),
        (pk.get("name") or "") if keys == [column] else None,
        parent,
        shadow,
        state.comment if state is not None else None,
    )


# -- the dry run ------------------------------------------------------------------


def describe(plan: Plan, done: list[str]) -> str:
    """The plan as text: tables with row counts, columns, constraints, phases."""
    verb = (
        "convert_primary_key_to_ulid" if plan.direction == "ulid" else "restore_legacy_primary_key"
    )
    if plan.direction == "ulid":
        source = f"dated from {plan.from_time}" if plan.from_time else "dated now"
        head = (
            f"{verb}: {plan.table}.{plan.key} becomes a ULID ({plan.new_type})\n"
            f"  new ids {source}; the old values stay in {plan.table}.{plan.legacy_id}"
        )
    else:
        head = f"{verb}: {plan.table}.{plan.key} gets back its values from {plan.legacy_id}"
    lines = [head, "tables:"]
    lines += [f"  {name}: {plan.rows.get(name, 0)} rows" for name in plan.tables]
    lines.append("columns:")
    for c in plan.columns:
        role = (
            "primary key"
            if c.parent is None
            else f"references {c.parent[0]}.{c.parent[1]}" + (" (nullable)" if c.nullable else "")
        )
        lines.append(f"  {c.table}.{c.column}: {c.type_sql} -> {plan.new_type}, {role}")
    lines.append("constraints dropped and recreated:")
    for fk in plan.foreign_keys:
        lines.append(
            f"  foreign key {fk.name}: {fk.table}({fk.column}) -> "
            f"{fk.referred_table}({fk.referred_column})"
        )
    for ix in plan.indexes:
        kind = "unique index" if ix.unique else "index"
        lines.append(f"  {kind} {ix.name}: {ix.table}({', '.join(ix.columns)})")
    for c in plan.columns:
        if c.primary_key is not None:
            lines.append(f"  primary key {c.primary_key or 'PRIMARY'}: {c.table}({c.column})")
    lines.append("phases:")
    for number, (name, text) in enumerate(phases(plan), start=1):
        mark = " (done)" if name in done else ""
        lines.append(
            textwrap.fill(
                f"{number}. {text}{mark}", width=84, initial_indent="  ", subsequent_indent="     "
            )
        )
    return "\n".join(lines)


def phases(plan: Plan) -> list[tuple[str, str]]:
    """The phases in order: (the name recorded when it is done, what it does)."""
    shadows = ", ".join(f"{c.table}.{c.shadow}" for c in plan.columns if has_shadow(plan, c))
    result = [("prepare", f"record the plan in {STATE_TABLE}; add {shadows} (nullable)")]
    if plan.direction == "ulid":
        result.append(
            ("fill:" + plan.table, f"fill {plan.table}.{plan.columns[0].shadow} with new ULIDs")
        )
    for c in plan.columns[1:]:
        parent = c.parent[0] if c.parent else plan.table
        result.append(
            (f"fill:{c.table}.{c.column}", f"fill {c.table}.{c.shadow} by a join on {parent}")
        )
    result.append(
        (
            "swap",
            "swap (one transaction on PostgreSQL, under ACCESS EXCLUSIVE locks; on MariaDB "
            "under LOCK TABLES ... WRITE): catch up rows written meanwhile, drop the foreign "
            "keys, swap the columns and the primary keys, recreate indexes and foreign keys",
        )
    )
    return result
