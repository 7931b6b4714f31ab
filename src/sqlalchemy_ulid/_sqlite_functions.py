"""Define a Python function on every SQLite connection of one engine, whenever asked.

SQLite has no server-side generator: ``gen_ulid()`` / ``gen_uuid7()`` are
Python functions defined on each DBAPI connection. A ``connect`` listener
alone misses the connections an engine opened before it was attached (an
engine made at import time has usually connected by the time the
application registers), and "no such function" appears at the next INSERT.
So the function is also defined, once per DBAPI connection, before the
first statement a connection runs after the call: pooled connections and
connections checked out at the time of the call included.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

__all__ = ["SQLiteFunction"]


class SQLiteFunction:
    """One SQL function and how to define it on a DBAPI connection."""

    def __init__(self, name: str, define: Callable[[Any], None]) -> None:
        self.name = name
        self.define = define
        self._key = f"sqlalchemy_ulid.function.{name}"

    def register(self, engine: Engine) -> None:
        """Attach to ``engine`` (once, however often called)."""
        if not event.contains(engine, "connect", self._on_connect):
            event.listen(engine, "connect", self._on_connect)
            event.listen(engine, "before_cursor_execute", self._before_execute)

    def _mark(self, dbapi_connection: Any, info: dict[Any, Any]) -> None:
        self.define(dbapi_connection)
        info[self._key] = True

    def _on_connect(self, dbapi_connection: Any, connection_record: Any) -> None:
        self._mark(dbapi_connection, connection_record.info)

    def _before_execute(self, conn: Any, *args: Any) -> None:
        # conn.connection.info is the DBAPI connection's own dict: one lookup
        # per statement once the function is there.
        proxied = conn.connection
        if self._key not in proxied.info:
            self._mark(proxied.dbapi_connection, proxied.info)
