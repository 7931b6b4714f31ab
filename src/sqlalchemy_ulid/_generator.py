"""Monotonic ULID generation: thread-safe, fork-safe, clock-regression-proof.

The machinery (the lock-free run of one millisecond, the clock-regression and
overflow rules, the fork hooks, the checks of an injected clock and random
source) lives in :class:`_Monotonic`; :class:`MonotonicGenerator` lays its
numbers out as ULIDs, and ``_uuid7.UUIDv7Generator`` as RFC 9562 UUIDv7s.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Final

from ._time import MAX_TIMESTAMP_MS
from ._ulid import ULID, _from_int, _new, _set_int

__all__ = ["MonotonicGenerator", "new_ulid"]

_RANDOM_BITS: Final = 80
_RANDOM_MASK: Final = (1 << _RANDOM_BITS) - 1

# (hot tick, first value of the millisecond, counter, last value allowed)
_Run = tuple[int, int, Iterator[int], int]
# Free-threaded CPython (3.13t) has no GIL to make the counter's next() atomic.
_GIL: Final[bool] = getattr(sys, "_is_gil_enabled", lambda: True)()

# Every generator ever made, so that one fork hook can reseed them all. Weak, so
# a generator that goes out of scope is not kept alive by this registry.
_instances: weakref.WeakSet[_Monotonic] = weakref.WeakSet()
_fork_hook_registered = False
_registry_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _registry_lock
    # Another thread may have held it (making a generator) at the fork.
    _registry_lock = threading.Lock()
    for generator in list(_instances):
        generator._reseed_after_fork()


class _Monotonic:
    """The shared machinery of the monotonic generators (ULIDs and UUIDv7s).

    A subclass says how a millisecond's first number is laid out from 80
    random bits (:meth:`_seed`), the step between two numbers (``_STEP``),
    the last number of a run (:meth:`_limit`), what to do when a run is
    used up (:meth:`_overflow`), and how a number becomes a value (its own
    ``__call__``, the hot path, which stays in the subclass so that it makes
    its value with no extra call).
    """

    __slots__ = (
        "__weakref__",
        "_clock_divisor",
        "_last_ms",
        "_lock",
        "_lock_free",
        "_next_tick",
        "_pid",
        "_random_bytes",
        "_read_clock",
        "_run",
    )

    #: the difference between two numbers of one run
    _STEP: int = 1
    #: what the generator makes, in error messages
    _MADE: str = "ULIDs"

    def __init__(
        self,
        clock: Callable[[], int] | None = None,
        random_bytes: Callable[[int], bytes] | None = None,
    ) -> None:
        global _fork_hook_registered
        # The system clock is read in nanoseconds and compared raw against the
        # next millisecond's first reading: no division on the hot path.
        self._read_clock: Callable[[], int] = clock if clock is not None else time.time_ns
        self._clock_divisor = 1 if clock is not None else 1_000_000
        self._random_bytes = random_bytes if random_bytes is not None else os.urandom
        self._lock = threading.Lock()
        # Without a GIL, next() on a shared count is not known to be atomic:
        # then every call goes through the lock.
        self._lock_free = _GIL
        self._last_ms = -1
        self._next_tick = 0  # first clock reading past _last_ms
        self._run: _Run = (0, 0, itertools.count(self._STEP, self._STEP), 0)
        self._pid = os.getpid()
        with _registry_lock:
            _instances.add(self)
            # Registered on first use, not at import; hooks can't be removed,
            # so one hook serves every generator through the registry.
            if not _fork_hook_registered and hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=_after_fork_in_child)
                _fork_hook_registered = True

    # -- what a subclass lays out -------------------------------------------------

    def _seed(self, ms: int, random: int) -> int:
        """The first number of millisecond ``ms`` from 80 random bits."""
        return (ms << _RANDOM_BITS) | random

    def _limit(self, value: int) -> int:
        """The last number of the run that starts at ``value``."""
        return value | _RANDOM_MASK

    def _overflow(self, now: int) -> int:
        """The run is used up (under the lock): start the next one, return its first number."""
        return self._start(self._later_ms(now // self._clock_divisor))

    # -- the shared machinery -----------------------------------------------------

    def _locked_value(self, now: int) -> int:
        # A fork that skipped Python's at-fork hooks: checked here, once per
        # millisecond run, not per call: getpid() is a system call.
        if self._pid != os.getpid():
            self._after_unhooked_fork()
        if not isinstance(now, int) or isinstance(now, bool):
            # A float would fail deep in the bit layout, a bool would pass as 0 or 1.
            raise TypeError(
                f"the clock returned {type(now).__name__} {now!r}: it must return int "
                "milliseconds, e.g. time.time_ns() // 1_000_000"
            )
        # ``now`` may be older than another thread's start of a millisecond;
        # then it is below _next_tick and we count on, which keeps order.
        with self._lock:
            if now < self._next_tick and self._last_ms >= 0:
                # Another thread started this millisecond, or the clock
                # stepped back: count on from the last value so order holds.
                _, base, counter, limit = self._run
                value: int = base + next(counter)
                if value <= limit:
                    return value
                return self._overflow(now)
            return self._start(now // self._clock_divisor)

    def _start(self, ms: int) -> int:
        """Start millisecond ``ms`` with fresh randomness; return its first value.

        Everything the caller supplied is checked here, on the path taken once
        per millisecond, so the per-call path pays nothing for it.
        """
        if ms > MAX_TIMESTAMP_MS:
            raise OverflowError(f"the clock is past 2**48 ms (year 10889): {self._MADE} end there")
        if ms < 0:
            raise ValueError(f"the clock read {ms} ms, before 1970: {self._MADE} start at 0")
        randomness = self._random_bytes(10)
        if len(randomness) != 10:
            # More bytes would spill into the timestamp, fewer would be zeros.
            raise ValueError(f"random_bytes(10) returned {len(randomness)} bytes, not 10")
        value = self._seed(ms, int.from_bytes(randomness, "big"))
        self._last_ms = ms
        self._next_tick = (ms + 1) * self._clock_divisor
        self._set_run(value)
        return value

    def _set_run(self, value: int) -> None:
        # A hot tick of 0 sends every call through the lock.
        hot_tick = self._next_tick if self._lock_free else 0
        step = self._STEP
        self._run = (hot_tick, value, itertools.count(step, step), self._limit(value))

    def _later_ms(self, ms: int) -> int:
        """Return a millisecond later than the last one, after an overflow."""
        if ms < self._last_ms:
            # The clock stepped back: waiting for it could take as long as the
            # step. Move on by one millisecond of our own instead.
            return self._last_ms + 1
        while ms <= self._last_ms:
            time.sleep(0.0001)
            ms = self._read_clock() // self._clock_divisor
        return ms

    def _after_unhooked_fork(self) -> None:
        # A thread of the parent may have held the lock at the fork: in the
        # child nobody will release it. (Two threads of the child racing
        # through here for their first ids could both replace it; a child
        # rarely starts threads before its first id.)
        if self._lock.locked():
            self._lock = threading.Lock()
        with self._lock:
            if self._pid != os.getpid():
                self._leave_parent_sequence()

    def _reseed_after_fork(self) -> None:
        # The parent may have held the lock while forking; the child's copy
        # would then be locked forever.
        self._lock = threading.Lock()
        self._leave_parent_sequence()

    def _leave_parent_sequence(self) -> None:
        self._pid = os.getpid()
        if 0 <= self._last_ms < MAX_TIMESTAMP_MS:
            # Leave the parent's sequence for fresh randomness in the next
            # millisecond: the child never repeats the parent, and its values
            # still sort after every one made before the fork.
            self._start(self._last_ms + 1)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} last_ms={self._last_ms}>"


class MonotonicGenerator(_Monotonic):
    """A callable that returns strictly increasing ULIDs.

    Guarantees, for each instance:

    * **Monotonic.** Within one millisecond each ULID is the previous one plus
      one in its 80-bit random part, so ULIDs made by one generator sort in
      the order they were made.
    * **Clock regression.** When the clock steps back (NTP, VM migration,
      laptop resume) the generator keeps its last timestamp and keeps
      counting, so order still holds.
    * **No wrap, no raise.** If the random part would overflow inside a
      millisecond, the generator waits for the clock's next millisecond. If
      the clock is behind the last timestamp (it stepped back), waiting could
      take as long as the step, so it moves the timestamp on by one
      millisecond instead.
    * **Fresh randomness** from ``random_bytes`` at each new millisecond,
      used as drawn.
    * **Thread-safe.** The first ULID of each millisecond is made under a
      lock; the others draw the next number from an atomic counter, so
      threads never wait on each other in the common case. (On free-threaded
      CPython every call takes the lock.)
    * **Fork-safe.** A child process started by :func:`os.fork` (or
      ``multiprocessing``'s fork start method) moves on to the next
      millisecond with fresh randomness before its first ULID, so it never
      repeats its parent's sequence, even while the clock stays in the
      parent's millisecond, and still sorts after what was made before the
      fork.
    * **Forks that skip Python's hooks** (a C-level ``fork()``, as uWSGI
      does without ``--py-call-osafterfork``, and some pre-fork C servers)
      are caught by a process-id check on the path that starts each
      millisecond, not on every call. From then on the child behaves as
      above. Until then, the ids a child makes before the clock passes the
      millisecond of the parent's last id (the very millisecond of the fork,
      or longer if the clock stepped back) continue the parent's count and
      can repeat another child's. Run such servers with
      ``--py-call-osafterfork`` or ``--lazy-apps`` (uWSGI), or make no id in
      the parent before it forks.
    * **Checked input.** A clock reading before 1970 raises
      :class:`ValueError` (when a millisecond starts), and so does a
      ``random_bytes(10)`` that does not return exactly 10 bytes; a reading
      that is not an ``int`` (a float, a bool) raises :class:`TypeError`.

    Two traps remain, by design: with a clock that never advances (a frozen
    test clock), overflowing a millisecond's random part waits forever for
    the next millisecond; and a single far-future reading of the clock
    stamps every later id with that future time, since the generator never
    goes back.

    Args:
        clock: returns the time in Unix milliseconds; defaults to the system
            clock (:func:`time.time_ns`).
        random_bytes: returns ``n`` bytes from a cryptographically secure
            source; defaults to :func:`os.urandom`. Never pass a
            non-cryptographic PRNG such as :mod:`random`.

    Example:
        >>> from sqlalchemy_ulid import MonotonicGenerator
        >>> ticks = iter([1000, 1000, 999])  # the clock steps back
        >>> gen = MonotonicGenerator(clock=lambda: next(ticks), random_bytes=bytes)
        >>> [str(gen()) for _ in range(3)]
        ['00000000Z80000000000000000', '00000000Z80000000000000001', '00000000Z80000000000000002']
    """

    __slots__ = ()

    def __call__(self) -> ULID:
        """Return the next ULID."""
        # The hot path takes no lock. Everything it needs is one tuple, read
        # with one load, and the number comes from itertools.count, whose
        # next() is atomic: two threads can never draw the same number. Only
        # the first ULID of a millisecond (and an overflow) takes the lock.
        tick, base, counter, limit = self._run
        now = self._read_clock()
        if now < tick:
            value = base + next(counter)
            if value <= limit:
                ulid: ULID = _new(ULID)
                _set_int(ulid, value)
                return ulid
        return _from_int(self._locked_value(now))


_default = MonotonicGenerator()
# A bound method is called without the instance-call lookup that _default()
# would go through: one less step on the path of every insert.
_default_call = _default.__call__


def new_ulid() -> ULID:
    """Return a new ULID from the process-wide monotonic generator.

    Usable directly as a column default: ``mapped_column(ULIDType,
    primary_key=True, default=new_ulid)``.

    Example:
        >>> from sqlalchemy_ulid import new_ulid
        >>> a, b = new_ulid(), new_ulid()
        >>> a < b
        True
    """
    return _default_call()
