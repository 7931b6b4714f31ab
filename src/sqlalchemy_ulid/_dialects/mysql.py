"""MariaDB and MySQL: ``BINARY(16)`` storage, the ULID DEFAULT inlined (no stored function)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

from .._convert import mysql as convert
from .._generator_sql import UUID7_FUNCTION, UUID7SQL, leading_version
from ._migration import MYSQL_LOCKS
from ._row import FUNCTION_NAME, DialectRow, KeySQL, PagingSQL, ServerSQL, SettleSQL, TimeSQL
from ._sql import base32_millis, binary16, float_bits_at_most_24, x_literal

__all__ = ["CLOCK_US", "MARIADB", "ROW", "mysql_ulid_sql"]


def _mysql_single_float(ddl: str) -> bool:
    """MariaDB/MySQL: ``FLOAT``, ``FLOAT(M,D)`` or ``FLOAT(p <= 24)``; REAL is a DOUBLE."""
    ddl = ddl.strip().upper()
    if not ddl.startswith("FLOAT"):
        return False
    if re.match(r"FLOAT\s*\(\s*\d+\s*,", ddl):
        return True  # FLOAT(M, D): single precision with a display width
    bits = float_bits_at_most_24(ddl)
    return True if bits is None else bits


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


def _char26_ascii_bin() -> TypeEngine[Any]:
    from sqlalchemy.dialects.mysql import CHAR

    return CHAR(26, charset="ascii", collation="ascii_bin")


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
        "text": base32_millis("SUBSTRING", lambda chars, char: f"INSTR({chars}, {char})"),
    },
    timestamp=lambda ms: (
        f"TIMESTAMPADD(MICROSECOND, ({ms}) * 1000, TIMESTAMP'1970-01-01 00:00:00')"
    ),
    datetime_type=_datetime3,
    # SQLAlchemy 2.1 renders Uuid as MariaDB's UUID (10.7+); 2.0 as CHAR(32).
    native_uuid=lambda dialect: bool(dialect.supports_native_uuid),
    native_uuid_time_ordered=lambda dialect: _mariadb_sorts_uuidv7(dialect.server_version_info),
)


# -- the UUIDv7 generator ---------------------------------------------------------

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


# -- the settle horizon and the server clock -------------------------------------

# settle="auto": horizon = server now - margin, and the page is a locking read
# (LOCK IN SHARE MODE / FOR SHARE) through the clustered index, FORCE INDEX
# (PRIMARY). A locking read waits for every uncommitted row it meets in the
# range, then reads it if it committed; a row not yet inserted when the
# horizon was taken has an id newer than now - margin. Which index it scans
# matters: InnoDB writes a row's clustered (primary-key) entry first and its
# secondary-index entries one by one after it, checking each foreign key just
# before the entry of that key's index. An INSERT waiting on a foreign-key
# check has its clustered entry in place but maybe not yet the entry of the
# index a filter would use, so a scan of that index passes the row without
# waiting and the cursor moves past it. The clustered index is the one index
# every row is in before the INSERT can wait on anything after it: the paging
# column must be in the primary key (a unique secondary key is refused: through
# its own index it is unsound, through the primary key it would scan and lock
# the whole table each poll). PRIMARY KEY (tenant, id) with the tenant fixed
# by = is a range scan of that tenant's part. The margin must cover the time
# from making an id to the INSERT's clustered entry, waits before it (a table
# lock, a foreign key on a prefix of the primary key, a gap lock) included.
# INFORMATION_SCHEMA.INNODB_TRX is not used: trx_started has whole seconds,
# and MariaDB serves it from a cache refreshed at most every 100 ms.
#
# Isolation: MariaDB's REPEATABLE READ (its default) is accepted while
# @@in_transaction = 0, read in the horizon statement itself: InnoDB creates
# a read view at the first consistent read of an InnoDB table, and the
# horizon statement reads none (NOW(), variables, information_schema; a row
# committed right after it is in the page on 10.11, tests/test_settle_isolation.py).
# The locking read takes gap locks at REPEATABLE READ, held until the
# transaction ends: a poll should end its transaction at once, as follow()
# does. MySQL has no @@in_transaction: REPEATABLE READ is refused there.
#
# Galera (@@global.wsrep_on = ON) is refused: a transaction open on another
# node sends nothing here until it commits, so there is no row lock to wait
# for. A server built without wsrep answers error 1193; it cannot be a Galera
# node, so the statement runs again without that column (and the engine's
# dialect is remembered, so later polls do not ask).
# UTC_TIMESTAMP is timezone-free arithmetic (UNIX_TIMESTAMP(NOW()) is not, in
# a DST fold); NOW() and UTC_TIMESTAMP() are the statement start.
_NOW_MS = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000"
# "auto": the paging table's type. A locking read through a view that
# MariaDB materializes (ALGORITHM=TEMPTABLE, or any view with GROUP BY,
# DISTINCT, UNION...) locks no base row, so it would not wait for a slow
# writer: only base tables are accepted.
_TABLE_TYPE = (
    "(SELECT TABLE_TYPE FROM information_schema.TABLES "
    "WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :name)"
)
# Galera, read by "auto". The global value, not the session's: a session that
# SET wsrep_on = OFF (so its own writes do not replicate) still reads a node
# that other nodes' transactions reach only once they commit.
_MYSQL_SETTLE = SettleSQL(
    now_ms=_NOW_MS,
    isolation="@@transaction_isolation, @@autocommit",
    auto="locking_read",
    # The page reads the clustered index (see above).
    locking_hint="FORCE INDEX (PRIMARY)",
    table_type=_TABLE_TYPE,
    cluster_variable="wsrep_on",
    unknown_variable=1193,  # ER_UNKNOWN_SYSTEM_VARIABLE, MariaDB and MySQL
    lock_wait_timeout=1205,  # ER_LOCK_WAIT_TIMEOUT, MariaDB and MySQL
)
# MariaDB: also REPEATABLE READ, while @@in_transaction says this transaction
# has not touched InnoDB yet (so it has no read view; see above).
_MARIADB_SETTLE = replace(
    _MYSQL_SETTLE,
    isolation="@@tx_isolation, @@autocommit, @@in_transaction",
    fresh_levels=frozenset({"repeatable read"}),
)
CLOCK_US = "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"


def _datetime6() -> TypeEngine[Any]:
    from sqlalchemy.dialects.mysql import DATETIME

    return DATETIME(fsp=6)


def _flavour(dialect: Dialect) -> DialectRow:
    """MariaDB's row or MySQL's: a ``mysql://`` URL tells them apart once connected."""
    return MARIADB if getattr(dialect, "is_mariadb", False) else ROW


ROW = DialectRow(
    # Never MariaDB's UUID type: it rejects a quarter of ULIDs and reorders
    # the rest (it sorts by the UUIDv1 time fields).
    native="binary",
    binary=binary16,
    binary_literal=x_literal,
    text=_char26_ascii_bin,
    plain_bytes=True,  # PyMySQL, mysqlclient, asyncmy
    keys={
        "ulid": KeySQL(
            ServerSQL(
                create=(_MYSQL_CREATE,),
                drop=(f"DROP FUNCTION IF EXISTS {FUNCTION_NAME}",),
                default={"binary": _MYSQL_EXPR},
            ),
            convert.ULID,
        ),
        "uuid": KeySQL(MYSQL_UUID7, convert.UUID7),
    },
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
        numeric_digits=65,
        explain="EXPLAIN FORMAT=JSON ",
        estimate=_mysql_estimate,
    ),
    locks=MYSQL_LOCKS,
    settle=_MYSQL_SETTLE,
    clock_us=CLOCK_US,
    utc_datetime=_datetime6,
    flavour=_flavour,
)
#: MariaDB's row: MySQL's, but for the isolation rules of the settle horizon
#: and its own UUIDv7 function.
MARIADB = replace(
    ROW,
    settle=_MARIADB_SETTLE,
    keys={**ROW.keys, "uuid": KeySQL(MARIADB_UUID7, convert.UUID7)},
)
