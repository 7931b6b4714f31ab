"""Litestar support: ``type_encoders`` and ``type_decoders`` for ULIDs.

Pass both to the app (or a router, controller or route handler)::

    from litestar import Litestar
    from sqlalchemy_ulid.contrib.litestar import TYPE_DECODERS, TYPE_ENCODERS

    app = Litestar(route_handlers=[...], type_encoders=TYPE_ENCODERS,
                   type_decoders=TYPE_DECODERS)

Responses then carry ULIDs as their 26-character text, and request bodies,
query and path parameters typed :class:`~sqlalchemy_ulid.ULID` are parsed
strictly (a malformed id is a 400 naming the parameter).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._ulid import ULID

__all__ = ["TYPE_DECODERS", "TYPE_ENCODERS", "decode", "is_ulid_type"]


def is_ulid_type(target_type: Any) -> bool:
    """Return True for :class:`~sqlalchemy_ulid.ULID` (Litestar's decoder predicate)."""
    return target_type is ULID


def decode(target_type: Any, value: Any) -> ULID:
    """Parse a ULID from its text (Litestar's decoder).

    Raises:
        InvalidULID: the text is not a ULID.
        TypeError: the value is neither a ULID nor text.
    """
    if isinstance(value, ULID):
        return value
    if isinstance(value, str):
        return ULID(value)
    raise TypeError(f"a ULID is given as its 26-character text, not {type(value).__name__}")


#: ``type_encoders=``: a ULID serializes as its canonical text.
TYPE_ENCODERS: dict[Any, Callable[[Any], Any]] = {ULID: str}
#: ``type_decoders=``: fields and parameters typed ULID parse strictly.
TYPE_DECODERS: list[tuple[Callable[[Any], bool], Callable[[Any, Any], Any]]] = [
    (is_ulid_type, decode)
]
