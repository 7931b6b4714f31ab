"""created_since / created_before / created_between: exact edges, index use."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement, Executable

from conftest import Backend
from sqlalchemy_ulid import ULID, ULIDType, created_before, created_between, created_since

T = 1_712_345_678_901  # 2024-04-05T19:34:38.901Z
T_DT = datetime(2024, 4, 5, 19, 34, 38, 901000, tzinfo=timezone.utc)
MAX_RANDOM = (1 << 80) - 1

metadata = sa.MetaData()
events = sa.Table(
    "timerange_events",
    metadata,
    sa.Column("id", ULIDType(), primary_key=True),
    sa.Column("n", sa.Integer, nullable=False),
)


@pytest.fixture
def table(engine: Engine) -> Iterator[sa.Table]:
    metadata.drop_all(engine)
    metadata.create_all(engine)
    yield events
    metadata.drop_all(engine)


# Rows straddling the millisecond T, named by what they are.
EDGES = {
    "T-1 max": ULID.from_parts(T - 1, MAX_RANDOM),
    "T min": ULID.from_parts(T, 0),
    "T max": ULID.from_parts(T, MAX_RANDOM),
    "T+1 min": ULID.from_parts(T + 1, 0),
    "T+1 max": ULID.from_parts(T + 1, MAX_RANDOM),
    "T+2 min": ULID.from_parts(T + 2, 0),
}
NAME = {value: key for key, value in EDGES.items()}


def names(engine: Engine, clause: sa.ColumnElement[bool]) -> list[str]:
    with engine.connect() as conn:
        found = conn.scalars(sa.select(events.c.id).where(clause).order_by(events.c.id)).all()
    return [NAME[u] for u in found]


# `when` spelled four ways: int ms, aware UTC, another zone, and with
# microseconds below the millisecond (floored, as a ULID floors them).
WHENS = [
    T,
    T_DT,
    T_DT.astimezone(timezone(timedelta(hours=-7))),
    T_DT + timedelta(microseconds=999),
]


@pytest.mark.parametrize("when", WHENS)
def test_millisecond_edges(table: sa.Table, engine: Engine, when: datetime | int) -> None:
    with engine.begin() as conn:
        conn.execute(events.insert(), [{"id": u, "n": 0} for u in EDGES.values()])
    assert names(engine, created_since(events.c.id, when)) == [
        "T min",
        "T max",
        "T+1 min",
        "T+1 max",
        "T+2 min",
    ]
    assert names(engine, created_before(events.c.id, when)) == ["T-1 max"]
    assert names(engine, created_between(events.c.id, when, T + 2)) == [
        "T min",
        "T max",
        "T+1 min",
        "T+1 max",
    ]
    # half-open: [T, T+1) holds exactly the rows of millisecond T
    assert names(engine, created_between(events.c.id, when, T + 1)) == ["T min", "T max"]
    assert names(engine, created_between(events.c.id, when, when)) == []


NAIVE = datetime(2024, 4, 5, 19, 34, 38)


@pytest.mark.parametrize(
    "build",
    [
        lambda: created_since(events.c.id, NAIVE),  # naive datetime
        lambda: created_before(events.c.id, NAIVE),  # naive datetime
        lambda: created_between(events.c.id, NAIVE, T_DT),  # naive start
        lambda: created_between(events.c.id, T_DT, NAIVE),  # naive end
        lambda: created_between(events.c.id, T + 1, T),  # start after end
        lambda: created_between(events.c.id, T_DT, T_DT - timedelta(days=1)),  # start after end
        lambda: created_since(events.c.id, -1),  # before 1970
    ],
)
def test_bad_times_raise_value_error_before_sql(
    table: sa.Table, engine: Engine, statements: list[str], build: Any
) -> None:
    with pytest.raises(ValueError, match=r"naive|after|outside"), engine.connect() as conn:
        conn.execute(sa.select(events.c.id).where(build()))
    assert statements == []


class Base(DeclarativeBase):
    pass


class Event(Base):
    __tablename__ = "timerange_orm_events"
    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True)


def test_orm_attribute_and_bind_type() -> None:
    clause = created_since(Event.id, T)
    assert clause.right.value == ULID.min_at(T)  # type: ignore[attr-defined]
    assert isinstance(clause.right.type, ULIDType)  # type: ignore[attr-defined]


# -- the index serves every range -------------------------------------------------


class Explain(Executable, ClauseElement):
    """``EXPLAIN <statement>`` with the statement's real bind parameters."""

    inherit_cache = False

    def __init__(self, statement: sa.Select[Any], prefix: str) -> None:
        self.statement = statement
        self.prefix = prefix


@compiles(Explain)
def _compile_explain(element: Explain, compiler: SQLCompiler, **kw: Any) -> str:
    sql = f"{element.prefix} {compiler.process(element.statement, **kw)}"
    # The plan's rows are not the statement's rows: drop the result map so
    # the ULID column's result processor is not applied to plan text.
    compiler._result_columns = []
    return sql


def plan(conn: sa.Connection, stmt: sa.Select[Any]) -> list[tuple[Any, ...]]:
    prefix = "EXPLAIN QUERY PLAN" if conn.dialect.name == "sqlite" else "EXPLAIN"
    return [tuple(row) for row in conn.execute(Explain(stmt, prefix)).all()]


COLUMN_CLAUSE = re.compile(r"^timerange_events\.id (>=|<) \S+( AND timerange_events\.id < \S+)?$")


@pytest.mark.parametrize(
    "clause",
    [
        lambda: created_since(events.c.id, T + 1900 * 1000),
        lambda: created_before(events.c.id, T + 100 * 1000),
        lambda: created_between(events.c.id, T + 1000 * 1000, T + 1050 * 1000),
    ],
    ids=["since", "before", "between"],
)
def test_index_serves_the_range(
    backend: Backend, engine: Engine, table: sa.Table, clause: Any
) -> None:
    where = clause()
    # A bare comparison of the column itself: nothing wraps it.
    assert COLUMN_CLAUSE.match(str(where.compile(engine))), str(where.compile(engine))
    rows = [{"id": ULID.from_parts(T + n * 1000, n), "n": n} for n in range(2000)]
    with engine.begin() as conn:
        conn.execute(events.insert(), rows)
        if backend.name == "postgresql":
            conn.exec_driver_sql("ANALYZE timerange_events")
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        elif backend.name == "mysql":
            conn.exec_driver_sql("ANALYZE TABLE timerange_events").all()
        found = plan(conn, sa.select(events).where(where))
        count = conn.scalar(sa.select(sa.func.count()).select_from(events).where(where))
    assert count in (50, 100)
    text = " ".join(str(cell) for row in found for cell in row)
    if backend.name == "postgresql":
        assert "Index Scan using timerange_events_pkey" in text, text
        # the whole predicate is the index condition: nothing left to filter
        assert re.search(r"Index Cond: \(+id [<>]=? '", text), text
        assert "Filter" not in text, text
        assert "Seq Scan" not in text, text
    elif backend.name == "mysql":
        (only,) = found
        fields = ["id", "select_type", "table", "type", "possible_keys", "key"]
        row = dict(zip(fields, only[: len(fields)], strict=True))
        assert (row["type"], row["key"]) == ("range", "PRIMARY"), found
    else:
        assert re.search(r"SEARCH timerange_events USING (INDEX \w+|PRIMARY KEY) \(id", text), text


@pytest.mark.parametrize("build", [created_since, created_before])
def test_a_datetime_before_1970_is_a_value_error_about_the_datetime(
    table: sa.Table, engine: Engine, statements: list[str], build: Any
) -> None:
    from sqlalchemy_ulid import InvalidULID

    when = datetime(1960, 3, 1, 12, tzinfo=timezone.utc)
    shown = r"1960-03-01T12:00:00\+00:00 is before 1970"
    with pytest.raises(ValueError, match=shown) as info, engine.connect() as conn:
        conn.execute(sa.select(events.c.id).where(build(events.c.id, when)))
    # The argument is a datetime, not an id: the error is not InvalidULID.
    assert not isinstance(info.value, InvalidULID)
    assert statements == []
