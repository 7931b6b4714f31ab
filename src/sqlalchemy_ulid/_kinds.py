"""Key kinds: one object per kind of time-ordered key (ULID, UUIDv7, TypeID).

A :class:`KeyKind` carries everything that differs between kinds of key:
the value type, strict parsing and canonical text, the bounds of a
millisecond, the Python generator, the server-side generator's SQL and the
storage conversion SQL of each database (read from the database's row in
``_dialects``), and the mixins' primary-key column. The server defaults,
the mixins, the cursors of the query helpers and the Alembic ops take a key
kind instead of keeping one copy of their code per kind; a new kind of key
(typed ids) is one more :class:`KeyKind`.

Example:
    >>> ULID_KEYS.parse("01HTQW311N1KR5G0Y75M3EF00H")
    ULID('01HTQW311N1KR5G0Y75M3EF00H')
    >>> UUID7_KEYS.format(UUID7_KEYS.min_at(0))
    '00000000-0000-7000-8000-000000000000'
    >>> key_kind("uuid") is UUID7_KEYS
    True
"""

from __future__ import annotations

import functools
import inspect
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import CompileError
from sqlalchemy.types import TypeEngine

from ._codec import InvalidULID
from ._convert_sql import ConvertSQL
from ._dialects import DialectRow, dialect_row
from ._generator import MonotonicGenerator, new_ulid
from ._generator_sql import UUID7_FUNCTION, GeneratorSQL
from ._typeid import TypeID, coerce, new_typeid
from ._typeid_type import TypeIDType
from ._types import _STORAGES as ULID_STORAGES
from ._types import ULIDType, to_bytes
from ._ulid import ULID
from ._uuid7 import UUIDv7Generator, new_uuid7, uuid7_max_at, uuid7_min_at

__all__ = [
    "KEY_KINDS",
    "TYPEID_KEYS",
    "ULID_KEYS",
    "UUID7_KEYS",
    "UUID_TEXT",
    "KeyKind",
    "key_kind",
    "kind_of_type",
    "typeid_keys",
]

#: The canonical text of a UUID (either case).
UUID_TEXT = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)


@dataclass(frozen=True, eq=False)
class KeyKind:
    """One kind of time-ordered key and everything that is particular to it."""

    #: short name (``Keys.kind``): ``"ulid"``, ``"uuid"``. Compiled SQL is
    #: cached by it: kinds made per column (a typed id's prefix) share one
    #: name only where their SQL is the same.
    name: str
    #: how messages name it: ``"ULID"``, ``"UUIDv7"``
    label: str
    #: the Python value a column of this kind returns
    value_type: type
    #: strict parse of a value or its canonical text (InvalidULID/TypeError)
    parse: Callable[[object], Any]
    #: the canonical text of a value as a column returns it
    format: Callable[[Any], str]
    #: the smallest and the largest key of a millisecond
    min_at: Callable[[datetime | int], Any]
    max_at: Callable[[datetime | int], Any]
    #: the Python generator, and its name for messages (``default=new_ulid``)
    new: Callable[[], Any]
    new_name: str
    #: the server-side function's name on every database
    function_name: str
    #: the storage kind ("uuid", "binary", "hex") a server default writes,
    #: for a ``storage=`` option, on a dialect (CompileError: none fits)
    generated_storage: Callable[[str, Dialect], str]
    #: a fresh column type of the mixins' primary key
    column_type: Callable[[], TypeEngine[Any]]
    #: this kind, of one level of a column's type, where that level is a
    #: type of this kind (a typed id's: the kind of its prefix); else None
    of_type: Callable[[TypeEngine[Any]], KeyKind | None]
    #: the ``storage=`` a server default of this kind takes for a column of
    #: this type ("text": no database generates it)
    default_storage: Callable[[TypeEngine[Any]], str]
    #: the column type of a ``storage=`` option on a dialect (the columns
    #: the Alembic ops add and convert)
    storage_type: Callable[[str, Dialect], TypeEngine[Any]]
    #: a monotonic generator of keys on a clock (Unix milliseconds), as a
    #: column of a ``storage=`` option binds them (the Alembic backfills)
    clocked: Callable[[Callable[[], int], str], Callable[[], Any]]
    #: the ``storage=`` options of this kind's server default, and those of
    #: them no database generates (refused before any SQL)
    storage_options: tuple[str, ...] = ()
    ungenerated: tuple[str, ...] = ()
    #: the database's UUIDv7 time functions read this kind's keys (their
    #: version and variant bits are a UUIDv7's)
    uuid7_time: bool = False
    #: the prefix of every key of this kind ("" for unprefixed kinds)
    prefix: str = ""
    #: the kind of another prefix (None: this kind has no prefix)
    prefixed: Callable[[str], KeyKind] | None = None
    #: the name of the kind whose entry of a row's ``keys`` holds this kind's
    #: generator SQL, and its conversion SQL ("": its own name); a kind that
    #: reuses stored forms (TypeID) names the kinds it shares them with
    generator_of: str = ""
    convert_of: str = ""

    def __repr__(self) -> str:
        return f"<key kind {self.label}>"

    def generator(self, row: DialectRow) -> GeneratorSQL | None:
        """The database's server-side generator SQL of this kind (None: it has none).

        Example:
            >>> from sqlalchemy_ulid._dialects import dialect_row
            >>> UUID7_KEYS.generator(dialect_row("postgresql")).default["uuid"]
            'gen_uuid7()'
            >>> row = dialect_row("sqlite")
            >>> TYPEID_KEYS.generator(row) is UUID7_KEYS.generator(row)
            True
        """
        return row.key_sql(self.generator_of or self.name).generator

    def convert(self, row: DialectRow) -> ConvertSQL | None:
        """The database's storage conversion SQL of this kind (None: not implemented there)."""
        return row.key_sql(self.convert_of or self.name).convert

    def with_prefix(self, prefix: str) -> KeyKind:
        """This kind for keys of ``prefix`` (itself, for its own prefix).

        Raises:
            ValueError: the kind has no prefix and ``prefix`` is not empty.
        """
        if prefix == self.prefix:
            return self
        if self.prefixed is None:
            raise ValueError(f"{self.label} keys have no prefix; got {prefix!r}")
        return self.prefixed(prefix)

    def primary_key(self) -> Any:
        """The ``id`` column of the mixins: this kind's type, made in Python, sorted first."""
        from sqlalchemy.orm import mapped_column

        # Bulk INSERT .. RETURNING matches its rows by the id made here.
        # insert_sentinel= is new in SQLAlchemy 2.0.10; older 2.0 releases
        # page INSERT..RETURNING without it (the id is the sentinel there too).
        sentinel: dict[str, Any] = (
            {"insert_sentinel": True}
            if "insert_sentinel" in inspect.signature(mapped_column).parameters
            else {}
        )
        return mapped_column(
            self.column_type(),
            primary_key=True,
            default=self.new,
            sort_order=-100,
            **sentinel,
        )


# -- ULID ---------------------------------------------------------------------------


def _parse_ulid(value: object) -> ULID:
    if isinstance(value, ULID):
        return value
    if isinstance(value, str):
        return ULID(value)
    raise TypeError(f"a cursor is a ULID or its 26-character text, not {type(value).__name__}")


def _format_ulid(value: object) -> str:
    return str(value) if isinstance(value, ULID) else str(ULID.from_bytes(to_bytes(value)))


def _ulid_storage(storage: str, dialect: Dialect) -> str:
    return dialect_row(dialect).kind(storage)


ULID_KEYS = KeyKind(
    name="ulid",
    label="ULID",
    value_type=ULID,
    parse=_parse_ulid,
    format=_format_ulid,
    min_at=ULID.min_at,
    max_at=ULID.max_at,
    new=new_ulid,
    new_name="new_ulid",
    function_name="gen_ulid",
    generated_storage=_ulid_storage,
    column_type=ULIDType,
    of_type=lambda type_: _ulid_of_type(type_),
    default_storage=lambda type_: _ulid_default_storage(type_),
    storage_type=lambda storage, dialect: ULIDType(storage),  # type: ignore[arg-type]
    clocked=lambda clock, storage: MonotonicGenerator(clock=clock),
    storage_options=ULID_STORAGES,
    ungenerated=("text",),
)


def _ulid_default_storage(type_: TypeEngine[Any]) -> str:
    # ULIDType's own storage (a TypeIDType's is ULIDType's too).
    return str(getattr(type_, "storage", "auto"))


def _ulid_of_type(type_: TypeEngine[Any]) -> KeyKind | None:
    # A TypeIDType is a ULIDType too: KEY_KINDS asks the typed ids first.
    return ULID_KEYS if isinstance(type_, ULIDType) else None


# -- UUIDv7 -------------------------------------------------------------------------


def _parse_uuid(value: object) -> uuid.UUID:
    if isinstance(value, ULID):
        return value.to_uuid()
    if isinstance(value, uuid.UUID):
        return uuid.UUID(int=value.int)  # asyncpg's subclass -> the stdlib class
    if isinstance(value, str):
        if not UUID_TEXT.fullmatch(value):
            shown = value if len(value) <= 40 else value[:40] + "..."
            raise InvalidULID(
                f"a UUID cursor is 36 characters, 8-4-4-4-12 hex digits; got {shown!r}"
            )
        return uuid.UUID(value)
    raise TypeError(
        f"a cursor of a UUID column is a uuid.UUID or its 36-character text, "
        f"not {type(value).__name__}"
    )


def _uuid_storage(storage: str, dialect: Dialect) -> str:
    if storage in ("binary", "hex"):
        return storage
    time = dialect_row(dialect).time
    native = time is not None and time.native_uuid(dialect)
    if storage == "auto":
        return "uuid" if native else "hex"
    if not native:
        raise CompileError(
            f"{dialect.name!r} has no uuid type here: pass the column's storage, "
            "'binary' or 'hex', to uuid7_server_default()"
        )
    return "uuid"


def _uuid_of_type(type_: TypeEngine[Any]) -> KeyKind | None:
    """A uuid type, or any type that reads as uuid.UUID (advanced-alchemy's ``GUID``)."""
    if isinstance(type_, sa.Uuid):
        return UUID7_KEYS
    try:
        return UUID7_KEYS if type_.python_type is uuid.UUID else None
    except NotImplementedError:
        return None


def _uuid_storage_type(storage: str, dialect: Dialect) -> TypeEngine[Any]:
    if storage == "text":  # the hyphenated 8-4-4-4-12 form (alter_uuid7_storage)
        return sa.CHAR(36)
    if storage == "binary":
        return dialect_row(dialect).binary()
    return sa.Uuid(native_uuid=storage != "hex")


def _uuid7_clocked(clock: Callable[[], int], storage: str) -> Callable[[], Any]:
    generate = UUIDv7Generator(clock=clock)
    if storage == "binary":  # a plain binary column binds the 16 bytes
        return lambda: generate().bytes
    return generate


UUID7_KEYS = KeyKind(
    name="uuid",
    label="UUIDv7",
    value_type=uuid.UUID,
    parse=_parse_uuid,
    format=lambda value: str(
        _parse_uuid(uuid.UUID(bytes=value) if isinstance(value, bytes) else value)
    ),
    min_at=uuid7_min_at,
    max_at=uuid7_max_at,
    new=new_uuid7,
    new_name="new_uuid7",
    function_name=UUID7_FUNCTION,
    generated_storage=_uuid_storage,
    column_type=sa.Uuid,
    of_type=_uuid_of_type,
    # sa.Uuid(native_uuid=False) stores 32 hex digits on every database.
    default_storage=lambda type_: "auto" if getattr(type_, "native_uuid", True) else "hex",
    storage_type=_uuid_storage_type,
    clocked=_uuid7_clocked,
    storage_options=("auto", "native", "binary", "hex"),
    uuid7_time=True,
)

# -- TypeID -------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)  # one per prefix: the query helpers ask per call
def typeid_keys(prefix: str) -> KeyKind:
    """The key kind of a typed-id column of one prefix.

    Every prefix shares the name ``"typeid"``: the prefix is not stored, so
    the SQL (the UUIDv7 generator, the column's 16-byte storage) is the same
    for all of them. Its bounds are a ULID's, which hold every 128-bit value
    of a millisecond (a UUIDv7's and a ULID's alike).

    Example:
        >>> kind = typeid_keys("user")
        >>> kind.format(kind.min_at(0))
        'user_00000000000000000000000000'
        >>> kind.parse("org_00000000000000000000000000")
        Traceback (most recent call last):
        ...
        sqlalchemy_ulid.InvalidTypeID: expected prefix 'user', got 'org'
    """

    def column_type() -> TypeEngine[Any]:
        return TypeIDType(prefix)

    def parse(value: object) -> TypeID:
        # A ULID or uuid.UUID is the bits alone (a sealed cursor opens as a
        # ULID): the column's prefix is given to them. Another library's typed
        # id (typeid-python's) is taken as a column bind takes it.
        return column_type().typed(value)  # type: ignore[attr-defined, no-any-return]

    def bound(ulid: ULID) -> TypeID:
        return TypeID.from_ulid(prefix, ulid)

    return KeyKind(
        name="typeid",
        label="TypeID",
        value_type=TypeID,
        parse=parse,
        format=lambda value: str(coerce(value)),
        min_at=lambda when: bound(ULID.min_at(when)),
        max_at=lambda when: bound(ULID.max_at(when)),
        new=lambda: new_typeid(prefix),
        new_name=f"lambda: new_typeid({prefix!r})" if prefix else "lambda: new_typeid(prefix)",
        # The server makes a UUIDv7, written as the column stores it: the
        # storage of ULIDType (uuid, or 16 bytes).
        function_name=UUID7_FUNCTION,
        generator_of=UUID7_KEYS.name,
        # The column's storage is ULIDType's: so are its conversions.
        convert_of=ULID_KEYS.name,
        generated_storage=_ulid_storage,
        column_type=column_type,
        of_type=_typeid_of_type,
        default_storage=_ulid_default_storage,
        # TypeIDType has ULIDType's "auto" storage only; the ids are UUIDv7s.
        storage_type=lambda storage, dialect: column_type(),
        clocked=_uuid7_clocked,
        storage_options=ULID_STORAGES,
        ungenerated=("text",),
        prefix=prefix,
        prefixed=typeid_keys,
    )


def _typeid_of_type(type_: TypeEngine[Any]) -> KeyKind | None:
    return typeid_keys(type_.prefix) if isinstance(type_, TypeIDType) else None


#: The kind of a typed id without a prefix: the server default's, whose SQL
#: every prefix shares.
TYPEID_KEYS = typeid_keys("")

#: Every key kind by name (the Alembic ops and ``Keys`` look kinds up here), in
#: the order a column's type is asked: a typed id's type is a ULIDType too.
#: A new kind of key is one more entry.
KEY_KINDS: dict[str, KeyKind] = {kind.name: kind for kind in (TYPEID_KEYS, ULID_KEYS, UUID7_KEYS)}


def key_kind(name: str, prefix: str = "") -> KeyKind:
    """The key kind of a name (``"ulid"``, ``"uuid"``, ``"typeid"``); ValueError for another.

    Example:
        >>> key_kind("ulid").label
        'ULID'
        >>> kind = key_kind("typeid", "user")
        >>> kind.format(kind.min_at(0))
        'user_00000000000000000000000000'
    """
    try:
        kind = KEY_KINDS[name]
    except KeyError:
        raise ValueError(
            f"unknown key kind {name!r}; expected one of {', '.join(KEY_KINDS)}"
        ) from None
    return kind.with_prefix(prefix)


def kind_of_type(type_: TypeEngine[Any]) -> KeyKind | None:
    """The key kind of one level of a column's type (None: not a key type).

    Example:
        >>> kind_of_type(sa.Uuid()) is UUID7_KEYS
        True
        >>> kind_of_type(sa.Integer()) is None
        True
    """
    for kind in KEY_KINDS.values():
        found = kind.of_type(type_)
        if found is not None:
            return found
    return None
