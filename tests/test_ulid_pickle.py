"""Pickles go through the public constructor; subclasses are honoured (issue 10, item 5)."""

from __future__ import annotations

import copy
import inspect
import pickle
from datetime import datetime, timezone

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from sqlalchemy_ulid import ULID, InvalidULID, ULIDType, new_ulid


class EventId(ULID):
    """A project's own id type."""

    __slots__ = ()


def test_pickle_names_only_the_public_class() -> None:
    u = new_ulid()
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        data = pickle.dumps(u, protocol)
        assert b"_from_int" not in data
        restored = pickle.loads(data)
        assert restored == u
        assert type(restored) is ULID


def test_tampered_pickle_is_refused() -> None:
    good = pickle.dumps(ULID("01HTQW311N1KR5G0Y75M3EF00H"), 0)
    assert b"01HTQW311N1KR5G0Y75M3EF00H" in good
    with pytest.raises(InvalidULID):
        pickle.loads(good.replace(b"01HTQW311N1KR5G0Y75M3EF00H", b"81HTQW311N1KR5G0Y75M3EF00H"))


def test_old_pickles_still_load() -> None:
    # Pickles made before this change call _ulid._from_int; it stays.
    old = b"\x80\x02csqlalchemy_ulid._ulid\n_from_int\nq\x00K\x05\x85q\x01Rq\x02."
    assert pickle.loads(old) == ULID.from_int(5)


def test_classmethods_return_the_subclass() -> None:
    u = new_ulid()
    when = datetime(2024, 4, 5, tzinfo=timezone.utc)
    made = [
        EventId(str(u)),
        EventId(u),
        EventId.from_bytes(u.bytes),
        EventId.from_int(u.int),
        EventId.from_uuid(u.to_uuid()),
        EventId.from_hex(u.hex),
        EventId.from_parts(u.timestamp_ms, u.randomness),
        EventId.min_at(when),
        EventId.max_at(when),
    ]
    assert all(type(x) is EventId for x in made), [type(x) for x in made]
    assert made[:7] == [u] * 7
    assert ULID(made[0]) == u
    restored = pickle.loads(pickle.dumps(made[0]))
    assert type(restored) is EventId
    assert restored == u
    assert copy.deepcopy(made[0]) is made[0]
    with pytest.raises(InvalidULID):
        EventId.from_int(-1)


def test_subclass_values_bind_and_compare(engine: Engine, metadata: sa.MetaData) -> None:
    table = sa.Table("pickle_sub", metadata, sa.Column("id", ULIDType(), primary_key=True))
    metadata.create_all(engine)
    ids = [EventId(str(new_ulid())) for _ in range(2)]
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": x} for x in ids])
        assert conn.scalar(sa.select(table.c.id).where(table.c.id == ids[1])) == ids[1]


@pytest.mark.skipif(
    "sort_by_parameter_order" not in inspect.signature(sa.Insert.returning).parameters,
    reason="SQLAlchemy < 2.0.10 has no sort_by_parameter_order",
)
def test_subclass_values_in_bulk_returning(engine: Engine, metadata: sa.MetaData) -> None:
    table = sa.Table("pickle_sub", metadata, sa.Column("id", ULIDType(), primary_key=True))
    metadata.create_all(engine)
    with engine.begin() as conn:
        rows = conn.execute(
            table.insert().returning(table.c.id, sort_by_parameter_order=True),
            [{"id": EventId(str(new_ulid()))} for _ in range(3)],
        ).all()
        assert len(rows) == 3
