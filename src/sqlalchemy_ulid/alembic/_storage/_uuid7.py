"""The Alembic op that converts a UUIDv7 column between text, uuid and binary storage.

``op.alter_uuid7_storage`` is ``op.alter_ulid_storage`` (``_op``) for
UUIDv7 keys: the same checks before any DDL, the same conversion procedure
per database (one ``ALTER ... USING`` on PostgreSQL, the resumable
``VARBINARY`` holding type on MariaDB, an ``UPDATE`` and a table rebuild on
SQLite, in ``_alter``), the same online paths (``_online`` on PostgreSQL,
``_shadow`` on MariaDB/MySQL): the same op given the UUIDv7 key kind, which
decides the storages, the column types and the conversion SQL. This module
holds its public signature and how its literal DEFAULTs are read.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Literal

import sqlalchemy as sa
from alembic.operations import Operations

from ..._kinds import UUID7_KEYS
from .._backfill import BackfillProgress
from .._invoke import invoke
from ._alter import alter_storage
from ._op import AlterULIDStorageOp
from ._values import literal_bytes

__all__ = ["AlterUUID7StorageOp", "UUID7ConvertStorage"]

#: A UUIDv7 column's storage: the :data:`~sqlalchemy_ulid.UUID7Storage`
#: options, and ``"text"``, the 36-character hyphenated form (``CHAR(36)``).
UUID7ConvertStorage = Literal["auto", "native", "binary", "hex", "text"]
_TEXT_DEFAULT = re.compile(r"^'([0-9A-Fa-f-]{32,36})'(::[a-z ]+)?$")


def _parse_v7(text: str, kind: str) -> uuid.UUID | None:
    """Return the UUIDv7 a DEFAULT's text holds in ``kind``'s form, or None."""
    expected = 36 if kind == "text" else 32
    if len(text) != expected or (kind == "text") != ("-" in text):
        return None
    try:
        value = uuid.UUID(text)
    except ValueError:
        return None
    if kind == "text" and str(value) != text.lower():
        return None  # hyphens in other places
    return _v7(value)


def _v7(value: uuid.UUID) -> uuid.UUID | None:
    return value if value.version == 7 and value.variant == uuid.RFC_4122 else None


@Operations.register_operation("alter_uuid7_storage")
class AlterUUID7StorageOp(AlterULIDStorageOp):
    """Convert a UUIDv7 column between text, uuid and binary storage in place."""

    op_name = "alter_uuid7_storage"
    keys = UUID7_KEYS
    storages = (*UUID7_KEYS.storage_options, "text")

    def default_value(self, default: str, kind: str) -> bytes | None:
        if kind in ("text", "hex"):
            match = _TEXT_DEFAULT.match(default)
            value = None if match is None else _parse_v7(match.group(1), kind)
        else:
            raw = literal_bytes(default)
            value = None if raw is None else _v7(uuid.UUID(bytes=raw))
        return None if value is None else value.bytes

    @classmethod
    def alter_uuid7_storage(
        cls,
        operations: Operations,
        table_name: str,
        column_name: str,
        *,
        from_storage: UUID7ConvertStorage,
        to_storage: UUID7ConvertStorage,
        nullable: bool | None = None,
        schema: str | None = None,
        copy_from: sa.Table | None = None,
        online: bool = False,
        lock_timeout: float | timedelta | None = None,
        batch_size: int | None = None,
        pause: float | timedelta = 0.0,
        progress: Callable[[BackfillProgress], object] | None = None,
    ) -> None:
        """Convert a UUIDv7 column's storage, keeping every value.

        :meth:`alter_ulid_storage` for UUIDv7 keys: the same procedure per
        database, offline (``--sql``) too, the same rerun after success or
        after an interrupted MariaDB run, the same ``online=True`` path (on
        PostgreSQL and MariaDB/MySQL), and the same care for nullability,
        ``COMMENT`` and a literal ``DEFAULT``. Undo it by swapping the two
        storages.

        The storages: ``"text"`` is ``CHAR(36)``, the hyphenated
        ``8-4-4-4-12`` form; ``"hex"`` is ``CHAR(32)``, 32 hex digits (what
        ``sa.Uuid()`` stores without a uuid type); ``"auto"`` is
        ``sa.Uuid()`` (``UUID`` on PostgreSQL, and on MariaDB with
        SQLAlchemy 2.1; ``CHAR(32)`` elsewhere);
        ``"native"`` the uuid type; ``"binary"`` 16 bytes. Text is read in
        either case and written in lowercase.

        Only UUIDs of version 7 (variant ``10``) are converted. Online, every
        value is checked first and the op raises
        :class:`~sqlalchemy_ulid.InvalidULID`, with examples, before any
        change if one is not in ``from_storage``'s form or is another version;
        the conversion SQL itself fails on such a value too (online and in
        ``--sql`` scripts), so none is stored. A column of other UUIDs needs
        no checks of ours: use ``op.alter_column`` (``postgresql_using=`` on
        PostgreSQL).

        Args:
            operations: supplied by Alembic (call it as ``op.alter_uuid7_storage``).
            table_name: the table.
            column_name: the UUIDv7 column.
            from_storage: its current storage.
            to_storage: the storage to convert to.
            nullable: whether the column is nullable; required offline (except with
                ``online=True``, whose scripts read it as they run).
            schema: the table's schema.
            copy_from: the table's definition, for SQLite in offline mode.
            online: on PostgreSQL and MariaDB/MySQL, convert while the
                table is in use, as ``alter_ulid_storage(online=True)`` does
                (a shadow column or table kept in step by triggers, a
                batched copy, one short swap); a value that is not a
                UUIDv7, written during the copy, makes the writer's
                statement fail.
            lock_timeout: seconds (or a timedelta) each ALTER may wait for
                its table lock before it retries (default 1 s).
            batch_size: with ``online=True``, rows copied per statement
                (default 5,000).
            pause: with ``online=True``, seconds (or a timedelta) to sleep
                between batches.
            progress: with ``online=True``, called after every batch with a
                :class:`~sqlalchemy_ulid.alembic.BackfillProgress`.

        Raises:
            InvalidULID: (online) a value is not a UUIDv7 in ``from_storage``.
            ValueError: as :meth:`alter_ulid_storage`, before any change.
            alembic.util.CommandError: offline without ``nullable`` (with
                ``online=True``, PostgreSQL gets a script for ``psql`` and
                MariaDB one for the ``mariadb`` client, as
                :meth:`alter_ulid_storage`).

        Example:
            In a migration, from ``CHAR(36)`` text to ``sa.Uuid()``::

                op.alter_uuid7_storage(
                    "orders", "id", from_storage="text", to_storage="auto"
                )
        """
        invoke(cls, operations, locals())


Operations.implementation_for(AlterUUID7StorageOp)(alter_storage)
