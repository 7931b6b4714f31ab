"""Throwaway database clusters on 127.0.0.1 for the cluster tests, the demo and the benchmark.

Not part of the sqlalchemy-ulid package: a harness a user can run from a
clone, as ``python -m clusters start galera|pg-standby|pgbouncer``, ``stop``,
``status`` and ``demo`` (``make cluster-demo``). See docs/distributed.md.
"""

from __future__ import annotations

from ._common import ClusterError, base_dir
from .galera import Galera
from .pgbouncer import PgBouncer
from .pgstandby import PgStandby

__all__ = ["KINDS", "ClusterError", "Galera", "PgBouncer", "PgStandby", "base_dir", "cluster"]

KINDS = ("galera", "pg-standby", "pgbouncer")


def cluster(kind: str) -> Galera | PgStandby | PgBouncer:
    """The cluster object for ``kind`` ("galera", "pg-standby" or "pgbouncer")."""
    if kind == "galera":
        return Galera()
    if kind == "pg-standby":
        return PgStandby()
    if kind == "pgbouncer":
        return PgBouncer()
    raise ClusterError(f"unknown cluster {kind!r}: choose one of {', '.join(KINDS)}")
