"""Give the legacy ``orders`` a ULID public id, dated from ``created_at``.

Existing rows get ULIDs that carry their historical creation times (read
as UTC) and sort like them; orders 2 and 3, placed in the same millisecond,
are numbered in id order. The column then becomes NOT NULL and unique.

On PostgreSQL and MariaDB the op runs online (``online=True``): in phases
that each commit on their own, a batched backfill in between, so the
application's writes to ``orders`` never wait longer than a metadata
change. New rows get their id from the database (``server_default=True``,
with ``gen_ulid()`` from revision 0002).

Offline (``--sql``) on PostgreSQL the script holds the same phases, the
backfill as a ``DO`` block that commits every batch: apply it with
``psql -v ON_ERROR_STOP=1 -f upgrade.sql`` and ``orders.public_id`` ends up
filled, NOT NULL and unique. Elsewhere the backfill needs the rows, so
offline this revision adds the nullable column and says so in the script.

Revision ID: 0003
Revises: 0002
Create Date: 2024-05-03 09:00:00
"""

from __future__ import annotations

from datetime import timezone

import sqlalchemy as sa
from alembic import context, op

import sqlalchemy_ulid
import sqlalchemy_ulid.alembic

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    dialect = context.get_context().dialect.name
    if context.is_offline_mode() and dialect != "postgresql":
        op.add_column(
            "orders",
            sa.Column("public_id", sqlalchemy_ulid.ULIDType(), nullable=True),
        )
        op.execute(
            "-- orders.public_id is left NULL: its backfill from created_at needs "
            "the rows, so run revision 0003 online: alembic upgrade 0003"
        )
        return
    online = dialect in ("postgresql", "mysql", "mariadb")
    op.add_ulid_column(
        "orders",
        "public_id",
        "created_at",
        timezone=timezone.utc,
        online=online,
        server_default=online,
    )


def downgrade() -> None:
    op.drop_ulid_column("orders", "public_id")
