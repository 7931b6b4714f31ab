"""typeid-python's TypeID both ways, with the real package."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given

from sqlalchemy_ulid import InvalidTypeID, TypeID, new_typeid
from strategies import typeid_parts

typeid = pytest.importorskip("typeid", reason="typeid-python is in tests-integrations")
pydantic = pytest.importorskip("pydantic")

from sqlalchemy_ulid.contrib.typeid_python import (  # noqa: E402
    from_typeid_python,
    new_typeid_python,
    to_typeid_python,
)

SPEC = "user_01h455vb4pex5vsknk084sn02q"


@given(typeid_parts())
def test_both_ways_keep_prefix_and_bits(parts: tuple[str, uuid.UUID]) -> None:
    prefix, value = parts
    ours = TypeID.from_uuid(prefix, value)
    theirs = to_typeid_python(ours)
    assert isinstance(theirs, typeid.TypeID)
    # typeid-python's own reading of the text agrees with ours
    assert theirs == typeid.TypeID.from_string(str(ours))
    assert (theirs.prefix, theirs.suffix, str(theirs)) == (prefix, ours.suffix, str(ours))
    assert uuid.UUID(str(theirs.uuid)) == value
    back = from_typeid_python(theirs)
    assert type(back) is TypeID
    assert back == ours
    assert TypeID(theirs) == ours


def test_their_objects_are_accepted_where_a_typeid_is() -> None:
    theirs = typeid.TypeID.from_string(SPEC)
    assert TypeID(theirs) == TypeID.parse(SPEC)
    assert pydantic.TypeAdapter(TypeID).validate_python(theirs) == TypeID.parse(SPEC)
    user_id = pydantic.TypeAdapter(TypeID["user"])
    assert user_id.validate_python(theirs) == TypeID.parse(SPEC)
    with pytest.raises(pydantic.ValidationError, match="expected prefix 'user', got 'org'"):
        user_id.validate_python(typeid.TypeID(prefix="org"))


def test_a_prefix_the_spec_refuses_is_refused() -> None:
    # typeid-python takes digits in a prefix; the specification does not.
    theirs = typeid.TypeID(prefix="user2")
    with pytest.raises(InvalidTypeID, match="invalid character '2' at position 4"):
        from_typeid_python(theirs)
    with pytest.raises(pydantic.ValidationError, match="invalid character '2'"):
        pydantic.TypeAdapter(TypeID).validate_python(theirs)


def test_their_own_ids_are_read() -> None:
    theirs = typeid.TypeID(prefix="user")
    ours = from_typeid_python(theirs)
    assert str(ours) == str(theirs)
    assert ours.uuid.version == 7
    assert to_typeid_python(theirs) is theirs
    assert from_typeid_python(ours) is ours
    assert from_typeid_python(SPEC) == TypeID.parse(SPEC)


def test_new_typeid_python_comes_from_our_generator() -> None:
    before = new_typeid("user")
    made = [new_typeid_python("user") for _ in range(200)]
    after = new_typeid("user")
    texts = [str(before), *map(str, made), str(after)]
    assert texts == sorted(set(texts))  # one monotonic sequence
    assert all(isinstance(t, typeid.TypeID) and t.prefix == "user" for t in made)
    assert new_typeid_python().prefix == ""


def test_bad_values() -> None:
    with pytest.raises(TypeError, match="not int"):
        from_typeid_python(5)
    with pytest.raises(InvalidTypeID):
        to_typeid_python("User_01h455vb4pex5vsknk084sn02q")
