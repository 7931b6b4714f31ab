"""Crockford base32 for 128-bit ULIDs, with strict validation.

CPython's ``base64.b32encode`` is written in Python and is slow, so this module
uses two tricks that keep the work in C:

* decoding maps Crockford's alphabet onto the digits of ``int(text, 32)``
  with one ``bytes.translate``; every other byte maps to ``!``, which
  ``int()`` rejects, so whitespace, underscores and signs (which ``int()``
  would otherwise accept) can never slip through;
* encoding looks up 15 bits (three characters) at a time in a table of
  32,768 strings, built once at import (a few milliseconds).
"""

from __future__ import annotations

from itertools import repeat

from ._errors import InvalidCursor, InvalidULID

__all__ = [
    "ALPHABET",
    "InvalidCursor",
    "InvalidULID",
    "decode",
    "decode_int",
    "decode_ints",
    "encode",
    "encode_int",
    "parse_hex",
    "valid_texts",
]

#: Crockford's base32 alphabet: digits and letters without I, L, O and U.
ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_INT_DIGITS = "0123456789abcdefghijklmnopqrstuv"  # what int(text, 32) reads

_DECODE = bytearray(b"!" * 256)
for _value, _char in enumerate(ALPHABET):
    _DECODE[ord(_char)] = _DECODE[ord(_char.lower())] = ord(_INT_DIGITS[_value])
_DECODE_TABLE = bytes(_DECODE)
_DECODE[ord(",")] = ord(",")  # the separator of joined texts (decode_ints)
_LIST_TABLE = bytes(_DECODE)
del _DECODE, _value, _char

_PAIRS = [a + b for a in ALPHABET for b in ALPHABET]  # 10 bits -> 2 characters
_TRIPLES = [a + pair for a in ALPHABET for pair in _PAIRS]  # 15 bits -> 3 characters
_M15 = 0x7FFF
_MAX = (1 << 128) - 1
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_FIRST_MAX = ord("7")  # the largest first digit (in int()'s digits: the same)


def encode(data: bytes) -> str:
    """Return the canonical (uppercase) 26-character text of 16 bytes."""
    return encode_int(int.from_bytes(data, "big"))


def encode_int(n: int) -> str:
    """Return the canonical 26-character text of an int 0 <= n < 2**128."""
    # 130 bits of text hold 128 of data: the top 10 bits (two characters,
    # the first of them 0-7), then eight groups of 15 bits.
    return "".join(
        (
            _PAIRS[n >> 120],
            _TRIPLES[(n >> 105) & _M15],
            _TRIPLES[(n >> 90) & _M15],
            _TRIPLES[(n >> 75) & _M15],
            _TRIPLES[(n >> 60) & _M15],
            _TRIPLES[(n >> 45) & _M15],
            _TRIPLES[(n >> 30) & _M15],
            _TRIPLES[(n >> 15) & _M15],
            _TRIPLES[n & _M15],
        )
    )


def decode(text: str) -> bytes:
    """Return the 16 bytes of a ULID's text, or raise :class:`InvalidULID`."""
    return decode_int(text).to_bytes(16, "big")


def decode_int(text: str) -> int:
    """Return the 128-bit integer of a ULID's text, or raise :class:`InvalidULID`."""
    if not isinstance(text, str):
        raise TypeError(f"ULID text must be str, not {type(text).__name__}")
    try:
        if len(text) != 26:
            raise ValueError
        n = int(text.encode("ascii").translate(_DECODE_TABLE), 32)
    except (UnicodeEncodeError, ValueError):
        raise InvalidULID(_explain(text)) from None
    if n > _MAX:
        raise InvalidULID(_explain(text))
    return n


def _translated(texts: list[str]) -> bytes | None:
    """The texts joined by ``,`` in ``int()``'s digits, if every one is a valid ULID; else None.

    One ``translate`` checks every character of every text (anything outside
    the alphabet becomes ``!``, the comma stays a comma), then the first
    digit of each text is checked (0-7: at most 128 bits). A text with a
    comma of its own shows up as one comma too many.
    """
    count = len(texts)
    if not count or set(map(len, texts)) != {26}:
        return None
    try:
        data = ",".join(texts).encode("ascii").translate(_LIST_TABLE)
    except (TypeError, UnicodeEncodeError):
        return None
    if b"!" in data or data.count(b",") != count - 1 or max(data[::27]) > _FIRST_MAX:
        return None
    return data


def valid_texts(texts: list[str]) -> bool:
    """Whether every one of ``texts`` is a well-formed ULID text, checked in one pass.

    True exactly when :func:`decode_int` would accept each of them.
    """
    return _translated(texts) is not None


def decode_ints(texts: list[str]) -> list[int]:
    """Return the integers of many ULID texts, or raise for the first bad one.

    The texts are checked in one pass (:func:`valid_texts`), then each is
    read by ``int(digits, 32)`` through ``map``, with no Python frame per
    text. Any malformed text sends the whole list through
    :func:`decode_int`, for its error message.
    """
    data = _translated(texts)
    if data is not None:
        return list(map(int, data.split(b","), repeat(32)))
    return [decode_int(text) for text in texts]


def parse_hex(text: str) -> bytes:
    """Return the 16 bytes of exactly 32 hexadecimal digits, or raise."""
    if not isinstance(text, str):
        raise TypeError(f"hex text must be str, not {type(text).__name__}")
    if len(text) != 32:
        raise InvalidULID(f"hex form must be 32 hexadecimal digits, got {len(text)} characters")
    for position, char in enumerate(text):
        # bytes.fromhex alone would accept spaces, and int(text, 16) would
        # accept underscores and a sign: check every digit.
        if char not in _HEX_DIGITS:
            raise InvalidULID(f"invalid hexadecimal digit {char!r} at position {position}")
    return bytes.fromhex(text)


def _explain(text: str) -> str:
    """Say what is wrong with text that failed to decode."""
    if len(text) != 26:
        return f"a ULID is 26 characters, got {len(text)}"
    for position, char in enumerate(text):
        if not char.isascii() or char.upper() not in ALPHABET:
            hint = " (Crockford base32 has no I, L, O or U)" if char.upper() in "ILOU" else ""
            return f"invalid character {char!r} at position {position}{hint}"
    return f"first character must be 0-7, got {text[0]!r}: the value would exceed 128 bits"
