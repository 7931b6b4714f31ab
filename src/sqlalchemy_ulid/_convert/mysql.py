"""MySQL / MariaDB's storage conversions: ``UPDATE`` in place, for both key kinds.

During the ``UPDATE`` the column is a ``VARBINARY`` that holds the old and
the new values alike (``ConvertSQL.holding``).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.types import TypeEngine

from ._sql import (
    FROM_CONV,
    TO_CONV,
    ULID_FIRST,
    ULID_REST,
    ConvertSQL,
    Expr,
    hex_is_v7,
    hyphenate,
    uuid_regex,
)

__all__ = ["ULID", "UUID7"]


def _unhex(h: str) -> str:
    return f"UNHEX({h})"


def _binary_default(h: str) -> str:
    # An expression, not X'...': MariaDB's SHOW CREATE TABLE prints a binary
    # literal default as raw bytes, which drivers then fail to decode.
    return f"(UNHEX('{h}'))"


def _fail(label: str) -> Expr:
    # An unsigned overflow is an error in every sql_mode (a too-long value
    # is only a warning outside strict mode); MariaDB quotes the expression.
    return lambda col: f"~0 + (LENGTH(CONCAT('not a {label}: ', {col})) > 0)"


def _replace_chain(sql: str, pairs: list[tuple[str, str]]) -> str:
    for old, new in pairs:
        sql = f"REPLACE({sql}, '{old}', '{new}')"
    return sql


# -- ULID ------------------------------------------------------------------------


def _text_to_hex(col: str) -> str:
    # During the UPDATE the column is VARBINARY, where UPPER() does nothing:
    # read it as ASCII first.
    conv = _replace_chain(f"UPPER(CONVERT({col} USING ascii))", TO_CONV)
    # 2 characters (8 bits: the first byte), then three runs of 8 characters
    # (40 bits, 10 hex digits): each within CONV()'s 64 bits.
    parts = [f"LPAD(CONV(SUBSTRING({conv}, 1, 2), 32, 16), 2, '0')"] + [
        f"LPAD(CONV(SUBSTRING({conv}, {start}, 8), 32, 16), 10, '0')" for start in (3, 11, 19)
    ]
    return f"CONCAT({', '.join(parts)})"


def _hex_to_text(hex_sql: str) -> str:
    parts = [f"LPAD(CONV(SUBSTRING({hex_sql}, 1, 2), 16, 32), 2, '0')"] + [
        f"LPAD(CONV(SUBSTRING({hex_sql}, {start}, 10), 16, 32), 8, '0')" for start in (3, 13, 23)
    ]
    return _replace_chain(f"CONCAT({', '.join(parts)})", FROM_CONV)


def _varbinary26() -> TypeEngine[Any]:
    return sa.VARBINARY(26)


def _ulid_lookalike(col: str) -> str:
    # 16 bytes that are all ULID characters are 16 characters of text that
    # were never a ULID, not a converted value (a binary ULID's first byte
    # is below 0x30 until the year 3600).
    return f"CONVERT({col} USING ascii) REGEXP '^{ULID_REST}{{16}}$'"


ULID = ConvertSQL(
    to_hex={"binary": lambda col: f"HEX({col})", "text": _text_to_hex},
    from_hex={"binary": _unhex, "text": _hex_to_text},
    # LENGTH counts bytes: REGEXP's $ also matches before a final newline,
    # and a multi-byte character is never part of a ULID.
    valid_text=lambda col: (
        f"LENGTH({col}) = 26 AND CONVERT({col} USING ascii) REGEXP "
        f"'^{ULID_FIRST}{ULID_REST}{{25}}$'"
    ),
    valid_binary=lambda col: f"LENGTH({col}) = 16",
    fail=_fail("ULID"),
    holding=_varbinary26,
    binary_default=_binary_default,
    lookalike=_ulid_lookalike,
)


# -- UUIDv7 ----------------------------------------------------------------------

# Read as ASCII first (the column is VARBINARY); LENGTH counts bytes, and
# REGEXP's $ also matches before a final newline.
_UUID_TEXT: dict[str, Expr] = {
    "text": lambda col: (
        f"LENGTH({col}) = 36 AND CONVERT({col} USING ascii) REGEXP '{uuid_regex(True)}'"
    ),
    "hex": lambda col: (
        f"LENGTH({col}) = 32 AND CONVERT({col} USING ascii) REGEXP '{uuid_regex(False)}'"
    ),
}


def _uuid_valid_binary(col: str) -> str:
    # CAST: a MariaDB UUID's LENGTH is that of its text; its bytes are 16.
    return f"LENGTH(CAST({col} AS BINARY)) = 16 AND {hex_is_v7(f'HEX({col})')}"


def _varbinary36() -> TypeEngine[Any]:
    # Holds a UUID's 36 characters of text, its 32 hex digits or its 16 bytes.
    return sa.VARBINARY(36)


def _uuid_lookalike(col: str) -> str:
    # 16 bytes that are text (valid UTF-8 starting with a printable
    # character) are 16 characters that were never a UUIDv7, not a
    # converted value: a UUIDv7's first byte is below 0x20 until the year
    # 3084, and a later one is not UTF-8 (its 9th byte, 0x80-0xBF, then
    # needs a lead byte before it and its first byte is not 0x20-0x7F).
    as_text = f"CONVERT(CONVERT({col} USING utf8mb4) USING binary)"
    return f"LENGTH({col}) = 16 AND ASCII({col}) >= 32 AND {as_text} = {col}"


def _lower_hex(col: str) -> str:
    return f"LOWER(HEX({col}))"


# MariaDB's UUID type (10.7+) goes to and from the holding VARBINARY as its
# 16 bytes, and HEX() of either is the same 32 digits: during the UPDATE
# the "uuid" kind is the binary kind; the final MODIFY reads the bytes.
UUID7 = ConvertSQL(
    to_hex={
        "binary": _lower_hex,
        "uuid": _lower_hex,
        "text": lambda col: f"LOWER(REPLACE(CONVERT({col} USING ascii), '-', ''))",
        "hex": lambda col: f"LOWER(CONVERT({col} USING ascii))",
    },
    from_hex={
        "binary": _unhex,
        "uuid": _unhex,
        "text": lambda h: hyphenate(h, lambda groups: f"CONCAT_WS('-', {', '.join(groups)})"),
        "hex": lambda h: h,
    },
    valid_text=_UUID_TEXT["text"],
    valid_binary=_uuid_valid_binary,
    valid={**_UUID_TEXT, "uuid": _uuid_valid_binary},
    fail=_fail("UUIDv7"),
    holding=_varbinary36,
    binary_default=_binary_default,
    lookalike=_uuid_lookalike,
)
