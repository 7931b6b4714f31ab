"""A Litestar + advanced-alchemy API whose ticket list pages by keyset cursors.

Run ``python examples/litestar_aa_app/app.py [DATABASE_URL]`` for a scripted
tour (SQLite in memory by default), or serve ``create_app()`` with uvicorn.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from advanced_alchemy.extensions.litestar import SQLAlchemyPlugin, SQLAlchemySyncConfig
from advanced_alchemy.filters import OrderBy, StatementFilter
from advanced_alchemy.repository import SQLAlchemySyncRepository
from advanced_alchemy.service import SQLAlchemySyncRepositoryService as Service
from litestar import Litestar, Request, Response, get, post
from litestar.params import FromQuery
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from sqlalchemy_ulid import InvalidULID, ULIDPrimaryKey
from sqlalchemy_ulid.contrib.advanced_alchemy import (
    After,
    Before,
    CreatedSince,
    KeysetServiceMixin,
)


class Base(DeclarativeBase):
    pass


class Ticket(ULIDPrimaryKey, Base):
    __tablename__ = "aa_tickets"

    title: Mapped[str] = mapped_column(sa.String(80))
    priority: Mapped[int]


class TicketRepository(SQLAlchemySyncRepository[Ticket]):
    model_type = Ticket


class TicketService(KeysetServiceMixin[Ticket], Service[Ticket]):
    repository_type = TicketRepository


def _out(ticket: Ticket) -> dict[str, Any]:
    return {"id": str(ticket.id), "title": ticket.title, "priority": ticket.priority}


@post("/tickets", sync_to_thread=False)
def create_ticket(db_session: Session, data: dict[str, Any]) -> dict[str, Any]:
    ticket = TicketService(session=db_session).create(
        Ticket(title=data["title"], priority=data["priority"]), auto_commit=True
    )
    return _out(ticket)


@get("/tickets", sync_to_thread=False)
def list_tickets(
    db_session: Session,
    after: FromQuery[str | None] = None,
    before: FromQuery[str | None] = None,
    since: FromQuery[datetime | None] = None,
    urgent_first: FromQuery[bool] = False,
    limit: FromQuery[int] = 20,
) -> dict[str, Any]:
    filters: list[StatementFilter] = []
    if urgent_first:  # the sort ends with the id, its tiebreaker
        filters += [OrderBy("priority", "desc"), OrderBy("id", "desc")]
    if after is not None:
        filters.append(After(after))
    if before is not None:
        filters.append(Before(before))
    if since is not None:
        filters.append(CreatedSince(since))
    service = TicketService(session=db_session)
    page = service.list_page(*filters, limit=limit, total="exact")
    return {
        "items": [_out(ticket) for ticket in page.items],
        "next": page.next_cursor,
        "prev": page.prev_cursor,
        "total": page.total,
    }


def bad_input(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """A malformed cursor or time: 400 with our message (no SQL ran)."""
    return Response({"detail": str(exc)}, status_code=400)


def create_app(url: str | None = None) -> Litestar:
    """The app on ``url`` (or DATABASE_URL, or SQLite in memory), tables created."""
    url = url or os.environ.get("DATABASE_URL", "sqlite://")
    options: dict[str, Any] = {}
    if url in ("sqlite://", "sqlite:///:memory:"):  # one in-memory database for all
        shared = {"check_same_thread": False}
        options = {"poolclass": sa.StaticPool, "connect_args": shared}
    engine = sa.create_engine(url, **options)
    Base.metadata.create_all(engine)
    # commit after a 2xx response, roll back otherwise
    commit = "autocommit"
    config = SQLAlchemySyncConfig(engine_instance=engine, before_send_handler=commit)
    app = Litestar(
        [create_ticket, list_tickets],
        plugins=[SQLAlchemyPlugin(config=config)],
        exception_handlers={InvalidULID: bad_input, ValueError: bad_input},
    )
    app.state.engine = engine
    return app


def tour(url: str | None = None) -> list[str]:
    """Add seven tickets, walk them most urgent first, three a page."""
    from litestar.testing import TestClient

    app = create_app(url)
    titles: list[str] = []
    try:
        with TestClient(app=app) as client:
            for n, priority in enumerate([1, 3, 2, 3, 1, 2, 1]):
                body = {"title": f"Ticket {n}", "priority": priority}
                client.post("/tickets", json=body)
            params: dict[str, Any] = {"urgent_first": True, "limit": 3}
            while True:
                page = client.get("/tickets", params=params).json()
                shown = [f"{t['title']} (p{t['priority']})" for t in page["items"]]
                print(f"{page['total']} tickets; this page: {', '.join(shown)}")
                titles += [ticket["title"] for ticket in page["items"]]
                if page["next"] is None:
                    break
                params["after"] = page["next"]
            bad = client.get("/tickets", params={"after": "nonsense"})
            print(f"a bad cursor: {bad.status_code} {bad.json()['detail']}")
    finally:
        Base.metadata.drop_all(app.state.engine)
        app.state.engine.dispose()
    return titles


if __name__ == "__main__":
    tour(sys.argv[1] if len(sys.argv) > 1 else None)
