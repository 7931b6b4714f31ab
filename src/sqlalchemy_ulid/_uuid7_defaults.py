"""Server-side UUIDv7 generators: DDL per dialect and server version, opt-in.

The UUIDv7 counterparts of the ULID server defaults (``_defaults``), for
columns of ``sa.Uuid`` (or 16 bytes holding a UUID). The SQL is the ``"uuid"``
entry of each row's ``keys`` in the ``_dialects`` table; each function here
is a one-line wrapper of the op of every key kind (``_server_defaults``),
given the UUIDv7 kind. Which server
has which function is read from ``dialect.server_version_info`` when the
DDL is rendered.

=====================================  ==========================================
generator                              ordered within a millisecond?
=====================================  ==========================================
``default=new_uuid7`` (Python)         yes, within one process
SQLite ``gen_uuid7()`` (registered)    yes, within one process (it calls
                                       :func:`new_uuid7`)
PostgreSQL 13-17 ``gen_uuid7()``       yes, within one session (a session-local
                                       counter); sessions interleave
PostgreSQL 18+ ``uuidv7()``            yes, within one backend (PostgreSQL's own)
MySQL 8.0.13+ / MariaDB 10.10+         no: ordered by millisecond only
DEFAULT and ``gen_uuid7()``
MariaDB 11.7+ ``UUID_v7()`` (uuid      not promised by MariaDB: treat as
columns)                               ordered by millisecond only
=====================================  ==========================================
"""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.sql.elements import ColumnElement

from . import _server_defaults as _op
from ._kinds import UUID7_KEYS

__all__ = [
    "UUID7Storage",
    "drop_uuid7_function",
    "drop_uuid7_function_ddl",
    "install_uuid7_function",
    "register_uuid7_function",
    "uuid7_function_ddl",
    "uuid7_server_default",
]

#: How the UUID column is stored: ``"auto"`` (what ``sa.Uuid()`` makes on the
#: database), ``"native"`` (its uuid type), ``"binary"`` (16 bytes) or
#: ``"hex"`` (32 hex digits, as ``sa.Uuid`` stores it without a uuid type).
UUID7Storage = Literal["auto", "native", "binary", "hex"]
_STORAGES = UUID7_KEYS.storage_options


def _kind(storage: str, dialect: Dialect) -> str:
    """The storage kind a UUIDv7 DEFAULT writes (for the Alembic ops; see ``KeyKind``)."""
    return UUID7_KEYS.generated_storage(storage, dialect)


def uuid7_function_ddl(dialect: Dialect | str) -> list[str]:
    """Return the statements that create ``gen_uuid7()`` on a database.

    For scripts and Alembic's offline mode. Given a connected dialect, the
    statements suit its server version (on PostgreSQL 18+ ``gen_uuid7()``
    calls the server's ``uuidv7()``). Empty for SQLite, whose function lives
    in the connection (see :func:`register_uuid7_function`).

    Example:
        >>> from sqlalchemy_ulid import uuid7_function_ddl
        >>> uuid7_function_ddl("postgresql")[0].splitlines()[0]
        'CREATE OR REPLACE FUNCTION gen_uuid7() RETURNS uuid'
        >>> uuid7_function_ddl("sqlite")
        []
    """
    return _op.function_ddl(UUID7_KEYS, dialect)


def drop_uuid7_function_ddl(dialect: Dialect | str) -> list[str]:
    """Return the statements that drop ``gen_uuid7()`` (if it exists).

    Example:
        >>> from sqlalchemy_ulid import drop_uuid7_function_ddl
        >>> drop_uuid7_function_ddl("mysql")
        ['DROP FUNCTION IF EXISTS gen_uuid7']
    """
    return _op.drop_function_ddl(UUID7_KEYS, dialect)


def install_uuid7_function(connection: Connection) -> None:
    """Create ``gen_uuid7()`` in the connected database.

    * PostgreSQL 13 to 17: a PL/pgSQL function returning ``uuid``, ordered
      within each session (a session-local counter after the millisecond).
      PostgreSQL 18+: a function that calls the server's own ``uuidv7()``.
    * MySQL / MariaDB: a stored function returning ``BINARY(16)``, for raw
      SQL such as ``INSERT ... VALUES (gen_uuid7(), ...)`` (a column
      DEFAULT inlines the expression instead, nothing to install). Ordered
      by millisecond only.
    * SQLite: defines the function on this one connection (see
      :func:`register_uuid7_function` for every connection of an engine).

    Args:
        connection: a SQLAlchemy connection; the DDL runs in its transaction.

    Raises:
        NotImplementedError: the database (or its version) has no generator
            here, e.g. PostgreSQL 12, MariaDB 10.6 or SQL Server.

    Example:
        >>> import uuid
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import install_uuid7_function
        >>> engine = sa.create_engine("sqlite://")
        >>> with engine.connect() as conn:
        ...     install_uuid7_function(conn)
        ...     raw = conn.scalar(sa.text("SELECT gen_uuid7()"))
        >>> uuid.UUID(bytes=raw).version
        7
    """
    _op.install(UUID7_KEYS, connection)


def drop_uuid7_function(connection: Connection) -> None:
    """Drop ``gen_uuid7()`` from the connected database, if it is there.

    On SQLite this does nothing: the function goes with the connection.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import drop_uuid7_function
        >>> with sa.create_engine("sqlite://").connect() as conn:
        ...     drop_uuid7_function(conn)
    """
    _op.drop(UUID7_KEYS, connection)


def register_uuid7_function(engine: Engine) -> None:
    """Define ``gen_uuid7()`` on every SQLite connection of one engine.

    The function returns the 16 bytes of :func:`new_uuid7`, so it is ordered
    within this process. Call it whenever: the connections the engine opened
    before the call (in its pool, or in use) get the function before their
    next statement, new ones when they connect. Calling it again does
    nothing. For an ``AsyncEngine`` pass ``async_engine.sync_engine``.

    Raises:
        TypeError: ``engine`` is not an ``Engine`` (a URL, an ``AsyncEngine``).
        ValueError: the engine is not a SQLite engine; use
            :func:`install_uuid7_function` on PostgreSQL and MySQL/MariaDB.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import register_uuid7_function, uuid7_server_default
        >>> engine = sa.create_engine("sqlite://")
        >>> register_uuid7_function(engine)
        >>> t = sa.Table("t", sa.MetaData(),
        ...     sa.Column("id", sa.Uuid(), primary_key=True,
        ...               server_default=uuid7_server_default()),
        ...     sa.Column("x", sa.Integer))
        >>> with engine.begin() as conn:
        ...     t.create(conn)
        ...     _ = conn.exec_driver_sql("INSERT INTO t (x) VALUES (1)")
        ...     conn.scalar(sa.select(t.c.id)).version
        7
    """
    _op.register(UUID7_KEYS, engine)


def uuid7_server_default(storage: UUID7Storage = "auto") -> ColumnElement[Any]:
    """Return a ``server_default=`` that makes the database generate UUIDv7s.

    Rows inserted without an id, by raw SQL or other programs, get a UUIDv7
    from the database. The DDL is chosen when ``CREATE TABLE`` is rendered,
    from the server's version:

    * PostgreSQL 18+: ``uuidv7()``, nothing to install. PostgreSQL 13-17:
      ``gen_uuid7()``; install it first with :func:`install_uuid7_function`
      (or ``op.create_uuid7_function()``). Ordered within a session.
    * MariaDB 11.7+, uuid columns: ``UUID_v7()``. MySQL 8.0.13+ / MariaDB
      10.10+: an inline expression, nothing to install; ordered by
      millisecond only. Its timestamp comes from ``UNIX_TIMESTAMP(SYSDATE(3))``
      (an hour off in a DST fall-back hour unless the session ``time_zone``
      is UTC or has no DST).
    * SQLite: ``gen_uuid7()``; call :func:`register_uuid7_function` on the
      engine. Ordered within the process.

    Args:
        storage: how the column holds the UUID: ``"auto"`` (what ``sa.Uuid()``
            makes on the database: its uuid type, else ``CHAR(32)`` hex),
            ``"native"``, ``"binary"`` (16 bytes) or ``"hex"``.

    Raises:
        ValueError: ``storage`` is unknown.
        sqlalchemy.exc.CompileError: (at ``CREATE TABLE``) the database or
            its version has no generator, e.g. SQL Server or MariaDB 10.6.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.dialects import postgresql
        >>> from sqlalchemy_ulid import uuid7_server_default
        >>> col = sa.Column("id", sa.Uuid(), server_default=uuid7_server_default())
        >>> _ = sa.Table("t", sa.MetaData(), col)
        >>> print(sa.schema.CreateColumn(col).compile(dialect=postgresql.dialect()))
        id UUID DEFAULT (gen_uuid7())
        >>> pg18 = postgresql.dialect()
        >>> pg18.server_version_info = (18, 1)
        >>> print(sa.schema.CreateColumn(col).compile(dialect=pg18))
        id UUID DEFAULT (uuidv7())
    """
    return _op.checked_server_default(UUID7_KEYS, storage)
