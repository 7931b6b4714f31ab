"""Give the legacy ``orders`` a ULID public id, dated from ``created_at``.

Existing rows get ULIDs that carry their historical creation times (read
as UTC) and sort like them; orders 2 and 3, placed in the same millisecond,
are numbered in id order. The column then becomes NOT NULL and unique.

Offline (``--sql``) the backfill cannot be written as SQL: the ULIDs are
computed from the rows. ``op.add_ulid_column`` refuses offline mode with a
clear error, so this revision writes the nullable column and a comment
instead; run this one revision online (``alembic upgrade 0003``).

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
    if context.is_offline_mode():
        op.add_column(
            "orders",
            sa.Column("public_id", sqlalchemy_ulid.ULIDType(), nullable=True),
        )
        op.execute(
            "-- orders.public_id is left NULL: its backfill from created_at needs "
            "the rows, so run revision 0003 online"
        )
        return
    op.add_ulid_column("orders", "public_id", "created_at", timezone=timezone.utc)


def downgrade() -> None:
    op.drop_ulid_column("orders", "public_id")
