"""ULIDType on real SQLite, PostgreSQL and MariaDB: storage, order, binds, literals."""

from __future__ import annotations

import os
import uuid
from typing import Any

import asyncpg.pgproto.pgproto as asyncpg_proto
import pytest
import sqlalchemy as sa
import ulid as python_ulid
from sqlalchemy import exc
from sqlalchemy.engine import Engine

from conftest import recording
from sqlalchemy_ulid import ULID, InvalidULID, ULIDType, new_ulid
from sqlalchemy_ulid._types import to_bytes

STORAGES = ("auto", "binary", "text")

# What the database reports for each storage, by backend.
REFLECTED = {
    ("sqlite", "auto"): "BLOB",
    ("sqlite", "binary"): "BLOB",
    ("sqlite", "text"): "CHAR(26)",
    ("postgresql", "auto"): "UUID",
    ("postgresql", "binary"): "BYTEA",
    ("postgresql", "text"): "CHAR(26)",
    ("mysql", "auto"): "BINARY(16)",
    ("mysql", "binary"): "BINARY(16)",
    ("mysql", "text"): "CHAR(26)",
}


def _edge_ulids() -> list[ULID]:
    """Bytes 00, 7F, 80 and FF at each of the 16 positions, plus the extremes."""
    values = {ULID.from_bytes(bytes(16)), ULID.from_bytes(b"\xff" * 16)}
    for position in range(16):
        for byte in (0x00, 0x7F, 0x80, 0xFF):
            data = bytearray(b"\x41" * 16)
            data[position] = byte
            values.add(ULID.from_bytes(bytes(data)))
    values.update(ULID.from_bytes(os.urandom(16)) for _ in range(20))
    return sorted(values)


EDGES = _edge_ulids()


def _table(metadata: sa.MetaData, column_type: ULIDType, name: str = "ut_ulids") -> sa.Table:
    return sa.Table(
        name,
        metadata,
        sa.Column("id", column_type, primary_key=True),
        sa.Column("n", sa.Integer, nullable=False, default=0),
    )


@pytest.mark.parametrize("storage", STORAGES)
def test_reflected_column_type_is_the_intended_storage(
    engine: Engine, metadata: sa.MetaData, storage: str
) -> None:
    _table(metadata, ULIDType(storage)).create(engine)  # type: ignore[arg-type]
    column = next(c for c in sa.inspect(engine).get_columns("ut_ulids") if c["name"] == "id")
    reflected = column["type"].compile(dialect=engine.dialect)
    assert reflected.split(" ")[0] == REFLECTED[engine.dialect.name, storage]


def test_mariadb_text_storage_uses_a_binary_collation(
    engine: Engine, metadata: sa.MetaData
) -> None:
    _table(metadata, ULIDType("text")).create(engine)
    if engine.dialect.name == "sqlite":  # no collation: SQLite compares text bytewise
        column = next(c for c in sa.inspect(engine).get_columns("ut_ulids") if c["name"] == "id")
        assert getattr(column["type"], "collation", None) is None
        return
    # Read the server's catalog, not SQLAlchemy's reflection: PostgreSQL column
    # collations are reflected only from SQLAlchemy 2.0.45 on.
    schema = "current_schema()" if engine.dialect.name == "postgresql" else "DATABASE()"
    catalog = sa.text(
        "SELECT collation_name FROM information_schema.columns"
        f" WHERE table_schema = {schema} AND table_name = 'ut_ulids' AND column_name = 'id'"
    )
    with engine.connect() as conn:
        collation = conn.scalar(catalog)
    assert collation == {"mysql": "ascii_bin", "postgresql": "C"}[engine.dialect.name]


@pytest.mark.parametrize("storage", STORAGES)
def test_database_order_is_ulid_order_with_edge_bytes(
    engine: Engine, metadata: sa.MetaData, storage: str
) -> None:
    table = _table(metadata, ULIDType(storage))  # type: ignore[arg-type]
    metadata.create_all(engine)
    shuffled = sorted(EDGES, key=lambda u: u.bytes[::-1])
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": u, "n": i} for i, u in enumerate(shuffled)])
        assert conn.scalars(sa.select(table.c.id).order_by(table.c.id)).all() == EDGES
        assert conn.scalars(sa.select(table.c.id).order_by(table.c.id.desc())).all() == EDGES[::-1]
        for low, high in [(EDGES[3], EDGES[-4]), (EDGES[40], EDGES[41]), (EDGES[0], EDGES[-1])]:
            between = sa.select(table.c.id).where(table.c.id.between(low, high))
            assert conn.scalars(between.order_by(table.c.id)).all() == [
                u for u in EDGES if low <= u <= high
            ]
        for pivot in EDGES[::7]:
            below = conn.scalars(sa.select(table.c.id).where(table.c.id < pivot)).all()
            above = conn.scalars(sa.select(table.c.id).where(table.c.id > pivot)).all()
            assert sorted(below) == [u for u in EDGES if u < pivot]
            assert sorted(above) == [u for u in EDGES if u > pivot]


def test_bulk_default_new_ulid_reads_back_in_creation_order(
    engine: Engine, metadata: sa.MetaData
) -> None:
    table = sa.Table(
        "ut_bulk",
        metadata,
        sa.Column("id", ULIDType(), primary_key=True, default=new_ulid),
        sa.Column("n", sa.Integer, nullable=False),
    )
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"n": i} for i in range(10_000)])
        order = conn.scalars(sa.select(table.c.n).order_by(table.c.id)).all()
    assert order == list(range(10_000))


class UlidPyLike:
    """Shaped like ulid-py's ULID: a memoryview wrapper exposing ``.bytes``.

    ulid-py and python-ulid both install a top-level package named ``ulid``,
    so they cannot be installed side by side; python-ulid is the real one
    here, and this class stands in for ulid-py's shape.
    """

    def __init__(self, data: bytes) -> None:
        self.memory = memoryview(data)

    @property
    def bytes(self) -> bytes:
        return self.memory.tobytes()


def _foreign_binds(u: ULID) -> list[tuple[str, object]]:
    return [
        ("ULID", u),
        ("upper str", str(u)),
        ("lower str", str(u).lower()),
        ("mixed-case str", "".join(c.lower() if i % 2 else c for i, c in enumerate(str(u)))),
        ("uuid.UUID", uuid.UUID(bytes=u.bytes)),
        ("asyncpg UUID", asyncpg_proto.UUID(u.bytes)),
        ("16 bytes", u.bytes),
        ("bytearray", bytearray(u.bytes)),
        ("memoryview", memoryview(u.bytes)),
        ("python-ulid", python_ulid.ULID.from_bytes(u.bytes)),
        ("ulid-py shape", UlidPyLike(u.bytes)),
    ]


@pytest.mark.parametrize("storage", STORAGES)
def test_every_accepted_bind_stores_and_finds_the_same_ulid(
    engine: Engine, metadata: sa.MetaData, storage: str
) -> None:
    table = _table(metadata, ULIDType(storage))  # type: ignore[arg-type]
    metadata.create_all(engine)
    ids = [new_ulid() for _ in range(11)]
    binds = [_foreign_binds(u)[i] for i, u in enumerate(ids)]
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": value, "n": i} for i, (_, value) in enumerate(binds)])
        assert conn.scalars(sa.select(table.c.id).order_by(table.c.n)).all() == ids
        for label, value in _foreign_binds(ids[0]):
            found = conn.scalar(sa.select(table.c.n).where(table.c.id == value))
            assert found == 0, label


def test_comparisons_with_plain_strings_bind_through_the_type(
    engine: Engine, metadata: sa.MetaData
) -> None:
    table = _table(metadata, ULIDType())
    metadata.create_all(engine)
    ids = [new_ulid() for _ in range(5)]
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": u, "n": i} for i, u in enumerate(ids)])
        lower = [str(u).lower() for u in ids]
        assert conn.scalar(sa.select(table.c.n).where(table.c.id == lower[2])) == 2
        assert conn.scalar(sa.select(table.c.n).where(table.c.id != lower[2]).limit(1)) != 2
        above = sa.select(table.c.n).where(table.c.id > lower[2]).order_by(table.c.id)
        assert conn.scalars(above).all() == [3, 4]
        below = sa.select(table.c.n).where(table.c.id <= str(ids[1])).order_by(table.c.id)
        assert conn.scalars(below).all() == [0, 1]
        chosen = sa.select(table.c.n).where(
            table.c.id.in_([lower[0], uuid.UUID(bytes=ids[3].bytes), ids[4]])
        )
        assert sorted(conn.scalars(chosen)) == [0, 3, 4]
        assert conn.scalars(sa.select(table.c.n).where(table.c.id.not_in(lower[1:]))).all() == [0]


BAD_BINDS = [
    pytest.param(12345, TypeError, id="int: never a ULID"),
    pytest.param(1.5, TypeError, id="float"),
    pytest.param(object(), TypeError, id="arbitrary object"),
    pytest.param("01HTQW311N1KR5G0Y75M3EF00U", InvalidULID, id="text with U"),
    pytest.param("01HTQW311N1KR5G0Y75M3EF00", InvalidULID, id="25 characters"),
    pytest.param("01HTQW311N1KR5G0Y75M3EF00HX", InvalidULID, id="27 characters"),
    pytest.param("81HTQW311N1KR5G0Y75M3EF00H", InvalidULID, id="over 128 bits"),
    pytest.param("01HTQW311N-KR5G0Y75M3EF00H", InvalidULID, id="hyphen"),
    pytest.param("", InvalidULID, id="empty text"),
    pytest.param(b"\x01" * 15, InvalidULID, id="15 bytes"),
    pytest.param(b"\x01" * 17, InvalidULID, id="17 bytes"),
]


@pytest.mark.parametrize(("value", "error"), BAD_BINDS)
def test_bad_binds_are_rejected_before_any_sql_runs(
    engine: Engine, metadata: sa.MetaData, value: object, error: type[Exception]
) -> None:
    table = _table(metadata, ULIDType())
    metadata.create_all(engine)
    kept = new_ulid()
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": kept, "n": 1}])
    # A value in VALUES is checked by the bind processor, at execute time...
    with recording(engine) as sent, engine.connect() as conn:
        with pytest.raises(exc.StatementError) as raised:
            conn.execute(table.insert().values(id=value, n=2))
        assert sent == []
    assert isinstance(raised.value.orig, error), raised.value.orig
    # ...a compared one when the expression is built: no statement exists.
    comparisons = [
        lambda: table.c.id == value,
        lambda: table.c.id.in_([kept, value]),
        lambda: table.c.id > value,
        lambda: table.c.id.between(kept, value),
    ]
    for compare in comparisons:
        with pytest.raises(error):
            compare()
    with engine.connect() as conn:
        assert conn.execute(sa.select(table.c.id, table.c.n)).all() == [(kept, 1)]


def test_bad_bind_in_executemany_writes_nothing(engine: Engine, metadata: sa.MetaData) -> None:
    table = _table(metadata, ULIDType())
    metadata.create_all(engine)
    rows = [{"id": new_ulid(), "n": i} for i in range(5)] + [{"id": "not a ulid", "n": 5}]
    with (
        recording(engine) as sent,
        pytest.raises(exc.StatementError) as raised,
        engine.begin() as conn,
    ):
        conn.execute(table.insert(), rows)
    assert isinstance(raised.value.orig, InvalidULID)
    assert not any(s.lstrip().upper().startswith("INSERT") for s in sent)
    with engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(table)) == 0


@pytest.mark.parametrize("storage", STORAGES)
def test_literal_binds_render_sql_that_each_server_runs(
    engine: Engine, metadata: sa.MetaData, storage: str
) -> None:
    table = _table(metadata, ULIDType(storage))  # type: ignore[arg-type]
    metadata.create_all(engine)
    ids = [EDGES[0], EDGES[-1], *EDGES[30:33], new_ulid()]

    def render(statement: sa.Executable) -> str:
        compiled = statement.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True})
        return str(compiled)

    with engine.begin() as conn:
        for i, u in enumerate(ids):
            conn.exec_driver_sql(render(table.insert().values(id=u, n=i)))
        assert conn.scalars(sa.select(table.c.id).order_by(table.c.id)).all() == sorted(ids)
        for i, u in enumerate(ids):
            found = conn.exec_driver_sql(render(sa.select(table.c.n).where(table.c.id == u)))
            assert found.scalar() == i
        in_list = sa.select(table.c.id).where(table.c.id.in_(ids[:3])).order_by(table.c.id)
        raw = conn.exec_driver_sql(render(in_list)).scalars().all()
        assert (
            [ULIDType(storage).process_result_value(v, engine.dialect) for v in raw]
            == sorted(  # type: ignore[arg-type]
                ids[:3]
            )
        )


def test_results_are_ulid_objects_or_canonical_strings(
    engine: Engine, metadata: sa.MetaData
) -> None:
    table = _table(metadata, ULIDType())
    as_str = sa.Table("ut_ulids", sa.MetaData(), sa.Column("id", ULIDType(as_str=True)))
    metadata.create_all(engine)
    u = new_ulid()
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": str(u).lower(), "n": 1}])
        got = conn.scalar(sa.select(table.c.id))
        text = conn.scalar(sa.select(as_str.c.id))
        assert conn.scalar(sa.select(as_str.c.id).where(as_str.c.id == u)) == str(u)
    assert type(got) is ULID
    assert got == u
    assert type(text) is str
    assert text == str(u)


def test_null_round_trips(engine: Engine, metadata: sa.MetaData) -> None:
    table = sa.Table(
        "ut_nullable",
        metadata,
        sa.Column("n", sa.Integer, primary_key=True),
        sa.Column("ref", ULIDType()),
    )
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"n": 1, "ref": None}])
        assert conn.scalar(sa.select(table.c.ref)) is None
        assert conn.scalar(sa.select(table.c.n).where(table.c.ref.is_(None))) == 1


def test_differently_configured_types_never_share_a_cache_key(
    engine: Engine, metadata: sa.MetaData
) -> None:
    def light_table(column_type: ULIDType) -> sa.TableClause:
        return sa.table("ut_cached", sa.column("id", column_type))

    def select(column_type: ULIDType) -> sa.Select[Any]:
        table = light_table(column_type)
        return sa.select(table.c.id).where(table.c.id > ULID.from_bytes(bytes(16)))

    text_key = select(ULIDType("text"))._generate_cache_key()
    binary_key = select(ULIDType())._generate_cache_key()
    str_key = select(ULIDType(as_str=True))._generate_cache_key()
    assert text_key != binary_key
    assert text_key != str_key
    assert binary_key != str_key
    # Equal configurations do share a key: caching still works.
    assert select(ULIDType("text"))._generate_cache_key() == text_key

    u = new_ulid()
    for storage in ("text", "auto", "text"):
        column_type = ULIDType(storage)  # type: ignore[arg-type]
        real = sa.Table("ut_cached", sa.MetaData(), sa.Column("id", column_type, primary_key=True))
        with engine.begin() as conn:
            real.create(conn)
            # Statements identical but for the type: each must run with its
            # own bind processor, which the raw stored value proves.
            conn.execute(light_table(column_type).insert().values(id=u))
            assert conn.execute(select(column_type)).scalar() == u
            raw = conn.execute(sa.text("SELECT id FROM ut_cached")).scalar()
            real.drop(conn)
        if storage == "text":
            assert raw.strip() == str(u)
        else:
            assert to_bytes(raw) == u.bytes


@pytest.mark.parametrize(
    "column_type",
    [
        ULIDType(),
        ULIDType("native"),
        ULIDType("binary"),
        ULIDType("text"),
        ULIDType(as_str=True),
        ULIDType("text", as_str=True),
    ],
    ids=repr,
)
def test_repr_reproduces_the_configuration(column_type: ULIDType) -> None:
    again = eval(repr(column_type), {"ULIDType": ULIDType})
    assert (again.storage, again.as_str) == (column_type.storage, column_type.as_str)
    assert repr(again) == repr(column_type)


def test_unknown_storage_is_rejected() -> None:
    with pytest.raises(ValueError, match="storage must be one of"):
        ULIDType("uuid")  # type: ignore[arg-type]
