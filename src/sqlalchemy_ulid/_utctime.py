"""Aware UTC datetimes on every database: the column type and the result type."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.types import TypeDecorator, TypeEngine

from ._comparator import COMPARISONS, IN_OPS  # the operators whose literals are checked
from ._dialects import dialect_row
from ._errors import InvalidTime

__all__ = ["AwareComparator", "CreationTime", "UTCDateTime", "refuse_naive"]


def refuse_naive(value: object) -> None:
    """Raise InvalidTime for a naive datetime: which time zone it means is a guess."""
    if isinstance(value, datetime) and (value.tzinfo is None or value.utcoffset() is None):
        raise InvalidTime(
            f"naive datetime {value.isoformat()} refused: pass a timezone-aware "
            "datetime, e.g. datetime.now(timezone.utc)"
        )


class AwareComparator(TypeDecorator.Comparator[datetime]):
    """Refuse naive datetime operands when the comparison is built.

    ``ulid_timestamp(col) > datetime(2024, 1, 1)`` raises ``InvalidTime`` (a ``ValueError``) at
    once, as ``created_since`` does, rather than a ``StatementError`` (not a
    ``ValueError``) from the bind when the statement runs.
    """

    __slots__ = ()

    def operate(self, op: Any, *other: Any, **kwargs: Any) -> ColumnElement[Any]:
        if op in COMPARISONS:
            for value in other:
                refuse_naive(value)
        elif op in IN_OPS and other and isinstance(other[0], (list, tuple, set, frozenset)):
            for value in other[0]:
                refuse_naive(value)
        return super().operate(op, *other, **kwargs)


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
        sqlalchemy_ulid.InvalidTime: naive datetime 2024-01-01T00:00:00 refused: ...
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True
    comparator_factory = AwareComparator

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        # MariaDB/MySQL: DATETIME(6), whose microseconds DateTime would cut.
        return dialect.type_descriptor(dialect_row(dialect).utc_datetime())

    def process_bind_param(self, value: Any, dialect: Dialect | None) -> Any:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise TypeError(f"expected an aware datetime, not {type(value).__name__}")
        refuse_naive(value)
        utc = value.astimezone(timezone.utc)
        # Only a zoned type (timestamptz) keeps the zone; elsewhere the
        # database holds and compares naive UTC wall times.
        time = None if dialect is None else dialect_row(dialect).time
        return utc if time is not None and time.zoned else utc.replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if not isinstance(value, datetime):
            return value
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


# Alembic writes a custom type as "<its module>.<its repr>": name the public
# module, which is what migrations import.
UTCDateTime.__module__ = "sqlalchemy_ulid"


class CreationTime(UTCDateTime):
    """The type of ``ulid_timestamp()``: the dialect's millisecond timestamp, aware UTC.

    PostgreSQL gets ``timestamptz``; MySQL/MariaDB ``DATETIME(3)`` and SQLite
    SQLAlchemy's text format, both holding UTC.
    """

    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        time = dialect_row(dialect).time
        if time is not None and time.datetime_type is not None:
            return time.datetime_type()
        return self.impl_instance
