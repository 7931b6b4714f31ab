"""The one table of per-dialect facts, and the one lookup that reads it.

Every way the databases differ for ULIDs is a field of :class:`DialectRow`:
how a ULID is stored, how a binary literal is written, whether the drivers
take plain ``bytes``, the server-side generator's SQL, the SQL that converts
text to binary storage and back, and whether range partitions exist. The
type, the server defaults, the Alembic ops and the partition helpers all ask
:func:`dialect_row`; nothing else in the package looks at a dialect's name.

This module imports neither ``_types`` nor ``_defaults`` (they import it),
and never Alembic.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql.base import PGDialect
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

from ._codec import ALPHABET
from ._convert_sql import MYSQL_CONVERT, POSTGRESQL_CONVERT, SQLITE_CONVERT, ConvertSQL
from ._convert_uuid_sql import MYSQL_UUID_CONVERT, POSTGRESQL_UUID_CONVERT, SQLITE_UUID_CONVERT
from ._generator_sql import MYSQL_UUID7, PG_ULID_CREATE, POSTGRESQL_UUID7, SQLITE_UUID7, UUID7SQL

__all__ = [
    "FUNCTION_NAME",
    "DialectRow",
    "LockSQL",
    "PagingSQL",
    "ServerSQL",
    "TimeSQL",
    "dialect_row",
    "dialects_with",
    "key_conversion_sql",
    "mysql_ulid_sql",
]

#: The name of the server-side function on every database.
FUNCTION_NAME = "gen_ulid"


@dataclass(frozen=True)
class ServerSQL:
    """One dialect's server-side generator: DDL and DEFAULT expressions."""

    create: tuple[str, ...]
    drop: tuple[str, ...]
    #: storage kind ("uuid", "binary") -> the SQL of a DEFAULT expression
    default: dict[str, str]


@dataclass(frozen=True)
class LockSQL:
    """One dialect's lock timeouts, for DDL that must not queue the application.

    A DDL statement waiting for its lock makes every later query on the table
    wait behind it; these bound that wait (see ``alembic/_locks.py``).
    """

    #: our session's id (PostgreSQL pid, MariaDB connection id)
    session_id: str
    #: one row: the session's current lock timeout setting(s)
    read: str
    #: (seconds, inside a transaction) -> statements setting the timeout(s)
    set: Callable[[float, bool], tuple[str, ...]]
    #: (the row read, inside a transaction) -> statements putting it back
    restore: Callable[[tuple[Any, ...], bool], tuple[str, ...]]
    #: error numbers / SQLSTATEs of "lock wait timed out"
    timeout_codes: frozenset[object]
    #: the sessions blocking session ``{pid}``: (id, state, query, seconds in transaction)
    blockers: str
    #: a failed statement aborts the transaction, so retry inside a savepoint
    transactional: bool


def _pg_lock_set(seconds: float, in_transaction: bool) -> tuple[str, ...]:
    scope = "LOCAL " if in_transaction else ""
    return (f"SET {scope}lock_timeout = '{max(1, round(seconds * 1000))}ms'",)


def _pg_lock_restore(row: tuple[Any, ...], in_transaction: bool) -> tuple[str, ...]:
    scope = "LOCAL " if in_transaction else ""
    value = str(row[0]).replace("'", "''")
    return (f"SET {scope}lock_timeout = '{value}'",)


def _mysql_lock_set(seconds: float, in_transaction: bool) -> tuple[str, ...]:
    # Whole seconds only. Below one second: 0, which fails at once if the
    # lock is taken (NOWAIT); the retries then do the waiting, between tries.
    whole = int(seconds)
    return (
        f"SET SESSION lock_wait_timeout = {whole}",
        f"SET SESSION innodb_lock_wait_timeout = {max(1, whole)}",
    )


def _mysql_lock_restore(row: tuple[Any, ...], in_transaction: bool) -> tuple[str, ...]:
    return (
        f"SET SESSION lock_wait_timeout = {int(row[0])}",
        f"SET SESSION innodb_lock_wait_timeout = {int(row[1])}",
    )


_PG_LOCKS = LockSQL(
    session_id="SELECT pg_backend_pid()",
    read="SELECT current_setting('lock_timeout')",
    set=_pg_lock_set,
    restore=_pg_lock_restore,
    timeout_codes=frozenset({"55P03"}),  # lock_not_available
    blockers=(
        "SELECT a.pid, a.state, a.query, "
        "EXTRACT(EPOCH FROM clock_timestamp() - a.xact_start) "
        "FROM pg_stat_activity a WHERE a.pid = ANY(pg_blocking_pids({pid})) ORDER BY a.pid"
    ),
    transactional=True,
)
# MariaDB has no pg_blocking_pids(): a metadata lock is held by a session
# with an open transaction on the table, and INNODB_TRX lists those (a
# transaction that only read is there too, from its first read).
_MYSQL_LOCKS = LockSQL(
    session_id="SELECT CONNECTION_ID()",
    read="SELECT @@SESSION.lock_wait_timeout, @@SESSION.innodb_lock_wait_timeout",
    set=_mysql_lock_set,
    restore=_mysql_lock_restore,
    timeout_codes=frozenset({1205}),  # ER_LOCK_WAIT_TIMEOUT
    blockers=(
        "SELECT p.ID, TRIM(CONCAT_WS(' ', p.COMMAND, p.STATE)), "
        "COALESCE(p.INFO, t.trx_query), "
        "TIMESTAMPDIFF(SECOND, t.trx_started, NOW()) "
        "FROM information_schema.INNODB_TRX t "
        "JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id "
        "WHERE p.ID <> {pid} ORDER BY p.ID"
    ),
    transactional=False,
)


@dataclass(frozen=True)
class DialectRow:
    """Everything about one database that ULID support needs to know."""

    #: the storage kind of ``"auto"``/``"native"``
    native: Literal["uuid", "binary"]
    #: the 16-byte binary column type
    binary: Callable[[], TypeEngine[Any]]
    #: renders 16 bytes as a SQL literal of that type
    binary_literal: Callable[[bytes], str]
    #: the ``CHAR(26)`` column type, with a byte-order collation
    text: Callable[[], TypeEngine[Any]]
    #: The drivers take plain ``bytes`` for binary parameters, so the DBAPI
    #: ``Binary()`` wrapper (a copy per value) can be skipped.
    plain_bytes: bool = False
    #: the server-side ``gen_ulid()`` (None: the database has none)
    server: ServerSQL | None = None
    #: text <-> binary conversion SQL (None: not implemented here)
    convert: ConvertSQL | None = None
    #: UUIDv7 text/hex/uuid/binary conversion SQL (None: not implemented here)
    convert_uuid7: ConvertSQL | None = None
    #: ``CREATE TABLE ... PARTITION OF ... FOR VALUES FROM ... TO ...`` exists
    range_partitions: bool = False
    #: the creation time of a stored key in SQL (None: not implemented here)
    time: TimeSQL | None = None
    #: The driver can run other statements while a streaming (server-side
    #: cursor) read is open on the same connection (PyMySQL cannot).
    write_while_streaming: bool = True
    #: Uniqueness is added as a unique index: adding a unique constraint
    #: would recreate the table (SQLite), and dropping it offline could not.
    unique_by_index: bool = False
    #: drops a temporary table (``{}``: its quoted name) without committing
    drop_temporary: str = "DROP TABLE IF EXISTS {}"
    #: how keyset pages sort and compare several keys
    paging: PagingSQL = field(default_factory=lambda: PagingSQL())
    #: Reads a native uuid column (``{}``: its SQL) as its 16 bytes in a
    #: SELECT list or RETURNING, so the driver returns ``bytes``, not a
    #: ``uuid.UUID`` to convert again (None: read the uuid as it is).
    uuid_as_bytes: str | None = None
    #: the server-side ``gen_uuid7()`` and UUIDv7 DEFAULTs (None: none here)
    uuid7: UUID7SQL | None = None
    #: lock timeouts for DDL (None: the database has no lock waits to bound)
    locks: LockSQL | None = None
    #: ``UPDATE ... FROM unnest(CAST(:a AS t[]), ...)`` takes a batch of values
    #: as two array parameters (else they go through a temporary table)
    unnest_arrays: bool = False
    #: ``settle="auto"``'s margin when ``margin=`` is left at its default:
    #: what must cover the time from making an id to its row being where the
    #: horizon looks (measured in benchmarks/bench_mint_gap.py and
    #: bench_follow_soak.py).
    settle_margin: timedelta = timedelta(seconds=1)

    def kind(self, storage: str) -> str:
        """Return the storage kind ("uuid", "binary", "text") of a storage option."""
        return self.native if storage in ("auto", "native") else storage


@dataclass(frozen=True)
class PagingSQL:
    """One dialect's facts for keyset pages sorted by several keys."""

    #: NULL sorts after every value in ascending order (None: not known here)
    nulls_largest: bool | None = None
    #: ``ORDER BY ... NULLS FIRST/LAST`` is understood (else emulated)
    nulls_order: bool = True
    #: a row-value comparison ``(a, b) > (:a, :b)`` is an index range scan
    #: (else the planner gets an expanded OR with a leading range conjunct)
    row_values: bool = False
    #: the EXPLAIN prefix whose first row :attr:`estimate` reads (None: none)
    explain: str | None = None
    #: the row estimate from that first row
    estimate: Callable[[Any], int] | None = None
    #: a native ENUM sorts in declaration order but compares as text
    enum_compares_as_text: bool = False
    #: whether a float type, as this dialect renders it in DDL, is single
    #: precision: it comes back rounded, so a cursor could not find its row
    #: again (None: every float this dialect stores is a double)
    single_float: Callable[[str], bool] | None = None
    #: an integer column only holds values of its type's width (SQLite's
    #: INTEGER holds any 64-bit value whatever the declared type)
    int_width_enforced: bool = False
    #: no NaN or infinity can be stored (nor bound: the driver refuses them)
    finite_numbers_only: bool = False
    #: text can hold NUL characters (PostgreSQL's cannot, nor bind one)
    text_holds_nul: bool = True
    #: dates such as '0000-00-00' can be stored (MariaDB/MySQL without
    #: NO_ZERO_DATE, their default); the driver returns them as text
    zero_dates: bool = False


_FLOAT_BITS = re.compile(r"FLOAT\s*\(\s*(\d+)")


def _float_bits_at_most_24(ddl: str) -> bool | None:
    """``FLOAT(p)`` with p <= 24 bits is single precision (None: no p given)."""
    found = _FLOAT_BITS.match(ddl)
    return None if found is None else int(found.group(1)) <= 24


def _pg_single_float(ddl: str) -> bool:
    """PostgreSQL: ``REAL``/``float4``, or ``FLOAT(p)`` with p <= 24; bare FLOAT is double."""
    ddl = ddl.strip().upper()
    return ddl in ("REAL", "FLOAT4") or bool(_float_bits_at_most_24(ddl))


def _mysql_single_float(ddl: str) -> bool:
    """MariaDB/MySQL: ``FLOAT``, ``FLOAT(M,D)`` or ``FLOAT(p <= 24)``; REAL is a DOUBLE."""
    ddl = ddl.strip().upper()
    if not ddl.startswith("FLOAT"):
        return False
    if re.match(r"FLOAT\s*\(\s*\d+\s*,", ddl):
        return True  # FLOAT(M, D): single precision with a display width
    bits = _float_bits_at_most_24(ddl)
    return True if bits is None else bits


def _pg_estimate(row: Any) -> int:
    plan = row[0] if not isinstance(row[0], str) else json.loads(row[0])
    return int(plan[0]["Plan"]["Plan Rows"])


def _mysql_estimate(row: Any) -> int:
    """Multiply rows x filtered of every table of a ``FORMAT=JSON`` plan."""
    factors: list[float] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            table = node.get("table")
            if isinstance(table, dict) and "rows" in table:
                factors.append(float(table["rows"]) * float(table.get("filtered", 100)) / 100)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(row[0]))
    estimate = 1.0
    for factor in factors:
        estimate *= factor
    return round(estimate) if factors else 0


# -- column types and literals ------------------------------------------------


def _bytea() -> TypeEngine[Any]:
    return sa.LargeBinary()


def _binary16() -> TypeEngine[Any]:
    return sa.BINARY(16)


def _blob() -> TypeEngine[Any]:
    return sa.BLOB()


def _raw16() -> TypeEngine[Any]:
    from sqlalchemy.dialects.oracle import RAW

    return RAW(16)


def _char26() -> TypeEngine[Any]:
    return sa.CHAR(26)


def _char26_c() -> TypeEngine[Any]:
    return sa.CHAR(26, collation="C")


def _char26_ascii_bin() -> TypeEngine[Any]:
    from sqlalchemy.dialects.mysql import CHAR

    return CHAR(26, charset="ascii", collation="ascii_bin")


def _char26_bin2() -> TypeEngine[Any]:
    return sa.CHAR(26, collation="Latin1_General_BIN2")


def _x_literal(data: bytes) -> str:
    return f"X'{data.hex()}'"


# -- server-side generators ---------------------------------------------------

# PostgreSQL's gen_ulid() keeps a per-session count after the millisecond,
# so one session's ULIDs are ordered (see _generator_sql).
_PG_CREATE = PG_ULID_CREATE


def mysql_ulid_sql(millis: str, tail: str = "RANDOM_BYTES(10)") -> str:
    """MariaDB/MySQL SQL of a 16-byte ULID: the 6 bytes of ``millis``, then ``tail``.

    ``tail`` is SQL of the last 10 bytes (random, or a tie count then random).

    Example:
        >>> mysql_ulid_sql("t.ms")
        "CONCAT(UNHEX(LPAD(HEX(t.ms), 12, '0')), RANDOM_BYTES(10))"
    """
    return f"CONCAT(UNHEX(LPAD(HEX({millis}), 12, '0')), {tail})"


# MySQL 8.0.13+ and MariaDB 10.10+ (RANDOM_BYTES) accept this expression as a
# column DEFAULT. Stored functions are not allowed there (MariaDB error 1901),
# so the DEFAULT inlines it and needs no installed function. SYSDATE, not NOW:
# NOW is fixed at statement start, SYSDATE is read per row.
_MYSQL_EXPR = mysql_ulid_sql("FLOOR(UNIX_TIMESTAMP(SYSDATE(3)) * 1000)")
_MYSQL_CREATE = (
    f"CREATE FUNCTION IF NOT EXISTS {FUNCTION_NAME}() RETURNS BINARY(16) "
    f"NOT DETERMINISTIC NO SQL RETURN {_MYSQL_EXPR}"
)


# -- creation time in SQL (ulid_timestamp) ---------------------------------------

_Sql = Callable[[str], str]


@dataclass(frozen=True)
class TimeSQL:
    """One dialect's SQL for the creation time of a stored ULID or UUIDv7.

    ``millis[kind]`` turns a column stored as ``kind`` into its leading 48-bit
    Unix millisecond, an integer; ``timestamp`` turns that integer into the
    dialect's timestamp, in UTC. The kinds: ``"uuid"`` (a native uuid type),
    ``"binary"`` (16 bytes), ``"hex"`` (a UUID's hex text, dashes or not) and
    ``"text"`` (a ULID's 26 characters).
    """

    millis: dict[str, _Sql]
    timestamp: _Sql
    #: kind -> the timestamp straight from the column, where that beats
    #: ``timestamp(millis(col))`` (which reads the millisecond twice)
    direct: dict[str, _Sql] = field(default_factory=dict)
    #: the timestamp type keeps the zone (timestamptz): bind aware datetimes
    #: (else bind the naive UTC wall time)
    zoned: bool = False
    #: the column type of the result, where SQLAlchemy's DateTime would cut
    #: the milliseconds (None: ``sa.DateTime(timezone=True)``)
    datetime_type: Callable[[], TypeEngine[Any]] | None = None
    #: ``sa.Uuid()`` is the database's own uuid type here (else ``CHAR(32)`` hex)
    native_uuid: Callable[[Dialect], bool] = lambda dialect: False
    #: the native uuid type sorts valid UUIDv7 values in time (byte) order
    native_uuid_time_ordered: Callable[[Dialect], bool] = lambda dialect: True


def _digit_sum(
    col: str, count: int, alphabet: str, substr: str, position: Callable[[str, str], str]
) -> str:
    """The number held by the first ``count`` digits of ``col`` in ``alphabet``.

    ``position(alphabet_sql, char_sql)`` is the dialect's 1-based search; each
    digit is looked up once, and the sum stays within 64 bits.
    """
    base = len(alphabet)
    terms = [
        f"({position(repr(alphabet), f'{substr}({col}, {i + 1}, 1)')} - 1)"
        f" * {base ** (count - 1 - i)}"
        for i in range(count)
    ]
    return "(" + " + ".join(terms) + ")"


def _base32_millis(substr: str, position: Callable[[str, str], str]) -> _Sql:
    # 10 Crockford characters hold 50 bits, the first two always zero.
    return lambda col: _digit_sum(col, 10, ALPHABET, substr, position)


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
        "text": _base32_millis(
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

# MariaDB's UUID type stored every UUID with its groups swapped (UUIDv1
# time order) until MDEV-26664/MDEV-31926: from these releases on, versions
# 6 and up are stored and compared as plain bytes. Series -> first fixed release.
_MARIADB_UUIDV7_FIXED: dict[tuple[int, ...], tuple[int, ...]] = {
    (10, 10): (10, 10, 6),
    (10, 11): (10, 11, 5),
    (11, 0): (11, 0, 3),
}
_MARIADB_UUIDV7_FIXED_SERIES = (11, 1, 2)  # 11.1.2, and every later series


def _mariadb_sorts_uuidv7(server_version: tuple[int | str, ...] | None) -> bool:
    """Whether a MariaDB server's UUID type sorts UUIDv7 values in time order.

    Example:
        >>> _mariadb_sorts_uuidv7((10, 11, 4)), _mariadb_sorts_uuidv7((10, 11, 5))
        (False, True)
        >>> _mariadb_sorts_uuidv7((10, 9, 8)), _mariadb_sorts_uuidv7((11, 4, 2))
        (False, True)
    """
    if server_version is None:
        return False  # not connected yet: no promise
    version: tuple[int, ...] = ()
    for part in server_version:  # leading numbers; a driver may append "MariaDB"
        if not isinstance(part, int):
            break
        version += (part,)
    fixed = _MARIADB_UUIDV7_FIXED.get(version[:2])
    if fixed is not None:
        return version >= fixed
    return version >= _MARIADB_UUIDV7_FIXED_SERIES


def _datetime3() -> TypeEngine[Any]:
    from sqlalchemy.dialects.mysql import DATETIME

    return DATETIME(fsp=3)


# MySQL/MariaDB: a DATETIME in UTC, whatever the session time_zone (no
# FROM_UNIXTIME, which reads it). Date arithmetic reads sql_mode, so MariaDB
# allows it in a VIRTUAL generated column but not in a stored or indexed one.
_MYSQL_HEX12 = "CAST(CONV({hex12}, 16, 10) AS UNSIGNED)"
_MYSQL_TIME = TimeSQL(
    millis={
        # MariaDB's UUID type reads as its canonical text in string functions.
        "uuid": lambda col: _MYSQL_HEX12.format(hex12=f"LEFT(REPLACE({col}, '-', ''), 12)"),
        "binary": lambda col: _MYSQL_HEX12.format(hex12=f"HEX(LEFT({col}, 6))"),
        "hex": lambda col: _MYSQL_HEX12.format(hex12=f"LEFT(REPLACE({col}, '-', ''), 12)"),
        "text": _base32_millis("SUBSTRING", lambda chars, char: f"INSTR({chars}, {char})"),
    },
    timestamp=lambda ms: (
        f"TIMESTAMPADD(MICROSECOND, ({ms}) * 1000, TIMESTAMP'1970-01-01 00:00:00')"
    ),
    datetime_type=_datetime3,
    # SQLAlchemy 2.1 renders Uuid as MariaDB's UUID (10.7+); 2.0 as CHAR(32).
    native_uuid=lambda dialect: bool(dialect.supports_native_uuid),
    native_uuid_time_ordered=lambda dialect: _mariadb_sorts_uuidv7(dialect.server_version_info),
)


def _sqlite_hex_millis(hex_sql: str) -> str:
    return _digit_sum(
        f"lower({hex_sql})",
        12,
        "0123456789abcdef",
        "substr",
        lambda chars, char: f"instr({chars}, {char})",
    )


# SQLite: text in SQLAlchemy's own DATETIME format (six fraction digits), so
# it parses like a stored DateTime. The seconds go through a double, which
# SQLite rounds back to whole milliseconds: exact up to the year 9999.
# strftime without 'now' is deterministic, so generated columns may use it.
_SQLITE_TIME = TimeSQL(
    millis={
        "binary": lambda col: _sqlite_hex_millis(f"hex(substr({col}, 1, 6))"),
        "hex": lambda col: _sqlite_hex_millis(f"replace({col}, '-', '')"),
        "text": _base32_millis("substr", lambda chars, char: f"instr({chars}, {char})"),
    },
    timestamp=lambda ms: f"(strftime('%Y-%m-%d %H:%M:%f', ({ms}) / 1000.0, 'unixepoch') || '000')",
)

# Compile-only (no server in the tests): SQL Server and Oracle.
_MSSQL_HEX12 = "CAST(CONVERT(BINARY(6), {hex12}, 2) AS BIGINT)"
_MSSQL_TIME = TimeSQL(
    millis={
        "uuid": lambda col: _MSSQL_HEX12.format(
            hex12=f"LEFT(REPLACE(CONVERT(CHAR(36), {col}), '-', ''), 12)"
        ),
        "binary": lambda col: f"CAST(SUBSTRING({col}, 1, 6) AS BIGINT)",
        "hex": lambda col: _MSSQL_HEX12.format(hex12=f"LEFT(REPLACE({col}, '-', ''), 12)"),
        "text": _base32_millis(
            "SUBSTRING", lambda chars, char: f"CAST(CHARINDEX({char}, {chars}) AS BIGINT)"
        ),
    },
    timestamp=lambda ms: (
        f"DATEADD(millisecond, ({ms}) % 86400000, "
        f"DATEADD(day, ({ms}) / 86400000, CAST('1970-01-01' AS DATETIME2(3))))"
    ),
    # UNIQUEIDENTIFIER sorts by its last six bytes first: never time order.
    native_uuid=lambda dialect: True,
    native_uuid_time_ordered=lambda dialect: False,
)
_ORACLE_HEX12 = "TO_NUMBER({hex12}, 'XXXXXXXXXXXX')"
_ORACLE_TIME = TimeSQL(
    millis={
        "binary": lambda col: _ORACLE_HEX12.format(hex12=f"RAWTOHEX(UTL_RAW.SUBSTR({col}, 1, 6))"),
        "hex": lambda col: _ORACLE_HEX12.format(
            hex12=f"UPPER(SUBSTR(REPLACE({col}, '-', ''), 1, 12))"
        ),
        "text": _base32_millis("SUBSTR", lambda chars, char: f"INSTR({chars}, {char})"),
    },
    timestamp=lambda ms: (
        f"(TIMESTAMP '1970-01-01 00:00:00 UTC' + NUMTODSINTERVAL(({ms}) / 1000, 'SECOND'))"
    ),
)


# -- the table ----------------------------------------------------------------

_POSTGRESQL = DialectRow(
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
        text_holds_nul=False,
    ),
    # Drivers build a uuid.UUID per value (psycopg in C, asyncpg a subclass);
    # bytes cost them next to nothing, and a ULID is made from bytes directly.
    uuid_as_bytes="uuid_send({})",
    uuid7=POSTGRESQL_UUID7,
    locks=_PG_LOCKS,
    unnest_arrays=True,
    # An INSERT holds its table lock, which the horizon waits for, from the
    # start of the statement: row-level waits come after it. So the margin
    # covers making the id to sending the statement (milliseconds at flush)
    # plus clock skew. MariaDB keeps 1 s: at REPEATABLE READ an INSERT can
    # wait on another statement's gap lock before its row exists, and 0.2 s
    # lost rows to a 0.2 s range UPDATE in bench_follow_soak.py.
    settle_margin=timedelta(milliseconds=200),
)
_MYSQL = DialectRow(
    # Never MariaDB's UUID type: it rejects a quarter of ULIDs and reorders
    # the rest (it sorts by the UUIDv1 time fields).
    native="binary",
    binary=_binary16,
    binary_literal=_x_literal,
    text=_char26_ascii_bin,
    plain_bytes=True,  # PyMySQL, mysqlclient, asyncmy
    server=ServerSQL(
        create=(_MYSQL_CREATE,),
        drop=(f"DROP FUNCTION IF EXISTS {FUNCTION_NAME}",),
        default={"binary": _MYSQL_EXPR},
    ),
    convert=MYSQL_CONVERT,
    convert_uuid7=MYSQL_UUID_CONVERT,
    time=_MYSQL_TIME,
    write_while_streaming=False,
    drop_temporary="DROP TEMPORARY TABLE IF EXISTS {}",
    # MariaDB 10.11 scans the whole index for a row-value comparison.
    paging=PagingSQL(
        nulls_largest=False,
        nulls_order=False,
        enum_compares_as_text=True,
        single_float=_mysql_single_float,
        int_width_enforced=True,
        finite_numbers_only=True,
        zero_dates=True,
        explain="EXPLAIN FORMAT=JSON ",
        estimate=_mysql_estimate,
    ),
    uuid7=MYSQL_UUID7,
    locks=_MYSQL_LOCKS,
)
_OTHER = DialectRow(native="binary", binary=_binary16, binary_literal=_x_literal, text=_char26)

#: Dialect name -> row. MariaDB reached through a ``mysql+...://`` URL has
#: the dialect name "mysql", so both names share one row.
_ROWS: dict[str, DialectRow] = {
    "postgresql": _POSTGRESQL,
    # PostgreSQL's storage, but neither gen_ulid() nor the conversion SQL
    # has been tried there.
    "cockroachdb": replace(
        _POSTGRESQL,
        server=None,
        convert=None,
        convert_uuid7=None,
        time=None,
        uuid_as_bytes=None,
        uuid7=None,
        locks=None,
        unnest_arrays=False,
    ),
    "mysql": _MYSQL,
    "mariadb": _MYSQL,
    "sqlite": DialectRow(
        native="binary",
        binary=_blob,
        binary_literal=_x_literal,
        text=_char26,
        plain_bytes=True,  # sqlite3, aiosqlite
        # SQLite keeps no functions in the database: register_ulid_function()
        # defines gen_ulid() on each connection instead.
        server=ServerSQL(create=(), drop=(), default={"binary": f"{FUNCTION_NAME}()"}),
        convert=SQLITE_CONVERT,
        convert_uuid7=SQLITE_UUID_CONVERT,
        time=_SQLITE_TIME,
        unique_by_index=True,
        paging=PagingSQL(nulls_largest=False, row_values=True),
        uuid7=SQLITE_UUID7,
    ),
    # UNIQUEIDENTIFIER sorts by its last six bytes first: not ULID order.
    "mssql": DialectRow(
        native="binary",
        binary=_binary16,
        binary_literal=lambda data: f"0x{data.hex()}",
        text=_char26_bin2,
        time=_MSSQL_TIME,
        paging=PagingSQL(nulls_largest=False, nulls_order=False),
    ),
    "oracle": DialectRow(
        native="binary",
        binary=_raw16,
        binary_literal=lambda data: f"HEXTORAW('{data.hex()}')",
        text=_char26,
        time=_ORACLE_TIME,
        paging=PagingSQL(nulls_largest=True),
    ),
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
        >>> dialect_row("mariadb") is dialect_row("mysql")
        True
        >>> dialect_row("firebird").kind("auto")
        'binary'
    """
    if isinstance(dialect, str):
        return _ROWS.get(dialect, _OTHER)
    row = _ROWS.get(dialect.name)
    if row is not None:
        return row
    return _OTHER_POSTGRESQL_BASED if isinstance(dialect, PGDialect) else _OTHER


def dialects_with(has: Callable[[DialectRow], object]) -> str:
    """Name, for an error message, the dialects whose row has a feature.

    Example:
        >>> dialects_with(lambda row: row.convert)
        'mariadb, mysql, postgresql, sqlite'
    """
    return ", ".join(sorted(name for name, row in _ROWS.items() if has(row)))


# -- primary-key conversion (op.convert_primary_key_to_ulid) ----------------------


@dataclass(frozen=True)
class KeyConversionSQL:
    """One dialect's SQL for converting a primary key and its foreign keys.

    Templates take ``{table}`` (quoted, schema-qualified), ``{column}``
    (quoted) and ``{type}`` (compiled); the queries take ``:schema``
    (None: the connection's) and ``:tables`` (an expanding list of names).
    """

    #: makes a column NOT NULL
    set_not_null: str
    #: gives a column its comment (``{comment}``: a string literal; ``{null}``:
    #: ``NULL`` or ``NOT NULL``, for the databases that restate the column)
    set_comment: str
    #: names the triggers on the tables: rows of (trigger, table)
    triggers: str
    #: names the views that read the tables: rows of (view, table)
    views: str
    #: names the foreign keys in other schemas that reference the tables:
    #: rows of (constraint, its schema, its table, the referenced table)
    foreign_keys_elsewhere: str
    #: names every foreign key in the schema that references the tables, from
    #: the catalog: rows of (constraint, its table, the referenced table, the
    #: referenced column)
    foreign_keys_to: str
    #: names the indexes that use a column (``:table``, ``:column``) with what
    #: the op would not recreate: rows of (index, access method, has a
    #: predicate, has expressions, has INCLUDE columns, has DESC or NULLS
    #: FIRST, the rest it would lose named in a text, '' for none); None where
    #: the op recreates what reflection reports
    index_options: str | None = None
    #: what else uses a column (``:table`` quoted, ``:column``), which ``DROP
    #: COLUMN`` would drop with it (a CHECK constraint, extended statistics, a
    #: policy, a sequence owned by it) or refuse to drop (a generated column):
    #: not indexes, unique, primary and foreign keys (built again or refused
    #: before), views and triggers (refused before), the column's DEFAULT or
    #: the constraints named ``:same`` and ``:check`` (the ops' own); rows of
    #: one description each. None where the server refuses such a DROP itself
    dependants: str | None = None
    #: locks a table for the swap (``{tables}``: one quoted name), or None
    #: where DDL commits on its own and a lock would not outlive it
    lock: str | None = None
    #: run once the swap holds its first lock, ``{others}`` the number of
    #: tables still to lock: their waits, all told, become shorter than the
    #: server's deadlock detection, so that a deadlock with a writer waiting
    #: behind a held table ends by the swap's timeout (it lets go and tries
    #: again), never by the server cancelling the writer
    lock_held: str | None = None


_KEY_CONVERSION: dict[str, KeyConversionSQL] = {
    "postgresql": KeyConversionSQL(
        set_not_null="ALTER TABLE {table} ALTER COLUMN {column} SET NOT NULL",
        set_comment="COMMENT ON COLUMN {table}.{column} IS {comment}",
        triggers=(
            "SELECT t.tgname, c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE NOT t.tgisinternal "
            "AND n.nspname = COALESCE(:schema, current_schema()) AND c.relname IN :tables"
        ),
        views=(
            "SELECT DISTINCT v.relname, c.relname FROM pg_depend d "
            "JOIN pg_rewrite r ON r.oid = d.objid JOIN pg_class v ON v.oid = r.ev_class "
            "JOIN pg_class c ON c.oid = d.refobjid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE d.classid = 'pg_rewrite'::regclass AND v.oid <> c.oid "
            "AND n.nspname = COALESCE(:schema, current_schema()) AND c.relname IN :tables"
        ),
        # Reflection names the referred schema unreliably here: it leaves out
        # a schema on the search path, and guesses wrong when told not to.
        foreign_keys_elsewhere=(
            "SELECT con.conname, ns.nspname, cl.relname, rt.relname FROM pg_constraint con "
            "JOIN pg_class cl ON cl.oid = con.conrelid "
            "JOIN pg_namespace ns ON ns.oid = cl.relnamespace "
            "JOIN pg_class rt ON rt.oid = con.confrelid "
            "JOIN pg_namespace rns ON rns.oid = rt.relnamespace "
            "WHERE con.contype = 'f' AND rns.nspname = COALESCE(:schema, current_schema()) "
            "AND ns.nspname <> rns.nspname AND rt.relname IN :tables"
        ),
        foreign_keys_to=(
            "SELECT con.conname, cl.relname, rt.relname, a.attname FROM pg_constraint con "
            "JOIN pg_class cl ON cl.oid = con.conrelid "
            "JOIN pg_namespace ns ON ns.oid = cl.relnamespace "
            "JOIN pg_class rt ON rt.oid = con.confrelid "
            "JOIN pg_namespace rns ON rns.oid = rt.relnamespace "
            "JOIN pg_attribute a ON a.attrelid = rt.oid AND a.attnum = ANY (con.confkey) "
            "WHERE con.contype = 'f' AND rns.nspname = COALESCE(:schema, current_schema()) "
            "AND ns.nspname = rns.nspname AND rt.relname IN :tables"
        ),
        # pg_depend lists every column an index uses: key, INCLUDE,
        # expression and predicate columns alike. The rebuild names the
        # columns only: another column's collation or operator class, NULLS
        # NOT DISTINCT (read through to_jsonb: PostgreSQL 15+), storage
        # parameters and the replica identity would be lost (the converted
        # column's own collation and operator class do not apply to its
        # new type).
        index_options=(
            "SELECT DISTINCT i.relname, am.amname, x.indpred IS NOT NULL, "
            "x.indexprs IS NOT NULL, x.indnkeyatts <> x.indnatts, "
            "EXISTS (SELECT 1 FROM unnest(x.indoption::int2[]) o WHERE o <> 0), "
            "concat_ws(', ', CASE WHEN to_jsonb(x) ->> 'indnullsnotdistinct' = 'true' "
            "THEN 'NULLS NOT DISTINCT' END, CASE WHEN EXISTS (SELECT 1 FROM "
            "unnest(x.indcollation::oid[], x.indkey::int2[]) k(coll, n) JOIN pg_attribute c "
            "ON c.attrelid = x.indrelid AND c.attnum = k.n WHERE c.attname <> :column "
            "AND k.coll <> c.attcollation) THEN 'a collation of another column' END, "
            "CASE WHEN EXISTS (SELECT 1 FROM unnest(x.indclass::oid[], x.indkey::int2[]) "
            "k(opc, n) JOIN pg_opclass o ON o.oid = k.opc JOIN pg_attribute c "
            "ON c.attrelid = x.indrelid AND c.attnum = k.n WHERE c.attname <> :column "
            "AND NOT o.opcdefault) THEN 'an operator class of another column' END, "
            "CASE WHEN i.reloptions IS NOT NULL THEN 'storage parameters' END, "
            "CASE WHEN x.indisreplident THEN 'REPLICA IDENTITY' END) "
            "FROM pg_depend d JOIN pg_class i ON i.oid = d.objid "
            "JOIN pg_index x ON x.indexrelid = i.oid JOIN pg_am am ON am.oid = i.relam "
            "JOIN pg_class t ON t.oid = d.refobjid "
            "JOIN pg_namespace n ON n.oid = t.relnamespace "
            "JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = d.refobjsubid "
            "WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass "
            "AND NOT x.indisprimary AND n.nspname = COALESCE(:schema, current_schema()) "
            "AND t.relname = :table AND a.attname = :column"
        ),
        dependants=(
            "WITH col AS (SELECT attrelid, attnum, attacl FROM pg_attribute "
            "WHERE attrelid = to_regclass(:table) AND attname = :column) "
            "SELECT COALESCE((SELECT 'the generated column ' || quote_ident(g.attname) "
            "FROM pg_attrdef f JOIN pg_attribute g "
            "ON g.attrelid = f.adrelid AND g.attnum = f.adnum "
            "WHERE d.classid = 'pg_attrdef'::regclass AND f.oid = d.objid), "
            "pg_describe_object(d.classid, d.objid, d.objsubid)) FROM pg_depend d, col "
            "WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = col.attrelid "
            "AND d.refobjsubid = col.attnum AND d.deptype IN ('n', 'a') "
            "AND d.classid NOT IN ('pg_rewrite'::regclass, 'pg_trigger'::regclass) "
            "AND NOT (d.classid = 'pg_attrdef'::regclass AND d.objid IN "
            "(SELECT oid FROM pg_attrdef WHERE adrelid = col.attrelid AND adnum = col.attnum)) "
            "AND NOT (d.classid = 'pg_class'::regclass AND d.objid IN "
            "(SELECT indexrelid FROM pg_index WHERE indrelid = col.attrelid)) "
            "AND NOT (d.classid = 'pg_constraint'::regclass AND d.objid IN (SELECT oid FROM "
            "pg_constraint WHERE contype IN ('p', 'u', 'f') OR conname IN (:same, :check))) "
            "UNION ALL SELECT 'GRANTs on the column' FROM col WHERE attacl IS NOT NULL"
        ),
        lock="LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE",
        lock_held=(
            "SELECT set_config('lock_timeout', greatest(1, floor(1000 * least("
            "extract(epoch FROM current_setting('lock_timeout')::interval), "
            "extract(epoch FROM current_setting('deadlock_timeout')::interval) * 0.8 "
            "/ {others})))::int || 'ms', true)"
        ),
    ),
    "mysql": KeyConversionSQL(
        set_not_null="ALTER TABLE {table} MODIFY {column} {type} NOT NULL",
        set_comment="ALTER TABLE {table} MODIFY {column} {type} {null} COMMENT {comment}",
        triggers=(
            "SELECT TRIGGER_NAME, EVENT_OBJECT_TABLE FROM information_schema.TRIGGERS "
            "WHERE EVENT_OBJECT_SCHEMA = COALESCE(:schema, DATABASE()) "
            "AND EVENT_OBJECT_TABLE IN :tables"
        ),
        # MariaDB 10.11 has no VIEW_TABLE_USAGE: a view whose text names
        # the table (quoted, as the server stores it) reads it.
        views=(
            "SELECT v.TABLE_NAME, t.TABLE_NAME FROM information_schema.VIEWS v "
            "JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = v.TABLE_SCHEMA "
            "WHERE v.TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND t.TABLE_NAME IN :tables "
            "AND v.VIEW_DEFINITION LIKE CONCAT('%`', t.TABLE_NAME, '`%')"
        ),
        foreign_keys_elsewhere=(
            "SELECT CONSTRAINT_NAME, CONSTRAINT_SCHEMA, TABLE_NAME, REFERENCED_TABLE_NAME "
            "FROM information_schema.REFERENTIAL_CONSTRAINTS "
            "WHERE UNIQUE_CONSTRAINT_SCHEMA = COALESCE(:schema, DATABASE()) "
            "AND CONSTRAINT_SCHEMA <> UNIQUE_CONSTRAINT_SCHEMA AND REFERENCED_TABLE_NAME IN :tables"
        ),
        foreign_keys_to=(
            "SELECT CONSTRAINT_NAME, TABLE_NAME, REFERENCED_TABLE_NAME, REFERENCED_COLUMN_NAME "
            "FROM information_schema.KEY_COLUMN_USAGE "
            "WHERE REFERENCED_TABLE_SCHEMA = COALESCE(:schema, DATABASE()) "
            "AND TABLE_SCHEMA = REFERENCED_TABLE_SCHEMA AND REFERENCED_TABLE_NAME IN :tables"
        ),
        # COLLATION 'D': a descending part (MariaDB 10.8+, MySQL 8); no
        # predicates or INCLUDE here, and a prefix cannot apply to a key type.
        index_options=(
            "SELECT INDEX_NAME, LOWER(INDEX_TYPE), 0, MAX(COLUMN_NAME IS NULL), 0, "
            "MAX(COALESCE(COLLATION, '') = 'D'), '' FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :table "
            "AND INDEX_NAME <> 'PRIMARY' AND INDEX_NAME IN (SELECT INDEX_NAME FROM "
            "information_schema.STATISTICS WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) "
            "AND TABLE_NAME = :table AND COLUMN_NAME = :column) "
            "GROUP BY INDEX_NAME, INDEX_TYPE"
        ),
    ),
}
_KEY_CONVERSION["mariadb"] = _KEY_CONVERSION["mysql"]


def key_conversion_sql(dialect: Dialect) -> KeyConversionSQL | None:
    """Return the dialect's primary-key conversion SQL (None: not supported here).

    Example:
        >>> from sqlalchemy.dialects import sqlite
        >>> key_conversion_sql(sqlite.dialect()) is None
        True
    """
    return _KEY_CONVERSION.get(dialect.name)
