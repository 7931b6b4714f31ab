"""The PostgreSQL script toolkit of the offline (``--sql``) scripts not yet on the engine.

``_literal``, ``_dollar_quoted``, ``_comment``, ``_MILLIS_BY_TYPE`` and
``_MAX_BATCH``, shared by the storage conversion's and the key conversion's
scripts. ``add_ulid_column(online=True)`` writes its script through the
engine (``_plan/render_pg.py``, ``postgresql/add_column.py``).
"""

from __future__ import annotations

__all__: list[str] = []

#: Rows one batch may give ids to: the tie rank has 16 bits.
_MAX_BATCH = 65_535


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _dollar_quoted(tag: str, body: str) -> str:
    """``body`` as a dollar-quoted string whose tag does not occur in it."""
    while f"${tag}$" in body:
        tag += "_"
    return f"${tag}${body}${tag}$"


def _comment(text: str) -> str:
    """Text for a ``--`` comment line: a line break in a name must not end it."""
    return text.replace("\r", " ").replace("\n", " ")


#: The time column's type -> the SQL of its Unix milliseconds (%I: its name).
#: Integers are taken as milliseconds, as online; a timestamp without time
#: zone is read as UTC. Any other type (a date, a float or numeric of epoch
#: seconds) is refused, as online: it would date ids wrongly.
_MILLIS_BY_TYPE = (
    "CASE WHEN a.atttypid IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype) "
    "THEN format('%I::bigint', a.attname) "
    "WHEN a.atttypid IN ('timestamp'::regtype, 'timestamptz'::regtype) "
    "THEN format('floor(extract(epoch FROM %I) * 1000)::bigint', a.attname) END"
)


#: The time column's type -> the SQL of its Unix milliseconds (%I: its name).
#: Integers are taken as milliseconds, as online; a timestamp without time
#: zone is read as UTC. Any other type (a date, a float or numeric of epoch
#: seconds) is refused, as online: it would date ids wrongly.
_MILLIS_BY_TYPE = (
    "CASE WHEN a.atttypid IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype) "
    "THEN format('%I::bigint', a.attname) "
    "WHEN a.atttypid IN ('timestamp'::regtype, 'timestamptz'::regtype) "
    "THEN format('floor(extract(epoch FROM %I) * 1000)::bigint', a.attname) END"
)
