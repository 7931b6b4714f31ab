"""Following a feed: poll :func:`paginate` with ``settle=``, yield pages, sleep when caught up.

:mod:`._plan` holds a feed's state between polls and decides what comes next
(no I/O), and runs one poll on a sync Connection or Session; :mod:`._run`
holds :func:`follow` and :func:`afollow`, two small executors of it (the
async one runs the same sync poll through ``run_sync``).
"""

from __future__ import annotations

from ._run import afollow, follow

__all__ = ["afollow", "follow"]
