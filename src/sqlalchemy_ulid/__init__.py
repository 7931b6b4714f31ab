"""ULIDs as first-class SQLAlchemy 2.x and Alembic citizens.

The value type and the generator are imported with the package; the names
that need SQLAlchemy (the column type, pagination, time ranges, server-side
defaults, ``ulid_timestamp``) load on first use, so ``import sqlalchemy_ulid`` and the command
line stay fast.

Example:
    >>> from sqlalchemy_ulid import ULID, new_ulid
    >>> u = new_ulid()
    >>> ULID(str(u)) == u
    True
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._errors import (
    CursorSortMismatch,
    InvalidCursor,
    InvalidInput,
    InvalidLimit,
    InvalidTime,
    InvalidULID,
    SettleError,
)
from ._generator import MonotonicGenerator, new_ulid
from ._ulid import ULID
from ._uuid7 import UUIDv7Generator, new_uuid7, uuid7_max_at, uuid7_min_at

if TYPE_CHECKING:
    from ._clock import ClockSkew, ClockSkewError, check_clock_skew
    from ._defaults import (
        drop_ulid_function,
        drop_ulid_function_ddl,
        install_ulid_function,
        register_ulid_function,
        typeid_server_default,
        ulid_function_ddl,
        ulid_server_default,
    )
    from ._feed import afollow, follow
    from ._guard import StaleULIDError, guard_ulid_age
    from ._guard_ddl import guard_ulid_age_ddl
    from ._insert_select import insert_from_select
    from ._mixins import (
        TypeIDAuditBase,
        TypeIDBase,
        TypeIDPrimaryKey,
        ULIDAuditBase,
        ULIDBase,
        ULIDPrimaryKey,
        UUIDv7AuditBase,
        UUIDv7Base,
        UUIDv7PrimaryKey,
    )
    from ._paging import (
        Page,
        PaginationError,
        after,
        apaginate,
        before,
        paginate,
    )
    from ._partitions import create_partitions, partition_ddl
    from ._retry import Retry
    from ._sealed import CursorSealer, PageKwargs
    from ._sqltime import ulid_timestamp
    from ._timerange import created_before, created_between, created_since
    from ._typeid import InvalidTypeID, TypeID, new_typeid
    from ._typeid_type import TypeIDType
    from ._types import ULIDType
    from ._utctime import UTCDateTime
    from ._uuid7_defaults import (
        drop_uuid7_function,
        drop_uuid7_function_ddl,
        install_uuid7_function,
        register_uuid7_function,
        uuid7_function_ddl,
        uuid7_server_default,
    )

__all__ = [
    "ULID",
    "ClockSkew",
    "ClockSkewError",
    "CursorSealer",
    "CursorSortMismatch",
    "InvalidCursor",
    "InvalidInput",
    "InvalidLimit",
    "InvalidTime",
    "InvalidTypeID",
    "InvalidULID",
    "MonotonicGenerator",
    "Page",
    "PageKwargs",
    "PaginationError",
    "Retry",
    "SettleError",
    "StaleULIDError",
    "TypeID",
    "TypeIDAuditBase",
    "TypeIDBase",
    "TypeIDPrimaryKey",
    "TypeIDType",
    "ULIDAuditBase",
    "ULIDBase",
    "ULIDPrimaryKey",
    "ULIDType",
    "UTCDateTime",
    "UUIDv7AuditBase",
    "UUIDv7Base",
    "UUIDv7Generator",
    "UUIDv7PrimaryKey",
    "afollow",
    "after",
    "apaginate",
    "before",
    "check_clock_skew",
    "create_partitions",
    "created_before",
    "created_between",
    "created_since",
    "drop_ulid_function",
    "drop_ulid_function_ddl",
    "drop_uuid7_function",
    "drop_uuid7_function_ddl",
    "follow",
    "guard_ulid_age",
    "guard_ulid_age_ddl",
    "insert_from_select",
    "install_ulid_function",
    "install_uuid7_function",
    "new_typeid",
    "new_ulid",
    "new_uuid7",
    "paginate",
    "partition_ddl",
    "register_ulid_function",
    "register_uuid7_function",
    "typeid_server_default",
    "ulid_function_ddl",
    "ulid_server_default",
    "ulid_timestamp",
    "uuid7_function_ddl",
    "uuid7_max_at",
    "uuid7_min_at",
    "uuid7_server_default",
]

__version__ = "0.1.0"

# Public name -> the private module that defines it, for the names whose
# modules import SQLAlchemy.
_LAZY = {
    # Typed ids need no SQLAlchemy; lazy so that the few milliseconds of
    # their encoding table are paid only by the apps that use them.
    "InvalidTypeID": "_typeid",
    "TypeID": "_typeid",
    "new_typeid": "_typeid",
    "TypeIDType": "_typeid_type",
    "typeid_server_default": "_defaults",
    "ULIDType": "_types",
    "Page": "_paging",
    "PaginationError": "_paging",
    "after": "_paging",
    "apaginate": "_paging",
    "before": "_paging",
    "paginate": "_paging",
    "TypeIDAuditBase": "_mixins",
    "TypeIDBase": "_mixins",
    "TypeIDPrimaryKey": "_mixins",
    "ULIDAuditBase": "_mixins",
    "ULIDBase": "_mixins",
    "ULIDPrimaryKey": "_mixins",
    "UUIDv7AuditBase": "_mixins",
    "UUIDv7Base": "_mixins",
    "UUIDv7PrimaryKey": "_mixins",
    "UTCDateTime": "_utctime",
    "CursorSealer": "_sealed",
    "PageKwargs": "_sealed",
    "follow": "_feed",
    "afollow": "_feed",
    "Retry": "_retry",
    "ClockSkew": "_clock",
    "ClockSkewError": "_clock",
    "check_clock_skew": "_clock",
    "StaleULIDError": "_guard",
    "guard_ulid_age": "_guard",
    "guard_ulid_age_ddl": "_guard_ddl",
    "insert_from_select": "_insert_select",
    "create_partitions": "_partitions",
    "partition_ddl": "_partitions",
    "created_before": "_timerange",
    "created_between": "_timerange",
    "created_since": "_timerange",
    "drop_ulid_function": "_defaults",
    "drop_ulid_function_ddl": "_defaults",
    "install_ulid_function": "_defaults",
    "register_ulid_function": "_defaults",
    "ulid_function_ddl": "_defaults",
    "ulid_server_default": "_defaults",
    "ulid_timestamp": "_sqltime",
    "drop_uuid7_function": "_uuid7_defaults",
    "drop_uuid7_function_ddl": "_uuid7_defaults",
    "install_uuid7_function": "_uuid7_defaults",
    "register_uuid7_function": "_uuid7_defaults",
    "uuid7_function_ddl": "_uuid7_defaults",
    "uuid7_server_default": "_uuid7_defaults",
}


def _publish(obj: Any) -> Any:
    # Show public objects under the package name in reprs, tracebacks and
    # docs rather than under the private module that happens to define them.
    if getattr(obj, "__module__", "").startswith(__name__ + "._"):
        obj.__module__ = __name__
    return obj


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = _publish(getattr(importlib.import_module(f"{__name__}.{module}"), name))
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    # Only the public names: not the helpers this module imports for itself
    # (importlib, Any, TYPE_CHECKING, annotations) nor its private modules.
    # Public subpackages show once imported, as they would without __dir__.
    loaded = [name for name in ("alembic", "contrib") if name in globals()]
    return sorted([*__all__, "__version__", *loaded])


for _obj in (
    ULID,
    CursorSortMismatch,
    InvalidCursor,
    InvalidInput,
    InvalidLimit,
    InvalidTime,
    InvalidULID,
    SettleError,
    MonotonicGenerator,
    new_ulid,
    UUIDv7Generator,
    new_uuid7,
    uuid7_min_at,
    uuid7_max_at,
):
    _publish(_obj)
del _obj
