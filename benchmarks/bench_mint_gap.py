"""How old an id is when its row reaches the server: the gap a settle margin must cover.

Each row carries its id and the server's clock as the row was written
(``clock_timestamp()`` on PostgreSQL, ``SYSDATE(6)`` on MariaDB, both read
per row), so the gap is the server's write time minus the id's
millisecond: the time from making the id to its INSERT, plus the skew
between this process's clock and the server's. The writers:

* ``ORM, 1 row per flush``: ``session.add(Event())`` then ``commit()``, the
  id made at flush by ``default=new_ulid``;
* ``ORM, 1,000 rows per flush``: one flush of 1,000 new objects (SQLAlchemy
  sends them in batches, ``insertmanyvalues``);
* ``Core executemany, 10,000 rows``: ``conn.execute(insert(), rows)`` with
  ``default=new_ulid``;
* ``made early``: ``Event(id=new_ulid())`` made, then a 50 ms pause
  standing for application work, then the flush: what the guard refuses
  once the pause exceeds its ``max_age``;
* ``server default``: ``ulid_server_default()`` (``gen_ulid()``).

The ids' milliseconds are whole, so a gap reads up to 1 ms low (an id made
at 10.9 ms reads 10 ms). It also measures the clock skew with
``check_clock_skew``. Prints p50, p99 and max gap in milliseconds per
writer and server.

Run: ``.venv/bin/python benchmarks/bench_mint_gap.py [--rounds 200]``
(URLs from SQLALCHEMY_ULID_POSTGRESQL_URL / SQLALCHEMY_ULID_MYSQL_URL, else
the local test servers).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from _servers import URLS  # benchmarks/ is on sys.path when a script runs
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from sqlalchemy_ulid import (
    ULID,
    ULIDType,
    check_clock_skew,
    install_ulid_function,
    new_ulid,
    ulid_server_default,
)

_NOW = {"postgresql": "clock_timestamp()", "mysql": "SYSDATE(6)"}


class Base(DeclarativeBase):
    pass


def _tables(dialect: str) -> tuple[type[Any], sa.Table]:
    written: Any = sa.DateTime(timezone=True)
    if dialect != "postgresql":
        written = mysql.DATETIME(fsp=6)

    class Event(Base):
        __tablename__ = "bench_mint_gap"
        id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True, default=new_ulid)
        written_at: Mapped[datetime] = mapped_column(written, server_default=sa.text(_NOW[dialect]))

    server = sa.Table(
        "bench_mint_gap_server",
        Base.metadata,
        sa.Column("id", ULIDType(), primary_key=True, server_default=ulid_server_default()),
        sa.Column("n", sa.Integer),
        sa.Column("written_at", written, server_default=sa.text(_NOW[dialect])),
    )
    return Event, server


def _gaps(conn: sa.Connection, table: sa.Table) -> list[float]:
    rows = conn.execute(sa.select(table.c.id, table.c.written_at)).all()
    gaps = []
    for ulid, written in rows:
        if written.tzinfo is None:  # MariaDB: the session's time zone is UTC
            written = written.replace(tzinfo=timezone.utc)
        gaps.append(written.timestamp() * 1000 - ulid.timestamp_ms)
    conn.execute(table.delete())
    return gaps


def bench(url: str, rounds: int) -> list[tuple[str, list[float]]]:
    engine = sa.create_engine(url)
    dialect = engine.dialect.name
    if dialect == "mysql":

        @sa.event.listens_for(engine, "connect")
        def utc(dbapi_connection: Any, record: Any) -> None:
            with dbapi_connection.cursor() as cursor:
                cursor.execute("SET time_zone = '+00:00'")

    Base.metadata.clear()
    Base.registry.dispose()
    event, server = _tables(dialect)
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    with engine.begin() as conn:
        install_ulid_function(conn)
    table = event.__table__
    results: list[tuple[str, list[float]]] = []

    def one_per_flush() -> None:
        with Session(engine) as session:
            session.add(event())
            session.commit()

    def thousand_per_flush() -> None:
        with Session(engine) as session:
            session.add_all([event() for _ in range(1000)])
            session.commit()

    def core_many() -> None:
        with engine.begin() as conn:
            conn.execute(sa.insert(table), [{} for _ in range(10_000)])

    def made_early() -> None:
        with Session(engine) as session:
            obj = event(id=new_ulid())
            time.sleep(0.05)
            session.add(obj)
            session.commit()

    def server_default() -> None:
        with engine.begin() as conn:
            conn.execute(sa.insert(server), [{"n": i} for i in range(100)])

    writers: list[tuple[str, Callable[[], None], int, sa.Table]] = [
        ("ORM, 1 row per flush", one_per_flush, rounds, table),
        ("ORM, 1,000 rows per flush", thousand_per_flush, max(rounds // 20, 3), table),
        ("Core executemany, 10,000 rows", core_many, max(rounds // 50, 3), table),
        ("made early (50 ms before the flush)", made_early, max(rounds // 4, 3), table),
        ("server default (gen_ulid())", server_default, max(rounds // 4, 3), server),
    ]
    for name, write, times, target in writers:
        gaps: list[float] = []
        for _ in range(times):
            write()
            with engine.begin() as conn:
                gaps += _gaps(conn, target)
        results.append((name, gaps))
    skew = check_clock_skew(engine)
    results.append((f"(clock skew bound {skew.bound.total_seconds() * 1000:.2f} ms)", []))
    Base.metadata.drop_all(engine)
    engine.dispose()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}\n")
    print("| server | writer | rows | gap p50 (ms) | gap p99 (ms) | gap max (ms) |")
    print("|---|---|---:|---:|---:|---:|")
    for server, url in URLS.items():
        for name, gaps in bench(url, args.rounds):
            if not gaps:
                print(f"| {server} | {name} | | | | |")
                continue
            gaps.sort()
            p99 = gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))]
            print(
                f"| {server} | {name} | {len(gaps):,} | {statistics.median(gaps):.1f} "
                f"| {p99:.1f} | {gaps[-1]:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
