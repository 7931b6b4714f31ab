"""The shape of one database's conversion SQL for one key kind, and its text forms.

:class:`ConvertSQL` turns the expressions of a database and a kind into one
conversion statement that refuses a value that is not a key of the kind.
The patterns of each kind's text (a ULID's 26 characters; a UUIDv7's 36
characters or 32 hex digits) are written here once, for every database.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.types import TypeEngine

from .._codec import ALPHABET

__all__ = ["ConvertSQL", "Expr"]

#: SQL of a column (or of 32 hex digits) -> SQL of the converted value
Expr = Callable[[str], str]

# -- ULID text -----------------------------------------------------------------

# Crockford's alphabet, and the digits MySQL's CONV() uses for base 32. The
# REPLACE chains map one onto the other; each runs in an order where a
# letter is replaced only after the letter it becomes has been moved away.
CONV32 = "0123456789ABCDEFGHIJKLMNOPQRSTUV"
# The characters a ULID's text may hold, spelled out (no ranges, no
# case-insensitive matching): ranges and case folding follow the locale in
# some databases, and the Kelvin sign folds to "k".
ULID_FIRST = "[01234567]"
ULID_REST = "[" + ALPHABET + ALPHABET.lower() + "]"
TO_CONV = [(c, k) for c, k in zip(ALPHABET, CONV32, strict=True) if c != k]
FROM_CONV = [(k, c) for c, k in reversed(TO_CONV)]


def digits_to_text(run: Callable[[int, int], str], index_cast: str = "") -> str:
    """Assemble 26 Crockford characters from the 32 hex digits' numeric runs.

    ``run(start, length)`` is the database's SQL for the number held by hex
    digits ``start .. start + length - 1``: 2 digits (the first 2 characters),
    then three runs of 10 digits (8 characters each), each within 64 bits.
    """

    def chars(number: str, count: int) -> list[str]:
        return [
            f"substr('{ALPHABET}', (({number} >> {5 * k}) & 31){index_cast} + 1, 1)"
            for k in reversed(range(count))
        ]

    pieces = chars(run(1, 2), 2)
    for start in (3, 13, 23):
        pieces += chars(run(start, 10), 8)
    return "(" + " || ".join(pieces) + ")"


# -- UUIDv7 text ---------------------------------------------------------------

# Spelled out, not a range: ranges follow the locale in some databases.
_HEX = "[0123456789abcdefABCDEF]"
_VARIANT = "[89abAB]"


def uuid_regex(hyphens: bool) -> str:
    """The anchored regular expression of a UUIDv7's text (36) or hex (32) form."""
    dash = "-" if hyphens else ""
    return (
        f"^{_HEX}{{8}}{dash}{_HEX}{{4}}{dash}7{_HEX}{{3}}{dash}"
        f"{_VARIANT}{_HEX}{{3}}{dash}{_HEX}{{12}}$"
    )


def uuid_glob(hyphens: bool) -> str:
    """The same pattern for SQLite's GLOB, which has no repetition counts."""
    dash = "-" if hyphens else ""
    return (
        _HEX * 8 + dash + _HEX * 4 + dash + "7" + _HEX * 3 + dash
        + _VARIANT + _HEX * 3 + dash + _HEX * 12
    )  # fmt: skip


def hyphenate(hex_sql: str, join: Callable[[list[str]], str]) -> str:
    """Return SQL that writes 32 hex digits as the 8-4-4-4-12 form.

    ``join`` is the database's SQL joining the five groups with hyphens.
    """
    groups = [(1, 8), (9, 4), (13, 4), (17, 4), (21, 12)]
    return join([f"substr({hex_sql}, {a}, {n})" for a, n in groups])


def hex_is_v7(hex_sql: str) -> str:
    """SQL true when 32 hex digits (either case) carry version 7 and variant 10."""
    return (
        f"substr({hex_sql}, 13, 1) = '7' "
        f"AND lower(substr({hex_sql}, 17, 1)) IN ('8', '9', 'a', 'b')"
    )


@dataclass(frozen=True)
class ConvertSQL:
    """One database's conversion expressions and procedure, for one key kind."""

    #: storage kind -> SQL turning a column of that kind into 32 hex digits
    to_hex: dict[str, Expr]
    #: storage kind -> SQL turning 32 hex digits into a value of that kind
    from_hex: dict[str, Expr]
    #: SQL true exactly for the text values the Python parser accepts
    valid_text: Expr
    #: SQL true for a binary value that holds exactly 16 bytes (of the kind)
    valid_binary: Expr
    #: SQL that raises an error when it is evaluated, naming the value; it
    #: stands where the 32 hex digits would (so its type is text). It is the
    #: ELSE branch of every conversion: a value that is not a key stops the
    #: statement, whatever the session's settings, online and in --sql scripts.
    fail: Expr
    #: True: ``ALTER ... TYPE ... USING`` converts in one statement.
    #: False: ``UPDATE`` in place, then change the declared type.
    alter_using: bool = False
    #: the type that holds both the old and the new values during the
    #: ``UPDATE`` (None: the database is dynamically typed)
    holding: Callable[[], TypeEngine[Any]] | None = None
    #: 32 hex digits -> a column DEFAULT of binary storage (None: the type's
    #: literal)
    binary_default: Expr | None = None
    #: storage kind -> SQL true for a value that may be converted, where it
    #: differs from ``valid_text`` / ``valid_binary`` (UUIDv7 storages also
    #: check the "uuid" and "hex" kinds)
    valid: dict[str, Expr] = field(default_factory=dict)
    #: SQL true for a value in the holding type that is 16 characters of
    #: text looking like 16 converted bytes (None: no holding type)
    lookalike: Expr | None = None

    def check(self, col: str, kind: str) -> str | None:
        """Return SQL true for a value of ``kind`` that may be converted (None: any)."""
        if kind in self.valid:
            return self.valid[kind](col)
        if kind == "uuid":  # every uuid is 16 bytes
            return None
        return self.valid_text(col) if kind == "text" else self.valid_binary(col)

    def bad_text(self, col: str, kind: str = "text") -> str:
        """Return SQL true for a non-NULL value of ``kind`` that may not be converted."""
        return f"NOT ({self.check(col, kind) or 'TRUE'})"

    def convert(self, col: str, from_kind: str, to_kind: str) -> str:
        """Return SQL converting ``col`` between storage kinds, failing on bad values.

        The conversion itself refuses what is not a key of the kind: a text
        value the parser would reject, or a binary value of the wrong length,
        makes the statement fail instead of turning into a different id. So
        no value written between a check and the conversion, and no offline
        script, can store a wrong id. NULL stays NULL.
        """
        hex_sql = self.to_hex[from_kind](col)
        valid = self.check(col, from_kind)
        if valid is not None:
            hex_sql = f"CASE WHEN {valid} THEN {hex_sql} ELSE {self.fail(col)} END"
        return f"CASE WHEN {col} IS NULL THEN NULL ELSE {self.from_hex[to_kind](hex_sql)} END"
