"""PostgreSQL: native uuid storage, ``gen_ulid()``/``gen_uuid7()`` in SQL, range partitions."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

from .._convert import postgresql as convert
from .._errors import SettleError
from .._generator_sql import UUID7_FUNCTION, UUID7SQL, leading_version
from ._migration import PG_LOCKS
from ._row import FUNCTION_NAME, DialectRow, KeySQL, PagingSQL, ServerSQL, SettleSQL, TimeSQL
from ._sql import base32_millis, float_bits_at_most_24

__all__ = ["CLOCK_US", "ROW", "SETTLE", "pg_single_float"]


def pg_single_float(ddl: str) -> bool:
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
# so one session's ULIDs are ordered (see the generators below).


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


def _pg18_bytes_timestamp(data: str) -> str:
    """PostgreSQL 18+: :func:`_pg_bytes_timestamp` with 18's bytea->integer casts.

    The same two exact products, each 24-bit half read by one cast of three
    bytes instead of three ``get_byte`` calls.
    """
    return (
        f"timezone(INTERVAL '0', {_PG_EPOCH}"
        f" + substring({data} FROM 1 FOR 3)::integer * INTERVAL '16777.216 seconds'"
        f" + substring({data} FROM 4 FOR 3)::integer * INTERVAL '1 millisecond')"
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
# PostgreSQL 18: uuid_extract_timestamp() reads a UUIDv7's millisecond in C
# (IMMUTABLE too). Only for columns of UUIDs: on a ULID it is NULL, or a wrong
# time, unless the ULID's bits happen to read as version 7 and the RFC variant.
_PG_TIME = replace(
    _PG_TIME,
    newer=(
        (18,),
        replace(
            _PG_TIME,
            direct={
                "uuid": lambda col: _pg18_bytes_timestamp(f"uuid_send({col})"),
                "binary": _pg18_bytes_timestamp,
            },
            uuid7_direct={"uuid": lambda col: f"uuid_extract_timestamp({col})"},
        ),
    ),
)


# -- the server-side generators ----------------------------------------------------

# PostgreSQL's functions keep a **session-local counter** in a custom setting
# (``set_config('sqlalchemy_ulid.<name>', '<ms>:<count>', false)``): within
# one millisecond each id of a session has the next count right after its
# timestamp, so a session's ids sort in the order it made them. Ids of other
# sessions in the same millisecond interleave with them by their random bits.
# The count starts at 0 at each new millisecond; if it runs out (65,536 ULIDs
# or 4,096 UUIDv7s in one millisecond of one session, which a SQL function
# call is too slow to reach) the function moves on to the next millisecond.
# A clock that steps back keeps the session's last millisecond. A rolled-back
# transaction also rolls the setting back: later ids may then reuse the counts
# of ids that were rolled back, never those of committed ones, and their random
# bits differ.


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


# -- the settle horizon and the server clock -------------------------------------

# settle="auto": horizon = min(server now, start of the oldest transaction
# holding a write lock on the table) - margin. A row still invisible belongs
# to a transaction that either holds that lock now (its ids were made at most
# margin before it started writing, so after xact_start - margin) or has not
# sent its INSERT yet (its ids are newer than now - margin). PostgreSQL makes
# a commit visible before it releases the locks, so a transaction holding no
# lock when we look has either committed, visibly, or written nothing yet.
# Refused: REPEATABLE READ, even in a new transaction (its snapshot is taken
# by the horizon statement itself, before it reads pg_locks, so a writer
# committing in between is behind the horizon and not in the snapshot), and
# a hot standby (the writers run on the primary, out of sight).
# Transactions holding a lock that INSERT, UPDATE, DELETE, COPY or LOCK TABLE
# take on the table or one of its partitions (not VACUUM's, not readers').
# When a lock holder's transaction started (the statement reads pg_locks and
# the pg_stat_activity snapshot at two instants, in either order):
# * xact_start known: that.
# * no pg_stat_activity row, or state 'idle' with no xact_start: the backend
#   ended its transaction (exited, or went idle) after its lock was read, so
#   the commit is visible to the page; or, if the snapshot came first, it
#   began after the snapshot, so after statement_timestamp() (now bounds it).
# * any other state with no xact_start: unknown, not ended. A session with
#   track_activities = off shows 'disabled' (and its lock); one that turned
#   tracking on mid-transaction shows 'idle in transaction' with NULL. Its
#   transaction began after its backend did: backend_start bounds it, and
#   holds the horizon back until the lock is released (with no
#   backend_start either, to the epoch: nothing is delivered meanwhile).
# Hidden starts are ruled out up front by pg_read_all_stats. A holder
# without a pid is a prepared transaction, whose start is unknown.
_WRITERS = """
WITH target AS (SELECT to_regclass(:table) AS oid),
holders AS (
    SELECT DISTINCT l.pid FROM pg_locks l, target
    WHERE l.locktype = 'relation'
      AND l.mode IN ('RowExclusiveLock', 'ShareRowExclusiveLock',
                     'ExclusiveLock', 'AccessExclusiveLock')
      AND (l.relation = target.oid
           OR l.relation IN (SELECT relid FROM pg_partition_tree(target.oid)))
      AND l.pid IS DISTINCT FROM pg_backend_pid()
),
starts AS (
    SELECT CASE WHEN a.xact_start IS NOT NULL THEN a.xact_start
                WHEN a.state = 'idle' THEN NULL
                ELSE coalesce(a.backend_start, 'epoch') END AS start
    FROM holders h JOIN pg_stat_activity a ON a.pid = h.pid
)
SELECT {now}, {isolation},
       (SELECT floor(extract(epoch from min(start)) * 1000)::bigint FROM starts),
       (SELECT count(*) FROM holders WHERE pid IS NULL),
       pg_has_role('pg_read_all_stats', 'USAGE'),
       (SELECT c.relkind::text FROM pg_class c, target WHERE c.oid = target.oid),
       pg_is_in_recovery()
"""

# Writers lock the tables they write: a plain ('r') or partitioned ('p')
# table. A view's writers lock its base tables, never the view, so watching
# the view would see none and skip their rows.
_TABLE_KINDS = {"r": "table", "p": "partitioned table"}
_OTHER_KINDS = {"v": "view", "m": "materialized view", "f": "foreign table"}


def _read_writers(row: Sequence[Any], table: str) -> int | None:
    """The oldest writer's start (Unix ms) from the :data:`_WRITERS` row, or SettleError."""
    writers_start, prepared, privileged, kind, standby = row[3:8]
    if standby:
        raise SettleError(
            "settle='auto' is not sound on a PostgreSQL hot standby "
            "(pg_is_in_recovery() is true): the transactions still open run on "
            "the primary, where this server cannot see them. Pass a timedelta as "
            "settle= that covers your longest transaction plus replay lag (see "
            "docs/distributed.md), or read from the primary"
        )
    if kind is None:
        raise SettleError(f"settle='auto': no table {table} in this database")
    if kind not in _TABLE_KINDS:
        other = _OTHER_KINDS.get(kind, "relation of kind " + kind)
        raise SettleError(
            f"settle='auto' watches the writers of the paging column's table, but "
            f"{table} is a {other}: writers lock the tables it reads, not it, "
            "so their rows could be skipped. Page on the base table's column, or "
            "pass a timedelta as settle="
        )
    if not privileged:
        raise SettleError(
            "settle='auto' on PostgreSQL reads when other sessions' transactions "
            "started (pg_stat_activity.xact_start), which needs membership in "
            "pg_read_all_stats (GRANT pg_read_all_stats TO <reader role>); or "
            "pass a timedelta as settle="
        )
    if int(prepared):
        raise SettleError(
            f"settle='auto': a prepared transaction holds {table}, and when it "
            "started is unknown; COMMIT PREPARED or ROLLBACK PREPARED it, or pass a "
            "timedelta as settle="
        )
    return None if writers_start is None else int(writers_start)


SETTLE = SettleSQL(
    # The statement's start: never later than anything else it reads.
    now_ms="floor(extract(epoch from statement_timestamp()) * 1000)::bigint",
    isolation="current_setting('transaction_isolation'), 0",
    # PostgreSQL runs READ UNCOMMITTED as READ COMMITTED.
    safe_levels=frozenset({"read committed", "read uncommitted"}),
    refused_why=(
        (
            "repeatable read",
            "its snapshot is taken by the horizon statement itself, before it reads "
            "which writers hold the table, so a writer committing in between is lost",
        ),
    ),
    auto="writers",
    writers=_WRITERS,
    read_writers=_read_writers,
    # PostgreSQL keeps one snapshot of pg_stat_activity per transaction: a
    # reader polling inside one transaction would see writers' old xact_start
    # (stalling the feed) and not see new backends at all. Clearing it in a
    # statement of its own orders it before the read.
    writers_prelude="SELECT pg_stat_clear_snapshot()",
)
CLOCK_US = "SELECT floor(extract(epoch from clock_timestamp()) * 1000000)::bigint"

ROW = DialectRow(
    native="uuid",
    binary=_bytea,
    binary_literal=lambda data: f"'\\x{data.hex()}'::bytea",
    # COLLATE "C" compares bytes: locale collations may not sort like ULIDs.
    text=_char26_c,
    plain_bytes=True,  # psycopg, asyncpg
    keys={
        "ulid": KeySQL(
            ServerSQL(
                create=(PG_ULID_CREATE,),
                drop=(f"DROP FUNCTION IF EXISTS {FUNCTION_NAME}()",),
                default={"uuid": f"{FUNCTION_NAME}()", "binary": f"uuid_send({FUNCTION_NAME}())"},
            ),
            convert.ULID,
        ),
        "uuid": KeySQL(POSTGRESQL_UUID7, convert.UUID7),
    },
    range_partitions=True,
    time=_PG_TIME,
    paging=PagingSQL(
        nulls_largest=True,
        row_values=True,
        explain="EXPLAIN (FORMAT JSON) ",
        estimate=_pg_estimate,
        single_float=pg_single_float,
        int_width_enforced=True,
        text_holds_nul=False,
        extract_numeric=True,
    ),
    # Drivers build a uuid.UUID per value (psycopg in C, asyncpg a subclass);
    # bytes cost them next to nothing, and a ULID is made from bytes directly.
    native_as_bytes="uuid_send({})",
    locks=PG_LOCKS,
    # An INSERT holds its table lock, which the horizon waits for, from the
    # start of the statement: row-level waits come after it. So the margin
    # covers making the id to sending the statement (milliseconds at flush)
    # plus clock skew. MariaDB keeps 1 s: at REPEATABLE READ an INSERT can
    # wait on another statement's gap lock before its row exists, and 0.2 s
    # lost rows to a 0.2 s range UPDATE in bench_follow_soak.py.
    settle_margin=timedelta(milliseconds=200),
    settle=SETTLE,
    clock_us=CLOCK_US,
)
