"""Keyset pagination on a ULID or UUIDv7 column: after / before / paginate / Page.

One module per job: :mod:`._sort` reads the ORDER BY and builds the keyset
conditions, :mod:`._cursor` is the cursor format, :mod:`._run` the planner
and its executors, :mod:`._page` the :class:`Page`.
"""

from __future__ import annotations

from .._settle import SettleError
from ._cursor import Cursor, InvalidCursor
from ._page import Page
from ._run import apaginate, paginate
from ._sort import PaginationError, ULIDColumn, after, before

__all__ = [
    "Cursor",
    "InvalidCursor",
    "Page",
    "PaginationError",
    "SettleError",
    "ULIDColumn",
    "after",
    "apaginate",
    "before",
    "paginate",
]
