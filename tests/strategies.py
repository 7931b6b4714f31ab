"""Hypothesis strategies shared by the test modules."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from hypothesis import strategies as st

from sqlalchemy_ulid import ULID
from sqlalchemy_ulid._codec import ALPHABET
from sqlalchemy_ulid._keys import uuid7_min_at

MAX_TIMESTAMP_MS = (1 << 48) - 1
#: The last millisecond a datetime can hold (9999-12-31T23:59:59.999Z).
MAX_DATETIME_MS = 253_402_300_799_999
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

ulid_bytes = st.binary(min_size=16, max_size=16)
ulid_ints = st.integers(min_value=0, max_value=(1 << 128) - 1)
ulids = ulid_bytes.map(ULID.from_bytes)
timestamps = st.integers(min_value=0, max_value=MAX_TIMESTAMP_MS)
datetime_timestamps = st.integers(min_value=0, max_value=MAX_DATETIME_MS)
randomness = st.binary(min_size=10, max_size=10)
randomness_ints = st.integers(min_value=0, max_value=(1 << 80) - 1)

#: Fixed UTC offsets strictly inside a day, to the minute.
utc_offsets = st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)


@st.composite
def ulid_texts(draw: st.DrawFn) -> str:
    """A valid ULID's text with each letter in a random case."""
    text = str(draw(ulids))
    lower = draw(st.lists(st.booleans(), min_size=26, max_size=26))
    return "".join(c.lower() if flip else c for c, flip in zip(text, lower, strict=True))


# Characters that look like they might belong in a ULID but do not, plus the
# whole valid alphabet in both cases, so mixed strings are sometimes valid.
_LOOKALIKES = (
    "ILOUilou"  # excluded from Crockford's alphabet
    " \t\n_+-.!0x"  # whitespace, separators, signs: int() accepts some of them
    "\u0660\u0663\u0669"  # Arabic-Indic digits
    "\uff10\uff21\uff48"  # fullwidth 0, A, h
    "\u212a\u017f\u0131"  # Kelvin sign, long s, dotless i: case-fold to ASCII
)
MIXED_ALPHABET = ALPHABET + ALPHABET.lower() + _LOOKALIKES


@st.composite
def mutated_ulid_texts(draw: st.DrawFn) -> str:
    """A valid ULID text with one character replaced by anything from the mix."""
    text = draw(ulid_texts())
    position = draw(st.integers(min_value=0, max_value=25))
    char = draw(st.sampled_from(MIXED_ALPHABET))
    return text[:position] + char + text[position + 1 :]


#: Strings near the shape of a ULID: some valid, most subtly not.
maybe_ulid_texts = st.one_of(
    ulid_texts(),
    mutated_ulid_texts(),
    st.text(alphabet=MIXED_ALPHABET, min_size=24, max_size=28),
)


@st.composite
def aware_datetimes(draw: st.DrawFn) -> tuple[datetime, int]:
    """An aware datetime on a whole millisecond, in a random zone, and its ms."""
    ms = draw(datetime_timestamps)
    zone = draw(utc_offsets)
    when = EPOCH + timedelta(milliseconds=ms)
    try:
        return when.astimezone(zone), ms
    except OverflowError:
        # The local time would fall outside year 1..9999; keep it in UTC.
        return when, ms


def v7(ms: int, random_bits: int) -> uuid.UUID:
    """The UUIDv7 of ``ms`` with ``random_bits`` spread over its 74 random bits."""
    rand_a, rand_b = random_bits >> 62, random_bits & ((1 << 62) - 1)
    return uuid.UUID(int=uuid7_min_at(ms).int | rand_a << 64 | rand_b)


# -- typed ids (TypeID) -----------------------------------------------------------

#: Valid TypeID prefixes: empty, or lowercase letters and underscores, at most
#: 63, starting and ending with a letter.
typeid_prefixes = st.one_of(
    st.just(""),
    st.from_regex(r"[a-z]([a-z_]{0,61}[a-z])?", fullmatch=True),
)


@st.composite
def typeid_parts(draw: st.DrawFn) -> tuple[str, uuid.UUID]:
    """A valid prefix and any UUID (every 128-bit value is a valid suffix)."""
    return draw(typeid_prefixes), uuid.UUID(int=draw(ulid_ints))


# Near-misses: uppercase, digits, separators, the letters Crockford leaves out,
# lookalikes that case-fold to ASCII, non-ASCII letters.
_TYPEID_MIX = "0123456789abcdefghjkmnpqrstvwxyz_ABZilou8 -.\u00e9\u212a\u0131\u0660"


@st.composite
def maybe_typeid_texts(draw: st.DrawFn) -> str:
    """Strings near the shape of a TypeID: some valid, most subtly not."""
    prefix, value = draw(typeid_parts())
    from sqlalchemy_ulid import TypeID

    text = str(TypeID.from_uuid(prefix, value))
    mode = draw(st.sampled_from(["valid", "replace", "insert", "delete", "random"]))
    if mode == "valid" or not text:
        return text
    if mode == "random":
        return draw(st.text(alphabet=_TYPEID_MIX, max_size=40))
    position = draw(st.integers(min_value=0, max_value=len(text) - 1))
    char = draw(st.sampled_from(_TYPEID_MIX))
    if mode == "replace":
        return text[:position] + char + text[position + 1 :]
    if mode == "insert":
        return text[:position] + char + text[position:]
    return text[:position] + text[position + 1 :]
