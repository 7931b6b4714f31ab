"""Reading typed ids: a SELECT of 100k ids through TypeIDType against ULIDType.

Run: ``.venv/bin/python benchmarks/bench_typeid_read.py [--rows 100000] [--rounds 7]``

One table per server, of ``--rows`` ids, loaded once. Every round reads it
whole (``SELECT id FROM ...``, ``.all()``) twice: as ``ULIDType()`` (``ULID``
objects out) and as ``TypeIDType("user")`` (``TypeID`` objects out), the
same rows in the same storage (both read through ``type_coerce``, so
that the statements differ by the type alone). The two take turns in
alternating order; the figures are the medians of the rounds after a
warm-up round, in milliseconds, and the ratio is the median of the rounds'
own ratios (each round reads both back to back, so a burst of load from
other processes on a shared machine falls on both of a round's reads more
often than on one table's reads alone).

Target (issue 35): TypeIDType at most 1.1x ULIDType.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from typing import Any

import sqlalchemy as sa
from _servers import MARIADB_URL, POSTGRESQL_URL  # benchmarks/ is on sys.path

from sqlalchemy_ulid import TypeIDType, ULIDType, new_typeid

SQLITE_URL = f"sqlite:////tmp/bench_typeid_read_{os.getpid()}.sqlite3"
SERVERS = {
    "SQLite": SQLITE_URL,
    "PostgreSQL (psycopg)": POSTGRESQL_URL,
    "MariaDB (PyMySQL)": MARIADB_URL,
}
TABLE = sa.Table("bench_typeid_read", sa.MetaData(), sa.Column("id", ULIDType(), primary_key=True))
READS: dict[str, Any] = {
    # Both through type_coerce, so that the statements differ by the type alone.
    "ULIDType": sa.select(sa.type_coerce(TABLE.c.id, ULIDType()).label("id")),
    "TypeIDType": sa.select(sa.type_coerce(TABLE.c.id, TypeIDType("user")).label("id")),
}


def bench(url: str, rows: int, rounds: int) -> tuple[dict[str, float], list[float]]:
    engine = sa.create_engine(url)
    TABLE.drop(engine, checkfirst=True)
    TABLE.create(engine)
    try:
        with engine.begin() as conn:
            conn.execute(
                TABLE.insert(), [{"id": new_typeid("user").to_ulid()} for _ in range(rows)]
            )
        times: dict[str, list[float]] = {name: [] for name in READS}
        names = list(READS)
        with engine.connect() as conn:
            for round_ in range(rounds + 1):
                for name in names if round_ % 2 else names[::-1]:
                    began = time.perf_counter()
                    got = conn.execute(READS[name]).all()
                    times[name].append(time.perf_counter() - began)
                    assert len(got) == rows
                    del got
        pairs = zip(times["TypeIDType"][1:], times["ULIDType"][1:], strict=True)
        ratios = [typed / plain for typed, plain in pairs]
        medians = {name: statistics.median(values[1:]) * 1000 for name, values in times.items()}
        return medians, ratios
    finally:
        TABLE.drop(engine, checkfirst=True)
        engine.dispose()
        if url == SQLITE_URL and os.path.exists(url.removeprefix("sqlite:///")):
            os.remove(url.removeprefix("sqlite:///"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    print(
        f"SELECT of {args.rows:,} ids, median of {args.rounds} rounds (ms); "
        f"Python {platform.python_version()}, SQLAlchemy {sa.__version__}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}\n"
    )
    print(
        "| server | ULIDType (ms) | TypeIDType (ms) | TypeIDType / ULIDType "
        "(median of rounds) | lowest, highest round |"
    )
    print("|---|---:|---:|---:|---|")
    for server, url in SERVERS.items():
        ms, ratios = bench(url, args.rows, args.rounds)
        print(
            f"| {server} | {ms['ULIDType']:.0f} | {ms['TypeIDType']:.0f} | "
            f"{statistics.median(ratios):.2f}x | {min(ratios):.2f}x, {max(ratios):.2f}x |"
        )


if __name__ == "__main__":
    main()
