"""The harness itself: each backend is the real server it claims to be."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

from conftest import Backend


def test_backend_is_real(backend: Backend) -> None:
    assert backend.engine is not None
    with backend.engine.connect() as conn:
        if backend.name == "postgresql":
            assert "PostgreSQL" in conn.scalar(sa.text("select version()"))
        elif backend.name == "mysql":
            assert "MariaDB" in conn.scalar(sa.text("select version()"))
        else:
            assert conn.scalar(sa.text("select sqlite_version()"))


def _run_harness_with_unreachable_postgresql(*options: str) -> subprocess.CompletedProcess[str]:
    """Run test_backend_is_real in a fresh pytest, PostgreSQL at a closed port."""
    here = Path(__file__).parent
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            str(here / "test_harness.py::test_backend_is_real"),
            "--postgresql-url=postgresql+psycopg://postgres@127.0.0.1:9/test",
            *options,
        ],
        capture_output=True,
        text=True,
        cwd=here.parent,
        env={k: v for k, v in os.environ.items() if not k.startswith("SQLALCHEMY_ULID_")},
    )


def test_a_required_backend_that_is_missing_fails_the_run() -> None:
    # CI requires every backend: a server that cannot be reached must fail
    # the run, never turn into a quiet skip.
    result = _run_harness_with_unreachable_postgresql("--require-backends=postgresql")
    assert result.returncode != 0
    assert "required backend missing" in result.stdout


def test_an_optional_backend_that_is_missing_is_skipped_with_its_reason() -> None:
    result = _run_harness_with_unreachable_postgresql()
    assert result.returncode == 0
    assert "SKIPPED" in result.stdout
    assert "cannot connect" in result.stdout
