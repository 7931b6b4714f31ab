"""TypeIDPrimaryKey, TypeIDBase and TypeIDAuditBase on the three servers (issue 35, item 2)."""

from __future__ import annotations

import inspect
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from sqlalchemy.schema import CreateTable

from _mixin_checks import flush_in_one_insert, fresh_tables
from sqlalchemy_ulid import (
    InvalidTypeID,
    TypeID,
    TypeIDAuditBase,
    TypeIDBase,
    TypeIDPrimaryKey,
    TypeIDType,
    created_since,
    new_typeid,
)


class OwnBase(DeclarativeBase):
    pass


class Sample(OwnBase, TypeIDPrimaryKey):  # the mixin last: id still comes first
    __tablename__ = "tid_mixins_samples"
    __typeid_prefix__ = "smp"
    __mapper_args__ = {"eager_defaults": True}  # noqa: RUF012

    value: Mapped[int]
    # Server-generated: the flush must fetch it back with INSERT .. RETURNING.
    stored: Mapped[datetime] = mapped_column(sa.DateTime, server_default=sa.func.now())


class Shop(TypeIDBase):
    __tablename__ = "tid_mixins_shops"
    __typeid_prefix__ = "shop"

    label: Mapped[str] = mapped_column(sa.String(20))


class Shelf(TypeIDBase):
    __tablename__ = "tid_mixins_shelves"
    __typeid_prefix__ = "shelf"

    shop_id: Mapped[TypeID] = mapped_column(TypeIDType("shop"), sa.ForeignKey(Shop.id))
    position: Mapped[int]


class Entry(TypeIDAuditBase):
    __tablename__ = "tid_mixins_entries"
    __typeid_prefix__ = "entry"

    text: Mapped[str] = mapped_column(sa.String(40))


TABLES = [Sample.__table__, Shop.__table__, Shelf.__table__, Entry.__table__]


@pytest.fixture
def tables(engine: Engine) -> Iterator[None]:
    yield from fresh_tables(engine, TABLES)


def _count(engine: Engine, model: type) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(sa.select(sa.func.count()).select_from(model)) or 0)


def test_id_column_shape(engine: Engine) -> None:
    table = Sample.__table__
    assert next(iter(table.columns.keys())) == "id"  # type: ignore[attr-defined]
    ddl = str(CreateTable(table).compile(engine))  # type: ignore[arg-type]
    assert ddl.index("id ") < ddl.index("value")
    assert "_sentinel" not in ddl  # the key is the sentinel: no extra column
    column = table.c.id  # type: ignore[attr-defined]
    assert isinstance(column.type, TypeIDType)
    assert column.type.prefix == "smp"
    assert column.primary_key
    made = column.default.arg(None)  # the default's callable, as SQLAlchemy wraps it
    assert type(made) is TypeID
    assert (made.prefix, made.uuid.version) == ("smp", 7)
    # Each model gets its own prefix from the one mixin.
    assert Shop.__table__.c.id.type.prefix == "shop"  # type: ignore[attr-defined]
    assert Entry.__table__.c.id.type.prefix == "entry"  # type: ignore[attr-defined]


def test_thousand_objects_flush_in_one_insert_returning(engine: Engine, tables: None) -> None:
    made = flush_in_one_insert(engine, Sample)
    assert all(type(i) is TypeID for i in made)
    assert {(i.prefix, i.uuid.version) for i in made} == {("smp", 7)}


@pytest.mark.skipif(
    "sort_by_parameter_order" not in inspect.signature(sa.Insert.returning).parameters,
    reason="SQLAlchemy < 2.0.10 has no sort_by_parameter_order",
)
def test_orm_bulk_insert_returning_with_text_ids(engine: Engine, tables: None) -> None:
    given = [new_typeid("shop") for _ in range(30)]
    rows = [{"id": str(i), "label": f"s{n}"} for n, i in enumerate(given)]
    rows[3] = {"label": "no id"}  # the default makes one
    with Session(engine, expire_on_commit=False) as session:
        stmt = sa.insert(Shop).returning(Shop, sort_by_parameter_order=True)
        shops = session.scalars(stmt, rows).all()
        session.commit()
    assert [s.label for s in shops] == [f"s{n}" if n != 3 else rows[3]["label"] for n in range(30)]
    assert [s.id for n, s in enumerate(shops) if n != 3] == given[:3] + given[4:]
    assert type(shops[3].id) is TypeID
    assert shops[3].id.prefix == "shop"


def test_ids_assigned_as_text_and_wrong_prefixes(engine: Engine, tables: None) -> None:
    text = "shop_01h455vb4pex5vsknk084sn02q"
    shop = Shop(id=text, label="a")
    assert shop.id == TypeID.parse(text)  # a TypeID at once: one object per row
    with pytest.raises(InvalidTypeID, match="expected prefix 'shop', got 'shelf'"):
        Shop(id="shelf_01h455vb4pex5vsknk084sn02q", label="b")
    with Session(engine) as session:
        session.add(shop)
        session.commit()
        assert session.get(Shop, TypeID.parse(text)) is shop
        with pytest.raises(InvalidTypeID, match="expected prefix 'shop', got 'shelf'"):
            Shelf(shop_id="shelf_01h455vb4pex5vsknk084sn02q", position=1)
    assert _count(engine, Shelf) == 0


def test_base_and_typed_foreign_keys(engine: Engine, tables: None) -> None:
    with Session(engine, expire_on_commit=False) as session:
        shop = Shop(label="a")
        session.add(shop)
        session.flush()
        session.add_all([Shelf(shop_id=str(shop.id), position=n) for n in range(3)])
        session.commit()
        joined = session.execute(
            sa.select(Shelf.id, Shelf.shop_id, Shop.label).join(Shop, Shelf.shop_id == Shop.id)
        ).all()
    assert sorted((row.shop_id, row.label) for row in joined) == [(shop.id, "a")] * 3
    assert all(row.id.prefix == "shelf" and row.shop_id.prefix == "shop" for row in joined)


def test_audit_base(engine: Engine, tables: None) -> None:
    before = datetime.now(timezone.utc) - timedelta(seconds=1)
    with Session(engine) as session:
        entry = Entry(text="first")
        session.add(entry)
        session.commit()
        entry_id = entry.id
    with Session(engine) as session:
        entry = session.get(Entry, entry_id)  # type: ignore[assignment]
        assert entry is not None
        created, inserted = entry.created_at, entry.updated_at
        assert "created_at" not in Entry.__table__.c  # type: ignore[attr-defined]
        assert created == entry_id.datetime  # the id's millisecond
        assert created is not None
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


def test_a_model_must_name_a_valid_prefix() -> None:
    class Base(DeclarativeBase):
        pass

    with pytest.raises(TypeError, match="__typeid_prefix__"):

        class NoPrefix(TypeIDPrimaryKey, Base):
            __tablename__ = "tid_mixins_no_prefix"

    with pytest.raises(InvalidTypeID, match="uppercase 'U'"):

        class BadPrefix(TypeIDPrimaryKey, Base):
            __tablename__ = "tid_mixins_bad_prefix"
            __typeid_prefix__ = "User"
