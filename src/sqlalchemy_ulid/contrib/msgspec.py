"""msgspec support: ``enc_hook`` writes ULIDs as text, ``dec_hook`` parses them.

Example:
    >>> import msgspec
    >>> from sqlalchemy_ulid import ULID
    >>> from sqlalchemy_ulid.contrib.msgspec import dec_hook, enc_hook
    >>> class Event(msgspec.Struct):
    ...     id: ULID
    >>> data = msgspec.json.encode(Event(ULID("01HTQW311N1KR5G0Y75M3EF00H")), enc_hook=enc_hook)
    >>> data
    b'{"id":"01HTQW311N1KR5G0Y75M3EF00H"}'
    >>> msgspec.json.decode(data, type=Event, dec_hook=dec_hook)
    Event(id=ULID('01HTQW311N1KR5G0Y75M3EF00H'))
"""

from __future__ import annotations

from typing import Any

from .._ulid import ULID

__all__ = ["dec_hook", "enc_hook"]


def enc_hook(obj: Any) -> Any:
    """Return a ULID's 26-character text; raise NotImplementedError otherwise.

    Raises:
        NotImplementedError: ``obj`` is not a ULID (msgspec's convention for
            "not mine": it then reports the unsupported type).
    """
    if isinstance(obj, ULID):
        return str(obj)
    raise NotImplementedError(f"objects of type {type(obj).__name__} are not supported")


def dec_hook(type_: type, obj: Any) -> Any:
    """Parse a field typed :class:`~sqlalchemy_ulid.ULID` from its text, strictly.

    A malformed id raises :class:`~sqlalchemy_ulid.InvalidULID` (a
    ValueError), which msgspec reports as a ``ValidationError`` naming the
    field.

    Raises:
        NotImplementedError: ``type_`` is not ULID.
    """
    if type_ is ULID:
        if isinstance(obj, ULID):
            return obj
        if isinstance(obj, str):
            return ULID(obj)
        raise TypeError(f"a ULID is given as its 26-character text, not {type(obj).__name__}")
    raise NotImplementedError(f"objects of type {type_!r} are not supported")
