"""``add_ulid_column`` and ``add_uuid7_column``: the ops that add an id column.

* ``op``: :class:`AddULIDColumnOp`, its options and what the id kind decides;
* ``staged``: the one-pass path (ids staged before any DDL), and the
  registration of the op's implementation on Alembic's ``Operations``;
* ``plan``: the ``online=True`` path, one plan run online or written as the
  ``--sql`` script;
* ``uuid7``: :class:`AddUUID7ColumnOp`, the same op with UUIDv7 ids.
"""

from __future__ import annotations

from .op import AddULIDColumnOp
from .plan import AddNames, add_names
from .staged import STAGING, add_ulid_column, drop_staging, fill, stage
from .uuid7 import AddUUID7ColumnOp

__all__ = [
    "STAGING",
    "AddNames",
    "AddULIDColumnOp",
    "AddUUID7ColumnOp",
    "add_names",
    "add_ulid_column",
    "drop_staging",
    "fill",
    "stage",
]
