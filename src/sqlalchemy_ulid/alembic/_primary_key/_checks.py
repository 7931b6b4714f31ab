"""What a primary-key conversion refuses, checked while its plan is built.

Each check reads the catalog (or reflection) and raises
:class:`ConversionRefused` before any DDL: names the op would add that are
taken, foreign keys reflection missed or that live in another schema,
indexes the op would not recreate as they are, triggers and views.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..._dialects import key_conversion_sql
from .._inspect import index_features, quote

if TYPE_CHECKING:
    from ._plan import KeyColumn, Plan

__all__ = ["ConversionRefused", "has_shadow", "refuse_unsafe"]


class ConversionRefused(ValueError):
    """The key cannot be converted safely; raised before any DDL, nothing changed.

    Example:
        >>> from sqlalchemy_ulid.alembic import ConversionRefused
        >>> issubclass(ConversionRefused, ValueError)
        True
    """


def refuse_unsafe(connection: Connection, inspector: Any, plan: Plan) -> None:
    """Run every check on a new plan (its columns and foreign keys found)."""
    _refuse_unreflected_foreign_keys(connection, plan)
    _refuse_time_type(connection, inspector, plan)
    _refuse_taken_names(inspector, plan)
    _refuse_index_options(connection, plan)
    _refuse_what_drop_column_takes(connection, inspector, plan)
    _refuse_other_schemas(connection, plan)
    _refuse_orphans(connection, plan)
    _refuse_dependants(connection, plan)
    _refuse_offline_plan(connection, inspector, plan)


def has_shadow(plan: Plan, column: KeyColumn) -> bool:
    """Whether the op adds a shadow column beside ``column``."""
    # Restoring, the key's new values are already in the legacy column.
    return column.parent is not None or plan.direction == "ulid"


def _refuse_unreflected_foreign_keys(connection: Connection, plan: Plan) -> None:
    """Refuse a foreign key to a changing column that reflection did not return.

    SQLAlchemy's MariaDB reflection parses ``SHOW CREATE TABLE`` and skips,
    with only a warning, a foreign key it cannot read (a table name with a
    backtick): its column would keep the old values.
    """
    sql = key_conversion_sql(connection.dialect)
    assert sql is not None
    statement = sa.text(sql.foreign_keys_to).bindparams(sa.bindparam("tables", expanding=True))
    rows = connection.execute(statement, {"schema": plan.schema, "tables": plan.tables}).all()
    changing = {(c.table, c.column) for c in plan.columns}
    found = {
        (table, name) for name, table, referred, column in rows if (referred, column) in changing
    }
    reflected = {(fk.table, fk.name) for fk in plan.foreign_keys}
    missed = sorted(found - reflected)
    if missed:
        named = ", ".join(f"{name} on {table}" for table, name in missed)
        raise ConversionRefused(
            f"the database has foreign keys to the changing columns that reflection could "
            f"not read (a name with a character it cannot parse, such as a backtick): "
            f"{named}. Rename the table or drop those foreign keys first"
        )


def _refuse_time_type(connection: Connection, inspector: Any, plan: Plan) -> None:
    """Refuse a ``from_time`` column that holds neither a timestamp nor integer milliseconds."""
    if plan.direction != "ulid" or plan.from_time is None:
        return
    found = {c["name"]: c["type"] for c in inspector.get_columns(plan.table, schema=plan.schema)}
    type_ = found[plan.from_time]
    if not isinstance(type_, (sa.Integer, sa.DateTime)):
        name = str(type_.compile(dialect=connection.dialect)).lower()
        raise ConversionRefused(
            f"{plan.table}.{plan.from_time} is {name}, not a timestamp or an integer of Unix "
            "milliseconds (a date or a number of seconds would date the ids wrongly)"
        )


def _refuse_taken_names(inspector: Any, plan: Plan) -> None:
    """Refuse a column that already has a name the op would add.

    Called only for a new plan: a shadow column of a stored plan is the
    op's own, and a rerun continues it.
    """
    for column in plan.columns:
        if not has_shadow(plan, column):
            continue
        found = {c["name"]: c for c in inspector.get_columns(column.table, schema=plan.schema)}
        comment = (found.get(column.shadow) or {}).get("comment") or ""
        # The mark the offline script gives its shadow columns (_offline_pg_plan.marker).
        if comment.startswith("sqlalchemy_ulid: ") and " (offline): " in comment:
            raise ConversionRefused(
                f"{column.table}.{column.shadow} was added by an offline (--sql) script of "
                "this conversion that has not finished: run that script again to finish it "
                "(or drop the shadow columns to abandon it), not the online op"
            )
        if column.shadow in found:
            raise ConversionRefused(
                f"{column.table} already has a column {column.shadow!r}, the name this op "
                f"gives the new values of {column.table}.{column.column} before the swap: "
                "rename that column first"
            )
        if column.parent is None and plan.legacy_id == column.shadow:
            raise ConversionRefused(
                f"legacy_id={plan.legacy_id!r} is the name this op gives the new values of "
                f"{column.table}.{column.column} before the swap: choose another name"
            )


#: What the op recreates with an index (from the catalog's own text of it,
#: ``KeyCatalog.index_definition``), as ``index_options`` names it: the
#: offline script recreates it too.
RECREATED = frozenset({"NULLS NOT DISTINCT", "storage parameters"})


def _refuse_index_options(connection: Connection, plan: Plan) -> None:
    """Refuse an index on a referencing column that would come back different.

    The op drops such an index with the column and recreates it as the
    catalog printed it (PostgreSQL; elsewhere from its name, columns and
    uniqueness). The offline script refuses the same: a WHERE, another
    access method, DESC, INCLUDE columns or expressions.
    """
    sql = key_conversion_sql(connection.dialect)
    assert sql is not None
    if sql.index_options is None:
        return
    for column in plan.columns[1:]:
        rows = connection.execute(
            sa.text(sql.index_options),
            {"schema": plan.schema, "table": column.table, "column": column.column},
        ).all()
        if sql.index_own_options is not None:
            own = connection.execute(
                sa.text(sql.index_own_options),
                {"schema": plan.schema, "table": column.table, "column": column.column},
            ).all()
            for name, what in sorted(own):
                raise ConversionRefused(
                    f"the index {name} on {column.table} uses {column.table}.{column.column} "
                    f"with {what}, which this op does not recreate: drop the "
                    "index before the conversion and create it again after it"
                )
        for row in sorted(rows):
            *head, rest = tuple(row)
            kept = [what for what in str(rest or "").split(", ") if what not in RECREATED]
            found = index_features((*head, ", ".join(w for w in kept if w)))
            if found:
                raise ConversionRefused(
                    f"the index {row[0]} on {column.table} uses {column.table}.{column.column} "
                    f"with {', '.join(found)}, which this op does not recreate: drop the "
                    "index before the conversion and create it again after it"
                )


#: What the swap's ``DROP COLUMN`` would take, as the refusal names it (the
#: MariaDB offline script builds the same words in SQL).
TAKEN_DEFAULT = "its DEFAULT"
TAKEN_FOREIGN_KEY = (
    "the foreign key {name} on {table} references {referred}, which this op does not convert"
)
TAKEN_END = (
    ": the swap drops the old column, which would drop them or fail; nothing was changed. "
    "Drop them before the conversion and create them again after it"
)


def _refuse_what_drop_column_takes(connection: Connection, inspector: Any, plan: Plan) -> None:
    """Refuse what the swap's ``DROP COLUMN`` would take with a referencing column.

    Its DEFAULT (of the old type), a foreign key to a table whose key does
    not change, and on PostgreSQL what else depends on the column (the
    storage conversion's query: a CHECK or exclusion constraint, a
    generated column, statistics, a policy, column GRANTs): dropped without
    a word, or the ``DROP COLUMN`` fails inside the swap.
    """
    sql = key_conversion_sql(connection.dialect)
    assert sql is not None
    changing = {(c.table, c.column) for c in plan.columns}
    for column in plan.columns[1:]:
        found = []
        info = next(
            c
            for c in inspector.get_columns(column.table, schema=plan.schema)
            if c["name"] == column.column
        )
        if info.get("default") is not None or info.get("identity"):
            found.append(TAKEN_DEFAULT)
        for fk in inspector.get_foreign_keys(column.table, schema=plan.schema):
            referred = set(zip(fk["referred_columns"], fk["constrained_columns"], strict=True))
            # One to a table of another schema never changes (as the script has it).
            elsewhere = fk.get("referred_schema") not in (None, plan.schema)
            if column.column in fk["constrained_columns"] and (
                elsewhere
                or not all((fk["referred_table"], name) in changing for name, _ in referred)
            ):
                found.append(
                    TAKEN_FOREIGN_KEY.format(
                        name=fk["name"], table=column.table, referred=fk["referred_table"]
                    )
                )
        # Where there is no such query, the swap's DROP COLUMN refuses instead.
        if sql.dependants is not None:
            used = connection.execute(
                sa.text(sql.dependants),
                {
                    "table": quote(connection.dialect, column.table, plan.schema),
                    "column": column.column,
                    "same": "",
                    "check": "",
                },
            ).scalars()
            found[:0] = sorted(set(used))
        if found:
            raise ConversionRefused(
                f"{column.table}.{column.column} is used by {', '.join(found)}{TAKEN_END}"
            )


def _refuse_other_schemas(connection: Connection, plan: Plan) -> None:
    """Refuse a foreign key in another schema that references one of the tables."""
    sql = key_conversion_sql(connection.dialect)
    assert sql is not None
    statement = sa.text(sql.foreign_keys_elsewhere).bindparams(
        sa.bindparam("tables", expanding=True)
    )
    rows = connection.execute(statement, {"schema": plan.schema, "tables": plan.tables}).all()
    if rows:
        named = ", ".join(sorted(f"{name} on {schema}.{table}" for name, schema, table, _ in rows))
        raise ConversionRefused(
            "foreign keys in other schemas reference the tables, and this op only alters "
            f"tables in the key's own schema: {named}. Drop them first and recreate them "
            "after the conversion"
        )


def _refuse_orphans(connection: Connection, plan: Plan) -> None:
    """Refuse a NOT VALID foreign key whose rows reference nothing: they get no new value.

    Without it the swap found them after the fills, as rows "written
    meanwhile", and refused after the shadow columns were added.
    """
    for fk in plan.foreign_keys:
        if fk.validated:
            continue
        child = sa.table(fk.table, sa.column(fk.column), schema=plan.schema)
        parent = sa.table(fk.referred_table, sa.column(fk.referred_column), schema=plan.schema)
        referenced = parent.alias("ulid_parent")
        found = sa.exists().where(referenced.c[fk.referred_column] == child.c[fk.column])
        count = connection.scalar(
            sa.select(sa.func.count())
            .select_from(child)
            .where(child.c[fk.column].is_not(None), ~found)
        )
        if count:
            raise ConversionRefused(
                f"the foreign key {fk.name} on {fk.table} is NOT VALID, and {count} rows of "
                f"{fk.table}.{fk.column} reference no row of {fk.referred_table}: they would "
                f"have no new value. Correct or delete them (then VALIDATE CONSTRAINT "
                f"{fk.name}) before the conversion"
            )


def _refuse_dependants(connection: Connection, plan: Plan) -> None:
    """Refuse triggers and views on the changed tables: their SQL names the columns."""
    sql = key_conversion_sql(connection.dialect)
    assert sql is not None
    tables = plan.tables
    for what, query in (("triggers", sql.triggers), ("views", sql.views)):
        statement = sa.text(query).bindparams(sa.bindparam("tables", expanding=True))
        rows = connection.execute(statement, {"schema": plan.schema, "tables": tables}).all()
        if rows:
            named = ", ".join(sorted(f"{name} (on {table})" for name, table in rows))
            raise ConversionRefused(
                f"{what} depend on the tables whose key columns would change: {named}. "
                "Drop them before the conversion and recreate them after it"
            )


#: Where the MariaDB offline script keeps its steps (``_offline_mariadb_sql``).
OFFLINE_STEPS_TABLE = "ulid_key_conversions_offline"


def _refuse_offline_plan(connection: Connection, inspector: Any, plan: Plan) -> None:
    """Refuse a table the offline (``--sql``) script is converting: its rerun finishes it."""
    if not inspector.has_table(OFFLINE_STEPS_TABLE, schema=plan.schema):
        return
    steps = sa.table(OFFLINE_STEPS_TABLE, sa.column("name"), schema=plan.schema)
    count = connection.scalar(
        sa.select(sa.func.count()).select_from(steps).where(steps.c.name == plan.table)
    )
    if count:
        raise ConversionRefused(
            f"an unfinished offline (--sql) conversion of {plan.table} is stored in "
            f"{OFFLINE_STEPS_TABLE}: run its script again to finish it"
        )
