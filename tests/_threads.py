"""Threads started together: the generators' tests of many threads at once.

``at_once(count, work)`` runs ``work(n)`` in ``count`` threads that start
together (a barrier), and returns their results in order.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def at_once(
    count: int, work: Callable[[int], T], *, switch: float | None = None, timeout: float = 60
) -> list[T]:
    """``work(n)`` for each ``n < count``, in threads started together; the results.

    ``switch``: the interpreter's thread switch interval meanwhile (``1e-6``:
    switch as often as it can). What a thread raises is raised here; one
    still running after ``timeout`` seconds fails.
    """
    start = threading.Barrier(count, timeout=30)
    results: list[T | None] = [None] * count
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            start.wait()
            results[n] = work(n)
        except BaseException as exc:  # raised below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    old_interval = sys.getswitchinterval()
    if switch is not None:
        sys.setswitchinterval(switch)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout)
    finally:
        sys.setswitchinterval(old_interval)
    assert not any(thread.is_alive() for thread in threads)
    if errors:
        raise errors[0]
    return results  # type: ignore[return-value]  # every thread set its own
