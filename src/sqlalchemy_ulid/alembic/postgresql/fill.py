"""A batch of the online backfill on PostgreSQL: one ``UPDATE ... FROM unnest()``.

The batch's keys and ids go to the server as two array parameters::

    UPDATE t SET col = v.u FROM unnest(CAST(:keys AS <key type>[]),
      CAST(:ids AS <id type>[]), CAST(:times AS <time type>[])) AS v(k, u, w)
     WHERE t.key = v.k AND t.key >= :low AND t.key <= :high AND t.col IS NULL
       AND t.time = v.w

one statement of five parameters, whatever the batch's size. A row whose
time a writer changed since the batch read it is left without an id: the
next pass reads it again, with its new time.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection

if TYPE_CHECKING:
    from .._plan.database import FillRows

__all__ = ["fill_batch"]


def fill_batch(connection: Connection, rows: FillRows) -> int:
    """Write ``rows`` (see the module docstring); return the rows given an id."""
    dialect = connection.dialect
    # Names unescaped: text() escapes a % once for the driver, as it sends
    # the statement (the preparer's own quoting would make that twice).
    key, column = rows.key, rows.column
    key_type = rows.key_type
    if getattr(key_type, "collation", None):
        # A CAST takes no COLLATE: without it the key column's own collation
        # decides the comparison (an explicit one wins over the default).
        key_type = copy.copy(key_type)
        key_type.collation = None
    statement = sa.text(
        f"UPDATE {rows.table} AS t SET {column} = v.u "
        f"FROM unnest(CAST(:keys AS {key_type.compile(dialect=dialect)}[]), "
        f"CAST(:ids AS {rows.id_type.compile(dialect=dialect)}[]), "
        f"CAST(:times AS {rows.time_type.compile(dialect=dialect)}[])) AS v(k, u, w) "
        f"WHERE t.{key} = v.k AND t.{key} >= :low AND t.{key} <= :high "
        f"AND t.{column} IS NULL AND t.{rows.time} = v.w"
    )
    params = {
        "keys": rows.keys,
        "ids": rows.ids,
        "times": rows.times,
        "low": rows.keys[0],
        "high": rows.keys[-1],
    }
    return int(connection.execute(statement, params).rowcount)
