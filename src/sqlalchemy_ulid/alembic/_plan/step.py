"""A migration op's plan: an ordered list of steps, each with a guard written in SQL.

A planner (one per database, in ``alembic/postgresql`` and ``alembic/mysql``)
turns an op into a :class:`Plan`. The same plan is then either run by the
online runner (``run.py``) or written as a script by a renderer
(``render_pg.py``, ``render_mariadb.py``): online and offline cannot drift,
because there is one plan.

Every step says, in SQL, whether it is still to do (its ``guard``), so a run
killed at any point, online or offline, is rerun from the start and skips
what is done. The kinds:

``check``
    A refusal, before any DDL: ``guard`` is true when the op must refuse,
    and ``message`` is SQL of the text to refuse with.
``ddl``
    Statements that take a table lock: each waits for it only
    ``lock_timeout`` long, then is retried (online) or stops the script.
``concurrent``
    A statement that must run outside a transaction (PostgreSQL's
    ``CREATE INDEX CONCURRENTLY``).
``batch``
    One statement run again and again, a transaction each, until it
    changes no row; ``{limit}`` in it is the batch's size.
``fill``
    A batch whose values are made in Python online and in SQL offline:
    the one kind with two bodies (:class:`Fill`).
``discover``
    A lookup the script does when it runs (the online planner read the
    catalog itself): rendered offline only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["KINDS", "Fill", "Kind", "Plan", "Step"]

Kind = Literal["check", "ddl", "concurrent", "batch", "fill", "discover"]
KINDS: tuple[Kind, ...] = ("check", "ddl", "concurrent", "batch", "fill", "discover")

#: The placeholder of a batch statement's row count.
LIMIT = "{limit}"


@dataclass(frozen=True)
class Fill:
    """The two bodies of a ``fill`` step.

    ``online(connection)`` begins a run of the fill and returns its batch
    function: ``batch(limit)`` fills at most ``limit`` rows that still need a
    value, in a transaction of its own, and returns how many (0: done).
    ``script`` is the offline body: one block, in the database's procedural
    SQL, that loops over the batches itself, committing after each one.
    """

    online: Callable[[Any], Callable[[int], int]]
    script: str
    #: the script's declarations, at the start of its block
    declare: str = ""
    #: the table and column filled, for progress reports
    table: str = ""
    column: str = ""
    #: the rows still to fill, estimated (for progress; None: unknown)
    estimate: Callable[[Any], int] | None = None
    #: rows one batch may take at most
    max_batch: int = 1_000_000
    #: what a batch should take, sized by time (None: the engine's default)
    seconds: Callable[[Any], float] | None = None


@dataclass(frozen=True)
class Step:
    """One resumable step of a plan; see the module docstring for the kinds."""

    label: str
    kind: Kind
    statements: tuple[str, ...] = ()
    #: SQL, true while the step is still to do (a check: true when it refuses);
    #: None: run it every time
    guard: str | None = None
    #: a check's refusal: SQL of its text
    message: str | None = None
    fill: Fill | None = None
    #: a ddl step that fails on rows written meanwhile: fill, then try again
    refill: bool = False
    #: a check's refusal, raised online (a ValueError subclass)
    error: type[ValueError] = ValueError
    #: a concurrent step whose statements are queries: each row they return
    #: is a statement to run (psql's ``\gexec``), as the step runs; a ddl
    #: step's one query (MariaDB), each statement under the step's lock
    #: timeout; the column is named ``ddl``, and NULL is no statement
    generated: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown step kind {self.kind!r}")
        if self.kind == "check" and (self.guard is None or self.message is None):
            raise ValueError(f"the check {self.label!r} needs a guard and a message")
        if self.kind == "fill" and self.fill is None:
            raise ValueError(f"the fill {self.label!r} needs its two bodies")
        if self.kind == "batch" and (len(self.statements) != 1 or LIMIT not in self.statements[0]):
            raise ValueError(f"the batch {self.label!r} is one statement with {LIMIT}")


@dataclass(frozen=True)
class Plan:
    """An op's steps, in order, for one database and one target."""

    #: the op's name (``add_ulid_column``), as the state table records it
    op: str
    #: what it changes, e.g. ``orders.public_id`` (schema-qualified if given)
    target: str
    steps: tuple[Step, ...]
    #: seconds a DDL statement may wait for its lock
    lock_timeout: float
    #: rows of the first batch (then sized by time, online)
    batch_size: int = 5_000
    #: seconds to sleep between two batches
    pause: float = 0.0
    #: the schema of the state table (the op's schema)
    schema: str | None = None
    notes: tuple[str, ...] = field(default=())

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)

    @property
    def checks(self) -> Sequence[Step]:
        """The refusals, in order (all before the first change)."""
        return [s for s in self.steps if s.kind == "check"]

    @property
    def digest(self) -> str:
        """A short hash of the plan's steps: a rerun of another plan is told apart."""
        text = "\n".join(
            f"{s.kind}:{s.label}:{s.guard}:{'|'.join(s.statements)}" for s in self.steps
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for step in self.steps:
            if step.label in seen:
                raise ValueError(f"two steps are labelled {step.label!r}")
            seen.add(step.label)
        changed = False
        for step in self.steps:
            if step.kind == "check" and changed:
                raise ValueError(f"the check {step.label!r} comes after a change")
            changed = changed or step.kind not in ("check", "discover")


def null_fill_step(
    *,
    table: str,
    column: str,
    table_sql: str,
    column_sql: str,
    nullable: str,
    script: str,
    declare: str,
    online: Any,
) -> Step:
    """The fill of a column's NULL rows: still to do while it may be NULL and a row is.

    ``online`` (a Backfill, or None for a plan made only for a script) gives
    the fill its Python body; ``script`` is the loop the script runs instead.
    """

    def start(connection: Any) -> Any:
        if online is None:
            raise RuntimeError("this plan was made for a script: it has no online fill")
        return online.batches()

    null_rows = f"EXISTS (SELECT 1 FROM {table_sql} WHERE {column_sql} IS NULL)"
    return Step(
        "fill",
        "fill",
        guard=f"CASE WHEN {nullable} THEN {null_rows} ELSE FALSE END",
        fill=Fill(
            start,
            script,
            declare=declare,
            table=table,
            column=column,
            estimate=None if online is None else (lambda _c: online.estimate()),
        ),
    )
