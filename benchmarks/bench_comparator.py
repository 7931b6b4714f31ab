"""What building a comparison on a ULID column costs, against Uuid and plain binary.

Run: ``.venv/bin/python benchmarks/bench_comparator.py [--rounds 40]``

``ULIDType``'s comparator converts literal operands to ``ULID`` when the
expression is built (so a malformed id fails before any SQL exists). This
times building expressions only, no compiling or executing: ``col == value``
with each accepted operand form, and ``col.in_(100 values)``, next to
SQLAlchemy's ``Uuid`` with ``uuid.UUID`` values and ``LargeBinary`` with
``bytes`` (no conversion at build time), which is what a project would use
instead. Figures are minimums over interleaved rounds, in microseconds per
expression, of this process's CPU time (``time.process_time``), so other
jobs on a shared machine move them less than wall time.

It also builds and executes ``select(id).where(id.in_(100 values))`` on
in-memory SQLite: a list of str ids is checked when the expression is built
but decoded when the statement first runs, so building alone does not show
that cost.

It also times one ``conn.execute(select ... where id == :id)`` on in-memory
SQLite with and without the ``before_execute`` listener that lets bulk
``INSERT ... RETURNING`` match str ids (``_bulk.py``), which every statement
passes through once a ULIDType exists.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
import timeit
from typing import Any

import sqlalchemy as sa

from sqlalchemy_ulid import ULIDType, _bulk, new_ulid

IDS = [new_ulid() for _ in range(100)]
ULID_COL = sa.Table("t_ulid", sa.MetaData(), sa.Column("id", ULIDType())).c.id
UUID_COL = sa.Table("t_uuid", sa.MetaData(), sa.Column("id", sa.Uuid())).c.id
RAW_COL = sa.Table("t_raw", sa.MetaData(), sa.Column("id", sa.LargeBinary())).c.id

U = IDS[0]
TEXT = str(U).lower()
UUID = U.to_uuid()
RAW = U.bytes
UUIDS = [u.to_uuid() for u in IDS]
TEXTS = [str(u) for u in IDS]
RAWS = [u.bytes for u in IDS]
MIXED = [IDS[0], *TEXTS[1:]]

CASES = {
    "ULIDType == ULID": lambda: ULID_COL == U,
    "ULIDType == str": lambda: ULID_COL == TEXT,
    "ULIDType == uuid.UUID": lambda: ULID_COL == UUID,
    "Uuid == uuid.UUID": lambda: UUID_COL == UUID,
    "LargeBinary == bytes": lambda: RAW_COL == RAW,
    "ULIDType.in_(100 ULIDs)": lambda: ULID_COL.in_(IDS),
    "ULIDType.in_(100 str)": lambda: ULID_COL.in_(TEXTS),
    # a mixed list converts value by value: the path every str list took before
    "ULIDType.in_(1 ULID + 99 str)": lambda: ULID_COL.in_(MIXED),
    "Uuid.in_(100 uuid.UUID)": lambda: UUID_COL.in_(UUIDS),
    "LargeBinary.in_(100 bytes)": lambda: RAW_COL.in_(RAWS),
}


def _execute_cost(rounds: int, number: int) -> dict[str, list[float]]:
    engine = sa.create_engine("sqlite://")
    table = sa.Table("t", sa.MetaData(), sa.Column("id", ULIDType(), primary_key=True))
    table.metadata.create_all(engine)
    stmt = sa.select(table.c.id).where(table.c.id == U)
    times: dict[str, list[float]] = {"with listener": [], "without listener": []}
    with engine.connect() as conn:
        conn.execute(table.insert(), [{"id": U}])
        run = lambda: conn.execute(stmt).all()  # noqa: E731
        for _ in range(rounds):
            for listening in (True, False):
                present = sa.event.contains(sa.Engine, "before_execute", _bulk._convert)
                if listening and not present:
                    sa.event.listen(sa.Engine, "before_execute", _bulk._convert, retval=True)
                elif not listening and present:
                    sa.event.remove(sa.Engine, "before_execute", _bulk._convert)
                name = "with listener" if listening else "without listener"
                times[name].append(timeit.Timer(run).timeit(number) / number * 1e6)
    if not sa.event.contains(sa.Engine, "before_execute", _bulk._convert):
        sa.event.listen(sa.Engine, "before_execute", _bulk._convert, retval=True)
    engine.dispose()
    return times


def _in_execute_cost(rounds: int, number: int) -> dict[str, list[float]]:
    """Build and execute ``select(id).where(id.in_(100 values))`` on in-memory SQLite.

    A str list is checked when built and decoded when executed, so building
    alone does not show the decode; this does (CPU time, µs per statement).
    """
    engine = sa.create_engine("sqlite://")
    metadata = sa.MetaData()
    ulid_table = sa.Table("e_ulid", metadata, sa.Column("id", ULIDType(), primary_key=True))
    uuid_table = sa.Table("e_uuid", metadata, sa.Column("id", sa.Uuid(), primary_key=True))
    metadata.create_all(engine)
    cases = {
        "ULIDType.in_(100 str)": (ulid_table.c.id, TEXTS),
        "ULIDType.in_(100 ULIDs)": (ulid_table.c.id, IDS),
        "Uuid.in_(100 uuid.UUID)": (uuid_table.c.id, UUIDS),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    with engine.connect() as conn:
        conn.execute(ulid_table.insert(), [{"id": u} for u in IDS[:10]])
        conn.execute(uuid_table.insert(), [{"id": u} for u in UUIDS[:10]])
        for column, values in cases.values():  # every case finds the same 10 rows
            assert len(conn.execute(sa.select(column).where(column.in_(values))).all()) == 10

        def run(column: Any, values: Any) -> None:
            conn.execute(sa.select(column).where(column.in_(values))).all()

        names = list(cases)
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                column, values = cases[name]
                seconds = timeit.Timer(
                    lambda: run(column, values),  # noqa: B023 (timed at once, in this iteration)
                    timer=time.process_time,
                ).timeit(number)
                times[name].append(seconds / number * 1e6)
    engine.dispose()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--number", type=int, default=2_000)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in CASES}
    names = list(CASES)
    for round_number in range(args.rounds):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            seconds = timeit.Timer(CASES[name], timer=time.process_time).timeit(args.number)
            times[name].append(seconds / args.number * 1e6)
    print(
        f"Python {platform.python_version()}, SQLAlchemy {sa.__version__}; "
        f"{args.rounds} rounds of {args.number:,}\n"
    )
    print("| expression | µs (min) | µs (median) | ratio to the Uuid equivalent |")
    print("|---|---:|---:|---:|")
    for name in names:
        baseline = "Uuid.in_(100 uuid.UUID)" if ".in_" in name else "Uuid == uuid.UUID"
        ratio = min(times[name]) / min(times[baseline])
        print(
            f"| `{name}` | {min(times[name]):.2f} | {statistics.median(times[name]):.2f} "
            f"| {ratio:.2f}x |"
        )
    in_executes = _in_execute_cost(args.rounds, max(args.number // 10, 1))
    print("\n| build + execute on in-memory SQLite | µs (min) | µs (median) | ratio to Uuid |")
    print("|---|---:|---:|---:|")
    for name, values in in_executes.items():
        ratio = min(values) / min(in_executes["Uuid.in_(100 uuid.UUID)"])
        print(f"| `{name}` | {min(values):.1f} | {statistics.median(values):.1f} | {ratio:.2f}x |")
    executes = _execute_cost(args.rounds, args.number)
    print("\n| one cached SELECT on SQLite | µs (min) | µs (median) |")
    print("|---|---:|---:|")
    for name, values in executes.items():
        print(f"| {name} | {min(values):.2f} | {statistics.median(values):.2f} |")


if __name__ == "__main__":
    main()
