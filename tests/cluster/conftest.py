"""Fixtures on real clusters: a 3-node MariaDB Galera cluster and a PostgreSQL hot standby.

The clusters come from the harness in ``clusters/`` (``python -m clusters``).
These tests are slow to set up (a Galera cluster takes ~15 s to form), so
the normal ``make test`` leaves them out. Run them on their own::

    .venv/bin/python -m pytest tests/cluster

They also run when ``SQLALCHEMY_ULID_CLUSTERS=1`` is set. When a cluster
cannot be started (packages missing, ports taken) its tests are skipped with
the reason, unless ``SQLALCHEMY_ULID_REQUIRE_CLUSTERS=1`` (as in CI): then
they fail.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the harness lives in the repository, not the package

from clusters import ClusterError, Galera, PgStandby, base_dir  # noqa: E402
from clusters._common import start_watchdog  # noqa: E402

# A cluster outlives a killed pytest by at most this long (its watchdog stops it).
CLUSTER_TTL = 900.0


def _required() -> bool:
    return os.environ.get("SQLALCHEMY_ULID_REQUIRE_CLUSTERS", "") not in ("", "0")


def _asked_for(config: pytest.Config) -> bool:
    if _required() or os.environ.get("SQLALCHEMY_ULID_CLUSTERS", "") not in ("", "0"):
        return True
    for arg in config.args:
        path = Path(arg.split("::", 1)[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Leave the cluster tests out of a run that did not ask for them (the
    # main suite), as deselected, not skipped.
    if _asked_for(config):
        return
    keep = [item for item in items if item.get_closest_marker("cluster") is None]
    dropped = [item for item in items if item.get_closest_marker("cluster") is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def _start(cluster: Galera | PgStandby) -> None:
    began = time.monotonic()
    try:
        cluster.start()
    except ClusterError as exc:
        message = f"cannot start the {cluster.kind} cluster: {exc}"
        if _required():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    token = str((cluster.state() or {}).get("token"))
    start_watchdog(cluster.kind, token, CLUSTER_TTL, base_dir() / f"{cluster.kind}-watchdog.log")
    print(f"\n{cluster.kind} up in {time.monotonic() - began:.1f} s")


@pytest.fixture(scope="session")
def galera() -> Iterator[Galera]:
    """A running 3-node Galera cluster, torn down at the end of the session."""
    cluster = Galera()
    try:
        _start(cluster)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def galera_engines(galera: Galera) -> Iterator[list[sa.Engine]]:
    """One engine per Galera node, node 1 first."""
    engines = [sa.create_engine(url, pool_size=4, pool_pre_ping=True) for url in galera.urls]
    yield engines
    for engine in engines:
        engine.dispose()


@pytest.fixture(scope="session")
def pg_standby() -> Iterator[PgStandby]:
    """A running PostgreSQL primary + hot standby, torn down at the end of the session."""
    cluster = PgStandby()
    try:
        _start(cluster)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def pg_engines(pg_standby: PgStandby) -> Iterator[tuple[sa.Engine, sa.Engine]]:
    """(primary engine, standby engine)."""
    primary = sa.create_engine(pg_standby.primary_url, pool_size=4)
    standby = sa.create_engine(pg_standby.standby_url, pool_size=4)
    yield primary, standby
    primary.dispose()
    standby.dispose()


# -- measurements, printed at the end of the run (CI logs keep them) ----------

_MEASUREMENTS: list[str] = []


@pytest.fixture
def measured() -> Iterator[list[str]]:
    """Lines a test appends to report what it measured."""
    lines: list[str] = []
    yield lines
    _MEASUREMENTS.extend(lines)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _MEASUREMENTS:
        terminalreporter.section("cluster measurements")
        for line in _MEASUREMENTS:
            terminalreporter.write_line(line)
