"""advanced-alchemy support: keyset filters and a keyset page for its repositories.

advanced-alchemy's services page with ``LimitOffset`` and return
``OffsetPagination``: a deep page reads and skips every row before it, and
``get_many_and_count`` (``list_and_count``) counts every row on every call.
Here:

* :class:`After` / :class:`Before` are cursor filters, and
  :func:`paginate` (or :func:`apaginate`, or a service with
  :class:`KeysetServiceMixin`) returns our :class:`~sqlalchemy_ulid.Page`:
  one indexed query from the cursor, in any ORDER BY (its ``OrderBy``
  filters) that ends with the id, with a COUNT only when ``total=`` asks.
* :class:`CreatedSince` / :class:`CreatedBetween` filter by the time inside
  the id (a range on the primary key: no ``created_at`` index needed).

They work with advanced-alchemy's ``UUIDv7Base`` (``GUID`` ids) and with our
``ULIDBase`` and ``TypeIDBase`` (typed ids). Install with
``pip install 'sqlalchemy-ulid[advanced-alchemy]'``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from . import _missing

try:
    from advanced_alchemy.filters import PaginationFilter, StatementFilter
except ModuleNotFoundError as exc:
    raise _missing("advanced_alchemy", "advanced-alchemy", exc) from exc

import sqlalchemy as sa
from sqlalchemy.sql.elements import ColumnElement

from .. import _paging
from .._timerange import created_between, created_since

if TYPE_CHECKING:
    from .._paging._page import Total

__all__ = [
    "After",
    "AsyncKeysetServiceMixin",
    "Before",
    "CreatedBetween",
    "CreatedSince",
    "KeysetServiceMixin",
    "apaginate",
    "paginate",
]

_ModelT = TypeVar("_ModelT")
_StatementT = TypeVar("_StatementT")
Filter = StatementFilter | ColumnElement[bool]


def _field(model: Any, field_name: str) -> Any:
    return getattr(model, field_name)


@dataclass
class After(PaginationFilter):
    """Start the page after a cursor (an edge of a :class:`~sqlalchemy_ulid.Page`).

    Pass it to :func:`paginate` or ``list_page``: the page follows the
    cursor in the statement's ORDER BY. Used directly in a repository's
    ``get_many()`` it is ``id > :cursor`` (id order; bare id cursors only).

    Example:
        >>> from sqlalchemy_ulid.contrib.advanced_alchemy import After
        >>> After("01HTQW311N1KR5G0Y75M3EF00H")
        After(cursor='01HTQW311N1KR5G0Y75M3EF00H', field_name='id')
    """

    cursor: str
    field_name: str = "id"

    def append_to_statement(
        self, statement: _StatementT, model: Any, *args: Any, **kwargs: Any
    ) -> _StatementT:
        """Add ``id > :cursor`` (InvalidULID for a malformed or keyset cursor)."""
        return statement.where(_paging.after(_field(model, self.field_name), self.cursor))  # type: ignore[attr-defined,no-any-return]


@dataclass
class Before(PaginationFilter):
    """End the page before a cursor: :class:`After`, the other way.

    Used directly in a repository's ``get_many()`` it is ``id < :cursor``.
    """

    cursor: str
    field_name: str = "id"

    def append_to_statement(
        self, statement: _StatementT, model: Any, *args: Any, **kwargs: Any
    ) -> _StatementT:
        """Add ``id < :cursor`` (InvalidULID for a malformed or keyset cursor)."""
        return statement.where(_paging.before(_field(model, self.field_name), self.cursor))  # type: ignore[attr-defined,no-any-return]


@dataclass
class CreatedSince(StatementFilter):
    """Rows whose id was made at or after ``since`` (an aware datetime or Unix ms).

    A range on the id itself: ``id >= ULID.min_at(since)`` (the smallest
    UUIDv7 of that millisecond on a UUID column), served by the primary key.

    Example:
        >>> from datetime import datetime, timezone
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import ULIDBase
        >>> from sqlalchemy_ulid.contrib.advanced_alchemy import CreatedSince
        >>> class Doc(ULIDBase):
        ...     __tablename__ = "docs_created_since"
        >>> day = datetime(2024, 4, 5, tzinfo=timezone.utc)
        >>> stmt = CreatedSince(day).append_to_statement(sa.select(Doc.id), Doc)
        >>> print(stmt.whereclause)
        docs_created_since.id >= :param_1
    """

    since: datetime | int
    field_name: str = "id"

    def append_to_statement(
        self, statement: _StatementT, model: Any, *args: Any, **kwargs: Any
    ) -> _StatementT:
        """Add ``id >= :lowest id of since``."""
        return statement.where(created_since(_field(model, self.field_name), self.since))  # type: ignore[attr-defined,no-any-return]


@dataclass
class CreatedBetween(StatementFilter):
    """Rows whose id was made in ``[start, end)`` (aware datetimes or Unix ms).

    Adjacent ranges never share a row; a naive datetime, or ``start`` after
    ``end``, raises :class:`ValueError` before any SQL.
    """

    start: datetime | int
    end: datetime | int
    field_name: str = "id"

    def append_to_statement(
        self, statement: _StatementT, model: Any, *args: Any, **kwargs: Any
    ) -> _StatementT:
        """Add ``id >= :start's lowest id AND id < :end's lowest id``."""
        expr = _field(model, self.field_name)
        return statement.where(created_between(expr, self.start, self.end))  # type: ignore[attr-defined,no-any-return]


def _prepare(
    source: Any, filters: Sequence[Filter], statement: sa.Select[Any] | None, kwargs: dict[str, Any]
) -> tuple[Any, sa.Select[Any], Any, dict[str, Any]]:
    """The session, the filtered statement, the id column and the cursor argument."""
    repository = getattr(source, "repository", source)  # a service, or its repository
    model = repository.model_type
    stmt = repository.statement if statement is None else statement
    cursor: dict[str, Any] = {}
    id_name = repository.id_attribute
    for item in filters:
        if isinstance(item, (After, Before)):
            if cursor:
                raise ValueError("pass one After or Before filter, not both")
            cursor = {"after" if isinstance(item, After) else "before": item.cursor}
            id_name = item.field_name
        elif isinstance(item, PaginationFilter):
            raise ValueError(
                f"a keyset page takes limit=, not {type(item).__name__}: "
                "offsets and keyset cursors do not mix"
            )
        elif isinstance(item, StatementFilter):
            stmt = item.append_to_statement(stmt, model)
        else:
            stmt = stmt.where(item)
    if kwargs:
        stmt = stmt.filter_by(**kwargs)
    return repository.session, stmt, getattr(model, id_name), cursor


def paginate(
    source: Any,
    *filters: Filter,
    limit: int = 50,
    total: Total = None,
    statement: sa.Select[Any] | None = None,
    max_limit: int = 1000,
    **kwargs: Any,
) -> _paging.Page[Any]:
    """Return one keyset :class:`~sqlalchemy_ulid.Page` of a sync repository or service.

    The filters are advanced-alchemy's (``OrderBy``, ``SearchFilter``,
    ``CollectionFilter``...) or ours; at most one :class:`After` or
    :class:`Before` gives the cursor. The sort is the ``OrderBy`` filters
    in order, ending with the id (``OrderBy("id", "desc")``); with none,
    id order. ``kwargs`` are column equalities, as in ``get_many(**kwargs)``.

    Args:
        source: a repository or a service (its ``repository`` is used).
        *filters: statement filters, or SQL conditions.
        limit: the page size.
        total: None, ``"exact"``, ``"estimate"`` or a cap: see
            :func:`sqlalchemy_ulid.paginate`.
        statement: a base ``select()`` instead of the repository's.
        max_limit: the largest ``limit`` accepted.
        **kwargs: ``column=value`` filters.

    Raises:
        InvalidCursor: (an :class:`InvalidULID`) a malformed or cross-sort
            cursor, before any SQL.
        ValueError: ``LimitOffset`` among the filters, both ``After`` and
            ``Before``, a bad ``limit`` or ``total``; all before any SQL.
        PaginationError: the ORDER BY does not end with the id.
    """
    session, stmt, column, cursor = _prepare(source, filters, statement, kwargs)
    return _paging.paginate(
        session, stmt, column, limit=limit, total=total, max_limit=max_limit, **cursor
    )


async def apaginate(
    source: Any,
    *filters: Filter,
    limit: int = 50,
    total: Total = None,
    statement: sa.Select[Any] | None = None,
    max_limit: int = 1000,
    **kwargs: Any,
) -> _paging.Page[Any]:
    """Await one keyset page of an async repository or service: :func:`paginate`."""
    session, stmt, column, cursor = _prepare(source, filters, statement, kwargs)
    return await _paging.apaginate(
        session, stmt, column, limit=limit, total=total, max_limit=max_limit, **cursor
    )


class KeysetServiceMixin(Generic[_ModelT]):
    """Add ``list_page()`` to a ``SQLAlchemySyncRepositoryService``.

    Example:
        >>> from advanced_alchemy.service import SQLAlchemySyncRepositoryService
        >>> from sqlalchemy_ulid.contrib.advanced_alchemy import KeysetServiceMixin
        >>> class NoteService(KeysetServiceMixin, SQLAlchemySyncRepositoryService):
        ...     pass
        >>> callable(NoteService.list_page)
        True
    """

    def list_page(
        self,
        *filters: Filter,
        limit: int = 50,
        total: Total = None,
        statement: sa.Select[Any] | None = None,
        **kwargs: Any,
    ) -> _paging.Page[_ModelT]:
        """One keyset page, where ``get_many_and_count`` gives an offset one: :func:`paginate`."""
        return paginate(self, *filters, limit=limit, total=total, statement=statement, **kwargs)


class AsyncKeysetServiceMixin(Generic[_ModelT]):
    """Add ``await list_page()`` to a ``SQLAlchemyAsyncRepositoryService``."""

    async def list_page(
        self,
        *filters: Filter,
        limit: int = 50,
        total: Total = None,
        statement: sa.Select[Any] | None = None,
        **kwargs: Any,
    ) -> _paging.Page[_ModelT]:
        """Await one keyset page (see :func:`paginate`)."""
        return await apaginate(
            self, *filters, limit=limit, total=total, statement=statement, **kwargs
        )
