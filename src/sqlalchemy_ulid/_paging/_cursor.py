"""Cursors: what ``after=`` and ``before=`` accept, and the multi-key cursor format.

A page sorted by the id alone takes and gives bare ids. A page sorted by
several keys gives opaque, URL-safe cursors::

    base64url( version | fingerprint (6 bytes) | check (4 bytes) | JSON )

The JSON is the list of the row's key values, each typed exactly
(``["f", float.hex()]``, ``["t", isoformat]`` with its offset, ``["d",
str(Decimal)]``...), so no value is rounded or loses its time zone. The
fingerprint is a hash of the sort (the key expressions, their directions and
NULL placements): a cursor made under one sort is refused under another. The
check is a hash of the rest, so a truncated or edited cursor is refused
too. Every refusal is :class:`InvalidCursor`, raised before any SQL.

A cursor is not secret and not signed: anyone can write one for any position,
as with a bare id. Seal cursors with :class:`~sqlalchemy_ulid.CursorSealer`
to make them tamper-proof.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import json
import re
import uuid
from collections.abc import Sequence
from datetime import date, datetime, time
from decimal import Decimal, InvalidOperation
from typing import Any, Union

from .._codec import InvalidCursor, InvalidULID
from .._errors import CursorSortMismatch
from .._kinds import UUID_TEXT as _UUID_TEXT
from .._typeid import TypeID
from .._ulid import ULID

__all__ = [
    "MAX_TEXT",
    "Cursor",
    "InvalidCursor",
    "decode",
    "encode",
    "fingerprint",
    "looks_keyset",
]

#: A cursor: a ULID, a uuid.UUID, or the column's text form of either, or
#: the opaque text of a multi-key cursor.
# (Union, not "|": these aliases are evaluated at run time on Python 3.10.)
Cursor = Union[ULID, uuid.UUID, str]  # noqa: UP007

VERSION = 1
_FINGERPRINT = 6
_CHECK = 4
#: The longest cursor text accepted, in characters: room for a long text key
#: (a cursor carries its keys' values whole), and a bound against abuse.
MAX_TEXT = 65536
_TEXT = re.compile(r"[A-Za-z0-9_-]+")


def looks_keyset(text: str) -> bool:
    """Whether ``text`` has the form of a multi-key cursor (not whether it is valid)."""
    if len(text) > MAX_TEXT or not _TEXT.fullmatch(text):
        return False
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return False
    return len(raw) > 1 + _FINGERPRINT + _CHECK and raw[0] == VERSION


def fingerprint(parts: Sequence[str]) -> bytes:
    """Hash the description of a sort into the cursor's fingerprint."""
    return hashlib.sha256("\0".join(parts).encode()).digest()[:_FINGERPRINT]


def _typed(value: Any) -> list[Any]:
    # bool before int, datetime before date: subclasses first.
    if value is None:
        return ["n", None]
    if isinstance(value, bool):
        return ["b", value]
    if isinstance(value, enum.Enum):
        return ["e", value.name]
    if isinstance(value, int):
        return ["i", str(value)]
    if isinstance(value, float):
        return ["f", value.hex()]
    if isinstance(value, Decimal):
        return ["d", str(value)]
    if isinstance(value, str):
        return ["s", value]
    if isinstance(value, ULID):
        return ["U", str(value)]
    if isinstance(value, TypeID):
        # Its 128 bits as a ULID: the prefix belongs to the key's column,
        # which gives it back when the cursor's value is bound.
        return ["U", str(value.to_ulid())]
    if isinstance(value, uuid.UUID):
        return ["u", str(value)]
    if isinstance(value, bytes):
        return ["y", base64.urlsafe_b64encode(value).decode()]
    if isinstance(value, datetime):
        return ["t", value.isoformat()]
    if isinstance(value, date):
        return ["D", value.isoformat()]
    if isinstance(value, time):
        return ["h", value.isoformat()]
    raise TypeError(f"a sort key value of type {type(value).__name__} cannot go in a cursor")


_DECODERS: dict[str, Any] = {
    "b": lambda v: v if isinstance(v, bool) else _bad(),
    "e": lambda v: v if isinstance(v, str) else _bad(),
    "i": lambda v: int(v) if isinstance(v, str) and re.fullmatch(r"-?[0-9]{1,400}", v) else _bad(),
    "f": lambda v: float.fromhex(v) if isinstance(v, str) else _bad(),
    "d": lambda v: Decimal(v) if isinstance(v, str) else _bad(),
    "s": lambda v: v if isinstance(v, str) else _bad(),
    "U": lambda v: ULID(v) if isinstance(v, str) else _bad(),
    "u": lambda v: uuid.UUID(v) if isinstance(v, str) else _bad(),
    "y": lambda v: base64.urlsafe_b64decode(v.encode()) if isinstance(v, str) else _bad(),
    "t": lambda v: datetime.fromisoformat(v) if isinstance(v, str) else _bad(),
    "D": lambda v: date.fromisoformat(v) if isinstance(v, str) else _bad(),
    "h": lambda v: time.fromisoformat(v) if isinstance(v, str) else _bad(),
}


def _is_id_text(text: object) -> bool:
    """Whether ``text`` is an id's text (26 or 36 characters, or a typed id).

    Never a multi-key cursor.
    """
    if isinstance(text, str) and "_" in text:
        # A typed id (user_01h...): a multi-key cursor is base64url, whose
        # alphabet has "_" too, but never parses as one.
        try:
            TypeID.parse(text)
        except InvalidULID:
            return False
        return True
    if not isinstance(text, str) or len(text) not in (26, 36):
        return False
    if _UUID_TEXT.fullmatch(text):
        return True
    try:
        ULID(text)
    except InvalidULID:
        return False
    return True


def _bad() -> Any:
    raise ValueError("malformed value")


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _check(head: bytes, body: bytes) -> bytes:
    return hashlib.sha256(head + body).digest()[:_CHECK]


def encode(sort: bytes, values: Sequence[Any]) -> str:
    """Write the key values of one row as a cursor of the sort ``sort``.

    Example:
        >>> from decimal import Decimal
        >>> sort = fingerprint(["orders.total DESC", "orders.id DESC"])
        >>> text = encode(sort, [Decimal("9.90"), 0.1, None])
        >>> decode(text, sort, 3)
        [Decimal('9.90'), 0.1, None]
    """
    body = json.dumps([_typed(v) for v in values], separators=(",", ":")).encode()
    head = bytes([VERSION]) + sort
    return _b64(head + _check(head, body) + body)


def decode(text: object, sort: bytes, count: int) -> list[Any]:
    """Read the ``count`` key values of a cursor made under the sort ``sort``.

    Raises:
        InvalidCursor: the text is not such a cursor (before any SQL).
        TypeError: the cursor is not text.

    Example:
        >>> try:
        ...     decode("AAAA", fingerprint(["x"]), 1)
        ... except InvalidCursor as exc:
        ...     print(exc)
        the cursor is malformed (truncated or altered)
    """
    if isinstance(text, (ULID, uuid.UUID, TypeID)) or _is_id_text(text):
        raise CursorSortMismatch(
            "a bare id is a cursor of the id order; this statement is sorted by several "
            "keys: pass the next_cursor or prev_cursor of one of its pages"
        )
    if not isinstance(text, str):
        raise TypeError(f"a cursor is text, not {type(text).__name__}")
    malformed = InvalidCursor("the cursor is malformed (truncated or altered)")
    if not text or len(text) > MAX_TEXT or not _TEXT.fullmatch(text):
        raise malformed
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise malformed from None
    head_size = 1 + _FINGERPRINT
    if len(raw) <= head_size + _CHECK or _b64(raw) != text:
        raise malformed
    if raw[0] != VERSION:
        raise InvalidCursor(f"the cursor is of format version {raw[0]}, not {VERSION}")
    head, check, body = raw[:head_size], raw[head_size:][:_CHECK], raw[head_size + _CHECK :]
    if _check(head, body) != check:
        raise malformed
    if head[1:] != sort:
        raise CursorSortMismatch(
            "the cursor was made for another sort (another ORDER BY or paging column)"
        )
    try:
        typed = json.loads(body)
        if not isinstance(typed, list) or len(typed) != count:
            raise ValueError("wrong number of keys")
        values = []
        for item in typed:
            if not isinstance(item, list) or len(item) != 2 or item[0] not in (*_DECODERS, "n"):
                raise ValueError("malformed key")
            if item[0] == "n" and item[1] is not None:
                raise ValueError("malformed NULL")
            values.append(None if item[0] == "n" else _DECODERS[item[0]](item[1]))
    except (ValueError, TypeError, InvalidOperation, InvalidULID, binascii.Error):
        raise malformed from None
    return values
