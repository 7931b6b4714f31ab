"""sqlalchemy_ulid.contrib.fastapi through a real app on the three servers.

The abuse list (garbage, empty, truncated, edited, bare-id, other-sort and
sealed-then-tampered cursors; limit 0, -1 and 10**9) and a generator of
random query strings: every answer is a 4xx, never a 500, and no SQL runs
for a refused one.
"""

# No "from __future__ import annotations": FastAPI reads the handlers'
# annotations at run time, and the handlers are local to make_app().
import pytest

pytest.importorskip("fastapi")

import string
import uuid
import warnings
from collections.abc import Iterator
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import Depends, FastAPI, Query
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from conftest import recording
from sqlalchemy_ulid import ULID, CursorSealer, InvalidInput, SettleError, ULIDType, paginate
from sqlalchemy_ulid.contrib.fastapi import Cursor, KeysetPage, add_exception_handlers

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Starlette's TestClient announces a future switch
    from fastapi.testclient import TestClient

MS = 1_712_345_678_901
SEALER = CursorSealer(bytes(range(32)), context="/sealed")


class Base(DeclarativeBase):
    pass


class Task(Base):
    __tablename__ = f"contrib_fastapi_tasks_{uuid.uuid4().hex[:8]}"

    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True)
    priority: Mapped[int]
    title: Mapped[str] = mapped_column(sa.String(40))


class TaskOut(BaseModel):
    id: ULID
    priority: int
    title: str


BY_PRIORITY = sa.select(Task).order_by(Task.priority.desc(), Task.id.desc())


def make_app(engine: Engine) -> FastAPI:
    app = FastAPI()
    add_exception_handlers(app)

    def session() -> Iterator[Session]:
        with Session(engine) as db:
            yield db

    Db = Annotated[Session, Depends(session)]  # noqa: N806 (a type alias)

    @app.get("/tasks")
    def tasks(
        db: Db, after: Cursor | None = None, before: Cursor | None = None, limit: int = 3
    ) -> KeysetPage[TaskOut]:
        page = paginate(db, BY_PRIORITY, Task.id, after=after, before=before, limit=limit)
        return KeysetPage[TaskOut].of(page)

    @app.get("/tasks/by-id")
    def tasks_by_id(
        db: Db, cursor: Annotated[Cursor | None, Query(alias="from")] = None, limit: int = 3
    ) -> KeysetPage[TaskOut]:
        page = paginate(db, sa.select(Task), Task.id, after=cursor, limit=limit)
        return KeysetPage[TaskOut].of(page)

    @app.get("/tasks/sealed")
    def tasks_sealed(db: Db, page: Cursor | None = None) -> KeysetPage[TaskOut]:
        kwargs = SEALER.open(page) if page else {}
        found = paginate(db, BY_PRIORITY, Task.id, limit=3, **kwargs)
        after, before = SEALER.seal(found)
        return KeysetPage[TaskOut](
            items=[TaskOut.model_validate(t, from_attributes=True) for t in found.items],
            next_cursor=after,
            prev_cursor=before,
        )

    return app


@pytest.fixture
def client(engine: Engine) -> Iterator[TestClient]:
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    with Session(engine) as db:
        db.add_all(
            Task(id=ULID.from_parts(MS + k, k), priority=k % 3, title=f"task {k}")
            for k in range(10)
        )
        db.commit()
    try:
        with TestClient(make_app(engine), raise_server_exceptions=False) as client:
            yield client
    finally:
        Base.metadata.drop_all(engine)


def walk(client: TestClient, url: str, param: str = "after") -> list[str]:
    titles: list[str] = []
    cursor = None
    while True:
        body = client.get(url, params={param: cursor} if cursor else {}).json()
        titles += [item["title"] for item in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return titles


def test_a_multi_key_sort_walks_forward_and_back(client: TestClient) -> None:
    expected = [f"task {k}" for k in sorted(range(10), key=lambda k: (k % 3, k), reverse=True)]
    assert walk(client, "/tasks") == expected
    assert walk(client, "/tasks/sealed", "page") == expected
    last = client.get("/tasks", params={"limit": 100}).json()
    assert last["next_cursor"] is None
    # back from the end: before= the last page's first item
    page = client.get("/tasks").json()
    second = client.get("/tasks", params={"after": page["next_cursor"]}).json()
    back = client.get("/tasks", params={"before": second["prev_cursor"]}).json()
    assert back == page


def _edit(cursor: str, at: int) -> str:
    return cursor[:at] + ("A" if cursor[at] != "A" else "B") + cursor[at + 1 :]


def _problems(client: TestClient, engine: Engine) -> dict[str, tuple[str, dict[str, Any]]]:
    """The abuse list: name -> (url, query)."""
    first = client.get("/tasks").json()["next_cursor"]
    by_id = client.get("/tasks/by-id").json()["next_cursor"]
    sealed = client.get("/tasks/sealed").json()["next_cursor"]
    bare = str(ULID.from_parts(MS + 4, 4))
    return {
        "garbage": ("/tasks", {"after": "!!not a cursor!!"}),
        "garbage-unicode": ("/tasks", {"after": "é€漢字"}),
        "garbage-by-id": ("/tasks/by-id", {"from": "%%%"}),
        "empty": ("/tasks", {"after": ""}),
        "empty-before": ("/tasks", {"before": ""}),
        "too-long": ("/tasks", {"after": "A" * 6001}),
        "truncated": ("/tasks", {"after": first[:-5]}),
        "truncated-to-1": ("/tasks", {"after": first[:1]}),
        "edited-start": ("/tasks", {"after": _edit(first, 2)}),
        "edited-middle": ("/tasks", {"after": _edit(first, len(first) // 2)}),
        "edited-end": ("/tasks", {"after": _edit(first, len(first) - 1)}),
        "bare-id": ("/tasks", {"after": bare}),
        "bare-id-lower": ("/tasks", {"before": bare.lower()}),
        "bare-uuid": ("/tasks", {"after": str(ULID(bare).to_uuid())}),
        "bare-id-truncated-by-id": ("/tasks/by-id", {"from": bare[:-1]}),
        "other-sort": ("/tasks", {"after": by_id}),
        "other-sort-by-id": ("/tasks/by-id", {"from": first}),
        "sealed-tampered": ("/tasks/sealed", {"page": _edit(sealed, len(sealed) - 3)}),
        "sealed-truncated": ("/tasks/sealed", {"page": sealed[:-4]}),
        "sealed-bare": ("/tasks/sealed", {"page": first}),
        "after-and-before": ("/tasks", {"after": first, "before": first}),
        "limit-0": ("/tasks", {"limit": 0}),
        "limit-negative": ("/tasks", {"limit": -1}),
        "limit-huge": ("/tasks", {"limit": 10**9}),
        "limit-huge-by-id": ("/tasks/by-id", {"limit": 10**9}),
        "limit-text": ("/tasks", {"limit": "ten"}),
    }


#: What each abuse answers: status, problem code, the parameter named.
EXPECTED: dict[str, tuple[int, str | None, str]] = {
    "garbage": (422, None, "after"),
    "garbage-unicode": (422, None, "after"),
    "garbage-by-id": (422, None, "from"),
    "empty": (422, None, "after"),
    "empty-before": (422, None, "before"),
    "too-long": (422, None, "after"),
    "truncated": (400, "invalid_cursor", "after"),
    "truncated-to-1": (400, "invalid_cursor", "after"),
    "edited-start": (400, "invalid_cursor", "after"),
    "edited-middle": (400, "invalid_cursor", "after"),
    "edited-end": (400, "invalid_cursor", "after"),
    "bare-id": (400, "cursor_sort_mismatch", "after"),
    "bare-id-lower": (400, "cursor_sort_mismatch", "before"),
    "bare-uuid": (400, "cursor_sort_mismatch", "after"),
    "bare-id-truncated-by-id": (400, "invalid_id", "from"),  # a malformed id
    "other-sort": (400, "cursor_sort_mismatch", "after"),
    "other-sort-by-id": (400, "cursor_sort_mismatch", "from"),
    "sealed-tampered": (400, "invalid_cursor", "page"),
    "sealed-truncated": (400, "invalid_cursor", "page"),
    "sealed-bare": (400, "invalid_cursor", "page"),
    "after-and-before": (400, "invalid_input", ""),
    "limit-0": (400, "invalid_limit", "limit"),
    "limit-negative": (400, "invalid_limit", "limit"),
    "limit-huge": (400, "invalid_limit", "limit"),
    "limit-huge-by-id": (400, "invalid_limit", "limit"),
    "limit-text": (422, None, "limit"),
}


def test_the_abuse_list_is_all_4xx_with_the_parameter_named(
    client: TestClient, engine: Engine
) -> None:
    problems = _problems(client, engine)
    assert problems.keys() == EXPECTED.keys()
    for name, (url, query) in problems.items():
        with recording(engine) as seen:
            response = client.get(url, params=query)
        status, code, field = EXPECTED[name]
        body = response.json()
        assert response.status_code == status, (name, body)
        assert seen == [], name  # refused before any SQL
        if status == 422:  # FastAPI's own validation error, at the boundary
            assert [error["loc"] for error in body["detail"]] == [["query", field]], name
            continue
        assert response.headers["content-type"] == "application/problem+json", name
        assert body["type"] == "about:blank"
        assert body["title"] == "Bad Request"
        assert body["status"] == 400
        assert body["code"] == code, (name, body)
        assert [e["field"] for e in body["errors"]] == ([field] if field else []), (name, body)
        assert body["detail"].startswith(f"{field}: " if field else ""), (name, body)


def test_a_bare_id_gets_the_helpful_message(client: TestClient) -> None:
    bare = str(ULID.from_parts(MS + 4, 4))
    body = client.get("/tasks", params={"after": bare}).json()
    assert "a bare id is a cursor of the id order" in body["detail"]
    assert "pass the next_cursor" in body["detail"]


def test_the_openapi_schema_documents_the_cursor(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    params = {p["name"]: p for p in schema["paths"]["/tasks"]["get"]["parameters"]}
    after = params["after"]["schema"]
    shapes = after.get("anyOf", [after])
    cursor = next(s for s in shapes if s.get("type") == "string")
    assert cursor["pattern"] == "^[A-Za-z0-9_-]+$"
    assert (cursor["minLength"], cursor["maxLength"]) == (1, 6000)
    page = schema["components"]["schemas"]["KeysetPage_TaskOut_"]["properties"]
    assert set(page) == {"items", "next_cursor", "prev_cursor"}


_QUERY_TEXT = st.text(alphabet=string.ascii_letters + string.digits + "-_=%!é ", max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    param=st.sampled_from(["after", "before", "limit"]),
    value=st.one_of(_QUERY_TEXT, st.integers(-(10**12), 10**12).map(str)),
    mutate=st.booleans(),
    data=st.data(),
)
def test_random_queries_are_never_a_500(
    client: TestClient, param: str, value: str, mutate: bool, data: st.DataObject
) -> None:
    if mutate and param != "limit":
        cursor = client.get("/tasks").json()["next_cursor"]
        at = data.draw(st.integers(0, len(cursor)))
        value = cursor[:at] + value + cursor[at + len(value) :]
    response = client.get("/tasks", params={param: value})
    assert response.status_code in (200, 400, 422), (param, value, response.text)


def test_a_settle_error_is_the_servers_not_a_400() -> None:
    """SettleError is about the server or session: the handlers leave it a 500."""
    table = sa.Table("settled", sa.MetaData(), sa.Column("id", ULIDType(), primary_key=True))
    engine = sa.create_engine("sqlite://")
    app = FastAPI()
    add_exception_handlers(app)

    @app.get("/feed")
    def feed() -> list[str]:
        with Session(engine) as session:
            page = paginate(session, sa.select(table), table.c.id, settle="auto")
        return [str(row.id) for row in page.items]

    with TestClient(app, raise_server_exceptions=False) as client:
        answer = client.get("/feed")
    assert answer.status_code == 500
    # The same refusal, raised in the test, is a ValueError but no InvalidInput.
    with Session(engine) as session, pytest.raises(SettleError) as caught:
        paginate(session, sa.select(table), table.c.id, settle="auto")
    assert isinstance(caught.value, ValueError)
    assert not isinstance(caught.value, InvalidInput)
