"""Monotonic ULID generation: thread-safe, fork-safe, clock-regression-proof."""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Final

from ._time import MAX_TIMESTAMP_MS
from ._ulid import ULID, _new, _set_bytes

__all__ = ["MonotonicGenerator", "new_ulid"]

_RANDOM_BITS: Final = 80
_RANDOM_MASK: Final = (1 << _RANDOM_BITS) - 1

# Every generator ever made, so that one fork hook can reseed them all. Weak, so
# a generator that goes out of scope is not kept alive by this registry.
_instances: weakref.WeakSet[MonotonicGenerator] = weakref.WeakSet()
_fork_hook_registered = False
_registry_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _registry_lock
    # Another thread may have held it (making a generator) at the fork.
    _registry_lock = threading.Lock()
    for generator in list(_instances):
        generator._reseed_after_fork()


class MonotonicGenerator:
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
    * **Thread-safe**, by one lock per generator.
    * **Fork-safe.** A child process started by :func:`os.fork` (or
      ``multiprocessing``'s fork start method) draws new randomness before its
      first ULID, so it never repeats its parent's sequence, even within the
      parent's millisecond.

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

    __slots__ = (
        "__weakref__",
        "_acquire",
        "_clock_divisor",
        "_last_ms",
        "_next_tick",
        "_random_bytes",
        "_read_clock",
        "_release",
        "_value",
    )

    def __init__(
        self,
        clock: Callable[[], int] | None = None,
        random_bytes: Callable[[int], bytes] | None = None,
    ) -> None:
        global _fork_hook_registered
        # The system clock is read in nanoseconds and divided, which saves a
        # Python call per ULID over a millisecond wrapper.
        self._read_clock: Callable[[], int] = clock if clock is not None else time.time_ns
        self._clock_divisor = 1 if clock is not None else 1_000_000
        self._random_bytes = random_bytes if random_bytes is not None else os.urandom
        self._set_lock()
        self._last_ms = -1
        # The first clock reading (in the clock's own units) that falls in a
        # later millisecond than _last_ms: comparing raw readings against it
        # keeps a division off the hot path.
        self._next_tick = 0
        self._value = 0
        with _registry_lock:
            _instances.add(self)
            # Registered on first use, not at import; hooks can't be removed,
            # so one hook serves every generator through the registry.
            if not _fork_hook_registered and hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=_after_fork_in_child)
                _fork_hook_registered = True

    def __call__(self) -> ULID:
        """Return the next ULID."""
        # acquire/release in try/finally costs a third of ``with lock`` on
        # CPython 3.11, and this is the hot path of every insert.
        self._acquire()
        try:
            now = self._read_clock()
            if now >= self._next_tick:  # a later millisecond than the last
                value = self._fresh(now // self._clock_divisor)
            else:
                # Same millisecond, or the clock stepped back: count on from
                # the last value so order holds.
                value = self._value + 1
                if not value & _RANDOM_MASK:  # the 80-bit part overflowed
                    value = self._fresh(self._next_ms(now // self._clock_divisor))
            self._value = value
        finally:
            self._release()
        ulid: ULID = _new(ULID)
        _set_bytes(ulid, value.to_bytes(16, "big"))
        return ulid

    def _fresh(self, ms: int) -> int:
        """Start millisecond ``ms`` with fresh randomness."""
        if ms > MAX_TIMESTAMP_MS:
            raise OverflowError("the clock is past 2**48 ms (year 10889): ULIDs end there")
        self._last_ms = ms
        self._next_tick = (ms + 1) * self._clock_divisor
        return (ms << _RANDOM_BITS) | int.from_bytes(self._random_bytes(10), "big")

    def _next_ms(self, now: int) -> int:
        """Return a millisecond later than the last one, for an overflow."""
        if now < self._last_ms:
            # The clock stepped back: waiting for it could take as long as the
            # step. Move on by one millisecond of our own instead.
            return self._last_ms + 1
        while now <= self._last_ms:
            time.sleep(0.0001)
            now = self._read_clock() // self._clock_divisor
        return now

    def _set_lock(self) -> None:
        lock = threading.Lock()
        self._acquire = lock.acquire
        self._release = lock.release

    def _reseed_after_fork(self) -> None:
        # The parent may have held the lock while forking; the child's copy
        # would then be locked forever.
        self._set_lock()
        if self._last_ms >= 0:
            # Keep the timestamp (so order against the clock still holds) but
            # leave the parent's sequence for a random point of our own.
            self._value = (self._last_ms << _RANDOM_BITS) | int.from_bytes(
                self._random_bytes(10), "big"
            )

    def __repr__(self) -> str:
        return f"<MonotonicGenerator last_ms={self._last_ms}>"


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
