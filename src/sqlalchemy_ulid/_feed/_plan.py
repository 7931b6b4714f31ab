"""A feed's plan: its state between polls, what to do next, and one poll.

Each poll runs on a connection (or session) of its own, so no transaction
stays open between polls: with an Engine the connection autocommits, which
is the isolation ``settle=`` needs on every server. A poll that fails on a
dropped connection, a deadlock or a lock wait timeout is retried from the
same cursor (see ``_retry``): it delivered nothing, so nothing is skipped or
repeated.

:class:`FeedPlan` decides between polls and does no I/O. A poll itself is
sync code on a sync Connection or Session (:func:`poll_connection`,
:func:`measure_for`, :func:`poll_session`): :func:`~._run.follow` calls it
directly, :func:`~._run.afollow` through ``run_sync``, so the two differ
only in how they connect and sleep.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.orm import Session

from .._checks import MAX_LIMIT, check_limit, check_seconds
from .._clock import ClockSkew, ClockSkewError, judge, measure_skew
from .._keys import column_expression, keys_of
from .._paging import Cursor, Page, ULIDColumn, paginate
from .._retry import Retry, classify, logger, wrap_driver_error
from .._settle import Settle, check_settle, margin_for, plan_horizon

__all__ = [
    "DEFAULT_RETRY",
    "CheckSkew",
    "FeedPlan",
    "measure_for",
    "poll_connection",
    "poll_session",
]

#: What ``check_skew=`` accepts.
CheckSkew = Literal["warn", "raise"] | None
DEFAULT_RETRY = Retry()
_SKEW_SAMPLES = 5
_SKEW_FRACTION = 0.5
_PING = "SELECT 1"


class FeedPlan:
    """A feed's state between polls, and what to do next (no I/O here).

    Every argument is checked when it is built, before any SQL.
    """

    def __init__(
        self,
        stmt: sa.Select[Any],
        column: ULIDColumn,
        after: Cursor | None,
        settle: Settle,
        margin: timedelta,
        limit: int,
        interval: float,
        retry: Retry | None,
        check_skew: CheckSkew,
    ) -> None:
        check_settle(settle, margin)
        check_limit(limit, MAX_LIMIT)
        self.interval = check_seconds("interval", interval)
        if retry is not None and not isinstance(retry, Retry):
            raise TypeError(f"retry must be a Retry or None, not {type(retry).__name__}")
        if check_skew not in ("warn", "raise", None):
            raise ValueError(f"check_skew must be 'warn', 'raise' or None, got {check_skew!r}")
        self.options: dict[str, Any] = {
            "limit": limit,
            "max_limit": limit,
            "settle": settle,
            "margin": margin,
        }
        self.cursor = _start(column, after)
        self.stmt = stmt
        self.column = column
        self.retry = retry
        self.margin = margin
        self.check_skew = check_skew
        # The skew check compares against the margin of "auto"; a fixed
        # window's share of skew is the caller's to judge.
        self.skew_pending = check_skew is not None and settle == "auto"
        self.failures = 0  # failed polls in a row
        #: the Engine (or Connection) the current poll runs on, once known
        self.bind: Engine | Connection | None = None

    def page(self, on: Connection | Session) -> Page[Any]:
        """The next page after the cursor, on a connection or session (no cursor move)."""
        return paginate(on, self.stmt, self.column, after=self.cursor, **self.options)

    def delivered(self, page: Page[Any]) -> float:
        """Move past ``page``; return the seconds to sleep before the next poll."""
        self.failures = 0
        self.cursor = page.next_cursor
        return 0.0 if page.has_more else self.interval

    def failed(self, error: BaseException) -> float:
        """Seconds to wait before polling again after ``error``; raises it if not to retry."""
        kind = classify(error)
        if kind is None:
            raise error
        first_line = str(error).split("\n", 1)[0]
        if kind == "lock wait timeout":
            # Waiting is what "auto" does behind a slow writer: not a failure.
            logger.warning(
                "follow(): a writer held a row longer than innodb_lock_wait_timeout; "
                "polling again from cursor %s in %g s: %s",
                self.cursor,
                self.interval,
                first_line,
            )
            return self.interval
        self.failures += 1
        attempts = 0 if self.retry is None else self.retry.attempts
        if self.retry is None or self.failures > attempts:
            raise error
        delay = self.retry.delay(self.failures)
        logger.warning(
            "follow(): poll failed (%s), retry %d of %d from cursor %s in %g s: %s",
            kind,
            self.failures,
            attempts,
            self.cursor,
            delay,
            first_line,
        )
        return delay

    def skew_check(self, dialect: Dialect) -> bool:
        """Whether to measure the skew now; raises SettleError where "auto" cannot run.

        Checked before the measuring: on a database where ``"auto"`` has
        nothing to read (SQLite), the first poll refuses without any SQL.
        """
        if self.skew_pending:
            plan_horizon("auto", self.margin, dialect, column_expression(self.column))
        return self.skew_pending

    def skew_measured(self, skew: ClockSkew, dialect: Dialect) -> None:
        """Warn or raise if this process's clock is too far from the server's."""
        self.skew_pending = False
        problem = judge(skew, margin_for(self.margin, dialect), _SKEW_FRACTION)
        if problem is None:
            return
        if self.check_skew == "raise":
            raise ClockSkewError(problem, skew)
        logger.warning("follow(): %s", problem)

    @contextmanager
    def driver_errors(self, bind: Engine | None = None) -> Iterator[None]:
        """Raise a raw driver error of the poll as SQLAlchemy's DBAPIError.

        SQLAlchemy leaves unwrapped what the driver raises while it sets a
        connection's isolation level (``execution_options(isolation_level=...)``,
        or an engine's option, when a connection starts) and while it resets
        it (when the connection is checked in): on a connection the server
        closed, PyMySQL's ``autocommit()`` raises its own ``OperationalError``.
        SQLAlchemy did not see that error, so it neither invalidated the
        connection nor recycled the pool, as it does after a disconnect it
        sees; a fresh pool replaces the old one (``dispose(close=False)``:
        connections in use are left alone), so no dead connection is handed
        out again. Wrap the whole poll, the connection's check-in included.
        """
        self.bind = bind
        try:
            yield
        except Exception as error:
            if self.bind is None:
                raise
            wrapped = wrap_driver_error(error, self.bind.dialect)
            if wrapped is error:
                raise
            self.bind.engine.dispose(close=False)
            raise wrapped from error


def _start(column: ULIDColumn, after: Cursor | None) -> str | None:
    """The first cursor as text in the column's own form (InvalidULID before SQL)."""
    if after is None:
        return None
    keys = keys_of(column)
    return keys.format(keys.parse(after))


def poll_connection(conn: Connection, plan: FeedPlan) -> Page[Any]:
    """One poll on a fresh connection of an Engine: made autocommit, skew checked once."""
    if plan.failures:
        # After a failure, a ping first: a dead pooled connection fails it
        # through SQLAlchemy, which then recycles the whole pool, so one retry
        # does not meet the next dead connection.
        conn.exec_driver_sql(_PING)
        conn.rollback()
    try:
        autocommit = conn.execution_options(isolation_level="AUTOCOMMIT")
    except Exception:
        conn.invalidate()  # not back to the pool, whose reset would fail too
        raise
    if plan.skew_check(autocommit.dialect):
        plan.skew_measured(measure_skew(autocommit, _SKEW_SAMPLES), autocommit.dialect)
    return plan.page(autocommit)


def measure_for(probe: Session, plan: FeedPlan) -> None:
    """Check the skew, if still pending, in a session of its own.

    The poll's own session must begin with the page, so the skew is measured
    in a session opened before it.
    """
    plan.bind = bind = probe.get_bind(clause=plan.stmt)
    if plan.skew_check(bind.dialect):
        conn = probe.connection()
        plan.skew_measured(measure_skew(conn, _SKEW_SAMPLES), conn.dialect)


def poll_session(session: Session, plan: FeedPlan) -> Page[Any]:
    """One poll in a fresh session of the caller's factory."""
    plan.bind = session.get_bind(clause=plan.stmt)
    return plan.page(session)
