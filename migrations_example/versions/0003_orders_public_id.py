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
filled, NOT NULL and unique. On MariaDB/MySQL the script fills the column in
one ``UPDATE`` that computes each ULID in SQL (the creation time in UTC, then
a counter that numbers ties in id order, then random bytes), and then makes
it NOT NULL and unique: apply it with ``mariadb < upgrade.sql``. A row whose
time no ULID can hold (before 1970) is left NULL, so the NOT NULL step
stops the script there. SQLite has no such script: run it online.

Revision ID: 0003
Revises: 0002
Create Date: 2024-05-03 09:00:00
"""

from __future__ import annotations

from datetime import timezone

import sqlalchemy as sa
from alembic import context, op
from alembic.util import CommandError

import sqlalchemy_ulid
import sqlalchemy_ulid.alembic

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


#: MariaDB/MySQL offline: each row's ULID computed in SQL. The first 6 bytes
#: are the UTC Unix milliseconds of created_at (NULL before 1970, so the row
#: stays NULL and NOT NULL refuses it), the next 4 number the rows of one
#: millisecond in id order, the last 6 are random.
_MYSQL_FILL = """
UPDATE orders AS o JOIN (
    SELECT id, ms, ROW_NUMBER() OVER (PARTITION BY ms ORDER BY id) - 1 AS tie
    FROM (
        SELECT id, FLOOR(UNIX_TIMESTAMP(created_at) * 1000) AS ms
        FROM orders
        WHERE public_id IS NULL AND created_at >= '1970-01-01 00:00:01'
    ) AS timed
) AS numbered ON o.id = numbered.id
SET o.public_id = CONCAT(
    UNHEX(LPAD(HEX(numbered.ms), 12, '0')),
    UNHEX(LPAD(HEX(numbered.tie), 8, '0')),
    RANDOM_BYTES(6)
)
"""


def upgrade() -> None:
    dialect = context.get_context().dialect
    if context.is_offline_mode() and dialect.name != "postgresql":
        _offline_mysql(dialect)
        return
    online = dialect.name in ("postgresql", "mysql", "mariadb")
    op.add_ulid_column(
        "orders",
        "public_id",
        "created_at",
        timezone=timezone.utc,
        online=online,
        server_default=online,
    )


def _offline_mysql(dialect: sa.engine.Dialect) -> None:
    if dialect.name not in ("mysql", "mariadb"):
        raise CommandError(
            f"revision 0003 has no offline script for {dialect.name}: run it online "
            "(alembic upgrade, without --sql)"
        )
    # No DEFAULT yet: ADD COLUMN would give every existing row the default's
    # value (an id of now), not NULL for the fill to date from created_at.
    op.add_column("orders", sa.Column("public_id", sqlalchemy_ulid.ULIDType()))
    op.execute("SET time_zone = '+00:00'")  # created_at holds UTC times
    op.execute(_MYSQL_FILL)
    default = sqlalchemy_ulid.ulid_server_default().compile(dialect=dialect)
    op.execute(
        f"ALTER TABLE orders MODIFY public_id BINARY(16) NOT NULL DEFAULT {default}"
    )
    op.create_unique_constraint("uq_orders_public_id", "orders", ["public_id"])


def downgrade() -> None:
    op.drop_ulid_column("orders", "public_id")
