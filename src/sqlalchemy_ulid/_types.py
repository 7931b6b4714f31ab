"""ULIDType: a ULID column on every dialect, 16 bytes where the database allows.

All per-dialect knowledge lives in the table in ``_dialects``, one row a
dialect. The type asks that table once per dialect, when SQLAlchemy builds
its processors, and never again per value.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, Literal
from uuid import UUID as _UUID

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.visitors import InternalTraversal
from sqlalchemy.types import TypeDecorator, TypeEngine

from ._codec import (
    InvalidULID,
    decode_int,
    encode,
    encode_int,
    parse_hex,
)
from ._comparator import ULIDComparator, to_bytes
from ._dialects import dialect_row
from ._ulid import ULID, _from_bytes, _from_int, _new, _set_int

__all__ = ["Storage", "ULIDType", "to_bytes"]

Storage = Literal["auto", "native", "binary", "text"]
_STORAGES = ("auto", "native", "binary", "text")


def _check_storage(storage: str) -> None:
    if storage not in _STORAGES:
        raise ValueError(f"storage must be one of {', '.join(_STORAGES)}; got {storage!r}")


# -- values in ----------------------------------------------------------------


# -- values out ---------------------------------------------------------------


def _from_db(value: Any) -> ULID:
    """Turn whatever a driver returns for a ULID column into a ULID."""
    if isinstance(value, bytes):
        if len(value) == 16:
            return _from_bytes(value)
        raise InvalidULID(f"the database returned {len(value)} bytes for a ULID column")
    if isinstance(value, uuid.UUID):
        return _from_int(value.int)
    if isinstance(value, str):
        if len(value) == 26:
            return _from_int(decode_int(value))
        # uuid text from a driver that does not convert (e.g. psycopg2)
        return _from_bytes(parse_hex(value.replace("-", "")))
    if isinstance(value, (bytearray, memoryview)):
        return _from_db(bytes(value))
    raise TypeError(f"the database returned {type(value).__name__} for a ULID column")


def _quote(text: str) -> str:
    return f"'{text}'"  # ULID text and hex never contain a quote


# -- reading a native uuid as bytes ----------------------------------------------


class _UUIDBytes(ColumnElement[Any]):
    """A native uuid column in a SELECT list or RETURNING, read as 16 bytes.

    ``ULIDType.column_expression`` wraps the column in this; each dialect's
    row says how (``uuid_send(col)`` on PostgreSQL), and where it has no way
    the column renders as it is. The type stays the column's ULIDType, so
    its result processor, which takes bytes and ``uuid.UUID`` alike, turns
    the value into a ``ULID``.
    """

    inherit_cache = True
    _traverse_internals = [  # noqa: RUF012 (a plain list, as SQLAlchemy declares it)
        ("column", InternalTraversal.dp_clauseelement),
    ]

    def __init__(self, column: ColumnElement[Any]) -> None:
        self.column = column
        self.type = column.type


def _distinct_and_ordered(compiler: SQLCompiler) -> bool:
    # SELECT DISTINCT ... ORDER BY t.id needs t.id itself in the SELECT
    # list (PostgreSQL refuses an ORDER BY expression it cannot find there).
    stack = compiler.stack
    select = stack[-1].get("selectable") if stack else None
    return (
        bool(getattr(select, "_distinct", False))
        and not getattr(select, "_distinct_on", ())
        and bool(getattr(select, "_order_by_clauses", ()))
    )


@compiles(_UUIDBytes)
def _compile_uuid_bytes(element: _UUIDBytes, compiler: SQLCompiler, **kw: Any) -> str:
    column = compiler.process(element.column, **kw)
    template = dialect_row(compiler.dialect).native_as_bytes
    if template is None or _distinct_and_ordered(compiler):
        return column
    return template.format(column)


# -- attachment ---------------------------------------------------------------

_attach_listener = False


def _on_attach(column_type: ULIDType, parent: object) -> None:
    # The first time a ULIDType joins a Column: make mapped ULID attributes
    # convert assigned values (_orm.py) and bulk inserts match str ids
    # (_bulk.py). Both register one listener, once.
    if isinstance(parent, sa.Column):
        from . import _bulk, _orm

        _orm.enable()
        _bulk.enable()


def _listen_for_attach() -> None:
    global _attach_listener
    # Public DDLEvents hook; on the class, so it covers every instance
    # and subclass. Registered by the first ULIDType(), not at import.
    sa.event.listen(ULIDType, "after_parent_attach", _on_attach)
    _attach_listener = True


# -- the type -----------------------------------------------------------------


class ULIDType(TypeDecorator[ULID]):
    """A SQLAlchemy column type for ULIDs, stored in 16 bytes.

    ==================  ==============  ============  ====================================
    database            ``"auto"``      ``"binary"``  ``"text"``
    ==================  ==============  ============  ====================================
    PostgreSQL,         ``UUID``        ``BYTEA``     ``CHAR(26) COLLATE "C"``
    CockroachDB
    MySQL, MariaDB      ``BINARY(16)``  same          ``CHAR(26)`` ascii, ``ascii_bin``
    SQLite              ``BLOB``        same          ``CHAR(26)``
    SQL Server          ``BINARY(16)``  same          ``CHAR(26)`` ``Latin1_General_BIN2``
    Oracle              ``RAW(16)``     same          ``CHAR(26)``
    anything else       ``BINARY(16)``  same          ``CHAR(26)``
    ==================  ==============  ============  ====================================

    Why: PostgreSQL's ``uuid`` is 16 bytes compared bytewise, so it sorts
    like ULIDs and every driver reads it natively. MariaDB's ``UUID`` type
    is not used: on MariaDB 10.11 it rejected about a quarter of ULIDs and
    did not sort the rest in ULID order. SQL Server's
    ``UNIQUEIDENTIFIER`` sorts its last six bytes first. Text columns get a
    byte-order collation, since locale collations need not sort like ULIDs.
    Every storage sorts in ULID order in the database (``ORDER BY``, ``<``,
    ``>``, ``BETWEEN``); text costs 62% more space than binary.

    Binds accept a :class:`ULID`, its text in either case, a
    :class:`uuid.UUID`, 16 bytes, or another library's ULID object with a
    ``.bytes`` attribute; anything else raises :class:`InvalidULID` or
    :class:`TypeError` before the database is touched. Results are
    :class:`ULID` objects, or canonical strings with ``as_str=True``. On
    PostgreSQL the outermost SELECT list and RETURNING read a ``uuid``
    column as ``uuid_send(column)``, so the driver returns 16 bytes rather
    than a ``uuid.UUID`` to convert again; subqueries, WHERE and ORDER BY
    keep the ``uuid``.

    Comparisons (``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``between``,
    ``is_distinct_from``, ``in_``, ``not_in``) convert their plain Python
    operands the same way, when the expression is built: a malformed id
    raises :class:`InvalidULID` before any SQL exists, a ``datetime``
    raises :class:`TypeError`, and the ORM's ``synchronize_session``
    evaluator compares ULIDs with ULIDs. ``in_`` with more than 1,000 ids
    binds one array on PostgreSQL (``= ANY(...)``). ``like``,
    ``startswith``, ``endswith`` and ``contains`` work on ``"text"``
    storage, with the pattern bound as plain text, and raise
    :class:`TypeError` on binary storage.

    Args:
        storage: ``"auto"`` (the table above; ``"native"`` is a synonym),
            ``"binary"`` (16-byte binary on every database, ``BYTEA`` on
            PostgreSQL) or ``"text"`` (canonical uppercase ``CHAR(26)``).
        as_str: return canonical ``str`` instead of :class:`ULID` objects
            (mapped ORM attributes then hold canonical ``str`` too).

    In the ORM, a value assigned to a mapped ``ULIDType`` attribute
    (``obj.id = "01h..."``, ``Model(id=uuid)``) is converted at once to a
    :class:`ULID`, so the session never holds one row under two identities.
    ``Mapped[ULID]`` needs one entry: ``type_annotation_map = {ULID: ULIDType}``.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import ULIDType, new_ulid
        >>> events = sa.Table(
        ...     "events",
        ...     sa.MetaData(),
        ...     sa.Column("id", ULIDType(), primary_key=True, default=new_ulid),
        ... )
        >>> engine = sa.create_engine("sqlite://")
        >>> events.metadata.create_all(engine)
        >>> with engine.begin() as conn:
        ...     _ = conn.execute(events.insert(), [{}, {}])
        ...     ids = conn.scalars(sa.select(events.c.id).order_by(events.c.id)).all()
        >>> ids[0] < ids[1]
        True
    """

    impl = sa.LargeBinary
    cache_ok = True
    comparator_factory = ULIDComparator

    # as_str is deliberately not keyword-only: SQLAlchemy's cache key reads
    # the positional-or-keyword parameter names, and skips keyword-only ones.
    def __init__(self, storage: Storage = "auto", as_str: bool = False) -> None:
        _check_storage(storage)
        super().__init__()
        if not _attach_listener:
            _listen_for_attach()
        # Each argument under its own name: SQLAlchemy builds the statement
        # cache key from these attributes.
        self.storage: Storage = storage
        self.as_str = as_str

    def __repr__(self) -> str:
        args = []
        if self.storage != "auto":
            args.append(repr(self.storage))
        if self.as_str:
            args.append("as_str=True")
        return f"ULIDType({', '.join(args)})"

    @property
    def python_type(self) -> type[Any]:
        return str if self.as_str else ULID

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        row = dialect_row(dialect)
        kind = row.kind(self.storage)
        if kind == "uuid":
            column_type: TypeEngine[Any] = sa.Uuid(as_uuid=True)
        elif kind == "binary":
            column_type = row.binary()
        else:
            column_type = row.text()
        # Not dialect.type_descriptor(): that adapts CHAR to the dialect's
        # String (VARCHAR on PostgreSQL) for DDL; SQLAlchemy adapts the
        # returned type itself when it builds the processors.
        return column_type

    # The processors below are the hot path of every insert and select. Each
    # tests for the exact ULID (or the driver's exact type) first and reads
    # the bytes slot directly; everything else goes through to_bytes/_from_db.

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        row = dialect_row(dialect)
        kind = row.kind(self.storage)
        if kind == "uuid":
            # 32 hex digits: every PostgreSQL driver takes text for a uuid
            # parameter, and bytes.hex() is far cheaper than uuid.UUID().
            def convert(value: Any) -> Any:
                if type(value) is ULID:
                    return f"{value._int:032x}"
                return None if value is None else to_bytes(value).hex()

            return convert
        if kind == "text":

            def to_text(value: Any) -> Any:
                if type(value) is ULID:
                    return encode_int(value._int)
                return None if value is None else encode(to_bytes(value))

            return to_text

        def to_binary(value: Any) -> Any:
            if type(value) is ULID:
                return value._int.to_bytes(16, "big")
            return None if value is None else to_bytes(value)

        inner = self.impl_instance.bind_processor(dialect)
        if inner is None or row.plain_bytes:
            return to_binary
        wrap = inner

        def wrapped(value: Any) -> Any:
            return wrap(to_binary(value))

        return wrapped

    def column_expression(self, column: ColumnElement[Any]) -> ColumnElement[Any] | None:
        """Read a native uuid column as 16 bytes in SELECT lists and RETURNING.

        SQLAlchemy calls this on the type as adapted to the dialect, whose
        ``impl_instance`` is that dialect's column type; only a native uuid
        is wrapped, and only the outermost SELECT list (or each SELECT of a
        UNION) and RETURNING are, never a subquery, a WHERE or an ORDER BY.
        """
        if isinstance(self.impl_instance, sa.Uuid):
            return _UUIDBytes(column)
        return column

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        kind = dialect_row(dialect).kind(self.storage)
        # Globals bound as defaults: a local lookup per row, not a global one.
        if self.as_str:

            def as_text(
                value: Any, encode_int: Any = encode_int, from_bytes: Any = int.from_bytes
            ) -> Any:
                if type(value) is bytes and len(value) == 16:
                    return encode_int(from_bytes(value, "big"))
                return None if value is None else str(_from_db(value))

            return as_text
        if kind == "text":

            def from_text(value: Any) -> Any:
                return None if value is None else _from_db(value)

            return from_text

        # bytes: a binary column, or a uuid read as bytes (column_expression);
        # uuid.UUID: a uuid read as it is (text(), SELECT DISTINCT ... ORDER
        # BY); asyncpg's own UUID subclass and the rest go through _from_db.
        def from_bytes_or_uuid(
            value: Any,
            new: Any = _new,
            ulid_class: Any = ULID,
            set_int: Any = _set_int,
            from_bytes: Any = int.from_bytes,
            uuid_class: Any = _UUID,
        ) -> Any:
            kind = type(value)
            if kind is bytes and len(value) == 16:
                ulid = new(ulid_class)
                set_int(ulid, from_bytes(value, "big"))
                return ulid
            if kind is uuid_class:
                ulid = new(ulid_class)
                set_int(ulid, value.int)
                return ulid
            return None if value is None else _from_db(value)

        return from_bytes_or_uuid

    def _sentinel_value_resolver(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        # SQLAlchemy 2.0.10 to 2.0.28 only (later versions never call it):
        # bulk INSERT ... RETURNING matched the bound value, as sent to the
        # driver, with the value as the driver returns it. For a uuid column
        # that is our 32 hex digits against the driver's uuid.UUID, or against
        # 16 bytes where RETURNING reads the uuid as bytes. See _bulk.py.
        row = dialect_row(dialect)
        if row.kind(self.storage) == "uuid":
            return _UUID if row.native_as_bytes is None else bytes.fromhex
        return None

    def literal_processor(self, dialect: Dialect) -> Callable[[Any], str]:
        row = dialect_row(dialect)
        kind = row.kind(self.storage)
        if kind == "uuid":
            return lambda value: f"CAST('{to_bytes(value).hex()}' AS UUID)"
        if kind == "binary":
            return lambda value: row.binary_literal(to_bytes(value))
        return lambda value: _quote(encode(to_bytes(value)))

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        """Convert one value (the processors above are what SQLAlchemy calls)."""
        processor = self.bind_processor(dialect)
        return processor(value) if processor is not None else value

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        """Convert one result value (see :meth:`result_processor`)."""
        processor = self.result_processor(dialect, None)
        return processor(value) if processor is not None else value

    def coerce_compared_value(self, op: Any, value: Any) -> TypeEngine[Any]:
        # `col == "01..."`, `col > some_uuid`, `col.in_([...])`: always bind
        # through this type, whatever Python type the other side has.
        return self

    def compare_values(self, x: Any, y: Any) -> bool:
        if x is None or y is None:
            return x is y
        try:
            return to_bytes(x) == to_bytes(y)
        except (TypeError, ValueError):
            return bool(x == y)

    @staticmethod
    def sort_key_function(value: Any) -> Any:
        """Order ULIDs, their text and UUIDs alike (the ORM sorts primary keys)."""
        return to_bytes(value)


# Alembic writes a custom type as "<its module>.<its repr>": name the public
# module, which is what migrations import, however the class was reached
# (the mixins import it from here, not through the package).
ULIDType.__module__ = "sqlalchemy_ulid"
