"""Whether a migration's connection goes through a pooler or proxy (PostgreSQL).

A pooler in transaction mode (PgBouncer, RDS Proxy, Supavisor) hands each
transaction the next free server session. What an op keeps on its session
between transactions (a session setting, a temporary table) may then be
missing from its next transaction, or left to the application's. The ops
avoid such state, and refuse (or do without a session setting) where they
cannot: see ``_locks.py`` and the key conversion.
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Any

from sqlalchemy.engine import Connection

from .._dialects import dialect_row

__all__ = ["DIRECT_CONNECTION", "behind_a_proxy"]

#: What to do about it, for messages.
DIRECT_CONNECTION = (
    "run the migration on a direct connection to the server (not through "
    "PgBouncer, RDS Proxy, Supavisor or another pooler)"
)


def behind_a_proxy(connection: Connection) -> bool:
    """Whether something sits between this client and the server (a pooler, a proxy).

    Over TCP the server sees the client's own port; over a Unix socket the
    client is connected to one of the server's own socket files. A driver
    whose socket cannot be read counts as behind a proxy.
    """
    sql = dialect_row(connection.dialect).locks
    if sql is None or sql.peer is None:
        return False
    port, directories, server_port = connection.exec_driver_sql(sql.peer).one()
    mine = _client_socket(connection.connection.dbapi_connection)
    if mine is None:
        return True
    family, local, remote = mine
    if family == socket.AF_UNIX:
        files = {
            os.path.join(d.strip(), f".s.PGSQL.{server_port}")
            for d in str(directories).split(",")
            if d.strip()
        }
        return port is not None or remote not in files
    return port is None or not isinstance(local, tuple) or int(port) != int(local[1])


def _client_socket(dbapi: Any) -> tuple[int, Any, Any] | None:
    """(family, local address, remote address) of the driver's socket, or None."""
    driver = getattr(dbapi, "driver_connection", None) or dbapi  # async adapters
    transport = getattr(driver, "_transport", None)  # asyncpg
    if transport is not None:
        found = transport.get_extra_info("socket")
        return None if found is None else (found.family, found.getsockname(), found.getpeername())
    fd = None
    with contextlib.suppress(Exception):
        fd = driver.pgconn.socket  # psycopg 3
    if fd is None:
        with contextlib.suppress(Exception):
            fd = driver.fileno()  # psycopg2
    if fd is None:
        return None
    try:
        sock = socket.socket(fileno=os.dup(int(fd)))
    except (OSError, TypeError, ValueError):
        return None
    try:
        return sock.family, sock.getsockname(), sock.getpeername()
    except OSError:
        return None
    finally:
        sock.close()
