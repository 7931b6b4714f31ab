"""What the PostgreSQL offline (``--sql``) scripts not yet on the engine share.

``_MILLIS_BY_TYPE`` and ``_MAX_BATCH``, for the key conversion's script and
``add_ulid_column(online=True)``'s; the SQL text helpers are the engine's
(``_plan/render_pg.py``, ``_plan/state.py``).
"""

from __future__ import annotations

from ._plan.render_pg import dollar_quoted

__all__: list[str] = []

#: The engine's, under the name ``postgresql/add_column.py`` imports.
_dollar_quoted = dollar_quoted

#: Rows one batch may give ids to: the tie rank has 16 bits.
_MAX_BATCH = 65_535


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
