"""New tables get ULID primary keys, and a ULID foreign key between them.

Also installs the server-side ``gen_ulid()``, so raw SQL (reports, other
services) can make ULIDs too: ``INSERT INTO customers (id, name) VALUES
(gen_ulid(), ...)`` on PostgreSQL.

Revision ID: 0002
Revises: 0001
Create Date: 2024-05-02 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import sqlalchemy_ulid
import sqlalchemy_ulid.alembic

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_ulid_function()
    customers = op.create_table(
        "customers",
        sa.Column("id", sqlalchemy_ulid.ULIDType(), primary_key=True),
        sa.Column("name", sa.String(100), nullable=False),
    )
    invoices = op.create_table(
        "invoices",
        sa.Column("id", sqlalchemy_ulid.ULIDType(), primary_key=True),
        sa.Column(
            "customer_id",
            sqlalchemy_ulid.ULIDType(),
            sa.ForeignKey("customers.id", name="fk_invoices_customer_id"),
            nullable=False,
        ),
        sa.Column("amount_cents", sa.Integer, nullable=False),
    )
    # ULID values become literals of the right type in --sql mode: a UUID
    # cast on PostgreSQL, X'...' on MySQL and SQLite.
    ada = sqlalchemy_ulid.ULID("01HXA3V6PW7Q1NB5D4R8S2T0KM")
    op.bulk_insert(customers, [{"id": ada, "name": "ada"}])
    op.bulk_insert(
        invoices,
        [
            {
                "id": sqlalchemy_ulid.ULID("01HXA3W0000000000000000001"),
                "customer_id": ada,
                "amount_cents": 1200,
            },
            {
                "id": sqlalchemy_ulid.ULID("01HXA3W0000000000000000002"),
                "customer_id": ada,
                "amount_cents": 450,
            },
        ],
    )


def downgrade() -> None:
    op.drop_table("invoices")
    op.drop_table("customers")
    op.drop_ulid_function()
