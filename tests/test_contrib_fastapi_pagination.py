"""fastapi-pagination with ULIDCursorPage: TestClient on the three servers, sync and async."""

from __future__ import annotations

import pytest

# The integrations (tests-integrations extra) support newer SQLAlchemy releases
# than our floor: the floor job runs without them, and this module skips.
pytest.importorskip("fastapi_pagination")

import asyncio
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import Depends, FastAPI, Query, Request
from fastapi_pagination import add_pagination
from pydantic import BaseModel, ConfigDict
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from conftest import Backend, recording
from sqlalchemy_ulid import ULID, CursorSealer, ULIDType
from sqlalchemy_ulid.contrib.fastapi_pagination import (
    ULIDCursorPage,
    ULIDCursorParams,
    apaginate,
    paginate,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

MS = 1_712_345_678_901
SEALER = CursorSealer(bytes(range(32)), context="/sealed")


class Base(DeclarativeBase):
    pass


class Note(Base):
    __tablename__ = "contrib_fastapi_pagination_notes"

    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True)
    text: Mapped[str] = mapped_column(sa.String(20))


class NoteOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: ULID
    text: str


def db(request: Request) -> Iterator[Session]:
    with Session(request.app.state.engine) as session:
        yield session


async def adb(request: Request) -> AsyncIterator[AsyncSession]:
    async with AsyncSession(request.app.state.async_engine) as session:
        yield session


# Module level: the annotations are strings (from __future__), and FastAPI
# resolves them in the module's namespace.
DB = Annotated[Session, Depends(db)]
ADB = Annotated[AsyncSession, Depends(adb)]


class CountedParams(ULIDCursorParams):
    include_total: bool = Query(False)


BY_TEXT = sa.select(Note).order_by(Note.text.desc(), Note.id)


def make_app(engine: Engine, async_url: str | None = None) -> FastAPI:
    app = FastAPI()
    app.state.engine = engine

    @app.get("/by-text", response_model=ULIDCursorPage[NoteOut])
    def by_text(session: DB, params: Annotated[CountedParams, Depends()]) -> Any:
        return paginate(session, BY_TEXT, Note.id, params)

    @app.get("/by-text-sealed", response_model=ULIDCursorPage[NoteOut])
    def by_text_sealed(session: DB) -> Any:
        return paginate(session, BY_TEXT, Note.id, sealer=SEALER)

    @app.get("/notes", response_model=ULIDCursorPage[NoteOut])
    def notes(session: DB) -> Any:
        return paginate(session, sa.select(Note), Note.id)

    @app.get("/newest", response_model=ULIDCursorPage[NoteOut])
    def newest(session: DB) -> Any:
        return paginate(session, sa.select(Note), Note.id, descending=True)

    @app.get("/sealed", response_model=ULIDCursorPage[NoteOut])
    def sealed(session: DB) -> Any:
        return paginate(session, sa.select(Note), Note.id, sealer=SEALER)

    @app.get("/texts", response_model=ULIDCursorPage[str])
    def texts(session: DB) -> Any:
        return paginate(
            session, sa.select(Note), Note.id, transformer=lambda items: [n.text for n in items]
        )

    @app.get("/settled", response_model=ULIDCursorPage[NoteOut])
    def settled(request: Request) -> Any:
        # A tailing feed reads at READ COMMITTED (settle= refuses a snapshot
        # that may predate its horizon: MariaDB's default REPEATABLE READ).
        engine = request.app.state.engine
        level = "AUTOCOMMIT" if engine.dialect.name == "sqlite" else "READ COMMITTED"
        feed = engine.execution_options(isolation_level=level)
        with Session(feed) as session:
            return paginate(session, sa.select(Note), Note.id, settle=timedelta(0))

    if async_url is not None:
        app.state.async_engine = create_async_engine(async_url)

        @app.get("/async", response_model=ULIDCursorPage[NoteOut])
        async def async_notes(session: ADB) -> Any:
            return await apaginate(session, sa.select(Note), Note.id)

    return add_pagination(app)


@pytest.fixture
def ids(engine: Engine) -> Iterator[list[ULID]]:
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    made = [ULID.from_parts(MS + n // 2, n * 7919) for n in range(12)]
    with engine.begin() as conn:
        conn.execute(
            Note.__table__.insert(), [{"id": i, "text": f"note {n}"} for n, i in enumerate(made)]
        )
    yield made
    Base.metadata.drop_all(engine)


@pytest.fixture
def client(engine: Engine, ids: list[ULID]) -> Iterator[TestClient]:
    with TestClient(make_app(engine)) as test_client:
        yield test_client


def walk(client: TestClient, path: str, key: str = "next_page") -> tuple[list[Any], Any]:
    """Follow one kind of cursor to the end; return the items and the last body."""
    items: list[Any] = []
    url: str | None = path
    while url is not None:
        response = client.get(url)
        assert response.status_code == 200, response.text
        body = response.json()
        items += body["items"]
        cursor = body[key]
        url = None if cursor is None else f"{path.split('?')[0]}?size=5&cursor={cursor}"
    return items, body


def test_walk_forward_then_back_one_query_per_page(
    client: TestClient, engine: Engine, ids: list[ULID]
) -> None:
    with recording(engine) as seen:
        items, last = walk(client, "/notes?size=5")
    assert [item["id"] for item in items] == [str(i) for i in ids]
    assert [item["text"] for item in items] == [f"note {n}" for n in range(12)]
    assert len([s for s in seen if s.lstrip().upper().startswith("SELECT")]) == 3  # 5 + 5 + 2
    assert last["next_page"] is None
    assert set(last) == {"items", "next_page", "previous_page", "total"}
    assert last["total"] is None  # not asked for: no COUNT ran
    assert last["previous_page"] == f"before:{ids[10]}"

    back: list[Any] = []
    cursor = last["previous_page"]
    while cursor is not None:
        body = client.get(f"/notes?size=5&cursor={cursor}").json()
        back = body["items"] + back
        cursor = body["previous_page"]
    assert [item["id"] for item in back] == [str(i) for i in ids[:10]]


def test_descending(client: TestClient, ids: list[ULID]) -> None:
    items, _ = walk(client, "/newest?size=5")
    assert [item["id"] for item in items] == [str(i) for i in reversed(ids)]


def test_a_bare_id_means_after(client: TestClient, ids: list[ULID]) -> None:
    body = client.get(f"/notes?size=3&cursor={str(ids[5]).lower()}").json()
    assert [item["id"] for item in body["items"]] == [str(i) for i in ids[6:9]]


@pytest.mark.parametrize(
    ("cursor", "message"),
    [
        ("after:01HTQW311N1KR5G0Y75M3EF00U", "invalid character 'U'"),  # U is not Crockford
        ("before:01HTQW311N", "26 characters"),  # too short
        ("sideways:01HTQW311N1KR5G0Y75M3EF00H", "'after:<id>' or 'before:<id>'"),  # bad direction
        ("' OR 1=1 --", "26 characters"),  # injection attempt
    ],
)
def test_bad_cursor_is_400_with_our_message_and_no_sql(
    client: TestClient, engine: Engine, cursor: str, message: str
) -> None:
    with recording(engine) as seen:
        response = client.get("/notes", params={"cursor": cursor})
    assert response.status_code == 400
    assert response.json()["detail"].startswith("cursor: ")
    assert message in response.json()["detail"]
    assert not [s for s in seen if "contrib_fastapi_pagination_notes" in s]


def test_size_bounds_are_validated(client: TestClient) -> None:
    assert client.get("/notes?size=0").status_code == 422
    assert client.get("/notes?size=101").status_code == 422


def test_sealed_cursors_hide_ids_and_refuse_plain_ones(client: TestClient, ids: list[ULID]) -> None:
    items, last = walk(client, "/sealed?size=5")
    assert [item["id"] for item in items] == [str(i) for i in ids]
    token = last["previous_page"]
    assert not any(str(i) in token or str(i).lower() in token for i in ids)
    assert SEALER.open(token) == {"before": ids[10], "descending": False}
    # A plain cursor, a tampered token, or a token of another endpoint: 400.
    for cursor in (f"after:{ids[0]}", token[:-2] + ("AA" if token[-2:] != "AA" else "BA")):
        response = client.get("/sealed", params={"cursor": cursor})
        assert response.status_code == 400
        assert "cursor" in response.json()["detail"]
    other = CursorSealer(bytes(range(32)), context="/other").seal_cursor(ids[0])
    assert client.get("/sealed", params={"cursor": other}).status_code == 400


def test_transformer(client: TestClient) -> None:
    body = client.get("/texts?size=2").json()
    assert body["items"] == ["note 0", "note 1"]
    assert body["next_page"] is not None


def test_settle_is_passed_through_where_the_core_has_it(
    client: TestClient, ids: list[ULID]
) -> None:
    body = client.get("/settled?size=20").json()
    assert [item["id"] for item in body["items"]] == [str(i) for i in ids]
    # The resume position is the last id delivered, as the core's settle= promises.
    assert body["next_page"] == f"after:{ids[-1]}"


def test_openapi_documents_cursor_and_size(client: TestClient) -> None:
    names = {
        p["name"]
        for p in client.get("/openapi.json").json()["paths"]["/notes"]["get"]["parameters"]
    }
    assert names == {"cursor", "size"}


def test_async_session(engine: Engine, backend: Backend, ids: list[ULID]) -> None:
    app = make_app(engine, backend.async_urls[0])
    try:
        with TestClient(app) as client:
            items, _ = walk(client, "/async?size=5")
            assert [item["id"] for item in items] == [str(i) for i in ids]
            response = client.get("/async?cursor=nope")
            assert response.status_code == 400
    finally:
        asyncio.run(app.state.async_engine.dispose())


class Reading(Base):
    """A UUIDv7 primary key: cursors are canonical UUID text."""

    __tablename__ = "contrib_fastapi_pagination_readings"

    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid(), primary_key=True)
    value: Mapped[int]


class ReadingOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    value: int


def test_uuidv7_column_pages_with_uuid_cursors(engine: Engine) -> None:
    # UUIDv7s of successive milliseconds (version 7, RFC 9562 variant).
    made = [
        uuid.UUID(int=((MS + n) << 80) | (0x7 << 76) | (0b10 << 62) | (n * 7919)) for n in range(12)
    ]
    Reading.__table__.drop(engine, checkfirst=True)  # type: ignore[attr-defined]
    Reading.__table__.create(engine)  # type: ignore[attr-defined]
    try:
        with engine.begin() as conn:
            conn.execute(
                Reading.__table__.insert(),  # type: ignore[attr-defined]
                [{"id": i, "value": n} for n, i in enumerate(made)],
            )
        app = FastAPI()
        app.state.engine = engine

        @app.get("/readings", response_model=ULIDCursorPage[ReadingOut])
        def readings(session: DB) -> Any:
            return paginate(session, sa.select(Reading), Reading.id)

        @app.get("/sealed-readings", response_model=ULIDCursorPage[ReadingOut])
        def sealed_readings(session: DB) -> Any:
            return paginate(session, sa.select(Reading), Reading.id, sealer=SEALER)

        add_pagination(app)
        with TestClient(app) as client:
            items, last = walk(client, "/readings?size=5")
            assert [item["id"] for item in items] == [str(i) for i in made]
            assert last["next_page"] is None
            sealed, _ = walk(client, "/sealed-readings?size=5")
            assert [item["id"] for item in sealed] == [str(i) for i in made]
            # A ULID-looking or malformed cursor is the client's error: 400, no SQL.
            with recording(engine) as seen:
                for bad in ("after:01HTQW311N1KR5G0Y75M3EF00H", "after:nope", "sideways:x"):
                    response = client.get(f"/readings?cursor={bad}")
                    assert response.status_code == 400, response.text
                    assert response.json()["detail"].startswith("cursor: ")
            assert not [s for s in seen if "readings" in s]
    finally:
        Reading.__table__.drop(engine)  # type: ignore[attr-defined]


# -- any ORDER BY ---------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/by-text", "/by-text-sealed"])
def test_pages_by_any_order_by_with_keyset_cursors(
    client: TestClient, engine: Engine, ids: list[ULID], path: str
) -> None:
    with Session(engine) as session:
        want = [str(note.id) for note in session.scalars(BY_TEXT)]
    got: list[str] = []
    pages: list[dict[str, Any]] = []
    cursor = None
    while True:
        body = client.get(path, params={"size": 5, **({"cursor": cursor} if cursor else {})}).json()
        pages.append(body)
        got += [item["id"] for item in body["items"]]
        cursor = body["next_page"]
        if cursor is None:
            break
    assert got == want
    back = client.get(path, params={"size": 5, "cursor": pages[-1]["previous_page"]}).json()
    assert [item["id"] for item in back["items"]] == [i["id"] for i in pages[-2]["items"]]
    # An id cursor, or one of another sort, answers 400 before any SQL.
    with recording(engine) as seen:
        for bad in (f"after:{ids[0]}", pages[1]["next_page"][:-4], "before:x"):
            response = client.get(path, params={"cursor": bad})
            assert response.status_code == 400, bad
            assert response.json()["detail"].startswith("cursor:")
    assert not [s for s in seen if "contrib_fastapi_pagination_notes" in s]


def test_include_total_maps_onto_an_exact_count(client: TestClient, ids: list[ULID]) -> None:
    assert client.get("/by-text", params={"size": 2}).json()["total"] is None
    body = client.get("/by-text", params={"size": 2, "include_total": True}).json()
    assert body["total"] == len(ids)
    assert len(body["items"]) == 2
