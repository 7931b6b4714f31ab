"""ULIDs as first-class SQLAlchemy 2.x and Alembic citizens.

Example:
    >>> from sqlalchemy_ulid import ULID, new_ulid
    >>> u = new_ulid()
    >>> ULID(str(u)) == u
    True
"""

from __future__ import annotations

from ._codec import InvalidULID
from ._defaults import (
    drop_ulid_function,
    drop_ulid_function_ddl,
    install_ulid_function,
    register_ulid_function,
    ulid_function_ddl,
    ulid_server_default,
)
from ._generator import MonotonicGenerator, new_ulid
from ._pagination import Page, PaginationError, after, apaginate, before, paginate
from ._partitions import create_partitions, partition_ddl
from ._timerange import created_before, created_between, created_since
from ._types import ULIDType
from ._ulid import ULID

__all__ = [
    "ULID",
    "InvalidULID",
    "MonotonicGenerator",
    "Page",
    "PaginationError",
    "ULIDType",
    "after",
    "apaginate",
    "before",
    "create_partitions",
    "created_before",
    "created_between",
    "created_since",
    "drop_ulid_function",
    "drop_ulid_function_ddl",
    "install_ulid_function",
    "new_ulid",
    "paginate",
    "partition_ddl",
    "register_ulid_function",
    "ulid_function_ddl",
    "ulid_server_default",
]

__version__ = "0.1.0"

# Show public objects under the package name in reprs, tracebacks and docs
# rather than under the private module that happens to define them.
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith(__name__ + "._"):
        _obj.__module__ = __name__
del _name, _obj
