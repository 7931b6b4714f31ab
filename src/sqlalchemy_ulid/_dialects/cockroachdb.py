"""CockroachDB: native uuid storage, the generators as SQL-language functions.

Compile-tested only (against ``sqlalchemy-cockroachdb``'s dialect): no
CockroachDB server runs in the tests. Every statement here keeps to the SQL
CockroachDB documents: ``substr``, ``strpos``, ``replace``, ``lpad``,
``to_hex``, ``gen_random_uuid()``, casts between ``UUID`` and ``TEXT``,
``INT // INT`` (``/`` would make a ``DECIMAL``), ``TIMESTAMP + INTERVAL``,
and ``CREATE FUNCTION ... LANGUAGE SQL``.

What it does not have: the settle horizon (no view of other transactions'
locks, and ``SERIALIZABLE`` by default), time partitions (its partitions are
by list or range of the primary key, in the enterprise edition, not
``PARTITION OF``), the storage conversions and the Alembic ops.
"""

from __future__ import annotations

from ._row import FUNCTION_NAME, DialectRow, KeySQL, PagingSQL, ServerSQL, TimeSQL
from ._sql import base32_millis, char26, digit_sum
from .postgresql import ROW as POSTGRESQL_ROW
from .postgresql import pg_single_float

__all__ = ["ROW", "UUID7_FUNCTION_NAME"]

UUID7_FUNCTION_NAME = "gen_uuid7"


def _hex_millis(hex_sql: str) -> str:
    """The Unix millisecond of a key's first 12 hex digits (any case)."""
    return digit_sum(
        f"lower({hex_sql})",
        12,
        "0123456789abcdef",
        "substr",
        lambda chars, char: f"strpos({chars}, {char})",
    )


# Keys are read as text: a uuid's canonical text, 16 bytes as hex. INT is
# 64 bits here, so the sums need no cast. The timestamp is a TIMESTAMP in
# UTC (naive: bound and read as UTC wall time), whole days then the
# milliseconds of the day, so no interval overflows before the year 10000.
_TIME = TimeSQL(
    millis={
        "uuid": lambda col: _hex_millis(f"replace(CAST({col} AS TEXT), '-', '')"),
        "binary": lambda col: _hex_millis(f"encode({col}, 'hex')"),
        "hex": lambda col: _hex_millis(f"replace({col}, '-', '')"),
        "text": base32_millis("substr", lambda chars, char: f"strpos({chars}, {char})"),
    },
    timestamp=lambda ms: (
        f"(TIMESTAMP '1970-01-01 00:00:00' + (({ms}) // 86400000) * INTERVAL '1 day'"
        f" + (({ms}) % 86400000) * INTERVAL '1 millisecond')"
    ),
    native_uuid=lambda dialect: True,
    # UUID values compare as their 16 bytes.
    native_uuid_time_ordered=lambda dialect: True,
)

# -- the generators, as SQL-language functions (no PL/pgSQL needed) ---------------

# The millisecond as 12 hex digits, read per call (clock_timestamp, not now).
_MS_HEX = "lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::INT8), 12, ''0'')"
# A random UUID (version 4) as 32 hex digits: digit 13 is its version and
# digit 17 its variant; the others are random.
_RANDOM_HEX = "replace(CAST(gen_random_uuid() AS TEXT), ''-'', '''')"


def _function(name: str, body: str) -> str:
    """A function returning the UUID whose 32 hex digits ``body`` makes."""
    # Quoted with '...', not $$...$$: the body's own quotes are doubled above.
    return (
        f"CREATE OR REPLACE FUNCTION {name}() RETURNS UUID VOLATILE LANGUAGE SQL "
        f"AS 'SELECT CAST({body} AS UUID)'"
    )


# ULID: the millisecond, then 80 random bits: digits 1-12 of one random UUID
# and 21-28 of another (none of them a version or variant digit).
_ULID_CREATE = _function(
    FUNCTION_NAME,
    f"{_MS_HEX} || substr({_RANDOM_HEX}, 1, 12) || substr({_RANDOM_HEX}, 21, 8)",
)
# UUIDv7: the millisecond, "7", then digits 14-32 of a random UUID (its
# variant digit, 17, lands on the variant's place).
_UUID7_CREATE = _function(
    UUID7_FUNCTION_NAME, f"{_MS_HEX} || ''7'' || substr({_RANDOM_HEX}, 14, 19)"
)

_SERVER = ServerSQL(
    create=(_ULID_CREATE,),
    drop=(f"DROP FUNCTION IF EXISTS {FUNCTION_NAME}",),
    default={"uuid": f"{FUNCTION_NAME}()"},
    ordered="no: ordered by millisecond only",
)
_UUID7 = ServerSQL(
    create=(_UUID7_CREATE,),
    drop=(f"DROP FUNCTION IF EXISTS {UUID7_FUNCTION_NAME}",),
    default={"uuid": f"{UUID7_FUNCTION_NAME}()"},
    ordered="no: ordered by millisecond only",
)

ROW = DialectRow(
    native="uuid",
    binary=POSTGRESQL_ROW.binary,
    binary_literal=POSTGRESQL_ROW.binary_literal,
    # STRING (TEXT) compares bytes unless a collation is given.
    text=char26,
    plain_bytes=True,  # psycopg, asyncpg
    keys={"ulid": KeySQL(_SERVER), "uuid": KeySQL(_UUID7)},
    time=_TIME,
    # NULL sorts before every value in ascending order; ORDER BY NULLS
    # FIRST/LAST is emulated (it is recent); tuples compare as index spans.
    paging=PagingSQL(
        nulls_largest=False,
        nulls_order=False,
        row_values=True,
        single_float=pg_single_float,
        int_width_enforced=True,
    ),
)
