"""Store ``webhook_events.event_id`` in 16 bytes instead of CHAR(26) text.

UUID on PostgreSQL, BINARY(16) on MySQL/MariaDB, BLOB on SQLite: the
ULIDType default. The conversion is SQL run by the database, so every value
is kept, the unique constraint stays, and ``--sql`` mode works too.

Revision ID: 0004
Revises: 0003
Create Date: 2024-05-04 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import sqlalchemy_ulid
import sqlalchemy_ulid.alembic

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def _webhook_events(event_id_type: sa.types.TypeEngine[object]) -> sa.Table:
    # SQLite changes a column type by recreating the table; in --sql mode it
    # cannot reflect the table, so the migration says what the table is.
    return sa.Table(
        "webhook_events",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("event_id", event_id_type, nullable=False),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.UniqueConstraint("event_id", name="uq_webhook_events_event_id"),
    )


def upgrade() -> None:
    op.alter_ulid_storage(
        "webhook_events",
        "event_id",
        from_storage="text",
        to_storage="auto",
        nullable=False,
        copy_from=_webhook_events(sa.CHAR(26)),
    )


def downgrade() -> None:
    op.alter_ulid_storage(
        "webhook_events",
        "event_id",
        from_storage="auto",
        to_storage="text",
        nullable=False,
        copy_from=_webhook_events(sqlalchemy_ulid.ULIDType()),
    )
