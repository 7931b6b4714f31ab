"""UUIDv7PrimaryKey, UUIDv7Base and UUIDv7AuditBase on the three servers."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from sqlalchemy.schema import CreateTable

from _mixin_checks import flush_in_one_insert, fresh_tables
from sqlalchemy_ulid import (
    UUIDv7AuditBase,
    UUIDv7Base,
    UUIDv7PrimaryKey,
    created_since,
    new_uuid7,
    uuid7_min_at,
)


class OwnBase(DeclarativeBase):
    pass


class Sample(OwnBase, UUIDv7PrimaryKey):  # the mixin last: id still comes first
    __tablename__ = "u7_mixins_samples"
    __mapper_args__ = {"eager_defaults": True}  # noqa: RUF012

    value: Mapped[int]
    # Server-generated: the flush must fetch it back with INSERT .. RETURNING.
    stored: Mapped[datetime] = mapped_column(sa.DateTime, server_default=sa.func.now())


class Rack(UUIDv7Base):
    __tablename__ = "u7_mixins_racks"

    label: Mapped[str] = mapped_column(sa.String(20))


class Slot(UUIDv7Base):
    __tablename__ = "u7_mixins_slots"

    rack_id: Mapped[uuid.UUID] = mapped_column(sa.ForeignKey("u7_mixins_racks.id"))
    position: Mapped[int]


class Entry(UUIDv7AuditBase):
    __tablename__ = "u7_mixins_entries"

    text: Mapped[str] = mapped_column(sa.String(40))


TABLES = [Sample.__table__, Rack.__table__, Slot.__table__, Entry.__table__]


@pytest.fixture
def tables(engine: Engine) -> Iterator[None]:
    yield from fresh_tables(engine, TABLES)


def test_id_column_shape(engine: Engine) -> None:
    table = Sample.__table__
    assert next(iter(table.columns.keys())) == "id"  # type: ignore[attr-defined]
    ddl = str(CreateTable(table).compile(engine))  # type: ignore[arg-type]
    assert ddl.index("id ") < ddl.index("value")
    assert "_sentinel" not in ddl  # the key is the sentinel: no extra column
    column = table.c.id  # type: ignore[attr-defined]
    assert isinstance(column.type, sa.Uuid)
    assert column.primary_key
    assert column.default is not None
    assert column.default.arg.__name__ == new_uuid7.__name__


def test_thousand_objects_flush_in_one_insert_returning(engine: Engine, tables: None) -> None:
    made = flush_in_one_insert(engine, Sample)
    assert all(type(i) is uuid.UUID and i.version == 7 for i in made)


def test_base_maps_uuid_foreign_keys(engine: Engine, tables: None) -> None:
    assert isinstance(Slot.__table__.c.rack_id.type, sa.Uuid)  # type: ignore[attr-defined]
    with Session(engine) as session:
        rack = Rack(label="a")
        session.add(rack)
        session.flush()
        session.add_all([Slot(rack_id=rack.id, position=n) for n in range(3)])
        session.commit()
        joined = session.execute(
            sa.select(Slot.position, Rack.label).join(Rack, Slot.rack_id == Rack.id)
        ).all()
    assert sorted(joined) == [(0, "a"), (1, "a"), (2, "a")]


def test_audit_base(engine: Engine, tables: None) -> None:
    before = datetime.now(timezone.utc) - timedelta(seconds=1)
    with Session(engine) as session:
        entry = Entry(text="first")
        session.add(entry)
        session.commit()
        entry_id = entry.id
    with Session(engine) as session:
        entry = session.get(Entry, entry_id)
        assert entry is not None
        created, inserted = entry.created_at, entry.updated_at
        assert "created_at" not in Entry.__table__.c  # type: ignore[attr-defined]
        assert uuid7_min_at(created) <= entry_id  # created_at is the id's millisecond
        assert created == datetime.fromtimestamp((entry_id.int >> 80) / 1000, timezone.utc)
        assert created.tzinfo is timezone.utc
        assert before <= created <= inserted
        time.sleep(0.01)
        entry.text = "second"
        session.commit()
        assert entry.updated_at > inserted
        found = session.scalars(sa.select(Entry).where(created_since(Entry.id, before))).all()
        assert found == [entry]
        in_sql = session.scalars(sa.select(Entry.created_at).where(Entry.id == entry_id)).one()
        assert in_sql == created
