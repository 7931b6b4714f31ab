"""How far this process's clock is from the database server's: :func:`check_clock_skew`.

``settle=`` compares ids, made from the writers' clocks, with a horizon read
from the server's clock, so the margin must cover the skew between them. A
sample reads the server's clock between two readings of ours: the server's
reading was taken somewhere in that round trip, so the true offset is the
server's reading minus our midpoint, give or take half the round trip. The
sample with the shortest round trip gives the tightest bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ._dialects import dialect_row
from ._errors import SettleError
from ._settle import DEFAULT_MARGIN, check_settle, margin_for

__all__ = ["ClockSkew", "ClockSkewError", "check_clock_skew", "measure_skew"]

_MAX_SAMPLES = 1000


@dataclass(frozen=True)
class ClockSkew:
    """One estimate of the skew between this process's clock and the server's.

    Attributes:
        offset: the server's clock minus this process's clock (positive: the
            server is ahead), measured at the middle of the round trip.
        round_trip: how long the sample that gave ``offset`` took.
    """

    offset: timedelta
    round_trip: timedelta

    @property
    def bound(self) -> timedelta:
        """The most the clocks can differ by: ``abs(offset) + round_trip / 2``."""
        return abs(self.offset) + self.round_trip / 2


class ClockSkewError(SettleError):
    """This process's clock is too far from the database server's for the margin.

    Attributes:
        skew: the measurement that failed the check.
    """

    def __init__(self, message: str, skew: ClockSkew) -> None:
        super().__init__(message)
        self.skew = skew


def measure_skew(
    conn: Connection, samples: int, clock: Callable[[], float] | None = None
) -> ClockSkew:
    """Sample the server's clock ``samples`` times on ``conn``; keep the shortest round trip."""
    # The server's clock as integer Unix microseconds, read when evaluated.
    query = dialect_row(conn.dialect).clock_us
    if query is None:
        raise SettleError(
            "check_clock_skew() supports PostgreSQL, MariaDB/MySQL and SQLite, "
            f"not {conn.dialect.name}"
        )
    now = time.time if clock is None else clock
    statement = sa.text(query)
    best: tuple[float, float] | None = None  # (round trip, offset) in seconds
    for _ in range(samples):
        sent = now()
        server = int(conn.execute(statement).scalar_one()) / 1e6
        received = now()
        round_trip = max(received - sent, 0.0)
        if best is None or round_trip < best[0]:
            best = (round_trip, server - (sent + received) / 2)
    assert best is not None
    return ClockSkew(offset=timedelta(seconds=best[1]), round_trip=timedelta(seconds=best[0]))


def check_samples(samples: object, fraction: object) -> None:
    """Validate check_clock_skew()'s counts before any SQL."""
    if isinstance(samples, bool) or not isinstance(samples, int):
        raise TypeError(f"samples must be an int, not {type(samples).__name__}")
    if not 1 <= samples <= _MAX_SAMPLES:
        raise ValueError(f"samples must be from 1 to {_MAX_SAMPLES}, got {samples}")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise TypeError(f"fraction must be a number, not {type(fraction).__name__}")
    if not 0 < fraction <= 1:  # NaN compares false
        raise ValueError(f"fraction must be > 0 and <= 1, got {fraction!r}")


def judge(skew: ClockSkew, margin: timedelta, fraction: float) -> str | None:
    """Why ``skew`` is too large for ``margin``, or None when it is within the fraction."""
    allowed = margin * fraction
    if skew.bound <= allowed:
        return None
    ahead = "ahead of" if skew.offset > timedelta(0) else "behind"
    return (
        f"the database server's clock is {abs(skew.offset).total_seconds():.3f} s {ahead} "
        f"this process's (round trip {skew.round_trip.total_seconds() * 1000:.1f} ms, so "
        f"up to {skew.bound.total_seconds():.3f} s apart): more than {fraction:g} of the "
        f"settle margin {margin.total_seconds():g} s. A writer whose clock is that far off "
        "can commit rows behind the horizon, and a feed would skip them. Synchronise the "
        "clocks (NTP/chrony), or pass a larger margin= (or settle= window)"
    )


def check_clock_skew(
    bind: Engine | Connection,
    margin: timedelta = DEFAULT_MARGIN,
    *,
    fraction: float = 0.5,
    samples: int = 5,
    clock: Callable[[], float] | None = None,
) -> ClockSkew:
    """Measure this process's clock against the database server's; raise if too far apart.

    ``settle=`` is sound only while the margin (or the fixed window) covers
    the skew between the clock that made each id and the server's clock.
    This reads the server's clock ``samples`` times, keeps the sample with
    the shortest round trip, and bounds the skew by ``abs(offset) +
    round_trip / 2``. Run it where the ids are made: in each writer process
    at start-up (it checks the clock of the process that calls it).
    :func:`follow` runs it on its first poll with ``settle="auto"``, which
    checks the consumer's clock. With asyncio, run it on an
    ``AsyncConnection``: ``await conn.run_sync(check_clock_skew, margin)``.

    Args:
        bind: an Engine (a connection is taken for the check) or a Connection.
        margin: the ``margin=`` (or fixed ``settle=`` window) to check
            against; by default the database's own (0.2 s on PostgreSQL,
            1 s on MariaDB/MySQL), as ``settle="auto"`` uses.
        fraction: the share of ``margin`` the skew bound may take.
        samples: how many round trips to take (1 to 1000).
        clock: this process's clock as Unix seconds; ``time.time`` by default
            (what :func:`new_ulid` reads). Tests inject a skewed one.

    Returns:
        The estimate, when its bound is within ``fraction * margin``.

    Raises:
        ClockSkewError: the bound exceeds ``fraction * margin``
            (a :class:`SettleError`, so a ``ValueError``).
        TypeError, ValueError: bad arguments, before any SQL.

    Example:
        >>> import sqlalchemy as sa
        >>> from datetime import timedelta
        >>> from sqlalchemy_ulid import check_clock_skew
        >>> engine = sa.create_engine("sqlite://")
        >>> skew = check_clock_skew(engine, margin=timedelta(seconds=1))
        >>> skew.bound < timedelta(seconds=0.5)
        True
    """
    check_settle("auto", margin)
    check_samples(samples, fraction)
    if clock is not None and not callable(clock):
        raise TypeError(f"clock must be a callable returning Unix seconds, not {clock!r}")
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            skew = measure_skew(conn, samples, clock)
    elif isinstance(bind, Connection):
        skew = measure_skew(bind, samples, clock)
    else:
        raise TypeError(f"bind must be an Engine or a Connection, not {type(bind).__name__}")
    problem = judge(skew, margin_for(margin, bind.dialect), fraction)
    if problem is not None:
        raise ClockSkewError(problem, skew)
    return skew
