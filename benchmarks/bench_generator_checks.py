"""What the generator's input and fork checks cost on the once-per-millisecond path.

Run: ``.venv/bin/python benchmarks/bench_generator_checks.py [--rounds 60]``

The checks (a process-id comparison for forks that skip Python's at-fork
hooks, the clock reading's range, the length of ``random_bytes(10)``) run
only when a millisecond starts. This script makes every call start one (the
clock advances by a millisecond per reading), so each call pays them, and
compares in the same run with a copy of that path without the checks (the
code before they were added). It also times the usual case, many ids per
millisecond, where the checks run once per millisecond. Figures are minimums
over interleaved rounds.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import timeit

from sqlalchemy_ulid import MonotonicGenerator, new_ulid
from sqlalchemy_ulid._generator import _RANDOM_BITS
from sqlalchemy_ulid._time import MAX_TIMESTAMP_MS
from sqlalchemy_ulid._ulid import ULID, _from_int


class _Unchecked(MonotonicGenerator):
    """The locked path as it was before the checks (for comparison only)."""

    __slots__ = ()

    def _locked(self, now: int) -> ULID:
        with self._lock:
            if now < self._next_tick:
                _, base, counter, limit = self._run
                value = base + next(counter)
                if value <= limit:
                    return _from_int(value)
                value = self._start(self._later_ms(now // self._clock_divisor))
            else:
                value = self._start(now // self._clock_divisor)
        return _from_int(value)

    def _start(self, ms: int) -> int:
        if ms > MAX_TIMESTAMP_MS:
            raise OverflowError("past 2**48 ms")
        value = (ms << _RANDOM_BITS) | int.from_bytes(self._random_bytes(10), "big")
        self._last_ms = ms
        self._next_tick = ms + 1
        self._set_run(value)
        return value


def _advancing() -> MonotonicGenerator:
    return MonotonicGenerator(clock=itertools.count(1_712_345_678_901).__next__)


def _advancing_unchecked() -> MonotonicGenerator:
    return _Unchecked(clock=itertools.count(1_712_345_678_901).__next__)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--number", type=int, default=20_000)
    args = parser.parse_args()
    contestants = {
        "new millisecond every call, with checks": _advancing(),
        "new millisecond every call, without checks": _advancing_unchecked(),
        "new_ulid() (many ids per millisecond)": new_ulid,
        "os.getpid() alone": os.getpid,
    }
    times: dict[str, list[float]] = {name: [] for name in contestants}
    names = list(contestants)
    for round_number in range(args.rounds):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            timer = timeit.Timer(contestants[name])
            times[name].append(timer.timeit(args.number) / args.number * 1e9)
    print(
        f"Python {platform.python_version()} ({platform.python_implementation()}), "
        f"{os.cpu_count()} CPUs; {args.rounds} rounds of {args.number:,} calls\n"
    )
    print("| case | ns/call (min) | ns/call (median) |")
    print("|---|---:|---:|")
    for name in names:
        print(f"| {name} | {min(times[name]):,.0f} | {statistics.median(times[name]):,.0f} |")
    checked = min(times[names[0]])
    unchecked = min(times[names[1]])
    print(
        f"\nChecks on the millisecond-start path: {checked - unchecked:+,.0f} ns per "
        f"millisecond started ({checked / unchecked:.2f}x that path)."
    )


if __name__ == "__main__":
    main()
