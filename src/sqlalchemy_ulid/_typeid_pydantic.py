"""Pydantic v2 support for typed ids, imported only when pydantic asks for a schema.

``TypeID`` alone accepts any prefix; ``TypeID["user"]`` is
``Annotated[TypeID, <prefix user>]``, whose schema accepts only ``user_...``.
A wrong or missing prefix, bad text or a value of another type raises
:class:`ValueError` (``InvalidTypeID``), which pydantic reports as a
validation error: a 422 in FastAPI, never a 500.

This module imports nothing from the typed-id module: ``TypeID`` hands it
the class, its ``coerce`` function and its error class, so the two modules
form no import circle.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any

from pydantic_core import core_schema as cs

if TYPE_CHECKING:
    from ._typeid import TypeID

#: Turns a TypeID, its text or a typeid-like object into a TypeID, or raises.
Coerce = Callable[[object], "TypeID"]

__all__ = ["EXAMPLE_SUFFIX", "core_schema", "json_schema", "pattern", "prefixed"]

#: The suffix of the spec's own UUIDv7 example, shown in OpenAPI.
EXAMPLE_SUFFIX = "01h455vb4pex5vsknk084sn02q"
_SUFFIX_PATTERN = "[0-7][0-9a-hjkmnp-tv-z]{25}"
_ANY_PREFIX = "(?:[a-z](?:[a-z_]{0,61}[a-z])?_)?"


def pattern(prefix: str | None) -> str:
    """The exact pattern of the text of ids with ``prefix`` (None: any prefix)."""
    if prefix is None:
        return f"^{_ANY_PREFIX}{_SUFFIX_PATTERN}$"
    # A prefix is letters and underscores: nothing to escape.
    return f"^{prefix}_{_SUFFIX_PATTERN}$" if prefix else f"^{_SUFFIX_PATTERN}$"


def _validator(expected: str | None, coerce: Coerce, error: type[ValueError]) -> Any:
    def validate(value: Any) -> TypeID:
        try:
            typeid = coerce(value)
        except TypeError as exc:
            # pydantic reports ValueError as a validation error; TypeError would escape.
            raise ValueError(str(exc)) from None
        if expected is not None and typeid.prefix != expected:
            given = repr(typeid.prefix) if typeid.prefix else "none"
            raise error(f"expected prefix {expected!r}, got {given}")
        return typeid

    return validate


def core_schema(prefix: str | None, coerce: Coerce, error: type[ValueError]) -> cs.CoreSchema:
    """Validate from a TypeID, its text or a typeid-like object; serialize to the text."""
    return cs.no_info_plain_validator_function(
        _validator(prefix, coerce, error),
        serialization=cs.plain_serializer_function_ser_schema(str, when_used="json-unless-none"),
    )


def json_schema(prefix: str | None) -> dict[str, Any]:
    """The JSON schema: a string with the exact pattern and a valid example."""
    if prefix is None:
        example, low, high = f"user_{EXAMPLE_SUFFIX}", 26, 90
    else:
        example = f"{prefix}_{EXAMPLE_SUFFIX}" if prefix else EXAMPLE_SUFFIX
        low = high = len(example)
    return {
        "type": "string",
        "format": "typeid",
        "pattern": pattern(prefix),
        "minLength": low,
        "maxLength": high,
        "examples": [example],
    }


class _Prefix:
    """The Annotated marker of ``TypeID[prefix]``."""

    __slots__ = ("coerce", "error", "prefix")

    def __init__(self, prefix: str, coerce: Coerce, error: type[ValueError]) -> None:
        self.prefix = prefix
        self.coerce = coerce
        self.error = error

    def __repr__(self) -> str:
        return f"TypeIDPrefix({self.prefix!r})"

    def __get_pydantic_core_schema__(self, source_type: Any, handler: Any) -> cs.CoreSchema:
        return core_schema(self.prefix, self.coerce, self.error)

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        return json_schema(self.prefix)


@cache
def prefixed(cls: type[TypeID], coerce: Coerce, error: type[ValueError], prefix: str) -> Any:
    """``Annotated[TypeID, <prefix>]``, one per prefix: ``TypeID[prefix]``."""
    return Annotated[cls, _Prefix(prefix, coerce, error)]
