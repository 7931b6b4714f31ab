"""FastAPI: a cursor query parameter, one error handler, a page response model.

Install with the ``fastapi`` extra (``pip install 'sqlalchemy-ulid[fastapi]'``).

* :data:`Cursor` types a query parameter that carries a page cursor (a bare
  id or the opaque cursor of a sort by several keys). Its shape is checked
  at the boundary (a 422 that names the parameter, before the handler runs);
  the text reaches :func:`~sqlalchemy_ulid.paginate` unchanged.
* :func:`add_exception_handlers` answers every
  :class:`~sqlalchemy_ulid.InvalidInput` (a malformed or foreign cursor, a
  bad page size, a naive time, ...) with a 400 problem document
  (RFC 9457, ``application/problem+json``) that names the query parameter
  it came from.
* :class:`KeysetPage` is the response model: the items, ``next_cursor``
  and ``prev_cursor``.

Example:
    >>> from fastapi import FastAPI
    >>> from sqlalchemy_ulid.contrib.fastapi import Cursor, KeysetPage, add_exception_handlers
    >>> app = FastAPI()
    >>> add_exception_handlers(app)
    >>> @app.get("/items", response_model=KeysetPage[int])
    ... def items(after: Cursor | None = None) -> KeysetPage[int]:
    ...     return KeysetPage[int](items=[1, 2], next_cursor=None)
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator, Sequence
from http import HTTPStatus
from typing import Annotated, Any, Generic, TypeVar

from . import _missing

try:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from pydantic import AfterValidator, BaseModel, WithJsonSchema
except ModuleNotFoundError as exc:
    raise _missing("fastapi", "fastapi", exc) from exc

from .._errors import (
    CursorSortMismatch,
    InvalidCursor,
    InvalidInput,
    InvalidLimit,
    InvalidTime,
    InvalidULID,
)
from .._paging import Page, PaginationError

__all__ = ["Cursor", "KeysetPage", "add_exception_handlers", "problem"]

#: The longest cursor accepted: a sealed multi-key cursor is at most 6,000
#: characters (a multi-key cursor at most 4,096).
MAX_CURSOR_LENGTH = 6000
_SHAPE = re.compile(r"[A-Za-z0-9_-]+")


def _check_shape(text: str) -> str:
    if not text:
        raise ValueError("a cursor is not empty: omit the parameter for the first page")
    if len(text) > MAX_CURSOR_LENGTH:
        raise ValueError(f"a cursor is at most {MAX_CURSOR_LENGTH} characters, got {len(text)}")
    if not _SHAPE.fullmatch(text):
        bad = next(char for char in text if not _SHAPE.fullmatch(char))
        raise ValueError(
            f"a cursor holds letters, digits, '-' and '_' only, not {bad!r}: pass the "
            "next_cursor or prev_cursor of a page as it was given"
        )
    return text


#: A page cursor as a query parameter: ``after: Cursor | None = None``.
#:
#: Text of letters, digits, ``-`` and ``_`` (a bare id, UUID text, or the
#: opaque cursor of a sort by several keys), 1 to 6,000 characters; anything
#: else is a 422 naming the parameter. Whether the cursor belongs to the
#: statement's sort is checked by ``paginate``: a 400 through
#: :func:`add_exception_handlers`.
Cursor = Annotated[
    str,
    AfterValidator(_check_shape),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_CURSOR_LENGTH,
            "pattern": "^[A-Za-z0-9_-]+$",
            "description": "the next_cursor or prev_cursor of a page, as given",
        }
    ),
]

_T = TypeVar("_T")


class KeysetPage(BaseModel, Generic[_T]):
    """One page as a response: the items, and the cursors of the pages around it.

    ``next_cursor`` goes back as ``after=``, ``prev_cursor`` as ``before=``;
    each is null where no page lies that way.

    Example:
        >>> KeysetPage[int](items=[1, 2], next_cursor="abc").model_dump()
        {'items': [1, 2], 'next_cursor': 'abc', 'prev_cursor': None}
    """

    items: list[_T]
    next_cursor: str | None = None
    prev_cursor: str | None = None

    @classmethod
    def of(cls, page: Page[Any], items: Sequence[Any] | None = None) -> KeysetPage[_T]:
        """The response of a :class:`~sqlalchemy_ulid.Page`, items read by attribute.

        ORM objects become the item model through their attributes, so the
        item model needs no ``from_attributes`` setting. ``items`` replaces
        the page's own (e.g. rows already turned into dicts).

        Example:
            >>> from sqlalchemy_ulid import Page
            >>> page = Page(items=[3], next_cursor="c", prev_cursor=None, has_more=True)
            >>> KeysetPage[int].of(page).next_cursor
            'c'
        """
        return cls.model_validate(
            {
                "items": list(page.items if items is None else items),
                "next_cursor": page.next_cursor,
                "prev_cursor": page.prev_cursor,
            },
            from_attributes=True,
        )


# -- errors ----------------------------------------------------------------------

#: The ``code`` of each error, most specific class first.
_CODES: tuple[tuple[type[InvalidInput], str], ...] = (
    (CursorSortMismatch, "cursor_sort_mismatch"),
    (InvalidCursor, "invalid_cursor"),
    (InvalidULID, "invalid_id"),
    (InvalidLimit, "invalid_limit"),
    (InvalidTime, "invalid_time"),
    (PaginationError, "unpageable_sort"),
)


def _is_cursor(annotation: Any) -> bool:
    """Whether a parameter's annotation is :data:`Cursor` (or a union holding it)."""
    if typing.get_origin(annotation) is Annotated and any(
        getattr(item, "func", None) is _check_shape for item in annotation.__metadata__
    ):
        return True
    return any(_is_cursor(arg) for arg in typing.get_args(annotation))


def _query_fields(dependant: Any) -> Iterator[Any]:
    """The query parameters of a route's dependant and of its dependencies."""
    yield from getattr(dependant, "query_params", ())
    for sub in getattr(dependant, "dependencies", ()):
        yield from _query_fields(sub)


def _parameters(request: Request, error: InvalidInput) -> list[str]:
    """The query parameters the error came from, as far as the route tells."""
    dependant = getattr(request.scope.get("route"), "dependant", None)
    names: list[str] = []
    for field in _query_fields(dependant):
        if field.alias in names:
            continue
        given = request.query_params.getlist(field.alias)
        if not given:
            continue
        if isinstance(error, InvalidLimit):
            blamed = str(error.value) in given
        else:  # cursors, and bare ids sent as cursors
            blamed = isinstance(error, InvalidULID) and _is_cursor(field.field_info.annotation)
        if blamed:
            names.append(field.alias)
    return names


def problem(request: Request, error: InvalidInput) -> JSONResponse:
    """The 400 problem document (RFC 9457) of one refused input.

    Keys: ``type`` (``about:blank``), ``title``, ``status``, ``detail`` (the
    parameter and the message), ``code`` (``invalid_cursor``,
    ``cursor_sort_mismatch``, ``invalid_id``, ``invalid_limit``,
    ``invalid_time``, ``unpageable_sort`` or ``invalid_input``) and
    ``errors``: one ``{"field", "message"}`` per parameter it came from
    (empty when no query parameter is to blame).
    """
    message = str(error)
    fields = _parameters(request, error)
    code = next((code for cls, code in _CODES if isinstance(error, cls)), "invalid_input")
    status = HTTPStatus.BAD_REQUEST
    return JSONResponse(
        {
            "type": "about:blank",
            "title": status.phrase,
            "status": status.value,
            "detail": f"{', '.join(fields)}: {message}" if fields else message,
            "code": code,
            "errors": [{"field": name, "message": message} for name in fields],
        },
        status_code=status.value,
        media_type="application/problem+json",
    )


async def _handle(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, InvalidInput)  # registered for this class only
    return problem(request, error)


def add_exception_handlers(app: FastAPI) -> None:
    """Answer every :class:`~sqlalchemy_ulid.InvalidInput` with a 400 problem document.

    One call covers malformed ids and cursors, cursors of another sort, bad
    page sizes, naive or out-of-range times and sorts that cannot be paged:
    each raised before any SQL ran. See :func:`problem` for the body.

    Example:
        >>> from fastapi import FastAPI
        >>> app = FastAPI()
        >>> add_exception_handlers(app)
        >>> InvalidInput in app.exception_handlers
        True
    """
    app.add_exception_handler(InvalidInput, _handle)
