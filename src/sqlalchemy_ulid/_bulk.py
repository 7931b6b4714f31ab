"""Bulk ``INSERT ... RETURNING`` in parameter order with ids in any accepted form.

``insert().returning(..., sort_by_parameter_order=True)`` with many
parameter sets matches the rows the database returns to the parameter sets
by the primary key (SQLAlchemy's "insertmanyvalues" sentinel). Since
SQLAlchemy 2.0.29 it compares the value *as given* with the value *as
returned* by the column type, and the ``TypeEngine`` hook that once adapted
the two is gone (SQLAlchemy issue 11160: "the same Python datatype should
be passed as that returned"). ``ULIDType`` returns :class:`ULID` objects but
accepts text, ``uuid.UUID`` and bytes too; without help a str id could never
be matched.

So, once a ``ULIDType`` has been attached to a column, one ``before_execute``
listener on :class:`~sqlalchemy.engine.Engine` converts the ULID columns of
the parameter sets of exactly these statements (an ``Insert`` with
``sort_by_parameter_order`` and more than one parameter set) to the value
the column returns. Every other statement passes through after one
``isinstance`` test. A malformed id raises :class:`InvalidULID` there,
before any SQL is sent.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.dml import Insert

from ._comparator import operand
from ._types import ULIDType

__all__ = ["enable"]

_enabled = False
_lock = threading.Lock()


def _convert(
    conn: Connection,
    clauseelement: Any,
    multiparams: Sequence[Mapping[str, Any]],
    params: Mapping[str, Any],
    execution_options: Mapping[str, Any],
) -> tuple[Any, Sequence[Mapping[str, Any]], Mapping[str, Any]]:
    if (
        len(multiparams) < 2
        or not isinstance(clauseelement, Insert)
        # Private, set by returning(sort_by_parameter_order=True); there is
        # no public accessor. tests/test_private_api.py pins it.
        or not getattr(clauseelement, "_sort_by_parameter_order", False)
    ):
        return clauseelement, multiparams, params
    table = clauseelement.table
    columns = [
        (column.key, column.type)
        for column in getattr(table, "c", ())
        if isinstance(column.type, ULIDType)
    ]
    if not columns:
        return clauseelement, multiparams, params
    converted = []
    for row in multiparams:
        if not isinstance(row, Mapping):  # positional parameters: leave them
            return clauseelement, multiparams, params
        new = dict(row)
        for key, column_type in columns:
            if key in new:
                # A subclass that returns another value (TypeIDType) converts
                # with its own operand().
                own = getattr(column_type, "operand", None)
                new[key] = own(new[key]) if own else operand(column_type, new[key])
        converted.append(new)
    return clauseelement, converted, params


def enable() -> None:
    """Listen for bulk inserts on every engine; idempotent."""
    global _enabled
    with _lock:
        if not _enabled:
            event.listen(Engine, "before_execute", _convert, retval=True)
            _enabled = True
