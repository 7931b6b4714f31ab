"""Server-side ULID generators: DDL per dialect, installed only on request.

Also the typed ids' server default (:func:`typeid_server_default`): a
UUIDv7 written in ULIDType's storage.

Nothing here runs at import. The SQL for every dialect is the ``"ulid"``
entry of its row's ``keys`` in the ``_dialects`` table. Each function here is
a one-line wrapper: the op of every key kind (``_server_defaults``), given
the ULID kind (the typed ids' default: the typed-id kind).

Which generators are monotonic (ULIDs sort in the order they were made, even
within one millisecond):

=====================================  ==========================================
generator                              monotonic?
=====================================  ==========================================
``default=new_ulid`` (Python)          yes, within one process
SQLite ``gen_ulid()`` (registered)     yes, within one process (it calls
                                       :func:`new_ulid`)
PostgreSQL ``gen_ulid()``              yes, within one session (a session-local
                                       counter after the millisecond); sessions
                                       interleave by their random bits
MySQL / MariaDB default and            no: ordered by millisecond only
``gen_ulid()``
=====================================  ==========================================
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.sql.elements import ColumnElement

from . import _server_defaults as _op
from ._dialects import FUNCTION_NAME
from ._kinds import TYPEID_KEYS, ULID_KEYS
from ._types import Storage

__all__ = [
    "FUNCTION_NAME",
    "drop_ulid_function",
    "drop_ulid_function_ddl",
    "install_ulid_function",
    "register_ulid_function",
    "typeid_server_default",
    "ulid_function_ddl",
    "ulid_server_default",
]


def ulid_function_ddl(dialect: Dialect | str) -> list[str]:
    """Return the statements that create ``gen_ulid()`` on a database.

    For scripts and Alembic's offline mode. Empty for SQLite, whose function
    lives in the connection (see :func:`register_ulid_function`).

    Args:
        dialect: a SQLAlchemy dialect or its name (``"postgresql"``, ...).

    Example:
        >>> from sqlalchemy_ulid import ulid_function_ddl
        >>> ulid_function_ddl("postgresql")[0].splitlines()[0]
        'CREATE OR REPLACE FUNCTION gen_ulid() RETURNS uuid'
        >>> ulid_function_ddl("sqlite")
        []
    """
    return _op.function_ddl(ULID_KEYS, dialect)


def drop_ulid_function_ddl(dialect: Dialect | str) -> list[str]:
    """Return the statements that drop ``gen_ulid()`` (if it exists).

    Example:
        >>> from sqlalchemy_ulid import drop_ulid_function_ddl
        >>> drop_ulid_function_ddl("mysql")
        ['DROP FUNCTION IF EXISTS gen_ulid']
    """
    return _op.drop_function_ddl(ULID_KEYS, dialect)


def install_ulid_function(connection: Connection) -> None:
    """Create ``gen_ulid()`` in the connected database.

    On PostgreSQL (13+) it creates a SQL function returning ``uuid``; on
    MySQL / MariaDB a stored function returning ``BINARY(16)``, for raw SQL
    such as ``INSERT ... VALUES (gen_ulid(), ...)``. On SQLite it defines the
    function on this one connection only; use :func:`register_ulid_function`
    to give every connection of an engine the function.

    PostgreSQL's function is ordered within each session: a
    session-local counter follows the millisecond. MySQL / MariaDB's is not:
    ULIDs of one millisecond are in random order. The SQLite function is
    monotonic (it calls :func:`new_ulid`).

    Args:
        connection: a SQLAlchemy connection; the DDL runs in its transaction.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import ULID, install_ulid_function
        >>> engine = sa.create_engine("sqlite://")
        >>> with engine.connect() as conn:
        ...     install_ulid_function(conn)
        ...     raw = conn.scalar(sa.text("SELECT gen_ulid()"))
        >>> len(ULID.from_bytes(raw).bytes)
        16
    """
    _op.install(ULID_KEYS, connection)


def drop_ulid_function(connection: Connection) -> None:
    """Drop ``gen_ulid()`` from the connected database, if it is there.

    On SQLite this does nothing: the function goes with the connection.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import drop_ulid_function
        >>> with sa.create_engine("sqlite://").connect() as conn:
        ...     drop_ulid_function(conn)
    """
    _op.drop(ULID_KEYS, connection)


def register_ulid_function(engine: Engine) -> None:
    """Define ``gen_ulid()`` on every SQLite connection of one engine.

    The listener is attached to this engine only. Call it whenever: the
    connections the engine opened before the call (in its pool, or in use)
    get the function before their next statement, new ones when they
    connect. Calling it again does nothing. For an ``AsyncEngine`` pass
    ``async_engine.sync_engine``.
    The function calls :func:`new_ulid`, so it is monotonic in this process.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import ULIDType, register_ulid_function
        >>> from sqlalchemy_ulid import ulid_server_default
        >>> engine = sa.create_engine("sqlite://")
        >>> register_ulid_function(engine)
        >>> t = sa.Table("t", sa.MetaData(),
        ...     sa.Column("id", ULIDType(), primary_key=True,
        ...               server_default=ulid_server_default()),
        ...     sa.Column("x", sa.Integer))
        >>> with engine.begin() as conn:
        ...     t.create(conn)
        ...     _ = conn.exec_driver_sql("INSERT INTO t (x) VALUES (1)")
        ...     conn.scalar(sa.select(t.c.id)) is not None
        True

    Raises:
        TypeError: ``engine`` is not an ``Engine`` (a URL, an ``AsyncEngine``).
        ValueError: the engine is not a SQLite engine (the listener would
            break every later connection); use :func:`install_ulid_function`
            on PostgreSQL and MySQL/MariaDB.
    """
    _op.register(ULID_KEYS, engine)


def ulid_server_default(storage: Storage = "auto") -> ColumnElement[Any]:
    """Return a ``server_default=`` that makes the database generate ULIDs.

    Rows inserted without an id, by raw SQL or by other programs, get a ULID
    from the database. Pass the same ``storage`` as the column's
    :class:`ULIDType`; ``"text"`` storage has no server-side generator.

    * PostgreSQL: calls ``gen_ulid()``; install it first with
      :func:`install_ulid_function`. Ordered within a session (a
      session-local counter), not across sessions within a millisecond.
    * MySQL 8.0.13+ / MariaDB 10.10+: an inline expression (stored functions
      are not allowed in a DEFAULT), nothing to install. Not monotonic within
      a millisecond. Its timestamp comes from ``UNIX_TIMESTAMP(SYSDATE(3))``,
      so it can be an hour off during a DST fall-back hour unless the session
      ``time_zone`` is UTC or has no DST.
    * SQLite: calls ``gen_ulid()``; call :func:`register_ulid_function` on the
      engine. Monotonic within the process.

    Args:
        storage: the column's storage, ``"auto"``, ``"native"`` or ``"binary"``.

    Raises:
        ValueError: ``storage`` is ``"text"`` or unknown.
        sqlalchemy.exc.CompileError: (at ``CREATE TABLE``) the database has no
            generator here, e.g. Oracle or SQL Server.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.dialects import postgresql
        >>> from sqlalchemy_ulid import ULIDType, ulid_server_default
        >>> col = sa.Column("id", ULIDType(), server_default=ulid_server_default())
        >>> _ = sa.Table("t", sa.MetaData(), col)
        >>> print(sa.schema.CreateColumn(col).compile(dialect=postgresql.dialect()))
        id UUID DEFAULT (gen_ulid())
    """
    return _op.checked_server_default(ULID_KEYS, storage)


def typeid_server_default() -> ColumnElement[Any]:
    """Return a ``server_default=`` for a :class:`TypeIDType` column: a UUIDv7 made by the database.

    The database stores only the 128 bits of a typed id, so its default is
    the UUIDv7 default of :func:`~sqlalchemy_ulid.uuid7_server_default`,
    written in the column's storage; the column adds its prefix when the
    row is read. It takes no prefix because none is stored: any prefix's
    column uses the same DDL. Rows inserted by raw SQL or other programs
    get an id; the same limits as the UUIDv7 default apply:

    * PostgreSQL 18+: ``uuidv7()``, nothing to install. PostgreSQL 13-17:
      ``gen_uuid7()``; install it first with
      :func:`~sqlalchemy_ulid.install_uuid7_function`. Ordered within a
      session only: sessions interleave within a millisecond.
    * MySQL 8.0.13+ / MariaDB 10.10+: an inline expression, nothing to
      install; ordered by millisecond only. Older servers have none.
    * SQLite: ``gen_uuid7()``; call
      :func:`~sqlalchemy_ulid.register_uuid7_function` on the engine.
    * Elsewhere (SQL Server, Oracle): none; ``CREATE TABLE`` raises.

    Prefer ``default=lambda: new_typeid("user")`` for the rows your app
    inserts: it is ordered within the process, and the ORM knows the id
    without reading it back.

    Raises:
        sqlalchemy.exc.CompileError: (at ``CREATE TABLE``) the database or
            its version has no generator.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.dialects import postgresql
        >>> from sqlalchemy_ulid import TypeIDType, typeid_server_default
        >>> col = sa.Column("id", TypeIDType("user"), server_default=typeid_server_default())
        >>> _ = sa.Table("users", sa.MetaData(), col)
        >>> print(sa.schema.CreateColumn(col).compile(dialect=postgresql.dialect()))
        id UUID DEFAULT (gen_uuid7())
    """
    return _op.server_default(TYPEID_KEYS, "auto")
