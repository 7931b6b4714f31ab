"""UUIDv7 values: a monotonic, thread- and fork-safe generator, and bounds.

The layout is RFC 9562's: a 48-bit Unix millisecond, the version (7), 12
bits ``rand_a``, the variant (``10``) and 62 bits ``rand_b``. Order within a
millisecond follows RFC 9562's *method 1*, a fixed-length dedicated counter:

===========  ====  =====================================================
bits         size  holds
===========  ====  =====================================================
0 .. 47      48    Unix milliseconds
48 .. 51     4     version ``0111``
52 .. 63     12    counter, high part (``rand_a``)
64 .. 65     2     variant ``10``
66 .. 95     30    counter, low part (top of ``rand_b``)
96 .. 127    32    random (rest of ``rand_b``)
===========  ====  =====================================================

Why method 1 and not method 3: method 3 puts sub-millisecond clock digits
in ``rand_a``, and two calls inside one 244 ns step would still need a
counter; method 1 needs only the millisecond clock and gives each
millisecond 2**41 or more ids. CPython 3.14's ``uuid.uuid7()`` has the same
layout (a 42-bit counter in the same bits), so values of both order the same
way. The counter is seeded with 41 random bits at each new millisecond (its
top bit starts at zero, so it cannot run out early) and the 32 low bits are
drawn with it, once per millisecond: CPython 3.14 draws them afresh for
every value, which costs a system call per id. Within a millisecond each id
is the previous one plus one in its counter, as a ULID is the previous one
plus one. Where CPython 3.14 moves the timestamp on by one millisecond when
its counter runs out, this generator waits for the clock (see
:class:`UUIDv7Generator`).

This module is part of the values layer: it needs no SQLAlchemy.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Final

from ._generator import _Monotonic
from ._time import to_ms

__all__ = ["UUIDv7Generator", "new_uuid7", "uuid7_max_at", "uuid7_min_at"]

_VERSION: Final = 0x7 << 76
_VARIANT: Final = 0b10 << 62
_FLAGS: Final = _VERSION | _VARIANT
_LOW_BITS: Final = 30  # the counter's part in rand_b
_LOW_SHIFT: Final = 32  # the random bits below it
_LOW_MASK: Final = ((1 << _LOW_BITS) - 1) << _LOW_SHIFT
_HIGH_ONE: Final = 1 << 64  # one in the counter's part in rand_a
_HIGH_MASK: Final = 0xFFF << 64
_RANDOM_MASK: Final = (1 << _LOW_SHIFT) - 1
#: every bit of a millisecond's UUIDv7 but the timestamp, version and variant
_ALL_RANDOM: Final = _HIGH_MASK | ((1 << 62) - 1)


def _layout(ms: int, counter: int, random: int) -> int:
    """The UUIDv7 integer of a millisecond, a 42-bit counter and 32 random bits.

    Example:
        >>> # RFC 9562, appendix A.6: 017F22E2-79B0-7CC3-98C4-DC0C0C07398F
        >>> str(uuid.UUID(int=_layout(0x017F22E279B0, 0xCC3 << 30 | 0x18C4DC0C, 0x0C07398F)))
        '017f22e2-79b0-7cc3-98c4-dc0c0c07398f'
    """
    return (
        (ms << 80)
        | _FLAGS
        | ((counter >> _LOW_BITS) << 64)
        | ((counter & ((1 << _LOW_BITS) - 1)) << _LOW_SHIFT)
        | random
    )


# uuid.UUID(int=...) checks its argument and goes through keyword parsing;
# the generator's values are valid by construction, so it fills the two slots
# of a new instance directly (what CPython 3.14's own uuid7() does).
_new = object.__new__
_set_int: Callable[[uuid.UUID, int], None] = uuid.UUID.int.__set__  # type: ignore[attr-defined,misc]
_set_safe: Callable[[uuid.UUID, uuid.SafeUUID], None] = uuid.UUID.is_safe.__set__  # type: ignore[attr-defined,misc]
_UNKNOWN: Final = uuid.SafeUUID.unknown


def _uuid_of(value: int) -> uuid.UUID:
    made: uuid.UUID = _new(uuid.UUID)
    _set_int(made, value)
    _set_safe(made, _UNKNOWN)
    return made


class UUIDv7Generator(_Monotonic):
    """A callable that returns strictly increasing RFC 9562 UUIDv7s.

    It shares :class:`MonotonicGenerator`'s machinery, so it gives the same
    guarantees, for each instance:

    * **Monotonic.** Within one millisecond each UUID is the previous one
      plus one in its 42-bit counter (RFC 9562 method 1: the counter sits
      right after the timestamp, in ``rand_a`` and the top of ``rand_b``).
    * **Clock regression.** When the clock steps back the generator keeps
      its last timestamp and keeps counting.
    * **No wrap, no raise.** The counter starts each millisecond at a random
      value below 2**41, so at least 2**41 ids fit in a millisecond; if it
      ever ran out, the generator waits for the clock's next millisecond
      (or, when the clock is behind, moves on by one millisecond).
    * **Thread-safe** (no lock on the common path) and **fork-safe**: a
      child process moves on to the next millisecond with fresh randomness
      before its first id, so it never repeats its parent's values. Forks
      that skip Python's hooks are caught as :class:`MonotonicGenerator`
      catches them (see there).
    * **Checked input.** A clock reading before 1970 raises
      :class:`ValueError`, and so does a ``random_bytes(10)`` that does not
      return exactly 10 bytes; a reading that is not an ``int`` (a float, a
      bool) raises :class:`TypeError`.

    Every value has version 7 and the RFC 9562 variant, and sorts with the
    UUIDv7s of other generators (CPython 3.14's ``uuid.uuid7()``,
    uuid-utils, PostgreSQL 18's ``uuidv7()``) by millisecond first.

    Args:
        clock: returns the time in Unix milliseconds; defaults to the system
            clock (:func:`time.time_ns`).
        random_bytes: returns ``n`` bytes from a cryptographically secure
            source; defaults to :func:`os.urandom`.

    Example:
        >>> from sqlalchemy_ulid import UUIDv7Generator
        >>> ticks = iter([1000, 1000, 999])  # the clock steps back
        >>> gen = UUIDv7Generator(clock=lambda: next(ticks), random_bytes=bytes)
        >>> [str(gen()) for _ in range(3)]  # doctest: +NORMALIZE_WHITESPACE
        ['00000000-03e8-7000-8000-000000000000', '00000000-03e8-7000-8000-000100000000',
         '00000000-03e8-7000-8000-000200000000']
    """

    __slots__ = ()

    _STEP = 1 << _LOW_SHIFT
    _MADE = "UUIDv7s"

    def __call__(self) -> uuid.UUID:
        """Return the next UUIDv7."""
        # The same lock-free path as MonotonicGenerator.__call__.
        tick, base, counter, limit = self._run
        now = self._read_clock()
        if now < tick:
            value = base + next(counter)
            if value <= limit:
                made: uuid.UUID = _new(uuid.UUID)
                _set_int(made, value)
                _set_safe(made, _UNKNOWN)
                return made
        return _uuid_of(self._locked_value(now))

    def _seed(self, ms: int, random: int) -> int:
        # 41 random bits for the counter (its top bit zero), 32 for the tail.
        return _layout(ms, random >> 39, random & _RANDOM_MASK)

    def _limit(self, value: int) -> int:
        # A run ends where the counter's low part (in rand_b) is all ones:
        # one more would carry into the variant bits.
        return value | _LOW_MASK

    def _overflow(self, now: int) -> int:
        # Carry into the counter's high part (in rand_a), in the same
        # millisecond; only when that is full too, wait for the next one.
        _, _, _, limit = self._run
        if limit & _HIGH_MASK != _HIGH_MASK:
            value: int = (limit & ~_LOW_MASK) + _HIGH_ONE
            self._set_run(value)
            return value
        return super()._overflow(now)


_default = UUIDv7Generator()
_default_call = _default.__call__


def new_uuid7() -> uuid.UUID:
    """Return a new UUIDv7 from the process-wide monotonic generator.

    A :class:`uuid.UUID` of version 7, usable as a column default:
    ``mapped_column(sa.Uuid, primary_key=True, default=new_uuid7)``.

    Example:
        >>> from sqlalchemy_ulid import new_uuid7
        >>> a, b = new_uuid7(), new_uuid7()
        >>> a < b, a.version, a.variant
        (True, 7, 'specified in RFC 4122')
    """
    return _default_call()


def uuid7_min_at(when: datetime | int) -> uuid.UUID:
    """Return the smallest UUIDv7 of a millisecond: version and variant set, all else zero.

    ``column >= uuid7_min_at(t)`` selects the UUIDv7 rows created at or
    after ``t``; the UUIDv7 counterpart of :meth:`ULID.min_at`.

    Args:
        when: a timezone-aware datetime, or Unix milliseconds. A naive
            datetime raises :class:`ValueError`.

    Example:
        >>> from datetime import datetime, timezone
        >>> from sqlalchemy_ulid import uuid7_min_at
        >>> uuid7_min_at(datetime(2024, 4, 5, 19, 34, 38, 901000, tzinfo=timezone.utc))
        UUID('018eafc1-8435-7000-8000-000000000000')
    """
    return _uuid_of((to_ms(when) << 80) | _FLAGS)


def uuid7_max_at(when: datetime | int) -> uuid.UUID:
    """Return the largest UUIDv7 of a millisecond: every random and counter bit set.

    ``column <= uuid7_max_at(t)`` selects the UUIDv7 rows created up to the
    end of ``t``'s millisecond.

    Args:
        when: a timezone-aware datetime, or Unix milliseconds. A naive
            datetime raises :class:`ValueError`.

    Example:
        >>> from sqlalchemy_ulid import uuid7_max_at
        >>> uuid7_max_at(1712345678901)
        UUID('018eafc1-8435-7fff-bfff-ffffffffffff')
    """
    return _uuid_of((to_ms(when) << 80) | _FLAGS | _ALL_RANDOM)
