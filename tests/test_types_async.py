"""ULIDType through async drivers: asyncpg, psycopg (async), aiosqlite, asyncmy."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from sqlalchemy_ulid import (
    ULID,
    ULIDType,
    new_ulid,
    register_ulid_function,
    ulid_server_default,
)

if TYPE_CHECKING:
    from conftest import Backend


class Base(DeclarativeBase):
    type_annotation_map = {ULID: ULIDType}  # noqa: RUF012 (SQLAlchemy reads a plain dict)


class Item(Base):
    __tablename__ = "async_items"

    id: Mapped[ULID] = mapped_column(primary_key=True, default=new_ulid)
    n: Mapped[int]


texts = sa.Table(
    "async_texts",
    Base.metadata,
    sa.Column("id", ULIDType("text"), primary_key=True),
    sa.Column("raw", ULIDType("binary", as_str=True)),
)


async def _exercise(url: str) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(Base.metadata.drop_all)
            await conn.run_sync(Base.metadata.create_all)
        ids = [new_ulid() for _ in range(4)]
        binds: list[object] = [ids[0], str(ids[1]).lower(), uuid.UUID(bytes=ids[2].bytes)]
        binds.append(ids[3].bytes)
        items = Item.__table__
        async with engine.begin() as conn:
            await conn.execute(items.insert(), [{"id": b, "n": i} for i, b in enumerate(binds)])
            await conn.execute(texts.insert(), [{"id": u, "raw": u} for u in ids])
            got = (await conn.scalars(sa.select(items.c.id).order_by(items.c.n))).all()
            assert got == ids
            assert all(type(u) is ULID for u in got)
            above = sa.select(items.c.n).where(items.c.id > str(ids[1]).lower())
            assert sorted((await conn.scalars(above)).all()) == [2, 3]
            rows = (await conn.execute(sa.select(texts).order_by(texts.c.id))).all()
            assert rows == [(u, str(u)) for u in ids]
            many = [{"n": 100 + i} for i in range(2_000)]
            await conn.execute(sa.insert(Item), many)
            order = (
                await conn.scalars(
                    sa.select(items.c.n).where(items.c.n >= 100).order_by(items.c.id)
                )
            ).all()
            assert order == list(range(100, 2_100))
        async with AsyncSession(engine) as session:
            u = new_ulid()
            item = Item(id=str(u).lower(), n=-1)
            session.add(item)
            await session.flush()
            assert await session.get(Item, u) is item
            session.expire_all()
            assert await session.get(Item, ids[0]) is not None
            assert (await session.get(Item, u)) is item
            await session.commit()
    finally:
        async with engine.begin() as conn:
            await conn.run_sync(Base.metadata.drop_all)
        await engine.dispose()


def test_async_engines_and_sessions(backend: Backend) -> None:
    for url in backend.async_urls:
        asyncio.run(_exercise(url))


def test_sqlite_server_function_on_an_async_engine(tmp_path: Path) -> None:
    async def run() -> list[ULID]:
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/async.sqlite3")
        register_ulid_function(engine.sync_engine)
        table = sa.Table(
            "generated",
            sa.MetaData(),
            sa.Column("id", ULIDType(), primary_key=True, server_default=ulid_server_default()),
            sa.Column("n", sa.Integer),
        )
        try:
            async with engine.begin() as conn:
                await conn.run_sync(table.metadata.create_all)
                for n in range(3):
                    await conn.exec_driver_sql(f"INSERT INTO generated (n) VALUES ({n})")
                return list(await conn.scalars(sa.select(table.c.id).order_by(table.c.n)))
        finally:
            await engine.dispose()

    ids = asyncio.run(run())
    assert len(ids) == 3
    assert ids == sorted(ids)
