"""Opaque cursors: seal a page's cursors so clients see neither ids nor times.

A sealed cursor is ``base64url(version | tag | ciphertext)``: the payload
(direction, ``descending`` and the 16 id bytes) is encrypted with a keystream
drawn from HMAC-SHA256 and authenticated by an HMAC-SHA256 tag over it (a
synthetic-IV construction: the tag is the nonce, so sealing is deterministic
and needs no randomness per cursor). Only the standard library is used.

Version 1 tokens carry a bare id (46 characters). Version 2 tokens carry the
cursor of a sort by several keys, or any cursor of a sealer with ``max_age``:
their payload is ``flags | issued (8 bytes, Unix seconds) | cursor``, the
cursor being the 16 id bytes or the multi-key cursor's text, enciphered with
a keystream as long as the payload (HMAC-SHA256 in counter mode).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypedDict

from ._codec import InvalidCursor
from ._errors import CursorSortMismatch
from ._kinds import UUID_TEXT
from ._typeid import TypeID
from ._ulid import ULID, _from_bytes

if TYPE_CHECKING:
    from typing_extensions import NotRequired

__all__ = ["CursorSealer", "PageKwargs"]

_VERSION = 1
_VERSION_2 = 2
_ISSUED = 8  # bytes of the issue time (Unix seconds) in a version 2 payload
_KEYSET = 4  # flag bit: the payload carries a multi-key cursor's text
_TOKEN_2_TEXT = re.compile(r"[A-Za-z0-9_-]{40,6000}")
_TAG = 16  # bytes of the HMAC-SHA256 tag kept: 128 bits
_BEFORE = 1  # flag bits of the payload's first byte
_DESCENDING = 2
_PAYLOAD = 17  # flags + 16 id bytes
_TOKEN = 1 + _TAG + _PAYLOAD
_MIN_KEY = 16
_TOKEN_TEXT = re.compile(r"[A-Za-z0-9_-]{46}")  # 34 bytes in unpadded base64url
_KEYSET_TEXT = re.compile(r"[A-Za-z0-9_-]{40,4096}")  # a multi-key cursor (not an id)


class PageKwargs(TypedDict):
    """What :meth:`CursorSealer.open` returns: keyword arguments for paginate."""

    after: NotRequired[ULID | str]
    before: NotRequired[ULID | str]
    descending: NotRequired[bool]


class _Key:
    __slots__ = ("enc", "mac")

    def __init__(self, key: bytes, context: bytes) -> None:
        if not isinstance(key, bytes) or len(key) < _MIN_KEY:
            raise ValueError(f"a cursor key is at least {_MIN_KEY} random bytes")
        # Two independent subkeys, each bound to the context.
        self.mac = hmac.new(key, b"sqlalchemy-ulid/cursor/mac\0" + context, hashlib.sha256).digest()
        self.enc = hmac.new(key, b"sqlalchemy-ulid/cursor/enc\0" + context, hashlib.sha256).digest()

    def tag(self, payload: bytes, version: int = _VERSION) -> bytes:
        return hmac.new(self.mac, bytes([version]) + payload, hashlib.sha256).digest()[:_TAG]

    def xor(self, tag: bytes, data: bytes) -> bytes:
        stream = hmac.new(self.enc, tag, hashlib.sha256).digest()
        if len(data) > len(stream):  # version 2: counter mode for long payloads
            blocks = (len(data) + 31) // 32
            stream = b"".join(
                hmac.new(self.enc, tag + n.to_bytes(4, "big"), hashlib.sha256).digest()
                for n in range(blocks)
            )
        return bytes(a ^ b for a, b in zip(data, stream, strict=False))


class CursorSealer:
    """Seal :class:`Page` cursors into opaque tokens, and open them again.

    A sealed token hides the id (and so its creation time), and says which
    way to page (``after`` or ``before``) and in which order
    (``descending``); a token that was changed, truncated, made with another
    key or for another ``context``, or is older than ``max_age``, raises
    :class:`InvalidCursor` (an :class:`InvalidULID`), before any SQL runs.
    Tokens of bare ids are URL-safe text of 46 characters, and sealing them
    is deterministic: the same cursor always gives the same token. The
    cursors of a sort by several keys are sealed too (longer tokens), and
    so is every cursor of a sealer with ``max_age``, which also records
    when the token was made.

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
        max_age: refuse tokens older than this (a ``timedelta`` or seconds);
            None keeps them valid for as long as the key is.
        clock: the time in Unix seconds (a parameter for tests).

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
        sqlalchemy_ulid.InvalidCursor: the cursor is not valid (tampered with, ...
    """

    def __init__(
        self,
        keys: bytes | Iterable[bytes],
        *,
        context: str = "",
        max_age: timedelta | float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        key_list = [keys] if isinstance(keys, bytes) else list(keys)
        if not key_list:
            raise ValueError("CursorSealer needs at least one key")
        if isinstance(max_age, timedelta):
            max_age = max_age.total_seconds()
        if max_age is not None and (
            isinstance(max_age, bool) or not isinstance(max_age, (int, float)) or max_age <= 0
        ):
            raise ValueError(f"max_age must be a timedelta or seconds > 0, got {max_age!r}")
        raw_context = context.encode()
        self._keys = [_Key(key, raw_context) for key in key_list]
        self.context = context
        self.max_age = max_age
        self.clock = clock

    def __repr__(self) -> str:
        # Never show key material.
        return (
            f"CursorSealer(<{len(self._keys)} key(s)>, context={self.context!r}, "
            f"max_age={self.max_age!r})"
        )

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
        :class:`ULID`, which ``paginate`` binds as that UUID again. A typed
        id (a :class:`TypeID` or its text) is sealed as its 16 bytes too,
        and the ``TypeIDType`` column adds its prefix back.

        The cursor of a sort by several keys (an opaque string from a
        :class:`Page`) is sealed whole; it opens as that string.

        Raises:
            InvalidULID: ``cursor`` is not a ULID, a UUID or a page cursor.
        """
        flags = (_BEFORE if before else 0) | (_DESCENDING if descending else 0)
        keyset = (
            isinstance(cursor, str)
            and _KEYSET_TEXT.fullmatch(cursor) is not None
            # A long typed id fits the pattern too; a multi-key cursor starts
            # with its version byte in base64 ("AQ"), never lowercase.
            and not _is_typed_id(cursor)
        )
        data = cursor.encode() if keyset else _as_ulid(cursor).bytes  # type: ignore[union-attr]
        key = self._keys[0]
        if not keyset and self.max_age is None:
            payload = bytes([flags]) + data
            tag = key.tag(payload)
            return _encode(bytes([_VERSION]) + tag + key.xor(tag, payload))
        issued = int(self.clock()).to_bytes(_ISSUED, "big")
        payload = bytes([flags | (_KEYSET if keyset else 0)]) + issued + data
        tag = key.tag(payload, _VERSION_2)
        return _encode(bytes([_VERSION_2]) + tag + key.xor(tag, payload))

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
            to pass as ``paginate(..., **kwargs)``. The cursor of a sort by
            several keys opens without ``descending``: its statement's
            ORDER BY gives the order.

        Raises:
            InvalidCursor: (an :class:`InvalidULID`) the token is malformed,
                was altered, was sealed with another key, another context or
                the other order, or is older than ``max_age``.
        """
        version, payload = self._unseal(token)
        flags = payload[0]
        if flags & ~(_BEFORE | _DESCENDING | (_KEYSET if version == _VERSION_2 else 0)):
            raise _invalid()
        token_descending = bool(flags & _DESCENDING)
        if descending is not None and descending != token_descending:
            raise CursorSortMismatch(
                "the cursor was issued for the "
                f"{'descending' if token_descending else 'ascending'} order"
            )
        data = payload[1:]
        if version == _VERSION_2:
            issued, data = int.from_bytes(data[:_ISSUED], "big"), data[_ISSUED:]
            if self.max_age is not None and self.clock() - issued > self.max_age:
                raise InvalidCursor("the cursor has expired: start again from the first page")
        elif self.max_age is not None:
            raise InvalidCursor("the cursor has no issue time, so it may have expired")
        cursor: ULID | str
        if flags & _KEYSET:
            cursor = data.decode("ascii", "replace")
            if _KEYSET_TEXT.fullmatch(cursor) is None:
                raise _invalid()
        elif len(data) == 16:
            cursor = _from_bytes(data)
        else:
            raise _invalid()
        kwargs: PageKwargs = {"before": cursor} if flags & _BEFORE else {"after": cursor}
        if not flags & _KEYSET:
            # A multi-key cursor's order is its statement's ORDER BY (and its
            # fingerprint): descending=False would refuse an ORDER BY ... DESC.
            kwargs["descending"] = token_descending
        return kwargs

    def _unseal(self, token: str) -> tuple[int, bytes]:
        # Strict alphabet and length first: b64decode would skip stray
        # characters, letting many strings stand for one token.
        if not isinstance(token, str) or (
            _TOKEN_TEXT.fullmatch(token) is None and _TOKEN_2_TEXT.fullmatch(token) is None
        ):
            raise _invalid()
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (binascii.Error, ValueError):
            raise _invalid() from None
        # The last character carries unused bits: only the canonical one.
        version = raw[0] if raw else 0
        if version not in (_VERSION, _VERSION_2) or _encode(raw) != token:
            raise _invalid()
        if (version == _VERSION) != (len(raw) == _TOKEN) or len(raw) < 2 + _TAG + _ISSUED:
            raise _invalid()
        tag, sealed = raw[1 : 1 + _TAG], raw[1 + _TAG :]
        for key in self._keys:
            payload = key.xor(tag, sealed)
            if hmac.compare_digest(key.tag(payload, version), tag):
                return version, payload
        raise _invalid()


def _encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _as_ulid(value: object) -> ULID:
    if isinstance(value, ULID):
        return value
    if isinstance(value, uuid.UUID):
        return ULID.from_uuid(value)
    if isinstance(value, TypeID):
        # The bits alone: the token is sealed, so the prefix cannot change,
        # and the column gives it back when the page is read.
        return value.to_ulid()
    if isinstance(value, str):
        if len(value) == 36 and UUID_TEXT.fullmatch(value):
            return ULID.from_uuid(uuid.UUID(value))
        if "_" in value:
            return TypeID.parse(value).to_ulid()  # strict: raises InvalidTypeID
        return ULID(value)  # strict: raises InvalidULID
    raise TypeError(f"a cursor is a ULID, a UUID or the text of either, not {type(value).__name__}")


def _is_typed_id(text: str) -> bool:
    try:
        TypeID.parse(text)
    except ValueError:
        return False
    return True


def _invalid() -> InvalidCursor:
    return InvalidCursor(
        "the cursor is not valid (tampered with, truncated, or sealed with another key)"
    )
