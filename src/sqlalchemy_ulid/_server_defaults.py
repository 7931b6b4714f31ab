"""Server-side generators of any key kind: the DDL, the install, the DEFAULT.

One implementation of each public op for every
:class:`~sqlalchemy_ulid._kinds.KeyKind` (:func:`function_ddl`,
:func:`drop_function_ddl`, :func:`install`, :func:`drop`, :func:`register`,
:func:`checked_server_default`): they check their arguments under the public
function's name (``install_ulid_function``, ``install_uuid7_function``...,
made from the kind's function name) before any SQL. The public functions of
``_defaults`` (ULID) and ``_uuid7_defaults`` (UUIDv7) are one-line wrappers
that pass their kind. Which SQL a database runs is the kind's generator in
the database's row (``_dialects``); which of them the connected server can
run is read from ``dialect.server_version_info`` when the DDL is rendered.
Nothing here runs at import.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.exc import CompileError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.visitors import InternalTraversal

from ._checks import check_connection, check_dialect, check_engine
from ._dialects import dialect_row, dialects_with
from ._generator_sql import GeneratorSQL
from ._kinds import KeyKind, key_kind
from ._sqlite_functions import SQLiteFunction

__all__ = [
    "checked_server_default",
    "create_statements",
    "drop",
    "drop_function_ddl",
    "drop_statements",
    "function_ddl",
    "install",
    "install_function",
    "public_name",
    "register",
    "register_function",
    "server_default",
    "uninstall_function",
]


def generator_sql(kind: KeyKind, dialect: Dialect | str) -> GeneratorSQL:
    """The database's generator of ``kind``, or NotImplementedError (before any SQL)."""
    sql = kind.generator(dialect_row(dialect))
    if sql is None:
        name = dialect if isinstance(dialect, str) else dialect.name
        raise NotImplementedError(
            f"no server-side {kind.label} generator for {name!r}; use default={kind.new_name} "
            f"(supported: {dialects_with(lambda row: kind.generator(row))})"
        )
    return sql


def create_statements(kind: KeyKind, dialect: Dialect | str) -> tuple[str, ...]:
    """The statements that create the kind's function, for the connected server's version.

    Given a name, not a connected dialect, the statements of the oldest
    supported version.
    """
    sql = generator_sql(kind, dialect)
    if isinstance(dialect, str):
        return sql.create
    if sql.has_builtin(dialect) and sql.create_builtin:
        return sql.create_builtin
    missing = sql.missing(dialect)
    if missing is not None:
        raise NotImplementedError(f"{missing}; use default={kind.new_name}")
    return sql.create


def drop_statements(kind: KeyKind, dialect: Dialect | str) -> tuple[str, ...]:
    """The statements that drop the kind's function (if it exists)."""
    return generator_sql(kind, dialect).drop


def _register_on(kind: KeyKind, dbapi_connection: Any) -> None:
    def generate() -> bytes:
        return bytes(kind.new().bytes)

    # deterministic=False: SQLite must call it once per row, never fold it.
    dbapi_connection.create_function(kind.function_name, 0, generate, deterministic=False)


def install_function(kind: KeyKind, connection: Connection) -> None:
    """Create the kind's function in the connected database (on this connection, on SQLite)."""
    statements = create_statements(kind, connection.dialect)
    for statement in statements:
        connection.exec_driver_sql(statement)
    if not statements:
        _register_on(kind, connection.connection.dbapi_connection)


def uninstall_function(kind: KeyKind, connection: Connection) -> None:
    """Drop the kind's function from the connected database, if it is there."""
    for statement in drop_statements(kind, connection.dialect):
        connection.exec_driver_sql(statement)


def register_function(kind: KeyKind, what: str, engine: Engine) -> None:
    """Define the kind's function on every connection of an engine whose row wants that.

    New connections get it when they connect; those the engine opened before
    the call (pooled, or in use) before their next statement. ``what`` names
    the public function, for the message.
    """
    if not dialect_row(engine.dialect).functions_per_connection:
        raise ValueError(
            f"{what}() is for SQLite engines, not {engine.dialect.name}: install "
            f"{kind.function_name}() in the database with "
            f"{what.replace('register_', 'install_')}(connection)"
        )
    _function(kind.name).register(engine)


@functools.cache
def _function(name: str) -> SQLiteFunction:
    """One per kind, so that registering twice attaches it once."""
    kind = key_kind(name)
    return SQLiteFunction(kind.function_name, functools.partial(_register_on, kind))


class _KeyServerDefault(ColumnElement[Any]):
    """A DEFAULT expression that calls the dialect's generator of one key kind."""

    inherit_cache = True
    # A plain list, as SQLAlchemy declares it (a ClassVar annotation would
    # clash with its base class under mypy).
    _traverse_internals = [  # noqa: RUF012
        ("kind_name", InternalTraversal.dp_string),
        ("storage", InternalTraversal.dp_string),
    ]

    def __init__(self, kind: KeyKind, storage: str) -> None:
        # The kind itself, not a name to look up: a kind made per column (a
        # typed id's prefix) need not be registered. Its name is the cache key.
        self.kind = kind
        self.kind_name = kind.name
        self.storage = storage


# Registers a compiler for our own element class only: no dialect or other
# SQLAlchemy object is touched, so importing this module changes nothing else.
@compiles(_KeyServerDefault)
def _compile_server_default(element: _KeyServerDefault, compiler: SQLCompiler, **kw: Any) -> str:
    dialect = compiler.dialect
    kind = element.kind
    sql = kind.generator(dialect_row(dialect))
    expression = None
    if sql is not None:
        storage = kind.generated_storage(element.storage, dialect)
        expression = sql.builtin.get(storage) if sql.has_builtin(dialect) else None
        if expression is None:
            missing = sql.missing(dialect)
            if missing is not None:
                raise CompileError(f"{missing}; use default={kind.new_name}")
            expression = sql.default.get(storage)
    if expression is None:
        raise CompileError(
            f"no server-side {kind.label} generator for {dialect.name!r} with storage "
            f"{element.storage!r}; use default={kind.new_name}"
        )
    # Parenthesised: MySQL and SQLite accept an expression DEFAULT only so.
    return f"({expression})"


def server_default(kind: KeyKind, storage: str) -> ColumnElement[Any]:
    """A ``server_default=`` calling the kind's generator (storage checked by the caller)."""
    return _KeyServerDefault(kind, storage)


def checked_server_default(kind: KeyKind, storage: str) -> ColumnElement[Any]:
    """``*_server_default(storage)``: the option checked (ValueError, before any SQL), the DEFAULT.

    Example:
        >>> from sqlalchemy_ulid._kinds import ULID_KEYS
        >>> checked_server_default(ULID_KEYS, "text")
        Traceback (most recent call last):
        ...
        ValueError: storage='text' has no server-side generator; use default=new_ulid
    """
    if storage not in kind.storage_options:
        options = ", ".join(kind.storage_options)
        raise ValueError(f"storage must be one of {options}; got {storage!r}")
    if storage in kind.ungenerated:
        raise ValueError(
            f"storage={storage!r} has no server-side generator; use default={kind.new_name}"
        )
    return server_default(kind, storage)


# -- the public ops, for any kind -------------------------------------------------


def public_name(kind: KeyKind, op: str) -> str:
    """The public function of an op for a kind, for messages.

    Example:
        >>> from sqlalchemy_ulid._kinds import UUID7_KEYS
        >>> public_name(UUID7_KEYS, "install_{}_function")
        'install_uuid7_function'
    """
    return op.format(kind.function_name.removeprefix("gen_"))


def function_ddl(kind: KeyKind, dialect: Dialect | str) -> list[str]:
    """``ulid_function_ddl(dialect)`` for any kind."""
    check_dialect(public_name(kind, "{}_function_ddl"), dialect)
    return list(create_statements(kind, dialect))


def drop_function_ddl(kind: KeyKind, dialect: Dialect | str) -> list[str]:
    """``drop_ulid_function_ddl(dialect)`` for any kind."""
    check_dialect(public_name(kind, "drop_{}_function_ddl"), dialect)
    return list(drop_statements(kind, dialect))


def install(kind: KeyKind, connection: Connection) -> None:
    """``install_ulid_function(connection)`` for any kind."""
    check_connection(public_name(kind, "install_{}_function"), connection)
    install_function(kind, connection)


def drop(kind: KeyKind, connection: Connection) -> None:
    """``drop_ulid_function(connection)`` for any kind."""
    check_connection(public_name(kind, "drop_{}_function"), connection)
    uninstall_function(kind, connection)


def register(kind: KeyKind, engine: Engine) -> None:
    """``register_ulid_function(engine)`` for any kind."""
    what = public_name(kind, "register_{}_function")
    check_engine(what, engine)
    register_function(kind, what, engine)
