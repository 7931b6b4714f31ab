"""SQLite: ``BLOB`` storage; ``gen_ulid()`` is registered on each connection."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.types import TypeEngine

from .._convert import sqlite as convert
from .._generator_sql import UUID7_FUNCTION, UUID7SQL
from ._row import FUNCTION_NAME, DialectRow, KeySQL, PagingSQL, ServerSQL, SettleSQL, TimeSQL
from ._sql import base32_millis, char26, digit_sum, x_literal

__all__ = ["ROW"]


def _blob() -> TypeEngine[Any]:
    return sa.BLOB()


def _sqlite_hex_millis(hex_sql: str) -> str:
    return digit_sum(
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
        "text": base32_millis("substr", lambda chars, char: f"instr({chars}, {char})"),
    },
    timestamp=lambda ms: f"(strftime('%Y-%m-%d %H:%M:%f', ({ms}) / 1000.0, 'unixepoch') || '000')",
)


# register_uuid7_function() defines gen_uuid7() (16 bytes from new_uuid7())
# on each connection.
SQLITE_UUID7 = UUID7SQL(
    create=(),
    drop=(),
    default={"binary": f"{UUID7_FUNCTION}()", "hex": f"lower(hex({UUID7_FUNCTION}()))"},
    ordered="yes, within the process (it calls new_uuid7())",
)


# 'now' is stable within a statement; SQLite runs in this process.
_SETTLE = SettleSQL(
    now_ms="CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
    isolation="'serializable', 1",
    auto_refused=(
        "settle='auto' has nothing to read on SQLite (no view of other connections' "
        "transactions); pass a timedelta longer than your slowest write transaction"
    ),
)

ROW = DialectRow(
    native="binary",
    binary=_blob,
    binary_literal=x_literal,
    text=char26,
    plain_bytes=True,  # sqlite3, aiosqlite
    # SQLite keeps no functions in the database: register_ulid_function()
    # defines gen_ulid() on each connection instead.
    keys={
        "ulid": KeySQL(
            ServerSQL(create=(), drop=(), default={"binary": f"{FUNCTION_NAME}()"}),
            convert.ULID,
        ),
        "uuid": KeySQL(SQLITE_UUID7, convert.UUID7),
    },
    time=_SQLITE_TIME,
    unique_by_index=True,
    paging=PagingSQL(
        nulls_largest=False,
        row_values=True,
        nan_is_null=True,
        untyped_decimals=False,
        numeric_as_double=True,
        dates_as_text=True,
    ),
    settle=_SETTLE,
    clock_us="SELECT CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)",
    functions_per_connection=True,
)
