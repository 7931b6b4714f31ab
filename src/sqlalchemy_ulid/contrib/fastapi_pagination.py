"""fastapi-pagination support: a cursor page backed by our keyset ``paginate``.

``ULIDCursorPage`` and ``ULIDCursorParams`` plug into fastapi-pagination like
its own ``CursorPage``: declare ``response_model=ULIDCursorPage[Schema]``,
call :func:`paginate` (or :func:`apaginate` on an ``AsyncSession``) in the
handler, and ``add_pagination(app)``. Each page is one query,
``WHERE id >= :cursor ORDER BY id LIMIT size + 2`` (from the cursor's own
row; a second, ``EXISTS``, query only when that row is gone); no COUNT and
no sqlakeyset bookmark type needed. Install with
``pip install 'sqlalchemy-ulid[fastapi-pagination]'``.

The statement's ORDER BY is the sort, as in the core ``paginate``: it ends
with the paging column (``order_by(Order.total.desc(), Order.id.desc())``).
Cursors are ``after:<cursor>`` and ``before:<cursor>`` (a bare cursor means
``after:``), the cursor being an id, or the opaque cursor of a sort by
several keys; or opaque tokens when a :class:`~sqlalchemy_ulid.CursorSealer`
is passed. A malformed, tampered or expired cursor, or one of another sort,
answers 400 with our message, before any SQL runs. ``include_total`` in the
raw params (or ``total=``) fills the page's ``total``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from . import _missing

try:
    from fastapi import HTTPException, Query, status
    from fastapi_pagination.api import apply_items_transformer, create_page, resolve_params
    from fastapi_pagination.bases import AbstractPage, AbstractParams, CursorRawParams
    from pydantic import BaseModel, Field
except ModuleNotFoundError as exc:
    raise _missing("fastapi_pagination", "fastapi-pagination", exc) from exc

from .. import _paging
from .._codec import InvalidULID
from .._sealed import CursorSealer

if TYPE_CHECKING:
    import sqlalchemy as sa
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session

    from .._paging import ULIDColumn
    from .._paging._page import Total

__all__ = ["ULIDCursorPage", "ULIDCursorParams", "apaginate", "paginate"]

_T = TypeVar("_T")


class ULIDCursorParams(BaseModel, AbstractParams):
    """Query parameters of a :class:`ULIDCursorPage`: ``cursor`` and ``size``.

    Subclass it to change the bounds of ``size`` (then pair it with a page
    subclass through ``__params_type__``), or to add an ``include_total``
    field, which maps onto ``total="exact"`` (one COUNT per request: let
    clients ask for it only where the table is small enough).
    """

    cursor: str | None = Query(
        None, description="The next_page or previous_page value of another page"
    )
    size: int = Query(50, ge=1, le=100, description="Page size")

    def to_raw_params(self) -> CursorRawParams:
        """Return the parameters in fastapi-pagination's raw form."""
        include_total = bool(getattr(self, "include_total", False))
        return CursorRawParams(cursor=self.cursor, size=self.size, include_total=include_total)


class ULIDCursorPage(AbstractPage[_T], Generic[_T]):
    """A page of items with the cursors of its neighbours, and a total when asked.

    Attributes:
        items: the rows of the page, in display order.
        next_page: the cursor of the following page, or None at the end.
        previous_page: the cursor of the preceding page, or None at the start.
        total: the number of rows, when asked for (see :func:`paginate`).
    """

    items: Sequence[_T]
    next_page: str | None = Field(None, description="Cursor of the next page")
    previous_page: str | None = Field(None, description="Cursor of the previous page")
    total: int | None = Field(None, description="Number of rows, when asked for")

    __params_type__ = ULIDCursorParams

    @classmethod
    def create(
        cls,
        items: Sequence[_T],
        params: AbstractParams,
        *,
        next_: str | None = None,
        previous: str | None = None,
        **kwargs: Any,
    ) -> ULIDCursorPage[_T]:
        """Build the page (fastapi-pagination calls this through ``create_page``)."""
        return cls.model_validate(
            {"items": items, "next_page": next_, "previous_page": previous, **kwargs},
            from_attributes=True,
        )


# -- cursors ----------------------------------------------------------------------


def _bad_cursor(exc: InvalidULID) -> HTTPException:
    return HTTPException(status.HTTP_400_BAD_REQUEST, detail=f"cursor: {exc}")


def _open(cursor: str | None, descending: bool, sealer: CursorSealer | None) -> dict[str, Any]:
    """Return paginate's cursor keyword arguments, or raise HTTP 400.

    The cursor itself is checked by the core ``paginate`` (strictly, against
    the column's form or the sort, before any SQL).
    """
    if not cursor:
        return {}
    try:
        if sealer is not None:
            opened = sealer.open(cursor, descending=descending)
            return {k: v for k, v in opened.items() if k != "descending"}
        way, sep, text = cursor.partition(":")
        if not sep:
            way, text = "after", cursor
        if way not in ("after", "before"):
            raise InvalidULID(f"a cursor is 'after:<id>' or 'before:<id>', got {cursor!r}")
        return {way: text}
    except InvalidULID as exc:
        raise _bad_cursor(exc) from None


def _seal(
    page: _paging.Page[Any], descending: bool, sealer: CursorSealer | None
) -> tuple[str | None, str | None]:
    if sealer is not None:
        return sealer.seal(page, descending=descending)
    nxt, prev = page.next_cursor, page.prev_cursor
    return (
        None if nxt is None else f"after:{nxt}",
        None if prev is None else f"before:{prev}",
    )


def _core_kwargs(
    params: AbstractParams | None,
    descending: bool | None,
    sealer: CursorSealer | None,
    settle: Any,
    total: Total,
) -> tuple[AbstractParams, dict[str, Any]]:
    resolved = resolve_params(params)
    raw = resolved.to_raw_params().as_cursor()
    cursor = raw.cursor.decode() if isinstance(raw.cursor, bytes) else raw.cursor
    kwargs = _open(cursor, bool(descending), sealer)
    kwargs.update(limit=raw.size, descending=descending)
    if settle is not None:  # only when set: the keyword is new in the core
        kwargs["settle"] = settle
    if total is None and raw.include_total:
        total = "exact"
    if total is not None:
        kwargs["total"] = total
    return resolved, kwargs


# -- the entry points ---------------------------------------------------------------


def paginate(
    session: Session | Connection,
    stmt: sa.Select[Any],
    column: ULIDColumn,
    params: AbstractParams | None = None,
    *,
    descending: bool | None = None,
    sealer: CursorSealer | None = None,
    settle: timedelta | Literal["auto"] | None = None,
    total: Total = None,
    transformer: Any = None,
    additional_data: dict[str, Any] | None = None,
) -> Any:
    """Fetch one page for fastapi-pagination with :func:`sqlalchemy_ulid.paginate`.

    Args:
        session: a Session or Connection.
        stmt: a ``select()`` without LIMIT or OFFSET; its ORDER BY, if any,
            ends with ``column``.
        column: the ULID or UUIDv7 column to page on (cursors are its own text
            form: 26 characters, or the canonical 36-character UUID; opaque
            strings for a sort by several keys).
        params: the page parameters; by default those of the current request
            (``add_pagination(app)`` or ``Depends(ULIDCursorParams)``).
        descending: None (the ORDER BY decides), or newest first with True.
        sealer: seal cursors into opaque tokens (and accept only those).
        settle: passed to the core ``paginate`` when given (tail-safe feeds).
        total: the core's ``total=``; None uses ``"exact"`` when the raw
            params ask for ``include_total``.
        transformer: fastapi-pagination's items transformer.
        additional_data: extra fields of the page model.

    Returns:
        A :class:`ULIDCursorPage` (or the page type of the route).

    Raises:
        fastapi.HTTPException: 400 with our message for a malformed cursor,
            before any SQL runs.
    """
    resolved, kwargs = _core_kwargs(params, descending, sealer, settle, total)
    try:
        page = _paging.paginate(session, stmt, column, **kwargs)
    except InvalidULID as exc:  # raised before any SQL
        raise _bad_cursor(exc) from None
    items = apply_items_transformer(page.items, transformer)
    return _create(items, resolved, page, bool(descending), sealer, additional_data)


async def apaginate(
    session: AsyncSession | AsyncConnection,
    stmt: sa.Select[Any],
    column: ULIDColumn,
    params: AbstractParams | None = None,
    *,
    descending: bool | None = None,
    sealer: CursorSealer | None = None,
    settle: timedelta | Literal["auto"] | None = None,
    total: Total = None,
    transformer: Any = None,
    additional_data: dict[str, Any] | None = None,
) -> Any:
    """Await one page: :func:`paginate` for AsyncSession and AsyncConnection."""
    resolved, kwargs = _core_kwargs(params, descending, sealer, settle, total)
    try:
        page = await _paging.apaginate(session, stmt, column, **kwargs)
    except InvalidULID as exc:  # raised before any SQL
        raise _bad_cursor(exc) from None
    items = await apply_items_transformer(page.items, transformer, async_=True)
    return _create(items, resolved, page, bool(descending), sealer, additional_data)


def _create(
    items: Sequence[Any],
    params: AbstractParams,
    page: _paging.Page[Any],
    descending: bool,
    sealer: CursorSealer | None,
    additional_data: dict[str, Any] | None,
) -> Any:
    next_, previous = _seal(page, descending, sealer)
    extra = dict(additional_data or {})
    if page.total is not None:
        extra.setdefault("total", page.total)
    return create_page(items, params=params, next_=next_, previous=previous, **extra)
