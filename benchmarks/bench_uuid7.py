"""UUIDv7 generation: ``new_uuid7()`` against uuid-utils, the standard library and ``new_ulid()``.

Run: ``.venv/bin/python benchmarks/bench_uuid7.py``.

The same interleaved, rotating rounds as ``bench_generation.py`` (its
machinery is reused): each figure is the minimum over the rounds, the median
is shown too, and ratios are the contestant's minimum divided by ours (above
1: ours is faster). ``uuid.uuid7()`` is timed where the Python has it (3.14+).

Targets: ``new_uuid7()`` within 1.5x of ``new_ulid()``, and faster than
uuid-utils' ``uuid7()`` once its value is a :class:`uuid.UUID` (what a
``sa.Uuid`` column binds and what SQLAlchemy returns).

With ``--postgresql URL`` it also times the server functions on PostgreSQL:
``SELECT count(f()) FROM generate_series(1, N)`` for ``gen_random_uuid()``,
``gen_uuid7()``, ``gen_ulid()`` (session-ordered PL/pgSQL functions) and the
plain SQL ``gen_ulid()`` it replaced (not ordered within a millisecond),
interleaved over the rounds, minimum per value.
"""

from __future__ import annotations

import argparse
import platform
import time
import uuid

import uuid_utils
import uuid_utils.compat
from bench_generation import NAMESPACE, Contestant, Group, measure, table

from sqlalchemy_ulid import (
    drop_ulid_function,
    drop_uuid7_function,
    install_ulid_function,
    install_uuid7_function,
    new_ulid,
    new_uuid7,
)

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


# The gen_ulid() of earlier releases: one SQL statement, no session counter.
_PLAIN_SQL_GEN_ULID = """\
CREATE OR REPLACE FUNCTION bench_plain_gen_ulid() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
SELECT encode(
    substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
    || substring(g.r FROM 10 FOR 7) || substring(g.r FROM 1 FOR 3),
    'hex')::uuid
FROM uuid_send(gen_random_uuid()) AS g(r)
$$"""


def server_functions(url: str, rows: int, rounds: int) -> str:
    import sqlalchemy as sa

    functions = ["gen_random_uuid", "bench_plain_gen_ulid", "gen_ulid", "gen_uuid7"]
    best = dict.fromkeys(functions, float("inf"))
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        install_ulid_function(conn)
        install_uuid7_function(conn)
        conn.exec_driver_sql(_PLAIN_SQL_GEN_ULID)
        for round_number in range(rounds):
            shift = round_number % len(functions)
            for name in functions[shift:] + functions[:shift]:
                started = time.perf_counter()
                conn.exec_driver_sql(f"SELECT count({name}()) FROM generate_series(1, {rows})")
                best[name] = min(best[name], (time.perf_counter() - started) / rows)
        version = conn.exec_driver_sql("SHOW server_version").scalar()
        conn.exec_driver_sql("DROP FUNCTION bench_plain_gen_ulid()")
        drop_ulid_function(conn)
        drop_uuid7_function(conn)
        conn.commit()
    engine.dispose()
    base = best["gen_random_uuid"]
    lines = [
        f"PostgreSQL {version}: {rows:,} values per statement, {rounds} rounds\n",
        "| function | ordered within a ms | ns/value (min) | ratio to gen_random_uuid() |",
        "|---|---|---:|---:|",
    ]
    ordered = {
        "gen_random_uuid": "no (UUIDv4)",
        "bench_plain_gen_ulid": "no",
        "gen_ulid": "yes, per session",
        "gen_uuid7": "yes, per session",
    }
    labels = {"bench_plain_gen_ulid": "plain SQL `gen_ulid()` (earlier releases)"}
    for name in functions:
        label = labels.get(name, f"`{name}()`")
        lines.append(
            f"| {label} | {ordered[name]} | {best[name] * 1e9:,.0f} | {best[name] / base:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=150, help="interleaved rounds (default 150)")
    parser.add_argument(
        "--seconds", type=float, default=0.005, help="time per contestant per round (default 0.005)"
    )
    parser.add_argument("--postgresql", default=None, help="also time the server functions here")
    parser.add_argument("--rows", type=int, default=100_000, help="values per statement")
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
    if args.postgresql:
        print()
        print(server_functions(args.postgresql, args.rows, max(3, args.rounds // 30)))


if __name__ == "__main__":
    main()
