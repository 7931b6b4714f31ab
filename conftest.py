"""Repository-level pytest settings: doctest collection of the integrations.

``testpaths`` includes ``src`` so the public API's docstring examples run.
Each ``sqlalchemy_ulid.contrib.<name>`` module imports its third-party package
at the top; where that package is not installed (the floor job, which runs
without the ``tests-integrations`` extra because those packages need newer
SQLAlchemy releases) the module's doctests cannot be collected, so they are
left out there. The integrations' own tests skip with the reason.
"""

from __future__ import annotations

import importlib.util
import linecache
from collections.abc import Callable
from pathlib import Path

_CONTRIB = Path(__file__).parent / "src" / "sqlalchemy_ulid" / "contrib"
# contrib module -> the package it adapts (when the names differ)
_PACKAGE = {"python_ulid": "ulid", "typeid_python": "typeid"}

collect_ignore = [
    str(path)
    for path in sorted(_CONTRIB.glob("*.py"))
    if path.stem != "__init__"
    and importlib.util.find_spec(_PACKAGE.get(path.stem, path.stem)) is None
]


def _tolerate_concurrent_removal(check: Callable[[str | None], None]) -> Callable[..., None]:
    """Wrap ``linecache.checkcache`` so an entry removed while it runs is not an error.

    SQLAlchemy 2.1 registers the source of the ``__init__`` it generates for
    each mapped class in ``linecache`` and removes the entry when the class is
    garbage collected. ``checkcache()`` lists the keys and then reads each one;
    a collection in between (the doctests' mapped classes going away) makes it
    raise ``KeyError`` for a key it listed. Checking again is correct: the
    entry that vanished needs no check.
    """

    def checkcache(filename: str | None = None) -> None:
        for _ in range(10):
            try:
                check(filename)
            except KeyError:
                continue
            return

    return checkcache


linecache.checkcache = _tolerate_concurrent_removal(linecache.checkcache)
