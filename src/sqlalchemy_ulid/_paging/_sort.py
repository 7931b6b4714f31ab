"""The sort: read a statement's ORDER BY into its keys, and find the keys in the row.

The ORDER BY is the sort, and its last key is the paging column, the unique
tiebreaker. A sort on the paging column alone (or none) keeps bare-id
cursors; a longer one becomes a :class:`~._keyset.Keyset`, after these
checks, all before any SQL:

* each key is a column expression (not a select-list position) whose value
  comes back with the row: selected as a column (under any label), or added
  as a hidden column that the caller's rows never show (:mod:`._fetch`);
* a cursor can carry its value exactly, read and bound as the type the
  database computes and stores (:mod:`._exact`, :mod:`._computed`);
* whether it can be NULL, from the statement as selected (:mod:`._nulls`),
  and where NULLs sort (explicit, or the database's own order).

A statement whose sort cannot go in a WHERE is paged as a subquery
(:mod:`._wrap`); the paging column's uniqueness is :mod:`._unique`'s, and
:func:`after` and :func:`before` are in :mod:`._clauses`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Dialect, Row
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import (
    BindParameter,
    ColumnElement,
    False_,
    Label,
    Null,
    TextClause,
    True_,
    UnaryExpression,
)

from .._codec import InvalidULID
from .._dialects import dialect_row
from .._errors import InvalidInput
from .._keys import Keys
from ._clauses import ULIDColumn, after, before
from ._cursor import MAX_TEXT, InvalidCursor, decode, encode, fingerprint
from ._exact import bind_type, check_key_type, checked_value, key_type
from ._fetch import Reader, Shown, find, key_readers, selected
from ._keyset import Keyset, SortKey
from ._nulls import may_be_null, outer_joined
from ._wrap import may_need_subquery, paged_form

__all__ = ["PaginationError", "ULIDColumn", "after", "before", "may_be_null"]


class PaginationError(InvalidInput):
    """The statement cannot be paged without skipping or repeating rows.

    It has its own ORDER BY, LIMIT or OFFSET, does not select the paging
    column, or pages on a column that is not unique in its result. A
    :class:`ValueError`, so code that catches bad input catches this too.
    """


_DIRECTIONS = {operators.asc_op: False, operators.desc_op: True}
_NULLS: dict[Any, Literal["first", "last"]] = {
    operators.nulls_first_op: "first",
    operators.nulls_last_op: "last",
}
# Private classes: ORDER BY a Label object (or a label's name as a string) is
# stored wrapped in these (pinned in tests/test_private_api.py).
_LABEL_REFERENCE = sa.sql.elements._label_reference
_TEXT_LABEL_REFERENCE = sa.sql.elements._textual_label_reference


@dataclass(frozen=True)
class _OrderKey:
    order: ColumnElement[Any]
    expr: ColumnElement[Any]
    descending: bool
    nulls: Literal["first", "last"] | None


def _order_keys(stmt: sa.Select[Any]) -> list[_OrderKey]:
    """Read the ORDER BY of ``stmt`` into its keys (refusing what is not one)."""
    # Private attributes: Select has no public accessors for its ORDER BY or
    # row limits (checked against SQLAlchemy 2.0 and 2.1).
    if stmt._has_row_limiting_clause:
        raise PaginationError(
            "the statement already has a LIMIT, OFFSET or FETCH; paginate() adds its own "
            "LIMIT, so pass the statement without one"
        )
    keys = []
    for clause in stmt._order_by_clauses:
        element: Any = clause
        descending, nulls = False, None
        for _ in range(4):
            if isinstance(element, _LABEL_REFERENCE):
                element = element.element
            elif isinstance(element, UnaryExpression) and element.modifier in _NULLS:
                nulls, element = _NULLS[element.modifier], element.element
            elif isinstance(element, UnaryExpression) and element.modifier in _DIRECTIONS:
                descending, element = _DIRECTIONS[element.modifier], element.element
        expr = element.element if isinstance(element, Label) else element
        if _is_position(expr):
            raise PaginationError(
                f"the statement is ordered by {clause}, a position in the select list, "
                "which a cursor's WHERE cannot compare: order by the column or expression "
                "itself"
            )
        if isinstance(element, _TEXT_LABEL_REFERENCE) or not isinstance(expr, ColumnElement):
            raise PaginationError(
                f"the statement is ordered by {clause}, which is not a column expression: "
                "order by the column or expression itself (not its name as text)"
            )
        if isinstance(expr, (BindParameter, True_, False_, Null)):
            raise PaginationError(
                f"the statement is ordered by {clause}, a constant: it orders nothing, and "
                "where a driver or dialect writes it as an integer (a bound value on "
                "MariaDB/MySQL, true on SQLite) the database reads a position in the "
                "select list (ORDER BY 1 sorts by the first column, which the cursor's "
                "WHERE does not compare): remove it, or sort by a column"
            )
        if isinstance(element, Label) and _names(stmt).count(element.name) > 1:
            raise PaginationError(
                f"the statement is ordered by the label {element.name!r}, which names more "
                "than one selected column: the database sorts by whichever it picks (or "
                "refuses), not by the expression a cursor compares; give each label its "
                "own name"
            )
        keys.append(_OrderKey(element, expr, descending, nulls))
    return keys


def _names(stmt: sa.Select[Any]) -> list[str | None]:
    """The names of the selected columns, as an ORDER BY by name would find them."""
    return [getattr(c, "name", None) for c in stmt.selected_columns]


def _is_position(expr: Any) -> bool:
    """Whether an ORDER BY key is a select-list position (``ORDER BY 2``)."""
    if isinstance(expr, sa.ColumnClause) and expr.is_literal:
        return expr.name.strip().isdigit()
    return isinstance(expr, TextClause) and expr.text.strip().isdigit()


@dataclass(frozen=True)
class Sort:
    """A sort by several keys: its SQL, and how its cursors are read and written.

    Attributes:
        keyset: the keys (the paging column last) and their SQL.
        statement: the caller's statement, with the keys that the row would
            not show added as extra columns.
        readers: how each key but the last is read from a row.
        shown: takes the hidden key columns off the rows (None: none to take).
        fingerprint: the hash of the sort that its cursors carry.
    """

    keyset: Keyset
    statement: sa.Select[Any]
    readers: tuple[Reader, ...]
    fingerprint: bytes
    shown: Shown | None = None

    def cursor(self, row: Row[Any], id_text: str) -> str:
        """The cursor of a row: its key values, the paging column's as text."""
        try:
            text = encode(self.fingerprint, [read(row) for read in self.readers] + [id_text])
        except TypeError as exc:
            raise PaginationError(f"{exc}: sort by another expression") from None
        if len(text) > MAX_TEXT:
            # Refused here, loudly, rather than by the next call's decode().
            raise PaginationError(
                f"the sort keys of a row make a cursor of {len(text)} characters, more "
                f"than the {MAX_TEXT} a cursor may have: sort by a shorter expression "
                "(such as a prefix of the long key)"
            )
        return text

    def parse(self, cursor: object, keys: Keys) -> list[Any]:
        """The key values of a cursor of this sort, typed for binding (no SQL)."""
        values = decode(cursor, self.fingerprint, len(self.keyset.keys))
        *head, last = values
        for index, (key, value) in enumerate(zip(self.keyset.keys, head, strict=False)):
            head[index] = checked_value(key, value, self.keyset.dialect)
        if not isinstance(last, str):
            raise InvalidCursor("the cursor is malformed (truncated or altered)")
        try:
            return [*head, keys.parse(last)]
        except InvalidULID:
            raise InvalidCursor("the cursor is malformed (truncated or altered)") from None

    def binds(self, values: Sequence[Any], keys: Keys) -> list[ColumnElement[Any] | None]:
        """One bound parameter per key, of the key's own type (None for NULL)."""
        *head, last = self.keyset.keys
        binds: list[ColumnElement[Any] | None] = [
            None
            if value is None
            else sa.bindparam(None, value, type_=bind_type(key.type), unique=True)
            for key, value in zip(head, values, strict=False)
        ]
        return [*binds, keys.bind(last.expr, values[-1])]


def sort_exprs(stmt: sa.Select[Any]) -> list[ColumnElement[Any]]:
    """The expressions of the statement's ORDER BY, in order."""
    return [key.expr for key in _order_keys(stmt)]


def paged_statement(
    stmt: sa.Select[Any], column: ColumnElement[Any], descending: bool | None, orm: bool
) -> tuple[sa.Select[Any], ColumnElement[Any]]:
    """The statement a page runs, and its paging column: ``stmt``, or its subquery.

    A statement whose sort cannot go in a WHERE (GROUP BY with an aggregate
    key, window functions, DISTINCT ON) is paged as a subquery (see
    :mod:`._wrap`), or refused before any SQL.
    """
    if not may_need_subquery(stmt):
        return stmt, column
    order = _order_keys(stmt)
    if order and not order[-1].expr.compare(column):
        return stmt, column  # read_sort refuses it, naming the paging column
    spec = [(key.expr, key.descending, key.nulls) for key in order]
    paged, paged_column = paged_form(
        stmt, spec or [(column, bool(descending), None)], orm, PaginationError
    )
    return (stmt, column) if paged is stmt else (paged, paged_column)


def read_sort(
    stmt: sa.Select[Any],
    column: ColumnElement[Any],
    descending: bool | None,
    orm: bool,
    dialect: Callable[[], Dialect],
) -> tuple[bool, Sort | None]:
    """Read the sort of ``stmt``: its direction, and its :class:`Sort`.

    The Sort is None when the statement is ordered by the paging column
    alone, or not at all: the id order, with bare-id cursors.

    Raises:
        PaginationError: the ORDER BY does not end with ``column``, disagrees
            with ``descending``, names a key the row cannot show, or sorts
            NULLs where this database's order is not known.
    """
    order = _order_keys(stmt)
    if not order:
        return bool(descending), None
    last = order[-1]
    if not last.expr.compare(column):
        raise PaginationError(
            f"the statement is ordered by {', '.join(str(k.order) for k in order)}, but a "
            f"keyset sort must end with the paging column {column}, the unique tiebreaker: "
            f"add {column} as the last ORDER BY key"
        )
    if descending is not None and descending != last.descending:
        raise PaginationError(
            f"the statement orders {column} {'DESC' if last.descending else 'ASC'} but "
            f"descending={descending}; leave descending= out (the ORDER BY decides)"
        )
    if len(order) == 1:
        return last.descending, None
    facts = dialect_row(dialect()).paging
    keys = []
    outer = outer_joined(stmt)
    for item in order:
        if item is not last:  # (the paging column's type is checked by keys_of)
            check_key_type(item.expr, facts, dialect, PaginationError)
        nullable = item is not last and may_be_null(item.expr, stmt, outer)
        if item.nulls is not None:
            nulls_after = item.nulls == "last"
        elif not nullable:
            nulls_after = False
        elif facts.nulls_largest is None:
            raise PaginationError(
                f"the sort key {item.expr} can be NULL, and where this database sorts NULLs "
                "is not known here: add .nulls_first() or .nulls_last() to it"
            )
        else:
            nulls_after = facts.nulls_largest != item.descending
        raw = None if item is last else key_type(item.expr, facts, dialect)
        keys.append(
            SortKey(item.expr, item.order, item.descending, item.nulls, nullable, nulls_after, raw)
        )
    for key in keys[:-1]:
        _check_distinct(stmt, key.expr, orm, column)
    statement, readers, shown = key_readers(stmt, keys[:-1], orm)
    parts = [key.describe() for key in keys]
    keyset = Keyset(tuple(keys), facts)
    return last.descending, Sort(keyset, statement, readers, fingerprint(parts), shown)


def _check_distinct(
    stmt: sa.Select[Any], expr: ColumnElement[Any], orm: bool, column: ColumnElement[Any]
) -> None:
    """Refuse a hidden key that could change what a SELECT DISTINCT keeps.

    A key read from the paging column's table (or from no table) has one value
    per paging column value, which is unique: adding it keeps every row. A key
    of another table in the join (one shop, many items' prices) would split a
    row into one per value, and is refused (PostgreSQL refuses the statement
    itself: an ORDER BY key of a SELECT DISTINCT must be selected).
    """
    # Private attribute: Select has no public accessor for DISTINCT (ON).
    if not stmt._distinct or stmt._distinct_on:
        return
    if selected(stmt, expr, orm) is not None:
        return  # the same expression is already in the row: DISTINCT compares it anyway
    own = getattr(column, "table", None)
    if own is not None and all(source is own for source in expr._from_objects):
        return
    raise PaginationError(
        f"the statement is SELECT DISTINCT and sorted by {expr}, which is not selected and "
        f"not a column of {column}'s table: reading it as an extra column would change the "
        "rows DISTINCT keeps; select it, or sort by a column of that table"
    )


def _reader(stmt: sa.Select[Any], column: ColumnElement[Any], orm: bool) -> tuple[Reader, bool]:
    """Return how to read the paging column from a row, and whether rows are scalars."""
    scalar = len(stmt.column_descriptions if orm else stmt.selected_columns) == 1
    reader = find(stmt, column, orm)
    if reader is not None:
        return reader, scalar
    raise PaginationError(
        f"the paging column {column} is not selected: select it (a label is fine), or "
        "select the entity that maps it"
    )
