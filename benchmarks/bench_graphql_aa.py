"""A 50-row page at 90% depth of 100k rows: Relay connections and advanced-alchemy.

One table ``(id ULID primary key, n int, name)`` per server (SQLite in a
file, PostgreSQL, MariaDB). For each it prints the median ms of:

* a Strawberry query ``items(first: 50, after: ...)`` at depth 0 and 90%,
  through :class:`KeysetConnection` (our keyset cursor) and through
  Strawberry's ``ListConnection`` over a sliceable SQLAlchemy ``Query`` (its
  ``arrayconnection:N`` cursor becomes ``OFFSET N``), same schema otherwise;
* advanced-alchemy's ``list_and_count(LimitOffset(50, depth))`` against our
  ``list_page(After(cursor))``, without and with ``total="exact"``.

Run: ``.venv/bin/python benchmarks/bench_graphql_aa.py [--rows 100000] [--rounds 15]``
(URLs from SQLALCHEMY_ULID_POSTGRESQL_URL / SQLALCHEMY_ULID_MYSQL_URL, else the
local test servers).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import sqlalchemy as sa
import strawberry
from _servers import URLS  # benchmarks/ is on sys.path when a script runs
from advanced_alchemy.filters import LimitOffset, OrderBy
from advanced_alchemy.repository import SQLAlchemySyncRepository
from advanced_alchemy.service import SQLAlchemySyncRepositoryService
from bench_pagination import interleaved_ms
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from strawberry import relay
from strawberry.types import Info

from sqlalchemy_ulid import ULID, ULIDType
from sqlalchemy_ulid.contrib.advanced_alchemy import After, KeysetServiceMixin
from sqlalchemy_ulid.contrib.strawberry import KeysetConnection, connection

PAGE = 50


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "bench_graphql_items"

    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True)
    n: Mapped[int]
    name: Mapped[str] = mapped_column(sa.String(40))


@strawberry.type
class ItemNode:
    id: strawberry.ID
    n: int
    name: str


def to_node(item: Item) -> ItemNode:
    return ItemNode(id=strawberry.ID(str(item.id)), n=item.n, name=item.name)


@strawberry.type(name="ItemListConnection")
class ItemListConnection(relay.ListConnection[ItemNode]):  # type: ignore[type-var]
    @classmethod
    def resolve_node(cls, node: Any, *, info: Info, **kwargs: Any) -> ItemNode:
        return to_node(node)


@strawberry.type
class Query:
    @strawberry.field
    def items(
        self, info: Info, first: int | None = None, after: str | None = None
    ) -> KeysetConnection[ItemNode]:
        stmt = sa.select(Item).order_by(Item.id)
        return connection(info.context, stmt, Item.id, first=first, after=after, node=to_node)

    @relay.connection(ItemListConnection)
    def offset_items(self, info: Info) -> Iterable[ItemNode]:
        # A legacy Query slices as OFFSET/LIMIT: what ListConnection does with it.
        return info.context.query(Item).order_by(Item.id)  # type: ignore[no-any-return]


SCHEMA = strawberry.Schema(Query)
OURS = "query ($after: String) { items(first: 50, after: $after) { %s } }"
THEIRS = "query ($after: String) { offsetItems(first: 50, after: $after) { %s } }"
FIELDS = "edges { cursor node { id n name } } pageInfo { hasNextPage endCursor }"


class ItemRepository(SQLAlchemySyncRepository[Item]):
    model_type = Item


class ItemService(KeysetServiceMixin[Item], SQLAlchemySyncRepositoryService[Item]):
    repository_type = ItemRepository


def load(engine: sa.Engine, rows: int) -> None:
    with engine.connect() as conn:
        if sa.inspect(conn).has_table(Item.__tablename__):
            have = conn.scalar(sa.select(sa.func.count()).select_from(Item)) or 0
            if have == rows:
                return
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    base = 1_712_345_678_901
    batch = [{"id": ULID.from_parts(base + n, n), "n": n, "name": f"item {n}"} for n in range(rows)]
    with engine.begin() as conn:
        for start in range(0, rows, 10_000):
            conn.execute(sa.insert(Item), batch[start : start + 10_000])
    started = time.perf_counter()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        analyze = {"postgresql": "VACUUM ANALYZE ", "mysql": "ANALYZE TABLE "}
        prefix = analyze.get(engine.dialect.name, "ANALYZE ")
        conn.exec_driver_sql(prefix + Item.__tablename__)
    print(
        f"  loaded {rows} rows into {engine.dialect.name} ({time.perf_counter() - started:.0f} s)"
    )


def gql(session: Session, query: str, after: str | None) -> dict[str, Any]:
    result = SCHEMA.execute_sync(query, variable_values={"after": after}, context_value=session)
    assert result.errors is None, result.errors
    assert result.data is not None
    return result.data


def bench(engine: sa.Engine, rows: int, rounds: int) -> dict[str, float]:
    runs: dict[str, Callable[[], Any]] = {}
    session = Session(engine)
    service = ItemService(session=session)
    for label, depth in (("0", 0), ("90%", int(rows * 0.9))):
        ours_after = theirs_after = None
        if depth:
            before = session.scalars(
                sa.select(Item.id).order_by(Item.id).offset(depth - 1).limit(1)
            ).one()
            ours_after = str(before)
            theirs_after = relay.to_base64("arrayconnection", depth - 1)
        ours_q, theirs_q = OURS % FIELDS, THEIRS % FIELDS
        a = gql(session, ours_q, ours_after)["items"]["edges"]
        b = gql(session, theirs_q, theirs_after)["offsetItems"]["edges"]
        assert [e["node"] for e in a] == [e["node"] for e in b], label
        runs[f"strawberry ours {label}"] = lambda q=ours_q, c=ours_after: gql(session, q, c)
        runs[f"strawberry ListConnection {label}"] = lambda q=theirs_q, c=theirs_after: gql(
            session, q, c
        )
        cursor = [] if ours_after is None else [After(ours_after)]
        sort = OrderBy("id", "asc")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            items, _ = service.list_and_count(LimitOffset(PAGE, depth), sort)
        assert [i.id for i in items] == [i.id for i in service.list_page(*cursor, limit=PAGE).items]

        def offset(depth: int = depth, sort: Any = sort) -> Any:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                return service.list_and_count(LimitOffset(PAGE, depth), sort)

        runs[f"aa list_and_count {label}"] = offset
        runs[f"aa list_page {label}"] = lambda c=cursor: service.list_page(*c, limit=PAGE)
        runs[f"aa list_page total {label}"] = lambda c=cursor: service.list_page(
            *c, limit=PAGE, total="exact"
        )
    try:
        return interleaved_ms(runs, rounds)
    finally:
        session.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    path = os.path.join(tempfile.gettempdir(), "bench_graphql_aa.sqlite3")
    urls = {"SQLite": f"sqlite:///{path}", **URLS}
    results: dict[str, dict[str, float]] = {}
    for name, url in urls.items():
        engine = sa.create_engine(url)
        load(engine, args.rows)
        results[name] = bench(engine, args.rows, args.rounds)
        engine.dispose()
    pairs = [
        ("Strawberry, depth 0", "strawberry ListConnection 0", "strawberry ours 0"),
        ("Strawberry, depth 90%", "strawberry ListConnection 90%", "strawberry ours 90%"),
        ("advanced-alchemy, depth 0", "aa list_and_count 0", "aa list_page 0"),
        ("advanced-alchemy, depth 90%", "aa list_and_count 90%", "aa list_page 90%"),
        ("advanced-alchemy + total, 90%", "aa list_and_count 90%", "aa list_page total 90%"),
    ]
    print(f"\nmedian ms of one {PAGE}-row page over {args.rows} rows ({args.rounds} rounds)")
    print("| page | server | offset (theirs) | keyset (ours) | offset / ours |")
    print("|---|---|---:|---:|---:|")
    for title, theirs, ours in pairs:
        for name, times in results.items():
            ratio = times[theirs] / times[ours]
            print(f"| {title} | {name} | {times[theirs]:.2f} | {times[ours]:.2f} | {ratio:.1f}x |")


if __name__ == "__main__":
    main()
