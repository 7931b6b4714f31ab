"""PgBouncer (transaction pooling) for the pooler tests: the harness in clusters/.

``pgbouncer`` starts it once per test session (a no-op when it already runs,
as after ``python -m clusters start pgbouncer`` in ``.ci/run``) in front of
the PostgreSQL server of ``SQLALCHEMY_ULID_POSTGRESQL_URL``. A test asks
``pooled(server_pool)`` for an engine through an alias of its own, whose pool
starts empty and holds at most ``pool_size`` server connections.

When PgBouncer cannot start, the tests fail if backends are required
(``SQLALCHEMY_ULID_REQUIRE_BACKENDS``, as in CI), and skip otherwise.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clusters import ClusterError, PgBouncer

#: psycopg through transaction pooling: no server-side prepared statements
#: (a prepared statement lives on one server session; the next transaction
#: may run on another).
POOLED_ARGS: dict[str, Any] = {"prepare_threshold": None}

Pooled = Callable[..., Engine]


@pytest.fixture(scope="session")
def pgbouncer(backends: Any) -> Iterator[PgBouncer]:
    """The running PgBouncer (started here if needed, stopped at the end if so)."""
    required = bool(os.environ.get("SQLALCHEMY_ULID_REQUIRE_BACKENDS"))
    postgresql = backends["postgresql"]
    if postgresql.engine is None:
        if required:
            pytest.fail(f"required backend missing: {postgresql.reason}", pytrace=False)
        pytest.skip(postgresql.reason)
    url = make_url(postgresql.url)
    os.environ.setdefault(
        "SQLALCHEMY_ULID_PGBOUNCER_SERVER", f"{url.host or '127.0.0.1'}:{url.port or 5432}"
    )
    bouncer = PgBouncer()
    started = bouncer.state() is None
    try:
        bouncer.start()
    except ClusterError as exc:
        if required:
            pytest.fail(f"PgBouncer could not start: {exc}", pytrace=False)
        pytest.skip(f"PgBouncer could not start: {exc}")
    yield bouncer
    if started:
        bouncer.stop()


@pytest.fixture
def pooled(pgbouncer: PgBouncer, backends: Any) -> Iterator[Pooled]:
    """``pooled(server_pool, **engine_kw)``: an engine through an alias of this test's own.

    ``server_pool`` is PgBouncer's pool (server sessions); ``engine_kw`` go to
    ``create_engine`` (its ``pool_size`` is the client side's).
    """
    database = make_url(backends["postgresql"].url).database
    engines: list[Engine] = []

    def make(server_pool: int, **kw: Any) -> Engine:
        alias = f"{database}_p{secrets.token_hex(4)}"
        url = pgbouncer.alias(alias, database, server_pool)
        kw.setdefault("connect_args", dict(POOLED_ARGS))
        kw.setdefault("pool_size", 20)
        kw.setdefault("max_overflow", 20)
        engine = sa.create_engine(url, **kw)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.dispose()
