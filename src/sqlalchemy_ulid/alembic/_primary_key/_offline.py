"""The two key-conversion ops in offline (``--sql``) mode: one script per database.

Offline nothing can be reflected, so the script finds the foreign keys,
checks what the online op refuses, and computes the new values when it
runs, in the database (``_offline_postgresql`` for PostgreSQL,
``_offline_mariadb`` for MariaDB/MySQL).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from alembic.operations import Operations
from alembic.util import CommandError

from ._offline_mariadb import mariadb_script
from ._offline_postgresql import postgresql_script

if TYPE_CHECKING:
    from ._ops import _KeyOp

__all__ = ["write_offline"]


def write_offline(
    operations: Operations, op: _KeyOp, direction: Literal["ulid", "legacy"], name: str
) -> None:
    """Write the op's script into Alembic's ``--sql`` output."""
    dialect = operations.get_context().dialect
    if dialect.name == "postgresql":
        postgresql_script(operations, op, direction, name)
    elif dialect.name in ("mysql", "mariadb"):
        mariadb_script(operations, op, direction, name)
    else:
        raise CommandError(
            f"{name} writes an offline (--sql) script for PostgreSQL and MariaDB/MySQL "
            f"only, not {dialect.name}"
        )
