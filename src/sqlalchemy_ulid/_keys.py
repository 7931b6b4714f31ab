"""Key kinds: what a time-ordered key column holds, and its cursors and bounds.

A ``ULIDType`` column holds ULIDs, a ``TypeIDType`` column typed ids of
its prefix (cursors are their text); a column of ``sa.Uuid``,
``postgresql.UUID``, or any type that decorates one or reads as
:class:`uuid.UUID` (advanced-alchemy's ``GUID``) holds UUIDs, expected to be
UUIDv7s. Both start with the same 48-bit Unix millisecond, so the query
helpers treat them alike; what differs is handled here, once:

* the cursor text: 26 Crockford characters, or a canonical 36-character UUID;
* the zero-random lower boundary of a millisecond: ``ULID.min_at(ms)``, or
  the UUIDv7 of that millisecond with only its version and variant bits set,
  which sorts before every UUIDv7 of that millisecond;
* the bound parameter, bound with the column's own type, and refused at
  compile time where the database's uuid type does not sort UUIDv7s in time
  order (SQL Server's ``UNIQUEIDENTIFIER``, MariaDB's ``UUID`` before 10.11.5);
* the storage kind a column has on a dialect, for ``ulid_timestamp``.

Any other column type is treated as holding ULIDs, as before.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Union, cast

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter, ColumnElement
from sqlalchemy.types import TypeDecorator, TypeEngine, _Binary

from ._dialects import dialect_row
from ._kinds import ULID_KEYS, UUID7_KEYS, KeyKind, key_kind, kind_of_type
from ._types import ULIDType
from ._ulid import ULID
from ._uuid7 import uuid7_min_at

__all__ = [
    "KeyKind",
    "Keys",
    "TimeOrderError",
    "check_time_order",
    "column_expression",
    "keys_of",
    "storage_kind",
    "table_column",
    "uuid7_min_at",
]

#: The name of a key kind (:attr:`KeyKind.name`).
KindName = Literal["ulid", "uuid", "typeid"]
#: A cursor value as the column binds it: a ULID, a uuid.UUID, or UUID text
#: (or a TypeID, for a TypeIDType column).
KeyValue = Union[ULID, uuid.UUID, str]  # noqa: UP007


class TimeOrderError(ValueError):
    """The database stores this uuid column in an order that is not time order."""


def column_expression(column: Any) -> ColumnElement[Any]:
    """The column expression of a Core column, an ORM attribute or a ``mapped_column``."""
    expr = column.__clause_element__() if hasattr(column, "__clause_element__") else column
    if not isinstance(expr, ColumnElement):
        raise TypeError(f"expected a ULID or UUID column, not {type(column).__name__}")
    return expr


def _decorated(type_: TypeEngine[Any]) -> list[TypeEngine[Any]]:
    """The type and every type it decorates, outermost first."""
    chain = [type_]
    while isinstance(chain[-1], TypeDecorator) and len(chain) < 16:
        chain.append(chain[-1].impl_instance)
    return chain


def _uuid_kind(type_: TypeEngine[Any]) -> tuple[bool, bool]:
    """(holds UUIDs, binds uuid.UUID objects) for a column type."""
    for level in _decorated(type_):
        if isinstance(level, ULIDType):
            return False, False
        if isinstance(level, sa.Uuid):
            return True, bool(level.as_uuid)
        try:
            if level.python_type is uuid.UUID:
                return True, True
        except NotImplementedError:
            pass
    return False, False


@dataclass(frozen=True)
class Keys:
    """How one column's keys are parsed, written, bounded and bound.

    Attributes:
        kind: ``"ulid"``, ``"uuid"`` or ``"typeid"``.
        binds_uuid: UUID columns only: the column's type binds
            :class:`uuid.UUID` objects (else canonical text, as
            ``sa.Uuid(as_uuid=False)`` does).
        prefix: TypeID columns only: the column's prefix.
    """

    kind: KindName
    binds_uuid: bool = True
    prefix: str = ""

    @property
    def key_kind(self) -> KeyKind:
        """The :class:`KeyKind` of these keys (its parse, format and bounds)."""
        return key_kind(self.kind, self.prefix)

    def parse(self, cursor: object) -> KeyValue:
        """Parse a cursor strictly into the value the column binds.

        Raises:
            InvalidULID: the text is not the column's canonical form.
            TypeError: the cursor is of a type that never names a key.

        Example:
            >>> Keys("uuid").parse("018EAFC1-8435-7000-8000-000000000000")
            UUID('018eafc1-8435-7000-8000-000000000000')
            >>> Keys("uuid").parse("018eafc184357000800000000000000")
            Traceback (most recent call last):
            ...
            sqlalchemy_ulid.InvalidULID: ...
        """
        value = self.key_kind.parse(cursor)
        return value if self.binds_uuid else str(value)

    def format(self, value: object) -> str:
        """Write a key (as the column returns it) as cursor text.

        Example:
            >>> import uuid
            >>> Keys("uuid").format(uuid.UUID(int=1 << 100))
            '00000010-0000-0000-0000-000000000000'
            >>> Keys("ulid").format(ULID.from_int(255))
            '0000000000000000000000007Z'
        """
        return self.key_kind.format(value)

    def min_at(self, when: datetime | int) -> KeyValue:
        """The zero-random lower boundary of the millisecond ``when``.

        Example:
            >>> Keys("uuid", binds_uuid=False).min_at(0)
            '00000000-0000-7000-8000-000000000000'
        """
        bound = self.key_kind.min_at(when)
        return bound if self.binds_uuid else str(bound)

    def bind(self, column: ColumnElement[Any], value: KeyValue) -> BindParameter[Any]:
        """A bound parameter of ``value`` with the column's own type.

        It checks, when compiled, that the database stores the column in
        time order (see :func:`check_time_order`).
        """
        return _KeyBound(None, value, type_=column.type, unique=True)


def keys_of(column: Any) -> Keys:
    """Return the :class:`Keys` of a column (Core column, ORM attribute or type).

    Example:
        >>> import sqlalchemy as sa
        >>> keys_of(sa.column("id", sa.Uuid())).kind
        'uuid'
        >>> keys_of(sa.column("id", ULIDType())).kind
        'ulid'
    """
    type_ = column if isinstance(column, TypeEngine) else column_expression(column).type
    for level in _decorated(type_):
        kind = kind_of_type(level)
        if kind is not None:
            # binds_uuid: a uuid column of sa.Uuid(as_uuid=False) binds text.
            binds_uuid = _uuid_kind(type_)[1] if kind is UUID7_KEYS else True
            return Keys(cast(KindName, kind.name), binds_uuid, prefix=kind.prefix)
    return Keys(cast(KindName, ULID_KEYS.name))


def storage_kind(type_: TypeEngine[Any], dialect: Dialect) -> str:
    """How a key column is stored on a dialect: "uuid", "binary", "hex" or "text".

    "uuid" is a native uuid type, "binary" 16 bytes, "hex" a UUID's hex text
    (``CHAR(32)``, dashes or not) and "text" a ULID's 26 characters.

    Raises:
        TypeError: the column's type is none of these.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.dialects import mysql, postgresql
        >>> storage_kind(sa.Uuid(), postgresql.dialect()), storage_kind(sa.Uuid(), mysql.dialect())
        ('uuid', 'hex')
        >>> storage_kind(ULIDType("text"), mysql.dialect())
        'text'
    """
    row = dialect_row(dialect)
    holds_uuid = keys_of(type_).kind == "uuid"
    level: TypeEngine[Any] = type_
    for _ in range(16):
        if isinstance(level, ULIDType):
            return row.kind(level.storage)
        if not isinstance(level, TypeDecorator):
            break
        level = level.load_dialect_impl(dialect)
    if isinstance(level, sa.Uuid):
        native = level.native_uuid and row.time is not None and row.time.native_uuid(dialect)
        return "uuid" if native else "hex"
    if isinstance(level, _Binary):
        return "binary"
    if isinstance(level, sa.String):
        return "hex" if holds_uuid else "text"
    raise TypeError(
        f"cannot tell how a column of type {type_!r} stores its keys: "
        "expected ULIDType, a uuid type, 16-byte binary or key text"
    )


def check_time_order(type_: TypeEngine[Any], dialect: Dialect) -> None:
    """Raise :class:`TimeOrderError` where the column's storage is not in time order.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy.dialects import mssql, postgresql
        >>> check_time_order(sa.Uuid(), postgresql.dialect())
        >>> check_time_order(sa.Uuid(), mssql.dialect())
        Traceback (most recent call last):
        ...
        sqlalchemy_ulid._keys.TimeOrderError: ...
    """
    if keys_of(type_).kind != "uuid" or storage_kind(type_, dialect) != "uuid":
        return
    time = dialect_row(dialect).time
    if time is None or time.native_uuid_time_ordered(dialect):
        return
    version = ".".join(str(part) for part in (dialect.server_version_info or ()))
    if not version:
        version = "(server version unknown until the engine connects)"
    raise TimeOrderError(
        f"the {dialect.name} {version} native uuid type does not sort UUIDv7 values in "
        "time order (SQL Server's UNIQUEIDENTIFIER never does; MariaDB's UUID does from "
        "10.11.5): cursors and time bounds on this column would select the wrong rows. "
        "Store the keys in a form that sorts in time order: ULIDType() (16 bytes on "
        "every database) or sa.Uuid(native_uuid=False) (32 hex characters)"
    )


class _KeyBound(BindParameter[Any]):
    """A key bound that refuses, when compiled, a storage not in time order."""

    inherit_cache = True


@compiles(_KeyBound)
def _compile_key_bound(element: _KeyBound, compiler: SQLCompiler, **kw: Any) -> str:
    check_time_order(element.type, compiler.dialect)
    sql: str = compiler.visit_bindparam(element, **kw)  # type: ignore[no-untyped-call]
    return sql


def table_column(column: ColumnElement[Any]) -> sa.Column[Any] | None:
    """The table column behind ``column`` (through ORM annotations and aliases)."""
    for candidate in column.proxy_set:
        if isinstance(candidate, sa.Column) and isinstance(candidate.table, sa.Table):
            return candidate
    return None
