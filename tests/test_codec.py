"""Crockford base32 text and hexadecimal: round trips and every rejection rule."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sqlalchemy_ulid import ULID, InvalidULID
from sqlalchemy_ulid._codec import (
    ALPHABET,
    decode,
    decode_int,
    decode_ints,
    encode,
    parse_hex,
    valid_texts,
)
from strategies import ulid_bytes, ulid_ints, ulid_texts

VALID = "01HTQW311N1KR5G0Y75M3EF00H"


def at(position: int, char: str, text: str = VALID) -> str:
    """``text`` with the character at ``position`` replaced."""
    return text[:position] + char + text[position + 1 :]


# -- alphabet and encoding ---------------------------------------------------------


def test_alphabet_is_crockford() -> None:
    assert len(ALPHABET) == len(set(ALPHABET)) == 32
    assert sorted(ALPHABET) == list(ALPHABET)  # so text order is value order
    assert not set("ILOU") & set(ALPHABET)


@given(ulid_ints)
def test_encode_matches_a_plain_base32_oracle(n: int) -> None:
    # Oracle: repeated division, the textbook way, independent of the tables.
    digits = []
    value = n
    for _ in range(26):
        value, digit = divmod(value, 32)
        digits.append(ALPHABET[digit])
    assert encode(n.to_bytes(16, "big")) == "".join(reversed(digits))


@given(ulid_bytes)
def test_decode_inverts_encode(data: bytes) -> None:
    text = encode(data)
    assert len(text) == 26
    assert text == text.upper()
    assert text[0] in "01234567"
    assert decode(text) == data
    assert decode(text.lower()) == data


@given(ulid_texts())
def test_decode_accepts_any_case(text: str) -> None:
    assert encode(decode(text)) == text.upper()


def test_extremes() -> None:
    assert encode(bytes(16)) == "0" * 26
    assert encode(b"\xff" * 16) == "7" + "Z" * 25
    assert decode("7" + "z" * 25) == b"\xff" * 16


# -- text rejections ---------------------------------------------------------------

BAD_TEXT: list[tuple[str, str]] = [
    ("", "a ULID is 26 characters, got 0"),  # empty string
    (VALID[:-1], "a ULID is 26 characters, got 25"),  # one character short
    (VALID + "0", "a ULID is 26 characters, got 27"),  # one character long
    (VALID + VALID, "a ULID is 26 characters, got 52"),  # two ULIDs glued together
    (VALID + "\n", "a ULID is 26 characters, got 27"),  # trailing newline (from a file)
    (f" {VALID}", "a ULID is 26 characters, got 27"),  # leading space
    (at(25, "U"), "invalid character 'U' at position 25"),  # U is not Crockford
    (at(3, "I"), "invalid character 'I' at position 3"),  # I is not Crockford
    (at(4, "L"), "invalid character 'L' at position 4"),  # L is not Crockford
    (at(5, "O"), "invalid character 'O' at position 5"),  # O is not Crockford
    (at(7, "o"), "invalid character 'o' at position 7"),  # lowercase o neither
    (at(8, "i"), "invalid character 'i' at position 8"),  # lowercase i neither
    (at(9, "l"), "invalid character 'l' at position 9"),  # lowercase l neither
    (at(10, "u"), "invalid character 'u' at position 10"),  # lowercase u neither
    (at(6, "\u0663"), "invalid character '\u0663' at position 6"),  # Arabic-Indic 3
    (at(1, "\u0660"), "invalid character '\u0660' at position 1"),  # Arabic-Indic 0
    (at(2, "\uff28"), "invalid character '\uff28' at position 2"),  # fullwidth H
    (at(15, "\uff10"), "invalid character '\uff10' at position 15"),  # fullwidth 0
    (at(11, "\u212a"), "invalid character '\u212a' at position 11"),  # Kelvin sign, lower() is k
    (at(13, "\u0131"), "invalid character '\u0131' at position 13"),  # dotless i, upper() is I
    (at(0, " "), "invalid character ' ' at position 0"),  # leading space, right length
    (at(25, " "), "invalid character ' ' at position 25"),  # trailing space, right length
    (at(12, "\t"), "invalid character '\\t' at position 12"),  # tab inside
    (at(25, "\n"), "invalid character '\\n' at position 25"),  # newline, right length
    (at(14, "\u00a0"), "invalid character '\\xa0' at position 14"),  # no-break space
    (at(10, "_"), "invalid character '_' at position 10"),  # int() allows digit separators
    (at(0, "+"), "invalid character '+' at position 0"),  # int() allows a leading sign
    (at(0, "-"), "invalid character '-' at position 0"),  # negative sign
    (at(17, "!"), "invalid character '!' at position 17"),  # punctuation
    (at(0, "8"), "first character must be 0-7, got '8'"),  # more than 128 bits
    (at(0, "Z"), "first character must be 0-7, got 'Z'"),  # the largest first character
    (at(0, "z"), "first character must be 0-7, got 'z'"),  # ... in lowercase
    ("8" + "0" * 25, "first character must be 0-7, got '8'"),  # exactly 2**128
]


@pytest.mark.parametrize(("text", "message"), BAD_TEXT)
def test_rejected_text(text: str, message: str) -> None:
    with pytest.raises(InvalidULID, match=re.escape(message)):
        ULID(text)
    with pytest.raises(InvalidULID, match=re.escape(message)):
        decode(text)


@pytest.mark.parametrize(("text", "message"), BAD_TEXT)
def test_decode_ints_rejects_a_bad_text_anywhere_in_the_list(text: str, message: str) -> None:
    for texts in ([text], [VALID, text], [text, VALID.lower()], [VALID, VALID, text, VALID]):
        with pytest.raises(InvalidULID, match=re.escape(message)):
            decode_ints(texts)
        assert not valid_texts(texts)


@given(st.lists(ulid_texts(), max_size=30))
def test_decode_ints_is_decode_int_of_each(texts: list[str]) -> None:
    assert decode_ints(texts) == [decode_int(text) for text in texts]
    assert valid_texts(texts) is bool(texts)  # an empty list is not "valid texts"


def test_a_comma_inside_a_text_is_refused() -> None:
    # The one-pass check joins texts with commas: a text's own comma is caught.
    texts = [VALID, VALID[:10] + "," + VALID[11:]]
    assert not valid_texts(texts)
    with pytest.raises(InvalidULID):
        decode_ints(texts)


def test_decode_ints_extremes_and_non_str() -> None:
    assert decode_ints(["0" * 26, "7" + "z" * 25, VALID]) == [0, (1 << 128) - 1, ULID(VALID).int]
    with pytest.raises(TypeError, match="ULID text must be str"):
        decode_ints([VALID, VALID.encode()])  # type: ignore[list-item]


def test_rejection_is_a_value_error_with_a_hint() -> None:
    with pytest.raises(ValueError, match=r"no I, L, O or U") as info:
        ULID(at(25, "U"))
    assert isinstance(info.value, InvalidULID)


@pytest.mark.parametrize(
    "value",
    [
        VALID.encode(),  # bytes of valid text: must be decoded by the caller
        bytearray(VALID.encode()),  # mutable bytes
        123,  # an int is not text (use from_int)
        1.5,  # a float
        None,  # missing value
        [VALID],  # a list holding a ULID
    ],
)
def test_non_str_is_a_type_error(value: Any) -> None:
    with pytest.raises(TypeError, match="ULID text must be str"):
        ULID(value)


def test_valid_text_in_either_case() -> None:
    assert ULID(VALID) == ULID(VALID.lower()) == ULID("01htqW311n1KR5g0y75m3EF00h")
    assert ULID("0" * 26).int == 0
    assert ULID("7" + "Z" * 25).int == (1 << 128) - 1


# -- hexadecimal -------------------------------------------------------------------

HEX = "018eafc184350cf05803c72d06e78011"

BAD_HEX: list[tuple[str, str]] = [
    (HEX[:-1], "32 hexadecimal digits, got 31"),  # 31 digits
    (HEX + "0", "32 hexadecimal digits, got 33"),  # 33 digits
    ("", "32 hexadecimal digits, got 0"),  # empty
    ("0x" + HEX, "32 hexadecimal digits, got 34"),  # 0x prefix, too long
    ("0x" + HEX[2:], "invalid hexadecimal digit 'x' at position 1"),  # 0x prefix, 32 long
    (HEX[:8] + " " + HEX[9:], "invalid hexadecimal digit ' ' at position 8"),  # space
    (HEX[:16] + "_" + HEX[17:], "invalid hexadecimal digit '_' at position 16"),  # underscore
    ("+" + HEX[1:], "invalid hexadecimal digit '+' at position 0"),  # sign
    ("-" + HEX[1:], "invalid hexadecimal digit '-' at position 0"),  # negative sign
    (HEX[:-1] + "g", "invalid hexadecimal digit 'g' at position 31"),  # not a hex digit
    (HEX[:5] + "\uff11" + HEX[6:], "digit '\uff11' at position 5"),  # fullwidth 1
    (HEX[:3] + "\u0661" + HEX[4:], "digit '\u0661' at position 3"),  # Arabic-Indic 1
    (HEX[:-1] + "\n", "invalid hexadecimal digit '\\n' at position 31"),  # newline
    (
        "018eafc1-8435-0cf0-5803-c72d06e78011",  # the UUID form: use from_uuid
        "32 hexadecimal digits, got 36",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD_HEX)
def test_rejected_hex(text: str, message: str) -> None:
    with pytest.raises(InvalidULID, match=re.escape(message)):
        ULID.from_hex(text)
    with pytest.raises(InvalidULID, match=re.escape(message)):
        parse_hex(text)


def test_hex_accepts_either_case() -> None:
    assert ULID.from_hex(HEX) == ULID.from_hex(HEX.upper()) == ULID(VALID)


@pytest.mark.parametrize("value", [HEX.encode(), int(HEX, 16), None])
def test_hex_non_str_is_a_type_error(value: Any) -> None:
    with pytest.raises(TypeError, match="hex text must be str"):
        ULID.from_hex(value)
