"""The ULID value type: immutable, hashable, ordered like its 16 bytes."""

from __future__ import annotations

import builtins
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, TypeVar

from ._codec import InvalidULID, decode_int, encode_int, parse_hex
from ._time import check_ms, datetime_from_ms, to_ms

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic.json_schema import JsonSchemaValue
    from pydantic_core import CoreSchema
    from typing_extensions import Self  # typing.Self is Python 3.11+

__all__ = ["ULID"]

_RANDOM_BITS: Final = 80
_RANDOM_MASK: Final = (1 << _RANDOM_BITS) - 1
_MAX_INT: Final = (1 << 128) - 1
_U = TypeVar("_U", bound="ULID")


class ULID:
    """A Universally Unique Lexicographically Sortable Identifier.

    128 bits: a 48-bit Unix timestamp in milliseconds followed by 80 bits of
    randomness. The canonical text is 26 characters of Crockford base32.
    Objects compare, sort and hash by their 16 bytes, and that order is the
    order of the canonical text and of the timestamps.

    ``ULID(text)`` parses strictly: exactly 26 ASCII characters of Crockford's
    alphabet (no I, L, O, U), in either case, the first one 0-7. Anything else
    raises :class:`InvalidULID` saying what is wrong and where.

    Subclasses are honoured: the alternative constructors and unpickling
    return an instance of the class they are called on. Values that come
    from the database, the generator and the codec are plain ``ULID``.

    Example:
        >>> from sqlalchemy_ulid import ULID
        >>> u = ULID("01htqw311n1kr5g0y75m3ef00h")
        >>> u
        ULID('01HTQW311N1KR5G0Y75M3EF00H')
        >>> u.timestamp_ms
        1712345678901
        >>> u.datetime.isoformat()
        '2024-04-05T19:34:38.901000+00:00'
        >>> ULID.from_bytes(u.bytes) == u
        True
    """

    # The value is kept as one int: the generator, the codec, comparisons
    # and hashing all work on ints, so none of them converts to bytes.
    __slots__ = ("_int",)
    _int: int

    def __new__(cls, text: str) -> Self:
        if isinstance(text, ULID):
            # ULID(ulid) is the same object; a subclass re-wraps the value.
            return text if type(text) is cls else _of(cls, text._int)
        self = _new(cls)  # inline, not _of(): ULID(text) is the parsing hot path
        _set_int(self, decode_int(text))
        return self

    # -- alternative constructors ---------------------------------------------

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> Self:
        """Return the ULID of 16 big-endian bytes.

        Example:
            >>> ULID.from_bytes(bytes(16))
            ULID('00000000000000000000000000')
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"expected 16 bytes, not {type(data).__name__}")
        data = bytes(data)
        if len(data) != 16:
            raise InvalidULID(f"a ULID is 16 bytes, got {len(data)}")
        return _of(cls, int.from_bytes(data, "big"))

    @classmethod
    def from_int(cls, value: int) -> Self:
        """Return the ULID of an integer 0 <= value < 2**128.

        Example:
            >>> ULID.from_int(1)
            ULID('00000000000000000000000001')
        """
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"expected int, not {type(value).__name__}")
        if not 0 <= value <= _MAX_INT:
            raise InvalidULID(f"a ULID integer is 0 .. 2**128 - 1, got {value}")
        return _of(cls, value)

    @classmethod
    def from_uuid(cls, value: uuid.UUID) -> Self:
        """Return the ULID with the same 128 bits as a :class:`uuid.UUID`.

        Example:
            >>> import uuid
            >>> ULID.from_uuid(uuid.UUID(int=255))
            ULID('0000000000000000000000007Z')
        """
        if not isinstance(value, uuid.UUID):
            raise TypeError(f"expected uuid.UUID, not {type(value).__name__}")
        return _of(cls, value.int)

    @classmethod
    def from_hex(cls, text: str) -> Self:
        """Return the ULID of exactly 32 hexadecimal digits (either case).

        Example:
            >>> ULID.from_hex("0000000000000000000000000000000a")
            ULID('0000000000000000000000000A')
        """
        return _of(cls, int.from_bytes(parse_hex(text), "big"))

    @classmethod
    def from_parts(cls, timestamp_ms: int, randomness: bytes | int) -> Self:
        """Return the ULID of a millisecond timestamp and 80 random bits.

        Args:
            timestamp_ms: Unix milliseconds, 0 <= timestamp_ms < 2**48.
            randomness: 10 bytes, or an int 0 <= randomness < 2**80.

        Example:
            >>> ULID.from_parts(1712345678901, bytes([12, 240, 88, 3, 199, 45, 6, 231, 128, 17]))
            ULID('01HTQW311N1KR5G0Y75M3EF00H')
        """
        if not isinstance(timestamp_ms, int) or isinstance(timestamp_ms, bool):
            raise TypeError(f"timestamp_ms must be int, not {type(timestamp_ms).__name__}")
        check_ms(timestamp_ms)
        if isinstance(randomness, (bytes, bytearray, memoryview)):
            if len(randomness) != 10:
                raise InvalidULID(f"randomness is 10 bytes, got {len(randomness)}")
            randomness = int.from_bytes(randomness, "big")
        elif not isinstance(randomness, int) or isinstance(randomness, bool):
            raise TypeError(f"randomness must be bytes or int, not {type(randomness).__name__}")
        elif not 0 <= randomness <= _RANDOM_MASK:
            raise InvalidULID(f"randomness is 0 .. 2**80 - 1, got {randomness}")
        return _of(cls, (timestamp_ms << _RANDOM_BITS) | randomness)

    @classmethod
    def min_at(cls, when: datetime | int) -> Self:
        """Return the smallest ULID of a millisecond: all-zero randomness.

        ``column >= ULID.min_at(t)`` selects rows created at or after ``t``.

        Args:
            when: a timezone-aware datetime, or Unix milliseconds. A naive
                datetime raises :class:`ValueError`.

        Example:
            >>> from datetime import datetime, timezone
            >>> ULID.min_at(datetime(2024, 4, 5, 19, 34, 38, 901000, tzinfo=timezone.utc))
            ULID('01HTQW311N0000000000000000')
        """
        return _of(cls, to_ms(when) << _RANDOM_BITS)

    @classmethod
    def max_at(cls, when: datetime | int) -> Self:
        """Return the largest ULID of a millisecond: all-one randomness.

        Example:
            >>> ULID.max_at(1712345678901)
            ULID('01HTQW311NZZZZZZZZZZZZZZZZ')
        """
        return _of(cls, (to_ms(when) << _RANDOM_BITS) | _RANDOM_MASK)

    # -- views ------------------------------------------------------------------

    @property
    def bytes(self) -> builtins.bytes:
        """The 16 big-endian bytes."""
        return self._int.to_bytes(16, "big")

    @property
    def int(self) -> builtins.int:
        """The 128-bit unsigned integer."""
        return self._int

    @property
    def hex(self) -> str:
        """The 32 lowercase hexadecimal digits."""
        return f"{self._int:032x}"

    @property
    def timestamp_ms(self) -> builtins.int:
        """The Unix timestamp in milliseconds (the first 48 bits)."""
        return self._int >> _RANDOM_BITS

    @property
    def datetime(self) -> datetime:
        """The timestamp as an aware UTC :class:`~datetime.datetime`."""
        return datetime_from_ms(self.timestamp_ms)

    @property
    def randomness(self) -> builtins.bytes:
        """The 10 bytes (80 bits) after the timestamp."""
        return (self._int & _RANDOM_MASK).to_bytes(10, "big")

    def to_uuid(self) -> uuid.UUID:
        """Return a :class:`uuid.UUID` with the same 128 bits.

        The result is a valid container for the bits, not an RFC 9562 UUID:
        its version and variant fields hold whatever the ULID's bits are.
        """
        return uuid.UUID(int=self._int)

    # -- protocols --------------------------------------------------------------

    def __str__(self) -> str:
        return encode_int(self._int)

    def __repr__(self) -> str:
        return f"ULID({encode_int(self._int)!r})"

    def __bytes__(self) -> builtins.bytes:
        return self._int.to_bytes(16, "big")

    def __int__(self) -> builtins.int:
        return self._int

    def __hash__(self) -> builtins.int:
        return hash(self._int)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ULID):
            return self._int == other._int
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        if isinstance(other, ULID):
            return self._int != other._int
        return NotImplemented

    def __lt__(self, other: ULID) -> bool:
        if isinstance(other, ULID):
            return self._int < other._int
        return NotImplemented

    def __le__(self, other: ULID) -> bool:
        if isinstance(other, ULID):
            return self._int <= other._int
        return NotImplemented

    def __gt__(self, other: ULID) -> bool:
        if isinstance(other, ULID):
            return self._int > other._int
        return NotImplemented

    def __ge__(self, other: ULID) -> bool:
        if isinstance(other, ULID):
            return self._int >= other._int
        return NotImplemented

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("ULID objects are immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("ULID objects are immutable")

    def __reduce__(self) -> tuple[type[ULID], tuple[str]]:
        # Through the public, validating constructor: a pickle names
        # ULID (or the subclass) and the canonical text, nothing private, and
        # a tampered one raises InvalidULID instead of building a bad id.
        return (type(self), (encode_int(self._int),))

    def __copy__(self) -> ULID:
        return self

    def __deepcopy__(self, memo: object) -> ULID:
        return self

    # -- pydantic v2 ------------------------------------------------------------

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source_type: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        from ._pydantic import core_schema

        return core_schema()

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        from ._pydantic import json_schema

        return json_schema()


# Writing the slot through its descriptor skips our __setattr__ guard; it is
# the only way values get into a ULID.
_set_int = ULID._int.__set__  # type: ignore[attr-defined,misc]
_new = object.__new__


def _of(cls: type[_U], value: int) -> _U:
    """Build an instance of ``cls`` from an int already known to be in range."""
    obj: _U = _new(cls)
    _set_int(obj, value)
    return obj


def _from_int(value: int) -> ULID:
    """Build a ULID from an int already known to be 0 <= value < 2**128."""
    obj: ULID = _new(ULID)
    _set_int(obj, value)
    return obj


def _from_bytes(data: bytes) -> ULID:
    """Build a ULID from 16 bytes already known to be valid (no checks)."""
    obj: ULID = _new(ULID)
    _set_int(obj, int.from_bytes(data, "big"))
    return obj
