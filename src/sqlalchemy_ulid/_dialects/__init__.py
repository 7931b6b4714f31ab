"""The per-database facts, one module per database, and the one lookup that reads them.

Every way the databases differ for ULIDs is a field of :class:`DialectRow`:
how a ULID is stored, how a binary literal is written, whether the drivers
take plain ``bytes``, each key kind's server-side generator and storage
conversion SQL (one :class:`KeySQL` per kind, in ``keys``), the time, paging
and settle SQL, and whether range partitions exist. Each
database's row lives in its own module (``postgresql``, ``mysql`` for MariaDB
and MySQL, ``sqlite``, ``mssql``, ``oracle``, ``cockroachdb``). The type, the
server defaults, the Alembic ops and the partition helpers all ask
:func:`dialect_row`; nothing else in the package looks at a dialect's name.

This package imports neither ``_types`` nor ``_defaults`` (they import it),
and never Alembic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from sqlalchemy.dialects.postgresql.base import PGDialect
from sqlalchemy.engine import Dialect

from . import cockroachdb, mssql, mysql, oracle, postgresql, sqlite
from ._migration import KeyConversionSQL, LockSQL, key_conversion_sql
from ._row import FUNCTION_NAME, DialectRow, KeySQL, PagingSQL, ServerSQL, SettleSQL, TimeSQL
from ._sql import binary16, char26, x_literal
from .mysql import mysql_ulid_sql

__all__ = [
    "FUNCTION_NAME",
    "DialectRow",
    "KeyConversionSQL",
    "KeySQL",
    "LockSQL",
    "PagingSQL",
    "ServerSQL",
    "SettleSQL",
    "TimeSQL",
    "all_rows",
    "dialect_row",
    "dialects_with",
    "key_conversion_sql",
    "mysql_ulid_sql",
]

_OTHER = DialectRow(native="binary", binary=binary16, binary_literal=x_literal, text=char26)

#: Dialect name -> row. MariaDB reached through a ``mysql+...://`` URL has
#: the dialect name "mysql": the row's ``flavour`` tells them apart.
_ROWS: dict[str, DialectRow] = {
    "postgresql": postgresql.ROW,
    "cockroachdb": cockroachdb.ROW,
    "mysql": mysql.ROW,
    "mariadb": mysql.MARIADB,
    "sqlite": sqlite.ROW,
    "mssql": mssql.ROW,
    "oracle": oracle.ROW,
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
        >>> dialect_row("mariadb").binary is dialect_row("mysql").binary
        True
        >>> dialect_row("firebird").kind("auto")
        'binary'
    """
    if isinstance(dialect, str):
        return _ROWS.get(dialect, _OTHER)
    row = _ROWS.get(dialect.name)
    if row is not None:
        return row if row.flavour is None else row.flavour(dialect)
    return _OTHER_POSTGRESQL_BASED if isinstance(dialect, PGDialect) else _OTHER


def all_rows() -> Iterator[DialectRow]:
    """Every database's row (MariaDB's and MySQL's both), for a fact looked up by value.

    Example:
        >>> sum(1 for row in all_rows() if row.settle is not None)
        4
    """
    yield from _ROWS.values()


def dialects_with(has: Callable[[DialectRow], object]) -> str:
    """Name, for an error message, the dialects whose row has a feature.

    Example:
        >>> dialects_with(lambda row: row.key_sql("ulid").convert)
        'mariadb, mysql, postgresql, sqlite'
    """
    return ", ".join(sorted(name for name, row in _ROWS.items() if has(row)))
