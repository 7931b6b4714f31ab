"""CockroachDB, compile-tested only: one module in ``_dialects/`` (issue 32).

No CockroachDB server runs here. These tests compile every query helper with
``sqlalchemy-cockroachdb``'s own dialect and check the SQL against what
CockroachDB documents (no PostgreSQL-only function, operator or clause),
check what is refused, and run the generators' SQL bodies on PostgreSQL,
which has the same functions, to check what they make.

``sqlalchemy-cockroachdb`` supports SQLAlchemy < 2.1 only: it is the
``tests-cockroachdb`` extra, installed by the CI job on SQLAlchemy 2.0.
"""

from __future__ import annotations

import importlib
import os
import re
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from sqlalchemy_ulid import (
    ULID,
    SettleError,
    ULIDType,
    create_partitions,
    created_between,
    created_since,
    new_ulid,
    paginate,
    partition_ddl,
    ulid_function_ddl,
    ulid_server_default,
    ulid_timestamp,
    uuid7_function_ddl,
    uuid7_server_default,
)
from sqlalchemy_ulid._dialects import cockroachdb, dialect_row
from sqlalchemy_ulid._paging._plan import plan_page
from sqlalchemy_ulid._paging._run import _steps
from sqlalchemy_ulid.contrib.cockroachdb import hash_sharded_primary_key

if os.environ.get("SQLALCHEMY_ULID_REQUIRE_COCKROACHDB"):
    # The CI job that installs the extra sets this: there a missing dialect
    # fails the run instead of skipping every test here.
    crdb = importlib.import_module("sqlalchemy_cockroachdb.psycopg")
else:
    crdb = pytest.importorskip(
        "sqlalchemy_cockroachdb.psycopg",
        reason="sqlalchemy-cockroachdb (the tests-cockroachdb extra) supports SQLAlchemy < 2.1",
    )

# What PostgreSQL has and CockroachDB does not document (or means otherwise):
# uuid_send/get_byte/set_config (no such functions), ::bit casts, '= ANY'
# over a typed array of ours, NULLS FIRST/LAST (emulated here), timezone(),
# the integer '/' (a DECIMAL in CockroachDB), PL/pgSQL and partitions.
_NOT_COCKROACH = re.compile(
    r"uuid_send|get_byte|set_byte|set_config|::bit|= ANY|<> ALL|NULLS (FIRST|LAST)"
    r"|timezone\(|plpgsql|PARTITION OF|pg_",
    re.IGNORECASE,
)


@pytest.fixture
def dialect() -> Any:
    return crdb.CockroachDBDialect_psycopg()


events = sa.Table(
    "events",
    sa.MetaData(),
    sa.Column("id", ULIDType(), primary_key=True),
    sa.Column("kind", sa.String(10)),
    sa.Column("n", sa.Integer),
)
uuids = sa.Table("uuids", sa.MetaData(), sa.Column("id", sa.Uuid(), primary_key=True))


def _sql(statement: Any, dialect: Any, literal: bool = False) -> str:
    kwargs = {"literal_binds": True} if literal else {}
    text = str(statement.compile(dialect=dialect, compile_kwargs=kwargs))
    assert not _NOT_COCKROACH.search(text), text
    return text


def test_the_dialect_has_its_own_row(dialect: Any) -> None:
    row = dialect_row(dialect)
    assert row is cockroachdb.ROW
    assert row.native == "uuid"
    assert row.paging.nulls_largest is False  # NULL sorts first ascending
    assert row.settle is None
    assert not row.range_partitions


def _page_sql(dialect: Any, stmt: Any, column: Any, **kw: Any) -> str:
    defaults: dict[str, Any] = {"after": None, "before": None, "limit": 10, "descending": False}
    defaults.update(kw)
    plan = plan_page(
        stmt,
        column,
        defaults["after"],
        defaults["before"],
        defaults["limit"],
        defaults["descending"],
        False,
        max_limit=1000,
        settle=None,
        margin=timedelta(seconds=1),
        dialect=lambda: dialect,
        total=None,
    )
    statement, _ = next(_steps(plan))
    return _sql(statement, dialect)


@pytest.mark.parametrize("descending", [False, True])
def test_pages_by_the_id(dialect: Any, descending: bool) -> None:
    cursor = new_ulid()
    sql = _page_sql(
        dialect, sa.select(events), events.c.id, after=str(cursor), descending=descending
    )
    assert re.search(r"events\.id [<>]= %\(\w+\)s", sql), sql
    assert "LIMIT" in sql
    assert ("ORDER BY events.id DESC" if descending else "ORDER BY events.id") in sql


def test_pages_by_several_keys(dialect: Any) -> None:
    keyed = sa.Table(
        "keyed",
        sa.MetaData(),
        sa.Column("id", ULIDType(), primary_key=True),
        sa.Column("n", sa.Integer, nullable=False),
    )
    stmt = sa.select(keyed).order_by(keyed.c.n, keyed.c.id)
    first = _page_sql(dialect, stmt, keyed.c.id)
    assert "ORDER BY keyed.n ASC, keyed.id ASC" in first
    assert "LIMIT" in first


def test_time_ranges_compare_the_key(dialect: Any) -> None:
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    sql = _sql(sa.select(events).where(created_since(events.c.id, start)), dialect)
    assert re.search(r"events\.id >= %\(\w+\)s", sql), sql
    sql = _sql(
        sa.select(uuids).where(created_between(uuids.c.id, start, start + timedelta(days=1))),
        dialect,
    )
    assert re.search(r"uuids\.id >= %\(\w+\)s::UUID AND uuids\.id < %\(\w+\)s::UUID", sql), sql


@pytest.mark.parametrize("storage", ["auto", "binary", "text"])
def test_ulid_timestamp_reads_the_key_as_text(dialect: Any, storage: str) -> None:
    table = sa.Table("t", sa.MetaData(), sa.Column("id", ULIDType(storage)))  # type: ignore[arg-type]
    sql = _sql(sa.select(ulid_timestamp(table.c.id)), dialect)
    assert "strpos(" in sql
    assert "// 86400000" in sql  # integer division (a bare / makes a DECIMAL)
    assert "TIMESTAMP '1970-01-01 00:00:00'" in sql


def test_ulid_timestamp_of_a_uuid_column(dialect: Any) -> None:
    sql = _sql(sa.select(ulid_timestamp(uuids.c.id)), dialect)
    assert "CAST(uuids.id AS TEXT)" in sql


def test_in_lists_are_plain_in(dialect: Any) -> None:
    ids = [new_ulid() for _ in range(3)]
    sql = _sql(sa.select(events).where(events.c.id.in_(ids)), dialect)
    assert "events.id IN (__[POSTCOMPILE_" in sql
    literal = _sql(sa.select(events).where(events.c.id.in_(ids)), dialect, literal=True)
    for one in ids:
        assert f"CAST('{one.to_uuid().hex}' AS UUID)" in literal


def test_bulk_returning_reads_the_uuid_itself(dialect: Any) -> None:
    sql = _sql(sa.insert(events).returning(events.c.id, sort_by_parameter_order=True), dialect)
    # the uuid as it is (PostgreSQL's uuid_send() is not there)
    assert sql.endswith("RETURNING events.id AS id"), sql


def test_the_server_defaults_are_sql_functions(dialect: Any) -> None:
    (ulid,) = ulid_function_ddl(dialect)
    (uuid7,) = uuid7_function_ddl(dialect)
    for ddl, name in ((ulid, "gen_ulid"), (uuid7, "gen_uuid7")):
        assert ddl.startswith(
            f"CREATE OR REPLACE FUNCTION {name}() RETURNS UUID VOLATILE LANGUAGE SQL AS 'SELECT "
        )
        assert not _NOT_COCKROACH.search(ddl)
    table = sa.Table(
        "d",
        sa.MetaData(),
        sa.Column("id", ULIDType(), server_default=ulid_server_default()),
        sa.Column("u", sa.Uuid(), server_default=uuid7_server_default()),
    )
    ddl = _sql(sa.schema.CreateTable(table), dialect)
    assert "id UUID DEFAULT (gen_ulid())" in ddl
    assert "u UUID DEFAULT (gen_uuid7())" in ddl


def test_binary_storage_has_no_server_default(dialect: Any) -> None:
    table = sa.Table(
        "b",
        sa.MetaData(),
        sa.Column("id", ULIDType("binary"), server_default=ulid_server_default("binary")),
    )
    with pytest.raises(
        sa.exc.CompileError, match="no server-side ULID generator for 'cockroachdb'"
    ):
        sa.schema.CreateTable(table).compile(dialect=dialect)


def _body(ddl: str) -> str:
    """The SELECT of a function's DDL, unquoted."""
    quoted = ddl.split(" AS '", 1)[1].rstrip("'")
    return quoted.replace("''", "'")


@pytest.mark.parametrize("kind", ["ulid", "uuid7"])
def test_the_generators_make_keys_of_now(backends: dict[str, Any], kind: str) -> None:
    # The bodies use functions PostgreSQL has too: run them there.
    backend_engine: Engine | None = backends["postgresql"].engine
    assert backend_engine is not None, backends["postgresql"].reason
    ddl = cockroachdb.ROW.key_sql("ulid" if kind == "ulid" else "uuid").generator
    assert ddl is not None
    body = _body(ddl.create[0])
    with backend_engine.connect() as conn:
        before = datetime.now(timezone.utc) - timedelta(seconds=1)
        values = [conn.scalar(sa.text(body)) for _ in range(50)]
        after = datetime.now(timezone.utc) + timedelta(seconds=1)
    assert len({v.int for v in values}) == 50
    for value in values:
        assert isinstance(value, uuid.UUID)
        if kind == "ulid":
            assert before <= ULID.from_bytes(value.bytes).datetime <= after
        else:
            assert value.version == 7
            assert value.variant == uuid.RFC_4122
            ms = value.int >> 80
            assert before.timestamp() * 1000 <= ms <= after.timestamp() * 1000


def test_settle_is_refused_before_any_sql(dialect: Any) -> None:
    from sqlalchemy_ulid._settle import plan_horizon

    for settle in ("auto", timedelta(seconds=1)):
        with pytest.raises(SettleError, match="settle= is not supported on cockroachdb"):
            plan_horizon(settle, timedelta(seconds=1), dialect, events.c.id)  # type: ignore[arg-type]


def test_paginate_with_settle_is_refused_before_any_sql(dialect: Any) -> None:
    # Nothing listens on port 1: any SQL would fail to connect, not refuse.
    engine = sa.create_engine("cockroachdb+psycopg://nobody@127.0.0.1:1/none")
    for settle in ("auto", timedelta(seconds=1)):
        with Session(engine) as session, pytest.raises(SettleError, match="not supported on"):
            paginate(session, sa.select(events), events.c.id, settle=settle)


def test_time_partitions_are_refused(dialect: Any) -> None:
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    with pytest.raises(ValueError, match="time partitions are a PostgreSQL feature"):
        partition_ddl(events.c.id, start, start + timedelta(days=2), dialect=dialect)
    assert create_partitions is not None


@pytest.mark.parametrize(("column_type", "ddl_type"), [(ULIDType(), "UUID"), (sa.Uuid(), "UUID")])
@pytest.mark.parametrize("buckets", [None, 8])
def test_hash_sharded_primary_key(
    dialect: Any, column_type: Any, ddl_type: str, buckets: Any
) -> None:
    table = sa.Table(
        "sharded",
        sa.MetaData(),
        sa.Column("id", column_type),
        sa.Column("body", sa.Text),
        hash_sharded_primary_key("id", bucket_count=buckets),
    )
    ddl = _sql(sa.schema.CreateTable(table), dialect)
    # CockroachDB's documented form: PRIMARY KEY (cols) USING HASH [WITH (bucket_count = n)]
    suffix = "" if buckets is None else f" WITH (bucket_count = {buckets})"
    assert f"PRIMARY KEY (id) USING HASH{suffix}\n" in ddl
    assert f"id {ddl_type} NOT NULL" in ddl
    from sqlalchemy.dialects import postgresql

    plain = str(sa.schema.CreateTable(table).compile(dialect=postgresql.dialect()))
    assert "PRIMARY KEY (id)\n" in plain
    assert "HASH" not in plain


@pytest.mark.parametrize("bad", [0, 1, -3, True, 2.5, "8"])
def test_hash_sharded_bucket_count_is_checked(bad: Any) -> None:
    with pytest.raises(ValueError, match="bucket_count must be an int of at least 2"):
        hash_sharded_primary_key("id", bucket_count=bad)


def test_hash_sharded_primary_key_on_the_mixins(dialect: Any) -> None:
    from sqlalchemy.orm import DeclarativeBase, mapped_column

    from sqlalchemy_ulid import ULIDPrimaryKey, UUIDv7PrimaryKey

    class Base(DeclarativeBase):
        pass

    class Event(ULIDPrimaryKey, Base):
        __tablename__ = "sharded_orm_events"
        __table_args__ = (hash_sharded_primary_key("id", bucket_count=4),)
        body = mapped_column(sa.Text)

    class Note(UUIDv7PrimaryKey, Base):
        __tablename__ = "sharded_orm_notes"
        __table_args__ = (hash_sharded_primary_key("id"),)

    for model, suffix in ((Event, " WITH (bucket_count = 4)"), (Note, "")):
        table = model.__table__
        assert [c.name for c in table.primary_key.columns] == ["id"]
        ddl = _sql(sa.schema.CreateTable(table), dialect)
        assert f"PRIMARY KEY (id) USING HASH{suffix}\n" in ddl
