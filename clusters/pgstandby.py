"""A PostgreSQL primary (port 5441) and a streaming hot standby (port 5442) on 127.0.0.1.

The primary is made by ``initdb``; the standby by ``pg_basebackup -R`` from
it, so it starts streaming at once. Run as root, both servers run as the
``postgres`` account (PostgreSQL refuses root), in a directory it owns.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
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

PRIMARY_PORT = 5441
STANDBY_PORT = 5442
DATABASE = "ulid_test"
_INSTALL_HINT = "apt-get install postgresql  (Debian/Ubuntu; any version >= 13)"


def _bin_dirs() -> list[str]:
    # Debian keeps the server programs off PATH, one directory per version;
    # prefer the newest.
    found = glob.glob("/usr/lib/postgresql/*/bin")
    return sorted(found, key=lambda p: int(Path(p).parent.name.split(".")[0]), reverse=True)


def _programs() -> dict[str, str]:
    dirs = _bin_dirs()
    found = require(
        {name: find_program(name, *dirs) for name in ("initdb", "pg_ctl", "pg_basebackup")},
        _INSTALL_HINT,
    )
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise ClusterError("the psycopg driver is missing: pip install 'psycopg[binary]'") from exc
    return found


def _as_postgres(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _query(port: int, sql: str, database: str = "postgres") -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(
        host="127.0.0.1",
        port=port,
        user="postgres",
        dbname=database,
        connect_timeout=3,
        autocommit=True,
    ) as conn:
        cur = conn.execute(sql)
        return list(cur.fetchall()) if cur.description is not None else []


class PgStandby:
    """Start, inspect and stop the primary + standby pair.

    Idempotent and bounded in time: ``start`` on a running pair checks that
    the standby streams and returns; ``stop`` on a stopped pair does nothing.
    """

    kind = "pg-standby"

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or base_dir()) / self.kind
        self.state_file = self.root / "state.json"
        self.primary_dir = self.root / "primary"
        self.standby_dir = self.root / "standby"

    @property
    def primary_url(self) -> str:
        """SQLAlchemy URL of the test database on the primary."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{PRIMARY_PORT}/{DATABASE}"

    @property
    def standby_url(self) -> str:
        """SQLAlchemy URL of the same database on the standby (read-only)."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{STANDBY_PORT}/{DATABASE}"

    @property
    def urls(self) -> list[str]:
        """Primary first, then the standby."""
        return [self.primary_url, self.standby_url]

    def state(self) -> dict[str, Any] | None:
        """The recorded state (token), or None when the pair is not started."""
        return read_state(self.state_file)

    def _pid(self, datadir: Path) -> int | None:
        try:
            pid = int((datadir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if pid_alive(pid) else None

    def streaming(self) -> bool:
        """True when the standby is in recovery and the primary sees it streaming."""
        in_recovery = _query(STANDBY_PORT, "SELECT pg_is_in_recovery()")[0][0]
        senders = _query(
            PRIMARY_PORT, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
        )
        return bool(in_recovery) and senders[0][0] >= 1

    def status(self) -> list[str]:
        """One line per server."""
        lines = []
        for name, datadir, port in (
            ("primary", self.primary_dir, PRIMARY_PORT),
            ("standby", self.standby_dir, STANDBY_PORT),
        ):
            pid = self._pid(datadir)
            if pid is None:
                lines.append(f"{name} :{port}  down")
                continue
            try:
                recovery = _query(port, "SELECT pg_is_in_recovery()")[0][0]
                role = "standby (in recovery)" if recovery else "primary"
                lines.append(f"{name} :{port}  pid {pid}  {role}")
            except Exception as exc:
                lines.append(f"{name} :{port}  pid {pid}  not answering: {exc}")
        if all(self._pid(d) for d in (self.primary_dir, self.standby_dir)):
            try:
                lag = _query(
                    PRIMARY_PORT,
                    "SELECT state, replay_lag FROM pg_stat_replication",
                )
                lines.append(f"replication: {lag}")
            except Exception as exc:
                lines.append(f"replication: unknown ({exc})")
        return lines

    def start(self, timeout: float = 180.0) -> None:
        """Create and start both servers (no-op when the pair already streams)."""
        deadline = time.monotonic() + timeout
        programs = _programs()
        if self.state() is not None:
            if self._pid(self.primary_dir) and self._pid(self.standby_dir):
                wait_until(self.streaming, 60, "the standby to stream")
                return
            self.stop()
        for port in (PRIMARY_PORT, STANDBY_PORT):
            if port_in_use(port):
                raise ClusterError(
                    f"port {port} is taken by another program; stop it or free the port"
                )
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self.root.chmod(0o700)
        write_state(self.state_file, {"token": secrets.token_hex(8), "started": time.time()})
        if os.geteuid() == 0:
            shutil.chown(self.state_file, "postgres", "postgres")
        try:
            run(
                _as_postgres(
                    [
                        programs["initdb"],
                        "-D",
                        str(self.primary_dir),
                        "-U",
                        "postgres",
                        "--auth=trust",
                        "--no-sync",
                        "-E",
                        "UTF8",
                        "--locale=C",
                    ]
                ),
                timeout=120,
                what="initdb",
            )
            self._pg_ctl_start(programs, self.primary_dir, PRIMARY_PORT, deadline)
            _query(PRIMARY_PORT, f"CREATE DATABASE {DATABASE}")
            run(
                _as_postgres(
                    [
                        programs["pg_basebackup"],
                        "-h",
                        "127.0.0.1",
                        "-p",
                        str(PRIMARY_PORT),
                        "-U",
                        "postgres",
                        "-D",
                        str(self.standby_dir),
                        "-R",
                        "-X",
                        "stream",
                        "-c",
                        "fast",
                        "--no-sync",
                    ]
                ),
                timeout=max(5.0, deadline - time.monotonic()),
                what="pg_basebackup",
            )
            self._pg_ctl_start(programs, self.standby_dir, STANDBY_PORT, deadline)
            wait_until(
                self.streaming, max(1.0, deadline - time.monotonic()), "the standby to stream"
            )
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop both servers at once (``immediate``) and delete their data."""
        programs = None
        for datadir in (self.standby_dir, self.primary_dir):
            pid = self._pid(datadir)
            if pid is None:
                continue
            programs = programs or _programs()
            try:
                run(
                    _as_postgres(
                        [
                            programs["pg_ctl"],
                            "stop",
                            "-D",
                            str(datadir),
                            "-m",
                            "immediate",
                            "-w",
                            "-t",
                            "30",
                        ]
                    ),
                    timeout=40,
                    what=f"pg_ctl stop {datadir.name}",
                )
            except ClusterError:
                kill_group(pid)
        if self.root.exists():
            shutil.rmtree(self.root, ignore_errors=True)

    def crash_primary(self) -> None:
        """Stop the primary the hard way (``immediate``: no checkpoint, like a crash)."""
        programs = _programs()
        if self._pid(self.primary_dir) is not None:
            run(
                _as_postgres(
                    [
                        programs["pg_ctl"],
                        "stop",
                        "-D",
                        str(self.primary_dir),
                        "-m",
                        "immediate",
                        "-w",
                        "-t",
                        "30",
                    ]
                ),
                timeout=40,
                what="pg_ctl stop primary",
            )

    def promote(self, timeout: float = 60.0) -> None:
        """Promote the standby: it leaves recovery and accepts writes on its port."""
        programs = _programs()
        run(
            _as_postgres(
                [
                    programs["pg_ctl"],
                    "promote",
                    "-D",
                    str(self.standby_dir),
                    "-w",
                    "-t",
                    str(int(timeout)),
                ]
            ),
            timeout=timeout + 10,
            what="pg_ctl promote",
        )
        wait_until(
            lambda: not _query(STANDBY_PORT, "SELECT pg_is_in_recovery()")[0][0],
            timeout,
            "the promoted standby to accept writes",
        )

    def _pg_ctl_start(
        self, programs: dict[str, str], datadir: Path, port: int, deadline: float
    ) -> None:
        options = " ".join(
            [
                "-c listen_addresses=127.0.0.1",
                f"-c port={port}",
                f"-c unix_socket_directories={self.root}",
                "-c shared_buffers=32MB",
                "-c max_connections=50",
                "-c wal_level=replica",
                "-c max_wal_senders=4",
                "-c hot_standby=on",
                "-c hot_standby_feedback=on",
                "-c logging_collector=off",
            ]
        )
        run(
            _as_postgres(
                [
                    programs["pg_ctl"],
                    "start",
                    "-D",
                    str(datadir),
                    "-l",
                    str(self.root / f"{datadir.name}.log"),
                    "-w",
                    "-t",
                    str(max(5, int(deadline - time.monotonic()))),
                    "-o",
                    options,
                ]
            ),
            timeout=max(10.0, deadline - time.monotonic()),
            what=f"pg_ctl start {datadir.name}",
        )
