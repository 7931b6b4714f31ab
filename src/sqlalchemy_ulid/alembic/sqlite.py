"""SQLite in the migration engine: no online ops and no scripts.

SQLite has one writer at a time, so an op that keeps writers going has
nothing to do there; the op without ``online=True`` is the one to run.
"""

from __future__ import annotations

from ._catalog import Catalog
from ._plan.database import Database, UnsupportedDatabase
from ._plan.state import StateSQL

__all__ = ["SQLite", "SQLiteCatalog"]


class SQLiteCatalog(Catalog):
    """SQLite's: reflection reads its columns whole; it stores what it is given."""

    __dialect__ = ("sqlite",)


class SQLite(Database):
    """SQLite: every online plan refused, with the reason."""

    __dialect__ = ("sqlite",)
    #: No state table, and no run's lock (no ``claim``): one writer at a time.
    state = StateSQL(create="", upsert="")

    def refuse_online(self, op_name: str) -> None:
        """Refused: SQLite has one writer at a time."""
        raise UnsupportedDatabase(
            f"{op_name}(online=True) is for PostgreSQL and MariaDB/MySQL, whose writers it "
            "keeps going; SQLite has one writer at a time: drop online=True"
        )
