"""A batch of the online backfill on MariaDB/MySQL: one ``UPDATE``, its ids in a derived table.

The batch's keys, ids and times go to the server as the rows of a derived
table, first row a ``SELECT`` naming the columns, the others a table value
constructor (``VALUES (k, u, w), ...``; MySQL spells a row ``ROW(k, u, w)``)::

    UPDATE t JOIN (SELECT %s AS k, %s AS u, %s AS w UNION ALL VALUES (%s, %s, %s),
      ...) AS v ON t.key = v.k SET t.col = v.u
     WHERE t.col IS NULL AND t.time = v.w
       AND t.key >= <first key> AND t.key <= <last key>

one statement that reads and writes each row of the batch once: no
temporary table to fill and empty around it. The key range keeps the
statement on the batch's rows whatever the derived table's column types.
A text key is matched as ``CONVERT(v.k USING <its character set>) COLLATE
<its collation>``, by the column's own rules. A row whose time a writer
changed since the batch read it is left without an id: the next pass reads
it again, with its new time.
A batch of more than :data:`ROWS_PER_STATEMENT` rows is sent as several
such statements (each within ``max_allowed_packet``), each committing on
its own, as a batch does.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

if TYPE_CHECKING:
    from .._plan.database import FillRows

__all__ = ["ROWS_PER_STATEMENT", "fill_batch"]

_NAME = re.compile(r"[A-Za-z0-9_]+")

#: The most rows one statement carries: a few hundred kB of SQL for most keys.
ROWS_PER_STATEMENT = 5_000


def fill_batch(connection: Connection, rows: FillRows, mariadb: bool) -> int:
    """Write ``rows`` (see the module docstring); return the rows given an id."""
    dialect = connection.dialect
    mark = "?" if dialect.paramstyle == "qmark" else "%s"
    percent = dialect.paramstyle in ("format", "pyformat")
    key_bind = rows.key_type.bind_processor(dialect)
    names = (rows.table, rows.key, rows.column, rows.time)
    table, key, column, when = (n.replace("%", "%%") for n in names) if percent else names
    row = f"({mark}, {mark}, {mark})" if mariadb else f"ROW({mark}, {mark}, {mark})"
    match = "v.k"
    if isinstance(rows.keys[0], str):
        match = _as_key_text(connection, table, key)
    done = 0
    for start in range(0, len(rows.keys), ROWS_PER_STATEMENT):
        keys = rows.keys[start : start + ROWS_PER_STATEMENT]
        ids = rows.ids[start : start + ROWS_PER_STATEMENT]
        times = rows.times[start : start + ROWS_PER_STATEMENT]
        derived = f"SELECT {mark} AS k, {mark} AS u, {mark} AS w"
        if len(keys) > 1:
            derived += " UNION ALL VALUES " + ", ".join([row] * (len(keys) - 1))
        params: list[Any] = []
        for k, u, w in zip(keys, ids, times, strict=True):
            params += (k if key_bind is None else key_bind(k), u, w)
        params += (params[0], params[-3])
        statement = (
            f"UPDATE {table} AS t JOIN ({derived}) AS v ON t.{key} = {match} "
            f"SET t.{column} = v.u WHERE t.{column} IS NULL AND t.{when} = v.w "
            f"AND t.{key} >= {mark} AND t.{key} <= {mark}"
        )
        done += int(connection.exec_driver_sql(statement, tuple(params)).rowcount)
    return done


def _as_key_text(connection: Connection, table: str, key: str) -> str:
    """``v.k`` in the key column's character set and collation.

    The server converts a constant to the column's character set, but not a
    derived table's column: a key of another character set than the
    connection's (``latin1``) with a character outside ASCII in the batch
    would fail with "Illegal mix of collations". The batch holds rows, so
    the table has one to ask.
    """
    found = connection.exec_driver_sql(
        f"SELECT CHARSET(t.{key}), COLLATION(t.{key}) FROM {table} AS t LIMIT 1"
    ).first()
    if found is None or not all(_NAME.fullmatch(str(name)) for name in found):
        return "v.k"
    charset, collation = found
    return f"CONVERT(v.k USING {charset}) COLLATE {collation}"
