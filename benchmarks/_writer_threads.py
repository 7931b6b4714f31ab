"""Writer threads for the benchmarks of ops on live tables: each INSERT timed.

``Writers(engine, count, insert)`` runs ``count`` threads, each on its own
connection, calling ``insert(conn, key)`` (one statement and its commit)
with keys of its own, ``pause`` seconds apart, until the ``with`` block ends.
``waits`` holds how long each call took.

The threads are the test suite's (``tests/_writers.py``): one writers helper
for the tests and the benchmarks.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import _writers


class Writers(_writers.Writers):
    def __init__(
        self,
        engine: sa.Engine,
        count: int,
        insert: Callable[[sa.Connection, int], None],
        *,
        pause: float,
        join: float,
    ) -> None:
        super().__init__(engine, count, settle=0.0, join=join)
        self.insert = insert
        self.pause = pause

    @property
    def waits(self) -> list[float]:
        """How long each ``insert`` took."""
        return self.latencies

    def write(self, conn: sa.Connection, n: int) -> None:
        key = 100_000_000 + n * 10_000_000
        while not self.stop.is_set():
            with self.timing():
                self.insert(conn, key)
            key += 1
            time.sleep(self.pause)
