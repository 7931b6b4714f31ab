"""The settle horizon: the newest id a tailing reader may deliver safely.

Ids are made before their rows commit, so a row can become visible after a
row with a newer id. A reader that moves its cursor past the newer one would
never see the older one. ``paginate(..., settle=...)`` therefore delivers only
rows whose id is older than a *horizon*, asked of the database server in a
statement of its own, before the data query:

* ``settle=timedelta``: ``horizon = server now - settle``. Sound while every
  writer commits within ``settle`` of making its id (clock skew included).
* ``settle="auto"`` on PostgreSQL: ``horizon = min(server now, start of the
  oldest transaction holding a write lock on the table) - margin``. A row
  that is still invisible belongs to a transaction that either holds that
  lock now (its ids were made at most ``margin`` before it started writing,
  so after ``xact_start - margin``) or has not sent its INSERT yet (so its
  ids are newer than ``now - margin``). PostgreSQL makes a commit visible
  before it releases the locks, so a transaction that holds no lock when we
  look has either committed, visibly, or written nothing yet.
* ``settle="auto"`` on MariaDB/MySQL: ``horizon = server now - margin`` and
  the data query is a locking read (``LOCK IN SHARE MODE`` / ``FOR SHARE``).
  A locking read waits for every uncommitted row it meets in the range, then
  reads it if it committed; a row not yet inserted when the horizon was taken
  has an id newer than ``now - margin``. ``INFORMATION_SCHEMA.INNODB_TRX`` is
  not used: its ``trx_started`` has whole-second precision and MariaDB serves
  it from a cache that is not refreshed while it is read more often than
  every 100 ms, so a poller can miss a transaction that just started.

Both modes need the data query to read a snapshot taken after the horizon
statement: READ COMMITTED (or autocommit). REPEATABLE READ is refused: its
snapshot can predate the horizon, and then a row committed in between is
behind the horizon and invisible, which is the very skip this prevents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Literal, Union

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

#: What ``settle=`` accepts: a fixed window, or "auto".
Settle = Union[timedelta, Literal["auto"]]  # noqa: UP007

DEFAULT_MARGIN = timedelta(seconds=1)

# Server clock as integer Unix milliseconds, taken when the statement starts
# (never later than anything else the statement reads).
_NOW_MS = {
    "postgresql": "floor(extract(epoch from statement_timestamp()) * 1000)::bigint",
    # UTC_TIMESTAMP is timezone-free arithmetic (UNIX_TIMESTAMP(NOW()) is not,
    # in a DST fold); NOW() and UTC_TIMESTAMP() are the statement start.
    "mysql": "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000",
    # 'now' is stable within a statement; SQLite runs in this process.
    "sqlite": "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
}

# The session's isolation level and whether it autocommits, so a reader whose
# snapshot could predate the horizon is refused instead of silently skipping.
_ISOLATION = {
    "postgresql": "current_setting('transaction_isolation'), 0",
    "mariadb": "@@tx_isolation, @@autocommit",
    "mysql": "@@transaction_isolation, @@autocommit",
    "sqlite": "'serializable', 1",
}
# PostgreSQL runs READ UNCOMMITTED as READ COMMITTED; InnoDB's would read
# rows that may still roll back.
_SAFE_LEVELS = {"postgresql": {"read committed", "read uncommitted"}}
_READ_COMMITTED = {"read committed"}

# Transactions holding a lock that INSERT, UPDATE, DELETE, COPY or LOCK TABLE
# take on the table or one of its partitions (not VACUUM's, not readers').
_PG_WRITERS = """
WITH target AS (SELECT to_regclass(:table) AS oid),
holders AS (
    SELECT DISTINCT l.pid FROM pg_locks l, target
    WHERE l.locktype = 'relation'
      AND l.mode IN ('RowExclusiveLock', 'ShareRowExclusiveLock',
                     'ExclusiveLock', 'AccessExclusiveLock')
      AND (l.relation = target.oid
           OR l.relation IN (SELECT relid FROM pg_partition_tree(target.oid)))
      AND l.pid IS DISTINCT FROM pg_backend_pid()
)
SELECT {now}, {isolation},
       (SELECT floor(extract(epoch from min(a.xact_start)) * 1000)::bigint
          FROM holders h JOIN pg_stat_activity a ON a.pid = h.pid),
       (SELECT count(*) FROM holders WHERE pid IS NULL),
       pg_has_role('pg_read_all_stats', 'USAGE'),
       (SELECT c.relkind::text FROM pg_class c, target WHERE c.oid = target.oid)
"""
# MariaDB/MySQL "auto": the paging table's type. A locking read through a
# view that MariaDB materializes (ALGORITHM=TEMPTABLE, or any view with
# GROUP BY, DISTINCT, UNION...) locks no base row, so it would not wait for
# a slow writer: only base tables are accepted.
_MYSQL_TABLE_TYPE = (
    "(SELECT TABLE_TYPE FROM information_schema.TABLES "
    "WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :name)"
)
# Writers lock the tables they write: a plain ('r') or partitioned ('p')
# table. A view's writers lock its base tables, never the view, so watching
# the view would see none and skip their rows.
_PG_TABLE_KINDS = {"r": "table", "p": "partitioned table"}
_PG_OTHER_KINDS = {"v": "view", "m": "materialized view", "f": "foreign table"}
# A holder whose xact_start reads NULL (or whose row is gone) ended its
# transaction between the two reads: committed, so visible to the page, or
# rolled back. Hidden starts are ruled out up front by pg_read_all_stats. A
# holder without a pid is a prepared transaction, whose start is unknown.


class SettleError(ValueError):
    """The settle horizon cannot be computed soundly here.

    Raised for ``settle="auto"`` on SQLite, without the privilege it needs,
    and for a session whose isolation level could make the page skip rows.
    """


@dataclass(frozen=True)
class Horizon:
    """How to ask the server for the horizon, and how to read its answer."""

    settle: Settle
    margin: timedelta
    dialect_name: str
    locking_read: bool  # MariaDB/MySQL "auto": the data query locks what it reads
    table: str | None  # PostgreSQL "auto": the quoted table name
    # The driver connection autocommits (each statement its own transaction,
    # so the data query's snapshot follows the horizon whatever the level).
    # PostgreSQL cannot tell this from SQL: a server whose
    # default_transaction_isolation is REPEATABLE READ reports that level.
    client_autocommit: bool = False
    # MariaDB/MySQL "auto": (schema or None, name) of the paging column's
    # table, checked not to be a view (see _MYSQL_TABLE_TYPE).
    base_table: tuple[str | None, str] | None = None

    def connected(self, dialect: Dialect, dbapi_connection: Any) -> Horizon:
        """This horizon for the connection that runs it.

        ``mysql://`` URLs tell MariaDB from MySQL only once connected (they
        name the isolation variable differently), and an ORM session may not
        have connected when the page is planned. Every PostgreSQL driver
        SQLAlchemy supports says on ``.autocommit`` whether it autocommits.
        """
        autocommit = getattr(dbapi_connection, "autocommit", False)
        return replace(
            self,
            dialect_name=_dialect_key(dialect),
            client_autocommit=autocommit is True,
        )

    def prelude(self) -> sa.TextClause | None:
        """A statement to run before :meth:`statement`, or None.

        PostgreSQL keeps one snapshot of ``pg_stat_activity`` per transaction:
        a reader polling inside one transaction would see writers' old
        ``xact_start`` (stalling the feed) and not see new backends at all.
        Clearing it in a statement of its own orders it before the read.
        """
        return sa.text("SELECT pg_stat_clear_snapshot()") if self.table is not None else None

    def statement(self) -> sa.TextClause:
        """The horizon query: server now, isolation level, and in-flight writers."""
        isolation = _ISOLATION[self.dialect_name]
        now = _NOW_MS["mysql" if self.dialect_name == "mariadb" else self.dialect_name]
        if self.table is not None:
            return sa.text(_PG_WRITERS.format(now=now, isolation=isolation)).bindparams(
                table=self.table
            )
        if self.base_table is not None:
            schema, name = self.base_table
            return sa.text(f"SELECT {now}, {isolation}, {_MYSQL_TABLE_TYPE}").bindparams(
                schema=schema, name=name
            )
        return sa.text(f"SELECT {now}, {isolation}")

    def bound_ms(self, row: Sequence[Any]) -> int:
        """The horizon in Unix ms from the horizon query's row; ids below it are settled."""
        now_ms, level = int(row[0]), str(row[1])
        autocommit = bool(int(row[2])) or self.client_autocommit
        safe = _SAFE_LEVELS.get(self.dialect_name, _READ_COMMITTED)
        if not autocommit and level.lower().replace("-", " ") not in safe:
            raise SettleError(
                f"settle= needs each query to see the rows committed before it, but this "
                f"session runs at {level}: its snapshot may predate the horizon and skip "
                "rows. Page with isolation_level='READ COMMITTED' (or 'AUTOCOMMIT'), e.g. "
                "engine.execution_options(isolation_level='READ COMMITTED')"
            )
        if self.settle != "auto":
            return now_ms - _ms(self.settle)
        oldest = now_ms
        if self.base_table is not None and row[3] != "BASE TABLE":
            raise SettleError(
                f"settle='auto' needs the paging column's table {self.base_table[1]} to be a "
                f"table, not {'missing' if row[3] is None else 'a ' + str(row[3]).lower()}: a "
                "locking read through a view can skip the rows its writers hold (views "
                "MariaDB materializes take no row locks). Page on the base table's "
                "column, or pass a timedelta as settle="
            )
        if self.table is not None:
            writers_start, prepared, privileged, kind = row[3], int(row[4]), row[5], row[6]
            if kind is None:
                raise SettleError(f"settle='auto': no table {self.table} in this database")
            if kind not in _PG_TABLE_KINDS:
                raise SettleError(
                    f"settle='auto' watches the writers of the paging column's table, but "
                    f"{self.table} is a {_PG_OTHER_KINDS.get(kind, 'relation of kind ' + kind)}: "
                    "writers lock the tables it reads, not it, so their rows could be skipped. "
                    "Page on the base table's column, or pass a timedelta as settle="
                )
            if not privileged:
                raise SettleError(
                    "settle='auto' on PostgreSQL reads when other sessions' transactions "
                    "started (pg_stat_activity.xact_start), which needs membership in "
                    "pg_read_all_stats (GRANT pg_read_all_stats TO <reader role>); or "
                    "pass a timedelta as settle="
                )
            if prepared:
                raise SettleError(
                    f"settle='auto': a prepared transaction holds {self.table}, and when it "
                    "started is unknown; COMMIT PREPARED or ROLLBACK PREPARED it, or pass a "
                    "timedelta as settle="
                )
            if writers_start is not None:
                oldest = min(oldest, int(writers_start))
        return oldest - _ms(self.margin)


def _ms(delta: timedelta) -> int:
    return delta // timedelta(milliseconds=1)


def _dialect_key(dialect: Dialect) -> str:
    if dialect.name == "mysql" and getattr(dialect, "is_mariadb", False):
        return "mariadb"
    return dialect.name


def check_settle(settle: object, margin: object) -> None:
    """Validate ``settle=`` and ``margin=`` before any SQL (ValueError/TypeError)."""
    if isinstance(margin, bool) or not isinstance(margin, timedelta):
        raise TypeError(f"margin must be a timedelta, not {type(margin).__name__}")
    if margin < timedelta(0):
        raise ValueError(f"margin must not be negative, got {margin!r}")
    if settle == "auto":
        return
    if not isinstance(settle, timedelta):
        raise TypeError(f"settle must be a timedelta or 'auto', not {settle!r}")
    if settle < timedelta(0):
        raise ValueError(f"settle must not be negative, got {settle!r}")


def plan_horizon(
    settle: Settle, margin: timedelta, dialect: Dialect, table: sa.Table | None
) -> Horizon:
    """Choose how this dialect computes the horizon (no SQL runs here)."""
    name = _dialect_key(dialect)
    if name not in _ISOLATION:
        raise SettleError(
            f"settle= is supported on PostgreSQL, MariaDB/MySQL and SQLite, not {name}"
        )
    if settle != "auto":
        return Horizon(settle, margin, name, locking_read=False, table=None)
    if name == "sqlite":
        raise SettleError(
            "settle='auto' has nothing to read on SQLite (no view of other connections' "
            "transactions); pass a timedelta longer than your slowest write transaction"
        )
    if name != "postgresql":
        base = None if table is None else (table.schema, table.name)
        return Horizon(settle, margin, name, locking_read=True, table=None, base_table=base)
    if table is None:
        raise SettleError(
            "settle='auto' on PostgreSQL watches the paging column's table for writers; "
            "page on a column of a table (or an ORM attribute mapped to one)"
        )
    quoted = dialect.identifier_preparer.format_table(table)
    return Horizon(settle, margin, name, locking_read=False, table=quoted)


def is_lock_wait_timeout(error: BaseException) -> bool:
    """Whether a poll failed because MariaDB/MySQL's locking read timed out.

    The locking read of ``settle="auto"`` waits for a writer's uncommitted
    row; a writer slower than ``innodb_lock_wait_timeout`` makes it fail with
    error 1205. Nothing was delivered and the cursor has not moved, so a
    follower can simply poll again.
    """
    args: tuple[Any, ...] = tuple(getattr(getattr(error, "orig", None), "args", ()))
    return isinstance(error, sa.exc.OperationalError) and args[:1] == (1205,)
