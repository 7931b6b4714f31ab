"""The ``alembic.plugins`` entry point (Alembic 1.18+): our ops without an import.

Alembic imports its plugins while ``import alembic`` itself runs. That can be
in the middle of ``import sqlalchemy_ulid.alembic`` (whose first line imports
Alembic), so the entry point must not name that module: Alembic would get it
half-initialised. This module is tiny and always complete, and its
``setup()`` leaves the registering to the import that is under way whenever
one of our modules is being imported (it imports Alembic, and its op
modules register themselves).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

__all__ = ["setup"]


def _initializing(name: str) -> bool:
    module = sys.modules.get(name)
    # importlib marks a module's spec while its code runs (the flag behind
    # "partially initialized module" errors).
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _compare_server_default(*args: Any) -> Any:
    # Imported when autogenerate runs, by then Alembic is whole.
    from sqlalchemy_ulid.alembic._compare import autogenerate_comparator

    return autogenerate_comparator(*args)


def setup(plugin: Any) -> None:
    """Register ``op.add_ulid_column`` & co. by importing ``sqlalchemy_ulid.alembic``.

    Also registers the plugin's autogenerate comparator of server defaults
    (see ``sqlalchemy_ulid.alembic.compare_server_default``); it runs when
    ``env.py`` names the plugin: ``autogenerate_plugins=["alembic.autogenerate.*",
    "sqlalchemy_ulid"]``.
    """
    from alembic.util import DispatchPriority

    plugin.add_autogenerate_comparator(
        _compare_server_default, "column", "server_default", priority=DispatchPriority.FIRST
    )
    ours = [name for name in list(sys.modules) if name.startswith("sqlalchemy_ulid.")]
    if any(_initializing(name) for name in ours if name != __name__):
        return  # Alembic is being imported by one of our modules: it registers them
    importlib.import_module("sqlalchemy_ulid.alembic")
