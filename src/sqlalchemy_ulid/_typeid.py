"""Typed ids (TypeID, spec 0.3.0): ``user_01h455vb4pex5vsknk084sn02q``.

A TypeID is a type prefix (lowercase ASCII letters and underscores, at most
63, starting and ending with a letter), an underscore, and the 128 bits of a
UUID in 26 characters of Crockford base32, in lowercase: the same alphabet
and layout as a ULID's text. A TypeID without a prefix is its suffix alone.

This module is part of the values layer: it needs no SQLAlchemy. The suffix
goes through the codec's tricks (one ``bytes.translate`` and ``int(text, 32)``
to decode, a table of three-character groups to encode); its tables here
accept and write lowercase only, as the spec asks.
"""

from __future__ import annotations

import builtins
import re
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, TypeVar

from ._codec import _INT_DIGITS, _M15, _PAIRS, _TRIPLES, ALPHABET, InvalidULID
from ._time import datetime_from_ms
from ._ulid import ULID, _from_int
from ._uuid7 import _default as _uuid7_generator
from ._uuid7 import _uuid_of

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic.json_schema import JsonSchemaValue
    from pydantic_core import CoreSchema
    from typing_extensions import Self

__all__ = ["InvalidTypeID", "TypeID", "new_typeid"]

#: The suffix alphabet of the spec: Crockford's, in lowercase.
SUFFIX_ALPHABET: Final = ALPHABET.lower()
MAX_PREFIX: Final = 63
_MAX_INT: Final = (1 << 128) - 1
_PREFIX = re.compile(r"[a-z]([a-z_]{0,61}[a-z])?")

_DECODE = bytearray(b"!" * 256)  # lowercase only: anything else fails int()
for _value, _char in enumerate(SUFFIX_ALPHABET):
    _DECODE[ord(_char)] = ord(_INT_DIGITS[_value])
_LOWER_TABLE: Final = bytes(_DECODE)
del _DECODE, _value, _char
_LOWER_PAIRS: Final = [pair.lower() for pair in _PAIRS]
_LOWER_TRIPLES: Final = [triple.lower() for triple in _TRIPLES]

# Prefixes already found valid: the hot paths (new_typeid, parse, the
# pydantic check) skip the regular expression for the few an app uses.
_valid_prefixes: dict[str, bool] = {"": True}
_PREFIX_CACHE: Final = 1024


class InvalidTypeID(InvalidULID):
    """Raised for every malformed TypeID, saying exactly what is wrong.

    A subclass of :class:`~sqlalchemy_ulid.InvalidULID`, so a
    :class:`ValueError`: code that already answers a bad id with a 400 or a
    422 answers a bad typed id the same way.

    Example:
        >>> from sqlalchemy_ulid import TypeID, InvalidTypeID
        >>> try:
        ...     TypeID.parse("user_8zzzzzzzzzzzzzzzzzzzzzzzzz")
        ... except InvalidTypeID as exc:
        ...     print(exc)
        the suffix must start with 0-7, got '8': it would hold more than 128 bits
    """


def _encode(n: int) -> str:
    """The 26-character lowercase suffix of an int 0 <= n < 2**128."""
    # One f-string (a single BUILD_STRING) is faster than joining a tuple.
    triples = _LOWER_TRIPLES
    return (
        f"{_LOWER_PAIRS[n >> 120]}{triples[(n >> 105) & _M15]}{triples[(n >> 90) & _M15]}"
        f"{triples[(n >> 75) & _M15]}{triples[(n >> 60) & _M15]}{triples[(n >> 45) & _M15]}"
        f"{triples[(n >> 30) & _M15]}{triples[(n >> 15) & _M15]}{triples[n & _M15]}"
    )


def _decode(suffix: str) -> int:
    """The 128-bit int of a 26-character lowercase suffix, or raise :class:`InvalidTypeID`."""
    try:
        if len(suffix) != 26:
            raise ValueError
        n = int(suffix.encode("ascii").translate(_LOWER_TABLE), 32)
    except (UnicodeEncodeError, ValueError):
        raise InvalidTypeID(_explain_suffix(suffix)) from None
    if n > _MAX_INT:
        raise InvalidTypeID(_explain_suffix(suffix))
    return n


def _explain_suffix(suffix: str) -> str:
    if len(suffix) != 26:
        return f"the suffix is 26 characters, got {len(suffix)}: {suffix!r}"
    for position, char in enumerate(suffix):
        if char in SUFFIX_ALPHABET:
            continue
        if char.isascii() and char.lower() in SUFFIX_ALPHABET:
            return (
                f"uppercase {char!r} at position {position} of the suffix: "
                "a TypeID is all lowercase"
            )
        hint = " (the alphabet has no i, l, o or u)" if char.lower() in "ilou" else ""
        return f"invalid character {char!r} at position {position} of the suffix{hint}"
    return f"the suffix must start with 0-7, got {suffix[0]!r}: it would hold more than 128 bits"


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is a valid TypeID prefix, or raise :class:`InvalidTypeID`."""
    if not isinstance(prefix, str):
        raise TypeError(f"a TypeID prefix is str, not {type(prefix).__name__}")
    if prefix in _valid_prefixes:
        return prefix
    if _PREFIX.fullmatch(prefix) is None:
        raise InvalidTypeID(_explain_prefix(prefix))
    if len(_valid_prefixes) < _PREFIX_CACHE:
        _valid_prefixes[prefix] = True
    return prefix


def _explain_prefix(prefix: str) -> str:
    rules = "a prefix is at most 63 lowercase ASCII letters and underscores"
    if len(prefix) > MAX_PREFIX:
        return f"the prefix is {len(prefix)} characters, at most 63 are allowed"
    for position, char in enumerate(prefix):
        if "a" <= char <= "z" or char == "_":
            continue
        if "A" <= char <= "Z":
            return f"uppercase {char!r} at position {position} of prefix {prefix!r}: {rules}"
        return f"invalid character {char!r} at position {position} of prefix {prefix!r}: {rules}"
    edge = "starts" if prefix.startswith("_") else "ends"
    return f"prefix {prefix!r} {edge} with '_': a prefix starts and ends with a letter"


def _parts(text: str) -> tuple[str, int]:
    """The prefix and the 128-bit int of a TypeID's text, or raise."""
    if not isinstance(text, str):
        raise TypeError(f"TypeID text must be str, not {type(text).__name__}")
    if not text:
        raise InvalidTypeID("an empty string is not a TypeID")
    prefix, separator, suffix = text.rpartition("_")
    if separator and not prefix:
        raise InvalidTypeID(
            f"{text!r} starts with '_': a TypeID without a prefix is its 26-character "
            "suffix alone, and a prefix starts with a letter"
        )
    if prefix not in _valid_prefixes:
        check_prefix(prefix)
    return prefix, _decode(suffix)


_new = object.__new__


class TypeID:
    """A typed id: a type prefix and a UUID's 128 bits, as ``user_01h455vb4pex5vsknk084sn02q``.

    Immutable and hashable. Objects compare and sort by prefix, then by the
    UUID's bytes (which, within a prefix, is the order of the text and, for
    UUIDv7s, of the time they were made). ``str()`` is the canonical text.

    ``TypeID(text)`` is :meth:`parse`; ``TypeID(other)`` also takes a typed
    id of another library with the same ``prefix`` and ``suffix`` strings
    (typeid-python's). ``TypeID["user"]`` is a Pydantic v2
    annotation that accepts only ``user_...`` ids (see the typed ids guide).

    Example:
        >>> import uuid
        >>> from sqlalchemy_ulid import TypeID
        >>> tid = TypeID.parse("user_01h455vb4pex5vsknk084sn02q")
        >>> tid.prefix, tid.suffix
        ('user', '01h455vb4pex5vsknk084sn02q')
        >>> tid.uuid
        UUID('01890a5d-ac96-774b-bcce-b302099a8057')
        >>> TypeID.from_uuid("user", tid.uuid) == tid
        True
        >>> tid
        TypeID('user_01h455vb4pex5vsknk084sn02q')
    """

    __slots__ = ("_int", "_prefix")
    _int: int
    _prefix: str

    def __new__(cls, text: object) -> Self:
        if isinstance(text, TypeID):
            return text if type(text) is cls else _of(cls, text._prefix, text._int)
        if isinstance(text, str):
            return cls.parse(text)
        # Another library's typed id (typeid-python's): its prefix and suffix.
        made = coerce(text)
        return _of(cls, made._prefix, made._int)

    @classmethod
    def parse(cls, text: str) -> Self:
        """Return the TypeID of its text, or raise :class:`InvalidTypeID` saying what is wrong.

        Strict, as the spec asks: all lowercase, a valid prefix, exactly 26
        suffix characters, the first of them 0-7.

        Example:
            >>> TypeID.parse("01h455vb4pex5vsknk084sn02q").prefix
            ''
            >>> TypeID.parse("user_01H455VB4PEX5VSKNK084SN02Q")  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            sqlalchemy_ulid.InvalidTypeID: uppercase 'H' at position 2 of the suffix: ...
        """
        prefix, value = _parts(text)
        return _of(cls, prefix, value)

    @classmethod
    def from_uuid(cls, prefix: str, value: uuid.UUID) -> Self:
        """Return the TypeID of a prefix and a :class:`uuid.UUID` (any version).

        Example:
            >>> import uuid
            >>> str(TypeID.from_uuid("user", uuid.UUID(int=1)))
            'user_00000000000000000000000001'
        """
        if not isinstance(value, uuid.UUID):
            raise TypeError(f"expected uuid.UUID, not {type(value).__name__}")
        return _of(cls, check_prefix(prefix), value.int)

    @classmethod
    def from_ulid(cls, prefix: str, value: ULID) -> Self:
        """Return the TypeID of a prefix and a :class:`~sqlalchemy_ulid.ULID`'s 128 bits.

        The suffix is the ULID's text in lowercase; :meth:`to_ulid` gives it back.

        Example:
            >>> from sqlalchemy_ulid import ULID
            >>> TypeID.from_ulid("order", ULID("01HTQW311N1KR5G0Y75M3EF00H"))
            TypeID('order_01htqw311n1kr5g0y75m3ef00h')
        """
        if not isinstance(value, ULID):
            raise TypeError(f"expected ULID, not {type(value).__name__}")
        return _of(cls, check_prefix(prefix), value.int)

    # -- views ------------------------------------------------------------------

    @property
    def prefix(self) -> str:
        """The type prefix; ``''`` for a TypeID without one."""
        return self._prefix

    @property
    def suffix(self) -> str:
        """The 26 lowercase base32 characters of the 128 bits."""
        return _encode(self._int)

    @property
    def uuid(self) -> uuid.UUID:
        """The 128 bits as a :class:`uuid.UUID`."""
        return _uuid_of(self._int)

    @property
    def int(self) -> builtins.int:
        """The 128 bits as an unsigned integer."""
        return self._int

    @property
    def bytes(self) -> builtins.bytes:
        """The 128 bits as 16 big-endian bytes."""
        return self._int.to_bytes(16, "big")

    @property
    def datetime(self) -> datetime:
        """The time in the first 48 bits (a UUIDv7's or a ULID's), as an aware UTC datetime."""
        return datetime_from_ms(self._int >> 80)

    def to_ulid(self) -> ULID:
        """Return the :class:`~sqlalchemy_ulid.ULID` with the same 128 bits.

        Example:
            >>> TypeID.parse("order_01htqw311n1kr5g0y75m3ef00h").to_ulid()
            ULID('01HTQW311N1KR5G0Y75M3EF00H')
        """
        return _from_int(self._int)

    # -- protocols --------------------------------------------------------------

    def __class_getitem__(cls, prefix: str) -> Any:
        """``TypeID["user"]``: the Pydantic annotation of ids with that prefix."""
        from ._typeid_pydantic import prefixed

        return prefixed(TypeID, coerce, InvalidTypeID, check_prefix(prefix))

    def __str__(self) -> str:
        if self._prefix:
            return f"{self._prefix}_{_encode(self._int)}"
        return _encode(self._int)

    def __repr__(self) -> str:
        return f"TypeID({str(self)!r})"

    def __hash__(self) -> builtins.int:
        return hash((self._prefix, self._int))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TypeID):
            return self._int == other._int and self._prefix == other._prefix
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        if isinstance(other, TypeID):
            return self._int != other._int or self._prefix != other._prefix
        return NotImplemented

    def __lt__(self, other: TypeID) -> bool:
        if isinstance(other, TypeID):
            return (self._prefix, self._int) < (other._prefix, other._int)
        return NotImplemented

    def __le__(self, other: TypeID) -> bool:
        if isinstance(other, TypeID):
            return (self._prefix, self._int) <= (other._prefix, other._int)
        return NotImplemented

    def __gt__(self, other: TypeID) -> bool:
        if isinstance(other, TypeID):
            return (self._prefix, self._int) > (other._prefix, other._int)
        return NotImplemented

    def __ge__(self, other: TypeID) -> bool:
        if isinstance(other, TypeID):
            return (self._prefix, self._int) >= (other._prefix, other._int)
        return NotImplemented

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("TypeID objects are immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("TypeID objects are immutable")

    def __reduce__(self) -> tuple[type[TypeID], tuple[str]]:
        # Through the validating constructor and the canonical text: a
        # tampered pickle raises InvalidTypeID rather than making a bad id.
        return (type(self), (str(self),))

    def __copy__(self) -> TypeID:
        return self

    def __deepcopy__(self, memo: object) -> TypeID:
        return self

    # -- pydantic v2: any prefix ------------------------------------------------

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source_type: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        from ._typeid_pydantic import core_schema

        return core_schema(None, coerce, InvalidTypeID)

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        from ._typeid_pydantic import json_schema

        return json_schema(None)


# Writing the slots through their descriptors skips the __setattr__ guard; it
# is the only way values get into a TypeID.
_set_int = TypeID._int.__set__  # type: ignore[attr-defined,misc]
_set_prefix = TypeID._prefix.__set__  # type: ignore[attr-defined,misc]
_T = TypeVar("_T", bound=TypeID)


def _of(cls: type[_T], prefix: str, value: int) -> _T:
    """An instance of ``cls`` from a prefix and an int already known to be valid."""
    made: _T = _new(cls)
    _set_prefix(made, prefix)
    _set_int(made, value)
    return made


def coerce(value: object) -> TypeID:
    """A TypeID from a TypeID, its text, or an object with ``prefix`` and ``suffix`` strings.

    The last is how typeid-python's ``TypeID`` (and any other library's
    typed id of the same shape) is accepted without importing it.
    """
    if isinstance(value, TypeID):
        return value
    if isinstance(value, str):
        prefix, n = _parts(value)
        return _of(TypeID, prefix, n)
    their_prefix, suffix = getattr(value, "prefix", None), getattr(value, "suffix", None)
    if isinstance(their_prefix, str) and isinstance(suffix, str):
        return _of(TypeID, check_prefix(their_prefix), _decode(suffix))
    raise TypeError(
        f"a TypeID is given as TypeID, str or a typed id with prefix and suffix, "
        f"not {type(value).__name__}"
    )


def new_typeid(prefix: str = "") -> TypeID:
    """Return a new TypeID: ``prefix`` and a UUIDv7 from :func:`~sqlalchemy_ulid.new_uuid7`.

    The suffix comes from the process-wide monotonic, fork-safe UUIDv7
    generator, so ids made one after another sort in the order they were
    made. Usable as a column default: ``default=lambda: new_typeid("user")``.

    Raises:
        InvalidTypeID: ``prefix`` breaks the spec's rules.

    Example:
        >>> from sqlalchemy_ulid import new_typeid
        >>> a, b = new_typeid("user"), new_typeid("user")
        >>> a < b, a.prefix, a.uuid.version, len(str(a))
        (True, 'user', 7, 31)
    """
    if prefix not in _valid_prefixes:
        check_prefix(prefix)
    # new_uuid7()'s lock-free path (UUIDv7Generator.__call__), inlined so that
    # no uuid.UUID is made only to read its int back.
    generator = _uuid7_generator
    tick, base, counter, limit = generator._run
    now = generator._read_clock()
    value = base + next(counter) if now < tick else limit + 1
    if value > limit:
        value = generator._locked_value(now)
    made: TypeID = _new(TypeID)
    _set_prefix(made, prefix)
    _set_int(made, value)
    return made


# Published under the package name from the start, not only once the package's
# lazy lookup hands them out: a pickle names sqlalchemy_ulid.TypeID whichever
# way the class was reached, and tracebacks show sqlalchemy_ulid.InvalidTypeID.
for _public in (TypeID, InvalidTypeID, new_typeid):
    _public.__module__ = "sqlalchemy_ulid"
del _public
