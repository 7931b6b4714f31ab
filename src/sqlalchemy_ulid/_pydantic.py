"""Pydantic v2 support, imported only when pydantic asks for a ULID schema."""

from __future__ import annotations

import uuid
from typing import Any

from pydantic_core import core_schema as cs

from ._ulid import ULID

__all__ = ["PATTERN", "core_schema", "json_schema"]

#: The exact pattern of a ULID's text, either case, first character 0-7.
PATTERN = r"^[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}$"


def _validate(value: Any) -> ULID:
    if isinstance(value, ULID):
        return value
    if isinstance(value, str):
        return ULID(value)
    if isinstance(value, uuid.UUID):
        return ULID.from_uuid(value)
    # pydantic reports ValueError as a validation error; TypeError would escape.
    raise ValueError(f"a ULID is given as str, ULID or UUID, not {type(value).__name__}")


def core_schema() -> cs.CoreSchema:
    """Validate from str, ULID or UUID; serialize to the canonical string."""
    return cs.no_info_plain_validator_function(
        _validate,
        serialization=cs.plain_serializer_function_ser_schema(str, when_used="json-unless-none"),
    )


def json_schema() -> dict[str, Any]:
    """Return the JSON schema: a 26-character string with the exact pattern."""
    return {
        "type": "string",
        "format": "ulid",
        "pattern": PATTERN,
        "minLength": 26,
        "maxLength": 26,
        "examples": ["01HTQW311N1KR5G0Y75M3EF00H"],
    }
