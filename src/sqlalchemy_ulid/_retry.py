"""Which failed polls a feed retries, and how long it waits: :class:`Retry`.

A poll is a read: when it fails, nothing was delivered and the cursor has not
moved, so polling again from the same cursor can neither skip nor repeat a
row. Three failures are worth it:

* a dropped connection (the session killed, a server restart or failover),
  which SQLAlchemy reports with ``connection_invalidated`` (its
  ``is_disconnect`` check), an error while connecting, or a socket error
  (``OSError``) that the driver did not wrap;
* a deadlock (MariaDB/MySQL 1213, PostgreSQL 40P01): the server rolled the
  reader back to let another transaction go on;
* a MariaDB/MySQL lock wait timeout (1205): the locking read of
  ``settle="auto"`` waited longer than ``innodb_lock_wait_timeout`` for a
  writer's uncommitted row. The feed cannot go past that row anyway, so this
  one is retried after ``interval`` for as long as it lasts, not counted.

Anything else is a real error (a missing table, a bad statement, a refused
``settle=``) and is raised at once.
"""

from __future__ import annotations

import logging
import math
import numbers
from dataclasses import dataclass
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from ._checks import check_seconds
from ._settle import is_lock_wait_timeout

__all__ = ["Retry", "classify", "logger", "wrap_driver_error"]

#: follow() and afollow() log one line per retried poll here.
logger = logging.getLogger("sqlalchemy_ulid.follow")

_MYSQL_DEADLOCK = 1213  # ER_LOCK_DEADLOCK
_PG_DEADLOCK = "40P01"  # deadlock_detected

Failure = Literal["disconnect", "deadlock", "lock wait timeout"]


@dataclass(frozen=True)
class Retry:
    """How :func:`follow` retries a poll that failed on a dropped connection or a deadlock.

    After the ``n``-th failure in a row, the feed waits
    ``min(backoff * factor ** (n - 1), max_backoff)`` seconds, logs a warning
    on the ``sqlalchemy_ulid.follow`` logger, and polls again from its
    cursor. The ``attempts + 1``-th failure in a row is raised. A poll that
    succeeds resets the count. The defaults ride out about 40 s of outage
    (0.1, 0.2, 0.4 ... 6.4, then 10 s waits).

    Args:
        attempts: failed polls in a row to retry before raising; 0 raises
            the first one.
        backoff: seconds to wait before the first retry.
        factor: how much each wait grows over the one before (1 to 1000).
        max_backoff: the longest wait, in seconds.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: a negative count, or a wait that is not a finite number
            of seconds from 0 to a day.

    Example:
        >>> from sqlalchemy_ulid import Retry
        >>> policy = Retry(attempts=4, backoff=0.5, factor=3, max_backoff=2)
        >>> [policy.delay(n) for n in range(1, 5)]
        [0.5, 1.5, 2.0, 2.0]
    """

    attempts: int = 10
    backoff: float = 0.1
    factor: float = 2.0
    max_backoff: float = 10.0

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int):
            raise TypeError(f"attempts must be an int, not {type(self.attempts).__name__}")
        if self.attempts < 0:
            raise ValueError(f"attempts must be >= 0, got {self.attempts}")
        check_seconds("backoff", self.backoff, zero=True)
        check_seconds("max_backoff", self.max_backoff, zero=True)
        if isinstance(self.factor, bool) or not isinstance(self.factor, numbers.Real):
            raise TypeError(f"factor must be a number, not {type(self.factor).__name__}")
        if not 1 <= self.factor <= 1000:  # NaN compares false
            raise ValueError(f"factor must be a number from 1 to 1000, got {self.factor!r}")

    def delay(self, failures: int) -> float:
        """Seconds to wait after ``failures`` failed polls in a row (1 for the first)."""
        try:
            grown = float(self.backoff) * float(self.factor) ** max(failures - 1, 0)
        except OverflowError:
            grown = math.inf
        return min(grown, float(self.max_backoff))


def classify(error: BaseException) -> Failure | None:
    """What kind of retryable failure ``error`` is, or None for a real error."""
    if isinstance(error, OSError):
        # A socket error that no driver wrapped: asyncpg lets a refused
        # connection through as ConnectionRefusedError.
        return "disconnect"
    if not isinstance(error, sa.exc.DBAPIError):
        return None
    if is_lock_wait_timeout(error):
        return "lock wait timeout"
    orig = error.orig
    args: tuple[Any, ...] = tuple(getattr(orig, "args", ()))
    code = args[0] if args else None
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if code == _MYSQL_DEADLOCK or sqlstate == _PG_DEADLOCK:
        return "deadlock"
    if error.connection_invalidated:
        return "disconnect"
    # Opening a connection failed (refused, reset, the server starting up):
    # there is no statement, and no connection yet to call invalidated.
    if error.statement is None and isinstance(
        error, (sa.exc.OperationalError, sa.exc.InterfaceError)
    ):
        return "disconnect"
    return None


def wrap_driver_error(error: BaseException, dialect: Dialect) -> BaseException:
    """A raw driver error as SQLAlchemy's DBAPIError; any other error unchanged.

    SQLAlchemy does not wrap what the driver raises while it sets a
    connection's isolation level (``execution_options(isolation_level=...)``,
    or an engine's ``isolation_level`` execution option when a connection
    starts): on a connection the server has closed, PyMySQL's ``autocommit()``
    raises its own ``OperationalError`` there.
    """
    dbapi = getattr(dialect, "loaded_dbapi", None)
    base = getattr(dbapi, "Error", None)
    if base is None or not isinstance(error, base) or isinstance(error, sa.exc.SQLAlchemyError):
        return error
    assert isinstance(error, Exception)
    return sa.exc.DBAPIError.instance(
        None,
        None,
        error,
        base,
        connection_invalidated=dialect.is_disconnect(error, None, None),  # type: ignore[arg-type]
        dialect=dialect,
    )
