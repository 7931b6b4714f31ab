"""UUIDv7 generation: ``new_uuid7()`` against uuid-utils, the standard library and ``new_ulid()``.

Run: ``.venv/bin/python benchmarks/bench_uuid7.py``.

The same interleaved, rotating rounds as ``bench_generation.py`` (its
machinery is reused): each figure is the minimum over the rounds, the median
is shown too, and ratios are the contestant's minimum divided by ours (above
1: ours is faster). ``uuid.uuid7()`` is timed where the Python has it (3.14+).

Targets: ``new_uuid7()`` within 1.5x of ``new_ulid()``, and faster than
uuid-utils' ``uuid7()`` once its value is a :class:`uuid.UUID` (what a
``sa.Uuid`` column binds and what SQLAlchemy returns).
"""

from __future__ import annotations

import argparse
import platform
import uuid

import uuid_utils
import uuid_utils.compat
from bench_generation import NAMESPACE, Contestant, Group, measure, table

from sqlalchemy_ulid import new_ulid, new_uuid7

NAMESPACE.update(
    {
        "new_uuid7": new_uuid7,
        "new_ulid": new_ulid,
        "uu_uuid7": uuid_utils.uuid7,
        "uu_compat_uuid7": uuid_utils.compat.uuid7,
        "UUID": uuid.UUID,
        "std_uuid7": getattr(uuid, "uuid7", None),
    }
)


def groups() -> list[Group]:
    contestants = [
        Contestant("sqlalchemy-ulid `new_uuid7()`", "new_uuid7()", True, ours=True),
        Contestant("sqlalchemy-ulid `new_ulid()`", "new_ulid()", True),
        Contestant("uuid-utils `uuid7()`, its own UUID (Rust)", "uu_uuid7()", False),
        Contestant("uuid-utils `compat.uuid7()`, a `uuid.UUID` (Rust)", "uu_compat_uuid7()", False),
        Contestant(
            "uuid-utils `uuid.UUID(int=uuid7().int)` (Rust)", "UUID(int=uu_uuid7().int)", False
        ),
    ]
    if NAMESPACE["std_uuid7"] is not None:
        contestants.append(Contestant("`uuid.uuid7()` (stdlib)", "std_uuid7()", True))
    return [Group("generate one UUIDv7", contestants)]


def verdicts(group: Group) -> list[str]:
    ours = group.ours.best
    by_label = {c.label: c for c in group.contestants}
    ulid = by_label["sqlalchemy-ulid `new_ulid()`"].best
    compat = by_label["uuid-utils `compat.uuid7()`, a `uuid.UUID` (Rust)"].best
    converted = by_label["uuid-utils `uuid.UUID(int=uuid7().int)` (Rust)"].best
    lines = [
        f"- new_uuid7() / new_ulid(): {ours / ulid:.2f} (target at most 1.5): "
        f"{'met' if ours / ulid <= 1.5 else 'MISSED'}",
        f"- uuid-utils compat.uuid7() / new_uuid7(): {compat / ours:.2f} (target above 1): "
        f"{'met' if compat > ours else 'MISSED'}",
        f"- uuid-utils UUID(int=uuid7().int) / new_uuid7(): {converted / ours:.2f} "
        f"(target above 1): {'met' if converted > ours else 'MISSED'}",
    ]
    if NAMESPACE["std_uuid7"] is None:
        lines.append(f"- uuid.uuid7(): not in Python {platform.python_version()} (3.14+)")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=150, help="interleaved rounds (default 150)")
    parser.add_argument(
        "--seconds", type=float, default=0.005, help="time per contestant per round (default 0.005)"
    )
    args = parser.parse_args(argv)
    all_groups = groups()
    measure(all_groups, args.rounds, args.seconds)
    print(
        f"Python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.machine()}; uuid-utils {uuid_utils.__version__}; {args.rounds} rounds\n"
    )
    print(table(all_groups))
    print()
    print("\n".join(verdicts(all_groups[0])))


if __name__ == "__main__":
    main()
