"""The real ``psql`` and ``mariadb`` clients, run on a script as a user runs an offline migration.

Both take the engine the test uses, so they follow its database (a
pytest-xdist worker's own, or a database a test made). ``psql`` stops at the
first error unless ``stop=False`` (as ``psql -f`` alone does); ``mariadb``
always stops at the first error (``--batch``). ``run()`` runs the engine's own
one; ``check=True`` fails the test, showing the client's stderr, if it did not
succeed.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from sqlalchemy.engine import Engine


def psql_args(engine: Engine, *options: str, stop: bool = True) -> list[str]:
    """The psql command line reading a script on stdin for ``engine``'s database."""
    psql = shutil.which("psql")
    assert psql is not None, "psql is needed to run an offline script"
    url = engine.url
    return [psql, "-X", "-q", *(["-v", "ON_ERROR_STOP=1"] if stop else []), *options,
            "-h", url.host or "127.0.0.1", "-p", str(url.port or 5432),
            "-U", url.username or "postgres", "-d", url.database or "", "-f", "-"]  # fmt: skip


def psql_env(engine: Engine, app: str | None = None, **extra: str) -> dict[str, str]:
    """The environment for psql: the password, the application name ``app`` if given."""
    env = {**os.environ, "PGPASSWORD": engine.url.password or "", **extra}
    if app is not None:
        env["PGAPPNAME"] = app
    return env


def psql(
    engine: Engine,
    script: str,
    *options: str,
    stop: bool = True,
    app: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with the real psql (``stop``: with ON_ERROR_STOP=1, as the docs say)."""
    done = subprocess.run(
        psql_args(engine, *options, stop=stop),
        input=script,
        text=True,
        capture_output=True,
        timeout=timeout,
        check=False,
        env=psql_env(engine, app, **(env or {})),
    )
    return _checked(done) if check else done


def mariadb_args(engine: Engine, *options: str) -> list[str]:
    """The mariadb client's command line for ``engine``'s database."""
    url = engine.url
    return ["mariadb", "--batch", *options, "-h", url.host or "127.0.0.1",
            "-P", str(url.port or 3306), "-u", url.username or "root",
            *([f"-p{url.password}"] if url.password else []), url.database or ""]  # fmt: skip


def mariadb(
    engine: Engine, script: str, *options: str, timeout: float = 120, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with the real mariadb client (it stops at the first error)."""
    done = subprocess.run(
        mariadb_args(engine, *options),
        input=script,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    return _checked(done) if check else done


def run(
    engine: Engine, script: str, *, timeout: float = 120, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with the engine's own client (psql or mariadb), stopping at an error."""
    client = _CLIENTS[engine.url.get_backend_name()]
    return client(engine, script, timeout=timeout, check=check)


_CLIENTS = {"postgresql": psql, "mysql": mariadb}


def _checked(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"the client failed:\n{done.stderr[-3000:]}\n{done.stdout[-1500:]}"
    return done
