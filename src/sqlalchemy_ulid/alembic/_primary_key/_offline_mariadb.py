"""The key-conversion ops' offline (``--sql``) script for mariadb (being written)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from alembic.operations import Operations
from alembic.util import CommandError

if TYPE_CHECKING:
    from ._ops import _KeyOp

__all__ = ["mariadb_script"]


def mariadb_script(
    operations: Operations, op: _KeyOp, direction: Literal["ulid", "legacy"], name: str
) -> None:
    """Write the op's phases for mariadb into the ``--sql`` output."""
    raise CommandError(
        f"{name} cannot run in offline (--sql) mode: it finds the foreign keys by "
        "reflection and computes the new ids from the rows. Run this migration online "
        "(dry_run=True shows what it will do)"
    )
