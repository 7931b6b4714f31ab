"""Planning a page: the checks (all before any SQL) and the statements to run.

:func:`plan` reads the statement, its sort and the cursor, and returns a
:class:`Plan`: the page's statement (ordered, limited, from the cursor
inclusive), how to read a row's id and cursor, and the statements that may
follow (the probe for a page behind, the count). :mod:`._run` runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect, Result, Row
from sqlalchemy.sql.elements import ColumnElement

from .._checks import check_limit
from .._codec import InvalidULID
from .._dialects import PagingSQL, dialect_row
from .._errors import CursorSortMismatch, InvalidInput
from .._keys import Keys, KeyValue, column_expression, keys_of
from .._settle import (
    DEFAULT_MARGIN,
    Horizon,
    Settle,
    Step,
    check_settle,
    plan_horizon,
)
from ._cursor import Cursor, looks_keyset
from ._fetch import all_rows
from ._page import Total, check_total, count_step
from ._sort import (
    Sort,
    ULIDColumn,
    _reader,
    may_be_null,
    paged_statement,
    read_sort,
    sort_exprs,
)
from ._unique import check_unique

if TYPE_CHECKING:
    # sqlalchemy.ext.asyncio needs greenlet, which SQLAlchemy 2.1 no longer
    # installs: the sync path must import without it.
    pass

__all__ = ["Plan", "known", "paging_of", "plan_page"]


@dataclass(frozen=True)
class Plan:
    statement: sa.Select[Any]  # ordered and limited; the horizon is added later
    column: ColumnElement[Any]
    keys: Keys
    value_of: Callable[[Row[Any]], Any]  # the paging column of a row, as read
    id_of: Callable[[Row[Any]], str]  # the paging column of a row, as text
    position_of: Callable[[Row[Any]], str]  # the cursor of a row
    scalar: bool
    backward: bool  # paging with before=: the SQL ran against display order
    cursor: str | None  # the cursor's canonical text
    cursor_id: str | None  # the paging column's value in the cursor, as text
    # "Any row on the other side of the cursor?", asked only when the page,
    # fetched from the cursor inclusive, does not start with the cursor's row
    # (built only then: most pages never need it).
    probe: Callable[[], sa.Select[Any]] | None
    limit: int
    horizon: Horizon | None
    count: Step | None  # total=: the COUNT or the EXPLAIN, after the page
    rows: Callable[[Result[Any]], Sequence[Row[Any]]] = all_rows  # a result's rows, as read
    items: Callable[[Sequence[Row[Any]]], list[Any]] = list  # rows as the caller sees them


def plan_page(
    stmt: sa.Select[Any],
    column: ULIDColumn,
    after_cursor: Cursor | None,
    before_cursor: Cursor | None,
    limit: int,
    descending: bool | None,
    orm: bool,
    *,
    max_limit: int = 1000,
    settle: Settle | None = None,
    margin: timedelta = DEFAULT_MARGIN,
    dialect: Callable[[], Dialect] | None = None,
    total: Total = None,
) -> Plan:
    # Every check runs before any SQL: bad cursors and limits are the
    # caller's input and must fail without touching the database.
    if after_cursor is not None and before_cursor is not None:
        raise InvalidInput("pass after= or before=, not both")
    limit = check_limit(limit, max_limit)  # the rule follow() shares (a cap of 2**31 - 1)
    if not isinstance(stmt, sa.Select):
        raise TypeError(f"paginate() pages a select(), not {type(stmt).__name__}")
    if descending is not None and not isinstance(descending, bool):
        raise TypeError(f"descending must be None, True or False, not {descending!r}")
    paging = paging_of(dialect)
    check_total(total, paging)
    cursor = after_cursor if before_cursor is None else before_cursor
    expr = column_expression(column)
    keys = keys_of(expr)
    origin = stmt, expr  # the caller's: its uniqueness is checked on it
    stmt, expr = paged_statement(stmt, expr, descending, orm)
    orm_descending, sort = read_sort(stmt, expr, descending, orm, known(dialect))
    if sort is not None:
        if settle is not None:
            raise ValueError(
                "settle= follows a feed in id order: order the statement by the paging "
                "column alone (or not at all)"
            )
        backward = before_cursor is not None
        return _sorted_plan(
            stmt, sort, expr, keys, cursor, backward, limit, orm, total, paging, origin
        )
    descending = orm_descending
    value = None if cursor is None else _parse_id(keys, cursor)
    if settle is not None:
        check_settle(settle, margin)
        if before_cursor is not None or descending:
            raise ValueError(
                "settle= follows a feed forward: page with after= in ascending order "
                "(no before=, no descending=True)"
            )
    ulid_of, scalar = _reader(stmt, expr, orm)
    check_unique(*origin, ())
    horizon = None
    if settle is not None:
        assert dialect is not None
        horizon = plan_horizon(settle, margin, dialect(), expr)

    count = count_step(stmt, total, paging)
    if may_be_null(expr, stmt):
        # NULL has no place in id order: such rows are never paged.
        stmt = stmt.where(expr.is_not(None))
    backward = before_cursor is not None
    # Paging backward runs the SQL in the opposite order, nearest rows first,
    # and the page is reversed into display order afterwards.
    sql_descending = descending != backward
    paged = stmt.order_by(None).order_by(expr.desc() if sql_descending else expr.asc())
    probe = None
    fetch = limit + 1
    if value is not None and settle is None:
        # Whether a page lies behind this one: the cursor's own row usually
        # still exists, so fetch from it inclusive and look. Only when it is
        # gone (deleted, filtered out, made up) does a second query ask
        # whether any row lies on the other side of the cursor.
        bound = keys.bind(expr, value)
        paged = paged.where(expr <= bound if sql_descending else expr >= bound)
        fetch += 1
        behind = expr >= bound if sql_descending else expr <= bound

        def probe() -> sa.Select[Any]:
            return sa.select(stmt.order_by(None).where(behind).exists())

    elif value is not None:
        bound = keys.bind(expr, value)
        paged = paged.where(expr < bound if sql_descending else expr > bound)
    text = None if value is None else keys.format(value)

    def id_of(row: Row[Any]) -> str:
        return keys.format(ulid_of(row))

    return Plan(
        statement=paged.limit(fetch),
        column=expr,
        keys=keys,
        value_of=ulid_of,
        id_of=id_of,
        position_of=id_of,
        scalar=scalar,
        backward=backward,
        cursor=text,
        cursor_id=text,
        probe=probe,
        limit=limit,
        horizon=horizon,
        count=count,
    )


def _sorted_plan(
    stmt: sa.Select[Any],
    sort: Sort,
    expr: ColumnElement[Any],
    keys: Keys,
    cursor: Cursor | None,
    backward: bool,
    limit: int,
    orm: bool,
    total: Total,
    paging: Callable[[], PagingSQL],
    origin: tuple[sa.Select[Any], ColumnElement[Any]],
) -> Plan:
    """The plan of a page sorted by several keys: the same shape, keyset cursors."""
    values = None if cursor is None else sort.parse(cursor, keys)  # InvalidCursor, no SQL
    ulid_of, scalar = _reader(stmt, expr, orm)
    preceding = [key.expr for key in sort.keyset.keys[:-1]]
    if origin[0] is not stmt:  # paged as a subquery: the caller's own keys
        preceding = sort_exprs(origin[0])[:-1]
    check_unique(*origin, preceding)
    count = count_step(stmt, total, paging)
    base, paged = stmt, sort.statement
    if may_be_null(expr, stmt):
        base, paged = stmt.where(expr.is_not(None)), paged.where(expr.is_not(None))
    paged = paged.order_by(None).order_by(*sort.keyset.order_by(reverse=backward))
    probe, fetch, text, cursor_id = None, limit + 1, None, None
    if values is not None:
        binds = sort.binds(values, keys)
        paged = paged.where(sort.keyset.past(binds, reverse=backward, inclusive=True))
        fetch += 1

        def probe() -> sa.Select[Any]:
            behind = sort.keyset.past(binds, reverse=not backward, inclusive=False)
            return sa.select(base.order_by(None).where(behind).exists())

        cursor_id = keys.format(values[-1])
        assert isinstance(cursor, str)
        text = cursor

    def id_of(row: Row[Any]) -> str:
        return keys.format(ulid_of(row))

    def position_of(row: Row[Any]) -> str:
        return sort.cursor(row, id_of(row))

    return Plan(
        statement=paged.limit(fetch),
        column=expr,
        keys=keys,
        value_of=ulid_of,
        id_of=id_of,
        position_of=position_of,
        scalar=scalar,
        backward=backward,
        cursor=text,
        cursor_id=cursor_id,
        probe=probe,
        limit=limit,
        horizon=None,
        count=count,
        rows=all_rows if sort.shown is None else sort.shown.rows,
        items=list if sort.shown is None else sort.shown.items,
    )


def _parse_id(keys: Keys, cursor: Cursor) -> KeyValue:
    """A bare-id cursor, strictly; a multi-key cursor here is one of another sort."""
    try:
        return keys.parse(cursor)
    except InvalidULID:
        if isinstance(cursor, str) and looks_keyset(cursor):
            raise CursorSortMismatch(
                "the cursor was made for a sort by several keys; this statement is in "
                "id order (ordered by the paging column alone, or not at all)"
            ) from None
        raise


def known(dialect: Callable[[], Dialect] | None) -> Callable[[], Dialect]:
    """The dialect, for checks that need it; only called once a plan needs it."""

    def lookup() -> Dialect:
        assert dialect is not None
        return dialect()

    return lookup


def paging_of(dialect: Callable[[], Dialect] | None) -> Callable[[], PagingSQL]:
    """The dialect's paging facts, looked up only when a plan needs them."""
    lookup = known(dialect)
    return lambda: dialect_row(lookup()).paging
