"""A Strawberry GraphQL API whose ``books`` connection pages by keyset cursors.

Run ``python examples/strawberry_app/app.py [DATABASE_URL]`` for a scripted
tour (SQLite in memory by default). To serve it, mount ``schema`` with
Strawberry's ASGI app and a context that opens a session per request.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import sqlalchemy as sa
import strawberry
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from strawberry.types import Info

from sqlalchemy_ulid import ULID, ULIDType, new_ulid
from sqlalchemy_ulid.contrib.strawberry import KeysetConnection, connection


class Base(DeclarativeBase):
    pass


class Book(Base):
    __tablename__ = "gql_books"

    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True, default=new_ulid)
    title: Mapped[str] = mapped_column(sa.String(80))
    rating: Mapped[int]


@strawberry.type
class BookNode:
    id: strawberry.ID
    title: str
    rating: int

    @staticmethod
    def of(book: Book) -> BookNode:
        book_id = strawberry.ID(str(book.id))
        return BookNode(id=book_id, title=book.title, rating=book.rating)


@strawberry.type
class Query:
    @strawberry.field
    def books(
        self,
        info: Info,
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
        best_first: bool = False,
        with_total: bool = False,
    ) -> KeysetConnection[BookNode]:
        stmt = sa.select(Book)
        if best_first:  # any ORDER BY that ends with the id
            stmt = stmt.order_by(Book.rating.desc(), Book.id.desc())
        return connection(
            info.context["session"],
            stmt,
            Book.id,
            first=first,
            after=after,
            last=last,
            before=before,
            total="exact" if with_total else None,
            node=BookNode.of,
        )


schema = strawberry.Schema(Query)

BOOKS = """
query Books($first: Int, $after: String, $bestFirst: Boolean! = false) {
  books(first: $first, after: $after, bestFirst: $bestFirst, withTotal: true) {
    totalCount
    edges { cursor node { title rating } }
    pageInfo { hasNextPage hasPreviousPage endCursor }
  }
}
"""


def make_engine(url: str | None = None) -> sa.Engine:
    """An engine on ``url`` (or DATABASE_URL, or SQLite in memory), with the table."""
    engine = sa.create_engine(url or os.environ.get("DATABASE_URL", "sqlite://"))
    Base.metadata.create_all(engine)
    return engine


def execute(engine: sa.Engine, query: str, **variables: Any) -> dict[str, Any]:
    """Run one GraphQL query with a session of its own; errors as their messages."""
    with Session(engine) as session:
        result = schema.execute_sync(
            query, variable_values=variables, context_value={"session": session}
        )
    if result.errors:
        return {"errors": [error.message for error in result.errors]}
    assert result.data is not None
    return result.data


def tour(url: str | None = None) -> list[str]:
    """Add seven books, walk them best first, three a page; return the titles."""
    engine = make_engine(url)
    titles: list[str] = []
    try:
        with Session(engine) as session:
            ratings = [3, 5, 4, 5, 2, 4, 3]
            books = [Book(title=f"Book {n}", rating=r) for n, r in enumerate(ratings)]
            session.add_all(books)
            session.commit()
        after = None
        while True:
            result = execute(engine, BOOKS, first=3, after=after, bestFirst=True)
            data = result["books"]
            nodes = [edge["node"] for edge in data["edges"]]
            page = ", ".join(f"{node['title']} ({node['rating']})" for node in nodes)
            print(f"{data['totalCount']} books; this page: {page}")
            titles += [edge["node"]["title"] for edge in data["edges"]]
            if not data["pageInfo"]["hasNextPage"]:
                break
            after = data["pageInfo"]["endCursor"]
        bad = execute(engine, BOOKS, after="not-a-cursor")
        print("a bad cursor:", bad["errors"][0])
    finally:
        Base.metadata.drop_all(engine)
        engine.dispose()
    return titles


if __name__ == "__main__":
    tour(sys.argv[1] if len(sys.argv) > 1 else None)
