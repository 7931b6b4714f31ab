"""Server-side ids when the engine has already connected, and INSERT ... SELECT.

* ``register_ulid_function`` / ``register_uuid7_function`` work whenever
  called: on a file database whose engine has a connection in its pool and
  one in use, both get the function.
* ``insert().from_select()`` with ``default=new_ulid`` gives every row one
  id (SQLAlchemy evaluates a Python default once per statement): a duplicate
  key on every server. The two ways out the docs give (``include_defaults=
  False`` with a server default; ids made in the SELECT) give one id per
  row, on the three servers; so does ``insert_from_select``, which puts the
  database's generator in the SELECT.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from sqlalchemy_ulid import (
    ULID,
    InvalidInput,
    ULIDType,
    drop_ulid_function,
    drop_uuid7_function,
    insert_from_select,
    install_ulid_function,
    install_uuid7_function,
    new_ulid,
    new_uuid7,
    register_ulid_function,
    register_uuid7_function,
    ulid_server_default,
    uuid7_server_default,
)

# -- registering on an engine that has connected --------------------------------


def _tables(suffix: str) -> tuple[sa.MetaData, sa.Table, sa.Table]:
    metadata = sa.MetaData()
    ulids = sa.Table(
        f"reg_ulids_{suffix}",
        metadata,
        sa.Column("id", ULIDType(), primary_key=True, server_default=ulid_server_default()),
        sa.Column("n", sa.Integer),
    )
    uuids = sa.Table(
        f"reg_uuids_{suffix}",
        metadata,
        sa.Column("id", sa.Uuid(), primary_key=True, server_default=uuid7_server_default()),
        sa.Column("n", sa.Integer),
    )
    return metadata, ulids, uuids


@pytest.mark.parametrize("poolclass", [sa.pool.QueuePool, sa.pool.SingletonThreadPool])
def test_register_after_the_engine_connected(tmp_path: Path, poolclass: Any) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path}/app.sqlite3", poolclass=poolclass)
    metadata, ulids, uuids = _tables("late")
    try:
        with engine.begin() as conn:  # the engine connects, then pools the connection
            metadata.create_all(conn)
        held = engine.connect()  # and one connection stays in use across the call
        held.exec_driver_sql("SELECT 1")
        register_ulid_function(engine)
        register_uuid7_function(engine)
        register_ulid_function(engine)  # a second call changes nothing
        for conn in (held, engine.connect(), engine.connect()):
            with conn:
                conn.exec_driver_sql(f"INSERT INTO {ulids.name} (n) VALUES (1)")
                conn.exec_driver_sql(f"INSERT INTO {uuids.name} (n) VALUES (1)")
                conn.commit()
        engine.dispose()  # and a brand-new connection
        with engine.begin() as conn:
            conn.exec_driver_sql(f"INSERT INTO {ulids.name} (n) VALUES (2)")
            conn.exec_driver_sql(f"INSERT INTO {uuids.name} (n) VALUES (2)")
            made = conn.scalars(sa.select(ulids.c.id)).all()
            made7 = conn.scalars(sa.select(uuids.c.id)).all()
        assert len(set(made)) == len(made) == 4
        assert all(isinstance(u, ULID) for u in made)
        assert len(set(made7)) == 4
        assert {u.version for u in made7} == {7}
    finally:
        engine.dispose()


def test_register_once_defines_once(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path}/once.sqlite3")
    defined: list[str] = []

    @sa.event.listens_for(engine, "before_cursor_execute")
    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        defined.append(statement)

    try:
        for _ in range(3):
            register_ulid_function(engine)
        listeners = engine.dispatch.before_cursor_execute
        assert len(listeners) == 2  # ours once, and the counter
    finally:
        engine.dispose()


# -- INSERT ... SELECT ----------------------------------------------------------


@pytest.fixture
def server(engine: Engine) -> Iterator[tuple[Connection, sa.MetaData]]:
    """A connection with gen_ulid() where the server needs it installed, and a
    MetaData whose tables it drops afterwards (the same connection: another
    one would wait for this one's locks)."""
    metadata = sa.MetaData()
    with engine.connect() as conn:
        install_ulid_function(conn)
        conn.commit()
        try:
            yield conn, metadata
        finally:
            conn.rollback()
            metadata.drop_all(conn)
            drop_ulid_function(conn)
            conn.commit()


def _source(metadata: sa.MetaData, conn: Connection) -> sa.Table:
    source = sa.Table(f"ins_sel_src_{uuid.uuid4().hex[:6]}", metadata, sa.Column("n", sa.Integer))
    source.create(conn)
    conn.execute(source.insert(), [{"n": n} for n in range(25)])
    conn.commit()
    return source


def _target(conn: Connection, metadata: sa.MetaData, server_default: bool) -> sa.Table:
    extra = {"server_default": ulid_server_default()} if server_default else {}
    target = sa.Table(
        f"ins_sel_dst_{uuid.uuid4().hex[:6]}",
        metadata,
        sa.Column("id", ULIDType(), primary_key=True, default=new_ulid, **extra),
        sa.Column("n", sa.Integer, nullable=False),
    )
    target.create(conn)
    conn.commit()
    return target


def test_the_pitfall_a_python_default_is_one_id_for_every_row(
    server: tuple[Connection, sa.MetaData],
) -> None:
    conn, metadata = server
    source, target = _source(metadata, conn), _target(conn, metadata, server_default=False)
    with pytest.raises(exc.IntegrityError):
        conn.execute(target.insert().from_select(["n"], sa.select(source.c.n)))
    conn.rollback()
    assert conn.scalar(sa.select(sa.func.count()).select_from(target)) == 0


def test_include_defaults_false_with_a_server_default_is_one_id_per_row(
    server: tuple[Connection, sa.MetaData],
) -> None:
    conn, metadata = server
    source, target = _source(metadata, conn), _target(conn, metadata, server_default=True)
    stmt = target.insert().from_select(["n"], sa.select(source.c.n), include_defaults=False)
    conn.execute(stmt)
    rows = conn.execute(sa.select(target.c.id, target.c.n)).all()
    assert sorted(n for _, n in rows) == list(range(25))
    assert len({id_ for id_, _ in rows}) == 25


def test_ids_made_in_the_select_are_one_per_row(server: tuple[Connection, sa.MetaData]) -> None:
    conn, metadata = server
    source, target = _source(metadata, conn), _target(conn, metadata, server_default=False)
    made = sa.select(ulid_server_default().label("id"), source.c.n)
    conn.execute(target.insert().from_select(["id", "n"], made))
    rows = conn.execute(sa.select(target.c.id, target.c.n)).all()
    assert sorted(n for _, n in rows) == list(range(25))
    assert len({id_ for id_, _ in rows}) == 25
    assert all(isinstance(id_, ULID) for id_, _ in rows)


def test_without_a_generator_rows_inserted_as_a_list_get_one_id_each(
    server: tuple[Connection, sa.MetaData],
) -> None:
    conn, metadata = server
    source = _source(metadata, conn)
    target = sa.Table(
        f"ins_sel_u7_{uuid.uuid4().hex[:6]}",
        metadata,
        sa.Column("id", sa.Uuid(), primary_key=True, default=new_uuid7),
        sa.Column("n", sa.Integer, nullable=False),
    )
    target.create(conn)
    rows = [{"n": n} for n in conn.scalars(sa.select(source.c.n))]
    conn.execute(target.insert(), rows)  # executemany: the default runs per row
    ids = conn.scalars(sa.select(target.c.id)).all()
    assert len(set(ids)) == 25


# -- insert_from_select: the database's generator in the SELECT -------------------


def test_insert_from_select_is_one_id_per_row(server: tuple[Connection, sa.MetaData]) -> None:
    conn, metadata = server
    source = _source(metadata, conn)
    target = _target(conn, metadata, server_default=False)  # default=new_ulid only
    conn.execute(insert_from_select(target, ["n"], sa.select(source.c.n)))
    rows = conn.execute(sa.select(target.c.id, target.c.n)).all()
    assert sorted(n for _, n in rows) == list(range(25))
    assert len({id_ for id_, _ in rows}) == 25  # the plain from_select: one id, a duplicate
    assert all(isinstance(id_, ULID) for id_, _ in rows)
    # and made now, by the database: within a minute of this process's clock
    newest = new_ulid().timestamp_ms
    assert all(newest - 60_000 < id_.timestamp_ms <= newest + 60_000 for id_, _ in rows)


def test_insert_from_select_of_an_orm_class_with_a_binary_key(
    server: tuple[Connection, sa.MetaData],
) -> None:
    conn, metadata = server
    source = _source(metadata, conn)

    class Base(DeclarativeBase):
        metadata = sa.MetaData()

    class Copy(Base):
        __tablename__ = f"ins_sel_orm_{uuid.uuid4().hex[:6]}"
        key: Mapped[ULID] = mapped_column(ULIDType("binary"), primary_key=True)
        n: Mapped[int]

    Copy.__table__.to_metadata(metadata)  # dropped by the fixture
    Base.metadata.create_all(conn)
    conn.commit()
    conn.execute(insert_from_select(Copy, [Copy.__table__.c.n], sa.select(source.c.n + 1)))
    keys = conn.scalars(sa.select(Copy.key)).all()
    assert len(set(keys)) == 25
    assert sorted(conn.scalars(sa.select(Copy.n))) == list(range(1, 26))


def test_insert_from_select_fills_a_uuid7_key(
    engine: Engine, server: tuple[Connection, sa.MetaData]
) -> None:
    conn, metadata = server
    if engine.dialect.name == "sqlite":
        register_uuid7_function(engine)
    source = _source(metadata, conn)
    target = sa.Table(
        f"ins_sel_u7f_{uuid.uuid4().hex[:6]}",
        metadata,
        sa.Column("n", sa.Integer, nullable=False),
        sa.Column("id", sa.Uuid(), primary_key=True, default=new_uuid7),
    )
    target.create(conn)
    install_uuid7_function(conn)
    try:
        conn.execute(insert_from_select(target, ["n"], sa.select(source.c.n)))
        ids = conn.scalars(sa.select(target.c.id)).all()
    finally:
        conn.rollback()
        drop_uuid7_function(conn)
        conn.commit()
    assert len(set(ids)) == 25
    assert {id_.version for id_ in ids} == {7}


_KEYED = sa.Table(
    "keyed",
    sa.MetaData(),
    sa.Column("id", ULIDType(), primary_key=True),
    sa.Column("n", sa.Integer),
)
_TWO_KEYS = sa.Table(
    "two_keys",
    sa.MetaData(),
    sa.Column("a", ULIDType(), primary_key=True),
    sa.Column("b", ULIDType(), primary_key=True),
)
_TEXT_KEY = sa.Table("text_key", sa.MetaData(), sa.Column("id", ULIDType("text"), primary_key=True))
_ONE = sa.select(sa.literal(1))


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((_TWO_KEYS, [], sa.select()), {}, "2 primary-key columns"),  # which key?
        ((_KEYED, ["n"], _ONE), {"key": "nope"}, "no column 'nope'"),  # no such column
        ((_KEYED, ["id"], _ONE), {}, "already gives the key"),  # nothing to fill
        ((_KEYED, ["n"], sa.select(sa.literal(1), sa.literal(2))), {}, "2 columns"),
        ((_KEYED, ["n"], sa.union(_ONE, _ONE)), {}, "wrap a UNION"),  # not a select()
        ((_TEXT_KEY, [], sa.select()), {}, "stores ULIDs as text"),  # no generator
        (("keyed", ["n"], _ONE), {}, "a Table or a mapped class"),  # a name
    ],
)
def test_insert_from_select_refuses_before_sql(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        insert_from_select(*args, **kwargs)
