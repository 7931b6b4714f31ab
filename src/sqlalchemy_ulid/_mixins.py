"""Declarative mixins and bases: a ULID, UUIDv7 or typed-id primary key without the boilerplate.

Named after the conventions SQLAlchemy users copy from advanced-alchemy
(``UUIDv7PrimaryKey``, ``UUIDv7Base``, ``UUIDv7AuditBase``). Ours make the
key with our own generators (:func:`new_ulid`, :func:`new_uuid7`), never
fall back to random UUIDv4s, and use the key itself as the insert sentinel
(no extra ``_sentinel`` column).
"""

# No "from __future__ import annotations": the ORM reads Mapped[...] on the
# mixins, and would resolve string annotations in the module named by
# __module__, which the package rewrites to "sqlalchemy_ulid".
import uuid
from datetime import datetime, timezone
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.hybrid import hybrid_property
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column
from sqlalchemy.sql.elements import ColumnElement

from ._kinds import ULID_KEYS, UUID7_KEYS, typeid_keys
from ._sqltime import ulid_timestamp
from ._time import datetime_from_ms
from ._typeid import TypeID
from ._types import ULIDType
from ._ulid import ULID
from ._utctime import UTCDateTime

__all__ = [
    "TypeIDAuditBase",
    "TypeIDBase",
    "TypeIDPrimaryKey",
    "ULIDAuditBase",
    "ULIDBase",
    "ULIDPrimaryKey",
    "UUIDv7AuditBase",
    "UUIDv7Base",
    "UUIDv7PrimaryKey",
]


class ULIDPrimaryKey:
    """Mixin: an ``id`` primary key holding a ULID made by :func:`new_ulid`.

    The column is ``ULIDType()`` (16 bytes, or ``uuid`` on PostgreSQL),
    comes first in ``CREATE TABLE`` (``sort_order=-100``), and is the
    table's insert sentinel: its values are made in Python before the
    INSERT, so SQLAlchemy can match ``INSERT .. RETURNING`` rows to objects
    and flush many objects in a few batched statements, even when the table
    has server-generated columns to fetch back.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.orm import DeclarativeBase, mapped_column
        >>> from sqlalchemy_ulid import ULIDPrimaryKey
        >>> class Base(DeclarativeBase):
        ...     pass
        >>> class Tag(ULIDPrimaryKey, Base):
        ...     __tablename__ = "tags"
        ...     name = mapped_column(sa.String(20))
        >>> [column.name for column in Tag.__table__.columns]
        ['id', 'name']
    """

    id: Mapped[ULID] = ULID_KEYS.primary_key()


class ULIDBase(ULIDPrimaryKey, DeclarativeBase):
    """A declarative base whose models get a ULID ``id`` and map ``Mapped[ULID]``.

    ``type_annotation_map`` holds ``{ULID: ULIDType}``, so other ULID
    columns (foreign keys, say) are just ``Mapped[ULID]``. All models of
    this base share ``ULIDBase.metadata``; for a metadata of your own, put
    :class:`ULIDPrimaryKey` on your own base with the same map.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.orm import Session, mapped_column
        >>> from sqlalchemy_ulid import ULID, ULIDBase
        >>> class Author(ULIDBase):
        ...     __tablename__ = "doc_authors"
        ...     name = mapped_column(sa.String(20))
        >>> class Book(ULIDBase):
        ...     __tablename__ = "doc_books"
        ...     author_id = mapped_column(sa.ForeignKey("doc_authors.id"))  # a ULIDType
        >>> engine = sa.create_engine("sqlite://")
        >>> ULIDBase.metadata.create_all(engine, tables=[Author.__table__, Book.__table__])
        >>> with Session(engine) as session:
        ...     author = Author(name="Ursula")
        ...     session.add(author)
        ...     session.flush()
        ...     session.add(Book(author_id=author.id))
        ...     session.commit()
        ...     isinstance(author.id, ULID)
        True
        >>> for table in (Book.__table__, Author.__table__):  # tidy the shared metadata
        ...     ULIDBase.metadata.remove(table)
    """

    __abstract__ = True
    type_annotation_map: ClassVar[dict[Any, Any]] = {ULID: ULIDType}


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


class _Audit:
    """``created_at`` derived from the key, and a stored ``updated_at``."""

    id: Any  # the key column of the base this is mixed into

    updated_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), default=_utcnow, onupdate=_utcnow, sort_order=3000
    )

    @hybrid_property
    def created_at(self) -> datetime | None:
        """When the row was created: the id's timestamp, aware UTC.

        On an instance it is the id's leading 48-bit millisecond (``None``
        while the id is: before the flush that makes it, as a column default
        is); on the class it is :func:`ulid_timestamp` of the id, so
        ``select(Memo.created_at)``, ``group_by`` and ``order_by`` work in
        SQL with no stored column.
        """
        key = self.id
        if key is None:
            return None
        if isinstance(key, ULID):
            return key.datetime
        return datetime_from_ms(key.int >> 80)

    @created_at.inplace.expression
    @classmethod
    def _created_at_expression(cls) -> ColumnElement[datetime]:
        return ulid_timestamp(cls.id)


class ULIDAuditBase(_Audit, ULIDBase):
    """:class:`ULIDBase` plus ``created_at`` (from the id) and ``updated_at``.

    ``created_at`` is not a column: it is the id's timestamp, read-only and
    aware UTC, so it costs no storage and can never disagree with the id. It
    is a hybrid: in SQL it is :func:`ulid_timestamp` of the id (group or sort
    by it in reports); to *select rows* by creation time use
    :func:`created_since`, :func:`created_before` and
    :func:`created_between`, which compare the id and so use the primary-key
    index. ``updated_at`` is a column set in Python when the row
    is inserted and on every ORM update (millisecond-or-better precision on
    every database).

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.orm import Session, mapped_column
        >>> from sqlalchemy_ulid import ULIDAuditBase
        >>> class Memo(ULIDAuditBase):
        ...     __tablename__ = "doc_memos"
        ...     text = mapped_column(sa.String(20))
        >>> engine = sa.create_engine("sqlite://")
        >>> Memo.__table__.create(engine)
        >>> with Session(engine) as session:
        ...     memo = Memo(text="hi")
        ...     session.add(memo)
        ...     session.commit()
        ...     memo.created_at == memo.id.datetime, memo.updated_at >= memo.created_at
        (True, True)
        >>> ULIDAuditBase.metadata.remove(Memo.__table__)  # tidy the shared metadata
    """

    __abstract__ = True


# -- UUIDv7 ---------------------------------------------------------------------


class UUIDv7PrimaryKey:
    """Mixin: an ``id`` primary key holding a UUIDv7 made by :func:`new_uuid7`.

    The column is ``sa.Uuid()`` (``uuid`` on PostgreSQL, MariaDB's ``UUID``
    with SQLAlchemy 2.1, ``CHAR(32)`` elsewhere and on MariaDB with
    SQLAlchemy 2.0), comes first in ``CREATE TABLE``
    (``sort_order=-100``), and is the table's insert sentinel, as in
    :class:`ULIDPrimaryKey`: many objects flush in a few batched
    ``INSERT .. RETURNING`` statements. Unlike advanced-alchemy's mixin of
    the same name it never falls back to UUIDv4, needs no uuid-utils, and
    adds no ``_sentinel`` column. An ``id`` assigned as text is parsed
    strictly into a :class:`uuid.UUID` (as a page cursor is; malformed text
    raises :class:`~sqlalchemy_ulid.InvalidULID`), so the session keeps one
    object per row.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.orm import DeclarativeBase, mapped_column
        >>> from sqlalchemy_ulid import UUIDv7PrimaryKey
        >>> class Base(DeclarativeBase):
        ...     pass
        >>> class Label(UUIDv7PrimaryKey, Base):
        ...     __tablename__ = "labels"
        ...     name = mapped_column(sa.String(20))
        >>> [column.name for column in Label.__table__.columns]
        ['id', 'name']
    """

    id: Mapped[uuid.UUID] = UUID7_KEYS.primary_key()


def _to_uuid(target: object, value: Any, oldvalue: object, initiator: object) -> Any:
    # The session files an object under the Python value of its key: a str
    # left as it is would make a second object for the same row (PostgreSQL
    # binds the text) or fail at flush (SQLite). Parsed as a cursor is.
    if value is None or type(value) is uuid.UUID:
        return value
    if isinstance(value, (str, uuid.UUID)):
        return UUID7_KEYS.parse(value)
    raise TypeError(
        f"{type(target).__name__}.id is a uuid.UUID or its 36-character text, "
        f"not {type(value).__name__}"
    )


@event.listens_for(UUIDv7PrimaryKey, "mapper_configured", propagate=True)
def _on_uuid7_mapper_configured(mapper: Any, class_: type) -> None:
    prop = mapper.column_attrs.get("id")
    # A model that redeclares id with another type keeps its own values.
    if prop is None or not isinstance(prop.columns[0].type, sa.Uuid):
        return
    if not prop.columns[0].type.as_uuid:
        return
    # Each mapper of an inheritance tree is configured on its own.
    attribute = class_.id  # type: ignore[attr-defined]
    if not event.contains(attribute, "set", _to_uuid):
        event.listen(attribute, "set", _to_uuid, retval=True)


class UUIDv7Base(UUIDv7PrimaryKey, DeclarativeBase):
    """A declarative base whose models get a UUIDv7 ``id``.

    ``Mapped[uuid.UUID]`` columns (foreign keys, say) are ``sa.Uuid``, as
    SQLAlchemy maps them. All models of this base share
    ``UUIDv7Base.metadata``; for a metadata of your own, put
    :class:`UUIDv7PrimaryKey` on your own base.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.orm import Session, mapped_column
        >>> from sqlalchemy_ulid import UUIDv7Base
        >>> class Shelf(UUIDv7Base):
        ...     __tablename__ = "doc_shelves"
        ...     name = mapped_column(sa.String(20))
        >>> engine = sa.create_engine("sqlite://")
        >>> Shelf.__table__.create(engine)
        >>> with Session(engine) as session:
        ...     shelf = Shelf(name="fiction")
        ...     session.add(shelf)
        ...     session.commit()
        ...     shelf.id.version
        7
        >>> UUIDv7Base.metadata.remove(Shelf.__table__)  # tidy the shared metadata
    """

    __abstract__ = True


class UUIDv7AuditBase(_Audit, UUIDv7Base):
    """:class:`UUIDv7Base` plus ``created_at`` (from the id) and ``updated_at``.

    As in :class:`ULIDAuditBase`, ``created_at`` is not a column but the
    id's millisecond, aware UTC (a hybrid: :func:`ulid_timestamp` of the id
    in SQL), and ``updated_at`` is a column set in Python on insert and on
    every ORM update. advanced-alchemy's ``UUIDv7AuditBase`` stores both.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.orm import Session, mapped_column
        >>> from sqlalchemy_ulid import UUIDv7AuditBase, uuid7_min_at
        >>> class Note(UUIDv7AuditBase):
        ...     __tablename__ = "doc_notes"
        ...     text = mapped_column(sa.String(20))
        >>> engine = sa.create_engine("sqlite://")
        >>> Note.__table__.create(engine)
        >>> with Session(engine) as session:
        ...     note = Note(text="hi")
        ...     session.add(note)
        ...     session.commit()
        ...     uuid7_min_at(note.created_at) <= note.id, note.updated_at >= note.created_at
        (True, True)
        >>> UUIDv7AuditBase.metadata.remove(Note.__table__)  # tidy the shared metadata
    """

    __abstract__ = True


# -- TypeID ---------------------------------------------------------------------


class TypeIDPrimaryKey:
    """Mixin: an ``id`` primary key of typed ids, with the prefix the model names.

    Each model says its prefix in ``__typeid_prefix__``. The column is
    ``TypeIDType(prefix)`` (the 16 bytes of :class:`ULIDType`) with
    ``default=lambda: new_typeid(prefix)``; as in :class:`ULIDPrimaryKey`
    it comes first in ``CREATE TABLE`` and is the table's insert sentinel,
    so many objects flush in a few batched ``INSERT .. RETURNING``
    statements. An ``id`` assigned as text becomes a
    :class:`~sqlalchemy_ulid.TypeID` at once, and one of another prefix
    raises :class:`~sqlalchemy_ulid.InvalidTypeID` there.

    Raises:
        TypeError: (when the model is declared) it names no prefix.
        InvalidTypeID: (when the model is declared) the prefix breaks the
            specification's rules.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.orm import DeclarativeBase, mapped_column
        >>> from sqlalchemy_ulid import TypeIDPrimaryKey
        >>> class Base(DeclarativeBase):
        ...     pass
        >>> class Customer(TypeIDPrimaryKey, Base):
        ...     __tablename__ = "customers"
        ...     __typeid_prefix__ = "cus"
        ...     name = mapped_column(sa.String(20))
        >>> Customer.__table__.c.id.type
        TypeIDType('cus')
        >>> Customer(id="cus_01h455vb4pex5vsknk084sn02q").id
        TypeID('cus_01h455vb4pex5vsknk084sn02q')
    """

    #: the prefix of the model's ids (``"user"``); every model sets its own
    __typeid_prefix__: ClassVar[str]

    @declared_attr
    def id(cls) -> Mapped[TypeID]:  # noqa: N805 (declared_attr: called on the class)
        model: Any = cls  # the mapped class (typed as the mixin)
        prefix = getattr(model, "__typeid_prefix__", None)
        if not isinstance(prefix, str):
            raise TypeError(
                f"{model.__name__} has a typed-id key: name its prefix with "
                f'__typeid_prefix__ = "..." (a str, not {type(prefix).__name__})'
            )
        return typeid_keys(prefix).primary_key()  # type: ignore[no-any-return]


class TypeIDBase(TypeIDPrimaryKey, DeclarativeBase):
    """A declarative base whose models get a typed ``id`` of their ``__typeid_prefix__``.

    A typed foreign key names the prefix of the table it points to:
    ``mapped_column(TypeIDType("user"), sa.ForeignKey("users.id"))``. All
    models of this base share ``TypeIDBase.metadata``; for a metadata of
    your own, put :class:`TypeIDPrimaryKey` on your own base.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.orm import Session, mapped_column
        >>> from sqlalchemy_ulid import TypeIDBase, TypeIDType
        >>> class Account(TypeIDBase):
        ...     __tablename__ = "doc_accounts"
        ...     __typeid_prefix__ = "acct"
        >>> class Invoice(TypeIDBase):
        ...     __tablename__ = "doc_invoices"
        ...     __typeid_prefix__ = "inv"
        ...     account_id = mapped_column(TypeIDType("acct"), sa.ForeignKey("doc_accounts.id"))
        >>> engine = sa.create_engine("sqlite://")
        >>> tables = [Account.__table__, Invoice.__table__]
        >>> TypeIDBase.metadata.create_all(engine, tables=tables)
        >>> with Session(engine) as session:
        ...     account = Account()
        ...     session.add(account)
        ...     session.flush()
        ...     invoice = Invoice(account_id=account.id)
        ...     session.add(invoice)
        ...     session.commit()
        ...     str(invoice.id)[:4], invoice.account_id == account.id
        ('inv_', True)
        >>> for table in reversed(tables):  # tidy the shared metadata
        ...     TypeIDBase.metadata.remove(table)
    """

    __abstract__ = True


class TypeIDAuditBase(_Audit, TypeIDBase):
    """:class:`TypeIDBase` plus ``created_at`` (from the id) and ``updated_at``.

    As in :class:`ULIDAuditBase`: ``created_at`` is the millisecond of the
    id's UUIDv7, aware UTC, not a column (a hybrid: :func:`ulid_timestamp`
    of the id in SQL); ``updated_at`` is a column set in Python on insert
    and on every ORM update.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.orm import Session
        >>> from sqlalchemy_ulid import TypeIDAuditBase
        >>> class Comment(TypeIDAuditBase):
        ...     __tablename__ = "doc_comments"
        ...     __typeid_prefix__ = "cmt"
        >>> engine = sa.create_engine("sqlite://")
        >>> Comment.__table__.create(engine)
        >>> with Session(engine) as session:
        ...     comment = Comment()
        ...     session.add(comment)
        ...     session.commit()
        ...     comment.created_at == comment.id.datetime
        True
        >>> TypeIDAuditBase.metadata.remove(Comment.__table__)  # tidy the shared metadata
    """

    __abstract__ = True
