"""Generation, formatting and parsing: sqlalchemy-ulid against the alternatives.

Run: ``.venv/bin/python benchmarks/bench_generation.py`` (``make bench``).

Every contestant is timed with :mod:`timeit` in each round, and the rounds
interleave the contestants (in a rotating order), so a burst of noise on the
machine hits all of them rather than one. Each contestant's figure is the
minimum over the rounds (the least disturbed run); the median is shown too.
Ratios are the contestant's minimum divided by ours: above 1 means ours is
faster.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import timeit
import uuid
from dataclasses import dataclass, field

import ulid as python_ulid  # python-ulid
import ulid_transform
import uuid_utils

from sqlalchemy_ulid import ULID, new_ulid

TEXT = str(new_ulid())
OURS_MADE = new_ulid()
THEIRS_MADE = python_ulid.ULID()

NAMESPACE: dict[str, object] = {
    "ULID": ULID,
    "new_ulid": new_ulid,
    "python_ulid": python_ulid,
    "PyULID": python_ulid.ULID,
    "ulid_transform": ulid_transform,
    "ulid_now": ulid_transform.ulid_now,
    "ulid_now_bytes": ulid_transform.ulid_now_bytes,
    "ulid_to_bytes": ulid_transform.ulid_to_bytes,
    "uuid4": uuid.uuid4,
    "uuid7": uuid_utils.uuid7,
    "text": TEXT,
    "ours_made": OURS_MADE,
    "theirs_made": THEIRS_MADE,
}


@dataclass
class Contestant:
    label: str
    statement: str
    pure_python: bool
    ours: bool = False
    number: int = 0
    times: list[float] = field(default_factory=list)  # seconds per operation

    @property
    def best(self) -> float:
        return min(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


@dataclass
class Group:
    title: str
    contestants: list[Contestant]

    @property
    def ours(self) -> Contestant:
        return next(c for c in self.contestants if c.ours)


def groups() -> list[Group]:
    return [
        Group(
            "generate one identifier",
            [
                Contestant("sqlalchemy-ulid `new_ulid()`", "new_ulid()", True, ours=True),
                Contestant("python-ulid `ULID()`", "PyULID()", True),
                Contestant("ulid-transform `ulid_now_bytes()` (C++)", "ulid_now_bytes()", False),
                Contestant("ulid-transform `ulid_now()` (C++)", "ulid_now()", False),
                Contestant("`uuid.uuid4()` (stdlib)", "uuid4()", True),
                Contestant("uuid-utils `uuid7()` (Rust)", "uuid7()", False),
            ],
        ),
        Group(
            "generate and format as text",
            [
                Contestant("sqlalchemy-ulid `str(new_ulid())`", "str(new_ulid())", True, ours=True),
                Contestant("python-ulid `str(ULID())`", "str(PyULID())", True),
                Contestant("ulid-transform `ulid_now()` (C++)", "ulid_now()", False),
                Contestant("`str(uuid.uuid4())` (stdlib)", "str(uuid4())", True),
                Contestant("uuid-utils `str(uuid7())` (Rust)", "str(uuid7())", False),
            ],
        ),
        Group(
            "format an existing identifier",
            [
                Contestant("sqlalchemy-ulid `str(u)`", "str(ours_made)", True, ours=True),
                Contestant("python-ulid `str(u)`", "str(theirs_made)", True),
            ],
        ),
        Group(
            "parse canonical text",
            [
                Contestant("sqlalchemy-ulid `ULID(text)`", "ULID(text)", True, ours=True),
                Contestant("python-ulid `ULID.from_str(text)`", "PyULID.from_str(text)", True),
                Contestant(
                    "ulid-transform `ulid_to_bytes(text)` (C++)", "ulid_to_bytes(text)", False
                ),
            ],
        ),
    ]


# (group title, competitor label, minimum speed-up of ours) from the issue.
TARGETS = [
    ("generate one identifier", "python-ulid `ULID()`", 3.0),
    ("generate and format as text", "python-ulid `str(ULID())`", 2.5),
    ("parse canonical text", "python-ulid `ULID.from_str(text)`", 2.5),
]


def calibrate(contestant: Contestant, seconds: float) -> None:
    timer = timeit.Timer(contestant.statement, globals=NAMESPACE)
    number, elapsed = timer.autorange()
    contestant.number = max(1, int(number * seconds / max(elapsed, 1e-9)))


def measure(all_groups: list[Group], rounds: int, seconds: float) -> None:
    everyone = [c for g in all_groups for c in g.contestants]
    for contestant in everyone:
        calibrate(contestant, seconds)
    for round_number in range(rounds):
        # Rotate the order each round so no contestant always runs first.
        shift = round_number % len(everyone)
        for contestant in everyone[shift:] + everyone[:shift]:
            timer = timeit.Timer(contestant.statement, globals=NAMESPACE)
            contestant.times.append(timer.timeit(contestant.number) / contestant.number)
        print(f"round {round_number + 1}/{rounds}", end="\r", file=sys.stderr, flush=True)
    print(" " * 20, end="\r", file=sys.stderr)


def table(all_groups: list[Group]) -> str:
    lines = [
        "| operation | contestant | pure Python | ns/op (min) | ns/op (median) | ratio to ours |",
        "|---|---|---|---:|---:|---:|",
    ]
    for group in all_groups:
        ours = group.ours.best
        for c in sorted(group.contestants, key=lambda c: c.best):
            ratio = "1.00 (ours)" if c.ours else f"{c.best / ours:.2f}"
            lines.append(
                f"| {group.title} | {c.label} | {'yes' if c.pure_python else 'no'} "
                f"| {c.best * 1e9:,.0f} | {c.median * 1e9:,.0f} | {ratio} |"
            )
    return "\n".join(lines)


def targets(all_groups: list[Group]) -> str:
    by_title = {g.title: g for g in all_groups}
    lines = []
    for title, label, wanted in TARGETS:
        group = by_title[title]
        other = next(c for c in group.contestants if c.label == label)
        speedup = other.best / group.ours.best
        verdict = "met" if speedup >= wanted else "MISSED"
        lines.append(f"- {title}: {speedup:.2f}x faster than {label} (target {wanted}x): {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=150, help="interleaved rounds (default 150)")
    parser.add_argument(
        "--seconds", type=float, default=0.005, help="time per contestant per round (default 0.005)"
    )
    args = parser.parse_args(argv)
    all_groups = groups()
    measure(all_groups, args.rounds, args.seconds)
    versions = ", ".join(
        f"{name} {module.__version__}"
        for name, module in [
            ("python-ulid", python_ulid),
            ("ulid-transform", ulid_transform),
            ("uuid-utils", uuid_utils),
        ]
    )
    print(
        f"Python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.machine()}; {versions}; {args.rounds} rounds\n"
    )
    print(table(all_groups))
    print()
    print(targets(all_groups))


if __name__ == "__main__":
    main()
