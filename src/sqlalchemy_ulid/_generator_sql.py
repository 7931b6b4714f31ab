"""The server-side generators' SQL type (``gen_ulid()``, ``gen_uuid7()``).

Each database's generators are :class:`GeneratorSQL` values in its module of
``_dialects`` (PostgreSQL's PL/pgSQL functions with a session counter,
MariaDB/MySQL's expression DEFAULTs, SQLite's per-connection functions);
the key kinds (``_kinds``) say which row field holds theirs. Nothing here
imports the rest of the package.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.engine import Dialect

__all__ = [
    "UUID7SQL",
    "UUID7_FUNCTION",
    "GeneratorSQL",
    "leading_version",
]

#: The name of the server-side UUIDv7 function on every database.
UUID7_FUNCTION = "gen_uuid7"


def leading_version(dialect: Dialect) -> tuple[int, ...] | None:
    """The leading numbers of the connected server's version (None: not connected).

    Example:
        >>> from sqlalchemy.dialects import mysql
        >>> d = mysql.dialect()
        >>> d.server_version_info = (10, 11, 6, "MariaDB")
        >>> leading_version(d)
        (10, 11, 6)
    """
    info = getattr(dialect, "server_version_info", None)
    if info is None:
        return None
    version: tuple[int, ...] = ()
    for part in info:  # a driver may append "MariaDB" and such
        if not isinstance(part, int):
            break
        version += (part,)
    return version


@dataclass(frozen=True)
class GeneratorSQL:
    """One dialect's server-side generator of one key kind (``gen_ulid()``, ``gen_uuid7()``)."""

    #: creates the function (empty: SQLite registers it per connection)
    create: tuple[str, ...]
    drop: tuple[str, ...]
    #: storage kind ("uuid", "binary", "hex") -> the SQL of a DEFAULT expression
    default: dict[str, str]
    #: the same, with the server's own generator, where :attr:`has_builtin` says so
    builtin: dict[str, str] = field(default_factory=dict)
    #: the connected server has its own UUIDv7 function
    has_builtin: Callable[[Dialect], bool] = lambda dialect: False
    #: why the connected server cannot run :attr:`default` (None: it can)
    missing: Callable[[Dialect], str | None] = lambda dialect: None
    #: creates the function on a server that has its own generator
    create_builtin: tuple[str, ...] = ()
    #: whether a session's values are ordered within one millisecond
    ordered: str = ""


#: The UUIDv7 generator's SQL (the name it had when only UUIDv7 had versions).
UUID7SQL = GeneratorSQL
