"""The cluster harness itself: refusals, idempotence, the command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from clusters import Galera, PgStandby

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parent.parent.parent


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clusters", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_start_refuses_clearly_when_galera_is_missing(tmp_path: Path) -> None:
    done = cli(
        "start",
        "galera",
        env={
            "WSREP_PROVIDER": str(tmp_path / "nowhere.so"),
            "SQLALCHEMY_ULID_CLUSTER_DIR": str(tmp_path),
        },
    )
    assert done.returncode == 2
    assert "missing: libgalera_smm.so (galera-4)" in done.stderr
    assert "apt-get install" in done.stderr
    assert not (tmp_path / "galera").exists()  # nothing was made


def test_start_refuses_clearly_when_postgresql_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clusters import ClusterError, pgstandby

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("SQLALCHEMY_ULID_CLUSTER_DIR", str(tmp_path))
    monkeypatch.setattr(pgstandby, "_bin_dirs", list)
    with pytest.raises(ClusterError, match=r"missing: initdb, pg_basebackup, pg_ctl\. Install"):
        PgStandby().start()
    assert not (tmp_path / "pg-standby").exists()


def test_stop_and_status_of_clusters_that_do_not_run(tmp_path: Path) -> None:
    env = {"SQLALCHEMY_ULID_CLUSTER_DIR": str(tmp_path)}
    stopped = cli("stop", env=env)
    assert stopped.returncode == 0
    assert stopped.stdout.splitlines() == [
        "galera: stopped",
        "pg-standby: stopped",
        "pgbouncer: stopped",
    ]
    status = cli("status", env=env)
    assert status.returncode == 0
    assert "node1 :3311  down" in status.stdout
    assert "standby :5442  down" in status.stdout
    assert "pgbouncer :6440  down" in status.stdout


def test_start_is_a_no_op_on_a_running_cluster(galera: Galera, pg_standby: PgStandby) -> None:
    pids = (galera.state() or {})["pids"]
    primary_pid = pg_standby._pid(pg_standby.primary_dir)
    done = cli("start", "galera", "--ttl", "900")
    assert done.returncode == 0, done.stderr
    assert (galera.state() or {})["pids"] == pids
    assert "node3 :3313" in done.stdout
    assert "Synced  cluster_size=3" in done.stdout
    pg_standby.start()
    assert pg_standby._pid(pg_standby.primary_dir) == primary_pid
    status = cli("status")
    assert "standby (in recovery)" in status.stdout


def test_the_demo_reports_every_row_read_once(galera: Galera) -> None:
    done = cli("demo", "--seconds", "2", "--keep")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ORDER BY id identical on all three nodes: True" in done.stdout
    assert ", 0 missed, in id order without repeats: True" in done.stdout
    assert "settle='auto' on node3 is refused: settle='auto' is not sound on a Galera" in (
        done.stdout
    )
    assert "follow(..., settle=timedelta(seconds=1))" in done.stdout
    assert "\nOK\n" in done.stdout
    assert galera.pid(1) is not None  # --keep left the cluster up
