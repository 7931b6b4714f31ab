"""TypeIDType: a typed-id column, the 16 bytes of ULIDType with the prefix checked.

The storage, the processors' dialect choices, ``in_()`` arrays, the ORM and
bulk-insert hooks are :class:`~sqlalchemy_ulid.ULIDType`'s; this type only
changes the value at its edges. A bound value becomes a
:class:`~sqlalchemy_ulid.TypeID` of the column's prefix (or raises
:class:`~sqlalchemy_ulid.InvalidTypeID`) before ULIDType turns its bits
into the driver's value, and a value read back gets the column's prefix.
The prefix is never stored: switching a column between ``ULIDType``,
``sa.Uuid`` and ``TypeIDType`` changes no data.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.types import TypeDecorator

from ._comparator import COMPARISONS, IN_OPS, PATTERN_OPS, ULIDComparator, _is_literal
from ._in_list import ARRAY_THRESHOLD, InArray
from ._typeid import InvalidTypeID, TypeID, _new, _of, _set_int, _set_prefix, check_prefix, coerce
from ._types import ULIDType
from ._ulid import ULID

__all__ = ["TypeIDComparator", "TypeIDType"]


class TypeIDComparator(ULIDComparator):
    """Turn literal operands into TypeIDs of the column's prefix when the expression is built.

    ``col == "org_01h..."`` on a ``TypeIDType("user")`` column raises
    :class:`~sqlalchemy_ulid.InvalidTypeID` at once, before any SQL exists.
    """

    __slots__ = ()

    def operate(self, op: Any, *other: Any, **kwargs: Any) -> ColumnElement[Any]:
        column_type: TypeIDType = self.type  # type: ignore[assignment]
        if op in COMPARISONS:
            other = tuple([column_type.operand(value) for value in other])
        elif (
            op in IN_OPS
            and other
            and _is_literal(other[0])
            # in_("user_...") is a mistake SQLAlchemy itself reports
            and not isinstance(other[0], (str, bytes))
        ):
            values = [column_type.operand(value) for value in other[0]]
            if len(values) > ARRAY_THRESHOLD:
                return InArray(self.expr, values, negate=op is operators.not_in_op)
            other = (values, *other[1:])
        elif op in PATTERN_OPS:
            raise TypeError(
                f"{op.__name__.removesuffix('_op')} does not apply to a TypeIDType column: "
                "it stores 16 bytes, not text. For the ids of a time range, use "
                "created_since(column, when) or compare with TypeID bounds."
            )
        # Past ULIDComparator, whose conversions make ULIDs: these are done.
        return TypeDecorator.Comparator.operate(self, op, *other, **kwargs)


class TypeIDType(ULIDType):
    """A column of typed ids (``user_01h455vb4pex5vsknk084sn02q``), stored in 16 bytes.

    The storage is :class:`~sqlalchemy_ulid.ULIDType`'s: ``uuid`` on
    PostgreSQL, ``BINARY(16)`` on MariaDB/MySQL, ``BLOB`` on SQLite (and
    the rest of ULIDType's table). Only the 128 bits are stored; the prefix
    belongs to the column, so the table holds no text and sorts by the
    UUID's bytes, which for ids made by :func:`~sqlalchemy_ulid.new_typeid`
    is the order they were made in.

    Results are :class:`~sqlalchemy_ulid.TypeID` objects carrying the
    column's prefix. Binds, comparisons (``==``, ``<``, ``between``,
    ``in_()`` ...), ``session.get``, values assigned to mapped attributes,
    INSERT and UPDATE take a ``TypeID`` or its text (or a typeid-python
    object); one with another prefix, or none, raises
    :class:`~sqlalchemy_ulid.InvalidTypeID` before any SQL is sent, and
    nothing is written. A bare :class:`uuid.UUID` or
    :class:`~sqlalchemy_ulid.ULID` names the bits alone and is accepted as
    they are (the time-range helpers bind such bounds).

    Args:
        prefix: the type prefix of every id in the column, e.g. ``"user"``
            (lowercase letters and underscores, as the TypeID spec says;
            ``""`` for ids without a prefix).

    Raises:
        InvalidTypeID: ``prefix`` breaks the spec's rules.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import TypeIDType, new_typeid
        >>> users = sa.Table(
        ...     "users",
        ...     sa.MetaData(),
        ...     sa.Column("id", TypeIDType("user"), primary_key=True,
        ...               default=lambda: new_typeid("user")),
        ... )
        >>> engine = sa.create_engine("sqlite://")
        >>> users.metadata.create_all(engine)
        >>> with engine.begin() as conn:
        ...     _ = conn.execute(users.insert(), [{}, {}])
        ...     ids = conn.scalars(sa.select(users.c.id).order_by(users.c.id)).all()
        >>> ids[0] < ids[1], ids[0].prefix
        (True, 'user')
        >>> users.c.id == "org_01h455vb4pex5vsknk084sn02q"
        Traceback (most recent call last):
        ...
        sqlalchemy_ulid.InvalidTypeID: expected prefix 'user', got 'org'
    """

    cache_ok = True
    comparator_factory = TypeIDComparator

    def __init__(self, prefix: str) -> None:
        super().__init__()
        # Under its own name: SQLAlchemy's statement cache key reads it.
        self.prefix = check_prefix(prefix)

    def __repr__(self) -> str:
        return f"TypeIDType({self.prefix!r})"

    @property
    def python_type(self) -> type[Any]:
        return TypeID

    # -- values in ------------------------------------------------------------

    def typed(self, value: object) -> TypeID:
        """Return ``value`` as a :class:`~sqlalchemy_ulid.TypeID` of this column's prefix.

        Raises:
            InvalidTypeID: bad text, or another prefix than the column's.
            TypeError: a value of a type that never names a typed id.

        Example:
            >>> from sqlalchemy_ulid import TypeIDType
            >>> TypeIDType("user").typed("user_01h455vb4pex5vsknk084sn02q").suffix
            '01h455vb4pex5vsknk084sn02q'
        """
        prefix = self.prefix
        if isinstance(value, TypeID):
            made = value
        elif isinstance(value, (uuid.UUID, ULID)):
            return _of(TypeID, prefix, value.int)
        elif isinstance(value, (_dt.datetime, _dt.date)):
            raise TypeError(
                "a TypeID column compares with ids, not datetimes: use "
                "created_since(column, when) or created_between(column, start, end)"
            )
        else:
            made = coerce(value)
        if made.prefix != prefix:
            given = repr(made.prefix) if made.prefix else "none"
            raise InvalidTypeID(f"expected prefix {prefix!r}, got {given}")
        return made

    def operand(self, value: Any) -> Any:
        """A literal operand as the column's value; SQL expressions and None pass."""
        if value is None or not _is_literal(value):
            return value
        return self.typed(value)

    def _orm_set_listener(
        self, target: object, value: Any, oldvalue: object, initiator: object
    ) -> Any:
        # Used by the core's ORM glue for attributes mapped to this type:
        # an assigned id becomes the column's TypeID at once, and a wrong
        # prefix raises there, long before a flush.
        return None if value is None else self.typed(value)

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        inner = super().bind_processor(dialect)
        assert inner is not None  # ULIDType always converts
        prefix, typed = self.prefix, self.typed

        def process(value: Any) -> Any:
            if value is None:
                return None
            if type(value) is not TypeID or value._prefix != prefix:
                value = typed(value)
            return inner(value.int.to_bytes(16, "big"))

        return process

    def literal_processor(self, dialect: Dialect) -> Callable[[Any], str]:
        inner = super().literal_processor(dialect)
        typed = self.typed
        return lambda value: inner(typed(value).int.to_bytes(16, "big"))

    # -- values out -----------------------------------------------------------

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        ulid_of = super().result_processor(dialect, coltype)
        assert ulid_of is not None  # ULIDType always converts
        prefix = self.prefix

        # Globals bound as defaults, the TypeID made in place (no frame per
        # row): this is the hot path of every read.
        def process(
            value: Any,
            new: Any = _new,
            typeid: Any = TypeID,
            set_prefix: Any = _set_prefix,
            set_int: Any = _set_int,
            from_bytes: Any = int.from_bytes,
            uuid_class: Any = uuid.UUID,
        ) -> Any:
            kind = type(value)
            if kind is bytes and len(value) == 16:
                number = from_bytes(value, "big")
            elif kind is uuid_class:
                number = value.int
            elif value is None:
                return None
            else:
                number = ulid_of(value).int
            made = new(typeid)
            set_prefix(made, prefix)
            set_int(made, number)
            return made

        return process

    # -- the ORM --------------------------------------------------------------

    def compare_values(self, x: Any, y: Any) -> bool:
        if x is None or y is None:
            return x is y
        try:
            return self.typed(x) == self.typed(y)
        except (TypeError, ValueError):
            return bool(x == y)

    @staticmethod
    def sort_key_function(value: Any) -> Any:
        """Order ids by their bytes (the ORM sorts primary keys): the database's order."""
        if isinstance(value, TypeID):
            return value.bytes
        return coerce(value).bytes if isinstance(value, str) else ULIDType.sort_key_function(value)


# Alembic writes a custom type as "<its module>.<its repr>": the public module.
TypeIDType.__module__ = "sqlalchemy_ulid"
