"""typeid-python's ``TypeID`` objects, both ways.

Our :class:`~sqlalchemy_ulid.TypeID` and typeid-python's are the same id in
two classes: the same prefix and the same 26-character suffix. Where a
``TypeID`` is accepted (``TypeID(value)``, Pydantic fields typed ``TypeID``
or ``TypeID["user"]``), typeid-python's objects are accepted as they are,
with no import of this module; this module converts explicitly, and makes
typeid-python objects from our generator. Install with
``pip install 'sqlalchemy-ulid[typeid-python]'``.

typeid-python accepts digits in a prefix (``user2``), which the
specification does not: such an id raises :class:`~sqlalchemy_ulid.InvalidTypeID`
here, as its text would.

Example:
    >>> import typeid
    >>> from sqlalchemy_ulid import TypeID
    >>> from sqlalchemy_ulid.contrib.typeid_python import from_typeid_python, to_typeid_python
    >>> theirs = typeid.TypeID.from_string("user_01h455vb4pex5vsknk084sn02q")
    >>> ours = from_typeid_python(theirs)
    >>> ours
    TypeID('user_01h455vb4pex5vsknk084sn02q')
    >>> TypeID(theirs) == ours
    True
    >>> to_typeid_python(ours) == theirs
    True
"""

from __future__ import annotations

from typing import Any

from . import _missing

try:
    from typeid import TypeID as TheirTypeID
except ModuleNotFoundError as exc:
    raise _missing("typeid_python", "typeid-python", exc) from exc

from .._typeid import TypeID, coerce, new_typeid

__all__ = ["from_typeid_python", "new_typeid_python", "to_typeid_python"]


def from_typeid_python(value: Any) -> TypeID:
    """Return our :class:`~sqlalchemy_ulid.TypeID` of a typeid-python ``TypeID``.

    Also takes our ``TypeID`` (returned as it is) and the text of one.

    Raises:
        InvalidTypeID: the id breaks the specification (a digit in the prefix).
        TypeError: the value is no typed id.

    Example:
        >>> import typeid
        >>> from_typeid_python(typeid.TypeID(prefix="user")).prefix
        'user'
    """
    return coerce(value)


def to_typeid_python(value: Any) -> TheirTypeID[Any]:
    """Return typeid-python's ``TypeID`` of our ``TypeID`` (or of its text).

    A typeid-python ``TypeID`` is returned as it is.

    Example:
        >>> import typeid
        >>> from sqlalchemy_ulid import new_typeid
        >>> isinstance(to_typeid_python(new_typeid("user")), typeid.TypeID)
        True
    """
    if isinstance(value, TheirTypeID):
        return value
    ours = coerce(value)
    # Through typeid-python's own constructor, so its object is what its
    # parser would have made (its UUID class, its caches).
    return TheirTypeID(prefix=ours.prefix or None, suffix=ours.suffix)


def new_typeid_python(prefix: str = "") -> TheirTypeID[Any]:
    """Return a new typeid-python ``TypeID`` whose suffix comes from our generator.

    The UUIDv7 is :func:`~sqlalchemy_ulid.new_typeid`'s: monotonic across
    threads, fork-safe and ordered across clock steps back. Only the
    wrapper is typeid-python's.

    Example:
        >>> a, b = new_typeid_python("user"), new_typeid_python("user")
        >>> a.prefix, str(a) < str(b)
        ('user', True)
    """
    return to_typeid_python(new_typeid(prefix))
