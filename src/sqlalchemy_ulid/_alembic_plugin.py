"""The ``alembic.plugins`` entry point (Alembic 1.18+): our ops without an import.

Alembic imports its plugins while ``import alembic`` itself runs. That can be
in the middle of ``import sqlalchemy_ulid.alembic`` (whose first line imports
Alembic), so the entry point must not name that module: Alembic would get it
half-initialised. This module is tiny and always complete, and its
``setup()`` leaves the registering to ``sqlalchemy_ulid.alembic`` whenever
that import is already under way.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

__all__ = ["setup"]


def setup(plugin: Any) -> None:
    """Register ``op.add_ulid_column`` & co. by importing ``sqlalchemy_ulid.alembic``."""
    if "sqlalchemy_ulid.alembic" not in sys.modules:
        importlib.import_module("sqlalchemy_ulid.alembic")
