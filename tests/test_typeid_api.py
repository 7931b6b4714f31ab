"""Typed ids at the API boundary: Pydantic v2 and a real FastAPI app (422, never 500)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sqlalchemy_ulid import TypeID, new_typeid
from strategies import maybe_typeid_texts

pydantic = pytest.importorskip("pydantic")
fastapi = pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

SPEC_V7 = "01h455vb4pex5vsknk084sn02q"
_SPEC = re.compile(r"(?:([a-z](?:[a-z_]{0,61}[a-z])?)_)?([0-7][0-9a-hjkmnp-tv-z]{25})")

# An alias keeps linters from reading "user" as a forward reference.
UserID = TypeID["user"]


class NewOrder(pydantic.BaseModel):  # type: ignore[misc]
    customer: UserID
    ref: TypeID | None = None


class User(pydantic.BaseModel):  # type: ignore[misc]
    id: UserID
    uuid: uuid.UUID


class Listing(pydantic.BaseModel):  # type: ignore[misc]
    after: UserID | None


app = fastapi.FastAPI()


@app.get("/users/{user_id}")
def get_user(user_id: TypeID["user"]) -> User:  # noqa: F821, UP037 - the contract's spelling
    assert isinstance(user_id, TypeID)
    return User(id=user_id, uuid=user_id.uuid)


@app.get("/users")
def list_users(after: UserID | None = None) -> Listing:
    return Listing(after=after)


@app.get("/members/{user_id}")
def get_member(user_id: Annotated[UserID, fastapi.Path(description="the member")]) -> str:
    return str(user_id)


@app.get("/members")
def list_members(ids: Annotated[list[UserID], fastapi.Query()]) -> list[str]:
    return [str(one) for one in ids]


@app.post("/orders")
def create_order(order: NewOrder) -> NewOrder:
    return order


client = TestClient(app)


def test_typeid_user_is_the_same_annotation_each_time() -> None:
    assert TypeID["user"] is TypeID["user"]
    assert TypeID["user"] is not TypeID["org"]


@given(maybe_typeid_texts())
def test_accepts_exactly_the_valid_ids_with_the_prefix(text: str) -> None:
    adapter = pydantic.TypeAdapter(UserID)
    match = _SPEC.fullmatch(text)
    if match is not None and match[1] == "user":
        assert adapter.validate_python(text) == TypeID.parse(text)
        assert adapter.validate_json(f'"{text}"') == TypeID.parse(text)
    else:
        with pytest.raises(pydantic.ValidationError):
            adapter.validate_python(text)


def test_a_typeid_object_is_accepted_only_with_the_prefix() -> None:
    adapter = pydantic.TypeAdapter(UserID)
    user = new_typeid("user")
    assert adapter.validate_python(user) is user
    with pytest.raises(pydantic.ValidationError, match="expected prefix 'user', got 'org'"):
        adapter.validate_python(new_typeid("org"))
    # TypeID alone takes any prefix
    assert pydantic.TypeAdapter(TypeID).validate_python(f"org_{SPEC_V7}").prefix == "org"


def test_serializes_to_its_text() -> None:
    user = new_typeid("user")
    order = NewOrder(customer=user)
    assert order.model_dump() == {"customer": user, "ref": None}
    assert order.model_dump(mode="json") == {"customer": str(user), "ref": None}
    assert NewOrder.model_validate_json(order.model_dump_json()) == order


# -- through FastAPI ----------------------------------------------------------------


def test_path_parameter() -> None:
    response = client.get(f"/users/user_{SPEC_V7}")
    assert response.status_code == 200
    assert response.json() == {
        "id": f"user_{SPEC_V7}",
        "uuid": "01890a5d-ac96-774b-bcce-b302099a8057",
    }


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (f"org_{SPEC_V7}", "expected prefix 'user', got 'org'"),  # wrong prefix
        (SPEC_V7, "expected prefix 'user', got none"),  # no prefix
        (f"User_{SPEC_V7}", "uppercase 'U' at position 0 of prefix 'User'"),
        (f"user_{SPEC_V7.upper()}", "uppercase 'H' at position 2 of the suffix"),
        ("user_8zzzzzzzzzzzzzzzzzzzzzzzzz", "the suffix must start with 0-7"),
        (f"user_{SPEC_V7[:-1]}", "the suffix is 26 characters, got 25"),
        ("nope", "the suffix is 26 characters, got 4"),
        ("_", "starts with '_'"),
    ],
)
def test_bad_path_parameter_is_a_422_that_says_why(value: str, message: str) -> None:
    response = client.get(f"/users/{value}")
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["path", "user_id"]
    assert message in error["msg"]


def test_with_fastapis_own_annotations_and_in_a_list() -> None:
    assert client.get(f"/members/user_{SPEC_V7}").json() == f"user_{SPEC_V7}"
    assert client.get(f"/members/org_{SPEC_V7}").status_code == 422
    two = [f"user_{SPEC_V7}", f"user_{SPEC_V7[:-1]}r"]
    assert client.get("/members", params={"ids": two}).json() == two
    response = client.get("/members", params={"ids": [two[0], f"org_{SPEC_V7}"]})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "ids", 1]
    paths = client.get("/openapi.json").json()["paths"]
    (path_parameter,) = paths["/members/{user_id}"]["get"]["parameters"]
    assert path_parameter["description"] == "the member"
    assert path_parameter["schema"]["pattern"] == r"^user_[0-7][0-9a-hjkmnp-tv-z]{25}$"
    (query_parameter,) = paths["/members"]["get"]["parameters"]
    assert query_parameter["schema"]["items"]["pattern"] == path_parameter["schema"]["pattern"]


def test_query_parameter() -> None:
    assert client.get("/users").json() == {"after": None}
    assert client.get(f"/users?after=user_{SPEC_V7}").json() == {"after": f"user_{SPEC_V7}"}
    response = client.get(f"/users?after=team_{SPEC_V7}")
    assert response.status_code == 422
    assert "expected prefix 'user', got 'team'" in response.json()["detail"][0]["msg"]


@pytest.mark.parametrize(
    "body",
    [
        {"customer": f"org_{SPEC_V7}"},  # wrong prefix
        {"customer": 5},  # not text
        {"customer": None},  # null
        {"customer": ["user", SPEC_V7]},  # a list
        {"customer": {"prefix": "user", "suffix": SPEC_V7}},  # an object
        {},  # missing
        {"customer": f"user_{SPEC_V7}", "ref": "x"},  # the other field bad
    ],
)
def test_bad_body_is_a_422(body: dict[str, Any]) -> None:
    response = client.post("/orders", json=body)
    assert response.status_code == 422, response.text


def test_body_round_trip() -> None:
    body = {"customer": f"user_{SPEC_V7}", "ref": f"team_{SPEC_V7}"}
    response = client.post("/orders", json=body)
    assert response.status_code == 200
    assert response.json() == body


def test_openapi_documents_the_pattern_and_a_valid_example() -> None:
    spec = client.get("/openapi.json").json()
    (parameter,) = spec["paths"]["/users/{user_id}"]["get"]["parameters"]
    schema = parameter["schema"]
    assert schema["pattern"] == r"^user_[0-7][0-9a-hjkmnp-tv-z]{25}$"
    assert schema["minLength"] == schema["maxLength"] == 31
    (example,) = schema["examples"]
    assert TypeID.parse(example).prefix == "user"
    assert re.fullmatch(schema["pattern"], example)
    assert not re.fullmatch(schema["pattern"], f"org_{SPEC_V7}")
    # the body model too
    customer = spec["components"]["schemas"]["NewOrder"]["properties"]["customer"]
    assert customer["pattern"] == schema["pattern"]
    # any prefix: the pattern takes every valid id and the example is one
    ref = spec["components"]["schemas"]["NewOrder"]["properties"]["ref"]["anyOf"][0]
    assert TypeID.parse(ref["examples"][0])
    for text in (SPEC_V7, f"a_{SPEC_V7}", f"my__type_{SPEC_V7}"):
        assert re.fullmatch(ref["pattern"], text)
    for text in (f"_{SPEC_V7}", f"A_{SPEC_V7}", f"a__{SPEC_V7}"):
        assert not re.fullmatch(ref["pattern"], text)


@given(maybe_typeid_texts())
def test_the_openapi_pattern_is_the_validator(text: str) -> None:
    from sqlalchemy_ulid._typeid_pydantic import pattern

    for prefix in (None, "user"):
        valid = _SPEC.fullmatch(text) is not None and (
            prefix is None or text.rpartition("_")[0] == prefix
        )
        assert bool(re.fullmatch(pattern(prefix), text)) == valid


@settings(max_examples=60, deadline=None)
@given(st.one_of(maybe_typeid_texts(), st.text(st.characters(exclude_categories=["Cs"]))))
def test_any_query_text_is_a_200_or_a_422(text: str) -> None:
    response = client.get("/users", params={"after": text})
    match = _SPEC.fullmatch(text)
    if match is not None and match[1] == "user":
        assert response.status_code == 200
        assert response.json() == {"after": text}
    else:
        assert response.status_code == 422, response.text


def test_never_a_500_for_any_string() -> None:
    # The path segment is whatever the client sends: weird text is a 422.
    for value in ["%00", "user_%F0%9F%98%80" + "0" * 24, "user_" + "\u0663" * 26, "a" * 500]:
        response = client.get(f"/users/{value}")
        assert response.status_code == 422, (value, response.text)


def test_the_documented_alias_passes_mypy_and_the_plain_one_does_not(tmp_path: Path) -> None:
    # docs/typed-ids.md: mypy refuses TypeID["user"]; the TYPE_CHECKING alias passes.
    import subprocess
    import sys

    checked = tmp_path / "checked.py"
    checked.write_text(
        "from typing import TYPE_CHECKING\n"
        "from sqlalchemy_ulid import TypeID\n"
        "if TYPE_CHECKING:\n"
        "    UserID = TypeID\n"
        "else:\n"
        '    UserID = TypeID["user"]\n'
        "def prefix(value: UserID) -> str:\n"
        "    return value.prefix\n"
    )
    plain = tmp_path / "plain.py"
    plain.write_text('from sqlalchemy_ulid import TypeID\nUserID = TypeID["user"]\n')
    # One mypy run for both files (a run's start-up is most of its time):
    # every error is plain.py's, and plain.py has the one expected.
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
         str(checked), str(plain)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr
    errors = [line for line in run.stdout.splitlines() if ": error:" in line]
    assert errors, run.stdout
    assert all(line.startswith(str(plain)) for line in errors), run.stdout
    assert any('"TypeID" expects no type arguments' in line for line in errors), run.stdout
