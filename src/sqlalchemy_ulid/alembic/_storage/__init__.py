"""``op.alter_ulid_storage`` and ``op.alter_uuid7_storage``.

``_op`` holds ``alter_ulid_storage``, its options and what the key kind
decides, ``_uuid7`` the same op given the UUIDv7 kind, ``_alter`` the
one-transaction procedure per database that runs both, ``_values`` what it
reads of the column before any DDL (type, values, DEFAULT). ``online=True`` is
one plan per database, run by the engine or rendered as the ``--sql``
script: through ``_online`` on PostgreSQL (``alembic/postgresql/storage.py``,
its names in ``_target``), through ``_shadow`` on MariaDB/MySQL (a shadow
table: ``alembic/mysql/storage.py``, its names in ``mysql/storage_target``).
The online copies run in the engine's batch loop (``_plan/batches.py``).
Importing this package registers both ops on Alembic's ``Operations``.
"""

from __future__ import annotations

from ._op import AlterULIDStorageOp
from ._uuid7 import AlterUUID7StorageOp

__all__ = ["AlterULIDStorageOp", "AlterUUID7StorageOp"]
