"""PostgreSQL's storage conversions: ``ALTER ... TYPE ... USING``, for both key kinds."""

from __future__ import annotations

from .._codec import ALPHABET
from ._sql import (
    ULID_FIRST,
    ULID_REST,
    ConvertSQL,
    Expr,
    digits_to_text,
    hex_is_v7,
    uuid_regex,
)

__all__ = ["ULID", "UUID7"]

# The 16-byte storages, the same for every kind.
_TO_HEX: dict[str, Expr] = {
    "uuid": lambda col: f"replace(CAST({col} AS text), '-', '')",
    "binary": lambda col: f"encode({col}, 'hex')",
}
_FROM_HEX: dict[str, Expr] = {
    "uuid": lambda h: f"CAST({h} AS uuid)",
    "binary": lambda h: f"decode({h}, 'hex')",
}


def _fail(label: str) -> Expr:
    # No cast exists from this text to uuid: the error names the value.
    return lambda col: f"CAST(CAST('not a {label}: ' || {col}::text AS uuid) AS text)"


# -- ULID ------------------------------------------------------------------------


def _text_to_hex(col: str) -> str:
    # Decode 2 characters (the first byte), then three runs of 8 characters
    # (40 bits, 10 hex digits each) as bigint sums: each character is looked
    # up once, and the arithmetic never leaves 64 bits.
    def run(start: int, length: int) -> str:
        return " + ".join(
            f"(strpos('{ALPHABET}', substr(upper({col}), {start + j}, 1)) - 1)::bigint"
            f" * {32 ** (length - 1 - j)}"
            for j in range(length)
        )

    words = [f"lpad(to_hex({run(1, 2)}), 2, '0')"] + [
        f"lpad(to_hex({run(start, 8)}), 10, '0')" for start in (3, 11, 19)
    ]
    return "(" + " || ".join(words) + ")"


def _hex_to_text(hex_sql: str) -> str:
    def run(start: int, length: int) -> str:
        return f"('x' || lpad(substr({hex_sql}, {start}, {length}), 16, '0'))::bit(64)::bigint"

    return digits_to_text(run, "::integer")


ULID = ConvertSQL(
    to_hex={**_TO_HEX, "text": _text_to_hex},
    from_hex={**_FROM_HEX, "text": _hex_to_text},
    # ARE's $ matches only at the very end of the string (no newline mode).
    valid_text=lambda col: f"{col}::text ~ '^{ULID_FIRST}{ULID_REST}{{25}}$'",
    valid_binary=lambda col: f"octet_length({col}) = 16",
    fail=_fail("ULID"),
    alter_using=True,
)


# -- UUIDv7 ----------------------------------------------------------------------

_UUID_TEXT: dict[str, Expr] = {
    "text": lambda col: f"{col}::text ~ '{uuid_regex(True)}'",
    "hex": lambda col: f"{col}::text ~ '{uuid_regex(False)}'",
}

UUID7 = ConvertSQL(
    to_hex={
        **_TO_HEX,
        "text": lambda col: f"replace(lower({col}::text), '-', '')",
        "hex": lambda col: f"lower({col}::text)",
    },
    from_hex={
        **_FROM_HEX,
        "text": lambda h: f"CAST(CAST({h} AS uuid) AS text)",
        "hex": lambda h: h,
    },
    valid_text=_UUID_TEXT["text"],
    valid_binary=lambda col: (
        f"octet_length({col}) = 16 AND get_byte({col}, 6) >> 4 = 7 AND get_byte({col}, 8) >> 6 = 2"
    ),
    valid={**_UUID_TEXT, "uuid": lambda col: hex_is_v7(_TO_HEX["uuid"](col))},
    fail=_fail("UUIDv7"),
    alter_using=True,
)
