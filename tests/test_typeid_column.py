"""TypeIDType: typed ids in 16 bytes, the prefix checked before any SQL (issue 35, item 2)."""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mssql, mysql, postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import _offline_scripts
from conftest import Backend, recording
from sqlalchemy_ulid import (
    ULID,
    CursorSealer,
    CursorSortMismatch,
    InvalidTypeID,
    SettleError,
    TypeID,
    TypeIDType,
    ULIDType,
    after,
    create_partitions,
    created_before,
    created_between,
    created_since,
    drop_uuid7_function,
    follow,
    install_uuid7_function,
    new_typeid,
    paginate,
    partition_ddl,
    typeid_server_default,
    ulid_timestamp,
    uuid7_max_at,
    uuid7_min_at,
)


class Base(DeclarativeBase):
    pass


# The documented way to declare a typed-id primary key: the column's type
# names the prefix, and the default makes ids with that prefix.
class TUser(Base):
    __tablename__ = "tid_users"

    id: Mapped[TypeID] = mapped_column(
        TypeIDType("user"), primary_key=True, default=lambda: new_typeid("user")
    )
    name: Mapped[str] = mapped_column(sa.String(40), default="")
    org_id: Mapped[TypeID | None] = mapped_column(TypeIDType("org"))


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    Base.metadata.create_all(engine)
    try:
        with Session(engine) as session:
            yield session
    finally:
        Base.metadata.drop_all(engine)


def _count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(TUser.__table__)) or 0)


def _written(sent: list[str]) -> list[str]:
    return [s for s in sent if s.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))]


# -- round trips ---------------------------------------------------------------------


def test_round_trip_returns_typeids_of_the_column_prefix(session: Session, engine: Engine) -> None:
    made = TUser(name="made")
    given = new_typeid("user")
    as_text = new_typeid("user")
    session.add_all([made, TUser(id=given, name="given"), TUser(id=str(as_text), name="text")])
    session.commit()
    session.expire_all()
    rows = session.execute(sa.select(TUser.name, TUser.id).order_by(TUser.name)).all()
    assert {name: value for name, value in rows} == {
        "given": given,
        "made": made.id,
        "text": as_text,
    }
    assert all(type(value) is TypeID and value.prefix == "user" for _, value in rows)
    assert made.id.uuid.version == 7
    # Only the 128 bits are stored: read as a ULID column, the same bits.
    with engine.connect() as conn:
        raw = conn.scalar(
            sa.select(sa.type_coerce(TUser.__table__.c.id, ULIDType())).where(
                TUser.__table__.c.name == "given"
            )
        )
    assert isinstance(raw, ULID)
    assert raw.int == given.int
    # Lookups by a TypeID, by its text, and a str assigned to an attribute.
    assert session.get(TUser, given).name == "given"  # type: ignore[union-attr]
    assert session.scalars(sa.select(TUser.name).where(TUser.id == str(as_text))).one() == "text"
    assert session.scalars(sa.select(TUser.name).where(TUser.id.in_([given, str(as_text)]))).all()
    user = session.get(TUser, made.id)
    assert user is not None
    user.org_id = "org_01h455vb4pex5vsknk084sn02q"  # type: ignore[assignment]
    assert user.org_id == TypeID("org_01h455vb4pex5vsknk084sn02q")
    session.commit()
    session.expire_all()
    assert session.get(TUser, made.id).org_id == user.org_id  # type: ignore[union-attr]


def test_storage_is_16_bytes(session: Session, engine: Engine) -> None:
    with engine.connect() as conn:
        column = {c["name"]: c for c in sa.inspect(conn).get_columns("tid_users")}["id"]
    rendered = str(column["type"]).upper()
    expected = {"postgresql": "UUID", "mysql": "BINARY(16)", "mariadb": "BINARY(16)"}
    assert rendered == expected.get(engine.dialect.name, "BLOB")


def test_literal_binds_find_the_row(session: Session, engine: Engine) -> None:
    user = TUser(name="lit")
    session.add(user)
    session.commit()
    stmt = sa.select(TUser.__table__.c.name).where(TUser.__table__.c.id == user.id)
    sql = str(stmt.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True}))
    assert str(user.id) not in sql  # the bits, in the column's storage, not the text
    with engine.connect() as conn:
        assert conn.scalar(sa.text(sql)) == "lit"


def test_long_in_lists_check_and_find(session: Session) -> None:
    users = [TUser(name=str(i)) for i in range(3)]
    session.add_all(users)
    session.commit()
    ids: list[Any] = [str(new_typeid("user")) for _ in range(1500)]
    ids += [users[0].id, str(users[2].id)]
    found = session.scalars(sa.select(TUser.name).where(TUser.id.in_(ids))).all()
    assert sorted(found) == ["0", "2"]
    with pytest.raises(InvalidTypeID, match="expected prefix 'user', got 'org'"):
        TUser.id.in_([*ids, str(new_typeid("org"))])


def test_bulk_insert_returning_matches_str_ids(session: Session, engine: Engine) -> None:
    table = TUser.__table__
    ids = [new_typeid("user") for _ in range(5)]
    rows = [{"id": str(i), "name": "b"} for i in ids]
    with engine.begin() as conn:
        if "sort_by_parameter_order" in inspect.signature(sa.Insert.returning).parameters:
            stmt = sa.insert(table).returning(table.c.id, sort_by_parameter_order=True)
            returned = conn.scalars(stmt, rows).all()
        else:  # SQLAlchemy < 2.0.10 (the floor): one RETURNING per row
            stmt = sa.insert(table).returning(table.c.id)
            returned = [conn.scalars(stmt, row).one() for row in rows]
    assert returned == ids


# -- wrong prefixes ------------------------------------------------------------------

WRONG = [
    pytest.param("org_01h455vb4pex5vsknk084sn02q", "got 'org'", id="another prefix"),
    pytest.param("01h455vb4pex5vsknk084sn02q", "got none", id="no prefix"),
    pytest.param(TypeID("org_01h455vb4pex5vsknk084sn02q"), "got 'org'", id="another TypeID"),
    pytest.param("user_01H455VB4PEX5VSKNK084SN02Q", "uppercase", id="uppercase suffix"),
    pytest.param("user_8zzzzzzzzzzzzzzzzzzzzzzzzz", "start with 0-7", id="over 128 bits"),
]


@pytest.mark.parametrize(("bad", "message"), WRONG)
def test_wrong_prefix_is_refused_before_any_sql(
    session: Session, engine: Engine, bad: Any, message: str
) -> None:
    user = TUser(name="kept")
    session.add(user)
    session.commit()
    kept = user.id  # loaded here: nothing below needs to SELECT
    table = TUser.__table__
    with recording(engine) as sent:
        # Expressions: refused when built.
        for build in (
            lambda: TUser.id == bad,
            lambda: TUser.id != bad,
            lambda: TUser.id > bad,
            lambda: TUser.id.between(kept, bad),
            lambda: TUser.id.in_([kept, bad]),
            lambda: TUser.id.not_in([bad]),
            lambda: sa.update(table).where(table.c.id == bad),
        ):
            with pytest.raises(InvalidTypeID, match=message):
                build()
        # ORM attributes: refused at assignment, and in the constructor.
        with pytest.raises(InvalidTypeID, match=message):
            user.id = bad
        with pytest.raises(InvalidTypeID, match=message):
            TUser(id=bad)
        # Binds (session.get, INSERT, UPDATE): refused while SQLAlchemy
        # processes the parameters, before the statement is sent.
        for run in (
            lambda: session.get(TUser, bad),
            lambda: session.execute(sa.insert(table), {"id": bad, "name": "x"}),
            lambda: session.execute(sa.update(table).values(id=bad)),
            # an ORM bulk UPDATE by primary key
            lambda: session.execute(sa.update(TUser), [{"id": bad, "name": "changed"}]),
        ):
            with pytest.raises(sa.exc.StatementError) as raised:
                run()
            assert isinstance(raised.value.orig, InvalidTypeID), raised.value
            assert message in str(raised.value.orig)
            session.rollback()
    assert _written(sent) == []
    assert not any(s.lstrip().upper().startswith("SELECT") for s in sent)
    session.expire_all()
    assert session.scalars(sa.select(TUser.name)).all() == ["kept"]
    assert _count(engine) == 1


def test_a_wrong_prefix_in_one_row_of_many_writes_nothing(session: Session, engine: Engine) -> None:
    rows = [{"id": new_typeid("user"), "name": "a"}, {"id": new_typeid("org"), "name": "b"}]
    with pytest.raises(sa.exc.StatementError) as raised:
        session.execute(sa.insert(TUser.__table__), rows)
    assert isinstance(raised.value.orig, InvalidTypeID)
    session.rollback()
    assert _count(engine) == 0


# -- order ---------------------------------------------------------------------------


def test_database_order_is_uuid_byte_order(session: Session, engine: Engine) -> None:
    rng = random.Random(35)
    # Random bits, with first bytes at both ends of the byte range: the
    # database must compare them unsigned, byte by byte.
    bits = [uuid.UUID(int=rng.getrandbits(128) >> rng.choice((1, 2, 9))) for _ in range(200)]
    bits += [uuid.UUID(int=0), uuid.UUID(int=(1 << 128) - 1), uuid.UUID(int=1 << 127)]
    ids = [TypeID.from_uuid("user", value) for value in bits]
    with engine.begin() as conn:
        conn.execute(sa.insert(TUser.__table__), [{"id": i, "name": ""} for i in ids])
    expected = sorted(ids, key=lambda i: i.uuid.bytes)
    assert expected == sorted(ids)  # object order = byte order within a prefix
    assert session.scalars(sa.select(TUser.id).order_by(TUser.id)).all() == expected
    middle = expected[len(expected) // 2]
    above = session.scalars(sa.select(TUser.id).where(TUser.id > str(middle)).order_by(TUser.id))
    assert above.all() == expected[len(expected) // 2 + 1 :]


# -- the server default --------------------------------------------------------------


@pytest.fixture
def conn(engine: Engine) -> Iterator[Connection]:
    """A connection with gen_uuid7() installed where the server needs it."""
    with engine.connect() as connection:
        install_uuid7_function(connection)
        connection.commit()
        yield connection
        connection.rollback()
        drop_uuid7_function(connection)
        connection.commit()


def test_server_default_makes_uuid7_ids_read_with_the_prefix(
    conn: Connection, metadata: sa.MetaData
) -> None:
    events = sa.Table(
        "tid_events",
        metadata,
        sa.Column("n", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("id", TypeIDType("evt"), nullable=False, server_default=typeid_server_default()),
    )
    metadata.create_all(conn)
    if conn.dialect.name == "postgresql":
        # PostgreSQL 18's own uuidv7(); before 18 the installed gen_uuid7().
        [default] = [c["default"] for c in sa.inspect(conn).get_columns("tid_events")][1:]
        native = (conn.dialect.server_version_info or (0,)) >= (18,)
        assert default == ("uuidv7()" if native else "gen_uuid7()")
    # Raw SQL, as another program would insert: the database makes the id.
    conn.execute(sa.text("INSERT INTO tid_events (n) VALUES (1), (2)"))
    conn.commit()
    ids = conn.scalars(sa.select(events.c.id).order_by(events.c.n)).all()
    assert [type(i) for i in ids] == [TypeID, TypeID]
    assert {i.prefix for i in ids} == {"evt"}
    assert {i.uuid.version for i in ids} == {7}
    assert ids[0] != ids[1]
    found = conn.scalar(sa.select(events.c.n).where(events.c.id == str(ids[1])))
    assert found == 2
    metadata.drop_all(conn)
    conn.commit()


def test_server_default_ddl_is_the_uuid7_default_in_the_column_storage() -> None:

    column = sa.Column("id", TypeIDType("user"), server_default=typeid_server_default())
    sa.Table("tid_ddl", sa.MetaData(), column)

    def ddl(dialect: Any) -> str:
        return str(sa.schema.CreateColumn(column).compile(dialect=dialect))

    pg18 = postgresql.dialect()
    pg18.server_version_info = (18, 1)
    assert ddl(postgresql.dialect()) == "id UUID DEFAULT (gen_uuid7())"
    assert ddl(pg18) == "id UUID DEFAULT (uuidv7())"
    # SQLAlchemy 2.0.8 (the floor) wraps a SQLite function default in one more pair.
    assert ddl(sqlite.dialect()) in (
        "id BLOB DEFAULT (gen_uuid7())",
        "id BLOB DEFAULT ((gen_uuid7()))",
    )
    # 16 bytes on MySQL/MariaDB: UNHEX(...) of the UUIDv7 text, not the hex.
    assert ddl(mysql.dialect()).startswith("id BINARY(16) DEFAULT (UNHEX(")
    with pytest.raises(sa.exc.CompileError, match=r"new_typeid\(prefix\)"):
        ddl(mssql.dialect())


# -- the type itself -----------------------------------------------------------------


def test_repr_cache_key_and_prefix_checks() -> None:
    assert repr(TypeIDType("user")) == "TypeIDType('user')"
    assert TypeIDType("user").__module__ == "sqlalchemy_ulid"
    key = TypeIDType("user")._static_cache_key
    assert key == TypeIDType("user")._static_cache_key
    assert key != TypeIDType("org")._static_cache_key
    assert key != ULIDType()._static_cache_key
    with pytest.raises(InvalidTypeID, match="uppercase"):
        TypeIDType("User")
    with pytest.raises(TypeError):
        sa.column("id", TypeIDType("user")).like("user_%")
    with pytest.raises(TypeError, match="datetimes"):
        _ = sa.column("id", TypeIDType("user")) > dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


# -- Alembic autogenerate ------------------------------------------------------------

AUTOGEN_VERSION_TABLE = "alembic_version_tidgen"
AUTOGEN_TABLES = ("tidgen_orders", "tidgen_users")


def autogenerate_env_py(version_table: str, table_prefix: str) -> str:
    """An ``env.py`` comparing ``config.attributes["target_metadata"]`` with the database.

    Only the tables named ``table_prefix...``: the database is shared with
    other test files. Types are compared, and rendered by ``render_item``.
    """
    return f"""
from alembic import context
import sqlalchemy_ulid.alembic

def include_name(name, type_, parent_names):
    return type_ != "table" or name.startswith({table_prefix!r})

config = context.config
context.configure(
    connection=config.attributes["connection"],
    target_metadata=config.attributes["target_metadata"],
    version_table={version_table!r},
    include_name=include_name,
    compare_type=True,
    render_item=sqlalchemy_ulid.alembic.render_item,
)
with context.begin_transaction():
    context.run_migrations()
"""


AUTOGEN_ENV_PY = autogenerate_env_py(AUTOGEN_VERSION_TABLE, "tidgen_")


def _autogen_models(user_type: sa.types.TypeEngine[Any]) -> sa.MetaData:
    metadata = sa.MetaData()
    sa.Table("tidgen_users", metadata, sa.Column("id", user_type, primary_key=True))
    sa.Table(
        "tidgen_orders",
        metadata,
        sa.Column("id", TypeIDType("order"), primary_key=True),
        sa.Column("user_id", TypeIDType("user"), sa.ForeignKey("tidgen_users.id")),
    )
    return metadata


def _autogen_clean(engine: Engine) -> None:
    with engine.begin() as conn:
        for name in (*AUTOGEN_TABLES, AUTOGEN_VERSION_TABLE):
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {name}"))


def _alembic(config: Any, engine: Engine, fn: Any, *args: Any, **kw: Any) -> None:
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        fn(config, *args, **kw)


def test_autogenerate_renders_typeidtype_and_switching_types_is_a_no_op(
    tmp_path: Path, engine: Engine
) -> None:
    from alembic import command

    config = _offline_scripts.project(tmp_path, AUTOGEN_ENV_PY, template=True)
    config.attributes["target_metadata"] = _autogen_models(TypeIDType("user"))
    _autogen_clean(engine)
    try:
        _alembic(config, engine, command.revision, autogenerate=True, message="typed ids")
        [script] = (tmp_path / "versions").glob("*.py")
        source = script.read_text()
        assert "import sqlalchemy_ulid\n" in source
        assert "sa.Column('id', sqlalchemy_ulid.TypeIDType('user'), nullable=False)" in source
        assert "sa.Column('id', sqlalchemy_ulid.TypeIDType('order'), nullable=False)" in source
        assert "sa.Column('user_id', sqlalchemy_ulid.TypeIDType('user'), nullable=True)" in source
        assert "length=16" not in source  # the impl's arguments never leak
        _alembic(config, engine, command.upgrade, "head")
        tables = config.attributes["target_metadata"].tables
        user = new_typeid("user")
        with engine.begin() as conn:
            conn.execute(tables["tidgen_users"].insert(), {"id": str(user)})
            conn.execute(
                tables["tidgen_orders"].insert(), {"id": new_typeid("order"), "user_id": user}
            )
            assert conn.scalar(sa.select(tables["tidgen_orders"].c.user_id)) == user
        _alembic(config, engine, command.check)  # raises if autogenerate finds anything
        # The same column as ULIDType or back: nothing to migrate, no data changed.
        config.attributes["target_metadata"] = _autogen_models(ULIDType())
        _alembic(config, engine, command.check)
        with engine.connect() as conn:
            assert (
                conn.scalar(sa.select(sa.table("tidgen_users", sa.column("id", ULIDType())).c.id))
                == user.to_ulid()
            )
        _alembic(config, engine, command.downgrade, "base")
        with engine.connect() as conn:
            assert not set(AUTOGEN_TABLES) & set(sa.inspect(conn).get_table_names())
    finally:
        _autogen_clean(engine)


# -- pages and time ranges -----------------------------------------------------------


def _walk(session: Session, stmt: Any, **kw: Any) -> tuple[list[Any], list[str]]:
    """Every page forward, each cursor passed on as the text a URL would carry."""
    items: list[Any] = []
    cursors: list[str] = []
    cursor: str | None = None
    while True:
        page = paginate(session, stmt, TUser.id, limit=3, after=cursor, **kw)
        items += page.items
        if page.next_cursor is None or not page.has_more:
            return items, cursors
        cursor = parse_qs(urlencode({"cursor": page.next_cursor}))["cursor"][0]
        cursors.append(cursor)


def test_paginate_with_str_cursors(session: Session, engine: Engine) -> None:
    users = [TUser(name=f"u{i % 3}") for i in range(8)]
    session.add_all(users)
    session.commit()
    ids = sorted(user.id for user in users)

    by_id = sa.select(TUser.id).order_by(TUser.id)
    items, cursors = _walk(session, by_id)
    assert items == ids
    # A bare-id cursor is the typed id's text, and comes back the same way.
    assert cursors == [str(ids[2]), str(ids[5])]
    last = paginate(session, by_id, TUser.id, limit=3, after=cursors[-1])
    back = paginate(session, by_id, TUser.id, limit=3, before=last.prev_cursor)
    assert back.items == ids[3:6]

    by_name = sa.select(TUser.name, TUser.id).order_by(TUser.name, TUser.id)
    items, _ = _walk(session, by_name)
    assert items == sorted(((u.name, u.id) for u in users), key=lambda r: (r[0], r[1].bytes))

    # A bare typed id is the cursor of the id order, not of a sort by name;
    # a cursor of the sort by name is not a bare id.
    with pytest.raises(CursorSortMismatch, match="bare id"):
        paginate(session, by_name, TUser.id, limit=3, after=cursors[0])
    name_cursor = paginate(session, by_name, TUser.id, limit=3).next_cursor
    with pytest.raises(CursorSortMismatch, match="several keys"):
        paginate(session, by_id, TUser.id, limit=3, after=name_cursor)

    # A cursor of another prefix is refused before any SQL.
    other = "org_" + str(ids[2]).removeprefix("user_")
    with recording(engine) as sent:
        with pytest.raises(InvalidTypeID, match="expected prefix 'user', got 'org'"):
            paginate(session, by_id, TUser.id, limit=3, after=other)
        with pytest.raises(InvalidTypeID):
            after(TUser.id, other)
    assert sent == []


def test_time_ranges_and_ulid_timestamp(session: Session, engine: Engine) -> None:
    utc = dt.timezone.utc
    times = [dt.datetime(2024, 1, 1, tzinfo=utc), dt.datetime(2024, 6, 1, tzinfo=utc)]
    times.append(dt.datetime(2025, 1, 1, tzinfo=utc))
    # The smallest and the largest UUIDv7 of each millisecond, and a ULID's
    # bits (no version nibble): the bounds must hold them all.
    rows = []
    for i, when in enumerate(times):
        for bits in (uuid7_min_at(when), uuid7_max_at(when), ULID.min_at(when).to_uuid()):
            rows.append({"id": TypeID.from_uuid("user", bits), "name": str(i)})
    with engine.begin() as conn:
        conn.execute(sa.insert(TUser.__table__), rows)

    def names(where: Any) -> list[str]:
        return sorted(session.scalars(sa.select(TUser.name).where(where)).all())

    assert names(created_since(TUser.id, times[1])) == ["1", "1", "1", "2", "2", "2"]
    assert names(created_before(TUser.id, times[1])) == ["0", "0", "0"]
    assert names(created_between(TUser.id, times[0], times[2])) == ["0", "0", "0", "1", "1", "1"]
    stamps = session.execute(sa.select(TUser.name, ulid_timestamp(TUser.id))).all()
    assert {(name, stamp) for name, stamp in stamps} == {
        (str(i), when) for i, when in enumerate(times)
    }


def test_follow_yields_every_row_once_with_typed_cursors(session: Session, engine: Engine) -> None:
    users = [TUser(name=str(i)) for i in range(5)]
    session.add_all(users)
    session.commit()
    stmt = sa.select(TUser.id).order_by(TUser.id)
    feed = follow(engine, stmt, TUser.id, limit=2, settle=dt.timedelta(0), interval=0.01)
    seen: list[Any] = []
    for page in feed:
        seen += page.items
        assert page.next_cursor is not None
        assert page.next_cursor.startswith("user_")
        if len(seen) >= 5:
            break
    feed.close()
    assert seen == sorted(user.id for user in users)


def test_settle_holds_back_typed_ids_past_the_horizon(
    session: Session, engine: Engine, backend: Backend
) -> None:
    now_ms = int(time.time() * 1000)
    settled = [TypeID.from_ulid("user", ULID.from_parts(now_ms - 60_000 + n, 0)) for n in range(3)]
    unsettled = TypeID.from_ulid("user", ULID.from_parts(now_ms + 3_600_000, 0))  # an hour ahead
    session.add_all([TUser(id=i) for i in (*settled, unsettled)])
    session.commit()
    stmt = sa.select(TUser.id).order_by(TUser.id)
    with engine.connect() as conn:
        page = paginate(conn, stmt, TUser.id, limit=10, settle=dt.timedelta(seconds=5))
    assert page.items == settled
    if backend.name == "sqlite":
        with engine.connect() as conn, pytest.raises(SettleError, match="SQLite"):
            paginate(conn, stmt, TUser.id, settle="auto")
        return
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        first = paginate(conn, stmt, TUser.id, limit=2, settle="auto")
        assert first.next_cursor == str(settled[1])
        rest = paginate(conn, stmt, TUser.id, after=first.next_cursor, settle="auto")
    assert [*first.items, *rest.items] == settled


def test_partition_bounds_are_the_bits_of_the_time() -> None:
    table = sa.Table(
        "tid_parted",
        sa.MetaData(),
        sa.Column("id", TypeIDType("evt"), primary_key=True),
        postgresql_partition_by="RANGE (id)",
    )
    day = dt.date(2024, 1, 1)
    [ddl] = partition_ddl(table.c.id, day, day + dt.timedelta(days=1))
    low = ULID.min_at(dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)).to_uuid()
    assert f"FROM (CAST('{low.hex}' AS UUID))" in ddl


def test_partitions_route_typed_ids_and_prune(
    backend: Backend, engine: Engine, statements: list[str]
) -> None:
    from test_timerange import Explain

    metadata = sa.MetaData()
    events = sa.Table(
        "tid_parted_events",
        metadata,
        sa.Column("id", TypeIDType("evt"), primary_key=True),
        sa.Column("n", sa.Integer, nullable=False),
        postgresql_partition_by="RANGE (id)",
    )
    days = [dt.date(2024, 4, 1) + dt.timedelta(days=n) for n in range(3)]
    if backend.name != "postgresql":
        # Other servers: a clear refusal, and not one statement sent.
        with engine.connect() as conn, pytest.raises(ValueError, match="PostgreSQL feature"):
            create_partitions(conn, events.c.id, days[0], days[-1])
        assert statements == []
        return
    metadata.drop_all(engine)
    try:
        with engine.begin() as conn:
            metadata.create_all(conn)
            assert len(create_partitions(conn, events.c.id, days[0], days[-1])) == 2
            # The first and the last typed id each day can hold, as text.
            rows = []
            for n, day in enumerate(days[:2]):
                start = dt.datetime.combine(day, dt.time(), dt.timezone.utc)
                first = TypeID.from_ulid("evt", ULID.min_at(start))
                end = start + dt.timedelta(days=1, milliseconds=-1)
                last = TypeID.from_ulid("evt", ULID.max_at(end))
                rows += [{"id": str(first), "n": n}, {"id": str(last), "n": n}]
            conn.execute(events.insert(), rows)
            placed = conn.execute(
                sa.text(
                    "SELECT tableoid::regclass::text, min(n), max(n), count(*) "
                    "FROM tid_parted_events GROUP BY 1 ORDER BY 1"
                )
            ).all()
            assert [tuple(row) for row in placed] == [
                ("tid_parted_events_p20240401", 0, 0, 2),
                ("tid_parted_events_p20240402", 1, 1, 2),
            ]
            noon = dt.datetime(2024, 4, 2, 12, tzinfo=dt.timezone.utc)
            stmt = sa.select(events.c.id, events.c.n).where(created_since(events.c.id, noon))
            plan = "\n".join(row[0] for row in conn.execute(Explain(stmt, "EXPLAIN")))
            assert "tid_parted_events_p20240402" in plan, plan
            assert "tid_parted_events_p20240401" not in plan, plan  # pruned
            [(found, n)] = conn.execute(stmt).all()
            assert (found, n) == (TypeID.parse(rows[3]["id"]), 1)
    finally:
        metadata.drop_all(engine)


async def _async_round_trip(url: str) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(Base.metadata.drop_all)
            await conn.run_sync(Base.metadata.create_all)
        async with AsyncSession(engine, expire_on_commit=False) as session:
            users = [TUser(name=str(i)) for i in range(3)]
            session.add_all(users)
            await session.commit()
            ids = sorted(user.id for user in users)
            session.expire_all()
            got = (await session.scalars(sa.select(TUser.id).order_by(TUser.id))).all()
            assert got == ids
            assert all(type(i) is TypeID and i.prefix == "user" for i in got)
            # asyncpg hands uuid.UUID subclasses to a subquery's outer select.
            inner = sa.select(TUser.id).subquery()
            assert sorted((await session.scalars(sa.select(inner.c.id))).all()) == ids
            assert (await session.get(TUser, str(ids[1]))) is not None
            with pytest.raises(sa.exc.StatementError) as raised:
                await session.get(TUser, "org_" + str(ids[1]).removeprefix("user_"))
            assert isinstance(raised.value.orig, InvalidTypeID)
    finally:
        async with engine.begin() as conn:
            await conn.run_sync(Base.metadata.drop_all)
        await engine.dispose()


def test_async_drivers_round_trip(backend: Backend) -> None:
    for url in backend.async_urls:
        asyncio.run(_async_round_trip(url))


@pytest.mark.parametrize("prefix", ["user", "subscription_item_line"])
@pytest.mark.parametrize("descending", [False, True])
def test_sealed_cursors_of_typed_ids(engine: Engine, prefix: str, descending: bool) -> None:
    table = sa.Table(
        "tid_sealed",
        sa.MetaData(),
        sa.Column("id", TypeIDType(prefix), primary_key=True),
    )
    sealer = CursorSealer(CursorSealer.generate_key(), context="typed")
    ids = sorted(new_typeid(prefix) for _ in range(5))
    table.create(engine)
    try:
        with engine.begin() as conn:
            conn.execute(table.insert(), [{"id": i} for i in ids])
        stmt = sa.select(table.c.id)
        with Session(engine) as session:
            first = paginate(session, stmt, table.c.id, limit=2, descending=descending)
            assert first.next_cursor is not None
            assert first.next_cursor.startswith(prefix + "_")
            next_token, _ = sealer.seal(first, descending=descending)
            assert next_token is not None
            assert prefix not in next_token  # sealed: the bits, not the text
            kwargs = sealer.open(next_token, descending=descending)
            second = paginate(session, stmt, table.c.id, limit=2, **kwargs)
        ordered = ids[::-1] if descending else ids
        assert first.items == ordered[:2]
        assert second.items == ordered[2:4]
        assert all(i.prefix == prefix for i in second.items)
    finally:
        table.drop(engine)
