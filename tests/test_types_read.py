"""Reading ULID columns back in every SELECT shape: the uuid-as-bytes path.

On PostgreSQL the outermost SELECT list and RETURNING read a uuid column as
``uuid_send(col)`` (16 bytes, no ``uuid.UUID`` per value); subqueries, CTEs,
WHERE, ORDER BY and INSERT ... SELECT keep the uuid. (Bulk RETURNING in
parameter order is in test_bulk_returning.py.) Each test runs on every
backend and checks the values (ULID objects equal to what was written) and,
on PostgreSQL, where ``uuid_send`` appears in the SQL sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    Session,
    joinedload,
    mapped_column,
    relationship,
    selectinload,
)

from conftest import Backend, recording
from sqlalchemy_ulid import ULID, ULIDType, new_ulid


class Base(DeclarativeBase):
    type_annotation_map = {ULID: ULIDType}  # noqa: RUF012 (SQLAlchemy reads a plain dict)


class Parent(Base):
    __tablename__ = "read_parents"

    id: Mapped[ULID] = mapped_column(primary_key=True, default=new_ulid)
    n: Mapped[int]
    children: Mapped[list[Child]] = relationship(back_populates="parent", order_by="Child.id")


class Child(Base):
    __tablename__ = "read_children"

    id: Mapped[ULID] = mapped_column(primary_key=True, default=new_ulid)
    parent_id: Mapped[ULID] = mapped_column(sa.ForeignKey("read_parents.id"))
    as_text: Mapped[str | None] = mapped_column(ULIDType(as_str=True))
    parent: Mapped[Parent] = relationship(back_populates="children")


parents = Parent.__table__
children = Child.__table__


@pytest.fixture
def ids(engine: Engine) -> Iterator[list[ULID]]:
    """Four parents (n = 0..3) with two children each; yields the parent ids in order."""
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    made = sorted(new_ulid() for _ in range(4))
    with engine.begin() as conn:
        conn.execute(parents.insert(), [{"id": u, "n": i} for i, u in enumerate(made)])
        conn.execute(
            children.insert(),
            [{"id": new_ulid(), "parent_id": u, "as_text": u} for u in made for _ in range(2)],
        )
    yield made
    Base.metadata.drop_all(engine)


def _all_ulids(values: list[object]) -> bool:
    return all(type(v) is ULID for v in values)


def _sent(engine: Engine, stmt: sa.Executable) -> tuple[list[sa.Row[object]], str]:
    with recording(engine) as seen, engine.connect() as conn:
        rows = list(conn.execute(stmt))
    (sql,) = [s for s in seen if s.lstrip().upper().startswith(("SELECT", "WITH"))]
    return rows, sql


def test_plain_select_reads_bytes_on_postgresql_keeps_names(
    engine: Engine, ids: list[ULID]
) -> None:
    stmt = sa.select(parents.c.id, parents.c.id.label("again"), parents.c.n).order_by(parents.c.id)
    rows, sql = _sent(engine, stmt)
    assert [row.id for row in rows] == ids
    assert [row._mapping["id"] for row in rows] == ids
    assert [row._mapping[parents.c.id] for row in rows] == ids
    assert [row.again for row in rows] == ids
    assert _all_ulids([row.id for row in rows])
    assert list(rows[0]._mapping) == ["id", "again", "n"]
    if engine.dialect.name == "postgresql":
        assert sql.count("uuid_send(") == 2
        assert "ORDER BY read_parents.id" in sql  # the index order, not bytea's
    else:
        assert "uuid_send" not in sql


def test_subquery_cte_and_scalar_subquery_keep_the_uuid_inside(
    engine: Engine, ids: list[ULID]
) -> None:
    inner = sa.select(parents.c.id).where(parents.c.n >= 2).subquery()
    rows, sql = _sent(engine, sa.select(inner.c.id).order_by(inner.c.id))
    assert [row.id for row in rows] == ids[2:]
    if engine.dialect.name == "postgresql":
        assert sql.count("uuid_send(") == 1  # the outer SELECT only
        assert "uuid_send(anon_1.id)" in sql

    cte = sa.select(parents.c.id, parents.c.n).where(parents.c.n < 2).cte("firsts")
    rows, sql = _sent(engine, sa.select(cte.c.id).order_by(cte.c.n))
    assert [row.id for row in rows] == ids[:2]
    assert _all_ulids([row.id for row in rows])

    # compared in WHERE with a subquery of the same type: uuid = uuid
    # (PostgreSQL 15 has no max(uuid))
    newest = sa.select(parents.c.id).order_by(parents.c.id.desc()).limit(1).scalar_subquery()
    rows, sql = _sent(engine, sa.select(parents.c.id).where(parents.c.id == newest))
    assert [row.id for row in rows] == [ids[-1]]
    rows, _ = _sent(
        engine,
        sa.select(children.c.parent_id)
        .where(children.c.parent_id.in_(sa.select(parents.c.id).where(parents.c.n == 1)))
        .distinct(),
    )
    assert [row.parent_id for row in rows] == [ids[1]]

    # a scalar subquery in the SELECT list is read as bytes around it
    rows, sql = _sent(engine, sa.select(newest.label("newest")))
    assert rows[0].newest == ids[-1]
    assert type(rows[0].newest) is ULID
    if engine.dialect.name == "postgresql":
        assert sql.count("uuid_send(") == 1


def test_union_aggregate_and_distinct(engine: Engine, ids: list[ULID]) -> None:
    both = sa.union(
        sa.select(parents.c.id).where(parents.c.n == 0),
        sa.select(children.c.parent_id).where(children.c.parent_id == ids[3]),
    ).subquery()
    rows, _ = _sent(engine, sa.select(both.c.id).order_by(both.c.id))
    assert [row.id for row in rows] == [ids[0], ids[3]]

    union_all = sa.union_all(
        sa.select(parents.c.id).where(parents.c.n == 1),
        sa.select(children.c.parent_id).where(children.c.parent_id == ids[2]),
    ).order_by("id")
    rows, sql = _sent(engine, union_all)
    assert [row.id for row in rows] == [ids[1], ids[2], ids[2]]
    assert _all_ulids([row.id for row in rows])
    if engine.dialect.name == "postgresql":
        assert sql.count("uuid_send(") == 2  # each SELECT of the UNION alike

    # a function of the column's type is read as bytes around it
    first = sa.func.coalesce(parents.c.id, parents.c.id)
    rows, sql = _sent(engine, sa.select(first).order_by(parents.c.id))
    assert [row[0] for row in rows] == ids
    assert _all_ulids([row[0] for row in rows])

    # SELECT DISTINCT ... ORDER BY the column: PostgreSQL needs the column
    # itself in the SELECT list, so there it is read as a uuid.
    stmt = sa.select(children.c.parent_id).distinct().order_by(children.c.parent_id.desc())
    rows, sql = _sent(engine, stmt)
    assert [row.parent_id for row in rows] == ids[::-1]
    assert _all_ulids([row.parent_id for row in rows])
    assert "uuid_send" not in sql
    rows, _ = _sent(engine, sa.select(children.c.parent_id).distinct())
    assert sorted(row.parent_id for row in rows) == ids

    grouped = (
        sa.select(children.c.parent_id, sa.func.count())
        .group_by(children.c.parent_id)
        .order_by(children.c.parent_id)
    )
    rows, _ = _sent(engine, grouped)
    assert [tuple(row) for row in rows] == [(u, 2) for u in ids]


def test_returning_and_insert_from_select(engine: Engine, ids: list[ULID]) -> None:
    fresh = new_ulid()
    with recording(engine) as seen, engine.begin() as conn:
        if engine.dialect.insert_returning:
            got = conn.execute(
                parents.insert().returning(parents.c.id), {"id": str(fresh).lower(), "n": 9}
            ).scalar_one()
            assert got == fresh
            assert type(got) is ULID
        else:  # pragma: no cover - every tested server has INSERT ... RETURNING
            conn.execute(parents.insert(), {"id": fresh, "n": 9})
        if engine.dialect.update_returning:
            got = conn.execute(
                parents.update().where(parents.c.id == fresh).values(n=10).returning(parents.c.id)
            ).scalar_one()
            assert got == fresh
        # INSERT ... SELECT: the SELECT inside keeps the uuid
        copy = sa.Table("read_copy", sa.MetaData(), sa.Column("id", ULIDType()))
        copy.create(conn)
        conn.execute(copy.insert().from_select(["id"], sa.select(parents.c.id)))
        assert sorted(conn.scalars(sa.select(copy.c.id))) == sorted([*ids, fresh])
        copy.drop(conn)
    if engine.dialect.name == "postgresql":
        returning = [s for s in seen if "RETURNING" in s]
        assert returning
        assert all("RETURNING uuid_send(read_parents.id) AS id" in s for s in returning)
        (copied,) = [s for s in seen if s.startswith("INSERT INTO read_copy")]
        assert "uuid_send" not in copied


def test_text_queries_and_as_str(engine: Engine, ids: list[ULID]) -> None:
    # text(): no column expression, the driver's own value (uuid.UUID on
    # PostgreSQL) goes through the same result processor.
    stmt = sa.text("SELECT id FROM read_parents ORDER BY id").columns(id=ULIDType())
    with engine.connect() as conn:
        assert list(conn.scalars(stmt)) == ids
        texts = conn.scalars(
            sa.select(sa.type_coerce(parents.c.id, ULIDType(as_str=True))).order_by(parents.c.id)
        ).all()
        assert texts == [str(u) for u in ids]
        stored = conn.scalars(sa.select(children.c.as_text).order_by(children.c.as_text)).all()
        assert stored == sorted(str(u) for u in ids for _ in range(2))
        nothing = conn.scalar(sa.select(sa.null().cast(ULIDType())))
        assert nothing is None


def test_orm_loading_through_every_loader(engine: Engine, ids: list[ULID]) -> None:
    with Session(engine) as session:
        got = session.get(Parent, ids[1])
        assert got is not None
        assert got.id == ids[1]
        assert type(got.id) is ULID
        assert session.get(Parent, str(ids[1])) is got  # one identity

        loaded = session.scalars(
            sa.select(Parent).options(selectinload(Parent.children)).order_by(Parent.id)
        ).all()
        assert [p.id for p in loaded] == ids
        assert all(c.parent_id == p.id for p in loaded for c in p.children)
        assert loaded[1] is got

    with Session(engine) as session:
        # joinedload with LIMIT: the ORM wraps the parents in a subquery
        limited = (
            session.scalars(
                sa.select(Parent).options(joinedload(Parent.children)).order_by(Parent.id).limit(2)
            )
            .unique()
            .all()
        )
        assert [p.id for p in limited] == ids[:2]
        assert all(len(p.children) == 2 for p in limited)
        child = limited[0].children[0]
        assert child.parent is limited[0]  # lazy load by the ULID key, from the identity map
        assert child.as_text == str(ids[0])

        session.expire(child)
        assert child.parent_id == ids[0]  # refreshed by a SELECT of its own
        assert type(child.parent_id) is ULID


async def _async_contexts(url: str, ids: list[ULID]) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            plain = (await conn.scalars(sa.select(parents.c.id).order_by(parents.c.id))).all()
            assert plain == ids
            assert _all_ulids(list(plain))
            inner = sa.select(parents.c.id).where(parents.c.n > 0).subquery()
            nested = (await conn.scalars(sa.select(inner.c.id).order_by(inner.c.id))).all()
            assert nested == ids[1:]
            distinct = (
                await conn.scalars(
                    sa.select(children.c.parent_id).distinct().order_by(children.c.parent_id)
                )
            ).all()
            assert distinct == ids
            assert _all_ulids(list(distinct))
            raw = sa.text("SELECT id FROM read_parents ORDER BY id").columns(id=ULIDType())
            assert (await conn.scalars(raw)).all() == ids
        async with engine.begin() as conn:
            fresh = new_ulid()
            got = await conn.scalar(
                parents.insert().returning(parents.c.id), {"id": fresh, "n": 20}
            )
            assert got == fresh
            assert type(got) is ULID
            await conn.execute(parents.delete().where(parents.c.id == fresh))
    finally:
        await engine.dispose()


def test_async_drivers(backend: Backend, ids: list[ULID]) -> None:
    for url in backend.async_urls:
        asyncio.run(asyncio.wait_for(_async_contexts(url, ids), timeout=60))
