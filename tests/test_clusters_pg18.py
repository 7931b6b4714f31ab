"""``python -m clusters pg18``: the command line, without starting a server."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clusters", "pg18", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        check=False,
    )


def test_url_names_the_database_on_port_5418() -> None:
    done = cli("url", "h_some_db")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "postgresql+psycopg://postgres@127.0.0.1:5418/h_some_db"


@pytest.mark.parametrize(
    "name",
    [
        "Upper",  # upper case: psql would need quotes
        "a;drop",  # SQL in the name
        "1db",  # starts with a digit
        "x" * 64,  # longer than PostgreSQL's 63 characters
    ],
)
def test_a_database_name_that_is_not_plain_is_refused_before_anything_starts(name: str) -> None:
    for action in ("url", "start"):
        done = cli(action, name)
        assert done.returncode == 2
        assert f"not a plain database name: {name!r}" in done.stderr


def test_status_says_up_or_down() -> None:
    done = cli("status")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("pg18 :5418  ")
    assert ("down" in done.stdout) != ("PostgreSQL 18." in done.stdout)


def test_start_fails_loudly_when_another_program_holds_the_port(tmp_path: Path) -> None:
    # A server of another data directory (or any program) on 5418: start
    # refuses, and installs and changes nothing.
    with contextlib.ExitStack() as stack:
        probe = socket.socket()
        stack.callback(probe.close)
        if probe.connect_ex(("127.0.0.1", 5418)) != 0:  # free: hold it ourselves
            holder = socket.socket()
            stack.callback(holder.close)
            holder.bind(("127.0.0.1", 5418))
            holder.listen(1)
        done = cli("start", "h_x", env={"SQLALCHEMY_ULID_CLUSTER_DIR": str(tmp_path)})
    assert done.returncode == 2
    assert "port 5418 is taken by another program" in done.stderr
    assert not (tmp_path / "pg18").exists()
