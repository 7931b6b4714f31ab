"""Keyset pagination on a ULID or UUIDv7 column: after / before / paginate / Page.

One module per job: :mod:`._sort` reads the ORDER BY, :mod:`._nulls` decides
which keys can be NULL, :mod:`._exact` which key types a cursor carries,
:mod:`._wrap` which statements are paged as a subquery, :mod:`._unique`
whether the paging column is unique, :mod:`._keyset` builds the keyset
conditions, :mod:`._cursor` is the cursor format, :mod:`._plan` the planner,
:mod:`._run` its executors, :mod:`._page` the :class:`Page`, and
:mod:`._clauses` the one-column conditions.
"""

from __future__ import annotations

from .._errors import SettleError
from ._clauses import ULIDColumn, after, before
from ._cursor import Cursor, InvalidCursor
from ._page import Page
from ._run import apaginate, paginate
from ._sort import PaginationError

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
