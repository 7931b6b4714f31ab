"""ULIDPrimaryKey, ULIDBase, ULIDAuditBase and UTCDateTime on the three servers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from sqlalchemy.schema import CreateTable

from _mixin_checks import flush_in_one_insert, fresh_tables
from conftest import recording
from sqlalchemy_ulid import (
    ULID,
    ULIDAuditBase,
    ULIDBase,
    ULIDPrimaryKey,
    ULIDType,
    UTCDateTime,
    created_since,
)


class OwnBase(DeclarativeBase):
    type_annotation_map = {ULID: ULIDType}  # noqa: RUF012


class Reading(OwnBase, ULIDPrimaryKey):  # the mixin last: id still comes first
    __tablename__ = "mixins_readings"
    __mapper_args__ = {"eager_defaults": True}  # noqa: RUF012

    value: Mapped[int]
    # Server-generated: the flush must fetch it back with INSERT .. RETURNING.
    stored: Mapped[datetime] = mapped_column(sa.DateTime, server_default=sa.func.now())


class Shelf(ULIDBase):
    __tablename__ = "mixins_shelves"

    label: Mapped[str] = mapped_column(sa.String(20))


class Book(ULIDBase):
    __tablename__ = "mixins_books"

    shelf_id: Mapped[ULID] = mapped_column(sa.ForeignKey("mixins_shelves.id"))
    title: Mapped[str] = mapped_column(sa.String(40))


class Memo(ULIDAuditBase):
    __tablename__ = "mixins_memos"

    text: Mapped[str] = mapped_column(sa.String(40))


TABLES = [Reading.__table__, Shelf.__table__, Book.__table__, Memo.__table__]


@pytest.fixture
def tables(engine: Engine) -> Iterator[None]:
    yield from fresh_tables(engine, TABLES)


def test_id_column_shape(engine: Engine) -> None:
    table = Reading.__table__
    assert next(iter(table.columns.keys())) == "id"  # type: ignore[attr-defined]
    ddl = str(CreateTable(table).compile(engine))  # type: ignore[arg-type]
    assert ddl.index("id ") < ddl.index("value")
    column = table.c.id  # type: ignore[attr-defined]
    assert isinstance(column.type, ULIDType)
    assert column.primary_key
    assert column.default is not None
    assert column.default.is_callable


def test_thousand_objects_flush_in_one_batched_insert(engine: Engine, tables: None) -> None:
    made = flush_in_one_insert(engine, Reading)
    assert all(type(i) is ULID for i in made)


def test_more_objects_take_one_statement_per_thousand(engine: Engine, tables: None) -> None:
    with Session(engine) as session, recording(engine) as seen:
        session.add_all([Reading(value=n) for n in range(2500)])
        session.flush()
        inserts = [s for s in seen if s.lstrip().upper().startswith("INSERT")]
        session.rollback()
    assert len(inserts) == 3  # 1,000 + 1,000 + 500 (insertmanyvalues_page_size)


def test_base_maps_ulid_annotations_and_foreign_keys(engine: Engine, tables: None) -> None:
    assert isinstance(Book.__table__.c.shelf_id.type, ULIDType)  # type: ignore[attr-defined]
    with Session(engine) as session:
        shelf = Shelf(label="fiction")
        session.add(shelf)
        session.flush()
        session.add_all([Book(shelf_id=str(shelf.id).lower(), title=f"b{n}") for n in range(3)])
        session.commit()
        joined = session.execute(
            sa.select(Book.title, Shelf.label).join(Shelf, Book.shelf_id == Shelf.id)
        ).all()
    assert sorted(joined) == [("b0", "fiction"), ("b1", "fiction"), ("b2", "fiction")]


def test_audit_base(engine: Engine, tables: None) -> None:
    before = datetime.now(timezone.utc) - timedelta(seconds=1)
    with Session(engine) as session:
        memo = Memo(text="first")
        session.add(memo)
        session.commit()
        memo_id = memo.id
    with Session(engine) as session:
        memo = session.get(Memo, memo_id)  # not get_one: SQLAlchemy 2.0.22+
        assert memo is not None
        created, inserted = memo.created_at, memo.updated_at
        # created_at is the id's time: no column for it.
        assert "created_at" not in Memo.__table__.c  # type: ignore[attr-defined]
        assert created == memo_id.datetime
        assert created.tzinfo is timezone.utc
        assert inserted.tzinfo is not None
        assert inserted.utcoffset() == timedelta(0)
        assert before <= created <= inserted
        time.sleep(0.01)
        memo.text = "second"
        session.commit()
        assert memo.updated_at > inserted
        # Creation-time queries run on the id.
        assert session.scalars(sa.select(Memo).where(created_since(Memo.id, before))).all() == [
            memo
        ]
        # ... and created_at is SQL too: the database reads it from the id.
        in_sql = session.scalars(
            sa.select(Memo.created_at).where(Memo.id == memo_id).order_by(Memo.created_at)
        ).one()
        assert in_sql == created


def test_utc_datetime_round_trip_and_naive_refused(engine: Engine, tables: None) -> None:
    when = datetime(2024, 4, 5, 21, 34, 38, 901234, tzinfo=timezone(timedelta(hours=2)))
    with Session(engine) as session:
        memo = Memo(text="x", updated_at=when)
        session.add(memo)
        session.commit()
        session.expire_all()
        assert memo.updated_at == when  # same instant, microseconds kept
        assert memo.updated_at.tzinfo == timezone.utc

    with Session(engine) as session:
        session.add(Memo(text="naive", updated_at=datetime(2024, 1, 1)))
        with pytest.raises(sa.exc.StatementError, match="naive datetime"):
            session.commit()
    with Session(engine) as session:
        assert session.scalars(sa.select(Memo.text).where(Memo.text == "naive")).all() == []


def test_naive_datetime_comparisons_are_refused_when_built(engine: Engine, tables: None) -> None:
    naive = datetime(2024, 1, 1)
    aware = naive.replace(tzinfo=timezone.utc)
    for build in (
        lambda: Memo.created_at > naive,  # the hybrid: ulid_timestamp(id) in SQL
        lambda: Memo.created_at.between(naive, aware),
        lambda: Memo.updated_at <= naive,  # a UTCDateTime column
        lambda: Memo.updated_at.in_([naive]),
    ):
        with pytest.raises(ValueError, match="naive datetime"):
            build()
    with Session(engine) as session:
        session.add(Memo(text="aware", updated_at=aware))
        session.commit()
        stmt = sa.select(Memo.text).where(Memo.created_at > aware, Memo.updated_at == aware)
        assert session.scalars(stmt).all() == ["aware"]


def test_utc_datetime_refuses_other_types() -> None:
    with pytest.raises(TypeError):
        UTCDateTime().process_bind_param("2024-01-01", None)  # type: ignore[arg-type]


def test_utc_datetime_renders_under_the_public_module() -> None:
    # Alembic writes "<module>.<repr>" for custom types.
    assert UTCDateTime.__module__ == "sqlalchemy_ulid"


def test_alembic_sees_no_change_after_create(engine: Engine, tables: None) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    import sqlalchemy_ulid.alembic

    only = sa.MetaData()
    for table in TABLES:
        table.to_metadata(only)  # type: ignore[attr-defined]
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn,
            opts={"compare_type": True, "render_item": sqlalchemy_ulid.alembic.render_item},
        )
        diff = compare_metadata(context, only)
    # Other tests' tables may exist in the same database: look at ours only.
    names = {table.name for table in TABLES}  # type: ignore[attr-defined]
    ours = [d for d in diff if names & set(str(d).split("'"))]
    assert ours == []
