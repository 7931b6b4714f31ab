"""The example application's models: the schema at the head revision (0004).

``env.py`` hands this ``metadata`` to Alembic as its target, so that from the
command line ``alembic check`` compares the migrated database with these
models (and finds nothing to do), and ``alembic revision --autogenerate``
writes the next migration from a change made here.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from sqlalchemy_ulid import ULID, ULIDType, new_ulid


class Base(DeclarativeBase):
    pass


class Order(Base):
    """A legacy table: integer keys, plus a ULID public id since revision 0003."""

    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    customer: Mapped[str] = mapped_column(sa.String(100))
    total_cents: Mapped[int]
    created_at: Mapped[datetime] = mapped_column(
        sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
    )
    # Backfilled from created_at by op.add_ulid_column, then NOT NULL and unique.
    public_id: Mapped[ULID] = mapped_column(ULIDType(), default=new_ulid)

    # add_ulid_column makes this a unique constraint, or a unique index of the
    # same name on SQLite (which cannot add a constraint to a table; env.py
    # takes one for the other there).
    __table_args__ = (sa.UniqueConstraint("public_id", name="uq_orders_public_id"),)


class WebhookEvent(Base):
    """ULIDs a partner sends, stored in 16 bytes since revision 0004."""

    __tablename__ = "webhook_events"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    event_id: Mapped[ULID] = mapped_column(ULIDType())
    kind: Mapped[str] = mapped_column(sa.String(40))

    __table_args__ = (sa.UniqueConstraint("event_id", name="uq_webhook_events_event_id"),)


class Customer(Base):
    """A new table (revision 0002): a ULID primary key."""

    __tablename__ = "customers"

    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True, default=new_ulid)
    name: Mapped[str] = mapped_column(sa.String(100))


class Invoice(Base):
    """A new table (revision 0002): a ULID primary key and a ULID foreign key."""

    __tablename__ = "invoices"

    id: Mapped[ULID] = mapped_column(ULIDType(), primary_key=True, default=new_ulid)
    customer_id: Mapped[ULID] = mapped_column(
        ULIDType(), sa.ForeignKey("customers.id", name="fk_invoices_customer_id")
    )
    amount_cents: Mapped[int]


metadata = Base.metadata
