"""The creation time of a stored ULID or UUIDv7, in SQL: ``ulid_timestamp(column)``.

The SQL reads the leading 48-bit millisecond from whatever the column
stores (a native uuid, 16 bytes, UUID hex text or ULID text) and turns it
into the database's timestamp, in UTC. The per-dialect SQL is in the
``_dialects`` table (:class:`~sqlalchemy_ulid._dialects.TimeSQL`); the
storage kind comes from ``_keys``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.exc import CompileError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler, StrSQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from ._dialects import dialect_row, dialects_with
from ._keys import column_expression, keys_of, storage_kind
from ._utctime import CreationTime

__all__ = ["ulid_timestamp"]


_MARKER = "\x00column\x00"


class _CreationTime(FunctionElement[datetime]):
    """``ulid_timestamp(column)``: compiled per dialect from the key's storage."""

    name = "ulid_timestamp"
    type = CreationTime()
    inherit_cache = True


@compiles(_CreationTime)
def _compile(element: _CreationTime, compiler: SQLCompiler, **kw: Any) -> str:
    dialect = compiler.dialect
    time = dialect_row(dialect).time
    (column,) = element.clauses.clauses
    if isinstance(compiler, StrSQLCompiler):
        # str(statement) without a dialect: show the call, as for any function.
        return f"ulid_timestamp({compiler.process(column, **kw)})"
    if time is None:
        raise CompileError(
            f"ulid_timestamp() has no SQL for the {dialect.name} dialect; it has for "
            f"{dialects_with(lambda row: row.time)}"
        )
    time = time.for_server(dialect)
    kind = storage_kind(column.type, dialect)
    direct = time.direct.get(kind)
    if keys_of(column).key_kind.uuid7_time:
        direct = time.uuid7_direct.get(kind, direct)
    millis = time.millis.get(kind)
    if direct is not None:
        sql = direct(_MARKER)
    elif millis is not None:
        sql = time.timestamp(millis(_MARKER))
    else:
        raise CompileError(f"ulid_timestamp() cannot read {kind} storage on {dialect.name}")
    # The template's own "%" must be doubled where the driver's paramstyle
    # uses it, the column's compiled SQL must not be touched: the template is
    # escaped around a marker, then the column goes in.
    template: str = compiler.post_process_text(sql)  # type: ignore[no-untyped-call]
    return template.replace(_MARKER, compiler.process(column, **kw))


def ulid_timestamp(column: Any) -> FunctionElement[datetime]:
    """Return the creation time of a ULID or UUIDv7 column as a SQL expression.

    The database reads the leading 48-bit millisecond of the stored key and
    makes it a timestamp: ``timestamptz`` on PostgreSQL, a UTC ``DATETIME``
    on MySQL/MariaDB (whatever the session ``time_zone``), SQLAlchemy's UTC
    text on SQLite. Selected values arrive as aware UTC datetimes, equal to
    the key's ``.datetime``; compare it with aware datetimes only.

    Works on every storage of ``ULIDType`` and on UUID columns (``sa.Uuid``,
    ``postgresql.UUID``, advanced-alchemy's ``GUID``), in ``select``,
    ``where``, ``group_by``, ``order_by``, a ``column_property`` and a
    generated column (``sa.Computed``; MariaDB allows only a virtual one).
    To select rows by time, prefer ``created_since`` and friends, which
    compare the key itself and so use its index.

    On PostgreSQL 18 and later (the server's version, read when the engine
    connects) a UUID column's time is ``uuid_extract_timestamp(col)``, and a
    ``ULIDType`` column's is read with 18's bytea-to-integer casts. Never
    call ``uuid_extract_timestamp()`` on a ULID yourself: it reads version
    and variant bits that a ULID does not have, and gives NULL or a wrong
    time on most ULIDs.

    Args:
        column: the key column (Core column, ORM attribute or ``mapped_column``).

    Raises:
        TypeError: the column is not a column expression.

    Example:
        >>> from datetime import datetime, timezone
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import ULID, ULIDType, ulid_timestamp
        >>> events = sa.Table("events", sa.MetaData(), sa.Column("id", ULIDType()))
        >>> engine = sa.create_engine("sqlite://")
        >>> events.metadata.create_all(engine)
        >>> u = ULID("01HTQW311N1KR5G0Y75M3EF00H")
        >>> with engine.begin() as conn:
        ...     _ = conn.execute(events.insert(), {"id": u})
        ...     created = conn.scalar(sa.select(ulid_timestamp(events.c.id)))
        >>> created
        datetime.datetime(2024, 4, 5, 19, 34, 38, 901000, tzinfo=datetime.timezone.utc)
        >>> created == u.datetime
        True
        >>> print(ulid_timestamp(events.c.id) >= u.datetime)
        ulid_timestamp(events.id) >= :param_1
    """
    return _CreationTime(column_expression(column))
