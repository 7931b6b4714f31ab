"""What the Alembic ops read from the database before they change anything.

Every op checks the state it finds first (so a rerun after an interruption
knows what is already done) and refuses what it cannot finish before its
first DDL statement. The readers here are shared by the ops.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa
from alembic.operations import Operations
from sqlalchemy.engine import Connection, Dialect

from ._catalog import UnsupportedCatalog, catalog_for

_Op = TypeVar("_Op")
_Result = TypeVar("_Result")

__all__ = [
    "ColumnState",
    "check_identifier",
    "column_state",
    "execute",
    "foreign_keys_on",
    "index_features",
    "name_limit",
    "plain_session",
    "quote",
    "refuse_column_checks",
    "run",
    "safe_name",
    "strict_mode",
    "unescape_percent",
    "unique_name",
    "unique_on",
]


def quote(dialect: Dialect, name: str, schema: str | None = None) -> str:
    """Quote a name (schema-qualified) as SQL text, without escaping ``%``.

    The statements built from it are escaped once, as a whole, where they
    are sent (:func:`run`, :func:`execute`): escaping the name here as well
    would double a ``%`` twice.
    """
    preparer = dialect.identifier_preparer
    quoted = preparer.quote(name)
    if schema is not None:
        quoted = f"{preparer.quote_schema(schema)}.{quoted}"
    return unescape_percent(dialect, quoted)


def unescape_percent(dialect: Dialect, sql: str) -> str:
    """Undo the ``%%`` SQLAlchemy's compiler wrote for a format/pyformat driver.

    For SQL text that :func:`run` (or ``lock_safe_ddl``) escapes again as it
    sends it.
    """
    return sql.replace("%%", "%") if _formats_percent(dialect) else sql


def _formats_percent(dialect: Dialect) -> bool:
    # format/pyformat drivers (PyMySQL, psycopg) read % as a placeholder.
    return dialect.paramstyle in ("format", "pyformat")


def run(connection: Connection, statement: str) -> sa.CursorResult[Any]:
    """Send SQL text to the driver, escaping its ``%`` once for the driver."""
    if _formats_percent(connection.dialect):
        statement = statement.replace("%", "%%")
    return connection.exec_driver_sql(statement)


def execute(operations: Operations, statement: str) -> None:
    """Run SQL text online, or write it into the ``--sql`` script offline."""
    if operations.migration_context.as_sql:
        # Alembic renders text as every other statement of the script.
        operations.execute(sa.text(statement))
    else:
        run(operations.get_bind(), statement)


@dataclass(frozen=True)
class ColumnState:
    """A column as the database reports it."""

    type: sa.types.TypeEngine[Any]
    nullable: bool
    #: the DEFAULT's SQL text (None: no default)
    default: str | None
    comment: str | None


def column_state(
    connection: Connection, table: str, column: str, schema: str | None
) -> ColumnState | None:
    """Return the column's type, nullability, default and comment (None: no such column)."""
    catalog = catalog_for(connection.dialect)
    for info in sa.inspect(connection).get_columns(table, schema=schema):
        if catalog.reflected_name(info["name"]) == column:
            # SQLAlchemy cuts long MariaDB DEFAULT expressions short, and
            # misses the COMMENT after a function DEFAULT: the catalog may
            # read the server's own text.
            text = catalog.column_text(connection, table, column, schema)
            default, comment = text or (info.get("default"), info.get("comment"))
            return ColumnState(
                type=info["type"],
                nullable=bool(info["nullable"]),
                default=None if default in (None, "NULL") else str(default),
                comment=comment or None,
            )
    return None


def refuse_column_checks(
    connection: Connection,
    what: str,
    table: str,
    column: str,
    schema: str | None,
    to_convert: Callable[[Any], bool],
) -> None:
    """Refuse CHECK constraints on a column still to convert (``Catalog.column_checks``).

    Written for the present storage, the server checks them against the
    converted values: on MariaDB/MySQL, whose DDL commits statement by
    statement, the conversion failed half-way, the column's type changed.
    """
    outside = not connection.in_transaction()
    names = catalog_for(connection.dialect).column_checks(connection, table, column, schema)
    state = column_state(connection, table, column, schema) if names else None
    if outside and connection.in_transaction():
        connection.commit()  # left as found: the online ops refuse a transaction of another
    if state is not None and to_convert(state.type):
        raise ValueError(
            f"{what}: {table}.{column} is used by the CHECK constraint(s) "
            f"{', '.join(names)}, written for its present storage; nothing was changed. "
            "Drop them before the conversion and create them again after it"
        )


def foreign_keys_on(
    connection: Connection, table: str, column: str, schema: str | None
) -> list[str]:
    """Describe every foreign key that uses the column, from either side."""
    inspector = sa.inspect(connection)
    found = []
    for fk in inspector.get_foreign_keys(table, schema=schema):
        if column in fk["constrained_columns"]:
            found.append(f"{table}.{column} references {fk['referred_table']}")
    for other in inspector.get_table_names(schema=schema):
        for fk in inspector.get_foreign_keys(other, schema=schema):
            if fk["referred_table"] == table and column in fk["referred_columns"]:
                columns = ", ".join(fk["constrained_columns"])
                found.append(f"{other}({columns}) references {table}.{column}")
    return found


def index_features(row: sa.Row[Any] | tuple[Any, ...]) -> list[str]:
    """What an index has beyond its columns, from a row of ``index_options``.

    The row is (name, access method, predicate, expressions, INCLUDE columns,
    ordering, the rest named in a text), as the dialect's
    ``KeyConversionSQL.index_options`` reads it. The ops that rebuild an
    index from its name, columns and uniqueness refuse one with any of
    these: it would be rebuilt without them.
    """
    _, method, predicate, expressions, include, ordering, rest = tuple(row)
    found = [
        what
        for what, present in (
            (f"USING {method}", method != "btree"),
            ("a WHERE clause", predicate),
            ("expressions", expressions),
            ("INCLUDE columns", include),
            ("DESC or NULLS FIRST", ordering),
        )
        if present
    ]
    return found + ([str(rest)] if rest else [])


def unique_on(connection: Connection, table: str, column: str, schema: str | None) -> list[str]:
    """Name the unique constraints and unique indexes on exactly this one column."""
    inspector = sa.inspect(connection)
    names = [
        str(u["name"])
        for u in inspector.get_unique_constraints(table, schema=schema)
        if u["column_names"] == [column] and u["name"]
    ]
    names += [
        str(i["name"])
        for i in inspector.get_indexes(table, schema=schema)
        if i["unique"] and i["column_names"] == [column] and i["name"] not in names
    ]
    return names


def safe_name(name: str, dialect: Dialect) -> str:
    """Return ``name``, or a shortened one with a hash if it is too long.

    PostgreSQL silently cuts names at 63 bytes (two long names can then
    collide) and MariaDB refuses names over 64 characters; the hash keeps
    shortened names distinct and the same on every run.
    """
    limit = name_limit(dialect)
    if len(name.encode()) <= limit:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    head = name.encode()[: limit - 9].decode(errors="ignore")
    return f"{head}_{digest}"


def name_limit(dialect: Dialect) -> int:
    """The longest name, in bytes, the database takes for a table, index or constraint."""
    # MySQL allows 255 for some names but 64 for constraints and indexes.
    limits = [
        dialect.max_identifier_length,
        getattr(dialect, "max_constraint_name_length", None),
        getattr(dialect, "max_index_name_length", None),
    ]
    return min(limit for limit in limits if limit) if any(limits) else 63


def unique_name(table_name: str, column_name: str, dialect: Dialect) -> str:
    """Return the default unique constraint name, shortened to fit the database."""
    return safe_name(f"uq_{table_name}_{column_name}", dialect)


def check_identifier(name: str, what: str, dialect: Dialect) -> None:
    """Refuse a name the database would cut short or reject (or an empty one)."""
    if not name.strip():
        raise ValueError(f"{what} must not be empty, got {name!r}")
    limit = name_limit(dialect)
    if len(name.encode()) > limit:
        raise ValueError(
            f"{what} {name!r} is {len(name.encode())} bytes; {dialect.name} allows {limit}"
        )


def plain_session(
    implementation: Callable[[Operations, _Op], _Result],
) -> Callable[[Operations, _Op], _Result]:
    """Run an op's implementation in a session whose SQL reads as the dialect expects.

    A session setting made after SQLAlchemy connected can make reflection
    read nothing, or the server read values otherwise than the driver wrote
    them (``Catalog.plain_session``); it is put back after the op. Offline
    (``--sql``) there is no session.
    """

    @functools.wraps(implementation)
    def run_plain(operations: Operations, op: _Op) -> _Result:
        if operations.migration_context.as_sql:
            return implementation(operations, op)
        connection = operations.get_bind()
        try:
            catalog = catalog_for(connection.dialect)
        except UnsupportedCatalog:
            return implementation(operations, op)
        with catalog.plain_session(connection):
            return implementation(operations, op)

    return run_plain


def strict_mode(connection: Connection) -> contextlib.AbstractContextManager[None]:
    """Make the session refuse, not coerce, bad values while the block runs.

    On MySQL/MariaDB, outside strict mode, ``MODIFY ... NOT NULL`` turns
    NULLs into empty bytes and a too-long value is cut short: ids would be
    invented. Each database's catalog knows (``Catalog.strict_mode``); other
    databases are always strict.
    """
    return catalog_for(connection.dialect).strict_mode(connection)


def utc_session(connection: Connection) -> contextlib.AbstractContextManager[None]:
    """Read ``TIMESTAMP`` values in UTC while the block runs (``Catalog.utc_session``).

    MySQL/MariaDB return a ``TIMESTAMP`` in the session's ``time_zone``,
    naive: in a ``'+05:00'`` session a time stored as 12:00 UTC reads as
    17:00, and every id made from it would be five hours late. Other
    databases return their time zone with the value, or do not convert.
    """
    return catalog_for(connection.dialect).utc_session(connection)
