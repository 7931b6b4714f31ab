"""PgBouncer in transaction pooling, on 127.0.0.1, in front of a PostgreSQL server.

``python -m clusters start pgbouncer`` starts Debian's ``pgbouncer`` (``apt-get
install pgbouncer``) as the ``postgres`` account (PgBouncer refuses root),
listening on 127.0.0.1:``$SQLALCHEMY_ULID_PGBOUNCER_PORT`` (default 6440) and
forwarding every database name to the server at
``$SQLALCHEMY_ULID_PGBOUNCER_SERVER`` (default 127.0.0.1:5432, trust auth), in
``pool_mode = transaction`` with ``default_pool_size =
$SQLALCHEMY_ULID_PGBOUNCER_POOL_SIZE`` (default 4) server connections per
database and user.

A test that needs an exact pool size asks for a database alias of its own:
:meth:`PgBouncer.alias` adds ``<alias> = dbname=<database> pool_size=<n>``
to an included file and reloads, so the alias's pool starts empty and never
holds more than ``n`` server connections.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from ._common import (
    ClusterError,
    base_dir,
    find_program,
    kill_group,
    pid_alive,
    port_in_use,
    read_state,
    require,
    run,
    wait_until,
    write_state,
)

_INSTALL_HINT = "apt-get install pgbouncer  (Debian/Ubuntu)"
_ALIAS = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def _setting(name: str, default: str) -> str:
    return os.environ.get(f"SQLALCHEMY_ULID_PGBOUNCER_{name}") or default


def _as_postgres(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


class PgBouncer:
    """Start, inspect and stop one PgBouncer; idempotent and bounded in time."""

    kind = "pgbouncer"

    def __init__(self, root: Path | None = None) -> None:
        self.port = int(_setting("PORT", "6440"))
        # One directory per port: instances on two ports never share state.
        self.root = (root or base_dir()) / f"{self.kind}-{self.port}"
        self.state_file = self.root / "state.json"
        host, _, port = _setting("SERVER", "127.0.0.1:5432").rpartition(":")
        self.server = (host or "127.0.0.1", int(port))
        self.pool_size = int(_setting("POOL_SIZE", "4"))

    @property
    def urls(self) -> list[str]:
        """A psycopg URL template (any database name of the server works)."""
        return [self.url("<database>")]

    def url(self, database: str) -> str:
        """SQLAlchemy URL of ``database`` (or an alias) through this PgBouncer."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def state(self) -> dict[str, Any] | None:
        """The recorded state (token), or None when not started."""
        return read_state(self.state_file)

    def _pid(self) -> int | None:
        try:
            pid = int((self.root / "pgbouncer.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if pid_alive(pid) else None

    def _answers(self) -> bool:
        # pgbouncer -d returns before the daemon listens: a refused
        # connection means "not yet", not "failed" (wait_until gives up on
        # a ClusterError at once, so it must not escape from here).
        try:
            out = self.admin("SHOW VERSION")
        except ClusterError as exc:
            raise RuntimeError(str(exc)) from None  # kept as wait_until's last error
        return "PgBouncer" in out

    def admin(self, command: str) -> str:
        """Run one admin-console command (``SHOW POOLS``, ``RELOAD``...) through psql."""
        psql = require({"psql": find_program("psql")}, "apt-get install postgresql-client")
        return run(
            [
                psql["psql"],
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                "pgbouncer",
                "-A",
                "-F",
                "|",
                "-c",
                command,
            ],
            timeout=15,
            what=f"pgbouncer {command}",
        )

    def status(self) -> list[str]:
        """One line: where it listens and its pool settings, or down."""
        pid = self._pid()
        if pid is None:
            return [f"pgbouncer :{self.port}  down"]
        server = f"{self.server[0]}:{self.server[1]}"
        return [
            f"pgbouncer :{self.port}  pid {pid}  transaction pooling, "
            f"pool_size {self.pool_size}, in front of {server}"
        ]

    def start(self, timeout: float = 60.0) -> None:
        """Write the configuration and start PgBouncer (no-op when it already answers)."""
        program = require({"pgbouncer": find_program("pgbouncer", "/usr/sbin")}, _INSTALL_HINT)
        if self.state() is not None and self._pid() is not None:
            wait_until(self._answers, timeout, "pgbouncer to answer")
            return
        self.stop()
        if port_in_use(self.port):
            raise ClusterError(
                f"port {self.port} is taken by another program; free it or set "
                "SQLALCHEMY_ULID_PGBOUNCER_PORT"
            )
        self.root.mkdir(parents=True)
        (self.root / "users.txt").write_text('"postgres" ""\n')
        (self.root / "aliases.ini").write_text("")
        host, port = self.server
        (self.root / "pgbouncer.ini").write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = host={host} port={port}",
                    f"%include {self.root / 'aliases.ini'}",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    "unix_socket_dir =",
                    "auth_type = trust",
                    f"auth_file = {self.root / 'users.txt'}",
                    "admin_users = postgres",
                    "pool_mode = transaction",
                    f"default_pool_size = {self.pool_size}",
                    "min_pool_size = 0",
                    "reserve_pool_size = 0",
                    "max_client_conn = 500",
                    "max_db_connections = 0",
                    "server_idle_timeout = 60",
                    "query_wait_timeout = 60",
                    "ignore_startup_parameters = extra_float_digits",
                    f"logfile = {self.root / 'pgbouncer.log'}",
                    f"pidfile = {self.root / 'pgbouncer.pid'}",
                    "",
                ]
            )
        )
        if os.geteuid() == 0:
            for path in [self.root, *self.root.iterdir()]:
                shutil.chown(path, "postgres", "postgres")
        write_state(self.state_file, {"token": secrets.token_hex(8), "started": time.time()})
        try:
            run(
                _as_postgres([program["pgbouncer"], "-d", str(self.root / "pgbouncer.ini")]),
                timeout=30,
                what="pgbouncer -d",
            )
            wait_until(self._answers, timeout, "pgbouncer to answer")
        except BaseException:
            log = self.root / "pgbouncer.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            self.stop()
            raise ClusterError(f"pgbouncer did not start; its log ends with:\n{tail}") from None

    def alias(self, name: str, database: str, pool_size: int) -> str:
        """Add database alias ``name`` for ``database`` with a pool of ``pool_size``; its URL.

        The alias's pool is its own: it starts empty and never holds more than
        ``pool_size`` server connections, whatever other clients do.
        """
        if not _ALIAS.match(name) or not _ALIAS.match(database):
            raise ClusterError(
                f"alias and database must be plain names, got {name!r}, {database!r}"
            )
        if pool_size < 1:
            raise ClusterError(f"pool_size must be at least 1, got {pool_size}")
        host, port = self.server
        aliases = self.root / "aliases.ini"
        # Test runs in parallel (CI's jobs) share one PgBouncer: one writer at a time.
        with (self.root / "aliases.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            lines = [
                line
                for line in aliases.read_text().splitlines()
                if line and not line.startswith(f"{name} ")
            ]
            line = f"{name} = host={host} port={port} dbname={database} pool_size={pool_size}"
            aliases.write_text("\n".join([*lines, line]) + "\n")
            self.admin("RELOAD")
        return self.url(name)

    def stop(self) -> None:
        """Stop PgBouncer (SIGINT: at once) and delete its directory."""
        pid = self._pid()
        if pid is not None:
            try:
                if os.geteuid() == 0:
                    os.kill(pid, signal.SIGINT)
                else:
                    subprocess.run(["kill", "-INT", str(pid)], check=False, timeout=10)
                wait_until(lambda: not pid_alive(pid), 10, "pgbouncer to stop")
            except (ClusterError, OSError, subprocess.SubprocessError):
                kill_group(pid)
        if self.root.exists():
            shutil.rmtree(self.root, ignore_errors=True)
