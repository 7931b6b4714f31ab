"""Reading a page's rows: where each sort key's value is found, and the rows the caller sees.

A cursor holds the value the database sorted by. A key selected as a column
(under any label) is read from the row. Every other key (one mapped by a
selected entity, one not selected at all, one read as the database's own
type) is added to the statement as a hidden column, labelled
``sqlalchemy_ulid_key_<n>``, and read from there: never from a loaded
object, whose attributes a session may hold from an earlier query (or may
not have loaded: ``defer(..., raiseload=True)``), and never through a type
that changes the value it returns. The caller's rows come back without the
hidden columns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Result, Row
from sqlalchemy.orm import Mapper
from sqlalchemy.sql.elements import ColumnElement, Label

from ._keyset import SortKey

__all__ = ["Reader", "Shown", "all_rows", "find", "key_readers", "selected"]

Reader = Callable[[Row[Any]], Any]


def _uniqued(result: Result[Any]) -> Result[Any]:
    """``result``, made unique where SQLAlchemy demands it."""
    # Joined eager loads of collections repeat a parent on several rows;
    # SQLAlchemy then demands unique(), and has already applied the LIMIT to
    # the parents in a subquery. The marker is private (no public accessor;
    # pinned by the joinedload test on SQLAlchemy 2.0 and 2.1).
    if getattr(result, "_unique_filter_state", None) is not None:
        return result.unique()
    return result


def all_rows(result: Result[Any]) -> Sequence[Row[Any]]:
    """Every row of a page's result."""
    return _uniqued(result).all()


class Shown:
    """The rows of a page read with hidden key columns, and the same rows without them."""

    def __init__(self, width: int) -> None:
        self.width = width
        self._shown: dict[int, Row[Any]] = {}

    def rows(self, result: Result[Any]) -> Sequence[Row[Any]]:
        """The rows with their hidden columns (each key's reader reads those)."""
        frozen = _uniqued(result).freeze()
        full = frozen().all()
        shown = frozen().columns(*range(self.width)).all()
        self._shown = {id(row): item for row, item in zip(full, shown, strict=True)}
        return full

    def items(self, rows: Sequence[Row[Any]]) -> list[Row[Any]]:
        """The rows as the caller's statement shows them."""
        return [self._shown[id(row)] for row in rows]


def key_readers(
    stmt: sa.Select[Any], keys: Sequence[SortKey], orm: bool
) -> tuple[sa.Select[Any], tuple[Reader, ...], Shown | None]:
    """How each key is read from a row, adding the hidden columns that need it.

    Returns the statement to run, one reader per key, and the :class:`Shown`
    that takes the hidden columns off the rows again (None when the items
    are one entity or column, whose rows are never shown: only ``row[0]``).
    """
    width = len(stmt.column_descriptions) if orm else len(stmt.selected_columns)
    hidden: list[ColumnElement[Any]] = []
    readers: list[Reader] = []
    for key in keys:
        reader = None
        if width > 1 and key.raw is None:
            reader = selected(stmt, key.expr, orm)
        if reader is None:
            typed = key.expr if key.raw is None else sa.type_coerce(key.expr, key.raw)
            reader = _column(width + len(hidden))
            hidden.append(typed.label(f"sqlalchemy_ulid_key_{len(hidden)}"))
        readers.append(reader)
    if not hidden:
        return stmt, tuple(readers), None
    return stmt.add_columns(*hidden), tuple(readers), Shown(width) if width > 1 else None


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
    # or select(parent, Node) would read Node's id from parent.
    if not getattr(info, "is_aliased_class", False):
        for prop in mapper.column_attrs:
            if any(_matches(c, column) for c in prop.columns):
                return prop.key
    for prop in mapper.column_attrs:
        if _matches(getattr(entity, prop.key), column):
            return prop.key
    return None


def selected(stmt: sa.Select[Any], column: ColumnElement[Any], orm: bool) -> Reader | None:
    """How to read ``column`` from a row of ``stmt`` where it is selected as a column."""
    if not orm:
        # Core execution (Connection): entities come back as plain columns.
        for index, selected in enumerate(stmt.selected_columns):
            if _matches(selected, column):
                return _column(index)
        return None
    for index, description in enumerate(stmt.column_descriptions):
        expr, entity = description["expr"], description.get("entity")
        if not (entity is not None and expr is entity) and _matches(expr, column):
            return _column(index)
    return None


def find(stmt: sa.Select[Any], column: ColumnElement[Any], orm: bool) -> Reader | None:
    """How to read ``column`` from a row of ``stmt``: selected, or mapped by an entity."""
    reader = selected(stmt, column, orm)
    if reader is not None or not orm:
        return reader
    for index, description in enumerate(stmt.column_descriptions):
        expr, entity = description["expr"], description.get("entity")
        if entity is not None and expr is entity:
            key = _entity_key(entity, column)
            if key is not None:
                return _Attribute(index, key)
    return None


def _column(index: int) -> Reader:
    return lambda row: row[index]


class _Attribute:
    """Read the paging column as the attribute of the row's entity ``index``.

    (A primary key: the same in every object a session holds for its row.)
    """

    def __init__(self, index: int, key: str) -> None:
        self.index, self.key = index, key

    def __call__(self, row: Row[Any]) -> Any:
        entity = row[self.index]
        # None: an outer join found no row, so each of its columns is NULL.
        return None if entity is None else getattr(entity, self.key)
