"""PostgreSQL: native uuid storage, ``gen_ulid()``/``gen_uuid7()`` in SQL, range partitions."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.types import TypeEngine

from .._convert_sql import POSTGRESQL_CONVERT
from .._convert_uuid_sql import POSTGRESQL_UUID_CONVERT
from .._generator_sql import PG_ULID_CREATE, POSTGRESQL_UUID7
from ._migration import PG_LOCKS
from ._row import FUNCTION_NAME, DialectRow, PagingSQL, ServerSQL, TimeSQL
from ._sql import base32_millis, float_bits_at_most_24

__all__ = ["ROW"]


def _pg_single_float(ddl: str) -> bool:
    """PostgreSQL: ``REAL``/``float4``, or ``FLOAT(p)`` with p <= 24; bare FLOAT is double."""
    ddl = ddl.strip().upper()
    return ddl in ("REAL", "FLOAT4") or bool(float_bits_at_most_24(ddl))


def _pg_estimate(row: Any) -> int:
    plan = row[0] if not isinstance(row[0], str) else json.loads(row[0])
    return int(plan[0]["Plan"]["Plan Rows"])


def _bytea() -> TypeEngine[Any]:
    return sa.LargeBinary()


def _char26_c() -> TypeEngine[Any]:
    return sa.CHAR(26, collation="C")


# PostgreSQL's gen_ulid() keeps a per-session count after the millisecond,
# so one session's ULIDs are ordered (see _generator_sql).
_PG_CREATE = PG_ULID_CREATE


# PostgreSQL: every function here is IMMUTABLE (timestamp + interval and
# timezone(interval, timestamp) are; timestamptz + interval is only STABLE),
# so the expression may define a stored generated column or an index.
# timezone(INTERVAL '0', ...) is UTC without looking a zone up by name.
_PG_EPOCH = "TIMESTAMP '1970-01-01 00:00:00'"
_PG_HEX12 = "('x' || {hex12})::bit(48)::bigint"


def _pg_bytes_timestamp(data: str) -> str:
    """The timestamp of the leading 48 bits of ``data`` (a bytea), all integer reads.

    The millisecond as two 24-bit halves, three ``get_byte`` each, so each
    byte is read once (no hex text). Both products are exact in the double
    that ``float8 * interval`` multiplies in: ``hi * 16777.216 s`` is
    ``hi * 125 * 2**27`` microseconds (31 significant bits at most) and
    ``lo * 1 ms`` stays below 2**34 microseconds. (One product of the whole
    millisecond would not be: it is off by microseconds past the year 4253.)
    """

    def half(first: int) -> str:
        b = [f"get_byte({data}, {first + i})" for i in range(3)]
        return f"(({b[0]} << 16) | ({b[1]} << 8) | {b[2]})"

    return (
        f"timezone(INTERVAL '0', {_PG_EPOCH} + {half(0)} * INTERVAL '16777.216 seconds'"
        f" + {half(3)} * INTERVAL '1 millisecond')"
    )


_PG_TIME = TimeSQL(
    millis={
        "uuid": lambda col: _PG_HEX12.format(
            hex12=f"encode(substring(uuid_send({col}) FROM 1 FOR 6), 'hex')"
        ),
        "binary": lambda col: _PG_HEX12.format(
            hex12=f"encode(substring({col} FROM 1 FOR 6), 'hex')"
        ),
        "hex": lambda col: _PG_HEX12.format(hex12=f"substr(replace({col}, '-', ''), 1, 12)"),
        "text": base32_millis(
            "substr", lambda chars, char: f"CAST(strpos({chars}, {char}) AS bigint)"
        ),
    },
    # Whole days plus the milliseconds of the day keep this exact up to
    # 2**48 - 1 (interval * float8 is exact here: at most 3.3 million days,
    # and under 86.4 million milliseconds; about twice as fast as
    # make_interval()).
    timestamp=lambda ms: (
        f"timezone(INTERVAL '0', {_PG_EPOCH}"
        f" + (({ms}) / 86400000) * INTERVAL '1 day'"
        f" + (({ms}) % 86400000) * INTERVAL '1 millisecond')"
    ),
    direct={
        "uuid": lambda col: _pg_bytes_timestamp(f"uuid_send({col})"),
        "binary": _pg_bytes_timestamp,
    },
    zoned=True,
    native_uuid=lambda dialect: True,
)


ROW = DialectRow(
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
    convert_uuid7=POSTGRESQL_UUID_CONVERT,
    range_partitions=True,
    time=_PG_TIME,
    paging=PagingSQL(
        nulls_largest=True,
        row_values=True,
        explain="EXPLAIN (FORMAT JSON) ",
        estimate=_pg_estimate,
        single_float=_pg_single_float,
        int_width_enforced=True,
    ),
    # Drivers build a uuid.UUID per value (psycopg in C, asyncpg a subclass);
    # bytes cost them next to nothing, and a ULID is made from bytes directly.
    uuid_as_bytes="uuid_send({})",
    uuid7=POSTGRESQL_UUID7,
    locks=PG_LOCKS,
    unnest_arrays=True,
    # An INSERT holds its table lock, which the horizon waits for, from the
    # start of the statement: row-level waits come after it. So the margin
    # covers making the id to sending the statement (milliseconds at flush)
    # plus clock skew. MariaDB keeps 1 s: at REPEATABLE READ an INSERT can
    # wait on another statement's gap lock before its row exists, and 0.2 s
    # lost rows to a 0.2 s range UPDATE in bench_follow_soak.py.
    settle_margin=timedelta(milliseconds=200),
)
