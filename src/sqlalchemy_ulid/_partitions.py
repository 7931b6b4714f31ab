"""PostgreSQL range partitions of a ULID- or UUIDv7-keyed table, by day or month.

A partition for a day holds ``[min_at(day start), min_at(next day start))``:
every ULID created that day, in UTC. On a UUID column the bounds are the
zero-random UUIDv7s of those milliseconds, so it holds every UUIDv7 of that
day. Because ``created_since`` is a plain comparison on the same column, the
planner prunes partitions that end before the bound.
"""

from __future__ import annotations

import hashlib
from datetime import date, datetime, timedelta, timezone
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection, Dialect

from ._dialects import dialect_row
from ._errors import InvalidTime
from ._keys import check_time_order, keys_of
from ._types import ULIDType

__all__ = ["create_partitions", "partition_ddl"]

Interval = Literal["day", "month"]


def _utc_start(when: date | datetime, what: str) -> datetime:
    if isinstance(when, datetime):
        if when.tzinfo is None or when.utcoffset() is None:
            raise InvalidTime(f"{what} is a naive datetime; pass an aware one or a date")
        return when.astimezone(timezone.utc)
    if isinstance(when, date):
        return datetime(when.year, when.month, when.day, tzinfo=timezone.utc)
    raise TypeError(f"{what} must be a date or an aware datetime, not {type(when).__name__}")


def _floor(moment: datetime, interval: Interval) -> datetime:
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return day.replace(day=1) if interval == "month" else day


def _step(moment: datetime, interval: Interval) -> datetime:
    if interval == "day":
        return moment + timedelta(days=1)
    year, month = divmod(moment.month, 12)
    return moment.replace(year=moment.year + year, month=month + 1)


def _boundaries(
    start: date | datetime, end: date | datetime, interval: Interval
) -> list[tuple[datetime, datetime]]:
    if interval not in ("day", "month"):
        raise InvalidTime(f"interval must be 'day' or 'month', got {interval!r}")
    low = _floor(_utc_start(start, "start"), interval)
    high = _utc_start(end, "end")
    if low > high:
        raise InvalidTime(f"start {start!r} is after end {end!r}")
    spans = []
    while low < high:
        spans.append((low, _step(low, interval)))
        low = spans[-1][1]
    return spans


def _check_dialect(dialect: Dialect) -> None:
    # Declarative range partitioning is PostgreSQL's syntax; MariaDB's
    # PARTITION BY RANGE takes integers only and SQLite has no partitions.
    if not dialect_row(dialect).range_partitions:
        raise ValueError(
            f"time partitions are a PostgreSQL feature; the {dialect.name} dialect has "
            "no range partitions over a ULID column"
        )


def partition_ddl(
    column: sa.Column[Any],
    start: date | datetime,
    end: date | datetime,
    *,
    interval: Interval = "day",
    dialect: Dialect | None = None,
) -> list[str]:
    r"""Return ``CREATE TABLE ... PARTITION OF`` statements covering a time span.

    One partition per UTC day (or month) from the one holding ``start`` up
    to the one holding the instant before ``end``, each bounded by
    zero-randomness ULIDs: ``FOR VALUES FROM (min_at(day)) TO
    (min_at(next day))``; on a UUID column (``sa.Uuid``,
    ``postgresql.UUID``, advanced-alchemy's ``GUID``), by the zero-random
    UUIDv7s of those milliseconds, version and variant bits set. The
    parent table must be declared with
    ``postgresql_partition_by="RANGE (<column>)"``. Partitions are named
    ``<table>_pYYYYMMDD`` (``<table>_pYYYYMM`` by month); past
    PostgreSQL's 63 bytes the table part is shortened and a hash of the
    table name added, so names stay distinct. Bounds are rendered by the
    column's type, so they match its storage.

    Args:
        column: the ULID or UUIDv7 column the parent table is partitioned on.
        start: a date (UTC) or an aware datetime.
        end: a date or aware datetime, exclusive.
        interval: ``"day"`` or ``"month"``.
        dialect: a PostgreSQL dialect (default: ``postgresql.dialect()``).

    Raises:
        ValueError: a non-PostgreSQL dialect, a naive datetime, an unknown
            interval, or ``start`` after ``end``; ``TimeOrderError`` (a
            ValueError) where the column's storage is not in time order.

    Example:
        >>> from datetime import date
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import ULIDType, partition_ddl
        >>> events = sa.Table(
        ...     "events",
        ...     sa.MetaData(),
        ...     sa.Column("id", ULIDType(), primary_key=True),
        ...     postgresql_partition_by="RANGE (id)",
        ... )
        >>> for ddl in partition_ddl(events.c.id, date(2024, 4, 5), date(2024, 4, 7)):
        ...     print(ddl.replace(" FOR", "\n  FOR").replace(" TO", "\n  TO"))
        CREATE TABLE events_p20240405 PARTITION OF events
          FOR VALUES FROM (CAST('018eab8e180000000000000000000000' AS UUID))
          TO (CAST('018eb0b4740000000000000000000000' AS UUID))
        CREATE TABLE events_p20240406 PARTITION OF events
          FOR VALUES FROM (CAST('018eb0b4740000000000000000000000' AS UUID))
          TO (CAST('018eb5dad00000000000000000000000' AS UUID))

        On a ``uuid`` column the bounds are UUIDv7s:

        >>> orders = sa.Table(
        ...     "orders",
        ...     sa.MetaData(),
        ...     sa.Column("id", sa.Uuid(), primary_key=True),
        ...     postgresql_partition_by="RANGE (id)",
        ... )
        >>> (ddl,) = partition_ddl(orders.c.id, date(2024, 4, 5), date(2024, 4, 6))
        >>> print(ddl.replace(" FOR", "\n  FOR").replace(" TO", "\n  TO"))
        CREATE TABLE orders_p20240405 PARTITION OF orders
          FOR VALUES FROM ('018eab8e-1800-7000-8000-000000000000')
          TO ('018eb0b4-7400-7000-8000-000000000000')
    """
    return [ddl for _, ddl in _partitions(column, start, end, interval, dialect)]


#: PostgreSQL keeps the first 63 bytes of a name and drops the rest.
_MAX_NAME_BYTES = 63


def _partition_name(table_name: str, suffix: str) -> str:
    """Return ``<table>_p<suffix>``, shortened with a hash past 63 bytes.

    PostgreSQL would cut a longer name silently, and the partitions of two
    days would then get one name; the hash keeps them apart, the same on
    every run.
    """
    name = f"{table_name}_p{suffix}"
    if len(name.encode()) <= _MAX_NAME_BYTES:
        return name
    digest = hashlib.sha1(table_name.encode()).hexdigest()[:8]
    tail = f"_{digest}_p{suffix}"
    head = table_name.encode()[: _MAX_NAME_BYTES - len(tail)].decode(errors="ignore")
    return head + tail


def _partitions(
    column: sa.Column[Any],
    start: date | datetime,
    end: date | datetime,
    interval: Interval,
    dialect: Dialect | None,
) -> list[tuple[str, str]]:
    """Return (partition name, DDL) pairs."""
    if dialect is None:
        dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    _check_dialect(dialect)
    table = column.table
    if not isinstance(table, sa.Table):
        raise TypeError("column must belong to a Table")
    preparer = dialect.identifier_preparer
    column_type = column.type
    check_time_order(column_type, dialect)
    keys = keys_of(column_type)
    processor = (
        column_type.literal_processor(dialect) if isinstance(column_type, ULIDType) else None
    )

    def literal(moment: datetime) -> str:
        value = keys.min_at(moment)
        if processor is not None:
            # The type's own literal, as is: compiling it would pass it
            # through SQLAlchemy's string escaping, which on 2.0 doubles the
            # backslash of a bytea literal ('\\x...'): wrong bounds.
            return processor(value)
        expr = sa.literal(value, type_=column_type)
        return str(expr.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))

    parent = preparer.format_table(table)
    partitions = []
    for low, high in _boundaries(start, end, interval):
        suffix = low.strftime("%Y%m" if interval == "month" else "%Y%m%d")
        bare = _partition_name(table.name, suffix)
        name = preparer.quote(bare)
        if table.schema:
            name = f"{preparer.quote_schema(table.schema)}.{name}"
        partitions.append(
            (
                bare,
                f"CREATE TABLE {name} PARTITION OF {parent} "
                f"FOR VALUES FROM ({literal(low)}) TO ({literal(high)})",
            )
        )
    return partitions


def create_partitions(
    connection: Connection,
    column: sa.Column[Any],
    start: date | datetime,
    end: date | datetime,
    *,
    interval: Interval = "day",
) -> list[str]:
    """Create the partitions :func:`partition_ddl` describes that do not exist yet.

    Idempotent: partitions of the table that exist already are skipped, so
    a scheduled job can create "the next 7 days" every day.

    Returns:
        The DDL of the partitions it created.

    Raises:
        ValueError: the connection is not to PostgreSQL (before any SQL
            runs), or the arguments are invalid as for :func:`partition_ddl`.

    Example:
        >>> from datetime import date
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import ULIDType, create_partitions
        >>> t = sa.Table("t", sa.MetaData(), sa.Column("id", ULIDType(), primary_key=True))
        >>> with sa.create_engine("sqlite://").connect() as conn:
        ...     create_partitions(conn, t.c.id, date(2024, 1, 1), date(2024, 1, 2))
        Traceback (most recent call last):
        ...
        ValueError: time partitions are a PostgreSQL feature; ...
    """
    partitions = _partitions(column, start, end, interval, connection.dialect)
    table = column.table
    assert isinstance(table, sa.Table)
    # Partitions that exist already are skipped: rerunning "the next 7
    # days" every day creates only the new ones.
    existing = set(
        connection.execute(
            sa.text(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = CAST(:parent AS regclass)"
            ),
            {"parent": connection.dialect.identifier_preparer.format_table(table)},
        ).scalars()
    )
    created = []
    for name, statement in partitions:
        if name not in existing:
            connection.exec_driver_sql(statement)
            created.append(statement)
    return created
