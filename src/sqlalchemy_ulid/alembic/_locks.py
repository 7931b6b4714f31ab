"""DDL that waits for its lock only briefly, then retries or fails cleanly.

A DDL statement that waits for a table lock (behind a long transaction that
read the table) makes every later query on that table queue behind *it*:
the classic PostgreSQL outage, and MariaDB's "Waiting for table metadata
lock" pile-up. So every DDL statement our ops send runs under a short lock
timeout (PostgreSQL ``lock_timeout``, MariaDB ``lock_wait_timeout`` and
``innodb_lock_wait_timeout``), restored afterwards. When the timeout fires,
the application's queries go on; we wait (with a growing backoff) and try
again, a bounded number of times. Then :class:`LockTimeoutError` names the
sessions that held the lock.

The per-database SQL is :class:`~sqlalchemy_ulid._dialects.LockSQL`, in the
dialect table.

No setting outlives the statement it is for, on any server session, even
through a pooler in transaction mode (PgBouncer, RDS Proxy, Supavisor),
which hands each transaction the next free server session: a ``SET`` in
one autocommit statement and its restore in another may land on two
sessions, and the application gets the changed one. On PostgreSQL each try
is therefore one transaction, ``BEGIN; SET LOCAL lock_timeout ...; <DDL>;
COMMIT`` (or a savepoint in the migration's own transaction). The one kind
of DDL that cannot run in a transaction, ``CREATE/DROP INDEX
CONCURRENTLY``, needs a session setting: it gets one only on a direct
connection (the port the server sees is the client's own). Through a proxy
it runs under the server's own ``lock_timeout``: its lock
(SHARE UPDATE EXCLUSIVE) never makes the application's reads and writes
wait, so waiting longer only delays the migration.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .._checks import check_seconds
from .._dialects import LockSQL, dialect_row
from ._inspect import run
from ._proxy import behind_a_proxy

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "Blocker",
    "LockTimeoutError",
    "check_lock_timeout",
    "lock_safe",
    "lock_safe_ddl",
]

#: Alembic's own logger: ``alembic.ini`` shows its INFO lines.
logger = logging.getLogger("alembic.runtime.migration")

#: The lock timeout of our ops, in seconds, unless ``lock_timeout=`` says otherwise.
DEFAULT_LOCK_TIMEOUT = 1.0

#: The longest wait between two tries, in seconds.
_MAX_BACKOFF = 30.0

#: DDL that PostgreSQL refuses inside a transaction block.
_NO_TRANSACTION = re.compile(r"\bCONCURRENTLY\b", re.IGNORECASE)


@dataclass(frozen=True)
class Blocker:
    """A session that held a lock our DDL statement waited for."""

    #: PostgreSQL pid or MariaDB connection id
    session: int
    #: e.g. ``idle in transaction`` (PostgreSQL), ``Sleep`` (MariaDB)
    state: str
    #: the session's current (or last) statement
    query: str
    #: how long its transaction has been open, in seconds (None: unknown)
    transaction_seconds: float | None

    def __str__(self) -> str:
        age = "" if self.transaction_seconds is None else f", {self.transaction_seconds:.0f}s open"
        query = " ".join(self.query.split())
        if len(query) > 200:
            query = query[:197] + "..."
        return f"session {self.session} ({self.state or 'unknown'}{age}): {query!r}"


class LockTimeoutError(RuntimeError):
    """A DDL statement could not get its lock within the timeout, on every try.

    Nothing of that statement was done; the statements before it were. Rerun
    the migration once the sessions named in the message (and in
    :attr:`blockers`) have finished: the ops carry on where they stopped.
    """

    def __init__(self, statement: str, attempts: int, timeout: float, blockers: list[Blocker]):
        self.statement = statement
        self.attempts = attempts
        self.timeout = timeout
        self.blockers = blockers
        named = (
            "; ".join(str(b) for b in blockers)
            if blockers
            else "no blocking session was seen (it may have ended)"
        )
        short = " ".join(statement.split())[:120]
        super().__init__(
            f"{short!r} could not get its lock within {timeout:g}s, {attempts} times; it gave "
            "up so "
            f"that the application's queries do not queue behind it. Blocking: {named}. "
            "End or wait for those sessions, then rerun the migration."
        )


def check_lock_timeout(value: object) -> float:
    """Return a ``lock_timeout=`` as seconds: a number or a timedelta, > 0, at most a day.

    Raises:
        TypeError: neither a number nor a timedelta.
        ValueError: zero, negative, not finite, or more than a day.

    Example:
        >>> from datetime import timedelta
        >>> check_lock_timeout(timedelta(milliseconds=500))
        0.5
        >>> check_lock_timeout(2)
        2.0
    """
    if isinstance(value, timedelta):
        value = value.total_seconds()
    return check_seconds("lock_timeout", value)


def lock_safe_ddl(
    connection: Connection,
    statements: Sequence[str],
    *,
    lock_timeout: float,
    attempts: int = 5,
) -> None:
    """Run DDL statements one by one, each waiting at most ``lock_timeout`` for its lock.

    A statement whose lock wait times out is retried after a backoff (the
    timeout, doubled after each try, at most 30 s), up to ``attempts`` tries
    in all; then :class:`LockTimeoutError` names the blocking sessions. The
    session's own lock timeout is restored after each statement.

    Inside a transaction on PostgreSQL each try runs in a savepoint (``SET
    LOCAL``), so a timeout does not abort the migration's transaction; in
    autocommit mode each try is a transaction of its own (``BEGIN; SET
    LOCAL``), so nothing stays behind even through a pooler. DDL that cannot
    run in a transaction (``CONCURRENTLY``) sets the session's, put back
    afterwards, on a direct connection only (see the module docstring). On
    MariaDB the timeout is whole seconds, and below one second a try fails
    at once if the lock is taken. SQLite runs the statements as they are.

    Args:
        connection: the migration's connection.
        statements: SQL text, sent as it is (a ``%`` is escaped for the driver).
        lock_timeout: seconds each try may wait for a lock.
        attempts: tries per statement, at least 1.

    Raises:
        LockTimeoutError: a statement's every try timed out.
        ValueError: a bad ``lock_timeout`` or ``attempts``, before any SQL.

    Example:
        >>> import sqlalchemy as sa
        >>> engine = sa.create_engine("sqlite://")
        >>> with engine.begin() as conn:
        ...     lock_safe_ddl(conn, ["CREATE TABLE t (id INTEGER)"], lock_timeout=0.5)
        ...     sa.inspect(conn).get_table_names()
        ['t']
    """
    for statement in statements:
        lock_safe(
            connection,
            functools.partial(run, connection, statement),
            statement,
            lock_timeout=lock_timeout,
            attempts=attempts,
            transaction_block=not _NO_TRANSACTION.search(statement),
        )


def lock_safe(
    connection: Connection,
    action: Callable[[], object],
    what: str,
    *,
    lock_timeout: float,
    attempts: int = 5,
    transaction_block: bool = True,
) -> None:
    """Run ``action`` (DDL on ``connection``) as :func:`lock_safe_ddl` runs one statement.

    For DDL that Alembic renders (``operations.add_column(...)`` and so on):
    ``what`` names it in messages. ``transaction_block=False``: the DDL cannot
    run in a transaction (``CONCURRENTLY``).
    """
    seconds = check_lock_timeout(lock_timeout)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ValueError(f"attempts must be an int of at least 1, got {attempts!r}")
    sql = dialect_row(connection.dialect).locks
    if sql is None:
        action()
        return
    in_transaction = not _autocommit(connection)
    # Autocommit on PostgreSQL: each try is a transaction of its own (SET LOCAL).
    own_block = sql.transactional and not in_transaction and transaction_block
    if not in_transaction and not own_block and behind_a_proxy(connection):
        logger.warning(
            "%s: the connection goes through a proxy or pooler, where a session setting "
            "could stay behind on a server session the application gets next; it runs "
            "under the server's own lock_timeout and statement_timeout (its lock never "
            "makes reads or writes wait; a statement_timeout of the role or database can "
            "cancel it). Run migrations on a direct connection for a bounded wait and no "
            "statement timeout",
            " ".join(what.split())[:80],
        )
        action()
        return
    pid = [int(connection.exec_driver_sql(sql.session_id).scalar_one())]
    blockers: dict[int, Blocker] = {}
    for attempt in range(1, attempts + 1):
        try:
            with _watching(connection, sql, pid, seconds, blockers):
                if own_block:
                    _try_in_block(connection, sql, action, seconds, pid)
                else:
                    _try(connection, sql, action, seconds, in_transaction)
            return
        except sa.exc.DBAPIError as exc:
            if not _is_timeout(exc, sql) or exc.connection_invalidated:
                raise
            # MariaDB's lock holders are listed whether or not we still wait.
            _read_blockers(connection, sql, pid[0], blockers)
            if attempt == attempts:
                raise LockTimeoutError(what, attempts, seconds, list(blockers.values())) from exc
            pause = min(seconds * 2 ** (attempt - 1), _MAX_BACKOFF)
            logger.warning(
                "lock timeout (%gs) on %s, try %d of %d; blocking: %s; next try in %gs",
                seconds,
                " ".join(what.split())[:80],
                attempt,
                attempts,
                "; ".join(map(str, blockers.values())) or "not seen",
                pause,
            )
            time.sleep(pause)


def _try(
    connection: Connection,
    sql: LockSQL,
    action: Callable[[], object],
    seconds: float,
    in_transaction: bool,
) -> None:
    saved = tuple(connection.exec_driver_sql(sql.read).one())
    savepoint = connection.begin_nested() if sql.transactional and in_transaction else None
    try:
        for statement in sql.set(seconds, in_transaction):
            connection.exec_driver_sql(statement)
        action()
    except BaseException:
        if savepoint is not None and savepoint.is_active:
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                savepoint.rollback()  # the SET LOCAL goes with it
        elif not in_transaction or not sql.transactional:
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                _restore(connection, sql, saved, in_transaction)
        raise
    if savepoint is not None:
        try:
            savepoint.commit()
        except BaseException:
            # RELEASE failed: roll back to the savepoint, so the transaction
            # can still be rolled back cleanly by whoever handles this.
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                savepoint.rollback()
            raise
    _restore(connection, sql, saved, in_transaction)


def _try_in_block(
    connection: Connection,
    sql: LockSQL,
    action: Callable[[], object],
    seconds: float,
    pid: list[int],
) -> None:
    """One try as one transaction: ``BEGIN; SET LOCAL ...; action; COMMIT``.

    A pooler in transaction mode keeps a transaction on one server session,
    and the setting ends with it. ``pid`` is set to that session's id (the
    one a blocked try's blockers are read for).
    """
    connection.exec_driver_sql("BEGIN")
    try:
        pid[0] = int(connection.exec_driver_sql(sql.session_id).scalar_one())
        for statement in sql.set(seconds, True):
            connection.exec_driver_sql(statement)
        action()
    except BaseException:
        with contextlib.suppress(sa.exc.SQLAlchemyError):
            connection.exec_driver_sql("ROLLBACK")
        raise
    connection.exec_driver_sql("COMMIT")


def _restore(connection: Connection, sql: LockSQL, saved: tuple[Any, ...], local: bool) -> None:
    for statement in sql.restore(saved, local):
        connection.exec_driver_sql(statement)


def _autocommit(connection: Connection) -> bool:
    """Whether each statement commits on its own (Alembic's ``autocommit_block()``)."""
    if connection.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
        return True
    dbapi = connection.connection.dbapi_connection
    return getattr(dbapi, "autocommit", False) is True


def _is_timeout(error: sa.exc.DBAPIError, sql: LockSQL) -> bool:
    orig = error.orig
    codes = {getattr(orig, "sqlstate", None), getattr(orig, "pgcode", None)}
    args = getattr(orig, "args", ())
    if args:
        codes.add(args[0])
    return bool(codes & sql.timeout_codes)


def _read_blockers(
    connection: Connection,
    sql: LockSQL,
    pid: int,
    found: dict[int, Blocker],
    *,
    until: threading.Event | None = None,
    interval: float = 0.0,
) -> None:
    """Add the sessions blocking ``pid`` to ``found``: once, or until ``until`` is set."""
    try:
        # A bare DBAPI connection from the pool: the engine's statement
        # events do not see these diagnostic reads.
        other = connection.engine.raw_connection()
    except sa.exc.SQLAlchemyError as exc:  # only a diagnostic: never fail the DDL
        logger.debug("could not read the blocking sessions: %s", exc)
        return
    try:
        while True:
            cursor = other.cursor()
            try:
                cursor.execute(sql.blockers.format(pid=int(pid)))
                for row in cursor.fetchall():
                    age = None if row[3] is None else float(row[3])
                    found[int(row[0])] = Blocker(
                        int(row[0]), str(row[1] or ""), str(row[2] or ""), age
                    )
            finally:
                cursor.close()
            other.rollback()
            if until is None or until.wait(interval):
                return
    except Exception as exc:  # the driver's own errors: only a diagnostic
        logger.debug("could not read the blocking sessions: %s", exc)
    finally:
        with contextlib.suppress(Exception):
            other.close()


@contextlib.contextmanager
def _watching(
    connection: Connection, sql: LockSQL, pid: list[int], seconds: float, found: dict[int, Blocker]
) -> Iterator[None]:
    """Note, from a second connection, who blocks session ``pid[0]`` while the block runs."""
    done = threading.Event()
    interval = min(0.05, seconds / 4)

    def watch() -> None:
        # Only a statement that has waited half its timeout is worth a look:
        # a quick one must not cost a connection (nor extra statements).
        if not done.wait(seconds / 2):
            _read_blockers(connection, sql, pid[0], found, until=done, interval=interval)

    watcher = threading.Thread(target=watch, name="sqlalchemy-ulid-lock-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join(timeout=5)
