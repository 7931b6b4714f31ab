"""Opaque cursors: seal a page's cursors so clients see neither ids nor times.

A sealed cursor is ``base64url(version | tag | ciphertext)``: the payload
(direction, ``descending`` and the 16 id bytes) is encrypted with a keystream
drawn from HMAC-SHA256 and authenticated by an HMAC-SHA256 tag over it (a
synthetic-IV construction: the tag is the nonce, so sealing is deterministic
and needs no randomness per cursor). Only the standard library is used.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypedDict

from ._codec import InvalidULID
from ._keys import _UUID_TEXT
from ._ulid import ULID, _from_bytes

if TYPE_CHECKING:
    from typing_extensions import NotRequired

__all__ = ["CursorSealer", "PageKwargs"]

_VERSION = 1
_TAG = 16  # bytes of the HMAC-SHA256 tag kept: 128 bits
_BEFORE = 1  # flag bits of the payload's first byte
_DESCENDING = 2
_PAYLOAD = 17  # flags + 16 id bytes
_TOKEN = 1 + _TAG + _PAYLOAD
_MIN_KEY = 16
_TOKEN_TEXT = re.compile(r"[A-Za-z0-9_-]{46}")  # 34 bytes in unpadded base64url


class PageKwargs(TypedDict):
    """What :meth:`CursorSealer.open` returns: keyword arguments for paginate."""

    after: NotRequired[ULID]
    before: NotRequired[ULID]
    descending: bool


class _Key:
    __slots__ = ("enc", "mac")

    def __init__(self, key: bytes, context: bytes) -> None:
        if not isinstance(key, bytes) or len(key) < _MIN_KEY:
            raise ValueError(f"a cursor key is at least {_MIN_KEY} random bytes")
        # Two independent subkeys, each bound to the context.
        self.mac = hmac.new(key, b"sqlalchemy-ulid/cursor/mac\0" + context, hashlib.sha256).digest()
        self.enc = hmac.new(key, b"sqlalchemy-ulid/cursor/enc\0" + context, hashlib.sha256).digest()

    def tag(self, payload: bytes) -> bytes:
        return hmac.new(self.mac, bytes([_VERSION]) + payload, hashlib.sha256).digest()[:_TAG]

    def xor(self, tag: bytes, data: bytes) -> bytes:
        stream = hmac.new(self.enc, tag, hashlib.sha256).digest()
        return bytes(a ^ b for a, b in zip(data, stream, strict=False))


class CursorSealer:
    """Seal :class:`Page` cursors into opaque tokens, and open them again.

    A sealed token hides the id (and so its creation time), and says which
    way to page (``after`` or ``before``) and in which order
    (``descending``); a token that was changed, truncated, made with another
    key or for another ``context`` raises :class:`InvalidULID`, before any
    SQL runs. Tokens are URL-safe text of 46 characters. Sealing is
    deterministic: the same cursor always gives the same token.

    Key rotation: pass several keys, newest first. Tokens are sealed with
    the first and opened with any, so deploy ``[new, old]``, wait until the
    old tokens have aged out of clients (cursors are short-lived), then drop
    ``old``. A token sealed with a key that was dropped fails like a
    tampered one.

    Args:
        keys: one secret key (at least 16 random bytes; see
            :meth:`generate_key`) or several, newest first.
        context: binds tokens to a purpose, e.g. the endpoint, so a token
            from ``/orders`` cannot be replayed on ``/invoices``.

    Example:
        >>> from sqlalchemy_ulid import CursorSealer, Page
        >>> sealer = CursorSealer(b"0123456789abcdef0123456789abcdef", context="events")
        >>> page = Page(items=[], next_cursor="01HTQW311N1KR5G0Y75M3EF00H",
        ...             prev_cursor=None, has_more=True)
        >>> next_token, prev_token = sealer.seal(page)
        >>> len(next_token), prev_token
        (46, None)
        >>> sealer.open(next_token)
        {'after': ULID('01HTQW311N1KR5G0Y75M3EF00H'), 'descending': False}
        >>> sealer.open(next_token[:-2] + "AA")
        Traceback (most recent call last):
        ...
        sqlalchemy_ulid.InvalidULID: the cursor is not valid (tampered with, ...
    """

    def __init__(self, keys: bytes | Iterable[bytes], *, context: str = "") -> None:
        key_list = [keys] if isinstance(keys, bytes) else list(keys)
        if not key_list:
            raise ValueError("CursorSealer needs at least one key")
        raw_context = context.encode()
        self._keys = [_Key(key, raw_context) for key in key_list]
        self.context = context

    def __repr__(self) -> str:
        # Never show key material.
        return f"CursorSealer(<{len(self._keys)} key(s)>, context={self.context!r})"

    @staticmethod
    def generate_key() -> bytes:
        """Return a new random 32-byte key (from :mod:`secrets`).

        Example:
            >>> len(CursorSealer.generate_key())
            32
        """
        return secrets.token_bytes(32)

    def seal_cursor(
        self, cursor: ULID | uuid.UUID | str, *, before: bool = False, descending: bool = False
    ) -> str:
        """Return the token of one cursor and the way to page from it.

        A UUIDv7 column's cursor (a :class:`uuid.UUID` or its 36-character
        text) is sealed as the same 16 bytes; it opens as the equal
        :class:`ULID`, which ``paginate`` binds as that UUID again.

        Raises:
            InvalidULID: ``cursor`` is not a ULID or a UUID.
        """
        flags = (_BEFORE if before else 0) | (_DESCENDING if descending else 0)
        ulid = _as_ulid(cursor)
        payload = bytes([flags]) + ulid.bytes
        key = self._keys[0]
        tag = key.tag(payload)
        token = bytes([_VERSION]) + tag + key.xor(tag, payload)
        return _encode(token)

    def seal(self, page: Any, *, descending: bool = False) -> tuple[str | None, str | None]:
        """Seal a page's ``next_cursor`` and ``prev_cursor``.

        Args:
            page: a :class:`Page` (anything with ``next_cursor`` and
                ``prev_cursor``).
            descending: the order the page was fetched in.

        Returns:
            ``(next_token, prev_token)``; each None where the page has no
            cursor that way.
        """
        next_cursor, prev_cursor = page.next_cursor, page.prev_cursor
        return (
            None if next_cursor is None else self.seal_cursor(next_cursor, descending=descending),
            None
            if prev_cursor is None
            else self.seal_cursor(prev_cursor, before=True, descending=descending),
        )

    def open(self, token: str, *, descending: bool | None = None) -> PageKwargs:
        """Return the paginate keyword arguments a token stands for.

        Args:
            token: a token from :meth:`seal` or :meth:`seal_cursor`.
            descending: when given, the order the caller pages in; a token
                sealed for the other order is refused.

        Returns:
            ``{"after": ULID, "descending": bool}`` or ``{"before": ...}``,
            to pass as ``paginate(..., **kwargs)``.

        Raises:
            InvalidULID: the token is malformed, was altered, or was sealed
                with another key, another context or the other order.
        """
        payload = self._unseal(token)
        flags = payload[0]
        if flags & ~(_BEFORE | _DESCENDING):
            raise _invalid()
        token_descending = bool(flags & _DESCENDING)
        if descending is not None and descending != token_descending:
            raise InvalidULID(
                "the cursor was issued for the "
                f"{'descending' if token_descending else 'ascending'} order"
            )
        ulid = _from_bytes(payload[1:])
        if flags & _BEFORE:
            return {"before": ulid, "descending": token_descending}
        return {"after": ulid, "descending": token_descending}

    def _unseal(self, token: str) -> bytes:
        # Strict alphabet and length first: b64decode would skip stray
        # characters, letting many strings stand for one token.
        if not isinstance(token, str) or _TOKEN_TEXT.fullmatch(token) is None:
            raise _invalid()
        try:
            raw = base64.urlsafe_b64decode(token + "==")
        except (binascii.Error, ValueError):
            raise _invalid() from None
        # The last character carries 4 unused bits: only the canonical one.
        if raw[0] != _VERSION or _encode(raw) != token:
            raise _invalid()
        tag, sealed = raw[1 : 1 + _TAG], raw[1 + _TAG :]
        for key in self._keys:
            payload = key.xor(tag, sealed)
            if hmac.compare_digest(key.tag(payload), tag):
                return payload
        raise _invalid()


def _encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _as_ulid(value: object) -> ULID:
    if isinstance(value, ULID):
        return value
    if isinstance(value, uuid.UUID):
        return ULID.from_uuid(value)
    if isinstance(value, str):
        if len(value) == 36 and _UUID_TEXT.fullmatch(value):
            return ULID.from_uuid(uuid.UUID(value))
        return ULID(value)  # strict: raises InvalidULID
    raise TypeError(f"a cursor is a ULID, a UUID or the text of either, not {type(value).__name__}")


def _invalid() -> InvalidULID:
    return InvalidULID(
        "the cursor is not valid (tampered with, truncated, or sealed with another key)"
    )
