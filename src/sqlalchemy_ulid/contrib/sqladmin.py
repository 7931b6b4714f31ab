"""sqladmin support: ULID columns as text, with their creation time.

Out of the box sqladmin treats a ``ULIDType`` column as binary (it falls
back to the type's ``LargeBinary`` implementation). Set two attributes on a
``ModelView``::

    from sqladmin import ModelView
    from sqlalchemy_ulid.contrib.sqladmin import ULIDConverter, ULID_TYPE_FORMATTERS

    class EventAdmin(ModelView, model=Event):
        form_converter = ULIDConverter
        column_type_formatters = ULID_TYPE_FORMATTERS
        column_type_formatters_detail = ULID_TYPE_FORMATTERS

Lists and detail pages then show ``01HTQW311N1KR5G0Y75M3EF00H
(2024-04-05 19:34:38.901 UTC)``, and forms edit the 26-character text,
validated strictly.
"""

from __future__ import annotations

from typing import Any

from . import _missing

try:
    from markupsafe import Markup
    from sqladmin.formatters import BASE_FORMATTERS
    from sqladmin.forms import ModelConverter, converts
    from wtforms import Field, Form, StringField, ValidationError
except ModuleNotFoundError as exc:
    raise _missing("sqladmin", "sqladmin", exc) from exc

from .._codec import InvalidULID
from .._ulid import ULID

__all__ = ["ULID_TYPE_FORMATTERS", "ULIDConverter", "format_ulid", "validate_ulid"]


def format_ulid(value: ULID) -> Markup:
    """Return the id's text and its creation time (UTC, to the millisecond).

    Example:
        >>> format_ulid(ULID("01HTQW311N1KR5G0Y75M3EF00H"))
        Markup('01HTQW311N1KR5G0Y75M3EF00H (2024-04-05 19:34:38.901 UTC)')
    """
    created = value.datetime.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return Markup("{} ({} UTC)").format(str(value), created)


#: sqladmin's default formatters plus ULIDs as text and creation time.
ULID_TYPE_FORMATTERS: dict[Any, Any] = {**BASE_FORMATTERS, ULID: format_ulid}


def validate_ulid(form: Form, field: Field) -> None:
    """WTForms validator: the field holds a ULID's text (or nothing)."""
    if field.data in (None, ""):
        return
    try:
        ULID(field.data) if isinstance(field.data, str) else ULID(str(field.data))
    except InvalidULID as exc:
        raise ValidationError(str(exc)) from None


class ULIDConverter(ModelConverter):
    """sqladmin's ``ModelConverter`` that edits ULID columns as 26-character text."""

    # sqladmin types its converters with WTForms classes, which are untyped.
    @converts("ULIDType", "PythonULIDType")  # type: ignore[untyped-decorator]
    def conv_ulid(self, model: type, prop: Any, kwargs: dict[str, Any]) -> Any:
        """Return a text field validated as a ULID."""
        kwargs.setdefault("validators", [])
        kwargs["validators"].append(validate_ulid)
        kwargs.setdefault("filters", []).append(lambda v: v or None)
        return StringField(**kwargs)
