"""The sort: read a statement's ORDER BY into its keys, and find the keys in the row.

The ORDER BY is the sort, and its last key is the paging column, the unique
tiebreaker. A sort on the paging column alone (or none) keeps bare-id
cursors; a longer one becomes a :class:`~._keyset.Keyset`, after these
checks, all before any SQL:

* each key is a column expression whose value comes back with the row: it is
  selected (under any label), mapped by a selected entity, or added to the
  row as an extra column (when the items are entities, which hide it);
* a cursor can carry its value exactly (:mod:`._exact`);
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
from sqlalchemy.orm import Mapper
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import (
    ColumnElement,
    Label,
    UnaryExpression,
)

from .._codec import InvalidULID
from .._dialects import dialect_row
from .._errors import InvalidInput
from .._keys import Keys
from ._clauses import ULIDColumn, after, before
from ._cursor import InvalidCursor, decode, encode, fingerprint
from ._exact import bind_type, check_key_type, checked_value, raw_type
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


_Reader = Callable[[Row[Any]], Any]
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
        if isinstance(element, _TEXT_LABEL_REFERENCE) or not isinstance(expr, ColumnElement):
            raise PaginationError(
                f"the statement is ordered by {clause}, which is not a column expression: "
                "order by the column or expression itself (not its name as text)"
            )
        keys.append(_OrderKey(element, expr, descending, nulls))
    return keys


@dataclass(frozen=True)
class Sort:
    """A sort by several keys: its SQL, and how its cursors are read and written.

    Attributes:
        keyset: the keys (the paging column last) and their SQL.
        statement: the caller's statement, with the keys that the row would
            not show added as extra columns.
        readers: how each key but the last is read from a row.
        fingerprint: the hash of the sort that its cursors carry.
    """

    keyset: Keyset
    statement: sa.Select[Any]
    readers: tuple[_Reader, ...]
    fingerprint: bytes

    def cursor(self, row: Row[Any], id_text: str) -> str:
        """The cursor of a row: its key values, the paging column's as text."""
        try:
            return encode(self.fingerprint, [read(row) for read in self.readers] + [id_text])
        except TypeError as exc:
            raise PaginationError(f"{exc}: sort by another expression") from None

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
        raw = None if item is last else raw_type(item.expr.type, dialect)
        keys.append(
            SortKey(item.expr, item.order, item.descending, item.nulls, nullable, nulls_after, raw)
        )
    statement, readers = _key_readers(stmt, keys[:-1], orm)
    parts = [key.describe() for key in keys]
    return last.descending, Sort(Keyset(tuple(keys), facts), statement, readers, fingerprint(parts))


def _key_readers(
    stmt: sa.Select[Any], keys: Sequence[SortKey], orm: bool
) -> tuple[sa.Select[Any], tuple[_Reader, ...]]:
    """How each sort key is read from a row, adding it to the row where it is hidden.

    When the items are one entity (or one column), the keys are added as
    extra labelled columns, read from the row, and never shown: the value
    the database sorted by, not an attribute that a loaded object may hold.
    Otherwise each key must be selected, or mapped by a selected entity
    (whose objects the page then refreshes: ``populate_existing``). A key
    read as its database type (``raw_type``) is added as an extra column
    only: a row shows it as its TypeDecorator returns it.
    """
    width = len(stmt.column_descriptions) if orm else len(stmt.selected_columns)
    if width == 1:
        extra = [
            (key.expr if key.raw is None else sa.type_coerce(key.expr, key.raw)).label(
                f"sqlalchemy_ulid_key_{n}"
            )
            for n, key in enumerate(keys)
        ]
        readers = tuple(_column(width + n) for n in range(len(extra)))
        return stmt.add_columns(*extra), readers
    found = []
    for key in keys:
        expr = key.expr
        if key.raw is not None:
            raise PaginationError(
                f"the sort key {expr} is of type {key.expr.type!r}, which processes the "
                "values it returns, so a cursor of the value a row shows might not find "
                "its row again: select one entity or column (the key is then read as the "
                f"database holds it), or sort by sa.type_coerce({expr}, <its database type>)"
            )
        reader = _find(stmt, expr, orm)
        if reader is None:
            raise PaginationError(
                f"the sort key {expr} is not in the row: select it (a label is fine), or "
                "select the entity that maps it"
            )
        found.append(reader)
    if any(isinstance(reader, _Attribute) for reader in found):
        # An object already in the session keeps its loaded attributes when a
        # query meets it again; the cursor must hold the value the database
        # sorted by, so the page refreshes the objects it loads.
        stmt = stmt.execution_options(populate_existing=True)
    return stmt, tuple(found)


def _matches(candidate: Any, column: ColumnElement[Any]) -> bool:
    if hasattr(candidate, "__clause_element__"):
        candidate = candidate.__clause_element__()
    if isinstance(candidate, Label):
        candidate = candidate.element
    return isinstance(candidate, ColumnElement) and bool(candidate.compare(column))


def _entity_key(entity: Any, column: ColumnElement[Any]) -> str | None:
    """Return the attribute of a mapped entity that maps ``column``, if any."""
    info = sa.inspect(entity, raiseerr=False)
    mapper: Mapper[Any] | None = getattr(info, "mapper", None)
    if mapper is None:
        return None
    # An aliased entity (aliased(Model), a self-join's other side) maps the
    # alias's columns, not the table's: matched by its own attributes only,
    # or select(parent, Node) would read Node's keys from parent.
    if not getattr(info, "is_aliased_class", False):
        for prop in mapper.column_attrs:
            if any(_matches(c, column) for c in prop.columns):
                return prop.key
    for prop in mapper.column_attrs:
        if _matches(getattr(entity, prop.key), column):
            return prop.key
    return None


def _find(stmt: sa.Select[Any], column: ColumnElement[Any], orm: bool) -> _Reader | None:
    """How to read ``column`` from a row of ``stmt``, if the row shows it."""
    if not orm:
        # Core execution (Connection): entities come back as plain columns.
        for index, selected in enumerate(stmt.selected_columns):
            if _matches(selected, column):
                return _column(index)
        return None
    for index, description in enumerate(stmt.column_descriptions):
        expr, entity = description["expr"], description.get("entity")
        if entity is not None and expr is entity:
            key = _entity_key(entity, column)
            if key is not None:
                return _attribute(index, key)
        elif _matches(expr, column):
            return _column(index)
    return None


def _column(index: int) -> _Reader:
    return lambda row: row[index]


class _Attribute:
    """Read a key as the attribute of the row's entity ``index``."""

    def __init__(self, index: int, key: str) -> None:
        self.index, self.key = index, key

    def __call__(self, row: Row[Any]) -> Any:
        entity = row[self.index]
        # None: an outer join found no row, so each of its columns is NULL.
        return None if entity is None else getattr(entity, self.key)


def _attribute(index: int, key: str) -> _Reader:
    return _Attribute(index, key)


def _reader(stmt: sa.Select[Any], column: ColumnElement[Any], orm: bool) -> tuple[_Reader, bool]:
    """Return how to read the paging column from a row, and whether rows are scalars."""
    scalar = len(stmt.column_descriptions if orm else stmt.selected_columns) == 1
    reader = _find(stmt, column, orm)
    if reader is not None:
        return reader, scalar
    raise PaginationError(
        f"the paging column {column} is not selected: select it (a label is fine), or "
        "select the entity that maps it"
    )
