"""The page a paginate() call returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Page"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class Page(Generic[_T]):
    """One page of rows in display order, with the cursors of its neighbours.

    Attributes:
        items: the rows, in display order (ascending ids, or descending with
            ``descending=True``), whichever direction was paged.
        next_cursor: where the next page starts: pass it as ``after=``. The
            last item's id when rows follow the page in display order; on an
            empty page reached with ``before=``, that cursor when rows follow
            it; else None. With ``settle=`` it is never lost: the last item's
            id, or the cursor passed in when nothing was delivered.
        prev_cursor: where the previous page ends: pass it as ``before=``.
            The first item's id when rows precede the page; on an empty page
            reached with ``after=``, that cursor when rows precede it; else
            None (the first page). Always None with ``settle=``.
        has_more: more rows lie beyond this page in the direction of travel
            (for ``settle=``: more settled rows, so poll again at once).

    Example:
        >>> page = Page(items=["a"], next_cursor=None, prev_cursor=None, has_more=False)
        >>> page.items
        ['a']
    """

    items: Sequence[_T]
    next_cursor: str | None
    prev_cursor: str | None
    has_more: bool
