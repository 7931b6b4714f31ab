"""A small events API: ULID ids, keyset pagination, a created-since filter.

Endpoints:

* ``POST /events`` stores an event; the server assigns a ULID id.
* ``GET /events?after=<id>&limit=<n>&since=<time>`` lists events in id
  (creation) order, one page at a time. The response carries ``next``, the
  URL of the following page, or null on the last page.
* ``GET /events/{event_id}`` returns one event.

Every identifier in a path or query parameter is typed ``ULID``, so FastAPI
validates it before the handler runs. A malformed one is answered with
400 Bad Request and a message that says what is wrong; no SQL runs.

Every error has one shape, RFC 9457 problem details
(``application/problem+json``): ``type``, ``title``, ``status``, ``detail``
(one line for a person) and ``errors`` (one entry per bad field, each with
``field`` and ``message``; empty when no field is to blame). A malformed
path or query parameter is a 400, an invalid request body a 422, an
unknown id or route a 404.

The database URL comes from ``create_app(url)``, else from the environment
variable ``EVENTS_DATABASE_URL``, else an in-memory SQLite database.

Run it: ``python examples/fastapi_app/app.py`` takes a short scripted tour
through the API with FastAPI's TestClient and prints each request and
response; ``uvicorn app:create_app --factory`` (from this directory) serves
it for real. What it needs besides sqlalchemy-ulid: ``fastapi`` (which brings
pydantic and starlette), ``httpx`` for the tour's TestClient, and ``uvicorn``
to serve.
"""

# No "from __future__ import annotations": FastAPI reads the handlers'
# annotations at run time, and the handlers are local to create_app().
import os
import warnings
from collections.abc import Iterator
from datetime import datetime
from http import HTTPStatus
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import AwareDatetime, BaseModel, Field
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from sqlalchemy.pool import StaticPool
from starlette.exceptions import HTTPException as StarletteHTTPException

from sqlalchemy_ulid import ULID, ULIDType, created_since, new_ulid, paginate

# -- the model -----------------------------------------------------------------


class Base(DeclarativeBase):
    pass


class Event(Base):
    __tablename__ = "api_events"

    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True, default=new_ulid)
    kind: Mapped[str] = mapped_column(sa.String(40))
    detail: Mapped[str] = mapped_column(sa.String(200), default="")


# -- the API schema ------------------------------------------------------------


class EventIn(BaseModel):
    kind: str = Field(min_length=1, max_length=40)
    detail: str = Field(default="", max_length=200)


class EventOut(BaseModel):
    id: ULID  # serialized as its 26-character text
    kind: str
    detail: str
    created_at: datetime


class EventPage(BaseModel):
    items: list[EventOut]
    next: str | None


def _out(event: Event) -> EventOut:
    # The creation time is part of the id: no created_at column needed.
    return EventOut(
        id=event.id, kind=event.kind, detail=event.detail, created_at=event.id.datetime
    )


# -- errors: one shape for every status (RFC 9457 problem details) -------------


def problem(
    status: int, errors: list[dict[str, str]], detail: str = ""
) -> JSONResponse:
    """An ``application/problem+json`` response; ``detail`` defaults to the errors."""
    lines = [f"{e['field']}: {e['message']}" for e in errors]
    body = {
        "type": "about:blank",  # no URL of our own: the status says it all
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail or "; ".join(lines),
        "errors": errors,
    }
    return JSONResponse(body, status_code=status, media_type="application/problem+json")


def field_errors(exc: RequestValidationError) -> tuple[bool, list[dict[str, str]]]:
    """(whether the body is to blame, one {"field", "message"} per problem)."""
    errors = []
    in_body = False
    for error in exc.errors():
        location, *path = error["loc"]
        in_body = in_body or location == "body"
        message = str(error["msg"]).removeprefix("Value error, ")
        field = ".".join(str(part) for part in path) or str(location)
        errors.append({"field": field, "message": message})
    return in_body, errors


# -- the application -------------------------------------------------------------


def get_session(request: Request) -> Iterator[Session]:
    with Session(request.app.state.engine) as session:
        yield session


DbSession = Annotated[Session, Depends(get_session)]
AFTER = "the last id of the previous page"
SINCE = "created at or after this time (with a zone)"


def make_engine(url: str) -> sa.Engine:
    if url in ("sqlite://", "sqlite:///:memory:"):
        # One in-memory database shared by all threads of the server.
        return sa.create_engine(
            url, connect_args={"check_same_thread": False}, poolclass=StaticPool
        )
    if url.startswith("sqlite"):
        return sa.create_engine(url, connect_args={"check_same_thread": False})
    return sa.create_engine(url)


def create_app(database_url: str | None = None) -> FastAPI:
    url = database_url or os.environ.get("EVENTS_DATABASE_URL", "sqlite://")
    engine = make_engine(url)
    Base.metadata.create_all(engine)

    app = FastAPI(title="events")
    app.state.engine = engine

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # A malformed id in the URL is a bad request (400), with one readable
        # line per problem, e.g. "after: invalid character 'U' at position 25".
        # A well-formed request whose body fails the schema is a 422.
        in_body, errors = field_errors(exc)
        return problem(422 if in_body else 400, errors)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # The handlers' own 400 and 404, and Starlette's (unknown route, ...).
        errors = exc.detail if isinstance(exc.detail, list) else []
        detail = "" if errors else str(exc.detail)
        return problem(exc.status_code, errors, detail)

    @app.post("/events", status_code=201)
    def add_event(event: EventIn, db: DbSession) -> EventOut:
        row = Event(kind=event.kind, detail=event.detail)
        db.add(row)
        db.commit()
        return _out(row)

    @app.get("/events")
    def list_events(
        request: Request,
        db: DbSession,
        after: Annotated[ULID | None, Query(description=AFTER)] = None,
        since: Annotated[AwareDatetime | None, Query(description=SINCE)] = None,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
    ) -> EventPage:
        stmt = sa.select(Event)
        if since is not None:
            try:
                stmt = stmt.where(created_since(Event.id, since))
            except ValueError as exc:
                # Before 1970 no ULID exists: the client's mistake.
                error = {"field": "since", "message": str(exc)}
                raise HTTPException(status_code=400, detail=[error]) from None
        # WHERE id >= :after ORDER BY id LIMIT limit + 2: the cursor's own row,
        # the page, and one row to know another page follows. No OFFSET, no COUNT.
        page = paginate(db, stmt, Event.id, after=after, limit=limit)
        next_url = None
        if page.next_cursor is not None:
            next_url = str(request.url.include_query_params(after=page.next_cursor))
        return EventPage(items=[_out(e) for e in page.items], next=next_url)

    @app.get("/events/{event_id}")
    def get_event(event_id: ULID, db: DbSession) -> EventOut:
        row = db.get(Event, event_id)
        if row is None:
            raise HTTPException(status_code=404, detail=f"no event {event_id}")
        return _out(row)

    return app


def tour() -> None:
    """Walk through the API in-process and print what happens."""
    with warnings.catch_warnings():
        # Starlette's TestClient announces a future switch of HTTP client.
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    app = create_app()
    with TestClient(app) as client:

        def show(method: str, url: str, **kwargs: Any) -> Any:
            response = client.request(method, url, **kwargs)
            body = response.json()
            print(f"{method} {url} -> {response.status_code}")
            return body

        for n in range(7):
            show("POST", "/events", json={"kind": "click", "detail": f"button {n}"})
        url = "/events?limit=3"
        while url:
            page = show("GET", url)
            print("   ", [item["detail"] for item in page["items"]])
            url = page["next"] and page["next"].removeprefix(str(client.base_url))
        first_id = show("GET", "/events?limit=1")["items"][0]["id"]
        print("   ", show("GET", f"/events/{first_id}"))
        print("   ", show("GET", "/events?after=01HTQW311N1KR5G0Y75M3EF00U"))
        print("   ", show("GET", "/events/not-a-ulid"))
        print("   ", show("GET", "/events/01HTQW311N1KR5G0Y75M3EF00H"))
        print("   ", show("POST", "/events", json={"kind": ""}))
    app.state.engine.dispose()


if __name__ == "__main__":
    tour()
