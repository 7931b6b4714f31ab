"""sqlakeyset support: ``register()`` teaches its bookmarks the ULID type.

sqlakeyset serializes the ordering values of a page's edge rows into a
bookmark string, and refuses types it does not know. A ULID column returns
:class:`~sqlalchemy_ulid.ULID` objects, so ``select_page`` on it needs this
one registration, done once at start-up (install with the ``sqlakeyset``
extra: ``pip install 'sqlalchemy-ulid[sqlakeyset]'``).

Example:
    >>> from sqlalchemy_ulid.contrib import sqlakeyset as ulid_sqlakeyset
    >>> ulid_sqlakeyset.register()
    >>> ulid_sqlakeyset.register()  # idempotent
    >>> from sqlakeyset import serialize_bookmark, unserialize_bookmark
    >>> from sqlalchemy_ulid import ULID
    >>> u = ULID("01HTQW311N1KR5G0Y75M3EF00H")
    >>> serialize_bookmark(((u,), False))
    '>ulid:01HTQW311N1KR5G0Y75M3EF00H'
    >>> unserialize_bookmark(">ulid:01HTQW311N1KR5G0Y75M3EF00H").place
    (ULID('01HTQW311N1KR5G0Y75M3EF00H'),)
"""

from __future__ import annotations

import threading

from . import _missing

try:
    from sqlakeyset import BadBookmark, ConfigurationError, custom_bookmark_type
except ModuleNotFoundError as exc:
    raise _missing("sqlakeyset", "sqlakeyset", exc) from exc

from .._ulid import ULID

__all__ = ["CODE", "register"]

#: The type code of a ULID in a bookmark: ``ulid:<26 characters>``.
CODE = "ulid"

_lock = threading.Lock()
_registered = False


def register() -> None:
    """Register :class:`~sqlalchemy_ulid.ULID` as a sqlakeyset bookmark type.

    A ULID is written as ``ulid:`` and its 26-character text; reading parses
    strictly, so a tampered bookmark raises sqlakeyset's ``BadBookmark``
    (a :class:`ValueError`) whose ``__cause__`` is our
    :class:`~sqlalchemy_ulid.InvalidULID`. Safe to call more than once.

    Raises:
        sqlakeyset.ConfigurationError: another type already uses the code
            ``ulid``, or ULID was registered under another code.
    """
    global _registered
    with _lock:
        if _registered:
            return
        try:
            custom_bookmark_type(ULID, CODE, deserializer=ULID, serializer=str)
        except ConfigurationError:
            if not _ours_is_registered():
                raise
        _registered = True


def _ours_is_registered() -> bool:
    # Someone (an earlier import of this module under another name, or the
    # app itself) registered ULID before us: accept it if it round-trips.
    from sqlakeyset import serialize_bookmark, unserialize_bookmark

    probe = ULID.from_int(0)
    try:
        text = serialize_bookmark(((probe,), False))
        return bool(text == f">{CODE}:{probe}" and unserialize_bookmark(text).place == (probe,))
    except (BadBookmark, NotImplementedError, ValueError):
        return False
