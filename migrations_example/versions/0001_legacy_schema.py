"""The legacy schema: integer keys, and ULIDs kept as CHAR(26) text.

This is where the story starts: an application that has been running for a
while. ``orders`` has integer keys and a ``created_at``; ``webhook_events``
stores the ULIDs a partner sends as 26-character text.

Revision ID: 0001
Revises:
Create Date: 2024-05-01 09:00:00
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    orders = op.create_table(
        "orders",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("customer", sa.String(100), nullable=False),
        sa.Column("total_cents", sa.Integer, nullable=False),
        # Milliseconds matter here: MySQL's DATETIME drops them unless asked.
        sa.Column(
            "created_at",
            sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb"),
            nullable=False,
        ),
    )
    webhook_events = op.create_table(
        "webhook_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("event_id", sa.CHAR(26), nullable=False),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.UniqueConstraint("event_id", name="uq_webhook_events_event_id"),
    )
    # Some history. Orders 2 and 3 were placed in the same millisecond.
    op.bulk_insert(
        orders,
        [
            {
                "id": 1,
                "customer": "ada",
                "total_cents": 1200,
                "created_at": datetime(2023, 11, 2, 8, 15, 0, 125000),
            },
            {
                "id": 2,
                "customer": "grace",
                "total_cents": 450,
                "created_at": datetime(2024, 1, 9, 17, 3, 44, 7000),
            },
            {
                "id": 3,
                "customer": "edsger",
                "total_cents": 9900,
                "created_at": datetime(2024, 1, 9, 17, 3, 44, 7000),
            },
            {
                "id": 4,
                "customer": "barbara",
                "total_cents": 300,
                "created_at": datetime(2023, 6, 30, 23, 59, 59, 999000),
            },
        ],
    )
    op.bulk_insert(
        webhook_events,
        [
            {"id": 1, "event_id": "01HF1Q8Z9K3J5X7V2N4M6P8R0T", "kind": "payment.succeeded"},
            {"id": 2, "event_id": "01HF1Q8ZA0BC2DE3FG4HJ5KM6N", "kind": "payment.refunded"},
            {"id": 3, "event_id": "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", "kind": "test.max"},
        ],
    )


def downgrade() -> None:
    op.drop_table("webhook_events")
    op.drop_table("orders")
