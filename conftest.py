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
from pathlib import Path

_CONTRIB = Path(__file__).parent / "src" / "sqlalchemy_ulid" / "contrib"
# contrib module -> the package it adapts (when the names differ)
_PACKAGE = {"python_ulid": "ulid"}

collect_ignore = [
    str(path)
    for path in sorted(_CONTRIB.glob("*.py"))
    if path.stem != "__init__"
    and importlib.util.find_spec(_PACKAGE.get(path.stem, path.stem)) is None
]
