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
from dataclasses import dataclass
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
_TO_CONV = [(c, k) for c, k in zip(ALPHABET, _CONV32, strict=True) if c != k]
_FROM_CONV = [(k, c) for c, k in reversed(_TO_CONV)]


@dataclass(frozen=True)
class ConvertSQL:
    """One dialect's conversion expressions and procedure."""

    #: storage kind -> SQL turning a column of that kind into 32 hex digits
    to_hex: dict[str, _Expr]
    #: storage kind -> SQL turning 32 hex digits into a value of that kind
    from_hex: dict[str, _Expr]
    #: SQL true for a text value that is not a ULID (run before converting)
    bad_text: _Expr
    #: True: ``ALTER ... TYPE ... USING`` converts in one statement.
    #: False: ``UPDATE`` in place, then change the declared type.
    alter_using: bool = False
    #: the type that holds both the old and the new values during the
    #: ``UPDATE`` (None: the database is dynamically typed)
    holding: Callable[[], TypeEngine[Any]] | None = None


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
    bad_text=lambda col: f"{col} !~* '^[0-7][0-9A-HJKMNP-TV-Z]{{25}}$'",
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


MYSQL_CONVERT = ConvertSQL(
    to_hex={"binary": lambda col: f"HEX({col})", "text": _mysql_text_to_hex},
    from_hex={"binary": lambda h: f"UNHEX({h})", "text": _mysql_hex_to_text},
    bad_text=lambda col: (
        f"NOT (UPPER(CONVERT({col} USING ascii)) REGEXP '^[0-7][0-9A-HJKMNP-TV-Z]{{25}}$')"
    ),
    holding=_varbinary26,
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
    bad_text=lambda col: (
        f"NOT (length({col}) = 26 AND upper({col}) GLOB '[0-7]{'[0-9A-HJKMNP-TV-Z]' * 25}')"
    ),
)
