"""Oracle: ``RAW(16)`` storage (compile-tested only: no server in the tests)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.types import TypeEngine

from ._row import DialectRow, PagingSQL, TimeSQL
from ._sql import base32_millis, char26

__all__ = ["ROW"]


def _raw16() -> TypeEngine[Any]:
    from sqlalchemy.dialects.oracle import RAW

    return RAW(16)


_ORACLE_HEX12 = "TO_NUMBER({hex12}, 'XXXXXXXXXXXX')"
_ORACLE_TIME = TimeSQL(
    millis={
        "binary": lambda col: _ORACLE_HEX12.format(hex12=f"RAWTOHEX(UTL_RAW.SUBSTR({col}, 1, 6))"),
        "hex": lambda col: _ORACLE_HEX12.format(
            hex12=f"UPPER(SUBSTR(REPLACE({col}, '-', ''), 1, 12))"
        ),
        "text": base32_millis("SUBSTR", lambda chars, char: f"INSTR({chars}, {char})"),
    },
    timestamp=lambda ms: (
        f"(TIMESTAMP '1970-01-01 00:00:00 UTC' + NUMTODSINTERVAL(({ms}) / 1000, 'SECOND'))"
    ),
)

ROW = DialectRow(
    native="binary",
    binary=_raw16,
    binary_literal=lambda data: f"HEXTORAW('{data.hex()}')",
    text=char26,
    time=_ORACLE_TIME,
    paging=PagingSQL(nulls_largest=True),
)
