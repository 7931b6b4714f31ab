# The model of docs/tutorial.md (step 1 includes this file; step 5 points
# Alembic's env.py at Base.metadata here).
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from sqlalchemy_ulid import ULIDPrimaryKey


class Base(DeclarativeBase):
    pass


class Product(ULIDPrimaryKey, Base):  # id: a ULID, made in Python
    __tablename__ = "tutorial_products"

    name: Mapped[str] = mapped_column(sa.String(80))
    category: Mapped[str] = mapped_column(sa.String(20))
    price_cents: Mapped[int]
