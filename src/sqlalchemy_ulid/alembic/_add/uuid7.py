"""The Alembic op that adds a UUIDv7 (or typed-id) column to a populated table.

``op.add_uuid7_column`` is ``op.add_ulid_column`` (``op.py``, ``staged.py``) with UUIDv7 ids:
the same op given the UUIDv7 key kind, which decides the column type, the
generator and the server default; the same checks before any DDL, the same
ordered staging pass, the same resumable fill and constraints; this module
holds only its public signature and the ``prefix`` option.
``op.drop_ulid_column`` undoes either.

With ``prefix=`` the column is a ``TypeIDType(prefix)``: a typed id's suffix
is a UUIDv7, so the ids are the same UUIDv7s, stored as the typed-id key
kind stores them (``ULIDType``'s storage) and read back with the prefix.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta, tzinfo
from typing import Any

from alembic.operations import Operations

from ..._kinds import UUID7_KEYS
from ..._typeid import check_prefix
from ..._uuid7_defaults import UUID7Storage
from .._backfill import BackfillProgress
from .._invoke import invoke
from .op import AddULIDColumnOp
from .staged import add_ulid_column

__all__ = ["AddUUID7ColumnOp"]


@Operations.register_operation("add_uuid7_column")
class AddUUID7ColumnOp(AddULIDColumnOp):
    """Add a UUIDv7 column to a populated table, dated from a timestamp column."""

    op_name = "add_uuid7_column"
    key = "uuid7"
    keys = UUID7_KEYS

    def __init__(self, *args: Any, prefix: str | None = None, **kwargs: Any) -> None:
        if prefix is not None:
            check_prefix(prefix)  # InvalidTypeID, before any SQL
            if kwargs.get("storage", "auto") != "auto":
                raise ValueError(
                    f"add_uuid7_column(prefix={prefix!r}) stores TypeIDType's 16 bytes: "
                    f"leave storage='auto', got {kwargs['storage']!r}"
                )
        super().__init__(*args, **kwargs)
        #: the typed ids' prefix, or None for a column of plain UUIDv7s
        self.prefix = prefix

    @classmethod
    def add_uuid7_column(
        cls,
        operations: Operations,
        table_name: str,
        column_name: str,
        from_column: str,
        *,
        storage: UUID7Storage = "auto",
        timezone: tzinfo | None = None,
        batch_size: int | None = None,
        unique: bool = True,
        constraint_name: str | None = None,
        schema: str | None = None,
        fold: int | None = None,
        server_default: bool = False,
        online: bool = False,
        pause: float | timedelta = 0.0,
        progress: Callable[[BackfillProgress], object] | None = None,
        lock_timeout: float | timedelta | None = None,
        prefix: str | None = None,
    ) -> None:
        """Add a UUIDv7 column to a populated table, backfilled from a timestamp.

        :meth:`add_ulid_column` with UUIDv7 ids: each row gets a UUIDv7 of
        its ``from_column``'s millisecond, ties numbered in primary-key order
        by the monotonic :class:`~sqlalchemy_ulid.UUIDv7Generator`. The same
        steps, checks before any DDL, rerun after an interruption, and locks
        (see there); ``op.drop_ulid_column`` is its reverse.

        Args:
            operations: supplied by Alembic (call it as ``op.add_uuid7_column``).
            table_name: the table, which must have a primary key.
            column_name: the new column.
            from_column: a date-time column (or integer Unix milliseconds)
                with no NULLs.
            storage: ``"auto"`` (``sa.Uuid()``: the database's uuid type, else
                ``CHAR(32)`` hex), ``"native"``, ``"binary"`` (16 bytes) or
                ``"hex"``.
            timezone: the zone naive timestamps are in (``None``: UTC).
            batch_size: rows read and updated per round trip.
            unique: add a unique constraint on the new column.
            constraint_name: its name; default ``uq_<table>_<column>``.
            schema: the table's schema.
            fold: ``None`` refuses naive times in a DST gap or fold; ``0``/``1``
                picks the offset before/after the change.
            server_default: give the column
                :func:`~sqlalchemy_ulid.uuid7_server_default` right after
                ``ADD COLUMN`` (on PostgreSQL before 18 run
                ``op.create_uuid7_function()`` first).
            online: the phases of ``add_ulid_column(online=True)`` (PostgreSQL
                and MariaDB), so that no writer waits longer than a metadata
                change. Offline (``--sql``) it writes them as a script that
                makes the UUIDv7s in SQL (uuid or 16-byte storage;
                ``batch_size`` at most 4,095: a batch numbers the rows of one
                millisecond in the 12-bit counter).
            pause: with ``online=True``, seconds to sleep between two batches.
            progress: with ``online=True``, called after every batch with a
                :class:`~sqlalchemy_ulid.alembic.BackfillProgress`.
            lock_timeout: seconds each DDL statement may wait for its lock
                before it gives up and retries (default 1 s).
            prefix: make the column ``TypeIDType(prefix)``, a column of typed
                ids (``user_01h...``): the same UUIDv7s, in ``TypeIDType``'s
                storage (``uuid`` on PostgreSQL, ``BINARY(16)`` on MariaDB
                and MySQL), read back with the prefix. Leave ``storage`` as
                ``"auto"``; ``server_default=True`` gives the column
                :func:`~sqlalchemy_ulid.typeid_server_default`.

        Example:
            A public typed id for every order, in a migration::

                op.add_uuid7_column(
                    "orders", "public_id", "created_at", prefix="order", online=True
                )

            and in the model
            ``public_id = mapped_column(TypeIDType("order"), unique=True,
            default=lambda: new_typeid("order"))``.

        Raises:
            alembic.util.CommandError: in offline mode without ``online=True``
                (or with a storage the script cannot fill), or rows were
                written without the column faster than the catch-up (rerun it).
            ValueError: as :meth:`add_ulid_column`, before the table is altered
                (:class:`~sqlalchemy_ulid.InvalidTypeID` for a ``prefix`` the
                TypeID specification refuses; a ``prefix`` with another
                ``storage`` than ``"auto"``).
        """
        invoke(cls, operations, locals())


Operations.implementation_for(AddUUID7ColumnOp)(add_ulid_column)
