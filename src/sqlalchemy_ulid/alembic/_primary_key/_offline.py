"""The two key-conversion ops in offline (``--sql``) mode: one script per database.

Offline nothing can be reflected, so the script finds the foreign keys,
checks what the online op refuses, and computes the new values when it
runs, in the database. Each database's script is written by its registered
:class:`~.._plan.database.Database` (``alembic/postgresql/primary_key.py``,
``alembic/mysql/primary_key.py``).
"""

from __future__ import annotations

from datetime import timedelta, timezone, tzinfo
from typing import TYPE_CHECKING, Literal

from alembic.operations import Operations
from alembic.util import CommandError

from .._plan.database import UnsupportedDatabase, database_for

if TYPE_CHECKING:
    from ._ops import _KeyOp

__all__ = ["refuse_local_zone", "write_offline"]


def write_offline(
    operations: Operations, op: _KeyOp, direction: Literal["ulid", "legacy"], name: str
) -> None:
    """Write the op's script into Alembic's ``--sql`` output."""
    dialect = operations.get_context().dialect
    try:
        database = database_for(dialect)
    except UnsupportedDatabase:
        raise CommandError(
            f"{name} writes an offline (--sql) script for PostgreSQL and MariaDB/MySQL "
            f"only, not {dialect.name}"
        ) from None
    try:
        database.primary_key_script(operations, op, direction, name)
    except UnsupportedDatabase as exc:
        raise CommandError(str(exc)) from None


def refuse_local_zone(zone: tzinfo | None, name: str) -> None:
    """Refuse a ``timezone=`` other than UTC: a script reads naive times as UTC only."""
    if zone is not None and not (
        isinstance(zone, timezone) and zone.utcoffset(None) == timedelta(0)
    ):
        raise CommandError(
            f"{name} offline reads naive times as UTC only: the database would place them "
            f"in {zone} by its own rules, not ours. Run this migration online"
        )
