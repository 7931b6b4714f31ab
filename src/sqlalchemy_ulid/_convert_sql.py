"""SQL that converts ULIDs between text and binary inside the database.

Used by the Alembic storage conversion op, so that a conversion is one
set-based statement that also works in Alembic's offline (``--sql``) mode.
Every conversion goes through 32 hexadecimal digits: ``text -> hex -> uuid``,
``bytea -> hex -> text`` and so on, so each dialect needs only a "to hex" and
a "from hex" expression per storage kind.

Each database's expressions are one :class:`ConvertSQL`; the dialect table
in ``_dialects`` gives every row its own (or none), and the storage kinds
("uuid", "binary", "text") come from the same table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.types import TypeEngine

from ._codec import ALPHABET

__all__ = ["MYSQL_CONVERT", "POSTGRESQL_CONVERT", "SQLITE_CONVERT", "ConvertSQL"]

_Expr = Callable[[str], str]

# Crockford's alphabet, and the digits MySQL's CONV() uses for base 32. The
# REPLACE chains below map one onto the other; each runs in an order where a
# letter is replaced only after the letter it becomes has been moved away.
_CONV32 = "0123456789ABCDEFGHIJKLMNOPQRSTUV"
# The characters a ULID's text may hold, spelled out (no ranges, no
# case-insensitive matching): ranges and case folding follow the locale in
# some databases, and the Kelvin sign folds to "k".
_FIRST = "[01234567]"
_REST = "[" + ALPHABET + ALPHABET.lower() + "]"
_TO_CONV = [(c, k) for c, k in zip(ALPHABET, _CONV32, strict=True) if c != k]
_FROM_CONV = [(k, c) for c, k in reversed(_TO_CONV)]


@dataclass(frozen=True)
class ConvertSQL:
    """One dialect's conversion expressions and procedure."""

    #: storage kind -> SQL turning a column of that kind into 32 hex digits
    to_hex: dict[str, _Expr]
    #: storage kind -> SQL turning 32 hex digits into a value of that kind
    from_hex: dict[str, _Expr]
    #: SQL true exactly for the text values the Python parser accepts
    valid_text: _Expr
    #: SQL true for a binary value that holds exactly 16 bytes
    valid_binary: _Expr
    #: SQL that raises an error when it is evaluated, naming the value; it
    #: stands where the 32 hex digits would (so its type is text). It is the
    #: ELSE branch of every conversion: a value that is not a ULID stops the
    #: statement, whatever the session's settings, online and in --sql scripts.
    fail: _Expr
    #: True: ``ALTER ... TYPE ... USING`` converts in one statement.
    #: False: ``UPDATE`` in place, then change the declared type.
    alter_using: bool = False
    #: the type that holds both the old and the new values during the
    #: ``UPDATE`` (None: the database is dynamically typed)
    holding: Callable[[], TypeEngine[Any]] | None = None
    #: 32 hex digits -> a column DEFAULT of binary storage (None: the type's
    #: literal)
    binary_default: _Expr | None = None
    #: storage kind -> SQL true for a value that may be converted, where it
    #: differs from ``valid_text`` / ``valid_binary`` (UUIDv7 storages also
    #: check the "uuid" and "hex" kinds)
    valid: dict[str, _Expr] = field(default_factory=dict)

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

        The conversion itself refuses what is not a ULID: a text value the
        parser would reject, or a binary value of the wrong length, makes
        the statement fail instead of turning into a different id. So no
        value written between a check and the conversion, and no offline
        script, can store a wrong id. NULL stays NULL.
        """
        hex_sql = self.to_hex[from_kind](col)
        valid = self.check(col, from_kind)
        if valid is not None:
            hex_sql = f"CASE WHEN {valid} THEN {hex_sql} ELSE {self.fail(col)} END"
        return f"CASE WHEN {col} IS NULL THEN NULL ELSE {self.from_hex[to_kind](hex_sql)} END"


# -- PostgreSQL ---------------------------------------------------------------


def _pg_text_to_hex(col: str) -> str:
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


def _digits_to_text(run: Callable[[int, int], str], index_cast: str = "") -> str:
    """Assemble 26 Crockford characters from the 32 hex digits' numeric runs.

    ``run(start, length)`` is the dialect's SQL for the number held by hex
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


def _pg_hex_to_text(hex_sql: str) -> str:
    def run(start: int, length: int) -> str:
        return f"('x' || lpad(substr({hex_sql}, {start}, {length}), 16, '0'))::bit(64)::bigint"

    return _digits_to_text(run, "::integer")


POSTGRESQL_CONVERT = ConvertSQL(
    to_hex={
        "uuid": lambda col: f"replace(CAST({col} AS text), '-', '')",
        "binary": lambda col: f"encode({col}, 'hex')",
        "text": _pg_text_to_hex,
    },
    from_hex={
        "uuid": lambda h: f"CAST({h} AS uuid)",
        "binary": lambda h: f"decode({h}, 'hex')",
        "text": _pg_hex_to_text,
    },
    # ARE's $ matches only at the very end of the string (no newline mode).
    valid_text=lambda col: f"{col}::text ~ '^{_FIRST}{_REST}{{25}}$'",
    valid_binary=lambda col: f"octet_length({col}) = 16",
    # No cast exists from this text to uuid: the error names the value.
    fail=lambda col: f"CAST(CAST('not a ULID: ' || {col}::text AS uuid) AS text)",
    alter_using=True,
)


# -- MySQL / MariaDB ----------------------------------------------------------


def _replace_chain(sql: str, pairs: list[tuple[str, str]]) -> str:
    for old, new in pairs:
        sql = f"REPLACE({sql}, '{old}', '{new}')"
    return sql


def _mysql_text_to_hex(col: str) -> str:
    # During the UPDATE the column is VARBINARY, where UPPER() does nothing:
    # read it as ASCII first.
    conv = _replace_chain(f"UPPER(CONVERT({col} USING ascii))", _TO_CONV)
    # 2 characters (8 bits: the first byte), then three runs of 8 characters
    # (40 bits, 10 hex digits): each within CONV()'s 64 bits.
    parts = [f"LPAD(CONV(SUBSTRING({conv}, 1, 2), 32, 16), 2, '0')"] + [
        f"LPAD(CONV(SUBSTRING({conv}, {start}, 8), 32, 16), 10, '0')" for start in (3, 11, 19)
    ]
    return f"CONCAT({', '.join(parts)})"


def _mysql_hex_to_text(hex_sql: str) -> str:
    parts = [f"LPAD(CONV(SUBSTRING({hex_sql}, 1, 2), 16, 32), 2, '0')"] + [
        f"LPAD(CONV(SUBSTRING({hex_sql}, {start}, 10), 16, 32), 8, '0')" for start in (3, 13, 23)
    ]
    return _replace_chain(f"CONCAT({', '.join(parts)})", _FROM_CONV)


def _varbinary26() -> TypeEngine[Any]:
    return sa.VARBINARY(26)


def _varbinary36() -> TypeEngine[Any]:
    # Holds a UUID's 36 characters of text, its 32 hex digits or its 16 bytes.
    return sa.VARBINARY(36)


MYSQL_CONVERT = ConvertSQL(
    to_hex={"binary": lambda col: f"HEX({col})", "text": _mysql_text_to_hex},
    from_hex={"binary": lambda h: f"UNHEX({h})", "text": _mysql_hex_to_text},
    # LENGTH counts bytes: REGEXP's $ also matches before a final newline,
    # and a multi-byte character is never part of a ULID.
    valid_text=lambda col: (
        f"LENGTH({col}) = 26 AND CONVERT({col} USING ascii) REGEXP '^{_FIRST}{_REST}{{25}}$'"
    ),
    valid_binary=lambda col: f"LENGTH({col}) = 16",
    # An unsigned overflow is an error in every sql_mode (a too-long value
    # is only a warning outside strict mode); MariaDB quotes the expression.
    fail=lambda col: f"~0 + (LENGTH(CONCAT('not a ULID: ', {col})) > 0)",
    holding=_varbinary26,
    # An expression, not X'...': MariaDB's SHOW CREATE TABLE prints a binary
    # literal default as raw bytes, which drivers then fail to decode.
    binary_default=lambda h: f"(UNHEX('{h}'))",
)


# -- SQLite -------------------------------------------------------------------


def _sqlite_text_to_hex(col: str) -> str:
    def value(i: int) -> str:
        return f"(instr('{ALPHABET}', substr(upper({col}), {i}, 1)) - 1)"

    def run(start: int, length: int) -> str:
        return " + ".join(f"{value(start + j)} * {32 ** (length - 1 - j)}" for j in range(length))

    chunks = [run(1, 2), run(3, 8), run(11, 8), run(19, 8)]
    return f"printf('%02x%010x%010x%010x', {', '.join(f'({c})' for c in chunks)})"


def _sqlite_hex_to_text(hex_sql: str) -> str:
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

    return _digits_to_text(run)


SQLITE_CONVERT = ConvertSQL(
    to_hex={"binary": lambda col: f"hex({col})", "text": _sqlite_text_to_hex},
    # unhex() is built in from SQLite 3.41; the op defines it on older
    # connections (online) so the same SQL runs everywhere.
    from_hex={"binary": lambda h: f"unhex({h})", "text": _sqlite_hex_to_text},
    valid_text=lambda col: (
        f"typeof({col}) = 'text' AND length({col}) = 26 AND {col} GLOB '{_FIRST}{_REST * 25}'"
    ),
    valid_binary=lambda col: f"typeof({col}) = 'blob' AND length({col}) = 16",
    # abs() of the smallest integer is SQLite's "integer overflow" error.
    fail=lambda col: f"abs(-9223372036854775807 - 1 + 0 * length({col}))",
)
