"""SQLite: ``BLOB`` storage; ``gen_ulid()`` is registered on each connection."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.types import TypeEngine

from .._convert_sql import SQLITE_CONVERT
from .._convert_uuid_sql import SQLITE_UUID_CONVERT
from .._generator_sql import SQLITE_UUID7
from ._row import FUNCTION_NAME, DialectRow, PagingSQL, ServerSQL, TimeSQL
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


ROW = DialectRow(
    native="binary",
    binary=_blob,
    binary_literal=x_literal,
    text=char26,
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
)
