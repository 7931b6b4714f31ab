"""The page a paginate() call returns: its items, its neighbours' cursors, its total."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any, Generic, Literal, TypeVar, Union

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement
from sqlalchemy.sql.expression import Executable

from .._dialects import PagingSQL, dialects_with
from .._settle import Step

__all__ = ["Page", "Total", "check_total", "count_step"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class Page(Generic[_T]):
    """One page of rows in display order, with the cursors of its neighbours.

    Attributes:
        items: the rows, in display order (the statement's ORDER BY; without
            one ascending ids, or descending with ``descending=True``),
            whichever direction was paged.
        next_cursor: where the next page starts: pass it as ``after=``. The
            last item's cursor (its id; for a sort by several keys an opaque
            string) when rows follow the page in display order; on an
            empty page reached with ``before=``, that cursor when rows follow
            it; else None. With ``settle=`` it is never lost: the last item's
            id, or the cursor passed in when nothing was delivered.
        prev_cursor: where the previous page ends: pass it as ``before=``.
            The first item's id when rows precede the page; on an empty page
            reached with ``after=``, that cursor when rows precede it; else
            None (the first page). Always None with ``settle=``.
        has_more: more rows lie beyond this page in the direction of travel
            (for ``settle=``: more settled rows, so poll again at once).
        total: the number of rows asked for with ``total=``: exact, the
            planner's estimate, or a count stopped at the cap; else None.
        cursors: (computed on first use) one cursor per item, the position
            just after it: pass it as ``after=`` to continue after that item,
            or as ``before=`` to end before it. The last one equals
            ``next_cursor`` when ``has_more``. GraphQL connections need
            one per edge.

    Example:
        >>> page = Page(items=["a"], next_cursor=None, prev_cursor=None, has_more=False)
        >>> page.items
        ['a']
    """

    items: Sequence[_T]
    next_cursor: str | None
    prev_cursor: str | None
    has_more: bool
    total: int | None = None
    _positions: Callable[[], list[str]] | None = field(default=None, repr=False, compare=False)

    @cached_property
    def cursors(self) -> list[str]:
        """One cursor per item: the position of that item (see the attributes)."""
        if self._positions is None:
            if not self.items:
                return []
            raise TypeError("this Page was not made by paginate(): its items have no cursors")
        return self._positions()

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle (a page cache) with the cursors computed: the lazy function
        # holds the rows and the sort, which do not pickle.
        cursors = None if self._positions is None else tuple(self.cursors)
        fields = (self.items, self.next_cursor, self.prev_cursor, self.has_more, self.total)
        return _rebuild, (*fields, cursors)


def _rebuild(
    items: Sequence[Any],
    next_cursor: str | None,
    prev_cursor: str | None,
    has_more: bool,
    total: int | None,
    cursors: tuple[str, ...] | None,
) -> Page[Any]:
    positions: Callable[[], list[str]] | None = None
    if cursors is not None:
        positions = partial(list, cursors)
    return Page(items, next_cursor, prev_cursor, has_more, total, positions)


# -- totals ---------------------------------------------------------------------

#: What ``total=`` accepts: None, "exact", "estimate", or a cap (an int >= 1).
Total = Union[None, Literal["exact", "estimate"], int]  # noqa: UP007


class _Explain(Executable, ClauseElement):
    """``EXPLAIN <statement>``, with the statement's own bound parameters."""

    inherit_cache = False

    def __init__(self, prefix: str, statement: sa.Select[Any]) -> None:
        self.prefix = prefix
        self.statement = statement


@compiles(_Explain)
def _compile_explain(element: _Explain, compiler: SQLCompiler, **kw: Any) -> str:
    return element.prefix + compiler.process(element.statement, **kw)


def check_total(total: object, paging: Callable[[], PagingSQL]) -> None:
    """Refuse a bad ``total=`` before any SQL (an estimate where none exists too)."""
    if total is None or total == "exact":
        return
    if total == "estimate":
        if paging().explain is None:
            raise ValueError(
                "total='estimate' reads the planner's row estimate with EXPLAIN, which "
                f"exists on {dialects_with(lambda row: row.paging.explain)} only; use "
                "total='exact' or a cap such as total=10_000"
            )
        return
    if isinstance(total, bool) or not isinstance(total, int) or total < 1:
        raise ValueError(f"total must be None, 'exact', 'estimate' or an int >= 1, got {total!r}")


def count_step(stmt: sa.Select[Any], total: Total, paging: Callable[[], PagingSQL]) -> Step | None:
    """The statement that counts ``stmt``'s rows for ``total=``, and its reader."""
    if total is None:
        return None
    rows = stmt.order_by(None)
    if total == "estimate":
        facts = paging()
        assert facts.explain is not None
        assert facts.estimate is not None
        estimate = facts.estimate
        return _Explain(facts.explain, rows), lambda result: estimate(result.first())
    if not isinstance(total, str):
        rows = rows.limit(total)  # counts at most `total` rows
    count = sa.select(sa.func.count()).select_from(rows.subquery())
    return count, lambda result: int(result.scalar_one())
