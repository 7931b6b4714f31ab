"""Strawberry Relay connections (KeysetConnection): a real schema on the three servers."""

from __future__ import annotations

import pytest

# The integrations (tests-integrations extra) support newer SQLAlchemy releases
# than our floor: the floor job runs without them, and this module skips.
pytest.importorskip("strawberry")
pytest.importorskip("strawberry_sqlalchemy_mapper")

import asyncio
import random
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
import strawberry
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from strawberry.types import Info
from strawberry_sqlalchemy_mapper import StrawberrySQLAlchemyMapper

from conftest import Backend, recording
from sqlalchemy_ulid import ULID, CursorSealer, ULIDType
from sqlalchemy_ulid.contrib.strawberry import KeysetConnection, aconnection, connection

MS = 1_712_345_678_901
SEALER = CursorSealer(bytes(range(32)), context="fruits")


class Base(DeclarativeBase):
    pass


class Fruit(Base):
    __tablename__ = "contrib_strawberry_fruits"

    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(20))
    weight: Mapped[int | None]


@strawberry.type
class FruitNode:
    id: str
    name: str
    weight: int | None


def to_node(fruit: Fruit) -> FruitNode:
    return FruitNode(id=str(fruit.id), name=fruit.name, weight=fruit.weight)


def statement(by_weight: bool) -> sa.Select[Any]:
    stmt = sa.select(Fruit)
    if by_weight:  # heaviest first, NULL weights where the database puts them, ties by id
        return stmt.order_by(Fruit.weight.desc(), Fruit.id.desc())
    return stmt.order_by(Fruit.id)


@strawberry.type
class Query:
    @strawberry.field
    def fruits(
        self,
        info: Info,
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
        by_weight: bool = False,
        with_total: bool = False,
        sealed: bool = False,
    ) -> KeysetConnection[FruitNode]:
        return connection(
            info.context["session"],
            statement(by_weight),
            Fruit.id,
            first=first,
            after=after,
            last=last,
            before=before,
            total="exact" if with_total else None,
            sealer=SEALER if sealed else None,
            node=to_node,
            max_limit=20,
        )


@strawberry.type
class AsyncQuery:
    @strawberry.field
    async def fruits(
        self,
        info: Info,
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
        by_weight: bool = False,
        with_total: bool = False,
        sealed: bool = False,
    ) -> KeysetConnection[FruitNode]:
        return await aconnection(
            info.context["session"],
            statement(by_weight),
            Fruit.id,
            first=first,
            after=after,
            last=last,
            before=before,
            total="exact" if with_total else None,
            sealer=SEALER if sealed else None,
            node=to_node,
        )


SCHEMA = strawberry.Schema(Query)
ASYNC_SCHEMA = strawberry.Schema(AsyncQuery)

# strawberry-sqlalchemy-mapper: types made from the model; the ORM objects are
# the nodes (no node= needed). ULIDType maps to ID, which Strawberry writes as str().
MAPPER = StrawberrySQLAlchemyMapper(
    extra_sqlalchemy_type_to_strawberry_type_map={ULIDType: strawberry.ID}
)


@MAPPER.type(Fruit)
class MappedFruit:
    pass


@strawberry.type
class MappedQuery:
    @strawberry.field
    def fruits(
        self, info: Info, first: int | None = None, after: str | None = None
    ) -> KeysetConnection[MappedFruit]:
        return connection(
            info.context["session"], statement(True), Fruit.id, first=first, after=after
        )


MAPPER.finalize()
MAPPED_SCHEMA = strawberry.Schema(MappedQuery)

PAGE = """
query ($first: Int, $after: String, $last: Int, $before: String,
       $byWeight: Boolean! = false, $withTotal: Boolean! = false, $sealed: Boolean! = false) {
  fruits(first: $first, after: $after, last: $last, before: $before,
         byWeight: $byWeight, withTotal: $withTotal, sealed: $sealed) {
    edges { cursor node { name } }
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
    totalCount
  }
}
"""


@pytest.fixture
def fruits(engine: Engine) -> Iterator[list[str]]:
    """17 fruits, weights with ties and NULLs; yields the names in id order."""
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    rng = random.Random(23)
    rows = [
        Fruit(id=ULID.from_parts(MS + n, n), name=f"f{n:02}", weight=rng.choice([None, 1, 2, 3]))
        for n in range(17)
    ]
    with Session(engine) as session:
        session.add_all(rows)
        session.commit()
    yield [f"f{n:02}" for n in range(17)]
    Base.metadata.drop_all(engine)


def run(engine: Engine, **variables: Any) -> dict[str, Any]:
    with Session(engine) as session:
        result = SCHEMA.execute_sync(
            PAGE, variable_values=variables, context_value={"session": session}
        )
    assert result.errors is None, result.errors
    assert result.data is not None
    return result.data["fruits"]  # type: ignore[no-any-return]


def names(data: dict[str, Any]) -> list[str]:
    return [edge["node"]["name"] for edge in data["edges"]]


def expected(engine: Engine, by_weight: bool) -> list[str]:
    with Session(engine) as session:
        return [f.name for f in session.scalars(statement(by_weight))]


@pytest.mark.parametrize("by_weight", [False, True])
@pytest.mark.parametrize("sealed", [False, True])
def test_walk_forward_and_backward(
    engine: Engine, fruits: list[str], by_weight: bool, sealed: bool
) -> None:
    oracle = expected(engine, by_weight)
    seen: list[str] = []
    cursor = None
    pages = []
    while True:
        data = run(engine, first=5, after=cursor, byWeight=by_weight, sealed=sealed)
        pages.append(data)
        seen += names(data)
        info = data["pageInfo"]
        assert info["hasPreviousPage"] is (cursor is not None)
        assert info["startCursor"] == data["edges"][0]["cursor"]
        assert info["endCursor"] == data["edges"][-1]["cursor"]
        if not info["hasNextPage"]:
            break
        cursor = info["endCursor"]
    assert seen == oracle
    assert [len(p["edges"]) for p in pages] == [5, 5, 5, 2]
    # backward from the last edge: everything before it, last:5 at a time
    back: list[str] = []
    cursor = pages[-1]["edges"][-1]["cursor"]
    while True:
        data = run(engine, last=5, before=cursor, byWeight=by_weight, sealed=sealed)
        back = names(data) + back
        assert data["pageInfo"]["hasNextPage"] is True  # the edge we came from
        if not data["pageInfo"]["hasPreviousPage"]:
            break
        cursor = data["pageInfo"]["startCursor"]
    assert [*back, oracle[-1]] == oracle
    # any edge's cursor continues after that edge
    middle = pages[1]["edges"][2]
    assert (
        names(run(engine, first=3, after=middle["cursor"], byWeight=by_weight, sealed=sealed))
        == (oracle[8:11])
    )
    if sealed:
        # tokens, not ids: 46 characters for an id, longer for two keys
        assert all(len(e["cursor"]) >= 46 for e in pages[0]["edges"])
        assert SEALER.open(pages[0]["edges"][0]["cursor"])["after"] is not None


def test_total_count_and_default_page(engine: Engine, fruits: list[str]) -> None:
    data = run(engine, withTotal=True)
    assert data["totalCount"] == 17
    assert names(data) == fruits  # 17 < the default page of 50
    assert data["pageInfo"] == {
        "hasNextPage": False,
        "hasPreviousPage": False,
        "startCursor": data["edges"][0]["cursor"],
        "endCursor": data["edges"][-1]["cursor"],
    }
    assert run(engine, first=2)["totalCount"] is None  # no COUNT unless asked


def errors(engine: Engine, **variables: Any) -> tuple[list[str], list[Any], list[str]]:
    with Session(engine) as session, recording(engine) as seen:
        result = SCHEMA.execute_sync(
            PAGE, variable_values=variables, context_value={"session": session}
        )
    assert result.errors is not None
    assert result.data is None
    return [e.message for e in result.errors], [e.extensions for e in result.errors], seen


def test_bad_cursors_are_graphql_errors_before_any_sql(engine: Engine, fruits: list[str]) -> None:
    weight_cursor = run(engine, first=2, byWeight=True)["pageInfo"]["endCursor"]
    id_cursor = run(engine, first=2)["pageInfo"]["endCursor"]
    sealed = run(engine, first=2, sealed=True)["pageInfo"]["endCursor"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"after": "not-a-cursor"}, "after: "),  # neither an id nor a keyset cursor
        ({"last": 2, "before": "01HTQW311N1KR5G0Y75M3EF00"}, "before: "),  # 25 characters
        ({"after": weight_cursor}, "after: "),  # a cursor of another sort
        ({"after": id_cursor, "byWeight": True}, "after: "),  # a bare id under a two-key sort
        ({"after": weight_cursor[:-3], "byWeight": True}, "after: "),  # truncated
        ({"after": sealed[:-2] + "AA", "sealed": True}, "after: "),  # tampered token
        ({"after": id_cursor, "sealed": True}, "after: "),  # not a sealed token
    ]
    for variables, prefix in cases:
        messages, extensions, seen = errors(engine, **variables)
        assert messages[0].startswith(prefix), (variables, messages)
        assert extensions == [{"code": "INVALID_CURSOR"}], variables
        assert seen == [], variables


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"first": 2, "last": 2, "before": "x"}, "not both"),  # both directions
        ({"last": 2}, "last needs before"),  # no cursor to page back from
        ({"first": 0}, "first must be from 1 to 20, got 0"),  # an empty page
        ({"first": 21}, "first must be from 1 to 20, got 21"),  # above max_limit
        ({"last": -1, "before": "x"}, "last must be from 1 to 20, got -1"),
    ],
)
def test_bad_arguments(engine: Engine, variables: dict[str, Any], message: str) -> None:
    messages, _, seen = errors(engine, **variables)
    assert message in messages[0]
    assert seen == []


def test_async_schema(backend: Backend, engine: Engine, fruits: list[str]) -> None:
    oracle = expected(engine, True)

    async def walk(url: str) -> tuple[list[str], int | None, list[str]]:
        async_engine = create_async_engine(url)
        try:
            async with AsyncSession(async_engine) as session:
                seen: list[str] = []
                total = None
                variables: dict[str, Any] = {
                    "first": 6,
                    "byWeight": True,
                    "withTotal": True,
                    "sealed": True,
                }
                while True:
                    result = await ASYNC_SCHEMA.execute(
                        PAGE, variable_values=variables, context_value={"session": session}
                    )
                    assert result.errors is None, result.errors
                    assert result.data is not None
                    data = result.data["fruits"]
                    seen += names(data)
                    total = data["totalCount"]
                    if not data["pageInfo"]["hasNextPage"]:
                        break
                    variables["after"] = data["pageInfo"]["endCursor"]
                bad = await ASYNC_SCHEMA.execute(
                    PAGE, variable_values={"after": "garbage"}, context_value={"session": session}
                )
                assert bad.errors is not None
                return seen, total, [e.message for e in bad.errors]
        finally:
            await async_engine.dispose()

    for url in backend.async_urls:
        seen, total, messages = asyncio.run(walk(url))
        assert seen == oracle, url
        assert total == 17
        assert messages[0].startswith("after: "), messages


def test_strawberry_sqlalchemy_mapper_types(engine: Engine, fruits: list[str]) -> None:
    query = """query ($after: String) { fruits(first: 7, after: $after) {
        edges { cursor node { id name weight } } pageInfo { hasNextPage endCursor } } }"""
    oracle = expected(engine, True)
    seen: list[dict[str, Any]] = []
    after = None
    with Session(engine) as session:
        while True:
            result = MAPPED_SCHEMA.execute_sync(
                query, variable_values={"after": after}, context_value={"session": session}
            )
            assert result.errors is None, result.errors
            assert result.data is not None
            data = result.data["fruits"]
            seen += [edge["node"] for edge in data["edges"]]
            if not data["pageInfo"]["hasNextPage"]:
                break
            after = data["pageInfo"]["endCursor"]
        by_id = {str(f.id): f for f in session.scalars(sa.select(Fruit))}
    assert [node["name"] for node in seen] == oracle
    assert all(by_id[node["id"]].weight == node["weight"] for node in seen)
