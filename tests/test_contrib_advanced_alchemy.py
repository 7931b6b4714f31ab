"""advanced-alchemy: keyset filters and list_page() with the real package on the three servers.

On advanced-alchemy's UUIDv7Base (GUID ids), our ULIDBase and our TypeIDBase
(typed ids, issue 35).
"""

from __future__ import annotations

import pytest

# advanced-alchemy (tests-integrations) supports newer SQLAlchemy releases only.
pytest.importorskip("advanced_alchemy")

import asyncio
import random
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from advanced_alchemy.base import UUIDv7Base
from advanced_alchemy.filters import CollectionFilter, LimitOffset, OrderBy
from advanced_alchemy.repository import SQLAlchemyAsyncRepository, SQLAlchemySyncRepository
from advanced_alchemy.service import (
    SQLAlchemyAsyncRepositoryService,
    SQLAlchemySyncRepositoryService,
)
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Mapped, Session, mapped_column

from conftest import Backend
from sqlalchemy_ulid import (
    ULID,
    InvalidCursor,
    InvalidTypeID,
    InvalidULID,
    TypeID,
    TypeIDBase,
    ULIDBase,
)
from sqlalchemy_ulid.contrib.advanced_alchemy import (
    After,
    AsyncKeysetServiceMixin,
    Before,
    CreatedBetween,
    CreatedSince,
    KeysetServiceMixin,
    apaginate,
    paginate,
)
from strategies import v7

MS = 1_712_345_678_901  # 2024-04-05T19:34:38.901Z


class Seat(UUIDv7Base):
    __tablename__ = "contrib_aa_seats"

    row: Mapped[int | None]
    zone: Mapped[str] = mapped_column(sa.String(5))


class Doc(ULIDBase):
    __tablename__ = "contrib_aa_docs"

    row: Mapped[int | None]
    zone: Mapped[str] = mapped_column(sa.String(5))


class Ticket(TypeIDBase):
    __tablename__ = "contrib_aa_tickets"
    __typeid_prefix__ = "tkt"

    row: Mapped[int | None]
    zone: Mapped[str] = mapped_column(sa.String(5))


MODELS: list[Any] = [Seat, Doc, Ticket]


def make_id(model: Any, n: int, rng: random.Random) -> Any:
    if model is Seat:
        return v7(MS + n, rng.getrandbits(74))
    if model is Ticket:
        return TypeID.from_uuid("tkt", v7(MS + n, rng.getrandbits(74)))
    return ULID.from_parts(MS + n, rng.getrandbits(80))


@pytest.fixture(params=MODELS, ids=["UUIDv7Base", "ULIDBase", "TypeIDBase"])
def model(request: pytest.FixtureRequest, engine: Engine) -> Iterator[Any]:
    """19 rows, ids made 1 ms apart from MS, rows with ties and NULLs."""
    table = request.param.__table__
    table.drop(engine, checkfirst=True)
    table.create(engine)
    rng = random.Random(5)
    with Session(engine) as session:
        session.add_all(
            request.param(
                id=make_id(request.param, n, rng),
                row=rng.choice([None, 1, 2, 3]),
                zone="ab"[n % 2],
            )
            for n in range(19)
        )
        session.commit()
    yield request.param
    table.drop(engine)


def services(model: Any) -> tuple[type[Any], type[Any]]:
    class Repo(SQLAlchemySyncRepository[model]):  # type: ignore[valid-type]
        model_type = model

    class AsyncRepo(SQLAlchemyAsyncRepository[model]):  # type: ignore[valid-type]
        model_type = model

    class Service(KeysetServiceMixin[model], SQLAlchemySyncRepositoryService[model]):  # type: ignore[valid-type]
        repository_type = Repo

    class AsyncService(  # type: ignore[misc]
        AsyncKeysetServiceMixin[model],  # type: ignore[valid-type]
        SQLAlchemyAsyncRepositoryService[model],  # type: ignore[valid-type]
    ):
        repository_type = AsyncRepo

    return Service, AsyncService


SORT = (OrderBy("row", "desc"), OrderBy("id", "desc"))


def oracle(engine: Engine, model: Any, *where: Any) -> list[Any]:
    with Session(engine) as session:
        stmt = sa.select(model.id).where(*where).order_by(model.row.desc(), model.id.desc())
        return list(session.scalars(stmt))


def test_list_page_walks_any_order_both_ways(engine: Engine, model: Any) -> None:
    service_type, _ = services(model)
    expected = oracle(engine, model)
    with Session(engine) as session:
        service = service_type(session=session)
        seen: list[Any] = []
        filters: list[Any] = []
        while True:
            page = service.list_page(*SORT, *filters, limit=4, total="exact")
            assert page.total == 19
            seen += [item.id for item in page.items]
            if not page.has_more:
                break
            filters = [After(page.next_cursor)]
        back: list[Any] = []
        cursor = page.cursors[-1]
        while cursor is not None:
            page = service.list_page(Before(cursor), *SORT, limit=5)
            back = [item.id for item in page.items] + back
            cursor = page.prev_cursor
    assert seen == expected
    assert [*back, expected[-1]] == expected


def test_filters_and_kwargs_combine(engine: Engine, model: Any) -> None:
    expected = oracle(engine, model, model.zone == "a", model.row.in_([1, 3]))
    with Session(engine) as session:
        first = paginate(
            services(model)[0](session=session),
            CollectionFilter("row", [1, 3]),
            *SORT,
            zone="a",
            limit=2,
        )
        rest = paginate(
            services(model)[0](session=session).repository,  # a repository works too
            After(first.next_cursor),  # type: ignore[arg-type]
            CollectionFilter("row", [1, 3]),
            *SORT,
            zone="a",
            limit=100,
        )
    assert [i.id for i in first.items] + [i.id for i in rest.items] == expected
    assert not rest.has_more


def test_created_since_and_between_use_the_id(engine: Engine, model: Any) -> None:
    start = datetime.fromtimestamp((MS + 3) / 1000, timezone.utc)
    end = datetime.fromtimestamp((MS + 11) / 1000, timezone.utc)
    with Session(engine) as session:
        service = services(model)[0](session=session)
        ids = [r.id for r in service.get_many(OrderBy("id", "asc"))]
        since = service.get_many(CreatedSince(start), OrderBy("id", "asc"))
        between = service.get_many(CreatedBetween(start, MS + 11), OrderBy("id", "asc"))
        paged = service.list_page(CreatedBetween(MS + 3, end), limit=100)
        after = service.get_many(
            After(str(ids[15])), OrderBy("id", "asc")
        )  # plain list(): id > cursor
        before = service.get_many(Before(str(ids[2])), OrderBy("id", "asc"))
    assert [r.id for r in since] == ids[3:]
    assert [r.id for r in between] == ids[3:11] == [r.id for r in paged.items]
    assert [r.id for r in after] == ids[16:]
    assert [r.id for r in before] == ids[:2]


def test_bad_input_fails_before_any_sql(engine: Engine, model: Any, statements: list[str]) -> None:
    with Session(engine) as session:
        service = services(model)[0](session=session)
        keyset = service.list_page(*SORT, limit=3).next_cursor
        by_id = service.list_page(limit=3).next_cursor
        statements.clear()
        with pytest.raises(InvalidCursor):
            service.list_page(After(by_id), *SORT)  # an id cursor under a two-key sort
        with pytest.raises(InvalidCursor):
            service.list_page(After(keyset[:-4]), *SORT)  # truncated
        with pytest.raises(InvalidULID):
            service.list_page(Before("nonsense"))
        with pytest.raises(ValueError, match="not LimitOffset"):
            service.list_page(LimitOffset(10, 20))
        with pytest.raises(ValueError, match="not both"):
            service.list_page(After(by_id), Before(by_id))
        with pytest.raises(ValueError, match="naive"):
            service.list_page(CreatedSince(datetime(2024, 4, 5)))
        with pytest.raises(ValueError, match="after end"):
            service.get_many(CreatedBetween(MS + 5, MS + 1))
        with pytest.raises(InvalidULID):
            service.get_many(After(keyset))  # plain list() pages in id order: ids only
        if model is Ticket:  # a typed id of another prefix, as a cursor and as a filter
            other = "org_01h455vb4pex5vsknk084sn02q"
            with pytest.raises(InvalidTypeID, match="expected prefix 'tkt', got 'org'"):
                service.list_page(After(other))
            with pytest.raises(InvalidTypeID, match="expected prefix 'tkt', got 'org'"):
                service.get_many(Before(other))
            with pytest.raises(InvalidTypeID, match="expected prefix 'tkt', got 'org'"):
                service.get_many(CollectionFilter("id", [other]))
    assert statements == []


def test_async_services(backend: Backend, engine: Engine, model: Any) -> None:
    _, async_service = services(model)
    expected = oracle(engine, model)

    async def walk(url: str) -> tuple[list[Any], int | None]:
        async_engine = create_async_engine(url)
        try:
            async with AsyncSession(async_engine) as session:
                service = async_service(session=session)
                seen: list[Any] = []
                cursor: list[Any] = []
                while True:
                    page = await service.list_page(*SORT, *cursor, limit=6, total=100)
                    seen += [item.id for item in page.items]
                    if not page.has_more:
                        break
                    cursor = [After(page.next_cursor)]
                direct = await apaginate(service.repository, CreatedSince(MS + 10), limit=50)
                return seen, page.total, [item.id for item in direct.items]
        finally:
            await async_engine.dispose()

    for url in backend.async_urls:
        seen, total, recent = asyncio.run(walk(url))
        assert [uuid.UUID(str(i)) if model is Seat else i for i in seen] == expected, url
        assert total == 19
        assert len(recent) == 9
