"""Typed ids: ``new_typeid``, ``str()`` and parsing against ``new_uuid7`` and typeid-python.

Run: ``.venv/bin/python benchmarks/bench_typeid.py``.

The same interleaved, rotating rounds as ``bench_generation.py``: each figure
is the minimum over the rounds (the median is shown too), and ratios are the
contestant's minimum divided by ours (above 1: ours is faster).

typeid-python's codec depends on its release: 0.3.7 and later bundle a
Rust base32 codec and have no Python one; 0.3.4 and earlier are pure Python
(0.3.5, the one release with both, is yanked). So its pure-Python path is
timed by running this script in a venv with typeid-python 0.3.4
(docs/benchmarks.md has the commands).

Targets: ``new_typeid()`` at most 1.5x ``new_uuid7()``; parsing and formatting
at least 3x faster than typeid-python's pure-Python path.
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
from importlib import metadata

import typeid  # typeid-python
from bench_generation import NAMESPACE, Contestant, Group, measure, table

from sqlalchemy_ulid import TypeID, new_typeid, new_uuid7

TheirTypeID = typeid.TypeID
TEXT = str(new_typeid("user"))
UUID = new_uuid7()

#: 0.3.7 and later: the Rust codec in typeid._base32; before: pure Python.
PATH = "Rust, bundled" if importlib.util.find_spec("typeid._base32") else "pure Python"

NAMESPACE.update(
    {
        "TypeID": TypeID,
        "new_typeid": new_typeid,
        "new_uuid7": new_uuid7,
        "TheirTypeID": TheirTypeID,
        "text": TEXT,
        "u": UUID,
    }
)


def theirs(label: str, statement: str) -> list[Contestant]:
    return [Contestant(f"typeid-python {label} ({PATH})", statement, PATH == "pure Python")]


def groups() -> list[Group]:
    return [
        Group(
            "generate one typed id",
            [
                Contestant('`new_typeid("user")`', 'new_typeid("user")', True, ours=True),
                Contestant("`new_uuid7()`", "new_uuid7()", True),
                *theirs('`TypeID("user")`', 'TheirTypeID("user")'),
            ],
        ),
        Group(
            "generate and format as text",
            [
                Contestant('`str(new_typeid("user"))`', 'str(new_typeid("user"))', True, ours=True),
                *theirs('`str(TypeID("user"))`', 'str(TheirTypeID("user"))'),
            ],
        ),
        Group(
            "format: prefix and UUID to text",
            [
                Contestant(
                    '`str(TypeID.from_uuid("user", u))`',
                    'str(TypeID.from_uuid("user", u))',
                    True,
                    ours=True,
                ),
                *theirs(
                    '`str(TypeID.from_uuid(u, "user"))`', 'str(TheirTypeID.from_uuid(u, "user"))'
                ),
            ],
        ),
        Group(
            "parse text",
            [
                Contestant("`TypeID.parse(text)`", "TypeID.parse(text)", True, ours=True),
                *theirs("`TypeID.from_string(text)`", "TheirTypeID.from_string(text)"),
            ],
        ),
        Group(
            "parse text to its UUID",
            [
                Contestant("`TypeID.parse(text).uuid`", "TypeID.parse(text).uuid", True, ours=True),
                *theirs("`TypeID.from_string(text).uuid`", "TheirTypeID.from_string(text).uuid"),
            ],
        ),
    ]


def verdicts(all_groups: list[Group]) -> list[str]:
    by_title = {g.title: g for g in all_groups}
    generate = by_title["generate one typed id"]
    uuid7 = next(c for c in generate.contestants if c.label == "`new_uuid7()`")
    ratio = generate.ours.best / uuid7.best
    lines = [
        f"- new_typeid() / new_uuid7(): {ratio:.2f} (target at most 1.5): "
        f"{'met' if ratio <= 1.5 else 'MISSED'}"
    ]
    for title in ("format: prefix and UUID to text", "parse text", "parse text to its UUID"):
        group = by_title[title]
        for other in group.contestants:
            if other.ours:
                continue
            speedup = other.best / group.ours.best
            if other.pure_python:
                verdict = "met" if speedup >= 3 else "MISSED"
                target = f" (target at least 3x): {verdict}"
            else:
                target = ""
            lines.append(f"- {title}: {speedup:.2f}x faster than {other.label}{target}")
    if PATH != "pure Python":
        lines.append(
            "- typeid-python's pure-Python path: not in this release "
            "(0.3.7 and later are Rust only); run with 0.3.4 to time it"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100, help="interleaved rounds (default 100)")
    parser.add_argument(
        "--seconds", type=float, default=0.005, help="time per contestant per round (default 0.005)"
    )
    args = parser.parse_args(argv)
    # Both parse the same way: the benchmark compares like with like.
    assert str(TheirTypeID.from_string(TEXT)) == str(TypeID.parse(TEXT)) == TEXT
    assert str(TheirTypeID.from_uuid(UUID, "user")) == str(TypeID.from_uuid("user", UUID))
    all_groups = groups()
    measure(all_groups, args.rounds, args.seconds)
    print(
        f"Python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.machine()}; typeid-python {metadata.version('typeid-python')} ({PATH}); "
        f"{args.rounds} rounds\n"
    )
    print(table(all_groups))
    print()
    print("\n".join(verdicts(all_groups)))


if __name__ == "__main__":
    main()
