"""A TypeIDType key behind FastAPI: fastapi-pagination pages, a typed path id, 400s and 422s."""

from __future__ import annotations

import pytest

# The integrations (tests-integrations extra) support newer SQLAlchemy releases
# than our floor: the floor job runs without them, and this module skips.
pytest.importorskip("fastapi_pagination")

import warnings
from collections.abc import Iterator
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi_pagination import add_pagination
from pydantic import BaseModel, ConfigDict
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from conftest import recording
from sqlalchemy_ulid import TypeID, TypeIDType, new_typeid
from sqlalchemy_ulid.contrib.fastapi_pagination import ULIDCursorPage, paginate

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "tid_api_users"

    id: Mapped[TypeID] = mapped_column(
        TypeIDType("user"), primary_key=True, default=lambda: new_typeid("user")
    )
    name: Mapped[str] = mapped_column(sa.String(20))


# The Pydantic annotation of user ids (a name: annotations are strings here).
UserID = TypeID["user"]


class UserOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: UserID  # type: ignore[valid-type]
    name: str


def db(request: Request) -> Iterator[Session]:
    with Session(request.app.state.engine) as session:
        yield session


# Module level: the annotations are strings, resolved in this namespace.
DB = Annotated[Session, Depends(db)]


def make_app(engine: Engine) -> FastAPI:
    app = FastAPI()
    app.state.engine = engine

    @app.get("/users", response_model=ULIDCursorPage[UserOut])
    def users(session: DB) -> Any:
        return paginate(session, sa.select(User), User.id)

    @app.get("/users/{user_id}", response_model=UserOut)
    def user(session: DB, user_id: UserID) -> Any:  # type: ignore[valid-type]
        found = session.get(User, user_id)
        if found is None:
            raise HTTPException(404)
        return found

    return add_pagination(app)


@pytest.fixture
def client(engine: Engine) -> Iterator[TestClient]:
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    try:
        with TestClient(make_app(engine)) as test_client:
            yield test_client
    finally:
        Base.metadata.drop_all(engine)


def test_pages_path_ids_and_refusals(client: TestClient, engine: Engine) -> None:
    with Session(engine) as session:
        users = [User(name=f"n{i}") for i in range(7)]
        session.add_all(users)
        session.commit()
        ids = sorted(str(user.id) for user in users)

    seen: list[str] = []
    cursor: str | None = None
    while True:
        url = "/users?size=3" + (f"&cursor={cursor}" if cursor else "")
        response = client.get(url)
        assert response.status_code == 200, response.text
        body = response.json()
        seen += [item["id"] for item in body["items"]]
        cursor = body["next_page"]
        if cursor is None:
            break
        assert cursor.startswith("after:user_")
    assert seen == ids

    assert client.get(f"/users/{ids[3]}").json()["id"] == ids[3]
    other = "org_" + ids[3].removeprefix("user_")
    with recording(engine) as sent:
        # A cursor of another prefix: 400, with what is wrong; a path id: 422.
        response = client.get(f"/users?size=3&cursor={other}")
        assert response.status_code == 400
        assert "expected prefix 'user', got 'org'" in response.text
        response = client.get(f"/users/{other}")
        assert response.status_code == 422
        assert "expected prefix 'user', got 'org'" in response.text
    assert not [s for s in sent if "tid_api_users" in s]
