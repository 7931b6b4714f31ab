"""The settle horizon: the newest id a tailing reader may deliver safely.

Ids are made before their rows commit, so a row can become visible after a
row with a newer id. A reader that moves its cursor past the newer one would
never see the older one. ``paginate(..., settle=...)`` therefore delivers only
rows whose id is older than a *horizon*, asked of the database server in a
statement of its own, before the data query:

* ``settle=timedelta``: ``horizon = server now - settle``. Sound while every
  writer commits within ``settle`` of making its id (clock skew included).
* ``settle="auto"``: each database's own way to know which writers are
  still in flight, described beside its row in ``_dialects/``:

  - ``"writers"`` (PostgreSQL): ``horizon = min(server now, start of the
    oldest transaction holding a write lock on the table) - margin``; the
    row's ``read_writers`` reads that start, or refuses a view, a hot
    standby, a missing privilege or a prepared transaction.
  - ``"locking_read"`` (MariaDB/MySQL): ``horizon = server now - margin``
    and the data query is a locking read through the clustered index (the
    row's ``locking_hint``), so the paging column must be in the primary key
    (:class:`SettleError` otherwise, before any SQL). The hint is checked in
    the rendered SQL (an ORM statement renders its table into a subquery for
    joined eager loads; the hint goes with it). A node of a multi-primary
    cluster (the row's ``cluster_variable``) and a view are refused.
  - no way (SQLite, and databases without a settle row): refused before
    any SQL, with the row's reason.

Both modes need the data query to read a snapshot taken after the horizon
statement: READ COMMITTED (or autocommit); at REPEATABLE READ a row
committed between an older snapshot and the horizon would be behind the
horizon and invisible, the very skip this prevents. The row's
``safe_levels`` say which levels are sound, ``fresh_levels`` which are sound
only in a transaction that has not read yet (MariaDB's REPEATABLE READ),
and ``refused_why`` why a level is refused where the general reason would
mislead (PostgreSQL's REPEATABLE READ).

The refusals that depend on the server (a standby, a cluster node, the
table's kind) are read in the horizon statement itself, with no extra
round trip.
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

from ._dialects import SettleSQL, all_rows, dialect_row, dialects_with
from ._errors import SettleError
from ._keys import table_column

#: What ``settle=`` accepts: a fixed window, or "auto".
Settle = Union[timedelta, Literal["auto"]]  # noqa: UP007


class _DatabaseDefault(timedelta):
    """``margin=`` left out: each database's own margin (``DialectRow.settle_margin``)."""

    def __repr__(self) -> str:
        return "<the database's default: 0.2 s on PostgreSQL, 1 s on MariaDB/MySQL>"


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


# Dialects (one per engine) whose server has no cluster variable (a build
# without wsrep: Oracle MySQL, MariaDB built WITH_WSREP=OFF). Weak, so a
# disposed engine's dialect is not kept alive.
_NO_CLUSTER_VARIABLE: weakref.WeakSet[Dialect] = weakref.WeakSet()

#: One statement for an executor to run, and how to read its result.
Step = tuple[sa.Executable, Callable[[Result[Any]], Any]]


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
        """A statement to run before :meth:`statement` (the row's ``writers_prelude``), or None."""
        if self.table is None or not self.sql.writers_prelude:
            return None
        return sa.text(self.sql.writers_prelude)

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
            assert self.sql.read_writers is not None
            writers_start = self.sql.read_writers(row, self.table)
            if writers_start is not None:
                oldest = min(oldest, writers_start)
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
        supported = dialects_with(lambda row: row.settle)
        raise SettleError(f"settle= is not supported on {dialect.name}: only on {supported}")
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
    if not isinstance(error, sa.exc.OperationalError):
        return False
    codes = {row.settle.lock_wait_timeout for row in all_rows() if row.settle is not None}
    return _error_code(error) in codes - {None}
