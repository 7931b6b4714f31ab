"""The database's side of the settle margin: :func:`guard_ulid_age_ddl` (PostgreSQL).

``settle="auto"`` on PostgreSQL is sound when every id is at most ``margin``
older than the moment its INSERT takes the table's lock. :func:`guard_ulid_age`
checks that in the writer's process, before the driver sends; but a pooler
in transaction mode (PgBouncer, RDS Proxy, Supavisor) queues the statement
*after* that, and meanwhile the server sees no transaction, so the readers'
horizon moves past the id. A BEFORE INSERT trigger checks where the wait
can no longer come after it: on the server, once the INSERT holds its lock,
against the server's ``clock_timestamp()`` (the clock the horizon reads).

Why that is exact: a row that a reader cannot see yet belongs to a
transaction that either held the table's lock when the horizon was read
(horizon <= its start - margin <= the trigger's clock - margin) or took the
lock after (horizon <= the horizon statement's start - margin < the
trigger's clock - margin). The trigger refuses ids older than ``max_age``
at its clock, so with ``max_age <= margin`` every such id is newer than the
horizon, whatever the writer's clock, the pooler's queue, or the network
did before.

A refused row raises SQLSTATE ``40001`` (serialization_failure), which ORMs,
drivers' retry helpers and :class:`~sqlalchemy_ulid.Retry`-style loops
already treat as "run the transaction again": retried, the row gets a new
id (``default=new_ulid`` makes it at flush). A session that must store old
ids on purpose (an import) sets ``sqlalchemy_ulid.allow_old_ids`` to ``on``
(``SET LOCAL``); a feed's readers may skip those rows.
"""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from ._dialects import dialect_row
from ._keys import storage_kind
from ._settle import DEFAULT_MARGIN, margin_for
from ._types import ULIDType

__all__ = ["guard_ulid_age_ddl"]

# SQLAlchemy leaves these constructors unannotated.
_PG = postgresql.dialect()  # type: ignore[no-untyped-call]

#: The setting that lets a transaction store old ids (an import).
ALLOW_OLD_IDS = "sqlalchemy_ulid.allow_old_ids"

_FUNCTION = """\
CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $guard$
DECLARE
  age bigint;
BEGIN
  IF current_setting('{allow}', true) = 'on' THEN
    RETURN NEW;
  END IF;
{checks}
  RETURN NEW;
END
$guard$"""

_CHECK = """\
  IF NEW.{column} IS NOT NULL THEN
    age := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - {millis};
    IF age > {max_ms} THEN
      RAISE EXCEPTION USING
        ERRCODE = '40001',
        MESSAGE = format('refusing the id %s of a new {table} row: made %s ms before its '
                         'INSERT ran, and the guard allows {max_ms} ms', NEW.{column}, age),
        HINT = 'Retry the transaction with a new id (default=new_ulid makes it at flush). '
               'A pooler or a slow request delayed this INSERT; a feed with '
               'settle=''auto'' could have moved past the id.';
    END IF;
  END IF;"""


def _guarded_columns(table: sa.Table) -> list[sa.Column[object]]:
    # What a feed pages on: the ULID primary-key columns that are not foreign keys.
    return [
        column
        for column in table.primary_key.columns
        if isinstance(column.type, ULIDType) and not column.foreign_keys
    ]


def guard_ulid_age_ddl(
    table: sa.Table, max_age: timedelta = DEFAULT_MARGIN, *, drop: bool = False
) -> list[sa.ExecutableDDLElement]:
    """The DDL of a trigger that refuses, on the server, ids older than ``max_age`` (PostgreSQL).

    Makes ``settle="auto"`` exact for ids made by the application (in
    Python) however long their INSERT waits after the id was made: in a
    pooler's queue (PgBouncer in transaction mode), a slow network, or a
    slow request. The trigger compares each new row's id (the
    :class:`ULIDType` columns of the primary key that are not foreign keys)
    with the server's clock at the moment the INSERT runs, and refuses one
    older than ``max_age`` with SQLSTATE ``40001``, so the writer retries
    its transaction with a new id. Give the readers a ``margin=`` of at
    least ``max_age`` (the default of both is the database's margin, 0.2 s).
    The writer's clock does not matter: one that runs late only makes ids
    be refused.

    Returns ``CREATE OR REPLACE FUNCTION`` and ``CREATE TRIGGER`` statements
    (with ``drop=True``: the ``DROP`` statements). Run them once, in a
    migration (``op.execute(statement)``), or attach them to the table so
    that ``metadata.create_all()`` creates them. Each runs on PostgreSQL
    only (``execute_if(dialect="postgresql")``), so the same metadata still
    creates on other databases.

    Args:
        table: the table whose new rows are checked.
        max_age: the oldest an id may be when its INSERT runs; by default
            the database's default margin (0.2 s on PostgreSQL).
        drop: return the statements that remove the trigger instead.

    Raises:
        TypeError: ``table`` is not a Table, or ``max_age`` not a timedelta.
        ValueError: ``max_age`` is not positive, or the table has no ULID
            primary-key column of its own.

    Example:
        >>> import sqlalchemy as sa
        >>> from sqlalchemy_ulid import ULIDType, guard_ulid_age_ddl, new_ulid
        >>> events = sa.Table(
        ...     "events", sa.MetaData(),
        ...     sa.Column("id", ULIDType(), primary_key=True, default=new_ulid),
        ... )
        >>> for ddl in guard_ulid_age_ddl(events):
        ...     sa.event.listen(events, "after_create", ddl)
        >>> print(guard_ulid_age_ddl(events)[1].statement)
        DROP TRIGGER IF EXISTS events_ulid_age_guard ON events;
        CREATE TRIGGER events_ulid_age_guard BEFORE INSERT ON events
        FOR EACH ROW EXECUTE FUNCTION events_ulid_age_guard()
    """
    if not isinstance(table, sa.Table):
        raise TypeError(f"table must be a sqlalchemy Table, not {type(table).__name__}")
    if isinstance(max_age, bool) or not isinstance(max_age, timedelta):
        raise TypeError(f"max_age must be a timedelta, not {type(max_age).__name__}")
    if max_age <= timedelta(0):
        raise ValueError(f"max_age must be positive, got {max_age!r}")
    columns = _guarded_columns(table)
    if not columns:
        raise ValueError(
            f"{table.name} has no ULIDType primary-key column of its own (not a foreign "
            "key): there is no id for a feed to page on, so nothing to guard"
        )
    quote = _PG.identifier_preparer
    name = f"{table.name[:49]}_ulid_age_guard"
    schema = f"{quote.quote_schema(table.schema)}." if table.schema else ""
    function = schema + quote.quote(name)
    target = quote.format_table(table)
    trigger = quote.quote(name)
    if drop:
        statements = [
            f"DROP TRIGGER IF EXISTS {trigger} ON {target}",
            f"DROP FUNCTION IF EXISTS {function}()",
        ]
    else:
        max_ms = margin_for(max_age, _PG) // timedelta(milliseconds=1)
        millis = dialect_row(_PG).time
        assert millis is not None
        checks = "\n".join(
            _CHECK.format(
                column=quote.quote(column.name),
                millis=millis.millis[storage_kind(column.type, _PG)](
                    f"NEW.{quote.quote(column.name)}"
                ),
                max_ms=max(1, max_ms),
                table=table.name.replace("'", "''"),
            )
            for column in columns
        )
        statements = [
            _FUNCTION.format(function=function, allow=ALLOW_OLD_IDS, checks=checks),
            f"DROP TRIGGER IF EXISTS {trigger} ON {target};\n"
            f"CREATE TRIGGER {trigger} BEFORE INSERT ON {target}\n"
            f"FOR EACH ROW EXECUTE FUNCTION {function}()",
        ]
    # DDL text is %-formatted: a literal percent sign is doubled.
    return [
        sa.DDL(statement.replace("%", "%%")).execute_if(  # type: ignore[no-untyped-call]
            dialect="postgresql"
        )
        for statement in statements
    ]
