"""Autogenerate's comparison of ``ulid_server_default()`` / ``uuid7_server_default()``.

With ``compare_server_default=True`` Alembic asks the database whether the
model's DEFAULT equals the reflected one, by running both; two calls of a
generator never give the same id, so every such column was reported as
changed on every autogenerate. Here the two are compared as text instead:
the model's DEFAULT as it compiles for the connected server, the reflected
one as the server reports it, both brought to one spelling (case, spaces,
parentheses, casts, MariaDB's ``lcase`` for ``LOWER``). SQLAlchemy reflects
a MariaDB expression DEFAULT only up to its first space, so there a
reflected text that is the start of ours (40 characters or more) counts as
the same.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.schema import DefaultClause

from .._server_defaults import _KeyServerDefault

__all__ = ["compare_server_default"]

_CAST = re.compile(r"::[a-z_]+(?: [a-z_]+)*|\bcast\b|\bas (?:text|char|varchar|binary)\b")
_SYNONYMS = (("lcase", "lower"), ("ucase", "upper"))
#: the shortest reflected text accepted as the start of ours (MariaDB)
_PREFIX = 40


def _spelling(sql: str) -> str:
    text = sql.lower()
    for name, same in _SYNONYMS:
        text = re.sub(rf"\b{name}\b", same, text)
    text = _CAST.sub("", text)
    return re.sub(r"[\s()`\"]", "", text)


def _ours(default: Any) -> bool:
    arg = default.arg if isinstance(default, DefaultClause) else None
    return isinstance(arg, _KeyServerDefault)


def _reflected_text(default: Any) -> str | None:
    if default is None:
        return None
    arg = default.arg if isinstance(default, DefaultClause) else default
    return str(getattr(arg, "text", arg))


def same_server_default(
    dialect: Dialect, reflected: str | None, metadata_default: Any
) -> bool | None:
    """True/False when the model's DEFAULT is one of ours and is / is not the reflected one.

    None when the model's DEFAULT is not one of ours: the caller compares as
    it would otherwise.
    """
    if not _ours(metadata_default):
        return None
    if reflected is None:
        return False
    ours = _spelling(str(metadata_default.arg.compile(dialect=dialect)))
    found = _spelling(reflected)
    return found == ours or (len(found) >= _PREFIX and ours.startswith(found))


def compare_server_default(
    context: Any,
    inspected_column: Any,
    metadata_column: Any,
    inspected_default: str | None,
    metadata_default: Any,
    rendered_metadata_default: str | None,
) -> bool | None:
    """A ``compare_server_default`` for ``env.py``: no false diffs on generated-id defaults.

    With ``compare_server_default=True``, Alembic reports every column whose
    DEFAULT is ``ulid_server_default()`` or ``uuid7_server_default()`` as
    changed, on every autogenerate: it compares the two DEFAULTs by running
    them, and a generator never returns the same id twice. Pass this
    function instead of ``True``: such a column is compared by what its
    DEFAULT says, and a real change (another generator, another storage, a
    literal, no DEFAULT) is still reported. Every other column is left to
    Alembic's own comparison. Works on every supported Alembic; on Alembic
    1.18 and later the ``sqlalchemy_ulid`` autogenerate plugin does the same
    (``autogenerate_plugins=["alembic.autogenerate.*", "sqlalchemy_ulid"]``).

    Returns:
        False when the DEFAULTs are the same generator, True when the
        model's generator differs from the database's, None (Alembic
        decides) when the model's DEFAULT is not one of ours.

    Example:
        In ``env.py``::

            from sqlalchemy_ulid.alembic import compare_server_default, render_item

            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                render_item=render_item,
                compare_server_default=compare_server_default,
            )

        The verdict on a reflected DEFAULT, for one model column:

        >>> import sqlalchemy as sa
        >>> from types import SimpleNamespace
        >>> from sqlalchemy.dialects import postgresql
        >>> from sqlalchemy_ulid import ULIDType, ulid_server_default, uuid7_server_default
        >>> context = SimpleNamespace(dialect=postgresql.dialect())
        >>> column = sa.Column("id", ULIDType(), server_default=ulid_server_default())
        >>> def verdict(reflected):
        ...     return compare_server_default(
        ...         context, None, column, reflected, column.server_default, None
        ...     )
        >>> verdict("gen_ulid()"), verdict("gen_uuid7()"), verdict(None)
        (False, True, True)
    """
    return same_verdict(context.dialect, inspected_default, metadata_default)


def same_verdict(dialect: Dialect, reflected: str | None, metadata_default: Any) -> bool | None:
    """:func:`compare_server_default`'s answer: is there a difference (None: not ours)."""
    same = same_server_default(dialect, reflected, metadata_default)
    return None if same is None else not same


def autogenerate_comparator(
    autogen_context: Any,
    alter_column_op: Any,
    schema: str | None,
    tname: str,
    cname: str,
    conn_col: Any,
    metadata_col: Any,
) -> Any:
    """The same comparison as an Alembic 1.18+ autogenerate comparator (our plugin's)."""
    from alembic.util import PriorityDispatchResult

    verdict = same_verdict(
        autogen_context.dialect,
        _reflected_text(conn_col.server_default),
        metadata_col.server_default,
    )
    if verdict is None:
        return PriorityDispatchResult.CONTINUE
    alter_column_op.existing_server_default = conn_col.server_default
    if verdict:
        alter_column_op.modify_server_default = metadata_col.server_default
    return PriorityDispatchResult.STOP
