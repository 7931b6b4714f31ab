"""Core insert and select through ULIDType, against Uuid and raw 16-byte binary.

Run: ``.venv/bin/python benchmarks/bench_types.py [--rows 20000] [--rounds 5]``

On each server the three column types get identical tables (16-byte id
primary key plus an integer). Each round inserts ``--rows`` rows with one
executemany and selects them all back, for every contestant, in a rotating
order so machine noise hits all of them alike. The figure is the median over
the rounds; the ratio is against ``Uuid`` (the target is <= 1.15x).

* ``ULIDType``: ULID objects in, ULID objects out.
* ``Uuid``: SQLAlchemy's ``Uuid`` with ``uuid.UUID`` values (native ``UUID``
  on PostgreSQL and MariaDB, ``CHAR(32)`` on SQLite).
* ``raw``: ``LargeBinary`` (``BYTEA``/``BLOB``) or ``BINARY(16)`` with
  ``bytes`` values and no conversion: the floor.
* ``decorated Uuid``: a TypeDecorator over ``Uuid`` whose only work is an
  identity result processor: the floor for any custom type that converts
  results, since any result processor moves SQLAlchemy onto its per-row
  processing path (one list and one tuple per row, and the garbage
  collection that comes with them).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from sqlalchemy_ulid import ULIDType, new_ulid

SERVERS = {
    # One file per run: several benchmark runs may share the machine.
    "SQLite": f"sqlite:////tmp/bench_types_{os.getpid()}.sqlite3",
    # The servers' URLs come from the test suite's variables when set.
    "PostgreSQL 15 (psycopg 3)": os.environ.get(
        "SQLALCHEMY_ULID_POSTGRESQL_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    ),
    "MariaDB 10.11 (PyMySQL)": os.environ.get(
        "SQLALCHEMY_ULID_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test"
    ),
}


class _DecoratedUuid(sa.types.TypeDecorator[uuid.UUID]):
    impl = sa.Uuid
    cache_ok = True

    def result_processor(self, dialect: Any, coltype: Any) -> Callable[[Any], Any]:
        return lambda value: value


def _raw_type(engine: sa.Engine) -> sa.types.TypeEngine[Any]:
    return sa.BINARY(16) if engine.dialect.name == "mysql" else sa.LargeBinary()


def _as_uuid7(data: bytes) -> uuid.UUID:
    """The ULID's bits with UUIDv7 version and variant set.

    MariaDB's native UUID type (what ``Uuid`` becomes there) rejects about a
    quarter of raw ULIDs, so ``Uuid`` gets valid, equally time-ordered values.
    """
    raw = bytearray(data)
    raw[6] = 0x70 | (raw[6] & 0x0F)
    raw[8] = 0x80 | (raw[8] & 0x3F)
    return uuid.UUID(bytes=bytes(raw))


def _contestants(
    engine: sa.Engine, rows: int
) -> dict[str, tuple[sa.types.TypeEngine[Any], list[dict[str, Any]]]]:
    ulids = [new_ulid() for _ in range(rows)]
    return {
        "ULIDType": (ULIDType(), [{"id": u, "n": i} for i, u in enumerate(ulids)]),
        "Uuid": (
            sa.Uuid(),
            [{"id": _as_uuid7(u.bytes), "n": i} for i, u in enumerate(ulids)],
        ),
        "raw": (_raw_type(engine), [{"id": u.bytes, "n": i} for i, u in enumerate(ulids)]),
        "decorated": (
            _DecoratedUuid(),
            [{"id": _as_uuid7(u.bytes), "n": i} for i, u in enumerate(ulids)],
        ),
    }


def _timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def bench_server(url: str, rows: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    engine = sa.create_engine(url)
    metadata = sa.MetaData()
    contestants = _contestants(engine, rows)
    tables = {
        name: sa.Table(
            f"bench_{name.lower()}",
            metadata,
            sa.Column("id", column_type, primary_key=True),
            sa.Column("n", sa.Integer, nullable=False),
        )
        for name, (column_type, _) in contestants.items()
    }
    metadata.drop_all(engine)
    metadata.create_all(engine)
    times: dict[str, dict[str, list[float]]] = {
        name: {"insert": [], "select": []} for name in contestants
    }
    names = list(contestants)
    try:
        for round_number in range(rounds):
            shift = round_number % len(names)
            for name in names[shift:] + names[:shift]:
                table, params = tables[name], contestants[name][1]
                with engine.begin() as conn:
                    conn.execute(table.delete())
                with engine.begin() as conn:
                    times[name]["insert"].append(
                        _timed(lambda: conn.execute(table.insert(), params))  # noqa: B023
                    )
                with engine.connect() as conn:
                    select = sa.select(table.c.id, table.c.n)
                    times[name]["select"].append(
                        _timed(lambda: conn.execute(select).all())  # noqa: B023
                    )
    finally:
        metadata.drop_all(engine)
        engine.dispose()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--no-gc", action="store_true", help="disable the garbage collector (to see its share)"
    )
    parser.add_argument("--servers", default=",".join(SERVERS), help="comma-separated names")
    args = parser.parse_args()
    if args.no_gc:
        gc.disable()
    print(
        f"{args.rows:,} rows, median of {args.rounds} rounds; "
        f"Python {platform.python_version()}, SQLAlchemy {sa.__version__}, "
        f"{os.cpu_count()} CPUs\n"
    )
    print(
        "| server | operation | ULIDType (ms) | Uuid (ms) | raw bytes (ms) "
        "| decorated Uuid (ms) | ULIDType / Uuid | ULIDType / decorated Uuid |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for server, url in SERVERS.items():
        if server not in args.servers.split(","):
            continue
        times = bench_server(url, args.rows, args.rounds)
        for operation in ("insert", "select"):
            median = {name: statistics.median(times[name][operation]) for name in times}
            print(
                f"| {server} | {operation} | {median['ULIDType'] * 1000:.1f} | "
                f"{median['Uuid'] * 1000:.1f} | {median['raw'] * 1000:.1f} | "
                f"{median['decorated'] * 1000:.1f} | "
                f"{median['ULIDType'] / median['Uuid']:.2f}x | "
                f"{median['ULIDType'] / median['decorated']:.2f}x |",
                flush=True,
            )
    sqlite_file = SERVERS["SQLite"].removeprefix("sqlite:///")
    if os.path.exists(sqlite_file):
        os.remove(sqlite_file)


if __name__ == "__main__":
    main()
