"""A small events API: ULID ids, keyset pagination, a created-since filter.

Endpoints:

* ``POST /events`` stores an event; the server assigns a ULID id.
* ``GET /events?after=<cursor>&limit=<n>&since=<time>`` lists events in id
  (creation) order, one page at a time. The response carries the items and
  ``next_cursor`` (pass it back as ``after=``) and ``prev_cursor`` (as
  ``before=``); each is null where no page lies that way.
* ``GET /events/by-kind`` lists them by kind, then newest first: a sort by
  two keys, whose cursors are opaque text.
* ``GET /events/{event_id}`` returns one event.

No error handler is written here. sqlalchemy-ulid's FastAPI module gives the
three pieces: ``Cursor`` types the cursor parameters (a cursor of the wrong
shape is FastAPI's 422, naming the parameter), ``add_exception_handlers(app)``
answers every refused input (a truncated, edited or foreign cursor, a page
size out of range, a time before 1970 or without a zone) with a 400 problem
document (RFC 9457), and ``KeysetPage`` is the response model of a page. No
SQL runs for a refused request.

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
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from pydantic import BaseModel, Field, computed_field
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from sqlalchemy.pool import StaticPool

from sqlalchemy_ulid import ULID, ULIDType, created_since, new_ulid, paginate
from sqlalchemy_ulid.contrib.fastapi import Cursor, KeysetPage, add_exception_handlers

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

    @computed_field  # type: ignore[prop-decorator]
    @property
    def created_at(self) -> datetime:
        # The creation time is part of the id: no created_at column needed.
        return self.id.datetime


# -- the application -------------------------------------------------------------


def get_session(request: Request) -> Iterator[Session]:
    with Session(request.app.state.engine) as session:
        yield session


DbSession = Annotated[Session, Depends(get_session)]
AFTER = "the next_cursor of the previous page"
BEFORE = "the prev_cursor of the following page"
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
    add_exception_handlers(app)  # every refused input: a 400 problem document

    @app.post("/events", status_code=201)
    def add_event(event: EventIn, db: DbSession) -> EventOut:
        row = Event(kind=event.kind, detail=event.detail)
        db.add(row)
        db.commit()
        return EventOut.model_validate(row, from_attributes=True)

    @app.get("/events")
    def list_events(
        db: DbSession,
        after: Annotated[Cursor | None, Query(description=AFTER)] = None,
        before: Annotated[Cursor | None, Query(description=BEFORE)] = None,
        since: Annotated[datetime | None, Query(description=SINCE)] = None,
        limit: int = 20,
    ) -> KeysetPage[EventOut]:
        stmt = sa.select(Event)
        if since is not None:
            stmt = stmt.where(created_since(Event.id, since))  # naive or pre-1970: a 400
        # A keyset WHERE on the id, ORDER BY id, LIMIT: no OFFSET, no COUNT.
        # A bad cursor or a limit outside 1 .. 100 is a 400 before any SQL.
        page = paginate(
            db, stmt, Event.id, after=after, before=before, limit=limit, max_limit=100
        )
        return KeysetPage[EventOut].of(page)

    @app.get("/events/by-kind")
    def list_events_by_kind(
        db: DbSession,
        after: Annotated[Cursor | None, Query(description=AFTER)] = None,
        limit: int = 20,
    ) -> KeysetPage[EventOut]:
        # Two keys: the cursor is opaque text, not an id (a bare id is a 400).
        stmt = sa.select(Event).order_by(Event.kind, Event.id.desc())
        page = paginate(db, stmt, Event.id, after=after, limit=limit, max_limit=100)
        return KeysetPage[EventOut].of(page)

    @app.get("/events/{event_id}")
    def get_event(event_id: ULID, db: DbSession) -> EventOut:
        row = db.get(Event, event_id)
        if row is None:
            raise HTTPException(status_code=404, detail=f"no event {event_id}")
        return EventOut.model_validate(row, from_attributes=True)

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
            kind = "click" if n % 2 else "view"
            show("POST", "/events", json={"kind": kind, "detail": f"button {n}"})
        for path in ("/events", "/events/by-kind"):
            cursor = None
            while True:
                query = f"?limit=3&after={cursor}" if cursor else "?limit=3"
                page = show("GET", path + query)
                print("   ", [item["detail"] for item in page["items"]])
                cursor = page["next_cursor"]
                if cursor is None:
                    break
        first_id = show("GET", "/events?limit=1")["items"][0]["id"]
        print("   ", show("GET", f"/events/{first_id}"))
        print("   ", show("GET", f"/events/by-kind?after={first_id}"))
        print("   ", show("GET", "/events?limit=0"))
        print("   ", show("GET", "/events?after=not%20a%20cursor"))
        print("   ", show("GET", "/events/01HTQW311N1KR5G0Y75M3EF00H"))
        print("   ", show("POST", "/events", json={"kind": ""}))
    app.state.engine.dispose()


if __name__ == "__main__":
    tour()
