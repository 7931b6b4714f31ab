"""The one table of per-dialect facts, and the one lookup that reads it.

Every way the databases differ for ULIDs is a field of :class:`DialectRow`:
how a ULID is stored, how a binary literal is written, whether the drivers
take plain ``bytes``, the server-side generator's SQL, the SQL that converts
text to binary storage and back, and whether range partitions exist. The
type, the server defaults, the Alembic ops and the partition helpers all ask
:func:`dialect_row`; nothing else in the package looks at a dialect's name.

This module imports neither ``_types`` nor ``_defaults`` (they import it),
and never Alembic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql.base import PGDialect
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

from ._convert_sql import MYSQL_CONVERT, POSTGRESQL_CONVERT, SQLITE_CONVERT, ConvertSQL

__all__ = ["FUNCTION_NAME", "DialectRow", "ServerSQL", "dialect_row", "dialects_with"]

#: The name of the server-side function on every database.
FUNCTION_NAME = "gen_ulid"


@dataclass(frozen=True)
class ServerSQL:
    """One dialect's server-side generator: DDL and DEFAULT expressions."""

    create: tuple[str, ...]
    drop: tuple[str, ...]
    #: storage kind ("uuid", "binary") -> the SQL of a DEFAULT expression
    default: dict[str, str]


@dataclass(frozen=True)
class DialectRow:
    """Everything about one database that ULID support needs to know."""

    #: the storage kind of ``"auto"``/``"native"``
    native: Literal["uuid", "binary"]
    #: the 16-byte binary column type
    binary: Callable[[], TypeEngine[Any]]
    #: renders 16 bytes as a SQL literal of that type
    binary_literal: Callable[[bytes], str]
    #: the ``CHAR(26)`` column type, with a byte-order collation
    text: Callable[[], TypeEngine[Any]]
    #: The drivers take plain ``bytes`` for binary parameters, so the DBAPI
    #: ``Binary()`` wrapper (a copy per value) can be skipped.
    plain_bytes: bool = False
    #: the server-side ``gen_ulid()`` (None: the database has none)
    server: ServerSQL | None = None
    #: text <-> binary conversion SQL (None: not implemented here)
    convert: ConvertSQL | None = None
    #: ``CREATE TABLE ... PARTITION OF ... FOR VALUES FROM ... TO ...`` exists
    range_partitions: bool = False
    #: The driver can run other statements while a streaming (server-side
    #: cursor) read is open on the same connection (PyMySQL cannot).
    write_while_streaming: bool = True
    #: Uniqueness is added as a unique index: adding a unique constraint
    #: would recreate the table (SQLite), and dropping it offline could not.
    unique_by_index: bool = False
    #: drops a temporary table (``{}``: its quoted name) without committing
    drop_temporary: str = "DROP TABLE IF EXISTS {}"

    def kind(self, storage: str) -> str:
        """Return the storage kind ("uuid", "binary", "text") of a storage option."""
        return self.native if storage in ("auto", "native") else storage


# -- column types and literals ------------------------------------------------


def _bytea() -> TypeEngine[Any]:
    return sa.LargeBinary()


def _binary16() -> TypeEngine[Any]:
    return sa.BINARY(16)


def _blob() -> TypeEngine[Any]:
    return sa.BLOB()


def _raw16() -> TypeEngine[Any]:
    from sqlalchemy.dialects.oracle import RAW

    return RAW(16)


def _char26() -> TypeEngine[Any]:
    return sa.CHAR(26)


def _char26_c() -> TypeEngine[Any]:
    return sa.CHAR(26, collation="C")


def _char26_ascii_bin() -> TypeEngine[Any]:
    from sqlalchemy.dialects.mysql import CHAR

    return CHAR(26, charset="ascii", collation="ascii_bin")


def _char26_bin2() -> TypeEngine[Any]:
    return sa.CHAR(26, collation="Latin1_General_BIN2")


def _x_literal(data: bytes) -> str:
    return f"X'{data.hex()}'"


# -- server-side generators ---------------------------------------------------

# 48-bit millisecond timestamp then 80 random bits. gen_random_uuid() (core
# since PostgreSQL 13, no pgcrypto needed) gives a UUIDv4: bytes 1-3 and
# 10-16 are fully random (the version and variant bits sit in bytes 7 and 9).
# floor(), not a cast: a cast rounds, which could date a ULID in the future.
_PG_CREATE = f"""\
CREATE OR REPLACE FUNCTION {FUNCTION_NAME}() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
SELECT encode(
    substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
    || substring(g.r FROM 10 FOR 7) || substring(g.r FROM 1 FOR 3),
    'hex')::uuid
FROM uuid_send(gen_random_uuid()) AS g(r)
$$"""

# MySQL 8.0.13+ and MariaDB 10.10+ (RANDOM_BYTES) accept this expression as a
# column DEFAULT. Stored functions are not allowed there (MariaDB error 1901),
# so the DEFAULT inlines it and needs no installed function. SYSDATE, not NOW:
# NOW is fixed at statement start, SYSDATE is read per row.
_MYSQL_EXPR = (
    "CONCAT(UNHEX(LPAD(HEX(FLOOR(UNIX_TIMESTAMP(SYSDATE(3)) * 1000)), 12, '0')), RANDOM_BYTES(10))"
)
_MYSQL_CREATE = (
    f"CREATE FUNCTION IF NOT EXISTS {FUNCTION_NAME}() RETURNS BINARY(16) "
    f"NOT DETERMINISTIC NO SQL RETURN {_MYSQL_EXPR}"
)


# -- the table ----------------------------------------------------------------

_POSTGRESQL = DialectRow(
    native="uuid",
    binary=_bytea,
    binary_literal=lambda data: f"'\\x{data.hex()}'::bytea",
    # COLLATE "C" compares bytes: locale collations may not sort like ULIDs.
    text=_char26_c,
    plain_bytes=True,  # psycopg, asyncpg
    server=ServerSQL(
        create=(_PG_CREATE,),
        drop=(f"DROP FUNCTION IF EXISTS {FUNCTION_NAME}()",),
        default={"uuid": f"{FUNCTION_NAME}()", "binary": f"uuid_send({FUNCTION_NAME}())"},
    ),
    convert=POSTGRESQL_CONVERT,
    range_partitions=True,
)
_MYSQL = DialectRow(
    # Never MariaDB's UUID type: it rejects a quarter of ULIDs and reorders
    # the rest (it sorts by the UUIDv1 time fields).
    native="binary",
    binary=_binary16,
    binary_literal=_x_literal,
    text=_char26_ascii_bin,
    plain_bytes=True,  # PyMySQL, mysqlclient, asyncmy
    server=ServerSQL(
        create=(_MYSQL_CREATE,),
        drop=(f"DROP FUNCTION IF EXISTS {FUNCTION_NAME}",),
        default={"binary": _MYSQL_EXPR},
    ),
    convert=MYSQL_CONVERT,
    write_while_streaming=False,
    drop_temporary="DROP TEMPORARY TABLE IF EXISTS {}",
)
_OTHER = DialectRow(native="binary", binary=_binary16, binary_literal=_x_literal, text=_char26)

#: Dialect name -> row. MariaDB reached through a ``mysql+...://`` URL has
#: the dialect name "mysql", so both names share one row.
_ROWS: dict[str, DialectRow] = {
    "postgresql": _POSTGRESQL,
    # PostgreSQL's storage, but neither gen_ulid() nor the conversion SQL
    # has been tried there.
    "cockroachdb": replace(_POSTGRESQL, server=None, convert=None),
    "mysql": _MYSQL,
    "mariadb": _MYSQL,
    "sqlite": DialectRow(
        native="binary",
        binary=_blob,
        binary_literal=_x_literal,
        text=_char26,
        plain_bytes=True,  # sqlite3, aiosqlite
        # SQLite keeps no functions in the database: register_ulid_function()
        # defines gen_ulid() on each connection instead.
        server=ServerSQL(create=(), drop=(), default={"binary": f"{FUNCTION_NAME}()"}),
        convert=SQLITE_CONVERT,
        unique_by_index=True,
    ),
    # UNIQUEIDENTIFIER sorts by its last six bytes first: not ULID order.
    "mssql": DialectRow(
        native="binary",
        binary=_binary16,
        binary_literal=lambda data: f"0x{data.hex()}",
        text=_char26_bin2,
    ),
    "oracle": DialectRow(
        native="binary",
        binary=_raw16,
        binary_literal=lambda data: f"HEXTORAW('{data.hex()}')",
        text=_char26,
    ),
}

# A third-party dialect built on SQLAlchemy's PostgreSQL dialect (under a
# name of its own) stores like any other database but speaks PostgreSQL's
# partition DDL.
_OTHER_POSTGRESQL_BASED = replace(_OTHER, range_partitions=True)


def dialect_row(dialect: Dialect | str) -> DialectRow:
    """Return the row of a dialect, or of its name; any other gets the fallback row.

    Example:
        >>> from sqlalchemy.dialects import postgresql
        >>> dialect_row(postgresql.dialect()).native
        'uuid'
        >>> dialect_row("mariadb") is dialect_row("mysql")
        True
        >>> dialect_row("firebird").kind("auto")
        'binary'
    """
    if isinstance(dialect, str):
        return _ROWS.get(dialect, _OTHER)
    row = _ROWS.get(dialect.name)
    if row is not None:
        return row
    return _OTHER_POSTGRESQL_BASED if isinstance(dialect, PGDialect) else _OTHER


def dialects_with(has: Callable[[DialectRow], object]) -> str:
    """Name, for an error message, the dialects whose row has a feature.

    Example:
        >>> dialects_with(lambda row: row.convert)
        'mariadb, mysql, postgresql, sqlite'
    """
    return ", ".join(sorted(name for name, row in _ROWS.items() if has(row)))
