"""The plan of ``add_ulid_column(online=True)`` / ``add_uuid7_column(online=True)`` on PostgreSQL.

1. checks: the table, a single-column primary key, the time column and its
   type, and a column of the new name of another type;
2. ``ADD COLUMN`` (nullable: no rewrite); with ``server_default=True``
   ``SET DEFAULT`` the database's generator;
3. the fill, a batch a transaction, in key order (ids made in Python
   online, in SQL by the script);
4. ``CHECK (col IS NOT NULL) NOT VALID`` (instant), ``VALIDATE`` (a scan
   writers do not wait for), ``SET NOT NULL`` (instant: the check proves
   it), the check dropped;
5. with ``unique=True``: an INVALID index left by an interrupted build
   dropped, ``CREATE UNIQUE INDEX CONCURRENTLY``, then ``ADD CONSTRAINT ...
   UNIQUE USING INDEX``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._offline import _MILLIS_BY_TYPE, _dollar_quoted
from .._plan.step import Plan, Step, null_fill_step
from .catalog import (
    column_default_missing,
    column_exists,
    column_nullable,
    constraint_exists,
    index_named,
    literal,
    unique_elsewhere,
)

if TYPE_CHECKING:
    from .._add import AddNames

__all__ = ["plan_add_column"]


_OTHER = ", not {type} (storage={storage!r}); nothing was changed"
_MS = "substring(int8send(b.ms) FROM 3)"
#: The 16 bytes of an id, by key kind: 48 bits of milliseconds, then the
#: row's rank among the batch's rows of its millisecond (a ULID: 16 bits,
#: then 64 random ones; a UUIDv7: version 7 and a 12-bit counter, then the
#: variant and 62 random bits, which a v4 UUID's last 8 bytes are).
_BYTES = {
    "ulid": f"{_MS} || substring(int4send(b.rank::int) FROM 3) || "
    "substring(uuid_send(gen_random_uuid()) FROM 1 FOR 8)",
    "uuid7": f"{_MS} || substring(int4send(28672 + b.rank::int) FROM 3) || "
    "substring(uuid_send(gen_random_uuid()) FROM 9 FOR 8)",
}
_NAMES = {"ulid": "ULID", "uuid7": "UUIDv7"}
_PARTITIONED = (
    "{op}: {table} is a partitioned table, where PostgreSQL builds no index "
    "CONCURRENTLY and no unique index that leaves out the partition key; nothing was "
    "changed. Pass unique=False, then make a unique index of the partition key and the "
    "new column if you need one"
)


def _checks(n: AddNames) -> list[Step]:
    t, when, col = literal(n.table_sql), literal(n.from_column), literal(n.column)
    attr = (
        "FROM pg_attribute a WHERE a.attrelid = to_regclass({t}) AND a.attname = {c} "
        "AND a.attnum > 0 AND NOT a.attisdropped"
    )
    time_attr = attr.format(t=t, c=when)
    new_attr = attr.format(t=t, c=col)
    checks = [
        Step(
            "table exists",
            "check",
            guard=f"to_regclass({t}) IS NULL",
            message=literal(f"{n.op_name}: there is no table {n.table_sql}"),
        ),
        Step(
            "single-column primary key",
            "check",
            guard=(
                "NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = "
                f"to_regclass({t}) AND i.indisprimary AND i.indnkeyatts = 1)"
            ),
            message=(
                f"{literal(f'{n.op_name}(online=True) needs a single-column primary key on ')} || "
                f"{literal(f'{n.table} to walk it in batches; it has ')} || "
                "(SELECT count(*) FROM pg_index i, unnest(i.indkey) k WHERE i.indrelid = "
                f"to_regclass({t}) AND i.indisprimary) || ' columns'"
            ),
        ),
        Step(
            "time column exists",
            "check",
            guard=f"NOT {column_exists(t, when)}",
            message=literal(f"{n.op_name}: there is no column {n.table}.{n.from_column}"),
        ),
        Step(
            "time column type",
            "check",
            guard=f"EXISTS (SELECT 1 {time_attr} AND ({_MILLIS_BY_TYPE}) IS NULL)",
            message=(
                f"(SELECT {literal(f'{n.op_name}: {n.table}.{n.from_column} is ')} || "
                f"format_type(a.atttypid, a.atttypmod) || "
                f"{literal(', not a timestamp or an integer of Unix milliseconds')} {time_attr})"
            ),
        ),
        Step(
            "no other column of the name",
            "check",
            guard=f"EXISTS (SELECT 1 {new_attr} AND a.atttypid <> {literal(n.type_sql)}::regtype)",
            message=(
                f"(SELECT {literal(f'{n.table}.{n.column} exists as ')} || "
                "format_type(a.atttypid, a.atttypmod) || "
                f"{literal(_OTHER.format(type=n.type_sql.lower(), storage=n.storage))} "
                f"{new_attr})"
            ),
        ),
    ]
    if n.unique:
        # Index names are the schema's: another table's index, a table or a
        # sequence of that name made the build fail after the whole fill.
        name = literal(n.constraint)
        checks.append(
            Step(
                "unique name free",
                "check",
                guard=f"EXISTS (SELECT 1 FROM pg_class c WHERE c.relname = {name} AND "
                "c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = "
                f"to_regclass({t})) AND NOT EXISTS (SELECT 1 FROM pg_index x "
                f"WHERE x.indexrelid = c.oid AND x.indrelid = to_regclass({t})))",
                message=literal(
                    f"{n.op_name}: the name {n.constraint} of the unique constraint is taken by "
                    "another relation of the schema; nothing was changed. Pass "
                    "constraint_name= another name"
                ),
            )
        )
        checks.append(
            Step(
                "unique on a partitioned table",
                "check",
                guard=f"EXISTS (SELECT 1 FROM pg_class WHERE oid = to_regclass({t}) "
                "AND relkind = 'p')",
                message=literal(_PARTITIONED.format(op=n.op_name, table=n.table)),
            )
        )
    return checks


#: The first server version (``server_version_num``) with a generator of its own
#: (PostgreSQL 18's ``uuidv7()``); before it, the installed function.
_BUILTIN_FROM = (18,)


def _set_default(n: AddNames) -> str:
    """``SET DEFAULT`` the generator of the server the statement runs on.

    Online the connection knows the server's version, a script does not:
    one statement that asks the server serves both, so they set the same.
    """
    assert n.default_sql is not None
    assert n.default_for is not None
    alter = f"ALTER TABLE {n.table_sql} ALTER COLUMN {n.column_sql} SET DEFAULT "
    older, newer = n.default_for((_BUILTIN_FROM[0] - 1,)), n.default_for(_BUILTIN_FROM)
    if older == newer:
        return alter + n.default_sql
    return "DO " + _dollar_quoted(
        "dflt",
        f" BEGIN IF current_setting('server_version_num')::int >= {_BUILTIN_FROM[0] * 10000} "
        f"THEN {alter}{newer}; ELSE {alter}{older}; END IF; END ",
    )


def plan_add_column(n: AddNames, online: Any = None) -> Plan:
    """The op's plan; ``online`` (a Backfill) gives the fill its Python body."""
    t, col = literal(n.table_sql), literal(n.column)
    table, column = n.table_sql, n.column_sql
    check, unique = literal(n.check), literal(n.constraint)
    nullable = column_nullable(t, col)
    has_check = constraint_exists(t, check, "c.contype = 'c'")
    not_validated = constraint_exists(t, check, "c.contype = 'c' AND NOT c.convalidated")
    steps = _checks(n)
    steps.append(
        Step(
            "add column",
            "ddl",
            (f"ALTER TABLE {table} ADD COLUMN {column} {n.type_sql}",),
            guard=f"NOT {column_exists(t, col)}",
        )
    )
    if n.default_sql is not None:
        steps.append(
            Step(
                "set default",
                "ddl",
                (_set_default(n),),
                guard=column_default_missing(t, col),
            )
        )
    steps.append(_fill(n, online, nullable))
    check_sql = n.check_sql
    steps += [
        Step(
            "not null check",
            "ddl",
            (
                f"ALTER TABLE {table} ADD CONSTRAINT {check_sql} "
                f"CHECK ({column} IS NOT NULL) NOT VALID",
            ),
            guard=f"{nullable} AND NOT {has_check}",
        ),
        Step(
            "validate",
            "ddl",
            (f"ALTER TABLE {table} VALIDATE CONSTRAINT {check_sql}",),
            guard=f"{nullable} AND {not_validated}",
            refill=True,
        ),
        Step(
            "set not null",
            "ddl",
            (f"ALTER TABLE {table} ALTER COLUMN {column} SET NOT NULL",),
            guard=nullable,
        ),
        Step(
            "drop not null check",
            "ddl",
            (f"ALTER TABLE {table} DROP CONSTRAINT {check_sql}",),
            guard=has_check,
        ),
    ]
    if n.unique:
        name = n.constraint_sql
        steps += [
            Step(
                "drop invalid unique index",
                "concurrent",
                (f"DROP INDEX CONCURRENTLY IF EXISTS {n.constraint_qualified}",),
                guard=index_named(t, unique, "NOT x.indisvalid"),
            ),
            Step(
                "unique index",
                "concurrent",
                (f"CREATE UNIQUE INDEX CONCURRENTLY {name} ON {table} ({column})",),
                guard=f"NOT {index_named(t, unique)} AND NOT {unique_elsewhere(t, col, unique)}",
            ),
            Step(
                "unique constraint",
                "ddl",
                (f"ALTER TABLE {table} ADD CONSTRAINT {name} UNIQUE USING INDEX {name}",),
                guard=(
                    f"NOT {constraint_exists(t, unique)} "
                    f"AND {index_named(t, unique, 'x.indisvalid')}"
                ),
            ),
        ]
    return Plan(
        op=n.op_name,
        target=n.target,
        steps=tuple(steps),
        lock_timeout=n.lock_timeout,
        batch_size=n.batch_size,
        pause=n.pause,
        schema=n.schema,
    )


def _fill(n: AddNames, online: Any, nullable: str) -> Step:
    """The backfill: Python ids online (``online``: a Backfill), SQL ids offline."""
    ulid = _BYTES[n.key]
    if n.kind == "uuid":
        ulid = f"encode({ulid}, 'hex')::uuid"
    # The batch is a format() template: a % of a name or of the message is
    # doubled there; %1$I is the key column, %2$s the row's milliseconds.
    out_of_range = literal(
        f"{n.op_name}: {n.table}.{n.from_column} is out of the {_NAMES[n.key]} range "
        "(1970 to 10889) or NULL: "
    ).replace("%", "%%")
    table_f, column_f, when_f = (
        x.replace("%", "%%") for x in (n.table_sql, n.column_sql, n.from_sql)
    )
    batch = (
        f"UPDATE {table_f} AS t SET {column_f} = s.ulid FROM ("
        f"SELECT b.k, {ulid} AS ulid FROM ("
        "SELECT c.k, c.ms, row_number() OVER (PARTITION BY c.ms ORDER BY c.k) AS rank FROM ("
        "SELECT r.k, CASE WHEN r.m BETWEEN 0 AND 281474976710655 THEN r.m ELSE "
        f"({out_of_range} || coalesce(r.v::text, 'NULL'))::bigint END AS ms "
        f"FROM (SELECT %1$I AS k, {when_f} AS v, %2$s AS m FROM {table_f} "
        f"WHERE {column_f} IS NULL ORDER BY %1$I LIMIT {n.batch_size}) AS r"
        ") AS c) AS b) AS s "
        f"WHERE t.%1$I = s.k AND t.{column_f} IS NULL"
    )
    t, when = literal(n.table_sql), literal(n.from_column)
    pause = f"\n      PERFORM pg_sleep({n.pause:g});" if n.pause else ""
    script = f"""\
    SELECT a.attname INTO key_column FROM pg_index i
      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
      WHERE i.indrelid = to_regclass({t}) AND i.indisprimary AND i.indnkeyatts = 1;
    SELECT {_MILLIS_BY_TYPE} INTO millis FROM pg_attribute a
      WHERE a.attrelid = to_regclass({t}) AND a.attname = {when}
      AND a.attnum > 0 AND NOT a.attisdropped;
    LOOP
      EXECUTE format({_dollar_quoted("batch", batch)}, key_column, millis);
      GET DIAGNOSTICS filled = ROW_COUNT;
      EXIT WHEN filled = 0;
      total := total + filled;
      RAISE NOTICE '{n.op_name}: % rows of % filled', total, {literal(f"{n.table}.{n.column}")};
      COMMIT;{pause}
    END LOOP;"""
    declare = "  key_column name;\n  millis text;\n  filled bigint;\n  total bigint := 0;\n"

    return null_fill_step(
        table=n.table,
        column=n.column,
        table_sql=n.table_sql,
        column_sql=n.column_sql,
        nullable=nullable,
        script=script,
        declare=declare,
        online=online,
    )
