"""What a database holds after an op, read by its catalog, for two runs to be compared.

The objects of the test's schema (tables, views, sequences, routines), each
table's full shape (PostgreSQL: columns with type, nullability, DEFAULT and
comment, constraints with their definitions, indexes, triggers, sequences;
MariaDB: ``SHOW CREATE TABLE`` and triggers), and rows read by queries, the
random part of new ids left out. Only the catalog: no module of the library.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

#: Every version table of these tests starts so: dropped with the tables, left out of snapshots.
VERSION_PREFIX = "eqv_version"


def objects(engine: Engine, other: str | None = None) -> set[tuple[str, str]]:
    """Every table, view, sequence and routine of the test's schema (or database).

    On PostgreSQL, ``other`` is a second schema to list too (its names qualified).
    """
    with engine.connect() as conn:
        rows = conn.execute(sa.text(_OBJECTS[engine.url.get_backend_name()]), {"s": other}).all()
    return {(kind, name) for kind, name in rows if not name.startswith(VERSION_PREFIX)}


_OBJECTS = {
    "postgresql": (
        "SELECT 'relation', CASE WHEN n.nspname = current_schema() THEN relname "
        "ELSE n.nspname || '.' || relname END FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname IN (current_schema(), :s) AND c.relkind IN ('r', 'p', 'v', 'm', 'S') "
        "UNION ALL SELECT 'function', p.oid::regprocedure::text FROM pg_proc p "
        "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname IN (current_schema(), :s)"
    ),
    "mysql": (
        "SELECT 'relation', table_name FROM information_schema.tables "
        "WHERE table_schema = DATABASE() AND :s IS NULL "
        "UNION ALL SELECT 'routine', CONCAT(routine_type, ' ', routine_name) "
        "FROM information_schema.routines WHERE routine_schema = DATABASE()"
    ),
}


def reset(engine: Engine, baseline: set[tuple[str, str]], other: str | None = None) -> None:
    """Drop every object not in ``baseline`` (and the projects' version tables)."""
    with engine.connect() as conn:
        extra = objects(engine, other) - baseline
        sql = sa.text(_OBJECTS[engine.url.get_backend_name()])
        versions = conn.execute(sql, {"s": other}).all()
    extra |= {(kind, name) for kind, name in versions if name.startswith(VERSION_PREFIX)}
    quote = engine.dialect.identifier_preparer.quote
    with engine.begin() as conn:
        if engine.url.get_backend_name() == "mysql":
            conn.exec_driver_sql("SET SESSION foreign_key_checks = 0")
        for kind, name in sorted(extra):
            if kind == "relation":
                cascade = " CASCADE" if engine.url.get_backend_name() == "postgresql" else ""
                qualified = ".".join(quote(part) for part in name.split(".", 1))
                conn.exec_driver_sql(f"DROP TABLE IF EXISTS {qualified}{cascade}")
            elif kind == "function":
                conn.exec_driver_sql(f"DROP FUNCTION IF EXISTS {name} CASCADE")
            else:
                routine, routine_name = name.split(" ", 1)
                conn.exec_driver_sql(f"DROP {routine} IF EXISTS {quote(routine_name)}")


def schema(engine: Engine, tables: list[str], other: str | None = None) -> dict[str, Any]:
    """What the op leaves, by the catalog: the objects there and each table's full shape.

    A table may be ``schema.table`` (PostgreSQL), in ``other``.
    """
    found: dict[str, Any] = {"objects": sorted(objects(engine, other))}
    with engine.connect() as conn:
        for table in tables:
            found[table] = _SHAPES[engine.url.get_backend_name()](conn, table)
    return found


def _pg_shape(conn: Connection, table: str) -> dict[str, Any]:
    namespace, _, name = table.rpartition(".")
    oid = conn.execute(
        sa.text("SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = coalesce(:n, current_schema()) AND c.relname = :t"),
        {"t": name, "n": namespace or None},
    ).scalar_one()  # fmt: skip
    queries = {
        "columns": "SELECT attname, format_type(atttypid, atttypmod), attnotnull, "
        "pg_get_expr(d.adbin, d.adrelid), col_description(attrelid, attnum), attidentity "
        "FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid "
        "AND d.adnum = a.attnum WHERE attrelid = :o AND attnum > 0 AND NOT attisdropped "
        "ORDER BY attnum",
        "constraints": "SELECT conname, contype, pg_get_constraintdef(oid), convalidated, "
        "obj_description(oid, 'pg_constraint') FROM pg_constraint WHERE conrelid = :o "
        "ORDER BY conname",
        "indexes": "SELECT c.relname, pg_get_indexdef(x.indexrelid), x.indisvalid, "
        "x.indisprimary, x.indisreplident, obj_description(c.oid, 'pg_class') FROM pg_index x "
        "JOIN pg_class c ON c.oid = x.indexrelid WHERE x.indrelid = :o ORDER BY c.relname",
        "triggers": "SELECT tgname FROM pg_trigger WHERE tgrelid = :o AND NOT tgisinternal "
        "ORDER BY tgname",
        "sequences": "SELECT a.attname, pg_get_serial_sequence(:t, a.attname) "
        "FROM pg_attribute a WHERE attrelid = :o AND attnum > 0 AND NOT attisdropped "
        "AND pg_get_serial_sequence(:t, a.attname) IS NOT NULL ORDER BY 1",
        "comment": "SELECT obj_description(:o, 'pg_class')",
    }
    quote = conn.dialect.identifier_preparer.quote
    quoted = ".".join(quote(part) for part in table.split(".")).replace("%%", "%")
    return {
        name: [tuple(row) for row in conn.execute(sa.text(sql), {"o": oid, "t": quoted})]
        for name, sql in queries.items()
    }


def _mariadb_shape(conn: Connection, table: str) -> dict[str, Any]:
    quoted = conn.dialect.identifier_preparer.quote(table)
    triggers = conn.execute(
        sa.text("SELECT trigger_name FROM information_schema.triggers "
                "WHERE event_object_schema = DATABASE() AND event_object_table = :t "
                "ORDER BY trigger_name"), {"t": table}
    ).scalars().all()  # fmt: skip
    return {
        "create": conn.exec_driver_sql(f"SHOW CREATE TABLE {quoted}").one()[1],
        "triggers": list(triggers),
    }


_SHAPES: dict[str, Callable[[Connection, str], dict[str, Any]]] = {
    "postgresql": _pg_shape,
    "mysql": _mariadb_shape,
}


def rows(engine: Engine, queries: list[str], fresh: bool) -> list[list[tuple[Any, ...]]]:
    """The rows of ``queries``; with ``fresh``, a new id (16 bytes or a UUID) is its millisecond.

    The random part of a new ULID or UUIDv7 differs between two runs; its time
    part (the first 48 bits) and its rank, which the queries read with a
    window function, must not.
    """
    found: list[list[tuple[Any, ...]]] = []
    for sql in queries:
        try:
            with engine.connect() as conn:
                found.append(
                    [tuple(_value(v, fresh) for v in row) for row in conn.exec_driver_sql(sql)]
                )
        except sa.exc.DBAPIError as exc:  # a state half-way through: a column not there yet
            found.append([("cannot read", type(exc.orig).__name__)])
    return found


def _value(value: Any, fresh: bool) -> Any:
    if isinstance(value, str) and len(value) == 36 and value.count("-") == 4:
        value = uuid.UUID(value)
    if isinstance(value, bytes | bytearray) and len(value) == 16:
        value = uuid.UUID(bytes=bytes(value))
    if isinstance(value, uuid.UUID):
        return ("ms", value.int >> 80) if fresh else value
    if isinstance(value, datetime):
        return value.replace(tzinfo=None)
    return value


def state(
    engine: Engine, tables: list[str], queries: list[str], fresh: bool, other: str | None = None
) -> dict[str, Any]:
    """Schema and data together: what two runs must agree on."""
    return {**schema(engine, tables, other), "rows": rows(engine, queries, fresh)}


def diff(left: dict[str, Any], right: dict[str, Any]) -> str:
    """A short account of where two states differ (for assertion messages)."""
    lines = []
    for key in sorted(set(left) | set(right)):
        if left.get(key) != right.get(key):
            lines.append(f"{key}:\n  A: {left.get(key)!r:.1500}\n  B: {right.get(key)!r:.1500}")
    return "\n".join(lines)
