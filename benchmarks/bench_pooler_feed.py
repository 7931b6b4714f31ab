"""follow(settle="auto") behind PgBouncer: committed rows missed, with and without the guard.

Writers make their ids in Python (``default=new_ulid``) and send their
INSERTs through PgBouncer in transaction mode with a pool too small for
them, so their transactions wait in its queue after the id was made. Feeds
follow the table directly and through the pooler; at the end each one's
delivered ids are compared with the table.

    python -m clusters start pgbouncer
    python benchmarks/bench_pooler_feed.py \
        --direct postgresql+psycopg://postgres@127.0.0.1:5432/DB --pool-size 2 --seconds 20

``--guard`` installs :func:`guard_ulid_age_ddl`'s trigger: refused INSERTs
(SQLSTATE 40001) are retried with a new id. The tests run this same load
(tests/test_pooler_feed.py).
"""

from __future__ import annotations

import argparse
import random
import secrets
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _servers  # noqa: F401  (puts tests/ on sys.path: the writers helper)
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session, sessionmaker

from _writers import Loop
from sqlalchemy_ulid import ULIDType, follow, guard_ulid_age_ddl, new_ulid, ulid_server_default

SERIALIZATION_FAILURE = "40001"


def feed_table(name: str, *, server_made: bool = False) -> sa.Table:
    """The followed table: a ULID key made in Python (or by the server), who wrote it, when."""
    made: dict[str, Any] = (
        {"server_default": ulid_server_default()} if server_made else {"default": new_ulid}
    )
    return sa.Table(
        name,
        sa.MetaData(),
        sa.Column("id", ULIDType(), primary_key=True, **made),
        sa.Column("writer", sa.Integer, nullable=False),
        sa.Column(
            "arrived",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("clock_timestamp()"),
        ),
    )


def is_refusal(error: BaseException) -> bool:
    """Whether ``error`` is the guard's (or any) serialization failure: retry it."""
    orig = getattr(error, "orig", None)
    return getattr(orig, "sqlstate", None) == SERIALIZATION_FAILURE


def insert_retrying(
    engine: Engine, table: sa.Table, values: dict[str, Any], hold: float = 0.0
) -> int:
    """Insert one row (id made at flush), retrying refusals; return the refusals.

    ``hold`` > 0: the transaction first holds its server session that long
    (a slow request's other work), which makes the other writers queue.
    """
    refused = 0
    while True:
        try:
            with engine.begin() as conn:
                if hold:
                    conn.execute(sa.select(sa.func.pg_sleep(hold)))
                conn.execute(table.insert(), values)
            return refused
        except sa.exc.OperationalError as error:
            if not is_refusal(error) or refused >= 50:
                raise
            refused += 1


Source = Engine | Callable[[], AbstractContextManager[Session]]


class Follower(threading.Thread):
    """follow(source, settle="auto") in a thread; ``ids`` is what it delivered, in order."""

    def __init__(self, source: Source, table: sa.Table, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.source = source
        self.table = table
        self.ids: list[Any] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for page in follow(
                self.source,
                sa.select(self.table.c.id),
                self.table.c.id,
                settle="auto",
                limit=50,
                interval=0.02,
                stop=self.stop,
                check_skew=None,
            ):
                self.ids.extend(row.id if hasattr(row, "id") else row for row in page.items)
        except BaseException as exc:  # reported by the caller
            self.error = exc


@dataclass
class Result:
    committed: int = 0
    refused: int = 0
    missed: dict[str, int] = field(default_factory=dict)
    repeated: dict[str, int] = field(default_factory=dict)
    queued_over_margin: int = 0  # rows whose INSERT ran > 0.2 s after the id was made


def run_load(
    direct: Engine,
    pooled: Engine,
    *,
    guard: bool,
    writers: int = 6,
    direct_writers: int = 1,
    seconds: float = 10.0,
    table_name: str | None = None,
) -> Result:
    """Writers through ``pooled`` (and ``direct_writers`` direct), feeds direct and pooled.

    Returns what each feed missed and repeated, against the table at the end.
    """
    table = feed_table(table_name or f"pooler_feed_{secrets.token_hex(4)}")
    table.metadata.drop_all(direct)
    if guard:
        for ddl in guard_ulid_age_ddl(table):
            sa.event.listen(table, "after_create", ddl)
    table.metadata.create_all(direct)
    result = Result()
    lock = threading.Lock()
    errors: list[BaseException] = []
    try:
        followers = [
            Follower(direct, table, "direct engine"),
            Follower(pooled, table, "pooled engine"),
            Follower(
                sessionmaker(pooled.execution_options(isolation_level="READ COMMITTED")),
                table,
                "pooled sessionmaker",
            ),
        ]
        for follower in followers:
            follower.start()

        def writing(engine: Engine, first: int, count: int) -> Loop:
            # One writer in three holds its transaction open 0.1-0.6 s.
            rngs = [random.Random(first + n) for n in range(count)]

            def write(_: None, n: int, i: int) -> None:
                hold = rngs[n].uniform(0.1, 0.6) if (first + n) % 3 == 0 else 0.0
                refused = insert_retrying(engine, table, {"writer": first + n}, hold)
                with lock:
                    result.refused += refused

            return Loop(engine, count, write, connection=None, join=30)

        # Writers that do not queue: connected directly (or through another pool).
        crews = [writing(pooled, 0, writers), writing(direct, writers, direct_writers)]
        with crews[0], crews[1]:
            time.sleep(seconds)
        errors += [*crews[0].errors, *crews[1].errors]
        with direct.connect() as conn:
            rows = conn.execute(
                sa.select(
                    table.c.id,
                    sa.extract("epoch", table.c.arrived) * 1000,
                )
            ).all()
        committed = {row[0] for row in rows}
        result.committed = len(committed)
        result.queued_over_margin = sum(
            1 for row in rows if float(row[1]) - row[0].timestamp_ms > 200
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(
            len(set(f.ids)) < len(committed) and f.error is None for f in followers
        ):
            time.sleep(0.1)
        time.sleep(0.5)  # a late duplicate would show up by now
        for follower in followers:
            follower.stop.set()
            follower.join(10)
            if follower.error is not None:
                errors.append(follower.error)
            delivered = Counter(follower.ids)
            result.missed[follower.name] = len(committed - set(delivered))
            result.repeated[follower.name] = sum(c - 1 for c in delivered.values() if c > 1)
        if errors:
            raise errors[0]
        return result
    finally:
        table.metadata.drop_all(direct)


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from clusters import PgBouncer

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--direct", required=True, help="SQLAlchemy URL of the server")
    parser.add_argument("--pool-size", type=int, default=2)
    parser.add_argument("--writers", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    direct = sa.create_engine(args.direct)
    bouncer = PgBouncer()
    database = make_url(args.direct).database
    assert database is not None
    print(
        f"PgBouncer transaction pooling, pool_size {args.pool_size}, {args.writers} writers "
        "through it and 1 direct (ids made in Python; one in three holds its "
        "transaction 0.1-0.6 s), "
        f"{args.seconds:g} s each"
    )
    print(
        "| database guard | rows committed | INSERTs run > 0.2 s after the id | refused "
        "| missed: direct / pooled engine / pooled sessionmaker |"
    )
    print("|---|---|---|---|---|")
    for guard in (False, True):
        alias = f"{database}_b{secrets.token_hex(3)}"
        pooled = sa.create_engine(
            bouncer.alias(alias, database, args.pool_size),
            connect_args={"prepare_threshold": None},
            pool_size=args.writers + 4,
        )
        result = run_load(direct, pooled, guard=guard, writers=args.writers, seconds=args.seconds)
        pooled.dispose()
        missed = " / ".join(str(v) for v in result.missed.values())
        print(
            f"| {'yes' if guard else 'no'} | {result.committed} | {result.queued_over_margin} "
            f"| {result.refused} | {missed} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
