"""ORM support: mapped ULID attributes always hold one canonical value.

The ORM builds a row's identity key from the Python value of its primary-key
attribute. If ``obj.id = "01htqw..."`` stayed a str, the session would file the
object under the str, and ``session.get(Model, ULID(...))`` (or any query that
loads the row) would file a second object for the same row under the ULID. So
every attribute mapped to a :class:`ULIDType` column converts what it is
given, at assignment, to the value the column returns on load: a
:class:`ULID` (or the canonical str for ``as_str=True``). Bad values raise
there, long before a flush.

How the conversion gets attached, without an import-time hook: the first time
a ``ULIDType`` is attached to a ``Column`` (SQLAlchemy's public
``after_parent_attach`` event, see ``_types.py``), :func:`enable` registers one
``mapper_configured`` listener on :class:`~sqlalchemy.orm.Mapper`. That
listener looks only at the mapper being configured and adds an attribute
``set`` listener to its ULID columns. Programs that never use ``ULIDType``
never get the listener.
"""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Mapper

from ._codec import encode
from ._comparator import to_bytes
from ._types import ULIDType
from ._ulid import ULID, _from_bytes

__all__ = ["enable"]

_enabled = False
_lock = threading.Lock()


def _to_ulid(target: object, value: Any, oldvalue: object, initiator: object) -> Any:
    if value is None or type(value) is ULID:
        return value
    return _from_bytes(to_bytes(value))


def _to_str(target: object, value: Any, oldvalue: object, initiator: object) -> Any:
    if value is None:
        return value
    return encode(to_bytes(value))


def _on_mapper_configured(mapper: Mapper[Any], class_: type) -> None:
    for prop in mapper.column_attrs:
        column_type = prop.columns[0].type
        if not isinstance(column_type, ULIDType):
            continue
        attribute = getattr(class_, prop.key)
        # A subclass that returns another value type (contrib.python_ulid)
        # names its own converter, so one listener per attribute decides.
        coerce = getattr(column_type, "_orm_set_listener", None) or (
            _to_str if column_type.as_str else _to_ulid
        )
        # Each mapper in an inheritance tree is configured on its own, so
        # listen per class (no propagate) and only once per attribute.
        if not event.contains(attribute, "set", coerce):
            event.listen(attribute, "set", coerce, retval=True)


def enable() -> None:
    """Convert values assigned to ULID attributes of every mapped class.

    Called by :class:`ULIDType` when it is attached to a column; idempotent.
    """
    global _enabled
    with _lock:
        if not _enabled:
            event.listen(Mapper, "mapper_configured", _on_mapper_configured)
            _enabled = True
