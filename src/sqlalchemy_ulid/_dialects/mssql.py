"""SQL Server: ``BINARY(16)`` storage (compile-tested only: no server in the tests).

UNIQUEIDENTIFIER sorts by its last six bytes first, never in ULID order, so
``"auto"`` stores 16 binary bytes here.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.types import TypeEngine

from ._row import DialectRow, PagingSQL, TimeSQL
from ._sql import base32_millis, binary16

__all__ = ["ROW"]


def _char26_bin2() -> TypeEngine[Any]:
    return sa.CHAR(26, collation="Latin1_General_BIN2")


_MSSQL_HEX12 = "CAST(CONVERT(BINARY(6), {hex12}, 2) AS BIGINT)"
_MSSQL_TIME = TimeSQL(
    millis={
        "uuid": lambda col: _MSSQL_HEX12.format(
            hex12=f"LEFT(REPLACE(CONVERT(CHAR(36), {col}), '-', ''), 12)"
        ),
        "binary": lambda col: f"CAST(SUBSTRING({col}, 1, 6) AS BIGINT)",
        "hex": lambda col: _MSSQL_HEX12.format(hex12=f"LEFT(REPLACE({col}, '-', ''), 12)"),
        "text": base32_millis(
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

ROW = DialectRow(
    native="binary",
    binary=binary16,
    binary_literal=lambda data: f"0x{data.hex()}",
    text=_char26_bin2,
    time=_MSSQL_TIME,
    paging=PagingSQL(nulls_largest=False, nulls_order=False),
)
