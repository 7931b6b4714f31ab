"""Writer threads for the benchmarks of ops on live tables: each INSERT timed.

``Writers(engine, count, insert)`` runs ``count`` threads, each on its own
connection, calling ``insert(conn, key)`` (one statement and its commit)
with keys of its own, ``pause`` seconds apart, until the ``with`` block ends.
``waits`` holds how long each call took.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import sqlalchemy as sa


class Writers:
    def __init__(
        self,
        engine: sa.Engine,
        count: int,
        insert: Callable[[sa.Connection, int], None],
        *,
        pause: float,
        join: float,
    ) -> None:
        self.engine = engine
        self.insert = insert
        self.pause = pause
        self.join = join
        self.waits: list[float] = []
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._write, args=(100_000_000 + n * 10_000_000,))
            for n in range(count)
        ]

    def _write(self, key: int) -> None:
        with self.engine.connect() as conn:
            while not self.stop.is_set():
                started = time.perf_counter()
                self.insert(conn, key)
                self.waits.append(time.perf_counter() - started)
                key += 1
                time.sleep(self.pause)

    def __enter__(self) -> Writers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=self.join)
