"""PostgreSQL time partitions on ULID bounds: DDL, routing, pruning, refusals."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Engine

from conftest import Backend
from sqlalchemy_ulid import ULID, ULIDType, create_partitions, created_since, partition_ddl
from test_timerange import Explain

MAX_RANDOM = (1 << 80) - 1
DAY1 = datetime(2024, 4, 1, tzinfo=timezone.utc)

metadata = sa.MetaData()
events = sa.Table(
    "part_events",
    metadata,
    sa.Column("id", ULIDType(), primary_key=True),
    sa.Column("n", sa.Integer, nullable=False),
    postgresql_partition_by="RANGE (id)",
)
binary_events = sa.Table(
    "part_events_bytea",
    sa.MetaData(),
    sa.Column("id", ULIDType("binary"), primary_key=True),
    postgresql_partition_by="RANGE (id)",
)


def test_day_bounds_are_zero_randomness_ulids() -> None:
    ddl = partition_ddl(events.c.id, date(2024, 4, 1), date(2024, 4, 3))
    day2 = DAY1 + timedelta(days=1)
    day3 = DAY1 + timedelta(days=2)
    literal = postgresql.dialect()  # type: ignore[no-untyped-call]
    render = ULIDType().literal_processor(literal)
    assert ddl == [
        f"CREATE TABLE part_events_p20240401 PARTITION OF part_events FOR VALUES "
        f"FROM ({render(ULID.min_at(DAY1))}) TO ({render(ULID.min_at(day2))})",
        f"CREATE TABLE part_events_p20240402 PARTITION OF part_events FOR VALUES "
        f"FROM ({render(ULID.min_at(day2))}) TO ({render(ULID.min_at(day3))})",
    ]


def test_months_cross_the_year_and_bounds_follow_storage() -> None:
    ddl = partition_ddl(
        binary_events.c.id,
        datetime(2023, 11, 20, 15, tzinfo=timezone(timedelta(hours=2))),  # floored to Nov 1
        date(2024, 2, 1),
        interval="month",
    )
    assert [statement.split()[2] for statement in ddl] == [
        "part_events_bytea_p202311",
        "part_events_bytea_p202312",
        "part_events_bytea_p202401",
    ]
    jan = ULID.min_at(datetime(2024, 1, 1, tzinfo=timezone.utc))
    # A BYTEA column gets bytea bounds, from the type's own literal processor.
    assert f"'\\x{jan.hex}'::bytea" in ddl[1]
    assert f"'\\x{jan.hex}'::bytea" in ddl[2]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dialect": mysql.dialect()}, "PostgreSQL"),  # MariaDB has no such partitions
        ({"dialect": sqlite.dialect()}, "PostgreSQL"),  # nor SQLite
        ({"interval": "week"}, "interval"),  # only day and month
        ({"start": datetime(2024, 4, 1)}, "naive"),  # naive start
        ({"start": date(2024, 4, 5)}, "after"),  # start after end
    ],
)
def test_partition_ddl_refusals(kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"start": date(2024, 4, 1), "end": date(2024, 4, 3)} | kwargs
    with pytest.raises(ValueError, match=message):
        partition_ddl(events.c.id, **arguments)


def test_postgresql_routes_and_prunes_others_refuse(
    backend: Backend, engine: Engine, statements: list[str]
) -> None:
    if backend.name != "postgresql":
        # Other servers: a clear refusal, and not one statement sent.
        with engine.connect() as conn, pytest.raises(ValueError, match="PostgreSQL feature"):
            create_partitions(conn, events.c.id, date(2024, 4, 1), date(2024, 4, 6))
        assert statements == []
        return

    metadata.drop_all(engine)
    try:
        with engine.begin() as conn:
            metadata.create_all(conn)
            created = create_partitions(conn, events.c.id, date(2024, 4, 1), date(2024, 4, 6))
            assert len(created) == 5
            # Each day's first and last possible ULID, plus the last of the
            # day before, which must land in the previous partition.
            rows = []
            for day in range(5):
                start = DAY1 + timedelta(days=day)
                rows.append({"id": ULID.min_at(start), "n": day})
                last_ms = ULID.min_at(start).timestamp_ms + 86_400_000 - 1
                rows.append({"id": ULID.from_parts(last_ms, MAX_RANDOM), "n": day})
            conn.execute(events.insert(), rows)
            placed = conn.execute(
                sa.text(
                    "SELECT tableoid::regclass::text AS part, min(n), max(n), count(*) "
                    "FROM part_events GROUP BY 1 ORDER BY 1"
                )
            ).all()
            assert [tuple(row) for row in placed] == [
                (f"part_events_p2024040{day + 1}", day, day, 2) for day in range(5)
            ]

            since = created_since(events.c.id, DAY1 + timedelta(days=3, hours=12))
            stmt = sa.select(events.c.n).where(since)
            plan = "\n".join(row[0] for row in conn.execute(Explain(stmt, "EXPLAIN")))
            assert "part_events_p20240404" in plan, plan
            assert "part_events_p20240405" in plan, plan
            for pruned in ("p20240401", "p20240402", "p20240403"):
                assert f"part_events_{pruned}" not in plan, plan
            assert sorted(conn.scalars(stmt)) == [3, 4, 4]  # day 4's last row, day 5's two
    finally:
        metadata.drop_all(engine)


def test_partition_ddl_without_a_connection_makes_working_bytea_partitions(
    backend: Backend, engine: Engine
) -> None:
    """partition_ddl() renders bounds itself: on SQLAlchemy 2.0 the compiler
    doubled the backslash of a bytea literal, and rows found no partition."""
    if backend.name != "postgresql":
        return  # range partitions are PostgreSQL's (refusals tested above)
    ddl = partition_ddl(binary_events.c.id, date(2024, 4, 1), date(2024, 4, 3))
    assert all("'\\x018e" in statement and "'\\\\x" not in statement for statement in ddl)
    binary_events.drop(engine, checkfirst=True)
    try:
        with engine.begin() as conn:
            binary_events.create(conn)
            for statement in ddl:
                conn.exec_driver_sql(statement)
            conn.execute(
                binary_events.insert(),
                [
                    {"id": ULID.min_at(DAY1)},
                    {"id": ULID.from_parts(ULID.min_at(DAY1).timestamp_ms + 86_400_000, 5)},
                ],
            )
            placed = (
                conn.execute(
                    sa.text("SELECT tableoid::regclass::text FROM part_events_bytea ORDER BY id")
                )
                .scalars()
                .all()
            )
        assert placed == ["part_events_bytea_p20240401", "part_events_bytea_p20240402"]
    finally:
        binary_events.drop(engine, checkfirst=True)


LONG = "part_" + "e" * 55  # 60 characters: with "_p20240401" over 63 bytes


def test_create_partitions_is_idempotent_and_long_names_stay_distinct(
    backend: Backend, engine: Engine
) -> None:
    long_table = sa.Table(
        LONG,
        sa.MetaData(),
        sa.Column("id", ULIDType(), primary_key=True),
        postgresql_partition_by="RANGE (id)",
    )
    names = [
        s.split()[2] for s in partition_ddl(long_table.c.id, date(2024, 4, 1), date(2024, 4, 3))
    ]
    assert len(set(names)) == 2
    assert all(len(name.strip('"').encode()) <= 63 for name in names)
    if backend.name != "postgresql":
        return
    long_table.drop(engine, checkfirst=True)
    try:
        with engine.begin() as conn:
            long_table.create(conn)
            first = create_partitions(conn, long_table.c.id, date(2024, 4, 1), date(2024, 4, 3))
            # "The next days" again, one day later: only the new one is made.
            again = create_partitions(conn, long_table.c.id, date(2024, 4, 1), date(2024, 4, 4))
            assert len(first) == 2
            assert len(again) == 1
            assert "p20240403" in again[0]
            conn.execute(
                long_table.insert(),
                [{"id": ULID.min_at(DAY1 + timedelta(days=d))} for d in range(3)],
            )
            count = conn.execute(
                sa.text("SELECT count(*) FROM pg_inherits WHERE inhparent = CAST(:t AS regclass)"),
                {"t": LONG},
            ).scalar()
            assert count == 3
    finally:
        long_table.drop(engine, checkfirst=True)
