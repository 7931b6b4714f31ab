"""The names our ops give the columns and indexes that live only until a swap.

One function, :func:`shadow_name`, and its SQL twins for the offline scripts,
which meet names (referencing columns, indexes) only when they run: the
script and the online op must name a shadow alike, or a rerun of one does
not find what the other built.

A name that fits is ``<name><suffix>``; a longer one is ``ulid_``, the MD5
of the name (MD5: the only digest both PostgreSQL's core and MariaDB have)
and the suffix, which fits any database. Releases before this one hashed
long names online with SHA-1 (:func:`legacy_shadow_name`): a conversion
begun under such a name is resumed under it (:func:`resumed_name`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable

from sqlalchemy.engine import Dialect

from ._inspect import name_limit, safe_name

__all__ = [
    "legacy_shadow_name",
    "resumed_name",
    "shadow_column",
    "shadow_name",
    "shadow_name_mariadb",
    "shadow_name_pg",
]

#: PostgreSQL's identifier limit, in bytes (and the offline scripts' for MariaDB).
PG_LIMIT = 63
MARIADB_LIMIT = 64


def shadow_name(name: str, suffix: str, limit: int) -> str:
    """``name + suffix``, or ``ulid_<md5 of name><suffix>`` when that is over ``limit`` bytes.

    Example:
        >>> shadow_name("orders_pkey", "__ulid", 63)
        'orders_pkey__ulid'
        >>> shadow_name("x" * 60, "__ulid", 63)
        'ulid_1198000c11968f9368e02d6da57ec147__ulid'
    """
    full = name + suffix
    if len(full.encode()) <= limit:
        return full
    return f"ulid_{hashlib.md5(name.encode(), usedforsecurity=False).hexdigest()}{suffix}"


def dialect_shadow_name(name: str, suffix: str, dialect: Dialect) -> str:
    """:func:`shadow_name` within ``dialect``'s limit for index and constraint names."""
    return shadow_name(name, suffix, name_limit(dialect))


def legacy_shadow_name(name: str, suffix: str, dialect: Dialect) -> str:
    """The name earlier releases gave the shadow online (SHA-1 of the long ones)."""
    return safe_name(name + suffix, dialect)


def resumed_name(name: str, legacy: str, existing: Collection[str]) -> str:
    """``name``, unless only ``legacy`` exists: a run begun by an earlier release goes on."""
    if legacy != name and legacy in existing and name not in existing:
        return legacy
    return name


def shadow_column(column: str, suffix: str, dialect: Dialect, existing: Iterable[str]) -> str:
    """The shadow column of ``column`` among a table's ``existing`` columns.

    :func:`dialect_shadow_name`, or the SHA-1 name of a conversion an
    earlier release began.
    """
    return resumed_name(
        dialect_shadow_name(column, suffix, dialect),
        legacy_shadow_name(column, suffix, dialect),
        set(existing),
    )


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def shadow_name_pg(expr: str, suffix: str) -> str:
    """PostgreSQL SQL of :func:`shadow_name` of the SQL name ``expr`` (63 bytes)."""
    return (
        f"CASE WHEN octet_length({expr}) <= {PG_LIMIT - len(suffix)} "
        f"THEN {expr} || {_literal(suffix)} "
        f"ELSE 'ulid_' || md5({expr}) || {_literal(suffix)} END"
    )


def shadow_name_mariadb(expr: str, suffix: str) -> str:
    """MariaDB SQL of :func:`shadow_name` of the SQL name ``expr`` (64 bytes).

    ``expr`` is a string of the script (a backslash needs no escape: the
    suffixes are plain).
    """
    return (
        f"CASE WHEN LENGTH({expr}) <= {MARIADB_LIMIT - len(suffix)} "
        f"THEN CONCAT({expr}, {_literal(suffix)}) "
        f"ELSE CONCAT('ulid_', MD5({expr}), {_literal(suffix)}) END"
    )
