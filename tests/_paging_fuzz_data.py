"""The paging fuzzer's tables and data (see ``_paging_fuzz.py``)."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import foreign, registry, relationship

from sqlalchemy_ulid import ULID, ULIDType

MS = 1_712_345_678_901


class _Tagged(sa.types.TypeDecorator[str]):
    """Text stored with a prefix its bind adds, and no result processing: read as stored."""

    impl = sa.String
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        return None if value is None else f"t{value}"


@dataclass
class Schema:
    """The fuzzer's tables (under names of their own) and their mapped classes."""

    metadata: sa.MetaData
    orders: sa.Table
    customers: sa.Table
    lossy: sa.Table  # the orders table again, its `d` read as floats
    Order: type
    Customer: type


def schema(token: str) -> Schema:
    """Tables named after ``token`` (unique per run), and classes mapped on them."""
    metadata = sa.MetaData()
    orders = sa.Table(
        f"fz_{token}_o",
        metadata,
        sa.Column("id", ULIDType(), primary_key=True),
        sa.Column("customer_id", ULIDType(), nullable=True),
        sa.Column("n", sa.Integer, nullable=False),
        sa.Column("x", sa.Integer, nullable=True),
        sa.Column("s", sa.String(8), nullable=True),
        sa.Column("d", sa.Numeric(30, 20), nullable=False),
        sa.Column("wait", sa.Interval, nullable=False),
        sa.Column("f", sa.Double, nullable=True),
        sa.Column("p", sa.Numeric(10, 2), nullable=False),
        sa.Column("at", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()),
        sa.Column("tag", _Tagged(8), nullable=False),
    )
    customers = sa.Table(
        f"fz_{token}_c",
        metadata,
        sa.Column("id", ULIDType(), primary_key=True),
        sa.Column("name", sa.String(8), nullable=False),
        sa.Column("tier", sa.Integer, nullable=True),
    )
    lossy = sa.Table(
        f"fz_{token}_o",
        sa.MetaData(),
        sa.Column("id", ULIDType(), primary_key=True),
        sa.Column("d", sa.Numeric(30, 20, asdecimal=False), nullable=False),
    )
    mapper = registry()
    order_class = type(f"Order_{token}", (), {})
    customer_class = type(f"Customer_{token}", (), {})
    mapper.map_imperatively(order_class, orders)
    mapper.map_imperatively(
        customer_class,
        customers,
        properties={
            "orders": relationship(
                order_class,
                primaryjoin=customers.c.id == foreign(orders.c.customer_id),
                viewonly=True,
            )
        },
    )
    return Schema(metadata, orders, customers, lossy, order_class, customer_class)


def rows(seed: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The data of a seed: customers and orders, with ties, NULLs and duplicates."""
    rng = random.Random(f"{seed}:data")
    customers = [
        {
            "id": ULID.from_parts(MS + k, rng.getrandbits(80)),
            "name": rng.choice(["ann", "bob", "Bob", "cy"]),
            "tier": rng.choice([None, 1, 2]),
        }
        for k in range(rng.randint(3, 6))
    ]
    absent = ULID.from_parts(MS + 99, 0)  # an order whose customer is missing
    orders = []
    for k in range(rng.randint(12, 30)):
        orders.append(
            {
                "id": ULID.from_parts(MS + k // 3, rng.getrandbits(80)),
                "customer_id": rng.choice([None, absent, *[c["id"] for c in customers]]),
                "n": rng.randint(0, 3),
                "x": rng.choice([None, None, 0, 1, 2]),
                "s": rng.choice([None, "a", "A", "b", "bb"]),
                # equal as doubles, different as decimals
                "d": Decimal("1.000000000000000000" + str(rng.randint(10, 13))),
                "wait": timedelta(days=rng.randint(0, 2), microseconds=rng.choice([0, 250000])),
                "f": rng.choice([None, 0.5, 1.0, 1.5, 2.25]),
                "p": Decimal(rng.choice(["0.99", "1.00", "1.01", "1.02"])),
                "tag": rng.choice(["a", "b", "c"]),
            }
        )
    return customers, orders


@contextlib.contextmanager
def tables(engine: Engine, token: str, seed: str) -> Iterator[Schema]:
    """Create the tables, fill them with the seed's data, drop them after (failed or not)."""
    made = schema(token)
    made.metadata.drop_all(engine)
    made.metadata.create_all(engine)
    try:
        customers, orders = rows(seed)
        with engine.begin() as conn:
            conn.execute(made.customers.insert(), customers)
            conn.execute(made.orders.insert(), orders)
        yield made
    finally:
        made.metadata.drop_all(engine)
