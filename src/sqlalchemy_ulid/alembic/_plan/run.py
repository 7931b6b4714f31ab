"""The online runner: a :class:`~.step.Plan` executed on a live connection.

The connection is in autocommit mode (Alembic's ``autocommit_block()``):
each step makes its own short transactions.

1. Every ``check`` is asked first (``SELECT CASE WHEN <guard> THEN <message>
   END``); a refusal raises :class:`ValueError` before any change.
2. Each other step runs only while its guard says it is still to do:

   * ``ddl``: in a transaction of its own on PostgreSQL, with
     ``SET LOCAL lock_timeout`` (nothing is left on the session); on MariaDB
     each statement as ``SET STATEMENT lock_wait_timeout=... FOR``. A lock
     wait that times out is retried after a backoff, the sessions in the
     way named in :class:`~.._locks.LockTimeoutError` at the last try.
   * ``concurrent``: outside a transaction.
   * every other statement (the checks, the guards, each batch, the state
     rows) in the database's ``unbounded_frame``: on PostgreSQL a
     transaction that turns the session's ``statement_timeout`` off with
     ``SET LOCAL``, so that a role's or database's timeout cancels no
     whole-table check or batch, and nothing stays on the session.
   * ``batch`` and ``fill``: one batch a transaction until a batch changes
     no row, each batch sized to take about 150 ms (unless the op fixed
     its ``batch_size``), with progress after every batch: the engine's
     one batch loop (``batches.py``).

3. After each step, the state row (``state.py``) records it.

A ``ddl`` step marked ``refill`` that fails on rows written meanwhile (a
NOT NULL, a CHECK) sends the runner back to the first step still to do,
at most :data:`ROUNDS` times: the fill's guard sees the new rows.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .._backfill import BackfillProgress, error_code
from .._inspect import run
from .._locks import Blocker, LockTimeoutError
from .batches import BatchLoop, run_batches
from .state import under_way
from .step import LIMIT, Step

if TYPE_CHECKING:
    from .database import Database
    from .step import Plan

__all__ = [
    "ROUNDS",
    "Again",
    "LateRows",
    "check_statement",
    "run_checks",
    "run_lock",
    "run_plan",
    "unbounded",
]

logger = logging.getLogger("alembic.runtime.migration")

#: Rounds of "fill the rows written meanwhile, try the step again".
ROUNDS = 3
#: Tries of a DDL statement whose lock wait timed out.
ATTEMPTS = 5
_MAX_BACKOFF = 30.0


class Again(Exception):
    """A step must be tried again from the first step still to do (internal)."""


class LateRows(Again):
    """A ``refill`` step failed on rows written meanwhile (internal)."""


@dataclass
class _Run:
    connection: Connection
    plan: Plan
    database: Database
    progress: Callable[[BackfillProgress], object] | None
    sized_by_time: bool
    late_error: Callable[[], Exception] | None
    state_table: str
    last_step: str = ""
    sizes: dict[str, int] = field(default_factory=dict)

    # -- SQL -----------------------------------------------------------------------

    def sql(self, statement: str) -> Any:
        return run(self.connection, statement)

    def unbounded(self) -> contextlib.AbstractContextManager[None]:
        """The block's statements in the database's ``unbounded_frame`` (no statement timeout)."""
        return unbounded(self.connection, self.database)

    def still_to_do(self, step: Step) -> bool:
        if step.guard is None:
            return True
        with self.unbounded():
            return bool(self.sql(f"SELECT CASE WHEN ({step.guard}) THEN 1 ELSE 0 END").scalar())

    def mark(self, step: str, done: bool = False) -> str:
        return self.database.state.mark_sql(
            self.state_table, self.plan.op, self.plan.target, self.plan.digest, step, done
        )

    # -- the plan ------------------------------------------------------------------

    def checks(self) -> None:
        with self.unbounded():
            run_checks(self.connection, self.plan.checks)

    def steps(self) -> None:
        state = self.database.state
        plan = self.plan
        self.locked(
            state.start_sql(self.state_table, plan.op, plan.target, plan.digest, plan.schema)
        )
        for round_ in range(ROUNDS + 1):
            try:
                for step in self.plan.steps:
                    self.step(step)
                break
            except Again as again:
                if round_ < ROUNDS:
                    continue
                if isinstance(again, LateRows) and self.late_error is not None:
                    raise self.late_error() from None
                if isinstance(again, LateRows):
                    raise
                # A concurrent build timed out on every round.
                raise LockTimeoutError(
                    str(again), ROUNDS + 1, self.plan.lock_timeout, []
                ) from again.__cause__
        forget, empty, drop = state.finish_sql(self.state_table, plan.op, plan.target)
        lock = state.table_lock(plan.schema)
        try:
            for statement in lock.take:
                self.sql(statement)
            self.sql(forget)
            if self.sql(f"SELECT CASE WHEN {empty} THEN 1 ELSE 0 END").scalar():
                self.sql(drop)
            for statement in lock.give_back:
                self.sql(statement)
        except sa.exc.DBAPIError as exc:
            self.give_back(exc)
            raise

    def locked(self, statements: list[str]) -> None:
        """Run ``statements`` (which take and give back the state table's lock)."""
        try:
            for statement in statements:
                self.sql(statement)
        except sa.exc.DBAPIError as exc:
            self.give_back(exc)
            raise

    def give_back(self, exc: sa.exc.DBAPIError) -> None:
        """After a failure under the state table's lock: its transaction or lock ended."""
        if not exc.connection_invalidated:
            for statement in self.database.state.table_lock(self.plan.schema).abort:
                self.sql(statement)

    def step(self, step: Step) -> None:
        if step.kind in ("check", "discover") or not self.still_to_do(step):
            return
        if step.kind == "ddl" and step.generated:
            with self.unbounded():
                made = [str(row[0]) for row in self.sql(step.statements[0]).all() if row[0]]
            if made:
                self.ddl(replace(step, statements=tuple(made), generated=False))
        elif step.kind == "ddl":
            self.ddl(step)
        elif step.kind == "concurrent":
            for statement in step.statements:
                if step.generated:
                    with self.unbounded():
                        made_all = self.sql(statement).all()
                    for (made,) in made_all:
                        self.concurrent(str(made))
                else:
                    self.concurrent(statement)
        else:
            self.batches(step)
        with self.unbounded():
            self.sql(self.mark(step.label))
        self.last_step = step.label

    # -- ddl -----------------------------------------------------------------------

    def ddl(self, step: Step) -> None:
        seconds = self.plan.lock_timeout
        frame = self.database.ddl_frame(seconds)
        locks = self.database.locks
        pid = [0]
        blockers: dict[int, Blocker] = {}
        for attempt in range(1, ATTEMPTS + 1):
            opened = False
            try:
                for statement in frame.begin:
                    self.sql(statement)
                    opened = True
                # Read inside the step's transaction: behind a pooler, its session.
                pid[0] = int(self.sql(locks.session_id).scalar_one())
                with self.database.watching(self.connection, pid, seconds, blockers):
                    for statement in step.statements:
                        self.sql(frame.wrap(statement))
                self.sql(self.mark(step.label))
                for statement in frame.end:
                    self.sql(statement)
                return
            except sa.exc.DBAPIError as exc:
                if exc.connection_invalidated:
                    raise
                if opened:
                    for statement in frame.abort:
                        self.sql(statement)
                code = error_code(exc)
                if step.refill and code in self.database.late_row_codes:
                    raise LateRows(step.label) from exc
                if code not in locks.timeout_codes:
                    raise
                self.database.read_blockers(self.connection, pid[0], blockers)
                if attempt == ATTEMPTS:
                    raise LockTimeoutError(
                        step.statements[0], attempt, seconds, list(blockers.values())
                    ) from exc
                pause = min(seconds * 2 ** (attempt - 1), _MAX_BACKOFF)
                logger.warning(
                    "lock timeout (%gs) on %s, try %d of %d; blocking: %s; next try in %gs",
                    seconds,
                    " ".join(step.statements[0].split())[:80],
                    attempt,
                    ATTEMPTS,
                    "; ".join(map(str, blockers.values())) or "not seen",
                    pause,
                )
                time.sleep(pause)

    def concurrent(self, statement: str) -> None:
        try:
            self.database.run_concurrent(self.connection, statement, self.plan.lock_timeout)
        except sa.exc.DBAPIError as exc:
            if exc.connection_invalidated:
                raise
            if error_code(exc) in self.database.locks.timeout_codes:
                # It left an INVALID index: the step before drops it, next round.
                raise Again(statement) from exc
            raise

    # -- batches -------------------------------------------------------------------

    def batches(self, step: Step) -> None:
        one: Callable[[int], int]
        if step.kind == "fill":
            assert step.fill is not None
            fill = step.fill
            loop = BatchLoop(
                fill.table,
                fill.column,
                self.sizes.get(step.label, self.plan.batch_size),
                total=self.estimate(fill.estimate),
                cap=fill.max_batch,
            )
            if fill.seconds is not None:
                with self.unbounded():
                    loop = replace(loop, seconds=fill.seconds(self.connection))
            with self.unbounded():
                fill_one = fill.online(self.connection)

            def one(limit: int) -> int:
                with self.unbounded():
                    return int(fill_one(limit))

        else:
            loop = BatchLoop(
                self.plan.target, step.label, self.sizes.get(step.label, self.plan.batch_size)
            )
            statement = step.statements[0]

            def one(limit: int) -> int:
                with self.unbounded():
                    return int(self.sql(statement.replace(LIMIT, str(limit))).rowcount)

        loop = replace(
            loop,
            pause=self.plan.pause,
            progress=self.progress,
            sized_by_time=self.sized_by_time,
        )
        # A batch that changed no row: the step is done.
        _, self.sizes[step.label] = run_batches(loop, lambda limit: one(limit) or None)

    def estimate(self, estimate: Callable[[Connection], int] | None) -> int:
        if estimate is None:
            return 0
        with self.unbounded():
            return estimate(self.connection)


def run_plan(
    connection: Connection,
    plan: Plan,
    database: Database,
    *,
    progress: Callable[[BackfillProgress], object] | None = None,
    sized_by_time: bool = True,
    late_error: Callable[[], Exception] | None = None,
    before_changes: Callable[[], None] | None = None,
) -> None:
    """Run ``plan`` on ``connection`` (in autocommit mode); see the module docstring.

    ``before_changes`` runs after the checks and before the first change (the
    op's own checks that need Python, such as dating every row).
    """
    runner = _Run(
        connection,
        plan,
        database,
        progress,
        sized_by_time,
        late_error,
        database.quote_table(plan.schema),
    )
    with run_lock(connection, database, plan.op, plan.target, plan.schema):
        runner.checks()
        if before_changes is not None:
            with runner.unbounded():
                before_changes()
        runner.steps()


@contextlib.contextmanager
def unbounded(connection: Connection, database: Database) -> Iterator[None]:
    """Run the block in ``database.unbounded_frame`` (no statement timeout).

    After a failure the frame's transaction is rolled back (unless the
    connection was lost with it) and the error goes on.
    """
    frame = database.unbounded_frame()
    for statement in frame.begin:
        run(connection, statement)
    try:
        yield
    except BaseException:
        if frame.abort and not connection.invalidated:
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                for statement in frame.abort:
                    run(connection, statement)
        raise
    for statement in frame.end:
        run(connection, statement)


def check_statement(step: Step) -> str:
    """The query that asks a ``check``: its refusal's text, or NULL."""
    assert step.guard is not None
    assert step.message is not None
    return f"SELECT CASE WHEN {step.guard} THEN {step.message} END"


def run_checks(connection: Connection, checks: Sequence[Step]) -> None:
    """Ask each check in order; raise the first refusal (its ``error``) before any change.

    The scripts write the same guards and messages (``IF <guard> THEN SIGNAL``
    on MariaDB, ``render_mariadb.checks_block``).
    """
    for step in checks:
        refusal = run(connection, check_statement(step)).scalar()
        if refusal is not None:
            raise step.error(str(refusal))


@contextlib.contextmanager
def run_lock(
    connection: Connection,
    database: Database | None,
    op: str,
    target: str,
    schema: str | None,
    *,
    refusal: Callable[[str], ValueError] = ValueError,
    lock_op: str | None = None,
) -> Iterator[None]:
    """Hold the run's own lock while the block runs, or refuse: another run holds it.

    The lock is taken in a session of its own, in an open transaction that
    reads and writes nothing (PostgreSQL: a transaction's advisory lock,
    which a pooler in transaction mode keeps with its server session;
    MariaDB: ``GET_LOCK``, the session's), and given back as the block
    ends, failed or not; a session that is lost (killed) takes it with it.
    ``lock_op`` names the lock when it is not ``op``'s own (two ops that
    must not run at once on one table share one); the refusal names ``op``.
    No ``database`` (one without a planner, SQLite): no lock.
    """
    if database is None or not database.state.claim:
        yield
        return
    take, release = database.state.run_lock(lock_op or op, target, schema)
    # READ COMMITTED whatever the engine's level: the open transaction then
    # keeps no snapshot, which would hold back VACUUM for the whole run.
    holder = connection.engine.connect().execution_options(isolation_level="READ COMMITTED")
    try:
        taken = int(holder.exec_driver_sql(take).scalar_one())
    except BaseException:
        holder.close()
        raise
    if not taken:
        holder.close()
        raise refusal(under_way(op, target))
    try:
        yield
    finally:
        _give_back(holder, release)


def _give_back(holder: Connection, release: str) -> None:
    try:
        if release:
            holder.exec_driver_sql(release)
        holder.rollback()
    except sa.exc.DBAPIError:
        pass  # the session was lost: its lock went with it
    finally:
        holder.close()
