"""The Alembic op that adds a UUIDv7 column to a populated table.

``op.add_uuid7_column`` is ``op.add_ulid_column`` (``op.py``, ``staged.py``) with UUIDv7 ids:
the same checks before any DDL, the same ordered staging pass, the same
resumable fill and constraints; only the column type, the generator and the
server default differ. ``op.drop_ulid_column`` undoes either.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta, tzinfo
from typing import Any

import sqlalchemy as sa
from alembic.operations import Operations
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import CompileError

from ..._dialects import dialect_row
from ..._uuid7 import UUIDv7Generator
from ..._uuid7_defaults import _STORAGES, UUID7Storage, _kind, uuid7_server_default
from .._backfill import BackfillProgress
from .op import AddULIDColumnOp
from .staged import add_ulid_column

__all__ = ["AddUUID7ColumnOp"]


@Operations.register_operation("add_uuid7_column")
class AddUUID7ColumnOp(AddULIDColumnOp):
    """Add a UUIDv7 column to a populated table, dated from a timestamp column."""

    op_name = "add_uuid7_column"
    key = "uuid7"

    def storage_kind(self, dialect: Dialect) -> str:
        """The column's storage kind on ``dialect``: ``uuid``, ``binary`` or ``hex``."""
        return _kind(str(self.storage), dialect)

    @staticmethod
    def _check_storage(storage: Any, server_default: bool) -> None:
        if storage not in _STORAGES:
            raise ValueError(f"storage must be one of {', '.join(_STORAGES)}; got {storage!r}")

    def column_type(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        storage: str = self.storage  # a UUID7Storage here
        if storage == "binary":
            return dialect_row(dialect).binary()
        return sa.Uuid(native_uuid=storage != "hex")

    def id_maker(self, clock: Callable[[], int]) -> Callable[[], Any]:
        generate = UUIDv7Generator(clock=clock)
        if self.storage == "binary":
            return lambda: generate().bytes
        return generate

    def make_server_default(self, dialect: Dialect) -> Any:
        sql = dialect_row(dialect).uuid7
        try:
            kind = _kind(self.storage, dialect)
        except CompileError as exc:
            raise ValueError(f"{exc}: server_default=True cannot be honoured") from None
        if sql is None or kind not in {**sql.default, **sql.builtin}:
            raise ValueError(
                f"{dialect.name} has no server-side UUIDv7 generator for storage "
                f"{self.storage!r}: server_default=True cannot be honoured"
            )
        return uuid7_server_default(self.storage)  # type: ignore[arg-type]

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

        Raises:
            alembic.util.CommandError: in offline mode without ``online=True``
                (or with a storage the script cannot fill), or rows were
                written without the column faster than the catch-up (rerun it).
            ValueError: as :meth:`add_ulid_column`, before the table is altered.
        """
        operations.invoke(
            cls(
                table_name,
                column_name,
                from_column,
                storage=storage,  # type: ignore[arg-type]
                timezone=timezone,
                batch_size=batch_size,
                unique=unique,
                constraint_name=constraint_name,
                schema=schema,
                fold=fold,
                server_default=server_default,
                online=online,
                pause=pause,
                progress=progress,
                lock_timeout=lock_timeout,
            )
        )


Operations.implementation_for(AddUUID7ColumnOp)(add_ulid_column)
