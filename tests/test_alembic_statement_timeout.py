"""The ops under the application's statement timeout: they run their statements without it.

Users set one for the database or role (PostgreSQL ``ALTER DATABASE app SET
statement_timeout``, MariaDB ``max_statement_time`` per user). It would
cancel an op's whole-table check, validation scan or batch on a big table.

Each test gets a PostgreSQL database of its own whose ``statement_timeout``
is set, or a MariaDB user of its own created ``WITH MAX_STATEMENT_TIME``.
First a plain ``SELECT count(*)`` over the table is shown to be cancelled by
the setting (it waits for a table lock another session holds: no clock
decides the outcome). Then every op runs, online and in one transaction,
while a listener reads, on the op's own session and just before each
statement the op sends, the timeout that statement will run under: every
one of them runs without it (only transaction control and settings are left
out). The data is checked, and afterwards a new session, direct and through
PgBouncer, still has the application's timeout. The offline scripts are run
by the real ``psql`` and ``mariadb`` clients, whose sessions have the
timeout: they finish, twice (they are rerunnable).
"""

from __future__ import annotations

import contextlib
import io
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.engine import Engine, make_url

import _clients
import _pooler
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _databases import own_database
from _offline_scripts import run_online
from conftest import Backend
from sqlalchemy_ulid import ULID

pgbouncer = _pooler.pgbouncer

#: The application's timeouts: long enough for any statement of a test
#: session, short enough to cancel the proof's wait for a lock.
PG_TIMEOUT = "300ms"
MARIADB_TIMEOUT = 0.3
ROWS = 3000
TABLE = "stmt_t"
#: What the listener leaves out: transaction control and settings.
_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "SET", "SHOW", "RESET")
#: Statements that read no table and never wait, left to the session's timeout:
#: the run's lock taken and given back without waiting (on a session of its
#: own), the session's id and its settings, read before they are changed.
_INSTANT = (
    "SELECT pg_try_advisory_xact_lock(",
    "SELECT pg_backend_pid()",
    "SELECT CONNECTION_ID()",
    "SELECT COALESCE(GET_LOCK(",
    "DO RELEASE_LOCK(",
    "SELECT RELEASE_LOCK(",
    "SELECT GET_LOCK(",
    "SELECT inet_client_port(), current_setting(",
    "SELECT current_setting('lock_timeout'), current_setting('statement_timeout')",
    "SELECT @@SESSION.",
    # the key conversion's temporary table: the session's own, no one else locks it
    "DROP TABLE IF EXISTS _ulid_backfill",
)


def _ref(key: int) -> ULID:
    return ULID.from_parts(1_700_000_000_000 + key, key)


def _make_table(engine: Engine) -> None:
    with engine.begin() as conn:
        # ref: a ULID as text (the storage ops convert it); old_id: a column to drop.
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (id integer PRIMARY KEY, created_at timestamp NOT NULL, "
            "ref char(26) NOT NULL, old_id integer)"
        )
        conn.execute(
            sa.text(f"INSERT INTO {TABLE} (id, created_at, ref) VALUES (:id, :at, :ref)"),
            [
                {"id": i, "at": f"2024-01-01 00:00:{i % 60:02d}", "ref": str(_ref(i))}
                for i in range(1, ROWS + 1)
            ],
        )


def _make_key_tables(engine: Engine) -> None:
    """A parent with an integer key, and a child whose rows reference it."""
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE stmt_parent (id integer PRIMARY KEY, created_at timestamp NOT NULL)"
        )
        conn.exec_driver_sql(
            "CREATE TABLE stmt_child (id integer PRIMARY KEY, parent_id integer NOT NULL, "
            "CONSTRAINT fk_stmt_child_parent FOREIGN KEY (parent_id) REFERENCES stmt_parent (id))"
        )
        conn.execute(
            sa.text("INSERT INTO stmt_parent (id, created_at) VALUES (:id, :at)"),
            [{"id": i, "at": f"2024-01-01 00:00:{i % 60:02d}"} for i in range(1, ROWS + 1)],
        )
        conn.execute(
            sa.text("INSERT INTO stmt_child (id, parent_id) VALUES (:id, :parent)"),
            [{"id": i, "parent": i % ROWS + 1} for i in range(1, ROWS + 1)],
        )


def _key_conversion(ops: Operations) -> None:
    ops.convert_primary_key_to_ulid("stmt_parent", from_time="created_at", batch_size=500)
    ops.restore_legacy_primary_key("stmt_parent")


def _check_key_tables(engine: Engine) -> None:
    """Back where the conversion and its reverse started: the same keys, references intact."""
    with engine.connect() as conn:
        columns = [c["name"] for c in sa.inspect(conn).get_columns("stmt_parent")]
        joined = conn.exec_driver_sql(
            "SELECT count(*) FROM stmt_child c JOIN stmt_parent p ON p.id = c.parent_id "
            f"WHERE c.parent_id = MOD(c.id, {ROWS}) + 1"
        ).scalar()
    assert columns == ["id", "created_at"]
    assert joined == ROWS


def _cancelled_behind_a_lock(engine: Engine, lock: str, unlock: str) -> str:
    """The error of a plain ``SELECT count(*)`` waiting for ``lock`` (another session's)."""
    holder = engine.connect()
    try:
        holder.exec_driver_sql(lock)
        with engine.connect() as conn, pytest.raises(sa.exc.OperationalError) as caught:
            conn.exec_driver_sql(f"SELECT count(*) FROM {TABLE}").scalar()
        holder.exec_driver_sql(unlock)
    finally:
        holder.close()
    return str(caught.value.orig)


@contextlib.contextmanager
def _timeouts(engine: Engine, read: str) -> Iterator[list[tuple[str, str]]]:
    """(the timeout in force, the statement) for each statement sent on ``engine`` meanwhile.

    Read on the statement's own session, in its transaction, just before it.
    """
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        words = statement.split(None, 1)
        if not words or words[0].upper() in _CONTROL or statement.startswith(_INSTANT):
            return
        reader = cursor.connection.cursor()
        try:
            reader.execute(read)
            value = str(reader.fetchone()[0])
        except Exception:  # an aborted transaction: the statement fails anyway
            return
        finally:
            reader.close()
        with lock:
            seen.append((value, statement))

    sa.event.listen(engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", before)


def _ops(online: bool) -> Callable[[Operations], None]:
    def step(ops: Operations) -> None:
        ops.add_ulid_column(TABLE, "public_id", "created_at", online=online, batch_size=500)
        ops.alter_ulid_storage(
            TABLE, "ref", from_storage="text", to_storage="auto", online=online, batch_size=500
        )
        ops.drop_ulid_column(TABLE, "old_id")

    return step


def _ulid(value: Any) -> ULID:
    return ULID.from_bytes(value) if isinstance(value, bytes) else ULID.from_uuid(value)


def _check_data(engine: Engine, *, dropped: bool = True) -> None:
    with engine.connect() as conn:
        columns = {c["name"]: c for c in sa.inspect(conn).get_columns(TABLE)}
        rows = conn.execute(sa.text(f"SELECT id, public_id, ref FROM {TABLE} ORDER BY id")).all()
    assert ("old_id" not in columns) is dropped
    assert columns["public_id"]["nullable"] is False
    assert len(rows) == ROWS
    for key, public_id, ref in rows:
        assert _ulid(public_id).timestamp_ms == 1_704_067_200_000 + (key % 60) * 1000
        assert _ulid(ref) == _ref(key)


# -- PostgreSQL -------------------------------------------------------------------------


@pytest.fixture
def pg_app(backends: dict[str, Backend]) -> Iterator[Engine]:
    """An engine on a database of the test's own whose statement_timeout is ``PG_TIMEOUT``."""
    backend = backends["postgresql"]
    if backend.url is None:
        pytest.fail(f"backend missing: {backend.reason}", pytrace=False)
    with own_database(backend.url, f"st{secrets.token_hex(3)}") as url:
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            _make_table(engine)
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                name = make_url(url).database
                conn.exec_driver_sql(
                    f"ALTER DATABASE \"{name}\" SET statement_timeout = '{PG_TIMEOUT}'"
                )
            yield engine
        finally:
            engine.dispose()


def _pg_setting(engine: Engine) -> str:
    with engine.connect() as conn:
        return str(conn.exec_driver_sql("SHOW statement_timeout").scalar())


def _pg_proof(engine: Engine) -> None:
    assert _pg_setting(engine) == PG_TIMEOUT
    error = _cancelled_behind_a_lock(
        engine, f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE", "COMMIT"
    )
    assert "statement timeout" in error


@pytest.mark.parametrize("online", [True, False], ids=["online", "one-transaction"])
def test_postgresql_ops_run_no_statement_under_the_database_statement_timeout(
    pg_app: Engine, online: bool
) -> None:
    _pg_proof(pg_app)
    run_online(pg_app, lambda ops: ops.create_ulid_function())  # one short statement
    with _timeouts(pg_app, "SHOW statement_timeout") as seen:
        run_online(pg_app, _ops(online))
    assert len(seen) > 20, "the listener saw hardly anything: the test proves nothing"
    late = [" ".join(s[1].split())[:150] for s in seen if s[0] != "0"]
    assert late == [], "\n".join(late)
    _check_data(pg_app)
    assert _pg_setting(pg_app) == PG_TIMEOUT  # a new session: nothing stayed behind


def test_postgresql_key_conversion_runs_no_statement_under_the_database_statement_timeout(
    pg_app: Engine,
) -> None:
    _make_key_tables(pg_app)
    with _timeouts(pg_app, "SHOW statement_timeout") as seen:
        run_online(pg_app, _key_conversion)
    assert len(seen) > 20, "the listener saw hardly anything: the test proves nothing"
    late = [" ".join(s[1].split())[:150] for s in seen if s[0] != "0"]
    assert late == [], "\n".join(late)
    _check_key_tables(pg_app)
    assert _pg_setting(pg_app) == PG_TIMEOUT  # a new session: nothing stayed behind


def test_postgresql_online_ops_through_the_pooler_leave_the_timeout_on_every_session(
    pg_app: Engine, pgbouncer: Any
) -> None:
    database = str(pg_app.url.database)
    url = pgbouncer.alias(f"{database}_p", database, 2)
    engine = sa.create_engine(url, connect_args=dict(_pooler.POOLED_ARGS), pool_size=4)
    try:
        run_online(engine, lambda ops: ops.create_ulid_function())
        run_online(engine, _ops(True))
        _check_data(pg_app)
        held = [engine.connect() for _ in range(2)]
        try:
            found = {str(c.exec_driver_sql("SHOW statement_timeout").scalar()) for c in held}
            pids = {c.exec_driver_sql("SELECT pg_backend_pid()").scalar() for c in held}
        finally:
            for conn in held:
                conn.close()
        assert len(pids) == 2  # both server sessions of the pool
        assert found == {PG_TIMEOUT}
    finally:
        engine.dispose()


def _one_transaction_script(dialect: str, to_storage: str) -> str:
    """The ``--sql`` output of the one-transaction storage conversion."""
    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect_name=dialect,
        opts={"as_sql": True, "output_buffer": buffer, "transactional_ddl": dialect != "mysql"},
    )
    Operations(context).alter_ulid_storage(
        TABLE, "ref", from_storage="text", to_storage=to_storage, nullable=False
    )
    return buffer.getvalue()


def _check_refs(engine: Engine) -> None:
    with engine.connect() as conn:
        refs = conn.execute(sa.text(f"SELECT id, ref FROM {TABLE} ORDER BY id")).all()
    assert [_ulid(ref) for _, ref in refs] == [_ref(key) for key, _ in refs]
    assert len(refs) == ROWS


def _script(dialect: str, to_storage: str) -> str:
    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect_name=dialect,
        opts={"as_sql": True, "output_buffer": buffer, "transactional_ddl": dialect != "mysql"},
    )
    ops = Operations(context)
    ops.create_ulid_function()
    ops.add_ulid_column(TABLE, "public_id", "created_at", online=True)
    ops.alter_ulid_storage(TABLE, "ref", from_storage="text", to_storage=to_storage, online=True)
    return buffer.getvalue()


def test_postgresql_offline_script_runs_under_the_database_statement_timeout(
    pg_app: Engine,
) -> None:
    _pg_proof(pg_app)
    script = _script("postgresql", "native")
    assert script.count("SET statement_timeout = 0;") >= 2
    for _ in range(2):  # and again: it stays rerunnable
        done = _clients.psql(pg_app, script, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
    _check_data(pg_app, dropped=False)
    assert _pg_setting(pg_app) == PG_TIMEOUT


def test_postgresql_one_transaction_script_runs_under_the_database_statement_timeout(
    pg_app: Engine,
) -> None:
    script = _one_transaction_script("postgresql", "native")
    assert "SET statement_timeout = 0;" in script
    for _ in range(2):  # and again: it does nothing the second time
        done = _clients.psql(pg_app, script, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
    _check_refs(pg_app)
    assert _pg_setting(pg_app) == PG_TIMEOUT


# -- MariaDB ----------------------------------------------------------------------------


@pytest.fixture
def mariadb_app(backends: dict[str, Backend]) -> Iterator[Engine]:
    """An engine on a database of the test's own, as a user ``WITH MAX_STATEMENT_TIME``."""
    backend = backends["mysql"]
    if backend.url is None:
        pytest.fail(f"backend missing: {backend.reason}", pytrace=False)
    user = f"ulid_st_{secrets.token_hex(4)}"
    password = secrets.token_hex(8)
    with own_database(backend.url, f"st{secrets.token_hex(3)}") as url:
        root = sa.create_engine(url, poolclass=sa.pool.NullPool)
        try:
            with root.connect() as conn:
                if not getattr(conn.dialect, "is_mariadb", False):
                    pytest.skip("MAX_STATEMENT_TIME is MariaDB's")
                conn.exec_driver_sql(
                    f"CREATE USER '{user}'@'%%' IDENTIFIED BY '{password}' "
                    f"WITH MAX_STATEMENT_TIME {MARIADB_TIMEOUT}"
                )
                conn.exec_driver_sql(f"GRANT ALL ON `{make_url(url).database}`.* TO '{user}'@'%%'")
            app_url = make_url(url).set(username=user, password=password)
            engine = sa.create_engine(app_url, poolclass=sa.pool.NullPool)
            try:
                _make_table(engine)
                yield engine
            finally:
                engine.dispose()
        finally:
            with root.connect() as conn:
                conn.exec_driver_sql(f"DROP USER IF EXISTS '{user}'@'%%'")
            root.dispose()


def _mariadb_setting(engine: Engine) -> float:
    with engine.connect() as conn:
        return float(conn.exec_driver_sql("SELECT @@SESSION.max_statement_time").scalar())


def _mariadb_proof(engine: Engine) -> None:
    assert _mariadb_setting(engine) == MARIADB_TIMEOUT
    error = _cancelled_behind_a_lock(engine, f"LOCK TABLES {TABLE} WRITE", "UNLOCK TABLES")
    assert "max_statement_time" in error


@pytest.mark.parametrize("online", [True, False], ids=["online", "one-transaction"])
def test_mariadb_ops_run_no_statement_under_the_users_max_statement_time(
    mariadb_app: Engine, online: bool
) -> None:
    _mariadb_proof(mariadb_app)
    run_online(mariadb_app, lambda ops: ops.create_ulid_function())
    with _timeouts(mariadb_app, "SELECT @@SESSION.max_statement_time") as seen:
        run_online(mariadb_app, _ops(online))
    assert len(seen) > 20, "the listener saw hardly anything: the test proves nothing"
    late = [" ".join(s[1].split())[:150] for s in seen if float(s[0]) != 0]
    assert late == [], "\n".join(late)
    _check_data(mariadb_app)
    assert _mariadb_setting(mariadb_app) == MARIADB_TIMEOUT


def test_mariadb_key_conversion_runs_no_statement_under_the_users_max_statement_time(
    mariadb_app: Engine,
) -> None:
    _make_key_tables(mariadb_app)
    with _timeouts(mariadb_app, "SELECT @@SESSION.max_statement_time") as seen:
        run_online(mariadb_app, _key_conversion)
    assert len(seen) > 20, "the listener saw hardly anything: the test proves nothing"
    late = [" ".join(s[1].split())[:150] for s in seen if float(s[0]) != 0]
    assert late == [], "\n".join(late)
    _check_key_tables(mariadb_app)


def test_mariadb_offline_script_runs_under_the_users_max_statement_time(
    mariadb_app: Engine,
) -> None:
    _mariadb_proof(mariadb_app)
    script = _script("mysql", "binary")
    # Each script turns the user's limit off before its first statement on a table.
    assert script.count("max_statement_time = 0") >= 2
    for _ in range(2):  # and again: it stays rerunnable
        done = _clients.mariadb(mariadb_app, script)
        assert done.returncode == 0, done.stderr[-2000:]
    _check_data(mariadb_app, dropped=False)


def test_mariadb_one_transaction_script_runs_under_the_users_max_statement_time(
    mariadb_app: Engine,
) -> None:
    script = _one_transaction_script("mysql", "binary")
    assert "max_statement_time = 0" in script
    for _ in range(2):  # and again: it does nothing the second time
        done = _clients.mariadb(mariadb_app, script)
        assert done.returncode == 0, done.stderr[-2000:]
    _check_refs(mariadb_app)
