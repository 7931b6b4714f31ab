"""The suite's selections: ``--only-backends``, and the tiers the CI jobs choose by marker.

Each test but the first runs pytest in a subprocess on a small test
directory of its own, with the suite's real ``conftest.py``, ``_tiers.py``
and ``_databases.py`` copied beside it, and reads what was selected (five
runs in all: each starts an interpreter and imports SQLAlchemy). Collecting
needs no server; the one run that starts its session points both servers at
closed ports.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import conftest

HERE = Path(__file__).parent
_CLOSED = {
    "SQLALCHEMY_ULID_POSTGRESQL_URL": "postgresql+psycopg://postgres@127.0.0.1:9/test",
    "SQLALCHEMY_ULID_MYSQL_URL": "mysql+pymysql://root@127.0.0.1:9/test",
}

# What each test reaches, and so whether --only-backends=postgresql keeps it.
SAMPLE = """
import pytest


def test_no_database():
    pass


def test_each_backend(backend):
    pass


@pytest.mark.parametrize("server", ["mysql", "postgresql"])
def test_named_in_a_parameter(backends, server):
    backends[server]


def test_mariadb_only(backends):
    backends["mysql"]


def test_postgresql_only(backends):
    backends["postgresql"]


def test_both(backends):
    from conftest import private_engine

    with private_engine(backends["mysql"]), private_engine(backends["postgresql"]):
        pass


def _anything(backends):
    return backends


def test_passes_it_on(backends):
    _anything(backends)


@pytest.fixture
def maria(backends):
    return backends["mysql"]


def test_through_a_fixture(maria):
    pass


@pytest.fixture
def chosen(backends):
    return _anything(backends)


def test_through_a_fixture_that_passes_it_on(chosen):
    pass


@pytest.mark.backends("sqlite")
def test_marked(backends):
    _anything(backends)
"""

KEPT_FOR_POSTGRESQL = [
    "test_sample.py::test_each_backend[postgresql]",
    "test_sample.py::test_named_in_a_parameter[postgresql]",
    "test_sample.py::test_postgresql_only",
    "test_sample.py::test_both",
    "test_sample.py::test_passes_it_on",
    "test_sample.py::test_through_a_fixture_that_passes_it_on",
]
EVERY_TEST = 13


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    for name in ("conftest.py", "_tiers.py", "_databases.py"):
        shutil.copy(HERE / name, tmp_path / name)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    backends: the backends a test reaches\n    server: tier\n"
        "    project: tier\n"
    )
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    return tmp_path


def _pytest(
    where: Path, *options: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SQLALCHEMY_ULID_", "PYTEST"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *options],
        capture_output=True,
        text=True,
        cwd=where,
        env={**base, **_CLOSED, **(env or {})},
        timeout=120,
    )


def _collected(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stdout + result.stderr
    return [line for line in result.stdout.splitlines() if "::" in line]


def test_every_module_a_tier_names_is_in_the_suite() -> None:
    # A module renamed or removed would otherwise leave its tier without a word.
    modules = {path.stem for path in HERE.glob("test_*.py")}
    named = {
        *conftest.SERVER_TIER,
        *conftest.PROJECT_TIER,
        *conftest.GROUPS,
        *(test.split(".py::")[0] for test in (*conftest.SERVER_TESTS, *conftest.EVERY_JOB)),
    }
    assert not named - modules, named - modules
    assert not conftest.SERVER_TIER & conftest.PROJECT_TIER


def test_the_python_version_jobs_leave_out_the_server_and_project_tiers(sample: Path) -> None:
    # What .ci/run's Python-version jobs select; main runs everything.
    (sample / "test_docs.py").write_text("def test_a_page():\n    pass\n")
    (sample / "test_settle_soundness.py").write_text("def test_a_race():\n    pass\n")
    result = _pytest(sample, "--co", "-q", "-m", "not server and not project")
    kept = _collected(result)
    assert len(kept) == EVERY_TEST
    assert all(line.startswith("test_sample.py::") for line in kept), kept
    assert f"{EVERY_TEST}/{EVERY_TEST + 2} tests collected (2 deselected)" in result.stdout


def test_postgresql_keeps_exactly_the_tests_that_can_reach_it(sample: Path) -> None:
    result = _pytest(sample, "--co", "-q", "--only-backends=postgresql")
    assert sorted(_collected(result)) == sorted(KEPT_FOR_POSTGRESQL)
    kept = len(KEPT_FOR_POSTGRESQL)
    assert f"{kept}/{EVERY_TEST} tests collected ({EVERY_TEST - kept} deselected)" in result.stdout


def test_the_environment_variable_names_backends_too(sample: Path) -> None:
    # Several names keep what reaches any of them.
    result = _pytest(sample, "--co", "-q", env={"SQLALCHEMY_ULID_ONLY_BACKENDS": "sqlite, mysql"})
    assert sorted(_collected(result)) == sorted(
        [
            "test_sample.py::test_each_backend[sqlite]",
            "test_sample.py::test_each_backend[mysql]",
            "test_sample.py::test_named_in_a_parameter[mysql]",
            "test_sample.py::test_mariadb_only",
            "test_sample.py::test_both",
            "test_sample.py::test_passes_it_on",
            "test_sample.py::test_through_a_fixture",
            "test_sample.py::test_through_a_fixture_that_passes_it_on",
            "test_sample.py::test_marked",
        ]
    )


def test_an_unknown_backend_is_a_usage_error(sample: Path) -> None:
    result = _pytest(sample, "--co", "-q", "--only-backends=postgres")
    assert result.returncode == 4
    assert "unknown backend(s) postgres" in result.stderr


def test_a_required_backend_that_is_missing_still_fails(sample: Path) -> None:
    # Narrowing the selection never turns a required server into a skip: not
    # PostgreSQL's, and not MariaDB's for a kept test that also uses it.
    result = _pytest(sample, "-q", "-rfEs", "--only-backends=postgresql", "--require-backends=all")
    assert result.returncode == 1, result.stdout
    assert "ERROR test_sample.py::test_each_backend[postgresql]" in result.stdout
    assert "required backend missing: postgresql: cannot connect" in result.stdout
    assert "FAILED test_sample.py::test_both" in result.stdout
    assert "backend missing: mysql: cannot connect" in result.stdout
    assert "1 failed, 4 passed, 7 deselected, 1 error" in result.stdout
