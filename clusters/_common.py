"""What both clusters share: errors, bounded waits, process control, state files."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

_T = TypeVar("_T")


class ClusterError(RuntimeError):
    """A cluster could not be started, checked or stopped; the message says why."""


def base_dir() -> Path:
    """Where the clusters keep their data: ``$SQLALCHEMY_ULID_CLUSTER_DIR`` or a temp dir.

    Never inside the git worktree: the data directories are large and are
    deleted by ``stop``.
    """
    raw = os.environ.get("SQLALCHEMY_ULID_CLUSTER_DIR")
    path = Path(raw) if raw else Path(os.environ.get("TMPDIR", "/tmp")) / "sqlalchemy-ulid-clusters"
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)  # the postgres user must reach its own subdirectory
    return path


def find_program(name: str, *extra_dirs: str) -> str | None:
    """The path of ``name`` on PATH or in one of ``extra_dirs``, else None."""
    found = shutil.which(name)
    if found:
        return found
    for directory in extra_dirs:
        candidate = Path(directory) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def require(programs: dict[str, str | None], install_hint: str) -> dict[str, str]:
    """Return the programs' paths, or refuse with one message naming every missing one."""
    missing = sorted(name for name, path in programs.items() if path is None)
    if missing:
        raise ClusterError(f"missing: {', '.join(missing)}. Install them with: {install_hint}")
    return {name: path for name, path in programs.items() if path is not None}


def wait_until(
    probe: Callable[[], _T | None], timeout: float, what: str, interval: float = 0.25
) -> _T:
    """Call ``probe`` until it returns something other than None/False, at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            result = probe()
            if result is not None and result is not False:
                return result
        except ClusterError:
            raise
        except Exception as exc:  # a server that is still starting refuses connections
            last_error = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what}{detail}")
        time.sleep(interval)


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` exists (and is not a zombie we can reap)."""
    with contextlib.suppress(ChildProcessError, OSError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        if stat.read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


def kill_group(pid: int, timeout: float = 10.0) -> None:
    """SIGKILL the process group led by ``pid`` (a server and its helpers), then wait for it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_alive(pid):
        raise ClusterError(f"process {pid} survived SIGKILL for {timeout:.0f} s")


def spawn(argv: Sequence[str], log: Path, env: dict[str, str] | None = None) -> int:
    """Start ``argv`` in a session of its own (it outlives this process); return its pid."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    return proc.pid


def run(argv: Sequence[str], timeout: float, what: str) -> str:
    """Run ``argv`` to completion within ``timeout`` s; return its output or raise ClusterError."""
    try:
        done = subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ClusterError(f"{what} took longer than {timeout:.0f} s") from exc
    if done.returncode != 0:
        raise ClusterError(f"{what} failed ({done.returncode}): {done.stdout}{done.stderr}".strip())
    return done.stdout


def read_state(path: Path) -> dict[str, Any] | None:
    """The JSON state file of a cluster, or None when there is none."""
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Write the state file atomically (a reader never sees half of it)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(path)


def start_watchdog(kind: str, token: str, ttl: float, log: Path) -> None:
    """Stop cluster ``kind`` after ``ttl`` seconds unless it was stopped (or restarted) first.

    The watchdog is a detached ``python -m clusters _expire`` process, so a
    cluster left behind by a crashed test run or a forgotten ``start`` stops
    by itself.
    """
    import sys

    root = Path(__file__).resolve().parent.parent
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    )
    spawn([sys.executable, "-m", "clusters", "_expire", kind, token, str(ttl)], log, env=env)
