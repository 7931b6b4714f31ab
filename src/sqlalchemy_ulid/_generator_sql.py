"""The SQL of the server-side generators: ``gen_ulid()`` and ``gen_uuid7()``.

Per-dialect data, like ``_convert_sql``: the ``_dialects`` table points at
it, and nothing here imports the rest of the package.

PostgreSQL's functions keep a **session-local counter** in a custom setting
(``set_config('sqlalchemy_ulid.<name>', '<ms>:<count>', false)``): within
one millisecond each id of a session has the next count right after its
timestamp, so a session's ids sort in the order it made them. Ids of other
sessions in the same millisecond interleave with them by their random bits.
The count starts at 0 at each new millisecond; if it runs out (65,536 ULIDs
or 4,096 UUIDv7s in one millisecond of one session, which a SQL function
call is too slow to reach) the function moves on to the next millisecond.
A clock that steps back keeps the session's last millisecond. A rolled-back
transaction also rolls the setting back: later ids may then reuse the counts
of ids that were rolled back, never those of committed ones, and their random
bits differ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from sqlalchemy.engine import Dialect

__all__ = [
    "MARIADB_UUID7",
    "MYSQL_UUID7",
    "PG_ULID_CREATE",
    "POSTGRESQL_UUID7",
    "SQLITE_UUID7",
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


# -- PostgreSQL -------------------------------------------------------------------


def _pg_session_function(
    name: str, counter_bytes: str, random_bytes: str, limit: int, comment: str
) -> str:
    """A PL/pgSQL generator: the session's millisecond and count, then random bytes.

    ``counter_bytes`` and ``random_bytes`` are SQL over ``ms`` (bigint),
    ``n`` (the count) and ``r`` (the 16 bytes of a fresh ``gen_random_uuid()``).
    PL/pgSQL, not one SQL statement: a SQL function with the state in a
    subquery or CTE is not inlined, and measured 2.5 to 5 times slower.
    """
    setting = f"sqlalchemy_ulid.{name}"
    return f"""\
CREATE OR REPLACE FUNCTION {name}() RETURNS uuid
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE AS $$
-- {comment}
DECLARE
    ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    state text := current_setting('{setting}', true);
    last_ms bigint;
    n integer := 0;
    r bytea := uuid_send(gen_random_uuid());
BEGIN
    IF state IS NOT NULL AND state <> '' THEN
        last_ms := split_part(state, ':', 1)::bigint;
        IF ms <= last_ms THEN
            -- the same millisecond, or the clock stepped back: count on
            ms := last_ms;
            n := split_part(state, ':', 2)::integer + 1;
            IF n > {limit} THEN
                ms := last_ms + 1;
                n := 0;
            END IF;
        END IF;
    END IF;
    PERFORM set_config('{setting}', ms || ':' || n, false);
    RETURN encode(substring(int8send(ms) FROM 3) || {counter_bytes} || {random_bytes}, 'hex')::uuid;
END
$$"""


# gen_random_uuid() (core since PostgreSQL 13) is a UUIDv4: bytes 1-6, 8 and
# 10-16 are fully random (version and variant bits sit in bytes 7 and 9).
# floor(), not a cast: a cast rounds, which could date an id in the future.

#: ULID: 48-bit ms, a 16-bit count, then 64 random bits (bytes 10-16 and 1).
PG_ULID_CREATE = _pg_session_function(
    "gen_ulid",
    "substring(int4send(n) FROM 3)",
    "substring(r FROM 10 FOR 7) || substring(r FROM 1 FOR 1)",
    0xFFFF,
    "ULID: 48-bit Unix ms, a per-session count, 64 random bits (sqlalchemy-ulid)",
)

#: UUIDv7 (RFC 9562 method 1): 48-bit ms, version 7 and a 12-bit count
#: (rand_a), the variant and 62 random bits (rand_b).
_PG_UUID7_CREATE = _pg_session_function(
    UUID7_FUNCTION,
    "substring(int4send(28672 | n) FROM 3)",  # 0x7000: the version nibble
    "set_byte(substring(r FROM 9 FOR 8), 0, 128 | (get_byte(r, 8) & 63))",
    0xFFF,
    "UUIDv7: 48-bit Unix ms, version 7, a per-session count, variant, 62 random bits",
)


def _pg_has_uuidv7(dialect: Dialect) -> bool:
    version = leading_version(dialect)
    return version is not None and version >= (18,)


def _pg_missing(dialect: Dialect) -> str | None:
    version = leading_version(dialect)
    if version is not None and version < (13,):
        return (
            f"PostgreSQL {'.'.join(map(str, version))} has no gen_random_uuid() "
            "(core from PostgreSQL 13), which gen_uuid7() needs"
        )
    return None


POSTGRESQL_UUID7 = UUID7SQL(
    create=(_PG_UUID7_CREATE,),
    drop=(f"DROP FUNCTION IF EXISTS {UUID7_FUNCTION}()",),
    default={
        "uuid": f"{UUID7_FUNCTION}()",
        "binary": f"uuid_send({UUID7_FUNCTION}())",
        "hex": f"replace(CAST({UUID7_FUNCTION}() AS text), '-', '')",
    },
    builtin={
        "uuid": "uuidv7()",
        "binary": "uuid_send(uuidv7())",
        "hex": "replace(CAST(uuidv7() AS text), '-', '')",
    },
    has_builtin=_pg_has_uuidv7,
    missing=_pg_missing,
    # On 18+ gen_uuid7() is the server's own uuidv7(), for raw SQL.
    create_builtin=(
        f"CREATE OR REPLACE FUNCTION {UUID7_FUNCTION}() RETURNS uuid "
        "LANGUAGE sql VOLATILE AS 'SELECT uuidv7()'",
    ),
    ordered="yes, within a session (PostgreSQL 18's uuidv7() within a backend, too)",
)


# -- MySQL / MariaDB ----------------------------------------------------------------

# One expression, allowed as a column DEFAULT (stored functions are not): 12
# hex digits of the millisecond, "7", 3 random digits, the variant digit
# (8, 9, A or B), and 15 random digits. Each RANDOM_BYTES() call is fresh.
# SYSDATE, not NOW: NOW is fixed at statement start, SYSDATE is read per row.
_M_MS = "LPAD(HEX(FLOOR(UNIX_TIMESTAMP(SYSDATE(3)) * 1000)), 12, '0')"
_M_VARIANT = "HEX(8 | (ASCII(RANDOM_BYTES(1)) & 3))"
_M_HEX = (
    f"CONCAT({_M_MS}, '7', LEFT(HEX(RANDOM_BYTES(2)), 3), {_M_VARIANT}, "
    "LEFT(HEX(RANDOM_BYTES(8)), 15))"
)
# The canonical text, for MariaDB's UUID type: INSERT() puts the first dash
# into the millisecond's 12 digits, which are read once.
_M_TEXT = (
    f"LOWER(CONCAT(INSERT({_M_MS}, 9, 0, '-'), '-7', LEFT(HEX(RANDOM_BYTES(2)), 3), '-', "
    f"{_M_VARIANT}, LEFT(HEX(RANDOM_BYTES(2)), 3), '-', HEX(RANDOM_BYTES(6))))"
)


def _mariadb_has_uuid_v7(dialect: Dialect) -> bool:
    version = leading_version(dialect)
    return version is not None and version >= (11, 7)


def _mariadb_missing(dialect: Dialect) -> str | None:
    version = leading_version(dialect)
    if version is not None and version < (10, 10):
        return (
            f"MariaDB {'.'.join(map(str, version))} has no RANDOM_BYTES() "
            "(from MariaDB 10.10), which the UUIDv7 DEFAULT needs"
        )
    return None


# MySQL 8.0.13+ (RANDOM_BYTES, expression DEFAULTs): no UUIDv7 function of its own.
MYSQL_UUID7 = UUID7SQL(
    create=(
        f"CREATE FUNCTION IF NOT EXISTS {UUID7_FUNCTION}() RETURNS BINARY(16) "
        f"NOT DETERMINISTIC NO SQL RETURN UNHEX({_M_HEX})",
    ),
    drop=(f"DROP FUNCTION IF EXISTS {UUID7_FUNCTION}",),
    default={"uuid": _M_TEXT, "binary": f"UNHEX({_M_HEX})", "hex": f"LOWER({_M_HEX})"},
    ordered="no: ordered by millisecond only",
)
# MariaDB (the row of a connected MariaDB server): UUID_v7() from 11.7 for its
# UUID type, and RANDOM_BYTES() only from 10.10.
MARIADB_UUID7 = replace(
    MYSQL_UUID7,
    builtin={"uuid": "UUID_v7()"},
    has_builtin=_mariadb_has_uuid_v7,
    missing=_mariadb_missing,
    ordered="no: ordered by millisecond only (MariaDB 11.7's UUID_v7() too)",
)


# -- SQLite -------------------------------------------------------------------------

# register_uuid7_function() defines gen_uuid7() (16 bytes from new_uuid7())
# on each connection.
SQLITE_UUID7 = UUID7SQL(
    create=(),
    drop=(),
    default={"binary": f"{UUID7_FUNCTION}()", "hex": f"lower(hex({UUID7_FUNCTION}()))"},
    ordered="yes, within the process (it calls new_uuid7())",
)
