"""The ULID value type: conversions, order, identity, time boundaries."""

from __future__ import annotations

import copy
import pickle
import re
import uuid
import zoneinfo
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import sqlalchemy_ulid
from sqlalchemy_ulid import ULID, InvalidULID
from strategies import (
    EPOCH,
    MAX_DATETIME_MS,
    MAX_TIMESTAMP_MS,
    aware_datetimes,
    randomness,
    randomness_ints,
    timestamps,
    ulid_bytes,
    ulid_ints,
    ulid_texts,
    ulids,
)

WORKED_TEXT = "01HTQW311N1KR5G0Y75M3EF00H"
WORKED_MS = 1712345678901
WORKED_RANDOM = bytes([12, 240, 88, 3, 199, 45, 6, 231, 128, 17])


def test_worked_example() -> None:
    u = ULID.from_parts(WORKED_MS, WORKED_RANDOM)
    assert u == ULID(WORKED_TEXT)
    assert str(u) == WORKED_TEXT
    assert u.timestamp_ms == WORKED_MS
    assert u.randomness == WORKED_RANDOM
    assert u.datetime == datetime(2024, 4, 5, 19, 34, 38, 901000, tzinfo=timezone.utc)
    assert u.bytes == bytes.fromhex("018eafc18435") + WORKED_RANDOM
    assert u.hex == "018eafc184350cf05803c72d06e78011"
    assert u.to_uuid() == uuid.UUID("018eafc1-8435-0cf0-5803-c72d06e78011")


# -- round trips -------------------------------------------------------------------


@given(ulid_texts())
def test_text_round_trip_any_case(text: str) -> None:
    u = ULID(text)
    assert str(u) == text.upper()
    assert ULID(str(u)) == u


@given(ulid_bytes)
def test_bytes_round_trip(data: bytes) -> None:
    u = ULID.from_bytes(data)
    assert u.bytes == bytes(u) == data
    assert ULID.from_bytes(bytearray(data)) == ULID.from_bytes(memoryview(data)) == u


@given(ulid_ints)
def test_int_round_trip(n: int) -> None:
    u = ULID.from_int(n)
    assert u.int == int(u) == n
    assert u.bytes == n.to_bytes(16, "big")


@given(ulids)
def test_uuid_round_trip(u: ULID) -> None:
    as_uuid = u.to_uuid()
    assert isinstance(as_uuid, uuid.UUID)
    assert as_uuid.bytes == u.bytes
    assert ULID.from_uuid(as_uuid) == u


@given(ulids)
def test_hex_round_trip(u: ULID) -> None:
    assert len(u.hex) == 32
    assert u.hex == u.hex.lower() == u.bytes.hex()
    assert ULID.from_hex(u.hex) == ULID.from_hex(u.hex.upper()) == u


@given(timestamps, randomness)
def test_parts_round_trip(ms: int, rand: bytes) -> None:
    u = ULID.from_parts(ms, rand)
    assert u.timestamp_ms == ms
    assert u.randomness == rand
    assert ULID.from_parts(ms, int.from_bytes(rand, "big")) == u


@given(ulids)
def test_constructing_from_a_ulid_returns_it(u: ULID) -> None:
    assert ULID(u) is u  # type: ignore[arg-type]


# -- order, equality, hashing --------------------------------------------------------


@given(st.lists(ulid_bytes, min_size=2, max_size=20))
def test_object_order_is_byte_text_and_int_order(values: list[bytes]) -> None:
    objects = [ULID.from_bytes(b) for b in values]
    by_object = sorted(objects)
    assert [u.bytes for u in by_object] == sorted(values)
    assert [str(u) for u in by_object] == sorted(str(u) for u in objects)
    assert [u.int for u in by_object] == sorted(u.int for u in objects)
    assert [u.hex for u in by_object] == sorted(u.hex for u in objects)


@given(ulids, ulids)
def test_comparisons_agree_with_bytes(a: ULID, b: ULID) -> None:
    assert (a < b) == (a.bytes < b.bytes) == (str(a) < str(b))
    assert (a <= b) == (a.bytes <= b.bytes)
    assert (a > b) == (a.bytes > b.bytes)
    assert (a >= b) == (a.bytes >= b.bytes)
    assert (a == b) == (a.bytes == b.bytes)
    assert (a != b) == (a.bytes != b.bytes)


@given(ulid_bytes)
def test_equal_values_hash_equal(data: bytes) -> None:
    a, b = ULID.from_bytes(data), ULID(str(ULID.from_bytes(data)).lower())
    assert a == b
    assert a is not b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1
    assert {a: 1}[b] == 1


@given(timestamps, timestamps, randomness, randomness)
def test_time_order_dominates(ms1: int, ms2: int, r1: bytes, r2: bytes) -> None:
    a, b = ULID.from_parts(ms1, r1), ULID.from_parts(ms2, r2)
    if ms1 < ms2:
        assert a < b


def test_not_equal_to_other_types() -> None:
    u = ULID(WORKED_TEXT)
    assert u != WORKED_TEXT
    assert u != u.bytes
    assert u != u.to_uuid()
    assert u != u.int
    with pytest.raises(TypeError):
        _ = u < WORKED_TEXT  # type: ignore[operator]


@given(ulids)
def test_pickle_and_copy(u: ULID) -> None:
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        restored = pickle.loads(pickle.dumps(u, protocol))
        assert restored == u
        assert type(restored) is ULID
        assert hash(restored) == hash(u)
    assert copy.copy(u) == u
    assert copy.deepcopy(u) == u
    assert copy.deepcopy([u])[0] == u


# -- other constructors' rejections --------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (bytes(15), "a ULID is 16 bytes, got 15"),  # one byte short
        (bytes(17), "a ULID is 16 bytes, got 17"),  # one byte long
        (b"", "a ULID is 16 bytes, got 0"),  # empty
        (WORKED_TEXT.encode(), "a ULID is 16 bytes, got 26"),  # the text's bytes, not the value
    ],
)
def test_from_bytes_rejects_wrong_length(data: bytes, message: str) -> None:
    with pytest.raises(InvalidULID, match=re.escape(message)):
        ULID.from_bytes(data)


@pytest.mark.parametrize(
    "value",
    [
        WORKED_TEXT,  # text: use ULID(text)
        1,  # an int: use from_int
        None,  # missing
        list(range(16)),  # a list of byte values
    ],
)
def test_from_bytes_rejects_non_bytes(value: Any) -> None:
    with pytest.raises(TypeError, match="expected 16 bytes"):
        ULID.from_bytes(value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "got -1"),  # negative
        (1 << 128, f"got {1 << 128}"),  # one past the largest
        (-(1 << 128), "got -"),  # very negative
    ],
)
def test_from_int_rejects_out_of_range(value: int, message: str) -> None:
    with pytest.raises(InvalidULID, match=re.escape(f"0 .. 2**128 - 1, {message}")):
        ULID.from_int(value)


@pytest.mark.parametrize(
    "value",
    [
        True,  # a bool is an int subclass, but never an identifier
        False,  # ... nor is False
        1.0,  # a float, even a whole one
        "1",  # a numeric string
        None,  # missing
    ],
)
def test_from_int_rejects_non_int(value: Any) -> None:
    with pytest.raises(TypeError, match="expected int"):
        ULID.from_int(value)


def test_from_int_extremes() -> None:
    assert str(ULID.from_int(0)) == "0" * 26
    assert str(ULID.from_int((1 << 128) - 1)) == "7" + "Z" * 25


@pytest.mark.parametrize(
    "value",
    [
        str(uuid.UUID(int=1)),  # UUID text: parse it into uuid.UUID first
        uuid.UUID(int=1).bytes,  # bytes: use from_bytes
        1,  # an int
    ],
)
def test_from_uuid_rejects_non_uuid(value: Any) -> None:
    with pytest.raises(TypeError, match=r"expected uuid\.UUID"):
        ULID.from_uuid(value)


@pytest.mark.parametrize(
    ("timestamp_ms", "rand", "error", "message"),
    [
        (-1, bytes(10), InvalidULID, "timestamp -1 ms is outside"),  # before 1970
        (1 << 48, bytes(10), InvalidULID, f"timestamp {1 << 48} ms is outside"),  # 49 bits
        (0, bytes(9), InvalidULID, "randomness is 10 bytes, got 9"),  # 72 random bits
        (0, bytes(11), InvalidULID, "randomness is 10 bytes, got 11"),  # 88 random bits
        (0, b"", InvalidULID, "randomness is 10 bytes, got 0"),  # no randomness
        (0, 1 << 80, InvalidULID, f"randomness is 0 .. 2**80 - 1, got {1 << 80}"),  # 81 bits
        (0, -1, InvalidULID, "randomness is 0 .. 2**80 - 1, got -1"),  # negative
        (True, bytes(10), TypeError, "timestamp_ms must be int"),  # bool timestamp
        (1.5, bytes(10), TypeError, "timestamp_ms must be int"),  # float timestamp
        (0, True, TypeError, "randomness must be bytes or int"),  # bool randomness
        (0, "0" * 10, TypeError, "randomness must be bytes or int"),  # text randomness
    ],
)
def test_from_parts_rejections(
    timestamp_ms: Any, rand: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        ULID.from_parts(timestamp_ms, rand)


def test_from_parts_extremes() -> None:
    assert ULID.from_parts(MAX_TIMESTAMP_MS, (1 << 80) - 1).int == (1 << 128) - 1
    assert ULID.from_parts(0, 0).int == 0


# -- min_at / max_at ---------------------------------------------------------------


@pytest.mark.parametrize(
    "zone",
    [
        timezone.utc,
        timezone(timedelta(hours=5, minutes=30)),  # India
        timezone(timedelta(hours=-8)),
        zoneinfo.ZoneInfo("America/New_York"),
        zoneinfo.ZoneInfo("Asia/Kathmandu"),  # +05:45
        zoneinfo.ZoneInfo("Pacific/Chatham"),  # +12:45 / +13:45
    ],
)
def test_boundaries_in_any_zone(zone: Any) -> None:
    instant = datetime(2024, 4, 5, 19, 34, 38, 901000, tzinfo=timezone.utc)
    local = instant.astimezone(zone)
    assert ULID.min_at(local) == ULID("01HTQW311N0000000000000000")
    assert ULID.max_at(local) == ULID("01HTQW311NZZZZZZZZZZZZZZZZ")
    assert ULID.min_at(local) == ULID.min_at(WORKED_MS)
    assert ULID.max_at(local) == ULID.max_at(WORKED_MS)


def test_worked_example_lies_between_its_boundaries() -> None:
    u = ULID(WORKED_TEXT)
    assert ULID.min_at(WORKED_MS) < u < ULID.max_at(WORKED_MS)
    assert ULID.max_at(WORKED_MS - 1) < ULID.min_at(WORKED_MS)
    assert ULID.max_at(WORKED_MS).int + 1 == ULID.min_at(WORKED_MS + 1).int


@given(aware_datetimes())
def test_min_at_is_exact(case: tuple[datetime, int]) -> None:
    when, ms = case
    assert ULID.min_at(when).timestamp_ms == ms
    assert ULID.max_at(when).timestamp_ms == ms
    assert ULID.min_at(when).randomness == bytes(10)
    assert ULID.max_at(when).randomness == b"\xff" * 10
    assert ULID.min_at(when).datetime == when


@given(aware_datetimes(), st.integers(min_value=0, max_value=999))
def test_sub_millisecond_parts_are_floored(case: tuple[datetime, int], micros: int) -> None:
    when, ms = case
    assert ULID.min_at(when + timedelta(microseconds=micros)).timestamp_ms == ms


def test_float_path_is_off_by_one_where_ours_is_exact() -> None:
    when = datetime(2004, 9, 23, 15, 54, 43, 735000, tzinfo=timezone.utc)
    ms = 1_095_954_883_735
    assert (when - EPOCH) // timedelta(milliseconds=1) == ms
    assert int(when.timestamp() * 1000) == ms - 1  # the float path loses a millisecond
    assert ULID.min_at(when).timestamp_ms == ms
    assert ULID.max_at(when).timestamp_ms == ms


def test_naive_datetime_is_refused() -> None:
    with pytest.raises(ValueError, match="naive datetime") as info:
        ULID.min_at(datetime(2024, 4, 5, 19, 34, 38))
    assert not isinstance(info.value, InvalidULID)  # a usage error, not a bad ULID
    with pytest.raises(ValueError, match="naive datetime"):
        ULID.max_at(datetime(2024, 4, 5))


@pytest.mark.parametrize(
    "when",
    [
        -1,  # before the epoch
        1 << 48,  # past 48 bits
    ],
)
def test_out_of_range_milliseconds_are_refused(when: int) -> None:
    with pytest.raises(InvalidULID, match=re.escape("outside 0 .. 2**48 - 1")):
        ULID.min_at(when)
    with pytest.raises(InvalidULID, match=re.escape("outside 0 .. 2**48 - 1")):
        ULID.max_at(when)


@pytest.mark.parametrize(
    ("when", "shown"),
    [
        # 1 ms before 1970
        (datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc), "1969-12-31T23:59"),
        # 1970 local, 1969 in UTC
        (datetime(1970, 1, 1, tzinfo=timezone(timedelta(hours=1))), "1970-01-01T00:00:00+01:00"),
        (datetime(1960, 6, 1, tzinfo=timezone.utc), "1960-06-01T00:00:00+00:00"),  # long before
    ],
)
def test_datetimes_before_1970_are_a_value_error_naming_them(when: datetime, shown: str) -> None:
    for build in (ULID.min_at, ULID.max_at):
        with pytest.raises(ValueError, match=re.escape(shown) + ".* is before 1970") as info:
            build(when)
        # The caller passed a datetime, not an id: not InvalidULID.
        assert not isinstance(info.value, InvalidULID)


@pytest.mark.parametrize("when", [1.5, "2024-04-05T00:00:00Z", True, None])
def test_other_moment_types_are_refused(when: Any) -> None:
    with pytest.raises(TypeError, match="aware datetime or int milliseconds"):
        ULID.min_at(when)


def test_boundary_extremes() -> None:
    assert ULID.min_at(0).int == 0
    assert ULID.max_at(MAX_TIMESTAMP_MS).int == (1 << 128) - 1
    assert ULID.min_at(EPOCH) == ULID.min_at(0)


def test_datetime_past_year_9999_overflows_clearly() -> None:
    last = ULID.from_parts(MAX_DATETIME_MS, bytes(10))
    assert last.datetime == datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc)
    for ms in (MAX_DATETIME_MS + 1, MAX_TIMESTAMP_MS):
        u = ULID.from_parts(ms, bytes(10))
        with pytest.raises(OverflowError, match=r"after datetime\.max \(year 9999\)"):
            _ = u.datetime
        assert u.timestamp_ms == ms  # still readable as a number


@given(ulids)
def test_datetime_is_aware_utc(u: ULID) -> None:
    if u.timestamp_ms <= MAX_DATETIME_MS:
        assert u.datetime.utcoffset() == timedelta(0)
        assert (u.datetime - EPOCH) // timedelta(milliseconds=1) == u.timestamp_ms


# -- views, identity, presentation -------------------------------------------------


@given(timestamps, randomness_ints)
def test_views_are_consistent(ms: int, rand: int) -> None:
    u = ULID.from_parts(ms, rand)
    assert u.int == (ms << 80) | rand
    assert u.randomness == rand.to_bytes(10, "big")
    assert len(u.bytes) == 16
    assert u.bytes[:6] == ms.to_bytes(6, "big")
    assert u.to_uuid().int == u.int


def test_str_is_uppercase_and_repr_reproduces() -> None:
    u = ULID(WORKED_TEXT.lower())
    assert str(u) == WORKED_TEXT
    assert repr(u) == f"ULID('{WORKED_TEXT}')"
    assert eval(repr(u), {"ULID": ULID}) == u
    assert f"{u}" == WORKED_TEXT


def test_immutable() -> None:
    u = ULID(WORKED_TEXT)
    with pytest.raises(AttributeError, match="immutable"):
        u._bytes = bytes(16)  # type: ignore[misc]
    with pytest.raises(AttributeError, match="immutable"):
        u.anything = 1  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="immutable"):
        del u._bytes
    with pytest.raises(AttributeError):
        u.timestamp_ms = 0  # type: ignore[misc]
    assert not hasattr(u, "__dict__")
    assert str(u) == WORKED_TEXT


@pytest.mark.parametrize("name", sqlalchemy_ulid.__all__)
def test_public_names_live_in_the_package(name: str) -> None:
    obj = getattr(sqlalchemy_ulid, name)
    assert obj.__module__ == "sqlalchemy_ulid"


def test_repr_of_error_shows_public_name() -> None:
    assert repr(InvalidULID("x")) == "InvalidULID('x')"
    assert f"{InvalidULID.__module__}.{InvalidULID.__qualname__}" == "sqlalchemy_ulid.InvalidULID"
