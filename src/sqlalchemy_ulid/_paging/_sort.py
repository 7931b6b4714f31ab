"""The sort: read a statement's ORDER BY, check the paging column, build keyset clauses.

:func:`after` and :func:`before` are the one-column keyset conditions; the
helpers below find the paging column in the selected row and check that the
table declares it unique.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Union

import sqlalchemy as sa
from sqlalchemy.engine import Row
from sqlalchemy.orm import Mapper, QueryableAttribute
from sqlalchemy.sql.elements import ColumnElement, Label, UnaryExpression

from .._keys import Keys, KeyValue, column_expression, keys_of
from ._cursor import Cursor

__all__ = ["PaginationError", "ULIDColumn", "after", "before"]

#: A ULID or UUID column: a Core column (or other column expression) or an ORM attribute.
# (Union, not "|": these aliases are evaluated at run time on Python 3.10.)
ULIDColumn = Union[ColumnElement[Any], QueryableAttribute[Any]]  # noqa: UP007


class PaginationError(ValueError):
    """The statement cannot be paged without skipping or repeating rows.

    It has its own ORDER BY, LIMIT or OFFSET, does not select the paging
    column, or pages on a column that is not unique in its result. A
    :class:`ValueError`, so code that catches bad input catches this too.
    """


# -- cursor clauses -----------------------------------------------------------


def _parsed(column: ULIDColumn, cursor: Cursor) -> tuple[ColumnElement[Any], Keys, KeyValue]:
    """The column's expression, its keys, and the cursor parsed strictly (no SQL)."""
    expr = column_expression(column)
    keys = keys_of(expr)
    return expr, keys, keys.parse(cursor)  # InvalidULID for bad text, "" included


def after(column: ULIDColumn, cursor: Cursor) -> ColumnElement[bool]:
    """Return ``column > :cursor``: the rows after a cursor in id order.

    Args:
        column: the ULID or UUIDv7 column (Core column or ORM attribute):
            ``ULIDType``, ``sa.Uuid``, ``postgresql.UUID`` or a type over
            them, such as advanced-alchemy's ``GUID``.
        cursor: a :class:`ULID` or its 26-character text on a ULID column; a
            :class:`uuid.UUID` (or a ULID) or its canonical 36-character text
            on a UUID column.

    Raises:
        InvalidULID: the cursor is malformed (the empty string too). Raised
            here, before any SQL exists, so a web handler can answer 400.
        TimeOrderError: (a ValueError, when the statement is compiled) the
            database's native uuid type does not sort UUIDv7s in time order.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import ULIDType, after
        >>> t = sa.table("events", sa.column("id", ULIDType()))
        >>> print(after(t.c.id, "01HTQW311N1KR5G0Y75M3EF00H"))
        events.id > :param_1
        >>> after(t.c.id, "' OR 1=1 --")
        Traceback (most recent call last):
        ...
        sqlalchemy_ulid.InvalidULID: ...
        >>> u = sa.table("orders", sa.column("id", sa.Uuid()))
        >>> after(u.c.id, "018EAFC1-8435-7000-8000-000000000000").right.value
        UUID('018eafc1-8435-7000-8000-000000000000')
    """
    expr, keys, value = _parsed(column, cursor)
    return expr > keys.bind(expr, value)


def before(column: ULIDColumn, cursor: Cursor) -> ColumnElement[bool]:
    """Return ``column < :cursor``: the rows before a cursor in id order.

    Takes the same columns and cursors as :func:`after`.

    Raises:
        InvalidULID: the cursor is malformed, before any SQL is built.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import ULIDType, before
        >>> t = sa.table("events", sa.column("id", ULIDType()))
        >>> print(before(t.c.id, "01HTQW311N1KR5G0Y75M3EF00H"))
        events.id < :param_1
    """
    expr, keys, value = _parsed(column, cursor)
    return expr < keys.bind(expr, value)


def _check_order(stmt: sa.Select[Any], column: ColumnElement[Any], descending: bool) -> None:
    # Private attributes: Select has no public accessors for its ORDER BY or
    # row limits (checked against SQLAlchemy 2.0 and 2.1).
    if stmt._has_row_limiting_clause:
        raise PaginationError(
            "the statement already has a LIMIT, OFFSET or FETCH; paginate() adds its own "
            "LIMIT, so pass the statement without one"
        )
    for clause in stmt._order_by_clauses:
        element, is_desc = clause, False
        if isinstance(clause, UnaryExpression) and clause.modifier in (
            sa.sql.operators.asc_op,
            sa.sql.operators.desc_op,
        ):
            is_desc = clause.modifier is sa.sql.operators.desc_op
            element = clause.element
        if isinstance(element, Label):
            element = element.element
        if not (isinstance(element, ColumnElement) and element.compare(column)):
            raise PaginationError(
                f"the statement is ordered by {clause}, but keyset pages must be ordered "
                f"by the paging column {column} alone; remove the ORDER BY"
            )
        if is_desc != descending:
            raise PaginationError(
                f"the statement orders {column} {'DESC' if is_desc else 'ASC'} but "
                f"descending={descending}; pass descending= instead of ORDER BY"
            )


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
    for prop in mapper.column_attrs:
        if any(_matches(c, column) for c in prop.columns):
            return prop.key
    # An aliased entity's attribute compares equal to the alias's column,
    # not to the table's, so try the entity's own attributes too.
    for prop in mapper.column_attrs:
        if _matches(getattr(entity, prop.key), column):
            return prop.key
    return None


def _reader(
    stmt: sa.Select[Any], column: ColumnElement[Any], orm: bool
) -> tuple[Callable[[Row[Any]], Any], bool]:
    """Return how to read the paging column from a row, and whether rows are scalars."""
    if not orm:
        # Core execution (Connection): entities come back as plain columns.
        for index, selected in enumerate(stmt.selected_columns):
            if _matches(selected, column):
                return (lambda row, i=index: row[i]), len(stmt.selected_columns) == 1
    else:
        descriptions = stmt.column_descriptions
        scalar = len(descriptions) == 1
        for index, description in enumerate(descriptions):
            expr, entity = description["expr"], description.get("entity")
            if entity is not None and expr is entity:
                key = _entity_key(entity, column)
                if key is not None:
                    return (lambda row, i=index, k=key: getattr(row[i], k)), scalar
            elif _matches(expr, column):
                return (lambda row, i=index: row[i]), scalar
    raise PaginationError(
        f"the paging column {column} is not selected: select it (a label is fine), or "
        "select the entity that maps it"
    )


def _table_column(column: ColumnElement[Any]) -> sa.Column[Any] | None:
    """The table column behind ``column`` (through ORM annotations and aliases)."""
    for candidate in column.proxy_set:
        if isinstance(candidate, sa.Column) and isinstance(candidate.table, sa.Table):
            return candidate
    return None


def _is_unique(column: sa.Column[Any]) -> bool:
    """Whether the table declares ``column`` unique on its own."""
    table = column.table
    if column.unique or [c.name for c in table.primary_key.columns] == [column.name]:
        return True
    for constraint in table.constraints:
        if isinstance(constraint, sa.UniqueConstraint) and [c.name for c in constraint.columns] == [
            column.name
        ]:
            return True
    return any(
        index.unique and [c.name for c in index.columns] == [column.name] for index in table.indexes
    )
