"""MonotonicGenerator and new_ulid: order, clock regression, overflow, threads, fork."""

from __future__ import annotations

import ctypes
import inspect
import multiprocessing
import os
import select
import signal
import threading
from collections.abc import Callable, Iterator
from itertools import pairwise

import pytest
import sqlalchemy as sa

from _threads import at_once
from sqlalchemy_ulid import ULID, MonotonicGenerator, ULIDType, new_ulid

MS = 1_712_345_678_901
MAX_RANDOM = (1 << 80) - 1


class FakeClock:
    """A clock in milliseconds that moves only when told to."""

    def __init__(self, now: int = MS) -> None:
        self.now = now
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.now


class TickingClock:
    """A clock that moves on by one millisecond every ``every`` reads."""

    def __init__(self, start: int = MS, every: int = 3) -> None:
        self.start = start
        self.every = every
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.start + self.reads // self.every


class ScriptedRandom:
    """Returns the given byte strings in turn, recording each request."""

    def __init__(self, *values: bytes) -> None:
        self.values: Iterator[bytes] = iter(values)
        self.requests: list[int] = []

    def __call__(self, n: int) -> bytes:
        self.requests.append(n)
        return next(self.values)


def ints(values: list[ULID]) -> list[int]:
    return [u.int for u in values]


# -- within a millisecond ------------------------------------------------------------


def test_returns_ulids() -> None:
    gen = MonotonicGenerator()
    u = gen()
    assert isinstance(u, ULID)
    assert ULID(str(u)) == u


def test_first_value_uses_randomness_as_drawn() -> None:
    drawn = bytes([12, 240, 88, 3, 199, 45, 6, 231, 128, 17])
    random = ScriptedRandom(drawn)
    gen = MonotonicGenerator(clock=FakeClock(), random_bytes=random)
    assert gen() == ULID("01HTQW311N1KR5G0Y75M3EF00H")
    assert random.requests == [10]


def test_same_millisecond_adds_exactly_one() -> None:
    random = ScriptedRandom(bytes(range(10)))
    gen = MonotonicGenerator(clock=FakeClock(), random_bytes=random)
    values = [gen() for _ in range(1000)]
    first = values[0].int
    assert ints(values) == list(range(first, first + 1000))
    assert {u.timestamp_ms for u in values} == {MS}
    assert random.requests == [10]  # drawn once for the millisecond


def test_fresh_randomness_each_new_millisecond_used_as_drawn() -> None:
    clock = FakeClock()
    draws = [os.urandom(10) for _ in range(5)]
    random = ScriptedRandom(*draws)
    gen = MonotonicGenerator(clock=clock, random_bytes=random)
    for step, drawn in enumerate(draws):
        clock.now = MS + 7 * step
        assert gen() == ULID.from_parts(MS + 7 * step, drawn)
        assert gen() == ULID.from_parts(MS + 7 * step, int.from_bytes(drawn, "big") + 1)
    assert random.requests == [10] * 5


def test_real_clock_values_strictly_increase() -> None:
    gen = MonotonicGenerator()
    values = [gen() for _ in range(20_000)]
    assert all(a < b for a, b in pairwise(values))
    assert len({u.timestamp_ms for u in values}) < len(values)  # many share a millisecond


# -- clock regression ----------------------------------------------------------------


def test_clock_stepping_back_keeps_the_last_timestamp() -> None:
    clock = FakeClock()
    gen = MonotonicGenerator(clock=clock, random_bytes=lambda n: bytes(n))
    before = [gen() for _ in range(3)]
    clock.now = MS - 5_000  # NTP steps the clock back five seconds
    during = [gen() for _ in range(3)]
    values = before + during
    assert ints(values) == list(range(MS << 80, (MS << 80) + 6))
    assert {u.timestamp_ms for u in during} == {MS}
    clock.now = MS - 1  # still behind
    assert gen().timestamp_ms == MS
    clock.now = MS + 1  # caught up: a fresh millisecond, fresh randomness
    assert gen() == ULID.from_parts(MS + 1, bytes(10))


def test_clock_regression_with_real_randomness() -> None:
    clock = FakeClock()
    gen = MonotonicGenerator(clock=clock)
    values = [gen()]
    for now in (MS - 1, MS - 1000, MS - 1, MS, MS - 3):
        clock.now = now
        values += [gen(), gen()]
    assert all(b.int == a.int + 1 for a, b in pairwise(values))


# -- overflow of the random part -------------------------------------------------------


def test_overflow_waits_for_the_next_millisecond() -> None:
    clock = TickingClock(every=4)
    random = ScriptedRandom(*([b"\xff" * 10] * 3))
    gen = MonotonicGenerator(clock=clock, random_bytes=random)
    values = [gen(), gen(), gen()]
    assert [u.randomness for u in values] == [b"\xff" * 10] * 3  # never wrapped to zero
    stamps = [u.timestamp_ms for u in values]
    assert stamps[0] == MS
    assert stamps[0] < stamps[1] < stamps[2]
    assert all(a < b for a, b in pairwise(values))
    assert clock.reads > 3  # it read the clock again while waiting


def test_overflow_after_counting_up() -> None:
    clock = FakeClock()
    random = ScriptedRandom((MAX_RANDOM - 2).to_bytes(10, "big"), bytes(10))
    gen = MonotonicGenerator(clock=clock, random_bytes=random)
    values = [gen(), gen(), gen()]
    assert [u.randomness for u in values][-1] == b"\xff" * 10
    # The clock will move on while the generator waits for it.
    timer = threading.Timer(0.05, lambda: setattr(clock, "now", MS + 1))
    timer.start()
    try:
        after = gen()
    finally:
        timer.cancel()
    assert after == ULID.from_parts(MS + 1, bytes(10))
    assert values[-1] < after


def test_overflow_with_the_clock_stuck_behind_moves_on_by_itself() -> None:
    clock = FakeClock()
    gen = MonotonicGenerator(clock=clock, random_bytes=lambda n: b"\xff" * n)
    first = gen()
    clock.now = MS - 60_000  # a minute behind, and it never catches up
    values = [first] + [gen() for _ in range(5)]
    assert [u.timestamp_ms for u in values] == [MS + i for i in range(6)]
    assert all(u.randomness == b"\xff" * 10 for u in values)
    assert all(a < b for a, b in pairwise(values))


def test_clock_past_48_bits_is_an_error_not_a_wrap() -> None:
    gen = MonotonicGenerator(clock=lambda: 1 << 48)
    with pytest.raises(OverflowError, match="2\\*\\*48"):
        gen()


# -- threads ---------------------------------------------------------------------------


class _LockedOnly(MonotonicGenerator):
    """What free-threaded CPython gets: every call takes the lock."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__()
        self._lock_free = False

    def __call__(self) -> ULID:
        ulid = super().__call__()
        assert self._run[0] == 0  # the lock-free path can never match
        return ulid


@pytest.mark.parametrize(
    "generate",
    [MonotonicGenerator(), new_ulid, _LockedOnly()],
    ids=["instance", "default", "locked-only"],
)
def test_many_threads_never_collide(generate: Callable[[], ULID]) -> None:
    threads_count, per_thread = 8, 20_000

    def work(n: int) -> list[ULID]:
        out: list[ULID] = []
        append = out.append
        for _ in range(per_thread):
            append(generate())
        return out

    # switch threads as often as possible
    results = at_once(threads_count, work, switch=1e-6, timeout=600)
    everything = [u for out in results for u in out]
    assert len(everything) == threads_count * per_thread
    assert len(set(everything)) == len(everything)
    for out in results:
        assert all(a < b for a, b in pairwise(out))


# -- fork ------------------------------------------------------------------------------

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _read_all(fd: int, timeout: float = 20.0) -> bytes:
    chunks = []
    while True:
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            raise TimeoutError("the child process sent nothing in time")
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _in_child(produce: Callable[[], bytes]) -> bytes:
    """Fork; the child runs ``produce`` and sends its bytes back. Return them."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        status = 0
        try:
            os.close(read_end)
            data = produce()
            view = memoryview(data)
            while view:
                view = view[os.write(write_end, view) :]
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    os.close(write_end)
    try:
        data = _read_all(read_end)
    except TimeoutError:
        os.kill(pid, signal.SIGKILL)
        raise
    finally:
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return data


def _split(data: bytes) -> list[ULID]:
    return [ULID.from_bytes(data[i : i + 16]) for i in range(0, len(data), 16)]


@needs_fork
def test_fork_child_does_not_repeat_parent_in_the_same_millisecond() -> None:
    gen = MonotonicGenerator(clock=lambda: MS)  # parent and child share one millisecond
    parent_before = [gen() for _ in range(10)]
    child = _split(_in_child(lambda: b"".join(gen().bytes for _ in range(2000))))
    parent_after = [gen() for _ in range(2000)]
    assert len(child) == 2000
    assert parent_after[0].int == parent_before[-1].int + 1  # the parent just carries on
    assert not set(child) & set(parent_after)
    assert not set(child) & set(parent_before)
    # The child moved on to the next millisecond: it sorts after everything
    # made before the fork, and cannot meet the parent's sequence there.
    assert {u.timestamp_ms for u in child} == {MS + 1}
    assert min(child) > max(parent_before)
    assert all(b.int == a.int + 1 for a, b in pairwise(child))


@needs_fork
def test_fork_default_generator() -> None:
    new_ulid()
    child = _split(_in_child(lambda: b"".join(new_ulid().bytes for _ in range(1000))))
    parent = [new_ulid() for _ in range(1000)]
    assert len(child) == 1000
    assert not set(child) & set(parent)


@needs_fork
def test_two_children_of_one_parent_differ() -> None:
    gen = MonotonicGenerator(clock=lambda: MS)
    gen()
    first = _split(_in_child(lambda: b"".join(gen().bytes for _ in range(500))))
    second = _split(_in_child(lambda: b"".join(gen().bytes for _ in range(500))))
    assert not set(first) & set(second)


@needs_fork
def test_child_lock_works_even_if_a_parent_thread_held_it() -> None:
    parent = os.getpid()
    inside = threading.Event()
    leave = threading.Event()

    def clock() -> int:
        # Called with the generator's lock held: park a parent thread here.
        if os.getpid() == parent and not leave.is_set():
            inside.set()
            leave.wait(30)
        return MS

    gen = MonotonicGenerator(clock=clock)
    holder = threading.Thread(target=gen)
    holder.start()
    assert inside.wait(10)
    try:
        data = _in_child(lambda: b"".join(gen().bytes for _ in range(3)))
    finally:
        leave.set()
        holder.join()
    assert len(_split(data)) == 3
    assert gen().timestamp_ms == MS  # the parent's lock was released normally


_SHARED = MonotonicGenerator(clock=lambda: MS)


def _values_from_shared(count: int) -> list[bytes]:
    return [_SHARED().bytes for _ in range(count)]


@needs_fork
def test_multiprocessing_fork_start_method() -> None:
    _SHARED()  # the parent has a sequence under way before the workers fork
    context = multiprocessing.get_context("fork")
    with context.Pool(2) as pool:
        batches = pool.map(_values_from_shared, [500, 500, 500, 500])
    parent = _values_from_shared(2000)
    children = [b for batch in batches for b in batch]
    assert len(set(children)) == len(children) == 2000
    assert not set(children) & set(parent)


# -- as a column default ----------------------------------------------------------------


def test_new_ulid_is_a_zero_argument_default() -> None:
    assert not inspect.signature(new_ulid).parameters
    default = sa.ColumnDefault(new_ulid)
    assert default.is_callable
    made = default.arg(None)  # SQLAlchemy wraps zero-argument callables like this
    assert isinstance(made, ULID)
    assert new_ulid() > made


def test_new_ulid_increases() -> None:
    values = [new_ulid() for _ in range(5000)]
    assert all(a < b for a, b in pairwise(values))


@needs_fork
def test_child_can_make_generators_even_if_the_parent_was_making_one() -> None:
    from sqlalchemy_ulid import _generator

    # Stand-in for another thread inside MonotonicGenerator() at the moment of fork.
    with _generator._registry_lock:
        data = _in_child(lambda: MonotonicGenerator(clock=lambda: MS)().bytes)
    assert _split(data)[0].timestamp_ms == MS


# -- input checks (issue 10, item 11) ---------------------------------------------------


@pytest.mark.parametrize(
    ("size", "why"),
    [
        (16, "extra bits would land in the timestamp"),
        (11, "one byte too many"),
        (9, "would be zero-padded"),
        (0, "nothing at all"),
    ],
)
def test_random_bytes_of_the_wrong_length_are_refused(size: int, why: str) -> None:
    gen = MonotonicGenerator(clock=lambda: 100, random_bytes=lambda n: b"\xff" * size)
    with pytest.raises(ValueError, match=f"returned {size} bytes, not 10"):
        gen()


@pytest.mark.parametrize("reading", [-1, -2, -(10**12)])
def test_clock_before_1970_is_refused_not_hung(reading: int) -> None:
    gen = MonotonicGenerator(clock=lambda: reading)
    done: list[BaseException] = []

    def call() -> None:
        try:
            gen()
        except BaseException as exc:
            done.append(exc)

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), "the generator hung on a negative clock reading"
    assert len(done) == 1
    assert isinstance(done[0], ValueError)
    assert "before 1970" in str(done[0])


def test_checks_cost_nothing_per_call() -> None:
    # The checks live in _start, which runs once per millisecond: a run of
    # calls in one millisecond draws randomness (and checks it) once.
    draws: list[int] = []

    def random_bytes(n: int) -> bytes:
        draws.append(n)
        return bytes(n)

    gen = MonotonicGenerator(clock=lambda: 5, random_bytes=random_bytes)
    for _ in range(1000):
        gen()
    assert draws == [10]


# -- forks that skip Python's at-fork hooks (issue 10, item 10) ---------------------------


def _in_c_child(produce: Callable[[], bytes]) -> bytes:
    """Like _in_child, but fork with libc's fork(): no Python at-fork hooks run.

    A libc fork copies whatever lock another thread of this process holds at
    that instant, the C library's own included; under pytest-xdist the worker's
    I/O threads run outside the GIL, and a child can block on such a lock
    before it reaches our code. A fork that timed out is tried again, at most
    three times in all. That keeps every failure of ours: a lock of the
    generator left held by the parent is held for the whole test, so each
    attempt would block the same way.
    """
    for attempt in range(3):
        try:
            return _in_c_child_once(produce)
        except TimeoutError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _in_c_child_once(produce: Callable[[], bytes]) -> bytes:
    libc = ctypes.PyDLL(None)  # PyDLL: the GIL stays held across the call
    read_end, write_end = os.pipe()
    pid = libc.fork()
    if pid == 0:  # the child
        status = 0
        try:
            os.close(read_end)
            data = produce()
            view = memoryview(data)
            while view:
                view = view[os.write(write_end, view) :]
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    assert pid > 0
    os.close(write_end)
    try:
        data = _read_all(read_end)
    except TimeoutError:
        os.kill(pid, signal.SIGKILL)
        raise
    finally:
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return data


class _LockedOnlyClock(MonotonicGenerator):
    """Every call through the locked path, on a fixed millisecond."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(clock=lambda: MS)
        self._lock_free = False


@needs_fork
def test_unhooked_fork_children_do_not_repeat_each_other() -> None:
    gen = _LockedOnlyClock()
    before = [gen() for _ in range(10)]
    first = _split(_in_c_child(lambda: b"".join(gen().bytes for _ in range(500))))
    second = _split(_in_c_child(lambda: b"".join(gen().bytes for _ in range(500))))
    assert len(first) == len(second) == 500
    assert not set(first) & set(second)
    assert min(first) > max(before)
    assert {u.timestamp_ms for u in first} == {MS + 1}


@needs_fork
def test_unhooked_fork_child_in_a_new_millisecond_is_fresh() -> None:
    ticks = {"now": MS}
    gen = MonotonicGenerator(clock=lambda: ticks["now"])
    parent = [gen() for _ in range(10)]

    def child() -> bytes:
        ticks["now"] = MS + 5  # the child's first id starts a millisecond
        return b"".join(gen().bytes for _ in range(100))

    first = _split(_in_c_child(child))
    second = _split(_in_c_child(child))
    assert not set(first) & set(second)
    assert not set(first) & set(parent)


@needs_fork
def test_unhooked_fork_child_survives_a_lock_held_by_a_parent_thread() -> None:
    gen = _LockedOnlyClock()
    gen()
    gen._lock.acquire()  # as if a parent thread were inside at the fork
    try:
        child = _split(_in_c_child(lambda: b"".join(gen().bytes for _ in range(10))))
    finally:
        gen._lock.release()
    assert len(child) == 10


@needs_fork
def test_unhooked_fork_children_ids_share_one_primary_key(engine: sa.Engine) -> None:
    # What the duplicates would break: two workers inserting into one table.
    gen = _LockedOnlyClock()
    gen()
    ids = [
        *_split(_in_c_child(lambda: b"".join(gen().bytes for _ in range(200)))),
        *_split(_in_c_child(lambda: b"".join(gen().bytes for _ in range(200)))),
    ]
    metadata = sa.MetaData()
    table = sa.Table("gen_forked", metadata, sa.Column("id", ULIDType(), primary_key=True))
    metadata.create_all(engine)
    try:
        with engine.begin() as conn:
            conn.execute(table.insert(), [{"id": u} for u in ids])
            assert conn.scalar(sa.select(sa.func.count()).select_from(table)) == 400
    finally:
        metadata.drop_all(engine)
