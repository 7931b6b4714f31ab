"""Bulk INSERT ... RETURNING in parameter order, ids in every accepted form.

Item 3 of issue 10: Core executemany and ORM bulk inserts with
``sort_by_parameter_order=True`` match the returned rows to the parameter
sets whether the ids come as ULID, str (either case), uuid.UUID or bytes.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from conftest import recording
from sqlalchemy_ulid import ULID, InvalidULID, ULIDType, new_ulid

if TYPE_CHECKING:
    from conftest import Backend

# sort_by_parameter_order arrived in SQLAlchemy 2.0.10; before it there is
# nothing to match.
pytestmark = pytest.mark.skipif(
    "sort_by_parameter_order" not in inspect.signature(sa.Insert.returning).parameters,
    reason="SQLAlchemy < 2.0.10 has no sort_by_parameter_order",
)


class Base(DeclarativeBase):
    type_annotation_map = {ULID: ULIDType}  # noqa: RUF012 (SQLAlchemy reads a plain dict)


class Item(Base):
    __tablename__ = "bulk_items"

    id: Mapped[ULID] = mapped_column(primary_key=True, default=new_ulid)
    n: Mapped[int]
    ref: Mapped[str | None] = mapped_column(ULIDType(as_str=True))


FORMS: dict[str, Callable[[ULID], object]] = {
    "ULID": lambda u: u,
    "upper str": str,
    "lower str": lambda u: str(u).lower(),
    "uuid.UUID": ULID.to_uuid,
    "bytes": bytes,
}


def _ids(count: int) -> list[ULID]:
    # Shuffled, so rows come back in parameter order only if matched right.
    ids = [new_ulid() for _ in range(count)]
    return ids[::2] + ids[1::2]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("storage", ["auto", "text"])
def test_core_executemany_returning(
    engine: Engine, metadata: sa.MetaData, form: str, storage: str
) -> None:
    table = sa.Table(
        "bulk_core",
        metadata,
        sa.Column("id", ULIDType(storage), primary_key=True, default=new_ulid),  # type: ignore[arg-type]
        sa.Column("n", sa.Integer, nullable=False),
    )
    metadata.create_all(engine)
    ids = _ids(7)
    convert = FORMS[form]
    statement = table.insert().returning(table.c.id, table.c.n, sort_by_parameter_order=True)
    with engine.begin() as conn:
        rows = conn.execute(statement, [{"id": convert(u), "n": i} for i, u in enumerate(ids)])
        assert [tuple(row) for row in rows] == [(u, i) for i, u in enumerate(ids)]
        assert sorted(conn.scalars(sa.select(table.c.id))) == sorted(ids)


@pytest.mark.parametrize("form", FORMS)
def test_orm_bulk_insert_returning(engine: Engine, form: str) -> None:
    Base.metadata.create_all(engine)
    try:
        ids = _ids(6)
        convert = FORMS[form]
        refs = [new_ulid() for _ in ids]
        with Session(engine) as session:
            items = session.scalars(
                sa.insert(Item).returning(Item, sort_by_parameter_order=True),
                [
                    {"id": convert(u), "n": i, "ref": convert(r)}
                    for i, (u, r) in enumerate(zip(ids, refs, strict=True))
                ],
            ).all()
            assert [(item.id, item.n, item.ref) for item in items] == [
                (u, i, str(r)) for i, (u, r) in enumerate(zip(ids, refs, strict=True))
            ]
            assert all(type(item.id) is ULID for item in items)
            session.commit()
            assert session.get(Item, ids[3]) is items[3]
    finally:
        Base.metadata.drop_all(engine)


def test_bad_id_in_bulk_returning_writes_nothing(engine: Engine, metadata: sa.MetaData) -> None:
    table = sa.Table(
        "bulk_bad",
        metadata,
        sa.Column("id", ULIDType(), primary_key=True),
        sa.Column("n", sa.Integer),
    )
    metadata.create_all(engine)
    statement = table.insert().returning(table.c.id, sort_by_parameter_order=True)
    params = [{"id": str(new_ulid()), "n": 1}, {"id": "bad", "n": 2}]
    with recording(engine) as sent, engine.connect() as conn, pytest.raises(InvalidULID):
        conn.execute(statement, params)
    assert not any("INSERT" in s.upper() for s in sent)
    with engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(table)) == 0


def test_other_statements_keep_their_parameters(engine: Engine, metadata: sa.MetaData) -> None:
    table = sa.Table(
        "bulk_plain",
        metadata,
        sa.Column("id", ULIDType(), primary_key=True),
        sa.Column("n", sa.Integer),
    )
    metadata.create_all(engine)
    given = [{"id": str(new_ulid()), "n": 1}, {"id": uuid.UUID(int=new_ulid().int), "n": 2}]
    with engine.begin() as conn:
        conn.execute(table.insert(), given)  # plain executemany: binds convert
        rows = conn.execute(sa.select(table.c.n).order_by(table.c.n)).scalars().all()
    assert rows == [1, 2]
    assert isinstance(given[0]["id"], str)  # the caller's dicts are not touched


async def _async_bulk(url: str) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    metadata = sa.MetaData()
    table = sa.Table(
        "bulk_async",
        metadata,
        sa.Column("id", ULIDType(), primary_key=True),
        sa.Column("n", sa.Integer),
    )
    try:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
            ids = _ids(5)
            statement = table.insert().returning(table.c.id, sort_by_parameter_order=True)
            params = [{"id": str(u).lower(), "n": i} for i, u in enumerate(ids)]
            assert (await conn.execute(statement, params)).scalars().all() == ids
            await conn.run_sync(metadata.drop_all)
    finally:
        await engine.dispose()


def test_async_drivers_bulk_returning(backend: Backend) -> None:
    for url in backend.async_urls:
        asyncio.run(_async_bulk(url))
