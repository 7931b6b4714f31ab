"""Declarative mixins and bases: a ULID primary key without the boilerplate.

Named after the conventions SQLAlchemy users copy from advanced-alchemy
(``UUIDv7PrimaryKey``, ``UUIDv7Base``, ``UUIDv7AuditBase``).
"""

# No "from __future__ import annotations": the ORM reads Mapped[...] on the
# mixins, and would resolve string annotations in the module named by
# __module__, which the package rewrites to "sqlalchemy_ulid".
import inspect
from datetime import datetime, timezone
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.hybrid import hybrid_property
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.types import TypeDecorator

from ._generator import new_ulid
from ._sqltime import AwareComparator, refuse_naive, ulid_timestamp
from ._types import ULIDType
from ._ulid import ULID

__all__ = ["ULIDAuditBase", "ULIDBase", "ULIDPrimaryKey", "UTCDateTime"]

# insert_sentinel= is new in SQLAlchemy 2.0.10; older 2.0 releases page
# INSERT..RETURNING without it (the client-side id is the sentinel there too).
_SENTINEL: dict[str, Any] = (
    {"insert_sentinel": True}
    if "insert_sentinel" in inspect.signature(mapped_column).parameters
    else {}
)


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

    id: Mapped[ULID] = mapped_column(
        ULIDType(), primary_key=True, default=new_ulid, sort_order=-100, **_SENTINEL
    )


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


class UTCDateTime(TypeDecorator[datetime]):
    """An aware UTC datetime on every database; naive datetimes are refused.

    Stored as ``TIMESTAMP WITH TIME ZONE`` on PostgreSQL and as UTC wall time
    elsewhere (``DATETIME(6)`` on MySQL/MariaDB, so microseconds survive);
    always read back aware, in UTC.

    Example:
        >>> from datetime import datetime
        >>> UTCDateTime().process_bind_param(datetime(2024, 1, 1), None)
        Traceback (most recent call last):
        ...
        ValueError: naive datetime 2024-01-01T00:00:00 refused: ...
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True
    comparator_factory = AwareComparator

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(sa.DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect | None) -> Any:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise TypeError(f"expected a datetime, not {type(value).__name__}")
        refuse_naive(value)
        utc = value.astimezone(timezone.utc)
        if dialect is not None and dialect.name == "postgresql":
            return utc
        return utc.replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


# Alembic writes a custom type as "<its module>.<its repr>": name the public
# module, which is what migrations import.
UTCDateTime.__module__ = "sqlalchemy_ulid"


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


class ULIDAuditBase(ULIDBase):
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

    updated_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), default=_utcnow, onupdate=_utcnow, sort_order=3000
    )

    @hybrid_property
    def created_at(self) -> datetime:
        """When the row was created: the id's timestamp, aware UTC.

        On an instance it is ``id.datetime``; on the class it is
        :func:`ulid_timestamp` of the id, so ``select(Memo.created_at)``,
        ``group_by`` and ``order_by`` work in SQL with no stored column.
        """
        return self.id.datetime

    @created_at.inplace.expression
    @classmethod
    def _created_at_expression(cls) -> ColumnElement[datetime]:
        return ulid_timestamp(cls.id)
