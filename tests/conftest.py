"""Database backends for the whole suite.

Every database test takes the ``engine`` (or ``backend``) fixture and runs once
per backend: SQLite, PostgreSQL and MySQL/MariaDB. Where a backend's URL comes
from, first match wins:

1. a pytest option: ``--postgresql-url``, ``--mysql-url``, ``--sqlite-url``;
2. an environment variable: ``SQLALCHEMY_ULID_POSTGRESQL_URL``, ...;
3. a server answering at the conventional local address
   (``127.0.0.1:5432`` user ``postgres`` database ``test``;
   ``127.0.0.1:3306`` user ``root`` database ``test``);
4. a testcontainers container, when a Docker engine answers.

A backend that cannot be found is skipped, with the reason in the summary,
unless it is required: ``--require-backends=postgresql,mysql`` (or ``all``),
or ``SQLALCHEMY_ULID_REQUIRE_BACKENDS``. A required backend that is missing
fails every test that wanted it. ``.ci/run`` requires all three.
``--only-backends=postgresql`` (or ``SQLALCHEMY_ULID_ONLY_BACKENDS``) runs only
the tests that reach PostgreSQL (``tests/_tiers.py``); what is required stays so.

Under pytest-xdist (``make test`` runs ``-n``), each worker runs in databases
of its own on each server, ``<database>_<worker>`` (``test_gw0``, ...), made
fresh from the configured URL at the start and dropped at the end; the
configured database itself is only used to create them. The worker's URLs
are also put in the environment, for tests that run a subprocess.

Every test that touches a database is watched (``_leftover_guard``): a table,
view or schema it leaves behind fails it, and is dropped. Tables a database
held before are the test's business only if it made them:
``SQLALCHEMY_ULID_SEED_TABLES=alembic_version,offline_live`` creates those
(with a row) in every database the session uses, as another tool could have
left them, and fails the session if they are not there unchanged at the end.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

import _databases
import _tiers

BACKENDS = ("sqlite", "postgresql", "mysql")
SERVERS = ("postgresql", "mysql")
#: the pytest-xdist worker this process is ("gw0", ...), or None without xdist
#: (from pytest's config, not PYTEST_XDIST_WORKER: a pytest the suite runs in
#: a subprocess inherits that variable but is no worker)
WORKER: str | None = None

_LOCAL = {
    "postgresql": ("127.0.0.1", 5432, "postgresql+psycopg://postgres@127.0.0.1:5432/test"),
    "mysql": ("127.0.0.1", 3306, "mysql+pymysql://root@127.0.0.1:3306/test"),
}
_ASYNC_DRIVERS = {
    "postgresql": ("asyncpg", "psycopg"),
    "mysql": ("asyncmy",),
    "sqlite": ("aiosqlite",),
}


#: The server-behaviour tier (marker ``server``): tests of what the database
#: servers do under the library, not of the Python or SQLAlchemy it runs on:
#: migrations online and offline under concurrent writers, through psql and
#: mariadb, killed and rerun, and through PgBouncer's transaction pooling;
#: fault soaks; big tables; feed and settle concurrency (behind PgBouncer
#: too). The Python-version CI jobs leave it out, and the project tier below
#: (``-m "not server and not project"``); ``make test``, CI's main job and
#: its pg18 job run both. Code that branches on the Python or SQLAlchemy
#: version is covered by the rest, the Python tier (types, paging, the ops'
#: plans and --sql output, the guard, the integrations).
SERVER_TIER = frozenset(
    {
        "test_alembic_adversary_mariadb",
        "test_alembic_adversary_postgresql",
        "test_alembic_concurrent_index",
        "test_alembic_faults",
        "test_alembic_fill_adversarial",
        "test_alembic_locks",
        "test_alembic_online",
        "test_alembic_online_offline",
        "test_alembic_primary_key_golden_mariadb",
        "test_alembic_primary_key_golden_postgresql",
        "test_alembic_primary_key_offline_adversarial",
        "test_alembic_primary_key_offline_mariadb",
        "test_alembic_primary_key_offline_postgresql",
        "test_alembic_primary_key_swap_lock_mariadb",
        "test_alembic_run_lock",
        "test_alembic_script_lock",
        "test_alembic_state_lock",
        "test_alembic_statement_timeout",
        "test_alembic_storage_adversarial",
        "test_alembic_storage_golden_mariadb",
        "test_alembic_storage_offline",
        "test_alembic_storage_offline_adversarial",
        "test_alembic_storage_offline_mariadb",
        "test_alembic_storage_online",
        "test_alembic_storage_plan_mariadb",
        "test_alembic_storage_shadow",
        "test_alembic_update_triggers",
        "test_alembic_uuid7_faults",
        "test_alembic_uuid7_storage_online",
        "test_feed_faults",
        "test_offline_equivalence",
        "test_offline_equivalence_2",
        "test_pooler_feed",
        "test_pooler_migrations",
        "test_settle_isolation",
        "test_settle_soundness",
    }
)
#: The project tier (marker ``project``): tests of the project's own files
#: and tools, not of the library on the job's Python: the built site in a
#: browser, the docs' pages and their code blocks, the examples, the
#: migrations_example project and a fresh ``alembic init`` project driven
#: through subprocesses as the docs tell a reader, the suite's own harness
#: and tier selection, and the ``clusters`` command line CI runs. The
#: library calls they make are tested in-process on every job (rendering,
#: autogenerate, check, the ops, the integrations); the Python-version CI
#: jobs leave this tier out (``-m "not server and not project"``), ``make
#: test``, CI's main job and its pg18 job run it.
PROJECT_TIER = frozenset(
    {
        "test_alembic_init",
        "test_clusters_pg18",
        "test_docs",
        "test_examples",
        "test_harness",
        "test_migrations_example",
        "test_site",
        "test_tiers",
    }
)
#: Tests of a Python-tier module that are server tier all the same: a big
#: table (100,000 rows through every op); an op or its script killed at each
#: of its phases or steps then rerun (one migration per phase; the op's state
#: on the server is what they test, as in the server tier's other
#: killed-and-rerun tests); an op against another session's locks (a
#: blocking reader, a deadlock with a writer, lock_timeout); the server's
#: limit on bound parameters (an IN list longer than a statement takes);
#: feeds under several concurrent writers, and settle="auto" reading the
#: server's open transactions. The modules' other tests (the ops up and down
#: on small tables, IN lists, feeds with a late commit) run in every job.
SERVER_TESTS = (
    "test_alembic_ops.py::test_100k_rows_survive_backfill_and_conversion",
    "test_alembic_primary_key.py::test_interrupted_at_each_phase_then_rerun",
    "test_alembic_primary_key.py::test_downgrade_killed_at_each_phase_then_rerun",
    "test_alembic_primary_key.py::test_a_blocking_reader_makes_the_ddl_give_up_then_the_rerun",
    "test_alembic_primary_key.py::test_a_writer_between_two_tables_is_not_the_swaps_deadlock",
    "test_alembic_engine.py::test_the_script_stopped_after_each_step_then_run_again_finishes",
    "test_alembic_engine.py::test_a_step_waits_for_its_lock_only_lock_timeout_long_then_tries",
    "test_comparator.py::test_in_with_more_ids_than_a_statement_takes_parameters",
    "test_feed.py::test_concurrent_writers_",
    "test_feed.py::test_auto_waits_for_the_oldest_writer",
)
#: Tests of a server-tier module that every job runs: they depend on the
#: SQLAlchemy version (follow() survives kills through SQLAlchemy's
#: disconnect handling, which changed in 2.1; an expected failure on 2.0),
#: or use no server at all (the pooler modules' checks of the source and
#: of guard_ulid_age_ddl()'s arguments).
EVERY_JOB = (
    "test_feed_faults.py::test_follow_survives_three_kills",
    "test_pooler_feed.py::test_the_guard_ddl_is_skipped_on_other_databases",
    "test_pooler_migrations.py::test_no_op_takes_a_session_advisory_lock",
)
#: Modules whose tests share one worker under pytest-xdist (``--dist
#: loadgroup``): a module fixture too costly to build twice (the site test
#: builds the docs and starts a browser); the pooler tests' PgBouncer on a
#: fixed port, started by the session that finds it down and stopped by it.
GROUPS = {
    "test_site": "site",
    "test_pooler_feed": "pgbouncer",
    "test_pooler_harness": "pgbouncer",
    "test_pooler_migrations": "pgbouncer",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = item.path.stem
        test = item.nodeid.split("/")[-1]
        if (module in SERVER_TIER and not test.startswith(EVERY_JOB)) or test.startswith(
            SERVER_TESTS
        ):
            item.add_marker(pytest.mark.server)
        if module in PROJECT_TIER:
            item.add_marker(pytest.mark.project)
        if module in GROUPS:
            item.add_marker(pytest.mark.xdist_group(GROUPS[module]))
    _tiers.select(config, items)


def pytest_configure(config: pytest.Config) -> None:
    global WORKER
    _databases.skip_tls_probe()
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        WORKER = str(workerinput["workerid"])
        _hypothesis_per_worker(WORKER)


def _hypothesis_per_worker(worker: str) -> None:
    """Under pytest-xdist, each worker keeps its own Hypothesis example database."""
    from hypothesis import settings
    from hypothesis.database import DirectoryBasedExampleDatabase

    settings.register_profile(
        f"xdist-{worker}",
        database=DirectoryBasedExampleDatabase(f".hypothesis/examples-{worker}"),
    )
    settings.load_profile(f"xdist-{worker}")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sqlalchemy-ulid backends")
    for name in BACKENDS:
        group.addoption(f"--{name}-url", default=None, help=f"SQLAlchemy URL of the {name} backend")
    group.addoption(
        "--require-backends",
        default=None,
        help="comma-separated backends that must be reachable (or 'all'); missing ones fail",
    )
    _tiers.add_option(group)
    group.addoption(
        "--fuzz-n", type=int, default=None, help="statements per seed for the paging fuzzer"
    )


@dataclass
class Backend:
    """One database to run tests against."""

    name: str
    url: str | None
    reason: str = ""
    engine: Engine | None = None
    _container: object | None = field(default=None, repr=False)

    @property
    def async_urls(self) -> list[str]:
        """The URL once per async driver we test on this backend."""
        assert self.url is not None
        url = make_url(self.url)
        return [
            url.set(drivername=f"{self.name}+{driver}").render_as_string(hide_password=False)
            for driver in _ASYNC_DRIVERS[self.name]
        ]


def _required(config: pytest.Config) -> set[str]:
    raw = config.getoption("--require-backends") or os.environ.get(
        "SQLALCHEMY_ULID_REQUIRE_BACKENDS", ""
    )
    names = {part.strip() for part in raw.split(",") if part.strip()}
    return set(BACKENDS) if "all" in names else names


def _port_open(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False


def _docker_container(name: str) -> tuple[str, object] | None:
    """Start a testcontainers server, or None where no Docker engine answers."""
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env().ping()
    except Exception:
        return None
    if name == "postgresql":
        from testcontainers.postgres import PostgresContainer

        container: object = PostgresContainer("postgres:15", driver="psycopg").start()
    else:
        from testcontainers.mysql import MySqlContainer

        container = MySqlContainer("mariadb:10.11", dialect="pymysql").start()
    return container.get_connection_url(), container  # type: ignore[attr-defined]


def _find(config: pytest.Config, name: str, tmp_dir: str) -> Backend:
    url = config.getoption(f"--{name}-url") or os.environ.get(f"SQLALCHEMY_ULID_{name.upper()}_URL")
    if url:
        return Backend(name, url)
    if name == "sqlite":
        return Backend(name, f"sqlite:///{tmp_dir}/test.sqlite3")
    host, port, local_url = _LOCAL[name]
    if _port_open(host, port):
        return Backend(name, local_url)
    found = _docker_container(name)
    if found is not None:
        return Backend(name, found[0], _container=found[1])
    return Backend(
        name, None, f"{name}: no URL given, nothing at {host}:{port}, and no Docker engine"
    )


def _seed_tables() -> list[str]:
    raw = os.environ.get("SQLALCHEMY_ULID_SEED_TABLES", "")
    return [name.strip() for name in raw.split(",") if name.strip()]


@pytest.fixture(scope="session")
def backends(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Backend]]:
    tmp_dir = str(tmp_path_factory.mktemp("sqlite"))
    found = {name: _find(request.config, name, tmp_dir) for name in BACKENDS}
    made: dict[str, str] = {}  # backend -> the configured URL its worker database was made from
    seeded = {}
    for backend in found.values():
        if backend.url is None:
            continue
        if backend.name in SERVERS:
            try:
                if WORKER is not None:
                    configured = backend.url
                    backend.url = _databases.worker_url(configured, WORKER)
                    made[backend.name] = configured
                    os.environ[f"SQLALCHEMY_ULID_{backend.name.upper()}_URL"] = backend.url
                if _seed_tables():
                    seeded[backend.url] = _databases.seed(backend.url, _seed_tables())
            except Exception as exc:
                backend.reason = f"{backend.name}: cannot connect to {backend.url}: {exc}"
                backend.url = None
                continue
        engine = sa.create_engine(backend.url)
        if backend.name == "mysql":
            sa.event.listen(engine, "checkin", _reset_mysql_session)
        try:
            with engine.connect():
                pass
        except Exception as exc:
            backend.reason = f"{backend.name}: cannot connect to {backend.url}: {exc}"
            backend.url = None
            engine.dispose()
            continue
        backend.engine = engine
    yield found
    changed = [
        problem for url, rows in seeded.items() for problem in _databases.check_seeded(url, rows)
    ]
    for backend in found.values():
        if backend.engine is not None:
            backend.engine.dispose()
        if backend.name in made and backend.url is not None:
            _databases.drop_database(made[backend.name], str(make_url(backend.url).database))
        if backend._container is not None:
            backend._container.stop()  # type: ignore[attr-defined]
    assert not changed, changed


@pytest.fixture(scope="session")
def _catalogs(backends: dict[str, Backend]) -> Iterator[dict[str, _databases.Catalog]]:
    catalogs = {
        name: _databases.Catalog(backends[name].url)  # type: ignore[arg-type]
        for name in SERVERS
        if backends[name].engine is not None
    }
    yield catalogs
    for catalog in catalogs.values():
        catalog.dispose()


def _enable_loggers() -> None:
    for logger in logging.Logger.manager.loggerDict.values():
        if isinstance(logger, logging.Logger) and logger.disabled:
            logger.disabled = False


@pytest.fixture(autouse=True)
def _loggers_enabled() -> Iterator[None]:
    """Every logger enabled again, before and after each test.

    An Alembic project's ``env.py`` (the one ``alembic init`` writes, which the
    tutorial runs in-process) calls ``logging.config.fileConfig()``, which
    disables every logger that exists at that moment. Without this, the
    library's own loggers stay silent for every later test on the same
    worker, and tests that read their records (``caplog``) fail depending on
    which worker ran the tutorial first.
    """
    _enable_loggers()
    yield
    _enable_loggers()


@pytest.fixture(autouse=True)
def _leftover_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that leaves a table, view or schema behind on a server (then drop it).

    Only tests that use the databases (the ``backends`` fixture, which every
    database fixture builds on) are watched.
    """
    if "backends" not in request.fixturenames:
        yield
        return
    catalogs: dict[str, _databases.Catalog] = request.getfixturevalue("_catalogs")
    before = {name: catalog.objects() for name, catalog in catalogs.items()}
    yield
    left = {}
    for name, catalog in catalogs.items():
        extra = catalog.objects() - before[name]
        if extra:
            left[name] = sorted(extra)
            catalog.drop(extra)
    assert not left, f"the test left these behind (now dropped): {left}"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, backends: dict[str, Backend]) -> Backend:
    """Each backend in turn; skipped (or failed, if required) when missing."""
    found = backends[request.param]
    if found.engine is None:
        if found.name in _required(request.config):
            pytest.fail(f"required backend missing: {found.reason}", pytrace=False)
        pytest.skip(found.reason)
    return found


#: What a test may SET SESSION on a shared, pooled MariaDB connection; put back
#: to the server's value when the connection returns to the pool.
_MYSQL_SESSION_RESET = (
    "SET SESSION innodb_lock_wait_timeout = DEFAULT, lock_wait_timeout = DEFAULT, "
    "time_zone = DEFAULT, sql_mode = DEFAULT, foreign_key_checks = DEFAULT"
)


def _reset_mysql_session(dbapi_connection: Any, record: Any) -> None:
    """A pooled connection forgets the session settings a test made on it.

    Otherwise the next test that borrows it inherits them: one test's
    one-second lock wait made a later test's locking read time out.
    """
    if dbapi_connection is None:
        return
    try:
        with dbapi_connection.cursor() as cursor:
            cursor.execute(_MYSQL_SESSION_RESET)
    except Exception:  # a broken connection: the pool discards it
        record.invalidate()


@pytest.fixture
def engine(backend: Backend) -> Engine:
    """The backend's engine (one per session, shared)."""
    assert backend.engine is not None
    return backend.engine


@pytest.fixture
def metadata(engine: Engine) -> Iterator[sa.MetaData]:
    """A MetaData whose tables are dropped after the test."""
    meta = sa.MetaData()
    yield meta
    meta.drop_all(engine)


@contextlib.contextmanager
def private_engine(
    backend: Backend, drop: Callable[[Engine], None] | None = None
) -> Iterator[Engine]:
    """An engine of the test's own on ``backend``, without a pool, disposed after.

    No pool, so a session the test kills is never handed out again. ``drop``
    (the test's clean-up of its tables) runs before and after. A required
    backend that is missing fails the test.
    """
    if backend.url is None:
        pytest.fail(f"backend missing: {backend.reason}", pytrace=False)
    engine = sa.create_engine(backend.url, poolclass=sa.pool.NullPool)
    try:
        if drop is not None:
            drop(engine)
        yield engine
        if drop is not None:
            drop(engine)
    finally:
        engine.dispose()


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest, backends: dict[str, Backend]) -> Iterator[Engine]:
    """A private engine (``private_engine``) on PostgreSQL, then on MariaDB.

    The test's module's ``_drop(engine)``, where it has one, is the clean-up
    that runs before and after. A module needing more (a table made first)
    defines a ``server`` fixture of its own.
    """
    drop = getattr(request.module, "_drop", None)
    with private_engine(backends[request.param], drop) as engine:
        yield engine


def connection_env_py(version_table: str) -> str:
    """An Alembic ``env.py`` running the migrations on the connection the test hands in.

    The test puts it in ``config.attributes["connection"]``; the revisions
    are recorded in ``version_table``.
    """
    return f"""
from alembic import context
import sqlalchemy_ulid.alembic

context.configure(
    connection=context.config.attributes["connection"],
    version_table={version_table!r},
)
with context.begin_transaction():
    context.run_migrations()
"""


@contextlib.contextmanager
def recording(engine: Engine) -> Iterator[list[str]]:
    """Collect every SQL statement the engine sends while the block runs."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


@pytest.fixture
def statements(engine: Engine) -> Iterator[list[str]]:
    """Every SQL statement the engine runs during the test."""
    with recording(engine) as seen:
        yield seen
