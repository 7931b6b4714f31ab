"""ULIDType in the ORM: Mapped[ULID], identities, bulk inserts, unit of work."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship

from sqlalchemy_ulid import (
    ULID,
    InvalidULID,
    ULIDType,
    install_ulid_function,
    new_ulid,
    ulid_server_default,
)


class Base(DeclarativeBase):
    # The one entry a project needs for Mapped[ULID].
    type_annotation_map = {ULID: ULIDType}  # noqa: RUF012 (SQLAlchemy reads a plain dict)


class Author(Base):
    __tablename__ = "orm_authors"

    id: Mapped[ULID] = mapped_column(primary_key=True, default=new_ulid)
    n: Mapped[int] = mapped_column(default=0)
    kind: Mapped[str] = mapped_column(sa.String(10), default="author")
    books: Mapped[list[Book]] = relationship(back_populates="author")

    __mapper_args__ = {"polymorphic_on": "kind", "polymorphic_identity": "author"}  # noqa: RUF012


class Editor(Author):
    __mapper_args__ = {"polymorphic_identity": "editor"}  # noqa: RUF012


class Book(Base):
    __tablename__ = "orm_books"

    id: Mapped[ULID] = mapped_column(primary_key=True, default=new_ulid)
    author_id: Mapped[ULID | None] = mapped_column(sa.ForeignKey("orm_authors.id"))
    public_id: Mapped[str] = mapped_column(ULIDType(as_str=True), default=new_ulid)
    author: Mapped[Author | None] = relationship(back_populates="books")


class Generated(Base):
    __tablename__ = "orm_generated"

    id: Mapped[ULID] = mapped_column(primary_key=True, server_default=ulid_server_default())
    n: Mapped[int]


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    with engine.connect() as conn:
        install_ulid_function(conn)
        Base.metadata.create_all(conn)
        conn.commit()
        try:
            with Session(conn) as session:
                yield session
        finally:
            conn.rollback()
            Base.metadata.drop_all(conn)
            conn.commit()


def test_mapped_ulid_uses_ulidtype_from_one_annotation_map_entry() -> None:
    assert isinstance(Author.__table__.c.id.type, ULIDType)
    assert isinstance(Book.__table__.c.author_id.type, ULIDType)
    assert Book.__table__.c.author_id.nullable


def test_str_id_assigned_to_attribute_leaves_one_identity(session: Session) -> None:
    u = new_ulid()
    author = Author()
    author.id = str(u).lower()  # type: ignore[assignment]
    assert type(author.id) is ULID
    session.add(author)
    session.flush()
    assert session.get(Author, u) is author
    assert session.scalars(sa.select(Author).where(Author.id == str(u).lower())).one() is author
    session.expire_all()
    assert session.get(Author, u) is author
    assert len(session.identity_map) == 1


def test_constructor_coerces_str_uuid_and_bytes(session: Session) -> None:
    ids = [new_ulid() for _ in range(3)]
    authors = [
        Author(id=str(ids[0]).lower()),
        Author(id=uuid.UUID(bytes=ids[1].bytes)),
        Editor(id=ids[2].bytes),
    ]
    session.add_all(authors)
    session.flush()
    for author, u in zip(authors, ids, strict=True):
        assert type(author.id) is ULID
        assert session.get(Author, u) is author
    assert len(session.identity_map) == 3


def test_bad_value_raises_at_assignment(session: Session) -> None:
    author = Author()
    with pytest.raises(InvalidULID):
        author.id = "01HTQW311N1KR5G0Y75M3EF00U"  # type: ignore[assignment]
    with pytest.raises(TypeError):
        Author(id=42)
    session.flush()
    assert session.scalar(sa.select(sa.func.count()).select_from(Author)) == 0


def test_as_str_attribute_holds_the_canonical_text(session: Session) -> None:
    u = new_ulid()
    book = Book(public_id=str(u).lower())
    assert book.public_id == str(u)
    session.add(book)
    session.flush()
    session.expire(book)
    assert book.public_id == str(u)


def test_foreign_keys_and_relationships(session: Session) -> None:
    author = Author(books=[Book(), Book()])
    session.add(author)
    session.flush()
    session.expire_all()
    loaded = session.scalars(sa.select(Book).where(Book.author_id == str(author.id))).all()
    assert {book.author for book in loaded} == {author}


def test_orm_bulk_insert_with_default_new_ulid_keeps_creation_order(session: Session) -> None:
    authors = [Author(n=i) for i in range(10_000)]
    session.add_all(authors)
    session.flush()
    assert session.scalars(sa.select(Author.n).order_by(Author.id)).all() == list(range(10_000))
    assert [a.id for a in authors] == sorted(a.id for a in authors)


def test_server_generated_ids_match_their_objects(session: Session) -> None:
    rows = [Generated(n=i) for i in range(300)]
    session.add_all(rows)
    session.flush()
    by_id = {id_: n for id_, n in session.execute(sa.select(Generated.id, Generated.n))}
    assert len(by_id) == 300
    for row in rows:
        assert type(row.id) is ULID
        assert by_id[row.id] == row.n


def test_unit_of_work_sorts_and_deletes_many_ulid_keys(session: Session) -> None:
    # Ids out of creation order, so the unit of work has to sort them.
    authors = [Author(id=ULID.from_bytes(uuid.uuid4().bytes), n=i) for i in range(50)]
    session.add_all(authors)
    session.flush()
    for author in authors:
        author.n += 100
    session.flush()
    assert session.scalar(sa.select(sa.func.min(Author.n))) == 100
    for author in authors:
        session.delete(author)
    session.flush()
    assert session.scalar(sa.select(sa.func.count()).select_from(Author)) == 0
