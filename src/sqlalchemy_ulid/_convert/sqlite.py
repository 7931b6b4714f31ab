"""SQLite's storage conversions: ``UPDATE`` in place, for both key kinds."""

from __future__ import annotations

from .._codec import ALPHABET
from ._sql import (
    ULID_FIRST,
    ULID_REST,
    ConvertSQL,
    Expr,
    digits_to_text,
    hex_is_v7,
    hyphenate,
    uuid_glob,
)

__all__ = ["ULID", "UUID7"]


def _unhex(h: str) -> str:
    # unhex() is built in from SQLite 3.41; the op defines it on older
    # connections (online) so the same SQL runs everywhere.
    return f"unhex({h})"


def _fail(col: str) -> str:
    # abs() of the smallest integer is SQLite's "integer overflow" error.
    return f"abs(-9223372036854775807 - 1 + 0 * length({col}))"


# -- ULID ------------------------------------------------------------------------


def _text_to_hex(col: str) -> str:
    def value(i: int) -> str:
        return f"(instr('{ALPHABET}', substr(upper({col}), {i}, 1)) - 1)"

    def run(start: int, length: int) -> str:
        return " + ".join(f"{value(start + j)} * {32 ** (length - 1 - j)}" for j in range(length))

    chunks = [run(1, 2), run(3, 8), run(11, 8), run(19, 8)]
    return f"printf('%02x%010x%010x%010x', {', '.join(f'({c})' for c in chunks)})"


def _hex_to_text(hex_sql: str) -> str:
    def run(start: int, length: int) -> str:
        return (
            "("
            + " + ".join(
                f"(instr('0123456789ABCDEF', upper(substr({hex_sql}, {start + j}, 1))) - 1)"
                f" * {16 ** (length - 1 - j)}"
                for j in range(length)
            )
            + ")"
        )

    return digits_to_text(run)


ULID = ConvertSQL(
    to_hex={"binary": lambda col: f"hex({col})", "text": _text_to_hex},
    from_hex={"binary": _unhex, "text": _hex_to_text},
    valid_text=lambda col: (
        f"typeof({col}) = 'text' AND length({col}) = 26 "
        f"AND {col} GLOB '{ULID_FIRST}{ULID_REST * 25}'"
    ),
    valid_binary=lambda col: f"typeof({col}) = 'blob' AND length({col}) = 16",
    fail=_fail,
)


# -- UUIDv7 ----------------------------------------------------------------------

_UUID_TEXT: dict[str, Expr] = {
    "text": lambda col: (
        f"typeof({col}) = 'text' AND length({col}) = 36 AND {col} GLOB '{uuid_glob(True)}'"
    ),
    "hex": lambda col: (
        f"typeof({col}) = 'text' AND length({col}) = 32 AND {col} GLOB '{uuid_glob(False)}'"
    ),
}

UUID7 = ConvertSQL(
    to_hex={
        "binary": lambda col: f"lower(hex({col}))",
        "text": lambda col: f"lower(replace({col}, '-', ''))",
        "hex": lambda col: f"lower({col})",
    },
    from_hex={
        "binary": _unhex,
        "text": lambda h: hyphenate(h, lambda groups: "(" + " || '-' || ".join(groups) + ")"),
        "hex": lambda h: h,
    },
    valid_text=_UUID_TEXT["text"],
    valid_binary=lambda col: (
        f"typeof({col}) = 'blob' AND length({col}) = 16 AND {hex_is_v7(f'hex({col})')}"
    ),
    valid=_UUID_TEXT,
    fail=_fail,
)
