"""Application writers for the migration tests: threads that write while an op runs.

A test subclasses ``Writers`` with the statements its application sends
(``write``), and runs the op inside ``with writers:``. Each writer has a
connection of its own; what it raises is kept and fails ``check()``; the
statements it sends through ``timing()`` have their latency recorded.
``Loop`` is the plain case: each writer repeats one step (a function of
its connection, its number and the step's), each committed, until stopped;
``Inserters`` times a step that inserts a row with a key of the writer's
own (the benchmarks of ops on live tables use it too: one writers helper
for both), and ``Appenders`` append new ULIDs to a feed in transactions
held open a random while.
``SwapFollowers`` adds the application that follows a storage swap: it binds
values for the old storage until the swap begins, then for the new one.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from sqlalchemy_ulid import ULID, new_ulid

W = TypeVar("W", bound="Writers")


class Writers:
    """``count`` writer threads, started by ``with``, stopped and joined at its end.

    ``settle`` seconds pass after every writer is ready before the block
    runs, and again before they are stopped; ``join`` bounds the wait for
    each thread at the end (one still running fails the test).
    """

    def __init__(
        self,
        engine: Engine,
        count: int,
        *,
        settle: float = 0.1,
        join: float = 10.0,
        daemon: bool = False,
    ) -> None:
        self.engine = engine
        self.settle = settle
        self.join = join
        self.latencies: list[float] = []
        #: (when it started, how long it took), for each timed block
        self.timed: list[tuple[float, float]] = []
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self.ready = [threading.Event() for _ in range(count)]
        self.threads = [
            threading.Thread(target=self._run, args=(n,), daemon=daemon) for n in range(count)
        ]

    def begin(self, conn: Connection, n: int) -> None:
        """Writer ``n``'s set-up on its connection, before it counts as ready."""

    def write(self, conn: Connection, n: int) -> None:
        """Writer ``n``'s loop: ``while not self.stop.is_set(): ...``."""
        raise NotImplementedError

    def connect(self) -> AbstractContextManager[Any]:
        """Each writer's connection, for the whole run."""
        return self.engine.connect()

    def _run(self, n: int) -> None:
        try:
            with self.connect() as conn:
                self.begin(conn, n)
                self.ready[n].set()
                self.write(conn, n)
        except BaseException as exc:  # reported by check()
            self.errors.append(exc)

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        """Record how long the block took, whether or not it raised."""
        started = time.monotonic()
        try:
            yield
        finally:
            took = time.monotonic() - started
            self.latencies.append(took)
            self.timed.append((started, took))

    def send(self, conn: Connection, sql: str) -> None:
        """Run ``sql`` and commit, timed."""
        with self.timing():
            conn.exec_driver_sql(sql)
            conn.commit()

    def __enter__(self: W) -> W:
        for thread in self.threads:
            thread.start()
        for ready in self.ready:
            ready.wait(10)
        time.sleep(self.settle)
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.stop.is_set():
            time.sleep(self.settle)
        self.halt()

    def halt(self) -> None:
        """Stop the writers and wait for them now (the ``with`` block's end does it too)."""
        self.stop.set()
        for thread in self.threads:
            if thread.ident is not None:
                thread.join(timeout=self.join)
        assert not any(t.is_alive() for t in self.threads)

    def check(self) -> None:
        """Fail on what a writer raised."""
        assert not self.errors, self.errors[:3]

    def check_waits(self, bound: float, stall: float) -> None:
        """Fail if a write waited ``bound`` seconds longer than ``stall`` (``Control.stall()``)."""
        slowest = sorted(self.latencies)[-5:]
        assert max(self.latencies) < bound + stall, (slowest, f"control stall {stall:.3f}")


class Loop(Writers):
    """Writers repeating ``step(conn, n, i)``, writer ``n``'s ``i``-th write, until stopped.

    Each step is committed, ``pause`` seconds before the next; ``done``
    counts them. A step returning False, or raising one of ``ends``, ends
    its writer quietly (the test expects the table to change under it);
    what else it raises ends it and fails ``check()``. ``begin(conn, n)``
    sets up each writer's connection. ``connection="write"``: a step gets a
    connection and transaction of its own, as an application checking one
    out of its pool per write does (``None``: none, the step checks out
    its own). ``turn`` (a lock) is taken for each write, its commit
    included: SQLite has one writer at a time.
    """

    def __init__(
        self,
        engine: Engine,
        count: int,
        step: Callable[[Connection, int, int], object],
        *,
        pause: float = 0.0,
        begin: Callable[[Connection, int], object] | None = None,
        connection: str | None = "writer",
        turn: AbstractContextManager[Any] | None = None,
        ends: type[BaseException] | tuple[type[BaseException], ...] = (),
        **options: Any,
    ) -> None:
        options.setdefault("settle", 0.0)
        super().__init__(engine, count, **options)
        self.step = step
        self.ends = ends
        self.pause = pause
        self.setup = begin
        self.connection = connection
        self.turn = turn if turn is not None else contextlib.nullcontext()
        self.done = 0
        self.lock = threading.Lock()

    def connect(self) -> AbstractContextManager[Any]:
        return super().connect() if self.connection == "writer" else contextlib.nullcontext()

    def begin(self, conn: Connection, n: int) -> None:
        if self.setup is not None:
            self.setup(conn, n)

    def _once(self, conn: Connection, n: int, i: int) -> object:
        with self.turn:
            try:
                if self.connection == "write":
                    with self.engine.begin() as own:
                        return self.step(own, n, i)
                result = self.step(conn, n, i)
                if conn is not None:
                    conn.commit()
            except self.ends:
                if conn is not None:
                    conn.rollback()
                return False
            return result

    def committed(self, n: int, result: object) -> None:
        """Writer ``n``'s step returned ``result`` and was committed."""
        with self.lock:
            self.done += 1

    def write(self, conn: Connection, n: int) -> None:
        i = 0
        while not self.stop.is_set():
            result = self._once(conn, n, i)
            if result is False:
                return
            self.committed(n, result)
            i += 1
            time.sleep(self.pause)


class Inserters(Loop):
    """Writers calling ``insert(conn, key)`` (one statement and its commit), timed.

    Each writer uses keys of its own (from ``100_000_000 + n * 10_000_000``
    up), ``pause`` seconds apart, until the ``with`` block ends.
    """

    def __init__(
        self,
        engine: Engine,
        count: int,
        insert: Callable[[Connection, int], None],
        *,
        pause: float,
        **options: Any,
    ) -> None:
        super().__init__(engine, count, self._timed, pause=pause, **options)
        self.insert = insert

    def _timed(self, conn: Connection, n: int, i: int) -> None:
        with self.timing():
            self.insert(conn, 100_000_000 + n * 10_000_000 + i)

    @property
    def waits(self) -> list[float]:
        """How long each ``insert`` took."""
        return self.latencies


class Appenders(Loop):
    """Writers appending 1-3 new ULIDs to ``table`` per transaction, held open 0..``max_tx`` s.

    Each write checks a connection out of the engine's pool; ``written``
    has every committed id. ``values(n, id)`` is the row writer ``n``
    inserts (its ``id`` only, by default).
    """

    def __init__(
        self,
        engine: Engine,
        count: int,
        table: sa.Table,
        max_tx: float,
        *,
        values: Callable[[int, ULID], dict[str, Any]] = lambda n, new: {"id": new},
        **options: Any,
    ) -> None:
        super().__init__(engine, count, self._append, connection="write", **options)
        self.table, self.max_tx, self.values = table, max_tx, values
        self.written: list[ULID] = []
        self.rngs = [random.Random(n) for n in range(count)]

    def _append(self, conn: Connection, n: int, i: int) -> list[ULID]:
        rng = self.rngs[n]
        batch = [new_ulid() for _ in range(rng.randint(1, 3))]
        conn.execute(self.table.insert(), [self.values(n, new) for new in batch])
        time.sleep(rng.uniform(0, self.max_tx))
        return batch

    def committed(self, n: int, result: Any) -> None:
        super().committed(n, result)
        with self.lock:
            self.written.extend(result)


def insert_and_change(
    conn: Connection, table: str, key: int, ref: object, target: int, changed: object
) -> None:
    """A storage test's write: row ``key`` inserted with ``ref``, row ``target``'s changed."""
    conn.execute(
        sa.text(f"INSERT INTO {table} (id, ref, n) VALUES (:i, :r, 0)"), {"i": key, "r": ref}
    )
    conn.execute(sa.text(f"UPDATE {table} SET ref = :r WHERE id = :i"), {"i": target, "r": changed})


class SwapFollowers(Writers):
    """Writers that bind for the new storage from the moment the op's swap begins.

    ``watch(prefix)`` raises ``swapping`` just before the op sends a
    statement starting with ``prefix``. With ``wait_in_flight``, the swap
    then waits for the writer's statement in flight, as an application
    deployed in step with the migration would make it (the writers' statements
    take turns on one lock for that).
    """

    def __init__(
        self, engine: Engine, count: int, *, wait_in_flight: bool = False, **options: Any
    ) -> None:
        super().__init__(engine, count, **options)
        self.failed: list[str] = []
        #: when each failure came (time.monotonic())
        self.failed_at: list[float] = []
        self.swapping = threading.Event()
        self.swap_started = float("inf")
        #: when the op's swap statement last returned (its tries that timed out
        #: on a lock did not): until then the writers bind for a table still old
        self.swap_done = float("inf")
        #: held by a writer's statement: the swap waits for the one in flight
        self.gate = threading.Lock() if wait_in_flight else None

    def attempt(self, conn: Connection, send: Callable[[bool], None]) -> bool:
        """Run ``send(swapping)`` and commit, timed; False if it met the new type.

        Only a statement in flight when the swap began may fail that way;
        any other database error is raised.
        """
        with self.timing():
            try:
                with self.gate if self.gate is not None else contextlib.nullcontext():
                    send(self.swapping.is_set())
                    conn.commit()
            except sa.exc.DBAPIError as exc:
                conn.rollback()
                self.failed.append(str(exc.orig))
                self.failed_at.append(time.monotonic())
                if time.monotonic() < self.swap_started:
                    raise
                return False
        return True

    def watch(self, prefix: str) -> Callable[[], None]:
        """Raise the swap flag just before the op sends its swap; returns the undo."""

        def swap(statement: str) -> bool:
            # MariaDB's DDL comes framed by its lock timeout: SET STATEMENT ... FOR <it>.
            text = statement.lstrip()
            if text.startswith("SET STATEMENT "):
                text = text.split(" FOR ", 1)[1]
            return text.startswith(prefix)

        def hook(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if swap(statement) and not self.swapping.is_set():
                self.swap_started = time.monotonic()
                self.swapping.set()
                if self.gate is not None:
                    with self.gate:
                        pass

        def done(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if swap(statement):
                self.swap_done = time.monotonic()

        sa.event.listen(self.engine, "before_cursor_execute", hook)
        sa.event.listen(self.engine, "after_cursor_execute", done)

        def undo() -> None:
            sa.event.remove(self.engine, "before_cursor_execute", hook)
            sa.event.remove(self.engine, "after_cursor_execute", done)

        return undo

    def check(self) -> None:
        """Also fail if more statements met the new type than were in flight."""
        super().check()
        # Only statements in flight as the swap began or ended may fail (the
        # new type): the writers switch when the swap is sent, and a swap that
        # waits for its lock (tries that time out, then again) leaves them
        # binding for the new type on the old table until it is done.
        timed = zip(self.failed, self.failed_at, strict=True)
        after = [failure for failure, at in timed if at > self.swap_done]
        assert len(after) <= 2 * len(self.threads), after[:3]


class Control(Writers):
    """One writer on a table of its own, which no op touches: the machine's own stalls.

    A write the op cannot block still waits when the machine or the server
    stalls (a loaded CI machine, a WAL flush). ``stall()`` is the longest
    such write while the block ran; a writer of the op's table is judged
    by how much longer than that it waited, not by the wall clock alone.
    """

    def __init__(self, engine: Engine, name: str) -> None:
        super().__init__(engine, 1)
        self.name = name

    def __enter__(self) -> Control:
        with self.engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {self.name}")
            conn.exec_driver_sql(f"CREATE TABLE {self.name} (n INTEGER)")
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        try:
            super().__exit__(*exc)
        finally:
            with self.engine.begin() as conn:
                conn.exec_driver_sql(f"DROP TABLE IF EXISTS {self.name}")

    def write(self, conn: Connection, n: int) -> None:
        while not self.stop.is_set():
            self.send(conn, f"INSERT INTO {self.name} (n) VALUES ({n})")
            time.sleep(0.002)

    def stall(self) -> float:
        """The longest write of the control table, after ``check()`` found no error."""
        self.check()
        return max(self.latencies, default=0.0)
