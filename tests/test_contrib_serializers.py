"""ULIDs through orjson, msgspec, json, Litestar and sqladmin, with the real packages."""

from __future__ import annotations

import pytest

# The integrations (tests-integrations extra) support newer SQLAlchemy releases
# than our floor: the floor job runs without them, and this module skips.
pytest.importorskip("msgspec")
pytest.importorskip("orjson")
pytest.importorskip("litestar")
pytest.importorskip("sqladmin")

import dataclasses
import json
import warnings
from collections.abc import Iterator
from typing import Any

import msgspec
import orjson
import sqlalchemy as sa
from litestar import Litestar, get, post
from litestar.params import FromQuery, JSONBody
from litestar.testing import TestClient as LitestarClient
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from sqlalchemy_ulid import ULID, InvalidULID, ULIDType, new_ulid
from sqlalchemy_ulid.contrib import litestar as ulid_litestar
from sqlalchemy_ulid.contrib.msgspec import dec_hook, enc_hook
from sqlalchemy_ulid.contrib.orjson import default

U = ULID("01HTQW311N1KR5G0Y75M3EF00H")
TEXT = "01HTQW311N1KR5G0Y75M3EF00H"


# -- orjson and json -------------------------------------------------------------


def test_orjson_default() -> None:
    data = {"id": U, "ids": [U, U], "n": 1}
    assert orjson.loads(orjson.dumps(data, default=default)) == {
        "id": TEXT,
        "ids": [TEXT, TEXT],
        "n": 1,
    }
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps({"x": object()}, default=default)
    # Without the hook orjson refuses the type: the hook is what makes it work.
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps({"id": U})


def test_json_default_str() -> None:
    assert json.dumps({"id": U}, default=str) == f'{{"id": "{TEXT}"}}'


# -- msgspec ----------------------------------------------------------------------


class Event(msgspec.Struct):
    id: ULID
    parent: ULID | None = None


def test_msgspec_round_trip_json_and_msgpack() -> None:
    event = Event(U, parent=new_ulid())
    for codec in (msgspec.json, msgspec.msgpack):
        raw = codec.encode(event, enc_hook=enc_hook)
        assert codec.decode(raw, type=Event, dec_hook=dec_hook) == event
    assert (
        msgspec.json.encode(Event(U), enc_hook=enc_hook)
        == f'{{"id":"{TEXT}","parent":null}}'.encode()
    )


@pytest.mark.parametrize(
    "raw",
    [
        b'{"id":"01HTQW311N1KR5G0Y75M3EF00U"}',  # U is not in the alphabet
        b'{"id":"01HTQW311N"}',  # too short
        b'{"id":12}',  # not text
    ],
)
def test_msgspec_refuses_malformed_ids(raw: bytes) -> None:
    with pytest.raises(msgspec.ValidationError, match=r"\$\.id"):
        msgspec.json.decode(raw, type=Event, dec_hook=dec_hook)


def test_msgspec_hooks_pass_on_other_types() -> None:
    # msgspec's convention for "not mine"; older msgspec wraps it in TypeError.
    with pytest.raises((NotImplementedError, TypeError)):
        msgspec.json.encode(object(), enc_hook=enc_hook)


# -- Litestar ------------------------------------------------------------------------


@dataclasses.dataclass
class Item:
    id: ULID
    name: str


@get("/items/one", sync_to_thread=False)
def one_item(item_id: FromQuery[ULID]) -> Item:
    return Item(id=item_id, name=f"made {item_id.datetime:%Y-%m-%d}")


@post("/items", sync_to_thread=False)
def create_item(data: JSONBody[Item]) -> dict[str, Any]:
    return {"id": data.id, "type": type(data.id).__name__}


@pytest.fixture
def litestar_client() -> Iterator[LitestarClient[Litestar]]:
    app = Litestar(
        route_handlers=[one_item, create_item],
        type_encoders=ulid_litestar.TYPE_ENCODERS,
        type_decoders=ulid_litestar.TYPE_DECODERS,
    )
    with LitestarClient(app=app) as client:
        yield client


def test_litestar_query_parameter_and_response(litestar_client: LitestarClient[Litestar]) -> None:
    response = litestar_client.get("/items/one", params={"item_id": TEXT.lower()})
    assert response.status_code == 200, response.text
    assert response.json() == {"id": TEXT, "name": "made 2024-04-05"}


def test_litestar_request_body(litestar_client: LitestarClient[Litestar]) -> None:
    response = litestar_client.post("/items", json={"id": TEXT, "name": "x"})
    assert response.status_code == 201, response.text
    assert response.json() == {"id": TEXT, "type": "ULID"}


@pytest.mark.parametrize("bad", ["01HTQW311N1KR5G0Y75M3EF00U", "nope", ""])
def test_litestar_bad_id_is_400(litestar_client: LitestarClient[Litestar], bad: str) -> None:
    assert litestar_client.get("/items/one", params={"item_id": bad}).status_code == 400
    assert litestar_client.post("/items", json={"id": bad, "name": "x"}).status_code == 400


def test_litestar_decoder_refuses_other_types() -> None:
    with pytest.raises(TypeError):
        ulid_litestar.decode(ULID, 12)
    with pytest.raises(InvalidULID):
        ulid_litestar.decode(ULID, "nope")
    assert ulid_litestar.decode(ULID, U) is U


# -- sqladmin -----------------------------------------------------------------------


class AdminBase(DeclarativeBase):
    pass


class Ticket(AdminBase):
    __tablename__ = "contrib_sqladmin_tickets"

    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True, default=new_ulid)
    title: Mapped[str] = mapped_column(sa.String(40))
    related: Mapped[ULID | None] = mapped_column(ULIDType())


@pytest.fixture
def admin_client(engine: Engine) -> Iterator[Any]:
    from sqladmin import Admin, ModelView
    from starlette.applications import Starlette

    from sqlalchemy_ulid.contrib.sqladmin import ULID_TYPE_FORMATTERS, ULIDConverter

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    class TicketAdmin(ModelView, model=Ticket):
        column_list = [Ticket.id, Ticket.title, Ticket.related]  # noqa: RUF012
        form_include_pk = False
        form_converter = ULIDConverter
        column_type_formatters = ULID_TYPE_FORMATTERS
        column_type_formatters_detail = ULID_TYPE_FORMATTERS

    AdminBase.metadata.drop_all(engine)
    AdminBase.metadata.create_all(engine)
    app = Starlette()
    admin = Admin(app, engine)
    admin.add_view(TicketAdmin)
    with TestClient(app) as client:
        yield client
    AdminBase.metadata.drop_all(engine)


def test_sqladmin_shows_text_and_creation_time(admin_client: Any, engine: Engine) -> None:
    with Session(engine) as session:
        ticket = Ticket(id=U, title="printer on fire", related=U)
        session.add(ticket)
        session.commit()
    shown = f"{TEXT} (2024-04-05 19:34:38.901 UTC)"
    listing = admin_client.get("/admin/ticket/list")
    assert listing.status_code == 200
    assert shown in listing.text
    details = admin_client.get(f"/admin/ticket/details/{TEXT}")
    assert details.status_code == 200
    assert shown in details.text
    edit = admin_client.get(f"/admin/ticket/edit/{TEXT}")
    assert edit.status_code == 200
    assert f'value="{TEXT}"' in edit.text


def test_sqladmin_form_validates_ids(admin_client: Any, engine: Engine) -> None:
    other = new_ulid()
    created = admin_client.post(
        "/admin/ticket/create", data={"title": "ok", "related": str(other).lower()}
    )
    assert created.status_code in (200, 302), created.text
    refused = admin_client.post(
        "/admin/ticket/create", data={"title": "bad", "related": "01HTQW311N1KR5G0Y75M3EF00U"}
    )
    assert refused.status_code == 400
    assert "invalid character" in refused.text
    with Session(engine) as session:
        rows = session.execute(sa.select(Ticket.title, Ticket.related)).all()
    assert rows == [("ok", other)]
