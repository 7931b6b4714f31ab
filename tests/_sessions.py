"""Server sessions in the migration tests: which one a connection is, and killing it.

A killed session is how the tests interrupt an op as a crash or an operator
would: from another connection (``pg_terminate_backend`` on PostgreSQL,
``KILL`` on MariaDB), so the op meets the error on its next statement.
``When`` acts in a thread once a condition holds: ``Release`` ends an
application's open transaction once a statement waits for its locks, and
``hold`` opens that transaction.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine


def _id_sql(dialect: sa.engine.Dialect) -> str:
    return "SELECT pg_backend_pid()" if dialect.name == "postgresql" else "SELECT CONNECTION_ID()"


def session_id(conn: Connection) -> int:
    """The server's id of the session behind ``conn``."""
    return int(conn.exec_driver_sql(_id_sql(conn.dialect)).scalar_one())


def kill_session(engine: Engine, session: int) -> None:
    """End ``session`` from a connection of its own, then let the server finish it."""
    sql = (
        f"SELECT pg_terminate_backend({session})"
        if engine.dialect.name == "postgresql"
        else f"KILL {session}"
    )
    with engine.connect() as admin:
        admin.exec_driver_sql(sql)
    time.sleep(0.05)


def kill_application(engine: Engine, application: str) -> None:
    """PostgreSQL: end the sessions of this database that ``application`` opened."""
    with engine.connect() as admin:
        admin.exec_driver_sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE application_name = '{application}' AND datname = current_database()"
        )


def session_killer(engine: Engine, when: Callable[[str, int], bool]) -> Callable[[], bool]:
    """Kill the first session ``engine`` opens, just before the statement ``when`` picks.

    ``when(statement, n)`` is asked about each statement (``n``: how many the
    engine has sent, this one included) until it says yes, once. Returns
    ``done()``, which removes the hooks and says whether the session was
    killed.
    """
    state = {"count": 0, "session": 0, "killed": False}

    def remember(dbapi_conn: Any, record: Any) -> None:
        if not state["session"]:
            cursor = dbapi_conn.cursor()
            cursor.execute(_id_sql(engine.dialect))
            state["session"] = int(cursor.fetchone()[0])
            cursor.close()

    def hook(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        state["count"] += 1
        if not state["killed"] and state["session"] and when(statement, state["count"]):
            state["killed"] = True
            kill_session(engine, state["session"])

    sa.event.listen(engine, "connect", remember)
    sa.event.listen(engine, "before_cursor_execute", hook)

    def done() -> bool:
        sa.event.remove(engine, "before_cursor_execute", hook)
        sa.event.remove(engine, "connect", remember)
        return bool(state["killed"])

    return done


def mariadb_held_up(monitor: Connection, session: int, seconds: float = 1.0) -> bool:
    """Whether MariaDB session ``session`` waits in its statement (read from ``monitor``).

    True when INNODB_TRX shows it in a row lock wait, or when its statement
    has run ``seconds`` already: under load a locking read held up by a row
    lock was seen as RUNNING in INNODB_TRX for 20 s, so the lock wait alone
    is not a condition a test can wait for.
    """
    waiting, running_ms = monitor.execute(
        sa.text(
            "SELECT (SELECT COUNT(*) FROM information_schema.INNODB_TRX "
            "WHERE trx_mysql_thread_id = :id AND trx_state = 'LOCK WAIT'), "
            "(SELECT MAX(TIME_MS) FROM information_schema.PROCESSLIST "
            "WHERE ID = :id AND COMMAND = 'Query')"
        ),
        {"id": session},
    ).one()
    monitor.rollback()
    return bool(waiting) or float(running_ms or 0) >= seconds * 1000


def waiting(conn: Connection, like: str = "%", application: str | None = None) -> bool:
    """Whether another session of this database waits, in a statement ``LIKE like``.

    PostgreSQL: waits for a lock (of ``application`` only, if given).
    MariaDB's process list shows no lock waits: there, it runs.
    """
    if conn.dialect.name == "postgresql":
        sql = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE :like "
            "AND (CAST(:app AS text) IS NULL OR application_name = :app)"
        )
    else:
        sql = (
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() "
            "AND ID <> CONNECTION_ID() AND INFO LIKE :like"
        )
    return bool(conn.execute(sa.text(sql), {"like": like, "app": application}).scalar())


def wait_for(engine: Engine, ready: Callable[[Connection], object], bound: float = 30) -> bool:
    """Return once ``ready(conn)`` is true (asked every 10 ms), or False after ``bound`` s."""
    deadline = time.monotonic() + bound
    with engine.connect() as conn:
        while time.monotonic() < deadline:
            found = ready(conn)
            conn.rollback()  # a fresh look each time
            if found:
                return True
            time.sleep(0.01)
    return False


class When:
    """Run ``then()`` in a thread of its own once ``ready(conn)`` is true.

    ``ready`` is asked every 10 ms, on a connection of its own, for
    ``bound`` seconds at most; ``seen`` says whether it came true. ``then``
    runs ``after`` seconds later, or at the bound with ``anyway`` (a
    holder's commit: the test goes on either way). ``join()`` raises what
    ``then`` raised.
    """

    def __init__(
        self,
        engine: Engine,
        ready: Callable[[Connection], object],
        then: Callable[[], object],
        *,
        after: float = 0.0,
        bound: float = 30.0,
        anyway: bool = False,
    ) -> None:
        self.engine, self.ready, self.then = engine, ready, then
        self.after, self.bound, self.anyway = after, bound, anyway
        self.seen = False
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.seen = wait_for(self.engine, self.ready, self.bound)
            if self.seen:
                time.sleep(self.after)
            if self.seen or self.anyway:
                self.then()
        except BaseException as exc:  # raised by join()
            self.error = exc

    def join(self, timeout: float = 60) -> None:
        """Wait for the thread; raise what ``then`` raised."""
        self.thread.join(timeout)
        if self.error is not None:
            raise self.error


class Release(When):
    """End an open transaction (``release``: its commit or rollback) once a statement waits.

    The statement: ``waiting(like, application)``; ``release`` runs at the
    bound too, so that the test goes on.
    """

    def __init__(
        self,
        engine: Engine,
        release: Callable[[], object],
        *,
        like: str = "%",
        application: str | None = None,
        after: float = 0.0,
        bound: float = 30.0,
    ) -> None:
        super().__init__(
            engine,
            lambda conn: waiting(conn, like, application),
            release,
            after=after,
            bound=bound,
            anyway=True,
        )


def hold(engine: Engine, *statements: str, end: str = "commit", **options: Any) -> Release:
    """``statements`` in an open transaction of their own, ended once a statement waits.

    ``end``: ``"commit"`` or ``"rollback"``, then the connection is closed;
    ``options``: ``Release``'s (``like``, ``application``, ``after``,
    ``bound``).
    """
    conn = engine.connect()
    for statement in statements:
        conn.exec_driver_sql(statement)

    def release() -> None:
        try:
            getattr(conn, end)()
        finally:
            conn.close()

    return Release(engine, release, **options)
