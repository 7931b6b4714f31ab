"""A 3-node MariaDB Galera cluster on 127.0.0.1, one ``mariadbd`` process per node.

Node ``n`` (1, 2, 3) listens for SQL on ``3310 + n``, for group
communication on ``4570 + n``, for incremental state transfer (IST) on
``4580 + n`` and for full state transfer (SST, rsync) on ``4590 + n``. Node 1
is initialised with ``mariadb-install-db`` and bootstraps the cluster
(``--wsrep-new-cluster``); nodes 2 and 3 start empty and receive a full copy
from it (SST).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import time
from dataclasses import dataclass
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
    spawn,
    wait_until,
    write_state,
)

NODES = (1, 2, 3)
CLUSTER_NAME = "sqlalchemy_ulid"
DATABASE = "ulid_test"
_PROVIDERS = (
    "/usr/lib/galera/libgalera_smm.so",
    "/usr/lib/libgalera_smm.so",
    "/usr/lib64/galera-4/libgalera_smm.so",
    "/usr/lib64/galera/libgalera_smm.so",
)
_INSTALL_HINT = "apt-get install mariadb-server galera-4 rsync  (Debian/Ubuntu)"


@dataclass(frozen=True)
class Node:
    """One Galera node: its number, ports and files."""

    number: int
    root: Path

    @property
    def port(self) -> int:
        """The SQL port."""
        return 3310 + self.number

    @property
    def gmcast_port(self) -> int:
        """Group communication (gmcast) port."""
        return 4570 + self.number

    @property
    def ist_port(self) -> int:
        """Incremental state transfer receive port."""
        return 4580 + self.number

    @property
    def sst_port(self) -> int:
        """Full state transfer (rsync) receive port."""
        return 4590 + self.number

    @property
    def datadir(self) -> Path:
        """The node's data directory."""
        return self.root / f"node{self.number}"

    @property
    def log(self) -> Path:
        """The node's error log (also where mariadbd's stdout goes)."""
        return self.root / f"node{self.number}.log"

    @property
    def url(self) -> str:
        """SQLAlchemy URL of the node's test database."""
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/{DATABASE}"


def _programs() -> dict[str, str]:
    # $WSREP_PROVIDER, when set, is the only place looked at.
    candidates = [os.environ["WSREP_PROVIDER"]] if os.environ.get("WSREP_PROVIDER") else _PROVIDERS
    provider = next((path for path in candidates if Path(path).is_file()), None)
    found = require(
        {
            "mariadbd": find_program("mariadbd", "/usr/sbin", "/usr/libexec"),
            "mariadb-install-db": find_program("mariadb-install-db", "/usr/bin"),
            "rsync": find_program("rsync"),
            "wsrep_sst_rsync": find_program("wsrep_sst_rsync", "/usr/bin"),
            "libgalera_smm.so (galera-4)": provider,
        },
        _INSTALL_HINT,
    )
    try:
        import pymysql  # type: ignore[import-untyped]  # noqa: F401
    except ImportError as exc:
        raise ClusterError("the PyMySQL driver is missing: pip install PyMySQL") from exc
    return found


def _connect(node: Node, database: str | None = None, timeout: int = 5) -> Any:
    import pymysql

    return pymysql.connect(
        host="127.0.0.1",
        port=node.port,
        user="root",
        database=database,
        connect_timeout=timeout,
        read_timeout=30,
        write_timeout=30,
        autocommit=True,
    )


def node_status(node: Node) -> dict[str, str]:
    """The node's ``wsrep_%`` status variables (raises if it does not answer)."""
    conn = _connect(node, timeout=2)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS LIKE 'wsrep_%'")
            return {str(name): str(value) for name, value in cur.fetchall()}
    finally:
        conn.close()


class Galera:
    """Start, inspect, stop, kill and restart the 3-node cluster.

    Every method is idempotent and bounded in time: ``start`` on a running
    cluster checks it and returns, ``stop`` on a stopped one does nothing.
    """

    kind = "galera"

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or base_dir()) / self.kind
        self.nodes = [Node(number, self.root) for number in NODES]
        self.state_file = self.root / "state.json"

    # -- queries --------------------------------------------------------------

    @property
    def urls(self) -> list[str]:
        """One SQLAlchemy URL per node, node 1 first."""
        return [node.url for node in self.nodes]

    def state(self) -> dict[str, Any] | None:
        """The recorded state (token, pids), or None when the cluster is not started."""
        return read_state(self.state_file)

    def pid(self, number: int) -> int | None:
        """The recorded pid of node ``number`` when it is alive."""
        state = self.state() or {}
        pid = state.get("pids", {}).get(str(number))
        return pid if isinstance(pid, int) and pid_alive(pid) else None

    def synced(self, number: int) -> bool:
        """True when node ``number`` answers, is Synced and sees all the live nodes."""
        live = sum(1 for n in NODES if self.pid(n) is not None)
        status = node_status(self.nodes[number - 1])
        return (
            status.get("wsrep_ready") == "ON"
            and status.get("wsrep_local_state_comment") == "Synced"
            and status.get("wsrep_cluster_status") == "Primary"
            and int(status.get("wsrep_cluster_size", "0")) == live
        )

    def status(self) -> list[str]:
        """One line per node: pid, state and cluster size, or why it is down."""
        lines = []
        for node in self.nodes:
            pid = self.pid(node.number)
            if pid is None:
                lines.append(f"node{node.number} :{node.port}  down")
                continue
            try:
                st = node_status(node)
                lines.append(
                    f"node{node.number} :{node.port}  pid {pid}"
                    f"  {st.get('wsrep_local_state_comment')}"
                    f"  cluster_size={st.get('wsrep_cluster_size')}"
                    f"  status={st.get('wsrep_cluster_status')}"
                    f"  last_committed={st.get('wsrep_last_committed')}"
                )
            except Exception as exc:
                lines.append(f"node{node.number} :{node.port}  pid {pid}  not answering: {exc}")
        return lines

    # -- lifecycle ------------------------------------------------------------

    def start(self, timeout: float = 240.0) -> None:
        """Start the whole cluster (no-op when all three nodes are up and Synced)."""
        deadline = time.monotonic() + timeout
        programs = _programs()
        if self.state() is not None:
            if all(self.pid(n) is not None for n in NODES):
                wait_until(lambda: all(self.synced(n) for n in NODES), 60, "Galera to sync")
                return
            self.stop()  # half a cluster from an earlier run: start afresh
        for node in self.nodes:
            for port in (node.port, node.gmcast_port, node.ist_port, node.sst_port):
                if port_in_use(port):
                    raise ClusterError(
                        f"port {port} (node{node.number}) is taken by another program; "
                        "stop it or free the port"
                    )
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        self._own(self.root)
        token = secrets.token_hex(8)
        write_state(self.state_file, {"token": token, "pids": {}, "started": time.time()})
        try:
            first = self.nodes[0]
            first.datadir.mkdir()
            self._own(first.datadir)
            run(
                [
                    programs["mariadb-install-db"],
                    "--no-defaults",
                    f"--datadir={first.datadir}",
                    *self._user_flag(),
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                ],
                timeout=120,
                what="mariadb-install-db",
            )
            self._start_node(first, programs, bootstrap=True)
            self._wait_synced(first.number, deadline)
            conn = _connect(first)
            try:
                with conn.cursor() as cur:
                    cur.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
            finally:
                conn.close()
            for node in self.nodes[1:]:
                node.datadir.mkdir()
                self._own(node.datadir)
                self._start_node(node, programs, bootstrap=False)
                self._wait_synced(node.number, deadline)
        except BaseException:
            self.stop(keep_logs=True)
            raise

    def stop(self, *, keep_logs: bool = False) -> None:
        """Kill every node and delete the data (no-op when nothing runs).

        With ``keep_logs`` the nodes' logs stay in place, for a failed start.
        """
        state = self.state()
        if state is not None:
            for pid in state.get("pids", {}).values():
                if isinstance(pid, int) and pid_alive(pid):
                    kill_group(pid)
        if not self.root.exists():
            return
        if keep_logs:
            for path in self.root.iterdir():
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
            self.state_file.unlink(missing_ok=True)
        else:
            shutil.rmtree(self.root, ignore_errors=True)

    def kill(self, number: int) -> None:
        """SIGKILL node ``number`` (a crash: no shutdown, its data stays)."""
        pid = self.pid(number)
        if pid is not None:
            kill_group(pid)

    def restart(self, number: int, timeout: float = 120.0) -> str:
        """Start a killed node again on its old data; return how it rejoined ("IST" or "SST").

        Like the ``galera_recovery`` step of the packaged service, it first
        recovers the node's last committed position (``--wsrep-recover``) so
        the node asks its peers only for the write-sets it missed.
        """
        deadline = time.monotonic() + timeout
        programs = _programs()
        node = self.nodes[number - 1]
        if self.pid(number) is not None:
            return "running"
        recover_log = self.root / f"node{number}.recover.log"
        recover_log.unlink(missing_ok=True)
        run(
            [
                *self._server_argv(node, programs, bootstrap=False),
                f"--log-error={recover_log}",
                "--wsrep-recover",
            ],
            timeout=60,
            what=f"node{number} --wsrep-recover",
        )
        match = re.search(r"Recovered position:\s*(\S+:-?\d+)", recover_log.read_text())
        if match is None:
            raise ClusterError(f"node{number}: no recovered position in {recover_log}")
        offset = node.log.stat().st_size if node.log.exists() else 0
        self._start_node(node, programs, bootstrap=False, start_position=match.group(1))
        self._wait_synced(number, deadline)
        text = node.log.read_text(errors="replace")[offset:]
        # The joiner's transfer script says which transfer it completed.
        match = re.search(r"rsync (IST|SST) completed on joiner", text)
        return match.group(1) if match else "unknown"

    # -- internals ------------------------------------------------------------

    @staticmethod
    def _user_flag() -> list[str]:
        # As root, run the nodes as the mysql account: the rsync daemon that
        # receives a state transfer drops root for "nobody", which could not
        # write a root-owned data directory.
        return ["--user=mysql"] if os.geteuid() == 0 else []

    def _own(self, path: Path) -> None:
        if os.geteuid() == 0:
            shutil.chown(path, "mysql", "mysql")

    def _server_argv(self, node: Node, programs: dict[str, str], *, bootstrap: bool) -> list[str]:
        peers = ",".join(f"127.0.0.1:{other.gmcast_port}" for other in self.nodes)
        provider_options = ";".join(
            [
                f"gmcast.listen_addr=tcp://127.0.0.1:{node.gmcast_port}",
                f"ist.recv_addr=127.0.0.1:{node.ist_port}",
                "gcache.size=128M",
            ]
        )
        argv = [
            programs["mariadbd"],
            "--no-defaults",
            f"--datadir={node.datadir}",
            f"--port={node.port}",
            "--bind-address=127.0.0.1",
            f"--socket={node.root}/node{node.number}.sock",
            f"--pid-file={node.root}/node{node.number}.pid",
            *self._user_flag(),
            "--skip-name-resolve",
            "--innodb-buffer-pool-size=64M",
            "--innodb-log-file-size=48M",
            "--innodb-flush-log-at-trx-commit=2",
            "--innodb-autoinc-lock-mode=2",
            "--performance-schema=OFF",
            "--max-connections=100",
            "--default-storage-engine=InnoDB",
            "--binlog-format=ROW",
            "--wsrep-on=ON",
            f"--wsrep-provider={programs['libgalera_smm.so (galera-4)']}",
            f"--wsrep-cluster-name={CLUSTER_NAME}",
            f"--wsrep-cluster-address=gcomm://{peers}",
            f"--wsrep-node-name=node{node.number}",
            "--wsrep-node-address=127.0.0.1",
            f"--wsrep-node-incoming-address=127.0.0.1:{node.port}",
            f"--wsrep-provider-options={provider_options}",
            "--wsrep-sst-method=rsync",
            f"--wsrep-sst-receive-address=127.0.0.1:{node.sst_port}",
            "--wsrep-slave-threads=2",
        ]
        if bootstrap:
            argv.append("--wsrep-new-cluster")
        return argv

    def _start_node(
        self,
        node: Node,
        programs: dict[str, str],
        *,
        bootstrap: bool,
        start_position: str | None = None,
    ) -> None:
        argv = [*self._server_argv(node, programs, bootstrap=bootstrap), f"--log-error={node.log}"]
        if start_position:
            argv.append(f"--wsrep-start-position={start_position}")
        # wsrep_sst_rsync and friends live next to mariadb's other scripts.
        env = dict(os.environ, PATH=f"/usr/bin:/usr/sbin:{os.environ.get('PATH', '')}")
        pid = spawn(argv, self.root / f"node{node.number}.out", env=env)
        state = self.state() or {}
        state.setdefault("pids", {})[str(node.number)] = pid
        write_state(self.state_file, state)

    def _wait_synced(self, number: int, deadline: float) -> None:
        node = self.nodes[number - 1]

        def probe() -> bool:
            if self.pid(number) is None:
                tail = node.log.read_text(errors="replace")[-2000:] if node.log.exists() else ""
                raise ClusterError(f"node{number} exited while starting; log tail:\n{tail}")
            return self.synced(number)

        try:
            wait_until(probe, max(1.0, deadline - time.monotonic()), f"node{number} to sync")
        except ClusterError as exc:
            if "exited while starting" in str(exc):
                raise
            tail = node.log.read_text(errors="replace")[-2000:] if node.log.exists() else ""
            raise ClusterError(f"{exc}; log tail:\n{tail}") from None
