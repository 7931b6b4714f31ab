"""ULIDType: a ULID column on every dialect, 16 bytes where the database allows.

All per-dialect knowledge lives in the table in ``_dialects``, one row a
dialect. The type asks that table once per dialect, when SQLAlchemy builds
its processors, and never again per value.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from collections import deque
from collections.abc import Callable
from itertools import repeat
from typing import Any, Final, Literal
from uuid import UUID as _UUID

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import operators
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter, ClauseElement, ColumnElement
from sqlalchemy.sql.visitors import InternalTraversal
from sqlalchemy.types import TypeDecorator, TypeEngine

from ._codec import (
    InvalidULID,
    decode_int,
    decode_ints,
    encode,
    encode_int,
    parse_hex,
    valid_texts,
)
from ._codec import decode as decode_text
from ._dialects import dialect_row
from ._in_list import ARRAY_THRESHOLD, InArray
from ._ulid import ULID, _from_bytes, _from_int, _new, _set_int

__all__ = ["Storage", "ULIDType", "to_bytes"]

Storage = Literal["auto", "native", "binary", "text"]
_STORAGES = ("auto", "native", "binary", "text")


def _check_storage(storage: str) -> None:
    if storage not in _STORAGES:
        raise ValueError(f"storage must be one of {', '.join(_STORAGES)}; got {storage!r}")


# -- values in ----------------------------------------------------------------


def to_bytes(value: object) -> bytes:
    """Return the 16 bytes of anything that names a ULID, or raise.

    Accepts a :class:`ULID`, its text in either case, a :class:`uuid.UUID`
    (asyncpg's subclass included), 16 bytes, or an object of another ULID
    library that carries its 16 bytes in ``.bytes`` (python-ulid, ulid-py).

    Raises:
        InvalidULID: the value has the right type but is not a ULID.
        TypeError: the value is of a type that never names a ULID.
    """
    if isinstance(value, ULID):
        return value._int.to_bytes(16, "big")
    if isinstance(value, str):
        return decode_text(value)
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, (bytes, bytearray, memoryview)):
        if len(value) != 16:
            raise InvalidULID(f"a ULID is 16 bytes, got {len(value)}")
        return bytes(value)
    data = getattr(value, "bytes", None)
    if isinstance(data, bytes) and len(data) == 16 and not isinstance(value, (int, float)):
        return data
    raise TypeError(
        f"cannot use {type(value).__name__} as a ULID: "
        "pass a ULID, its 26-character text, a UUID or 16 bytes"
    )


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


# -- expressions --------------------------------------------------------------

# Operators whose other side is an id (or, for in_, a list of ids): literal
# operands are converted when the expression is built.
_COMPARISONS: Final = frozenset(
    {
        operators.eq,
        operators.ne,
        operators.lt,
        operators.le,
        operators.gt,
        operators.ge,
        operators.between_op,
        operators.not_between_op,
        operators.is_distinct_from,
        operators.is_not_distinct_from,
    }
)
_IN_OPS: Final = frozenset({operators.in_op, operators.not_in_op})
# Pattern operators: text storage only, the pattern bound as plain text.
_PATTERN_OPS: Final = frozenset(
    getattr(operators, name)
    for name in (
        "like_op",
        "not_like_op",
        "ilike_op",
        "not_ilike_op",
        "startswith_op",
        "not_startswith_op",
        "istartswith_op",
        "not_istartswith_op",
        "endswith_op",
        "not_endswith_op",
        "iendswith_op",
        "not_iendswith_op",
        "contains_op",
        "not_contains_op",
        "icontains_op",
        "not_icontains_op",
    )
    if hasattr(operators, name)  # the i- variants are newer than SQLAlchemy 2.0.0
)


def _is_literal(value: object) -> bool:
    return not isinstance(value, ClauseElement) and not hasattr(value, "__clause_element__")


def _operand(column_type: ULIDType, value: Any) -> Any:
    """Return a literal operand as the value the column holds; leave SQL alone."""
    if type(value) is ULID:
        return encode_int(value._int) if column_type.as_str else value
    if value is None or not _is_literal(value):
        return value
    if type(value) is str:
        number = decode_int(value)
        return encode_int(number) if column_type.as_str else _from_int(number)
    if isinstance(value, (_dt.datetime, _dt.date)):
        raise TypeError(
            "a ULID column compares with ids, not datetimes: use "
            "ULID.min_at(when) / ULID.max_at(when), or created_since(column, when)"
        )
    data = to_bytes(value)
    return encode(data) if column_type.as_str else _from_bytes(data)


def _operands(column_type: ULIDType, values: Any) -> list[Any]:
    """``_operand`` of every value of an ``in_`` list, whole lists at once where they can be.

    A list of ``ULID`` objects is kept as it is; a list of str is decoded in
    one pass (:func:`decode_ints`); mixed lists go value by value.
    """
    items = list(values)
    kinds = set(map(type, items))
    if kinds == {str}:
        return _decoded(column_type, items)
    if kinds == {ULID}:
        return list(map(encode_int, (u._int for u in items))) if column_type.as_str else items
    return [_operand(column_type, value) for value in items]


def _decoded(column_type: ULIDType, texts: list[str]) -> list[Any]:
    numbers = decode_ints(texts)
    if column_type.as_str:
        return list(map(encode_int, numbers))
    # Every step a C call over the whole list: no Python frame per id.
    ulids = list(map(_new, repeat(ULID, len(numbers))))
    deque(map(_set_int, ulids, numbers), maxlen=0)
    return ulids


def _in_values(column: ColumnElement[Any], column_type: ULIDType, values: Any) -> Any:
    """The right side of ``column.in_(values)``: a list, or one expanding parameter.

    A list of ``ULID`` objects becomes the parameter as it is. A list of
    str ids is checked in one pass here, so a malformed id raises before any
    SQL exists, and decoded in one pass when the statement first needs its
    values (executing, compiling with literal values, the ORM's
    ``synchronize_session`` evaluator), once: the parameter's ``callable_``
    keeps what it made. Either way SQLAlchemy does not look at each value
    again. Longer lists and mixed ones go through :func:`_operands`.
    """
    items = list(values)
    kinds = set(map(type, items))
    if len(items) > ARRAY_THRESHOLD or not (kinds == {str} or kinds == {ULID}):
        return _operands(column_type, items)
    key = getattr(column, "key", None)
    if kinds == {ULID}:
        # Already checked: one parameter, without SQLAlchemy's look at each value.
        bound = _operands(column_type, items)
        return BindParameter(key, bound, type_=column_type, unique=True, expanding=True)
    if not valid_texts(items):
        decode_ints(items)  # raises InvalidULID for the first bad text
    made: list[list[Any]] = []

    def decoded() -> list[Any]:
        if not made:
            made.append(_decoded(column_type, items))
        return made[0]

    return BindParameter(
        key,
        callable_=decoded,
        type_=column_type,
        unique=True,
        expanding=True,
    )


class _Comparator(TypeDecorator.Comparator[Any]):
    """Convert literal operands to ULIDs when the expression is built.

    ``col == "bad"`` raises :class:`InvalidULID` at once, before any SQL
    exists, and the ORM's in-Python evaluator (``synchronize_session``)
    compares ULID with ULID.
    """

    __slots__ = ()

    def operate(self, op: Any, *other: Any, **kwargs: Any) -> ColumnElement[Any]:
        column_type: ULIDType = self.type  # type: ignore[assignment]
        if op in _COMPARISONS:
            if len(other) == 1:
                other = (_operand(column_type, other[0]),)
            else:
                other = tuple([_operand(column_type, value) for value in other])
        elif (
            op in _IN_OPS
            and other
            and _is_literal(other[0])
            # in_("01H...") is a mistake SQLAlchemy itself reports
            and not isinstance(other[0], (str, bytes))
        ):
            values = _in_values(self.expr, column_type, other[0])
            if isinstance(values, list) and len(values) > ARRAY_THRESHOLD:
                return InArray(self.expr, values, negate=op is operators.not_in_op)
            other = (values, *other[1:])
        elif op in _PATTERN_OPS:
            return self._pattern(op, *other, **kwargs)
        return super().operate(op, *other, **kwargs)

    def _pattern(self, op: Any, *other: Any, **kwargs: Any) -> ColumnElement[Any]:
        column_type: ULIDType = self.type  # type: ignore[assignment]
        if column_type.storage != "text":
            raise TypeError(
                f"{op.__name__.removesuffix('_op')} needs ULIDType('text'): this column "
                f"stores ids as bytes (storage={column_type.storage!r}). For the ids of a "
                "time range, compare with ULID.min_at / ULID.max_at."
            )
        # Seen as plain text, the column takes the pattern unconverted.
        as_text = sa.type_coerce(self.expr, sa.String())
        return as_text.operate(op, *other, **kwargs)


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
    template = dialect_row(compiler.dialect).uuid_as_bytes
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
    comparator_factory = _Comparator

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
            return _UUID if row.uuid_as_bytes is None else bytes.fromhex
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
