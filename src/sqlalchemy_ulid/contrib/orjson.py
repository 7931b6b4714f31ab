"""orjson support: ``orjson.dumps(data, default=default)`` writes ULIDs as text.

orjson calls ``default`` only for types it does not know, so the hook costs
nothing for the rest of the document. (``json.dumps(data, default=str)``
does the same with the standard library.)

Example:
    >>> import orjson
    >>> from sqlalchemy_ulid import ULID
    >>> from sqlalchemy_ulid.contrib.orjson import default
    >>> orjson.dumps({"id": ULID("01HTQW311N1KR5G0Y75M3EF00H")}, default=default)
    b'{"id":"01HTQW311N1KR5G0Y75M3EF00H"}'
"""

from __future__ import annotations

from typing import Any

from .._ulid import ULID

__all__ = ["default"]


def default(obj: Any) -> Any:
    """Return a ULID's 26-character text; raise TypeError for anything else.

    Raises:
        TypeError: ``obj`` is not a :class:`~sqlalchemy_ulid.ULID` (orjson
            then reports the type it could not serialize).
    """
    if isinstance(obj, ULID):
        return str(obj)
    raise TypeError(f"Type is not JSON serializable: {type(obj).__name__}")
