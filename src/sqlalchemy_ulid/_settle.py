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
  look has either committed, visibly, or written nothing yet. A holder
  whose ``xact_start`` reads NULL has not necessarily ended: a session with
  ``track_activities = off`` (state ``disabled``), or one that turned it on
  mid-transaction, shows NULL while it holds its lock. Only state ``idle``
  (or no row: the backend exited) means ended; any other holder counts from
  ``backend_start``, which precedes every transaction of its backend, so the
  horizon is held back until it releases the lock (see _dialects/postgresql.py).
* ``settle="auto"`` on MariaDB/MySQL: ``horizon = server now - margin`` and
  the data query is a locking read (``LOCK IN SHARE MODE`` / ``FOR SHARE``)
  through the clustered index, ``FORCE INDEX (PRIMARY)``. A locking read
  waits for every uncommitted row it meets in the range, then reads it if it
  committed; a row not yet inserted when the horizon was taken has an id
  newer than ``now - margin``. *Which index it scans matters*: InnoDB writes
  a row's primary-key (clustered) entry first and its secondary-index
  entries one by one after it, checking each foreign key just before the
  entry of that key's index. An INSERT waiting on a foreign-key check (a
  parent row locked by someone else) has its clustered entry in place, but
  maybe not yet the entry of the index a filter would use (``INDEX(tenant)``
  for ``WHERE tenant = 1``); a scan of that index passes the row without
  waiting, the cursor moves past it, and it is lost. The clustered index is
  the one index every row is in before the INSERT can wait on anything
  after it. So the paging column must be in the primary key
  (:class:`SettleError` otherwise, before any SQL):

  - ``id`` is the primary key: the page is a range scan of it.
  - ``PRIMARY KEY (tenant, id)`` with the tenant fixed by ``=`` in the
    WHERE: a range scan of that tenant's part of it. Without the tenant
    fixed it is still sound, but a full scan that locks every row.
  - ``id`` only a unique secondary key: refused. Through its own index it
    is unsound (the INSERT may wait before that entry is written); through
    the primary key, the ``id`` range is no index range, so every poll would
    scan and lock the whole table and wait for every writer in flight.

  What the margin must cover is therefore the time from making an id to
  the INSERT's clustered entry: a wait that comes before it (a table lock,
  a foreign key on a prefix of the primary key, a gap lock) counts too.
  The hint is checked in the rendered SQL (an ORM statement renders its
  table into a subquery for joined eager loads; the hint goes with it).
  ``INFORMATION_SCHEMA.INNODB_TRX`` is not used: its ``trx_started`` has
  whole-second precision and MariaDB serves it from a cache that is not
  refreshed while it is read more often than every 100 ms, so a poller can
  miss a transaction that just started.

Both modes need the data query to read a snapshot taken after the horizon
statement: READ COMMITTED (or autocommit); at REPEATABLE READ a row
committed between an older snapshot and the horizon would be behind the
horizon and invisible, the very skip this prevents.

* MariaDB at REPEATABLE READ (its default) is accepted in a transaction
  that has not touched InnoDB yet, which ``@@in_transaction = 0`` reports in
  the horizon statement itself (a plain ``BEGIN`` or ``START TRANSACTION
  WITH CONSISTENT SNAPSHOT`` sets it, as does any read or write of an InnoDB
  table). InnoDB creates a transaction's read view at its first consistent
  read of an InnoDB table, and the horizon statement reads none (NOW(),
  variables, ``information_schema``: checked on MariaDB 10.11, where a row
  committed right after the horizon statement is in the page, see
  tests/test_settle_isolation.py). So the page's own read creates the view,
  after the horizon, as READ COMMITTED would. With ``"auto"`` the page is a
  locking read, which reads the newest committed version whatever the
  view; its subqueries (a filter reading another table) read the view made
  at the page, also after the horizon. One difference remains: at
  REPEATABLE READ the locking read also takes gap locks, held until the
  transaction ends, which make writers' INSERTs into the scanned range (and
  past its end) wait. A poll should end its transaction at once, as
  ``follow()`` does. MySQL has no ``@@in_transaction``: REPEATABLE READ is
  refused there as before.
* PostgreSQL at REPEATABLE READ is refused even in a new transaction: its
  snapshot is taken at the transaction's first statement, which is the
  horizon statement (or its ``pg_stat_clear_snapshot()`` prelude), before
  that statement reads ``pg_locks``. A writer committing in between holds
  no lock when the horizon looks, and is not in the page's snapshot: its
  rows are behind the horizon and never seen. Sound alternatives would need
  the horizon read outside the reader's transaction (a second connection).

``settle="auto"`` is refused where the server it reads cannot see every
writer's open transaction, checked in the horizon statement itself (no extra
round trip): on a PostgreSQL hot standby (``pg_is_in_recovery()``) the
writers run on the primary; on a Galera node (``@@global.wsrep_on``) a
transaction open on another node sends nothing here until it commits, so the
locking read has no row lock to wait for. A server built without wsrep
(Oracle MySQL, some MariaDB builds) has no ``wsrep_on`` and answers error
1193; it cannot be a Galera node, so the statement runs again without that
column, and the engine's dialect is remembered so that later polls do not
ask.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, Union

import sqlalchemy as sa
from sqlalchemy.engine import Dialect, Result

from ._dialects import SettleSQL, dialect_row
from ._keys import table_column

#: What ``settle=`` accepts: a fixed window, or "auto".
Settle = Union[timedelta, Literal["auto"]]  # noqa: UP007


class _DatabaseDefault(timedelta):
    """``margin=`` left out: each database's own margin (``DialectRow.settle_margin``)."""

    def __repr__(self) -> str:
        return "<the database's default: 0.2 s on PostgreSQL, 1 s on MariaDB/MySQL>"


# The lock wait timeout of the locking read (ER_LOCK_WAIT_TIMEOUT, MariaDB and MySQL).
_LOCK_WAIT_TIMEOUT = 1205
_SUPPORTED = "it is supported on PostgreSQL, MariaDB/MySQL and SQLite"

#: The default of every ``margin=``: resolved per database by :func:`margin_for`
#: (0.2 s on PostgreSQL, 1 s elsewhere). Its value, 1 s, is what code that
#: reads it as a plain timedelta gets.
DEFAULT_MARGIN: timedelta = _DatabaseDefault(seconds=1)


def margin_for(margin: timedelta, dialect: Dialect) -> timedelta:
    """The margin to use on ``dialect``: the database's own for the default.

    Example:
        >>> from sqlalchemy.dialects import mysql, postgresql
        >>> margin_for(DEFAULT_MARGIN, postgresql.dialect()).total_seconds()
        0.2
        >>> margin_for(DEFAULT_MARGIN, mysql.dialect()).total_seconds()
        1.0
        >>> margin_for(timedelta(seconds=3), postgresql.dialect()).total_seconds()
        3.0
    """
    if type(margin) is _DatabaseDefault:
        return dialect_row(dialect).settle_margin
    return margin


# Writers lock the tables they write: a plain ('r') or partitioned ('p')
# table. A view's writers lock its base tables, never the view, so watching
# the view would see none and skip their rows.
_PG_TABLE_KINDS = {"r": "table", "p": "partitioned table"}
_PG_OTHER_KINDS = {"v": "view", "m": "materialized view", "f": "foreign table"}
# Dialects (one per engine) whose server has no cluster variable (a build
# without wsrep: Oracle MySQL, MariaDB built WITH_WSREP=OFF). Weak, so a
# disposed engine's dialect is not kept alive.
_NO_CLUSTER_VARIABLE: weakref.WeakSet[Dialect] = weakref.WeakSet()

#: One statement for an executor to run, and how to read its result.
Step = tuple[sa.Executable, Callable[[Result[Any]], Any]]


class SettleError(ValueError):
    """The settle horizon cannot be computed soundly here.

    Raised for ``settle="auto"`` on SQLite, on a view (PostgreSQL or
    MariaDB/MySQL), on a PostgreSQL hot standby, on a Galera node, without
    the privilege it needs, on MariaDB/MySQL for a paging column outside the
    table's primary key (or read through a subquery), and for a session
    whose isolation level could make the page skip rows (REPEATABLE READ on
    PostgreSQL; on MariaDB, once the transaction has read).
    """


@dataclass(frozen=True)
class Horizon:
    """How to ask the server for the horizon, and how to read its answer."""

    settle: Settle
    margin: timedelta
    #: the database's horizon SQL and isolation rules
    sql: SettleSQL
    locking_read: bool  # MariaDB/MySQL "auto": the data query locks what it reads
    table: str | None  # PostgreSQL "auto": the quoted table name
    # MariaDB/MySQL "auto": read @@global.wsrep_on to refuse a Galera node, and
    # the dialect to remember a server that has no such variable.
    galera_check: bool = False
    dialect: Dialect | None = dataclasses.field(default=None, compare=False, repr=False)
    # The driver connection autocommits (each statement its own transaction,
    # so the data query's snapshot follows the horizon whatever the level).
    # PostgreSQL cannot tell this from SQL: a server whose
    # default_transaction_isolation is REPEATABLE READ reports that level.
    client_autocommit: bool = False
    # MariaDB/MySQL "auto": (schema or None, name) of the paging column's
    # table, checked not to be a view (see SettleSQL.table_type).
    base_table: tuple[str | None, str] | None = None
    # MariaDB/MySQL "auto": the FROM element (the table, or an alias of it)
    # that the page reads through its primary key.
    clustered: sa.FromClause | None = dataclasses.field(default=None, compare=False)

    def connected(self, dialect: Dialect, dbapi_connection: Any) -> Horizon:
        """This horizon for the connection that runs it.

        ``mysql://`` URLs tell MariaDB from MySQL only once connected (they
        name the isolation variable differently), and an ORM session may not
        have connected when the page is planned. Every PostgreSQL driver
        SQLAlchemy supports says on ``.autocommit`` whether it autocommits.
        """
        autocommit = getattr(dbapi_connection, "autocommit", False)
        return dataclasses.replace(
            self,
            sql=_settle_sql(dialect),
            client_autocommit=autocommit is True,
        )

    def steps(self) -> Generator[Step, Any, int]:
        """Yield the horizon's statements to the caller's executor; return the bound (ms).

        A database error of a statement is thrown back in here: the one a
        server without ``wsrep_on`` answers makes the statement run again
        without that column.
        """
        prelude = self.prelude()
        if prelude is not None:
            yield prelude, _scalar
        try:
            row = yield self.statement(), _one
        except sa.exc.DBAPIError as error:
            unknown = self.sql.unknown_variable
            if not (self.galera_check and _error_code(error) == unknown):
                raise
            # No wsrep in this server's build, so no Galera: ask without it.
            if self.dialect is not None:
                _NO_CLUSTER_VARIABLE.add(self.dialect)
            plain = dataclasses.replace(self, galera_check=False)
            return plain.bound_ms((yield plain.statement(), _one))
        return self.bound_ms(row)

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
        now, isolation = self.sql.now_ms, self.sql.isolation
        if self.table is not None:
            return sa.text(self.sql.writers.format(now=now, isolation=isolation)).bindparams(
                table=self.table
            )
        columns = [now, isolation]
        if self.galera_check:
            columns.append(f"@@global.{self.sql.cluster_variable}")
        if self.base_table is None:
            return sa.text(f"SELECT {', '.join(columns)}")
        schema, name = self.base_table
        columns.append(self.sql.table_type)
        return sa.text(f"SELECT {', '.join(columns)}").bindparams(schema=schema, name=name)

    def restrict(self, statement: sa.Select[Any]) -> sa.Select[Any]:
        """The page's statement, read the way this horizon's argument needs.

        MariaDB/MySQL ``"auto"``: a locking read through the clustered index
        (``FORCE INDEX (PRIMARY)``, see the module docstring), checked to be
        in the SQL the dialect renders. Otherwise the statement unchanged.
        """
        if not self.locking_read:
            return statement
        assert self.clustered is not None
        hint = self.sql.locking_hint
        # "*": every dialect; the statement only ever runs on this one.
        statement = statement.with_hint(self.clustered, hint, dialect_name="*")
        statement = statement.with_for_update(read=True)
        if self.dialect is not None:
            rendered = str(statement.compile(dialect=self.dialect))
            if hint not in rendered:
                raise SettleError(
                    "settle='auto' on MariaDB/MySQL reads the page through the primary "
                    f"key of {self.clustered}, but that table is not in the statement's "
                    "FROM as rendered; select from it directly, or pass a timedelta"
                )
        return statement

    def bound_ms(self, row: Sequence[Any]) -> int:
        """The horizon in Unix ms from the horizon query's row; ids below it are settled."""
        now_ms = int(row[0])
        extra = list(row[self._check_isolation(row) :])
        if self.settle != "auto":
            return now_ms - _ms(self.settle)
        oldest = now_ms  # MariaDB/MySQL: extra is [wsrep_on] [table type], as asked
        if self.galera_check and str(extra.pop(0)).upper() in ("1", "ON"):
            raise SettleError(
                "settle='auto' is not sound on a Galera node (wsrep_on = ON): a "
                "transaction open on another node is invisible here until it commits, so "
                "the poll cannot wait for it and would move past its rows. Pass a "
                "timedelta as settle= that covers your longest transaction plus "
                "certification and apply lag (see docs/distributed.md)"
            )
        if self.base_table is not None:
            table_type = extra.pop(0)
            if table_type != "BASE TABLE":
                shown = "missing" if table_type is None else "a " + str(table_type).lower()
                raise SettleError(
                    f"settle='auto' needs the paging column's table {self.base_table[1]} to "
                    f"be a table, not {shown}: a locking read through a view can skip the "
                    "rows its writers hold (views MariaDB materializes take no row locks). "
                    "Page on the base table's column, or pass a timedelta as settle="
                )
        if self.table is not None:
            writers_start, prepared, privileged, kind = row[3], int(row[4]), row[5], row[6]
            if row[7]:
                raise SettleError(
                    "settle='auto' is not sound on a PostgreSQL hot standby "
                    "(pg_is_in_recovery() is true): the transactions still open run on "
                    "the primary, where this server cannot see them. Pass a timedelta as "
                    "settle= that covers your longest transaction plus replay lag (see "
                    "docs/distributed.md), or read from the primary"
                )
            if kind is None:
                raise SettleError(f"settle='auto': no table {self.table} in this database")
            if kind not in _PG_TABLE_KINDS:
                other = _PG_OTHER_KINDS.get(kind, "relation of kind " + kind)
                raise SettleError(
                    f"settle='auto' watches the writers of the paging column's table, but "
                    f"{self.table} is a {other}: writers lock the tables it reads, not it, "
                    "so their rows could be skipped. Page on the base table's column, or "
                    "pass a timedelta as settle="
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

    def _check_isolation(self, row: Sequence[Any]) -> int:
        """Refuse a session whose page could read a snapshot older than the horizon.

        Returns the index of the horizon row's first column after the isolation ones.
        """
        level, autocommit = str(row[1]), bool(int(row[2])) or self.client_autocommit
        key = level.lower().replace("-", " ")
        asks_fresh = bool(self.sql.fresh_levels)  # a third column: not read yet?
        fresh = asks_fresh and not int(row[3])  # MariaDB's @@in_transaction
        if autocommit or key in self.sql.safe_levels:
            return 4 if asks_fresh else 3
        if fresh and key in self.sql.fresh_levels:
            return 4
        if key in self.sql.fresh_levels:
            raise SettleError(
                f"settle= at {level} needs a transaction that has not read yet, but this "
                "one already has (@@in_transaction = 1): its snapshot may predate the "
                "horizon and skip rows. Poll first in a new transaction (commit, or a "
                "new Session/Connection), or page with isolation_level='READ COMMITTED' "
                "or 'AUTOCOMMIT'"
            )
        why = dict(self.sql.refused_why).get(
            key, "its snapshot may predate the horizon and skip rows"
        )
        raise SettleError(
            f"settle= needs each query to see the rows committed before it, but this "
            f"session runs at {level}: {why}. Page with isolation_level='READ COMMITTED' "
            "(or 'AUTOCOMMIT'), e.g. "
            "engine.execution_options(isolation_level='READ COMMITTED')"
        )


def _ms(delta: timedelta) -> int:
    return delta // timedelta(milliseconds=1)


def _one(result: Result[Any]) -> Any:
    return result.one()


def _scalar(result: Result[Any]) -> Any:
    return result.scalar()


def _error_code(error: BaseException) -> object:
    """The server's error number of a MariaDB/MySQL driver error, or None."""
    args: tuple[Any, ...] = tuple(getattr(getattr(error, "orig", None), "args", ()))
    return args[0] if args else None


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


def _settle_sql(dialect: Dialect) -> SettleSQL:
    """The database's horizon SQL, or SettleError (no SQL) where it has none."""
    sql = dialect_row(dialect).settle
    if sql is None:
        raise SettleError(f"settle= is not supported on {dialect.name}: {_SUPPORTED}")
    return sql


def _clustered_from(column: sa.ColumnElement[Any], base: sa.Column[Any]) -> sa.FromClause:
    """The FROM element to read through the primary key, or SettleError (no SQL)."""
    table = base.table
    if base.name not in [c.name for c in table.primary_key.columns]:
        raise SettleError(
            f"settle='auto' on MariaDB/MySQL needs the paging column {base} in the "
            f"primary key of {table.name}: the page is a locking read through the "
            "primary key, the only index a slow INSERT is sure to be in (through the "
            "column's own index it skipped such rows; through the primary key without "
            "the column it would lock the whole table each poll). Page on the primary "
            "key, or pass a timedelta as settle="
        )
    source = getattr(column, "table", None)
    if isinstance(source, sa.Table) or (
        isinstance(source, sa.Alias) and isinstance(source.element, sa.Table)
    ):
        return source
    raise SettleError(
        f"settle='auto' on MariaDB/MySQL reads the paging column's table {table.name} "
        "through its primary key, and a locking read through a subquery or a derived "
        "table may lock nothing; page on the table's (or an alias's) own column, or "
        "pass a timedelta as settle="
    )


def plan_horizon(
    settle: Settle, margin: timedelta, dialect: Dialect, column: sa.ColumnElement[Any]
) -> Horizon:
    """Choose how this dialect computes the horizon (no SQL runs here)."""
    margin = margin_for(margin, dialect)
    sql = _settle_sql(dialect)
    if settle != "auto":
        return Horizon(settle, margin, sql, locking_read=False, table=None)
    if sql.auto is None:
        raise SettleError(sql.auto_refused)
    base = table_column(column)
    if base is None:
        raise SettleError(
            "settle='auto' watches the paging column's table for writers; page on a "
            "column of a table (or an ORM attribute mapped to one)"
        )
    table = base.table
    if sql.auto == "locking_read":
        return Horizon(
            settle,
            margin,
            sql,
            locking_read=True,
            table=None,
            galera_check=bool(sql.cluster_variable) and dialect not in _NO_CLUSTER_VARIABLE,
            dialect=dialect,
            base_table=(table.schema, table.name),
            clustered=_clustered_from(column, base),
        )
    quoted = dialect.identifier_preparer.format_table(table)
    return Horizon(settle, margin, sql, locking_read=False, table=quoted)


def is_lock_wait_timeout(error: BaseException) -> bool:
    """Whether a poll failed because MariaDB/MySQL's locking read timed out.

    The locking read of ``settle="auto"`` waits for a writer's uncommitted
    row; a writer slower than ``innodb_lock_wait_timeout`` makes it fail with
    error 1205. Nothing was delivered and the cursor has not moved, so a
    follower can simply poll again.
    """
    return isinstance(error, sa.exc.OperationalError) and _error_code(error) == _LOCK_WAIT_TIMEOUT
