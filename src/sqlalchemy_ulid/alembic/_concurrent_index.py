"""``CREATE [UNIQUE] INDEX CONCURRENTLY`` that survives its own lock timeouts (PostgreSQL).

A concurrent build first commits the index to the catalog, then waits for
the transactions already writing the table. When that wait times out (or the
session is killed), the index stays behind, INVALID, under its name: running
the same statement again fails with "already exists". So every try here
first looks the name up: valid means done, INVALID means a leftover of an
earlier try, dropped before building again.

Writers never wait for a concurrent build, so each try may wait longer than
a metadata change would (``_INDEX_WAIT``).
"""

from __future__ import annotations

import contextlib
import logging

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ._inspect import run
from ._locks import LockTimeoutError, lock_safe_ddl

__all__ = ["build_index_concurrently"]

logger = logging.getLogger("alembic.runtime.migration")

#: ``CREATE INDEX CONCURRENTLY`` waits for every older transaction, but
#: writers never wait for it: it may wait this long for each try.
_INDEX_WAIT = 30.0
_INDEX_TRIES = 5


def index_valid(connection: Connection, table: str, name: str) -> bool | None:
    """Whether the index ``name`` on ``table`` (quoted, qualified) is valid; None: no such index."""
    valid = connection.execute(
        sa.text(
            "SELECT x.indisvalid FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
            "WHERE x.indrelid = to_regclass(:table) AND i.relname = :name"
        ),
        {"table": table, "name": name},
    ).scalar()
    return None if valid is None else bool(valid)


def build_index_concurrently(
    connection: Connection,
    create: str,
    *,
    table: str,
    name: str,
    qualified: str,
    lock_timeout: float,
) -> None:
    """Run ``create`` (a concurrent build of index ``name``) until the index is valid.

    ``table`` and ``qualified`` are the quoted, schema-qualified table and
    index names; ``name`` is the index's bare name as the catalog spells it.
    A try that times out is retried (up to ``_INDEX_TRIES``), after dropping
    the INVALID index it left; any other failure drops it and raises.
    """
    wait = max(lock_timeout, _INDEX_WAIT)
    drop = f"DROP INDEX CONCURRENTLY IF EXISTS {qualified}"
    for attempt in range(1, _INDEX_TRIES + 1):
        valid = index_valid(connection, table, name)
        if valid:
            return
        if valid is not None:
            # Left INVALID by a killed, failed or timed-out build.
            lock_safe_ddl(connection, [drop], lock_timeout=wait)
        try:
            lock_safe_ddl(connection, [create], lock_timeout=wait, attempts=1)
            return
        except LockTimeoutError:
            if attempt == _INDEX_TRIES:
                raise
            logger.warning(
                "%s: lock timeout (%gs), try %d of %d", create, wait, attempt, _INDEX_TRIES
            )
        except BaseException:
            if not connection.invalidated:
                with contextlib.suppress(sa.exc.SQLAlchemyError):
                    run(connection, drop)
            raise
