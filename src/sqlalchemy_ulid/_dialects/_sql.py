"""SQL builders and column types that several databases share."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.types import TypeEngine

from .._codec import ALPHABET

__all__ = [
    "Sql",
    "base32_millis",
    "binary16",
    "char26",
    "digit_sum",
    "float_bits_at_most_24",
    "x_literal",
]

#: a column's (or a value's) SQL -> SQL of something about it
Sql = Callable[[str], str]

_FLOAT_BITS = re.compile(r"FLOAT\s*\(\s*(\d+)")


def float_bits_at_most_24(ddl: str) -> bool | None:
    """``FLOAT(p)`` with p <= 24 bits is single precision (None: no p given)."""
    found = _FLOAT_BITS.match(ddl)
    return None if found is None else int(found.group(1)) <= 24


def binary16() -> TypeEngine[Any]:
    """``BINARY(16)``."""
    return sa.BINARY(16)


def char26() -> TypeEngine[Any]:
    """``CHAR(26)``, in the column's default collation."""
    return sa.CHAR(26)


def x_literal(data: bytes) -> str:
    """A standard SQL binary literal, ``X'...'``."""
    return f"X'{data.hex()}'"


def digit_sum(
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


def base32_millis(substr: str, position: Callable[[str, str], str]) -> Sql:
    """The Unix millisecond of a ULID's text: its first 10 Crockford digits."""
    # 10 Crockford characters hold 50 bits, the first two always zero.
    return lambda col: digit_sum(col, 10, ALPHABET, substr, position)
