"""typeid-python's TypeID both ways, with the real package, and in TypeIDType columns."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from hypothesis import given
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Mapped, Session, mapped_column

from conftest import recording
from sqlalchemy_ulid import InvalidTypeID, TypeID, TypeIDBase, TypeIDType, new_typeid, paginate
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


class Member(TypeIDBase):
    __tablename__ = "tpy_members"
    __typeid_prefix__ = "user"

    org_id: Mapped[TypeID | None] = mapped_column(TypeIDType("org"))


def test_their_objects_bind_where_a_typeid_does(engine: Engine) -> None:
    table = Member.__table__
    table.create(engine)  # type: ignore[attr-defined]
    try:
        theirs = [typeid.TypeID(prefix="user") for _ in range(3)]
        org = typeid.TypeID(prefix="org")
        with Session(engine) as session:
            # As the id of new objects, a foreign value, in INSERT and UPDATE.
            session.add_all([Member(id=t) for t in theirs[:2]])
            session.execute(sa.insert(Member), [{"id": theirs[2], "org_id": org}])
            session.commit()
            session.execute(sa.update(Member).where(Member.id == theirs[0]).values(org_id=org))
            session.commit()
        with Session(engine) as session:
            found = session.scalars(sa.select(Member).where(Member.id.in_(theirs))).all()
            assert sorted(m.id for m in found) == sorted(from_typeid_python(t) for t in theirs)
            assert all(type(m.id) is TypeID for m in found)
            got = session.get(Member, theirs[1])
            assert got is not None
            assert str(got.id) == str(theirs[1])
            with_org = session.scalars(sa.select(Member.id).where(Member.org_id == org)).all()
            assert sorted(with_org) == sorted(from_typeid_python(t) for t in (theirs[0], theirs[2]))
            # As a page cursor: the rows after it, in id order.
            ordered = sorted(theirs, key=lambda t: from_typeid_python(t))
            page = paginate(
                session, sa.select(Member).order_by(Member.id), Member.id, limit=5, after=ordered[0]
            )
            assert [str(m.id) for m in page.items] == [str(t) for t in ordered[1:]]
            # One of another prefix is refused before any SQL, as ours is.
            with recording(engine) as sent:
                with pytest.raises(InvalidTypeID, match="expected prefix 'user', got 'org'"):
                    paginate(
                        session,
                        sa.select(Member).order_by(Member.id),
                        Member.id,
                        limit=5,
                        after=org,
                    )
                with pytest.raises(InvalidTypeID, match="expected prefix 'user', got 'org'"):
                    _ = Member.id == org
                with pytest.raises(InvalidTypeID, match="expected prefix 'user', got 'org'"):
                    Member(id=org)
            assert sent == []
    finally:
        table.drop(engine)  # type: ignore[attr-defined]
