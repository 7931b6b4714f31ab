"""UUIDv7Generator and new_uuid7: layout, order, clock steps, overflow, threads, forks, bounds."""

from __future__ import annotations

import copy
import os
import pickle
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from itertools import pairwise

import pytest
import sqlalchemy as sa
import uuid_utils
from sqlalchemy.engine import Engine

from _threads import at_once
from sqlalchemy_ulid import (
    InvalidULID,
    UUIDv7Generator,
    new_ulid,
    new_uuid7,
    uuid7_max_at,
    uuid7_min_at,
)
from sqlalchemy_ulid._uuid7 import _layout
from test_generator import FakeClock, ScriptedRandom, TickingClock, _in_c_child, _in_child

MS = 1_712_345_678_901
STEP = 1 << 32  # one in the counter's low part
needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _fields(value: uuid.UUID) -> tuple[int, int, int, int, int]:
    """(ms, version, rand_a, variant, rand_b) as RFC 9562 lays them out."""
    n = value.int
    return n >> 80, (n >> 76) & 0xF, (n >> 64) & 0xFFF, (n >> 62) & 0b11, n & ((1 << 62) - 1)


def _check_v7(values: list[uuid.UUID]) -> None:
    for value in values:
        assert type(value) is uuid.UUID
        assert value.version == 7
        assert value.variant == uuid.RFC_4122


def _all_v7_bits(ints: set[int]) -> bool:
    """Version 7 and the RFC 9562 variant on every value (integer form, for speed)."""
    mask, flags = (0xF << 76) | (0b11 << 62), (0x7 << 76) | (0b10 << 62)
    return all(i & mask == flags for i in ints)


def _split(data: bytes) -> list[uuid.UUID]:
    return [uuid.UUID(bytes=data[i : i + 16]) for i in range(0, len(data), 16)]


# -- layout ---------------------------------------------------------------------------


def test_rfc_9562_test_vector() -> None:
    # RFC 9562 appendix A.6: unix_ts_ms 0x017F22E279B0, rand_a 0xCC3, var 0b10,
    # rand_b 0x18C4DC0C0C07398F. Our counter is rand_a and rand_b's top 30 bits.
    value = uuid.UUID(int=_layout(0x017F22E279B0, 0xCC3 << 30 | 0x18C4DC0C, 0x0C07398F))
    assert value == uuid.UUID("017F22E2-79B0-7CC3-98C4-DC0C0C07398F")
    assert _fields(value) == (0x017F22E279B0, 7, 0xCC3, 0b10, 0x18C4DC0C0C07398F)


def test_first_value_uses_randomness_as_drawn() -> None:
    drawn = bytes([0xFF] * 10)
    gen = UUIDv7Generator(clock=FakeClock(), random_bytes=ScriptedRandom(drawn))
    value = gen()
    ms, version, rand_a, variant, rand_b = _fields(value)
    assert (ms, version, variant) == (MS, 7, 0b10)
    # 41 random counter bits (the counter's top bit starts at zero), then 32 random bits.
    assert rand_a == 0x7FF
    assert rand_b == (1 << 62) - 1


def test_same_millisecond_adds_one_to_the_counter() -> None:
    drawn = bytes(range(10))
    gen = UUIDv7Generator(clock=FakeClock(), random_bytes=ScriptedRandom(drawn))
    values = [gen() for _ in range(50)]
    assert [b.int - a.int for a, b in pairwise(values)] == [STEP] * 49
    assert len({v.int & 0xFFFFFFFF for v in values}) == 1  # the seeded tail stays
    _check_v7(values)


def test_fresh_randomness_each_new_millisecond() -> None:
    random = ScriptedRandom(bytes(10), bytes([1] * 10), bytes([2] * 10))
    gen = UUIDv7Generator(clock=TickingClock(every=1), random_bytes=random)
    first, second, third = gen(), gen(), gen()
    assert random.requests == [10, 10, 10]
    assert [v.int >> 80 for v in (first, second, third)] == [MS + 1, MS + 2, MS + 3]
    assert second.int & 0xFFFFFFFF == 0x01010101
    assert first < second < third


def test_real_clock_values_increase_and_are_all_v7() -> None:
    values = [new_uuid7() for _ in range(50_000)]
    _check_v7(values)
    assert all(a < b for a, b in pairwise(values))


def test_values_are_complete_uuid_objects() -> None:
    # Made by filling the slots of a bare uuid.UUID: everything must still work.
    value = new_uuid7()
    again = uuid.UUID(str(value))
    assert value == again
    assert hash(value) == hash(again)
    assert value.is_safe is uuid.SafeUUID.unknown
    assert pickle.loads(pickle.dumps(value)) == value
    assert copy.deepcopy(value) == value
    assert {value: 1}[again] == 1


# -- clock steps and overflow -----------------------------------------------------------


def test_clock_stepping_back_keeps_the_last_timestamp() -> None:
    clock = FakeClock()
    gen = UUIDv7Generator(clock=clock)
    before = [gen() for _ in range(5)]
    clock.now = MS - 60_000  # a minute back
    after = [gen() for _ in range(5)]
    clock.now = MS + 1
    later = gen()
    values = [*before, *after, later]
    assert all(a < b for a, b in pairwise(values))
    assert {v.int >> 80 for v in after} == {MS}
    assert later.int >> 80 == MS + 1
    _check_v7(values)


def test_counter_carries_from_rand_b_into_rand_a() -> None:
    # All ones: the counter's low part starts full, so the second value carries.
    gen = UUIDv7Generator(clock=FakeClock(), random_bytes=lambda n: b"\xff" * n)
    first, second, third = gen(), gen(), gen()
    assert _fields(first)[2] == 0x7FF
    assert _fields(second)[2] == 0x800  # one more in rand_a, rand_b's counter part zero
    assert (_fields(second)[4] >> 32) == 0
    assert third.int - second.int == STEP
    assert first < second < third
    assert {v.int >> 80 for v in (first, second, third)} == {MS}
    _check_v7([first, second, third])


def _full(gen: UUIDv7Generator, ms: int) -> None:
    """Make the generator's current run the last one of the millisecond (white box)."""
    gen._set_run(_layout(ms, (1 << 42) - 2, 0))


def test_overflow_waits_for_the_next_millisecond() -> None:
    clock = TickingClock(every=50)  # the clock moves on after 50 reads
    gen = UUIDv7Generator(clock=clock)
    first = gen()
    ms = first.int >> 80
    _full(gen, ms)
    last = gen()  # the very last counter value of the millisecond
    assert _fields(last)[2] == 0xFFF
    reads = clock.reads
    after = gen()
    assert clock.reads > reads + 1  # it read the clock again: it waited
    assert after.int >> 80 == ms + 1
    assert first < last < after
    _check_v7([first, last, after])


def test_overflow_with_the_clock_stuck_behind_moves_on_by_itself() -> None:
    clock = FakeClock()
    gen = UUIDv7Generator(clock=clock)
    gen()
    clock.now = MS - 5_000  # behind: waiting could take five seconds
    _full(gen, MS)
    last = gen()
    started = time.monotonic()
    after = gen()
    assert time.monotonic() - started < 1.0
    assert after.int >> 80 == MS + 1
    assert last < after


def test_clock_past_48_bits_is_an_error_not_a_wrap() -> None:
    gen = UUIDv7Generator(clock=lambda: 1 << 48)
    with pytest.raises(OverflowError, match="UUIDv7s end there"):
        gen()


@pytest.mark.parametrize(
    ("size", "why"),
    [(9, "one byte short: zeros"), (11, "one byte long: spills into the timestamp"), (0, "none")],
)
def test_random_bytes_of_the_wrong_length_are_refused(size: int, why: str) -> None:
    gen = UUIDv7Generator(clock=FakeClock(), random_bytes=lambda n: b"\x01" * size)
    with pytest.raises(ValueError, match=f"returned {size} bytes, not 10"):
        gen()


@pytest.mark.parametrize("reading", [-1, -(10**12)])
def test_clock_before_1970_is_refused(reading: int) -> None:
    with pytest.raises(ValueError, match="before 1970"):
        UUIDv7Generator(clock=lambda: reading)()


# -- threads and forks: at least a million values ----------------------------------------


class _LockedOnly(UUIDv7Generator):
    """What free-threaded CPython gets: every call takes the lock."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__()
        self._lock_free = False


@pytest.mark.parametrize("generate", [new_uuid7, _LockedOnly()], ids=["default", "locked-only"])
def test_threads_never_collide(generate: Callable[[], uuid.UUID]) -> None:
    threads_count, per_thread = 4, 75_000

    def work(n: int) -> list[uuid.UUID]:
        out: list[uuid.UUID] = []
        append = out.append
        for _ in range(per_thread):
            append(generate())
        return out

    results = at_once(threads_count, work, switch=1e-6)
    everything = {u.int for out in results for u in out}
    assert len(everything) == threads_count * per_thread
    for out in results:
        assert all(a < b for a, b in pairwise(out))
    assert _all_v7_bits(everything)
    _check_v7(results[0][:1000])


@needs_fork
def test_forked_children_never_repeat_the_parent_or_each_other() -> None:
    # 4 children x 25k + the parent's 25k. A child that kept the parent's
    # state would repeat its very first values: the count proves nothing past
    # a few milliseconds' worth (the threads above are the volume test).
    count = 25_000
    before = [new_uuid7() for _ in range(1000)]
    children = [
        _split(_in_child(lambda: b"".join(new_uuid7().bytes for _ in range(count))))
        for _ in range(4)
    ]
    after = [new_uuid7() for _ in range(count)]
    seen = {u.int for u in after}
    for child in children:
        assert len(child) == count
        assert child[0] > before[-1]  # still after everything made before the fork
        assert all(a < b for a, b in pairwise(child))
        ints = {u.int for u in child}
        assert len(ints) == len(child)
        assert not ints & seen
        seen |= ints
    assert _all_v7_bits(seen)
    _check_v7(children[0][:1000])


@needs_fork
def test_fork_in_one_frozen_millisecond() -> None:
    gen = UUIDv7Generator(clock=lambda: MS)
    parent_before = [gen() for _ in range(10)]
    child = _split(_in_child(lambda: b"".join(gen().bytes for _ in range(2000))))
    parent_after = [gen() for _ in range(2000)]
    assert parent_after[0].int == parent_before[-1].int + STEP  # the parent carries on
    assert not set(child) & set(parent_after)
    assert child[0].int >> 80 == MS + 1  # the child moved on to the next millisecond


@needs_fork
def test_unhooked_fork_children_do_not_repeat_each_other() -> None:
    class Locked(UUIDv7Generator):
        __slots__ = ()

        def __init__(self) -> None:
            super().__init__(clock=lambda: MS)
            self._lock_free = False

    gen = Locked()
    [gen() for _ in range(10)]
    first = _split(_in_c_child(lambda: b"".join(gen().bytes for _ in range(500))))
    second = _split(_in_c_child(lambda: b"".join(gen().bytes for _ in range(500))))
    assert not set(first) & set(second)


# -- bounds ------------------------------------------------------------------------------


def test_bounds_of_a_millisecond() -> None:
    when = datetime(2024, 4, 5, 19, 34, 38, 901_000, tzinfo=timezone.utc)
    low, high = uuid7_min_at(when), uuid7_max_at(when)
    assert low == uuid7_min_at(MS)
    assert high == uuid7_max_at(MS)
    assert _fields(low) == (MS, 7, 0, 0b10, 0)
    assert _fields(high) == (MS, 7, 0xFFF, 0b10, (1 << 62) - 1)
    _check_v7([low, high])
    # Sub-millisecond parts floor; other zones are the same moment.
    assert uuid7_min_at(when + timedelta(microseconds=999)) == low
    assert uuid7_min_at(when.astimezone(timezone(timedelta(hours=-5)))) == low
    assert uuid7_max_at(MS - 1) < low
    assert high < uuid7_min_at(MS + 1)


@pytest.mark.parametrize(
    ("when", "error"),
    [
        (datetime(2024, 1, 1), ValueError),  # naive: the zone would be a guess
        (datetime(1969, 12, 31, tzinfo=timezone.utc), ValueError),  # before 1970
        (-1, InvalidULID),  # before 1970, as milliseconds
        (1 << 48, InvalidULID),  # past 48 bits
        (True, TypeError),  # a bool is not milliseconds
        ("2024-01-01", TypeError),  # text is not a moment
    ],
)
@pytest.mark.parametrize("bound", [uuid7_min_at, uuid7_max_at])
def test_bounds_refuse_bad_moments(
    bound: Callable[[object], uuid.UUID], when: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        bound(when)


def test_order_and_bounds_agree_with_uuid_utils_and_ulids() -> None:
    made: list[tuple[int, uuid.UUID]] = []
    for _ in range(5):
        for source in range(3):
            for _ in range(20):
                if source == 0:
                    value = new_uuid7()
                elif source == 1:
                    value = uuid.UUID(int=uuid_utils.uuid7().int)
                else:
                    value = new_ulid().to_uuid()  # a ULID's ms sorts the same way
                made.append((source, value))
        time.sleep(0.003)
    for source, value in made:
        ms = value.int >> 80
        if source != 2:
            assert value.version == 7
            assert uuid7_min_at(ms) <= value <= uuid7_max_at(ms)
    # Across milliseconds every source sorts by time: sorting by value sorts by ms.
    ordered = sorted(value for _, value in made)
    assert [v.int >> 80 for v in ordered] == sorted(v.int >> 80 for _, v in made)
    ours = [value for source, value in made if source == 0]
    assert ours == sorted(ours)


def test_bounds_select_one_millisecond_on_every_backend(
    engine: Engine, metadata: sa.MetaData
) -> None:
    table = sa.Table(
        "u7_bounds",
        metadata,
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("ms", sa.BigInteger, nullable=False),
    )
    metadata.create_all(engine)
    gen = UUIDv7Generator(clock=TickingClock(start=MS, every=7))
    values = [gen() for _ in range(60)]
    # The extremes of the millisecond in the middle are stored too.
    middle = values[30].int >> 80
    values += [uuid7_min_at(middle), uuid7_max_at(middle)]
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": v, "ms": v.int >> 80} for v in values])
        inside = conn.scalars(
            sa.select(table.c.id)
            .where(table.c.id >= uuid7_min_at(middle), table.c.id <= uuid7_max_at(middle))
            .order_by(table.c.id)
        ).all()
        stored_order = conn.scalars(sa.select(table.c.id).order_by(table.c.id)).all()
    assert inside == sorted(v for v in values if v.int >> 80 == middle)
    assert len(inside) >= 3
    assert stored_order == sorted(values)  # database order = value order
