"""Pydantic v2 integration, and that importing the package does not import pydantic."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given

from sqlalchemy_ulid import ULID, InvalidULID
from strategies import maybe_ulid_texts, ulid_texts, ulids

WORKED = "01HTQW311N1KR5G0Y75M3EF00H"
EXPECTED_PATTERN = r"^[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}$"


def test_importing_the_package_does_not_import_pydantic() -> None:
    code = (
        "import sys\n"
        "import sqlalchemy_ulid\n"
        "from sqlalchemy_ulid import ULID, new_ulid\n"
        "u = new_ulid(); str(u); ULID(str(u)); u.datetime; u.to_uuid()\n"
        "roots = {name.split('.')[0] for name in sys.modules}\n"
        "print(sorted(roots & {'pydantic', 'pydantic_core'}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


pydantic = pytest.importorskip("pydantic")


class Event(pydantic.BaseModel):  # type: ignore[misc]
    id: ULID
    parent: ULID | None = None


@given(ulid_texts())
def test_validates_from_str_in_any_case(text: str) -> None:
    event = Event(id=text)
    assert isinstance(event.id, ULID)
    assert event.id == ULID(text)


def test_validates_from_ulid_and_uuid() -> None:
    u = ULID(WORKED)
    assert Event(id=u).id is u
    from_uuid = Event(id=u.to_uuid()).id
    assert isinstance(from_uuid, ULID)
    assert from_uuid == u
    assert Event.model_validate_json(f'{{"id": "{WORKED.lower()}"}}').id == u


@pytest.mark.parametrize(
    "value",
    [
        WORKED[:-1] + "U",  # U is not Crockford
        WORKED + "0",  # 27 characters
        "",  # empty
        "8" + WORKED[1:],  # over 128 bits
        WORKED[:10] + "_" + WORKED[11:],  # underscore
        WORKED[:10] + "\u0663" + WORKED[11:],  # Arabic-Indic digit
        f" {WORKED[1:]}",  # leading space
        12345,  # an int is not accepted, even a small one
        ULID(WORKED).int,  # ... nor the ULID's own integer
        ULID(WORKED).bytes,  # bytes are not text
        None,  # required field
        1.5,  # a float
    ],
)
def test_rejects_bad_values(value: Any) -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        Event(id=value)
    errors = info.value.errors()
    assert len(errors) == 1
    assert errors[0]["loc"] == ("id",)


def test_error_message_comes_from_the_strict_parser() -> None:
    with pytest.raises(pydantic.ValidationError, match="invalid character 'U' at position 25"):
        Event(id=WORKED[:-1] + "U")
    with pytest.raises(pydantic.ValidationError, match="not int"):
        Event(id=1)


@given(ulids)
def test_serializes_to_the_canonical_string(u: ULID) -> None:
    event = Event(id=u)
    assert event.model_dump(mode="json") == {"id": str(u), "parent": None}
    assert event.model_dump_json() == f'{{"id":"{u}","parent":null}}'
    assert event.model_dump()["id"] is u  # python mode keeps the object
    assert Event.model_validate_json(event.model_dump_json()) == event


def test_json_schema() -> None:
    schema = Event.model_json_schema()
    field = schema["properties"]["id"]
    assert field["type"] == "string"
    assert field["pattern"] == EXPECTED_PATTERN
    assert "id" in schema["required"]
    optional = schema["properties"]["parent"]["anyOf"]
    assert {"type": "null"} in optional
    assert any(option.get("pattern") == EXPECTED_PATTERN for option in optional)


def _parses(text: str) -> bool:
    try:
        ULID(text)
    except InvalidULID:
        return False
    return True


@pytest.fixture(scope="module")
def pattern() -> str:
    return str(Event.model_json_schema()["properties"]["id"]["pattern"])


@given(text=maybe_ulid_texts)
def test_pattern_agrees_with_the_parser(pattern: str, text: str) -> None:
    # fullmatch, as JSON Schema's $ means the end of the string (Python's $
    # would also match before a trailing newline).
    assert (re.fullmatch(pattern, text) is not None) == _parses(text)


@given(ulid_texts())
def test_pattern_accepts_every_valid_text(text: str) -> None:
    assert re.fullmatch(EXPECTED_PATTERN, text)
