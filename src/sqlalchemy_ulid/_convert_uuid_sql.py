"""SQL that converts UUIDv7 keys between text, hex, uuid and binary storage.

The UUIDv7 counterpart of ``_convert_sql``: the same :class:`ConvertSQL`
shape, used by the same op machinery (``op.alter_uuid7_storage``). Every
conversion goes through 32 lowercase hexadecimal digits. The storage kinds:

* ``"text"``: the 36-character canonical form, ``8-4-4-4-12`` hex digits
  with hyphens, either case (``CHAR(36)``);
* ``"hex"``: 32 hex digits, either case (``CHAR(32)``: what ``sa.Uuid()``
  stores where the database has no uuid type);
* ``"uuid"``: the database's uuid type;
* ``"binary"``: 16 bytes.

Each kind's check accepts only a UUID of version 7 and variant ``10``: the
version digit (the 13th hex digit) is ``7`` and the 17th is one of ``8``,
``9``, ``a``, ``b``. A value that fails makes the conversion statement
itself fail (``ConvertSQL.fail``), online and in ``--sql`` scripts.
"""

from __future__ import annotations

from collections.abc import Callable

from ._convert_sql import ConvertSQL, _varbinary36

__all__ = ["MYSQL_UUID_CONVERT", "POSTGRESQL_UUID_CONVERT", "SQLITE_UUID_CONVERT"]

# Spelled out, not a range: ranges follow the locale in some databases.
_HEX = "[0123456789abcdefABCDEF]"
_VARIANT = "[89abAB]"


def _regex(hyphens: bool) -> str:
    """The anchored regular expression of a UUIDv7's text (36) or hex (32) form."""
    dash = "-" if hyphens else ""
    return (
        f"^{_HEX}{{8}}{dash}{_HEX}{{4}}{dash}7{_HEX}{{3}}{dash}"
        f"{_VARIANT}{_HEX}{{3}}{dash}{_HEX}{{12}}$"
    )


def _glob(hyphens: bool) -> str:
    """The same pattern for SQLite's GLOB, which has no repetition counts."""
    dash = "-" if hyphens else ""
    return (
        _HEX * 8 + dash + _HEX * 4 + dash + "7" + _HEX * 3 + dash
        + _VARIANT + _HEX * 3 + dash + _HEX * 12
    )  # fmt: skip


def _hyphenate(hex_sql: str, join: Callable[[list[str]], str]) -> str:
    """Return SQL that writes 32 hex digits as the 8-4-4-4-12 form.

    ``join`` is the dialect's SQL joining the five groups with hyphens.
    """
    groups = [(1, 8), (9, 4), (13, 4), (17, 4), (21, 12)]
    return join([f"substr({hex_sql}, {a}, {n})" for a, n in groups])


def _hex_is_v7(hex_sql: str) -> str:
    """SQL true when 32 hex digits (either case) carry version 7 and variant 10."""
    return (
        f"substr({hex_sql}, 13, 1) = '7' "
        f"AND lower(substr({hex_sql}, 17, 1)) IN ('8', '9', 'a', 'b')"
    )


# -- PostgreSQL ---------------------------------------------------------------

_PG_TEXT = {
    "text": lambda col: f"{col}::text ~ '{_regex(True)}'",
    "hex": lambda col: f"{col}::text ~ '{_regex(False)}'",
}

POSTGRESQL_UUID_CONVERT = ConvertSQL(
    to_hex={
        "uuid": lambda col: f"replace(CAST({col} AS text), '-', '')",
        "binary": lambda col: f"encode({col}, 'hex')",
        "text": lambda col: f"replace(lower({col}::text), '-', '')",
        "hex": lambda col: f"lower({col}::text)",
    },
    from_hex={
        "uuid": lambda h: f"CAST({h} AS uuid)",
        "binary": lambda h: f"decode({h}, 'hex')",
        "text": lambda h: f"CAST(CAST({h} AS uuid) AS text)",
        "hex": lambda h: h,
    },
    valid_text=_PG_TEXT["text"],
    valid_binary=lambda col: (
        f"octet_length({col}) = 16 AND get_byte({col}, 6) >> 4 = 7 AND get_byte({col}, 8) >> 6 = 2"
    ),
    valid={
        **_PG_TEXT,
        "uuid": lambda col: _hex_is_v7(f"replace(CAST({col} AS text), '-', '')"),
    },
    # No cast exists from this text to uuid: the error names the value.
    fail=lambda col: f"CAST(CAST('not a UUIDv7: ' || {col}::text AS uuid) AS text)",
    alter_using=True,
)


# -- MySQL / MariaDB ----------------------------------------------------------

# During the UPDATE the column is VARBINARY: read it as ASCII first. LENGTH
# counts bytes, and REGEXP's $ also matches before a final newline.
_MYSQL_TEXT = {
    "text": lambda col: (
        f"LENGTH({col}) = 36 AND CONVERT({col} USING ascii) REGEXP '{_regex(True)}'"
    ),
    "hex": lambda col: (
        f"LENGTH({col}) = 32 AND CONVERT({col} USING ascii) REGEXP '{_regex(False)}'"
    ),
}


def _mysql_valid_binary(col: str) -> str:
    # CAST: a MariaDB UUID's LENGTH is that of its text; its bytes are 16.
    return f"LENGTH(CAST({col} AS BINARY)) = 16 AND {_hex_is_v7(f'HEX({col})')}"


# MariaDB's UUID type (10.7+) goes to and from the holding VARBINARY as its
# 16 bytes, and HEX() of either is the same 32 digits: during the UPDATE
# the "uuid" kind is the binary kind; the final MODIFY reads the bytes.
MYSQL_UUID_CONVERT = ConvertSQL(
    to_hex={
        "binary": lambda col: f"LOWER(HEX({col}))",
        "uuid": lambda col: f"LOWER(HEX({col}))",
        "text": lambda col: f"LOWER(REPLACE(CONVERT({col} USING ascii), '-', ''))",
        "hex": lambda col: f"LOWER(CONVERT({col} USING ascii))",
    },
    from_hex={
        "binary": lambda h: f"UNHEX({h})",
        "uuid": lambda h: f"UNHEX({h})",
        "text": lambda h: _hyphenate(h, lambda groups: f"CONCAT_WS('-', {', '.join(groups)})"),
        "hex": lambda h: h,
    },
    valid_text=_MYSQL_TEXT["text"],
    valid_binary=_mysql_valid_binary,
    valid={**_MYSQL_TEXT, "uuid": _mysql_valid_binary},
    # An unsigned overflow is an error in every sql_mode.
    fail=lambda col: f"~0 + (LENGTH(CONCAT('not a UUIDv7: ', {col})) > 0)",
    holding=_varbinary36,
    binary_default=lambda h: f"(UNHEX('{h}'))",
)


# -- SQLite -------------------------------------------------------------------

_SQLITE_TEXT = {
    "text": lambda col: (
        f"typeof({col}) = 'text' AND length({col}) = 36 AND {col} GLOB '{_glob(True)}'"
    ),
    "hex": lambda col: (
        f"typeof({col}) = 'text' AND length({col}) = 32 AND {col} GLOB '{_glob(False)}'"
    ),
}

SQLITE_UUID_CONVERT = ConvertSQL(
    to_hex={
        "binary": lambda col: f"lower(hex({col}))",
        "text": lambda col: f"lower(replace({col}, '-', ''))",
        "hex": lambda col: f"lower({col})",
    },
    from_hex={
        "binary": lambda h: f"unhex({h})",
        "text": lambda h: _hyphenate(h, lambda groups: "(" + " || '-' || ".join(groups) + ")"),
        "hex": lambda h: h,
    },
    valid_text=_SQLITE_TEXT["text"],
    valid_binary=lambda col: (
        f"typeof({col}) = 'blob' AND length({col}) = 16 AND {_hex_is_v7(f'hex({col})')}"
    ),
    valid=_SQLITE_TEXT,
    # abs() of the smallest integer is SQLite's "integer overflow" error.
    fail=lambda col: f"abs(-9223372036854775807 - 1 + 0 * length({col}))",
)
