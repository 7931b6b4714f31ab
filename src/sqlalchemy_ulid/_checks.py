"""Argument checks run before any SQL: page sizes, seconds, binds.

A page size goes into the page's LIMIT (plus two rows: the cursor's own and
the one past the page). PostgreSQL binds an int over 2**63 as NUMERIC and
refuses it as a LIMIT; MariaDB refuses a literal over 2**64. Capping every
page size at the largest signed 32-bit int keeps the LIMIT an ordinary
integer on every server, far above any page a reader can hold in memory.
"""

from __future__ import annotations

import math
import numbers

from sqlalchemy.engine import Connection, Dialect, Engine

from ._errors import InvalidLimit

#: The largest ``limit=`` / ``max_limit=`` accepted: 2**31 - 1.
MAX_LIMIT = 2**31 - 1

#: The longest sleep accepted, in seconds (one day): ``interval=`` and
#: retry backoffs. ``threading.Event.wait`` overflows not far above a few
#: hundred years, and a feed polled less than daily is not a feed.
MAX_SECONDS = 86_400.0


def check_limit(limit: object, max_limit: object) -> int:
    """Return ``limit`` if it is an int from 1 to ``max_limit`` (at most MAX_LIMIT).

    Raises :class:`InvalidLimit` (a ValueError) for anything else, ``True``, ``"10"`` and ``10**20``
    included: a page size usually comes from a query string.
    """
    if (
        isinstance(max_limit, bool)
        or not isinstance(max_limit, int)
        or not 1 <= max_limit <= MAX_LIMIT
    ):
        raise ValueError(f"max_limit must be an int from 1 to {MAX_LIMIT}, got {max_limit!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= max_limit:
        raise InvalidLimit(
            f"limit must be an int from 1 to max_limit={max_limit}, got {limit!r}", limit
        )
    return limit


def check_seconds(name: str, value: object, *, zero: bool = False) -> float:
    """Return ``value`` as a float of seconds: finite, > 0 (or >= 0), at most a day.

    Raises TypeError for a non-number (a bool included) and ValueError for
    NaN, an infinity, a negative number, zero (unless ``zero``) or more than
    :data:`MAX_SECONDS`.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float
        seconds = math.inf
    low_ok = seconds >= 0 if zero else seconds > 0
    if not (math.isfinite(seconds) and low_ok and seconds <= MAX_SECONDS):
        low = ">= 0" if zero else "> 0"
        raise ValueError(
            f"{name} must be a finite number of seconds {low} and at most "
            f"{MAX_SECONDS:g}, got {value!r}"
        )
    return seconds


def check_dialect(func: str, dialect: object) -> None:
    """Refuse, with TypeError, anything but a SQLAlchemy dialect or a dialect name."""
    if not isinstance(dialect, (str, Dialect)):
        raise TypeError(
            f"{func}() takes a SQLAlchemy dialect or its name (e.g. 'postgresql'), "
            f"not {type(dialect).__name__}"
        )


def check_connection(func: str, connection: object) -> None:
    """Refuse, with TypeError, anything but a SQLAlchemy ``Connection``."""
    if not isinstance(connection, Connection):
        raise TypeError(
            f"{func}() takes a SQLAlchemy Connection (engine.connect()), not "
            f"{type(connection).__name__}; with asyncio, await conn.run_sync({func})"
        )


def check_engine(func: str, engine: object) -> None:
    """Refuse, with TypeError, anything but a SQLAlchemy ``Engine``."""
    if not isinstance(engine, Engine):
        raise TypeError(
            f"{func}() takes a SQLAlchemy Engine (sa.create_engine(url)), not "
            f"{type(engine).__name__}; for an AsyncEngine pass async_engine.sync_engine"
        )
