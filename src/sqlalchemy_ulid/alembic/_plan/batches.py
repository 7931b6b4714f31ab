"""The engine's batch loop: one resumable pass over a table, a batch a transaction.

Every online op that walks a table (the ``batch`` and ``fill`` steps of the
runner: the backfills, the copies of ``alter_ulid_storage``) hands
:func:`run_batches` one function, ``batch(limit)``, that does one batch of
at most ``limit`` rows in its own transaction and says how many rows it
did, or ``None`` when nothing is left. The loop around it is
the same for all of them:

* a batch that a deadlock or a row lock timeout stopped is tried again
  (:func:`retry_batch`), a few times, after a short pause;
* after every batch the ``progress`` callback gets a
  :class:`~.._backfill.BackfillProgress`, and Alembic's logger a line at
  most every :data:`LOG_EVERY` seconds;
* ``pause`` seconds between batches;
* sized by time, each batch aims at :data:`BATCH_SECONDS` (or the loop's
  own ``seconds``; at most double or half the last one, never below
  :data:`_MIN_BATCH` rows).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import sqlalchemy as sa

from .._backfill import BackfillProgress, error_code

__all__ = [
    "BATCH_SECONDS",
    "LOG_EVERY",
    "BatchLoop",
    "retry_batch",
    "run_batches",
]

_T = TypeVar("_T")

#: Alembic's own logger: ``alembic.ini`` shows its INFO lines.
logger = logging.getLogger("alembic.runtime.migration")

#: At most one progress line per this many seconds.
LOG_EVERY = 5.0
#: What a batch should take, in seconds, when sized by time.
BATCH_SECONDS = 0.15
_MIN_BATCH = 100
#: The most rows a batch takes, sized by time.
MAX_ROWS = 1_000_000
#: Tries of a batch that a deadlock or a row lock timeout stopped.
_BATCH_TRIES = 5
#: Deadlock and row lock timeout: PostgreSQL's SQLSTATEs, MariaDB's numbers;
#: and PostgreSQL's serialization failure: under a REPEATABLE READ or
#: SERIALIZABLE default (a role's, a database's) a batch that waited for a
#: writer's row fails, and runs again in a new snapshot.
_RETRIED = frozenset({"40P01", "55P03", "40001", 1213, 1205})


@dataclass(frozen=True)
class BatchLoop:
    """How :func:`run_batches` walks: names for progress, sizes, pacing."""

    #: the table and column (or step) named in progress reports
    table: str
    column: str
    #: rows a batch, to begin with
    size: int
    #: seconds between batches
    pause: float = 0.0
    progress: Callable[[BackfillProgress], object] | None = None
    #: rows still to do, as estimated before the first batch (0: unknown)
    total: int = 0
    #: adapt the size toward :data:`BATCH_SECONDS` a batch
    sized_by_time: bool = False
    #: the most rows a batch may take
    cap: int = MAX_ROWS
    #: the log line's first word
    what: str = "backfill"
    #: what a batch should take, sized by time (a batch that writers wait
    #: for whole, such as one holding a table's AUTO-INC lock, aims lower)
    seconds: float = BATCH_SECONDS


def run_batches(loop: BatchLoop, batch: Callable[[int], int | None]) -> tuple[int, int]:
    """Call ``batch(limit)`` until it returns ``None``; return (rows done, last size).

    ``batch`` returns the rows it did, which may be 0 for a batch whose rows
    were already done by someone else (the loop goes on).
    """
    size = loop.size
    started = last_log = time.monotonic()
    done = 0
    number = 0
    while True:
        began = time.monotonic()
        number += 1
        rows = retry_batch(f"{loop.what} batch {number}", partial(batch, min(size, loop.cap)))
        if rows is None:
            break
        done += rows
        now = time.monotonic()
        if loop.sized_by_time:
            size = _next_size(size, now - began, loop.cap, loop.seconds)
        report = _report(loop, done, max(loop.total, done), now - started)
        if loop.progress is not None:
            loop.progress(report)
        if now - last_log >= LOG_EVERY:
            logger.info("%s %s", loop.what, report)
            last_log = now
        if loop.pause:
            time.sleep(loop.pause)
    if done:
        logger.info("%s %s", loop.what, _report(loop, done, done, time.monotonic() - started))
    return done, size


def retry_batch(what: str, batch: Callable[[], _T]) -> _T:
    """Run one batch, again after a deadlock or a row lock timeout (``what``: for the log)."""
    for attempt in range(1, _BATCH_TRIES + 1):
        try:
            return batch()
        except sa.exc.DBAPIError as exc:
            if exc.connection_invalidated or error_code(exc) not in _RETRIED:
                raise
            if attempt == _BATCH_TRIES:
                raise
            logger.warning("%s: %s; retrying", what, exc.orig)
            time.sleep(0.05 * attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def _next_size(size: int, elapsed: float, cap: int, seconds: float = BATCH_SECONDS) -> int:
    """The next batch's rows: toward ``seconds`` a batch, at most double or half.

    Never fewer than ``_MIN_BATCH`` rows (a batch too small costs its round
    trips more than its rows), never more than ``cap``.
    """
    wanted = size * 2.0 if elapsed <= 0 else size * seconds / elapsed
    stepped = min(size * 2.0, max(size / 2.0, wanted))
    return min(cap, max(_MIN_BATCH, int(stepped)))


def _report(loop: BatchLoop, done: int, total: int, elapsed: float) -> BackfillProgress:
    rate = done / elapsed if elapsed > 0 else 0.0
    eta = (total - done) / rate if rate else None
    return BackfillProgress(loop.table, loop.column, done, total, rate, eta)
