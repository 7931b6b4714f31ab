"""Reading ids: a SELECT of 100k ids through ULIDType, its old result path, Uuid and raw bytes.

Run: ``.venv/bin/python benchmarks/bench_read.py [--rows 100000] [--rounds 5]``

Each server gets one table per contestant, of ``--rows`` ids each (the same
ids), loaded once. Every round selects each table whole (``SELECT id FROM
...``, ``.all()``), in a rotating order so machine noise hits every
contestant alike. The figure is the median over the rounds, in milliseconds;
the ratios are against ``Uuid`` and against the old ``ULIDType`` path.

* ``ULIDType``: ``ULID`` objects out. On PostgreSQL the SELECT list reads
  ``uuid_send(id)``, so the driver returns 16 bytes.
* ``ULIDType before``: the result path before that change, kept here as a
  subclass: the driver's ``uuid.UUID`` (asyncpg's subclass) made a ``ULID``.
* ``Uuid``: SQLAlchemy's ``Uuid``, ``uuid.UUID`` objects out (native
  ``UUID`` on PostgreSQL and MariaDB, ``CHAR(32)`` on SQLite).
* ``raw``: ``BYTEA``/``BLOB``/``BINARY(16)`` read as ``bytes`` with no
  conversion: the floor.

Servers: SQLite (a file), PostgreSQL through psycopg 3 and through asyncpg,
MariaDB through PyMySQL (URLs from SQLALCHEMY_ULID_POSTGRESQL_URL and
SQLALCHEMY_ULID_MYSQL_URL, else the local test servers).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from _servers import MARIADB_URL, POSTGRESQL_URL  # benchmarks/ is on sys.path

from sqlalchemy_ulid import ULID, ULIDType, new_ulid
from sqlalchemy_ulid._types import _from_db

SQLITE_URL = f"sqlite:////tmp/bench_read_{os.getpid()}.sqlite3"
SERVERS = {
    "SQLite": SQLITE_URL,
    "PostgreSQL (psycopg)": POSTGRESQL_URL,
    "PostgreSQL (asyncpg)": POSTGRESQL_URL.replace("+psycopg", "+asyncpg", 1),
    "MariaDB (PyMySQL)": MARIADB_URL,
}
NAMES = ("ULIDType", "ULIDType before", "Uuid", "raw")


class OldULIDType(ULIDType):
    """ULIDType's result path before uuid_send: the driver's uuid.UUID, then a ULID."""

    cache_ok = True

    def column_expression(self, column: Any) -> Any:
        return column

    def result_processor(self, dialect: Any, coltype: object) -> Callable[[Any], Any] | None:
        from sqlalchemy_ulid._dialects import dialect_row
        from sqlalchemy_ulid._ulid import _new, _set_int

        if dialect_row(dialect).kind(self.storage) == "uuid":

            def from_uuid(value: Any) -> Any:
                if type(value) is uuid.UUID:
                    ulid = _new(ULID)
                    _set_int(ulid, value.int)
                    return ulid
                return None if value is None else _from_db(value)

            return from_uuid

        def from_binary(value: Any) -> Any:
            if type(value) is bytes and len(value) == 16:
                ulid = _new(ULID)
                _set_int(ulid, int.from_bytes(value, "big"))
                return ulid
            return None if value is None else _from_db(value)

        return from_binary


def _as_uuid7(data: bytes) -> uuid.UUID:
    # MariaDB's UUID type (Uuid there) rejects about a quarter of raw ULIDs.
    raw = bytearray(data)
    raw[6] = 0x70 | (raw[6] & 0x0F)
    raw[8] = 0x80 | (raw[8] & 0x3F)
    return uuid.UUID(bytes=bytes(raw))


def _tables(dialect_name: str) -> tuple[sa.MetaData, dict[str, sa.Table]]:
    metadata = sa.MetaData()
    raw: sa.types.TypeEngine[Any] = (
        sa.BINARY(16) if dialect_name in ("mysql", "mariadb") else sa.LargeBinary()
    )
    types: dict[str, sa.types.TypeEngine[Any]] = {
        "ULIDType": ULIDType(),
        "ULIDType before": OldULIDType(),
        "Uuid": sa.Uuid(),
        "raw": raw,
    }
    tables = {
        name: sa.Table(f"bench_read_{i}", metadata, sa.Column("id", column_type, primary_key=True))
        for i, (name, column_type) in enumerate(types.items())
    }
    return metadata, tables


def _load(url: str, rows: int) -> None:
    engine = sa.create_engine(url.replace("+asyncpg", "+psycopg"))
    metadata, tables = _tables(engine.dialect.name)
    ids = [new_ulid() for _ in range(rows)]
    values = {
        "ULIDType": ids,
        "ULIDType before": ids,
        "Uuid": [_as_uuid7(u.bytes) for u in ids],
        "raw": [u.bytes for u in ids],
    }
    metadata.drop_all(engine)
    metadata.create_all(engine)
    with engine.begin() as conn:
        for name, table in tables.items():
            conn.execute(table.insert(), [{"id": value} for value in values[name]])
    engine.dispose()


def _drop(url: str) -> None:
    engine = sa.create_engine(url)
    _tables(engine.dialect.name)[0].drop_all(engine)
    engine.dispose()


def _rotations(rounds: int) -> list[list[str]]:
    names = list(NAMES)
    return [names[r % len(names) :] + names[: r % len(names)] for r in range(rounds)]


def bench_sync(url: str, rows: int, rounds: int) -> dict[str, list[float]]:
    engine = sa.create_engine(url)
    tables = _tables(engine.dialect.name)[1]
    times: dict[str, list[float]] = {name: [] for name in NAMES}
    with engine.connect() as conn:
        for order in _rotations(rounds + 1):
            for name in order:
                stmt = sa.select(tables[name].c.id)
                began = time.perf_counter()
                got = conn.execute(stmt).all()
                times[name].append(time.perf_counter() - began)
                assert len(got) == rows
                del got
    engine.dispose()
    return {name: values[1:] for name, values in times.items()}  # the first is a warm-up


async def _bench_async(url: str, rows: int, rounds: int) -> dict[str, list[float]]:
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    tables = _tables(engine.dialect.name)[1]
    times: dict[str, list[float]] = {name: [] for name in NAMES}
    async with engine.connect() as conn:
        for order in _rotations(rounds + 1):
            for name in order:
                stmt = sa.select(tables[name].c.id)
                began = time.perf_counter()
                got = (await conn.execute(stmt)).all()
                times[name].append(time.perf_counter() - began)
                assert len(got) == rows
                del got
    await engine.dispose()
    return {name: values[1:] for name, values in times.items()}


# -- where the time goes on PostgreSQL (--breakdown) ---------------------------------


class _Identity(sa.types.TypeDecorator[Any]):
    """Bytes in, the same bytes out, through a result processor: SQLAlchemy's per-value path."""

    impl = sa.LargeBinary
    cache_ok = True

    def result_processor(self, dialect: Any, coltype: object) -> Callable[[Any], Any] | None:
        return lambda value: value


class _ToInt(_Identity):
    """Bytes in, an int out: the processor path plus int.from_bytes."""

    cache_ok = True

    def result_processor(self, dialect: Any, coltype: object) -> Callable[[Any], Any] | None:
        return lambda value, from_bytes=int.from_bytes: from_bytes(value, "big")


def bench_breakdown(url: str, rows: int, rounds: int) -> None:
    """Read the same uuid column five ways, with the garbage collector on and off."""
    import gc

    engine = sa.create_engine(url)
    tables = _tables(engine.dialect.name)[1]
    column = tables["Uuid"].c.id
    ulid_column = tables["ULIDType"].c.id
    statements = {
        "uuid_send(id), bytes out (no processor)": sa.select(
            sa.func.uuid_send(column, type_=sa.LargeBinary())
        ),
        "uuid_send(id), identity processor": sa.select(
            sa.func.uuid_send(column, type_=_Identity())
        ),
        "uuid_send(id), processor to int": sa.select(sa.func.uuid_send(column, type_=_ToInt())),
        "ULIDType (uuid_send(id), processor to ULID)": sa.select(ulid_column),
        "Uuid (psycopg's uuid.UUID, no processor)": sa.select(column),
    }
    print("\n| read of the uuid column | GC on (ms) | GC off (ms) |")
    print("|---|---:|---:|")
    results: dict[tuple[str, bool], list[float]] = {}
    with engine.connect() as conn:
        for _ in range(rounds + 1):
            for collect in (True, False):
                for name, stmt in statements.items():
                    gc.collect()
                    if not collect:
                        gc.disable()
                    began = time.perf_counter()
                    got = conn.execute(stmt).all()
                    elapsed = time.perf_counter() - began
                    gc.enable()
                    assert len(got) == rows
                    del got
                    results.setdefault((name, collect), []).append(elapsed)
    for name in statements:
        on, off = (statistics.median(results[name, c][1:]) * 1000 for c in (True, False))
        print(f"| {name} | {on:.0f} | {off:.0f} |")
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--servers", default=",".join(SERVERS), help="comma-separated names")
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="PostgreSQL (psycopg) only: where the time of a ULIDType read goes",
    )
    args = parser.parse_args()
    if args.breakdown:
        _load(POSTGRESQL_URL, args.rows)
        try:
            bench_breakdown(POSTGRESQL_URL, args.rows, args.rounds)
        finally:
            _drop(POSTGRESQL_URL)
        return
    chosen = [name for name in SERVERS if name in args.servers.split(",")]
    print(
        f"SELECT of {args.rows:,} ids, median of {args.rounds} rounds (ms); "
        f"Python {platform.python_version()}, SQLAlchemy {sa.__version__}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}\n"
    )
    print(
        "| server | ULIDType | ULIDType before | Uuid | raw bytes "
        "| ULIDType / Uuid | before / Uuid | ULIDType / before |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    loaded: set[str] = set()
    try:
        for server in chosen:
            url = SERVERS[server]
            base = url.replace("+asyncpg", "+psycopg")
            if base not in loaded:
                _load(base, args.rows)
                loaded.add(base)
            if "+asyncpg" in url:
                times = asyncio.run(_bench_async(url, args.rows, args.rounds))
            else:
                times = bench_sync(url, args.rows, args.rounds)
            ms = {name: statistics.median(values) * 1000 for name, values in times.items()}
            print(
                f"| {server} | {ms['ULIDType']:.0f} | {ms['ULIDType before']:.0f} "
                f"| {ms['Uuid']:.0f} | {ms['raw']:.0f} "
                f"| {ms['ULIDType'] / ms['Uuid']:.2f}x "
                f"| {ms['ULIDType before'] / ms['Uuid']:.2f}x "
                f"| {ms['ULIDType'] / ms['ULIDType before']:.2f}x |",
                flush=True,
            )
    finally:
        for url in loaded:
            _drop(url)
        if os.path.exists(SQLITE_URL.removeprefix("sqlite:///")):
            os.remove(SQLITE_URL.removeprefix("sqlite:///"))


if __name__ == "__main__":
    main()
