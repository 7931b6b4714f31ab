"""A TypeIDType key behind a Strawberry Relay connection (KeysetConnection), on every backend."""

from __future__ import annotations

import pytest

# The integrations (tests-integrations extra) support newer SQLAlchemy releases
# than our floor: the floor job runs without them, and this module skips.
pytest.importorskip("strawberry")

from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
import strawberry
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from strawberry.types import Info

from conftest import recording
from sqlalchemy_ulid import TypeID, TypeIDType, new_typeid
from sqlalchemy_ulid.contrib.strawberry import KeysetConnection, connection


class Base(DeclarativeBase):
    pass


class Member(Base):
    __tablename__ = "tid_gql_members"

    id: Mapped[TypeID] = mapped_column(
        TypeIDType("member"), primary_key=True, default=lambda: new_typeid("member")
    )
    name: Mapped[str] = mapped_column(sa.String(20))


@strawberry.type
class MemberNode:
    id: str
    name: str


@strawberry.type
class Query:
    @strawberry.field
    def members(
        self, info: Info, first: int | None = None, after: str | None = None
    ) -> KeysetConnection[MemberNode]:
        return connection(
            info.context["session"],
            sa.select(Member).order_by(Member.id),
            Member.id,
            first=first,
            after=after,
            node=lambda m: MemberNode(id=str(m.id), name=m.name),
        )


SCHEMA = strawberry.Schema(Query)
PAGE = """
query ($first: Int, $after: String) {
  members(first: $first, after: $after) {
    edges { cursor node { id name } }
    pageInfo { hasNextPage endCursor }
  }
}
"""


@pytest.fixture
def members(engine: Engine) -> Iterator[list[str]]:
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    try:
        with Session(engine) as session:
            rows = [Member(name=f"m{n}") for n in range(7)]
            session.add_all(rows)
            session.commit()
            ids = sorted(str(row.id) for row in rows)
        yield ids
    finally:
        Base.metadata.drop_all(engine)


def _query(engine: Engine, **variables: Any) -> Any:
    with Session(engine) as session:
        return SCHEMA.execute_sync(
            PAGE, variable_values=variables, context_value={"session": session}
        )


def test_connection_pages_with_typed_cursors(engine: Engine, members: list[str]) -> None:
    seen: list[str] = []
    after: str | None = None
    while True:
        result = _query(engine, first=3, after=after)
        assert result.errors is None, result.errors
        data = result.data["members"]
        seen += [edge["node"]["id"] for edge in data["edges"]]
        assert all(edge["cursor"].startswith("member_") for edge in data["edges"])
        if not data["pageInfo"]["hasNextPage"]:
            break
        after = data["pageInfo"]["endCursor"]
    assert seen == members

    other = "user_" + members[2].removeprefix("member_")
    with recording(engine) as sent:
        result = _query(engine, first=3, after=other)
    assert [e.extensions for e in result.errors] == [{"code": "INVALID_CURSOR"}]
    assert "expected prefix 'member', got 'user'" in result.errors[0].message
    assert not [s for s in sent if "tid_gql_members" in s]
