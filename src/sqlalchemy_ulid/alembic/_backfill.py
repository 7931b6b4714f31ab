"""The batched backfill of ``add_ulid_column(..., online=True)``.

The rows that have no id yet are read in primary-key order, ``batch_size``
at a time (``WHERE key > last AND col IS NULL ORDER BY key LIMIT n``). Each
batch's ids are computed in Python from the rows' times, exactly as the
one-transaction op computes them, and written into the batch's key range by
one ``UPDATE`` that carries them and commits on its own (the database's
``fill_batch``: two arrays on PostgreSQL, a derived table of rows on
MariaDB). A writer waits at most for the rows of one batch, for one
statement.

Killed and rerun, the backfill starts again from the first row without an
id: finished ranges are not NULL, so they are skipped, never rewritten.
The engine's batch loop (``_plan/batches.py``) drives it, a batch at a time,
and tries a batch again after a deadlock.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta, timezone, tzinfo
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .._checks import check_seconds
from .._dialects import dialect_row
from ._inspect import quote
from ._plan.database import FillRows, database_for

__all__ = [
    "MAX_BATCH_SIZE",
    "Backfill",
    "BackfillProgress",
    "check_batch_options",
    "error_code",
    "exact_key_type",
]

#: The largest ``batch_size``: a batch is held in memory and sent as one
#: statement, and a ``LIMIT`` past the database's integer range would fail
#: only after the column was added.
MAX_BATCH_SIZE = 1_000_000


def check_batch_options(
    batch_size: int | None,
    pause: float | timedelta,
    progress: Callable[[BackfillProgress], object] | None,
    online: bool,
) -> tuple[int, float, Callable[[BackfillProgress], object] | None]:
    """Check an op's ``batch_size=``, ``pause=`` and ``progress=`` when it is built.

    Returns them with the defaults filled in (5,000 rows a batch online,
    10,000 otherwise; ``pause`` in seconds).

    Raises:
        ValueError: ``batch_size`` is not an int from 1 to ``MAX_BATCH_SIZE``,
            or ``pause`` is negative or not finite.
        TypeError: ``progress`` is not callable.

    Example:
        >>> check_batch_options(None, timedelta(milliseconds=10), None, online=True)
        (5000, 0.01, None)
    """
    seconds = check_seconds(
        "pause", pause.total_seconds() if isinstance(pause, timedelta) else pause, zero=True
    )
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable, not {type(progress).__name__}")
    if batch_size is None:
        batch_size = 5_000 if online else 10_000
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, int)
        or not 1 <= batch_size <= MAX_BATCH_SIZE
    ):
        raise ValueError(
            f"batch_size must be an int from 1 to {MAX_BATCH_SIZE:,}, got {batch_size!r}"
        )
    return batch_size, seconds, progress


@dataclass(frozen=True)
class BackfillProgress:
    """How far the backfill of ``add_ulid_column(..., online=True)`` is.

    Passed to the ``progress=`` callback after every batch, and logged on
    Alembic's logger at most every five seconds.

    Example:
        >>> p = BackfillProgress("orders", "public_id", 5000, 20000, 2500.0, 6.0)
        >>> print(p)
        orders.public_id: 5000 of ~20000 rows (25%), 2500 rows/s, ETA 6s
    """

    table: str
    column: str
    #: rows given an id so far, by this run
    rows_done: int
    #: rows without an id when the run began (the planner's estimate)
    rows_total: int
    #: rows per second so far
    rate: float
    #: seconds left at that rate (None: not known yet)
    eta: float | None

    def __str__(self) -> str:
        share = (
            f" ({min(100, 100 * self.rows_done // self.rows_total)}%)" if self.rows_total else ""
        )
        eta = "?" if self.eta is None else f"{self.eta:.0f}s"
        return (
            f"{self.table}.{self.column}: {self.rows_done} of ~{self.rows_total} rows{share}, "
            f"{self.rate:.0f} rows/s, ETA {eta}"
        )


@dataclass
class Backfill:
    """Fill ``column`` of ``target`` batch by batch; see the module docstring."""

    connection: Connection
    target: sa.Table
    key: str
    column: str
    #: a row's time -> its Unix milliseconds (the op's strict conversion)
    millis: Callable[[Any], int]
    time_column: str
    batch_size: int
    #: the op's generator of ids on a given clock (ULIDs, or UUIDv7s)
    make_ids: Callable[[Callable[[], int]], Callable[[], Any]]
    #: why the key cannot be walked (refused before any change), or None
    key_refusal: str | None = None

    def batches(self) -> Callable[[int], int]:
        """A run of the fill, a batch at a time: ``batch(limit)`` -> rows it took (0: done)."""
        last: list[Any] = [None]
        if self.key_refusal is not None:
            raise ValueError(self.key_refusal)

        def batch(limit: int) -> int:
            rows = self._next_batch(last[0], limit)
            if not rows:
                return 0
            if last[0] is not None and rows[0][0] == last[0]:
                # key > last found last again: the key does not compare as it reads.
                raise ValueError(
                    f"the online backfill of {self.target.name}.{self.column} read the row "
                    f"with {self.key} = {last[0]!r} twice: its key does not compare as it "
                    "reads back, so the walk in key order cannot go on. Nothing was "
                    "written to that row; run the op without online=True"
                )
            filled = self._fill(rows)
            last[0] = rows[-1][0]
            # Rows filled by someone else meanwhile still count as a batch taken.
            return filled or len(rows)

        return batch

    def estimate(self) -> int:
        """The rows still without an id, as the planner estimates them (0: unknown)."""
        return self._estimate()

    def missing(self) -> int:
        """The rows without an id, counted."""
        column = self.target.c[self.column]
        query = sa.select(sa.func.count()).select_from(self.target).where(column.is_(None))
        return int(self.connection.scalar(query) or 0)

    def check_before_changes(self, zone: tzinfo) -> None:
        """Refuse, before any DDL, a key the walk cannot use, then undatable times."""
        if self.key_refusal is not None:
            raise ValueError(
                f"{self.key_refusal}. Nothing was changed; run the op without online=True"
            )
        self.check_times(zone)

    def check_times(self, zone: tzinfo) -> None:
        """Refuse, before any DDL, a NULL or undatable time in a row without an id.

        A fixed offset keeps the order of times, so the earliest and latest
        decide; a zone with DST changes is checked row by row (a gap or a
        fold), in one streaming read.
        """
        times = self.target.c[self.time_column]
        todo = sa.select(times).select_from(self.target)
        if self.column in {c["name"] for c in _columns(self.connection, self.target)}:
            todo = todo.where(self.target.c[self.column].is_(None))
        nulls = self.connection.scalar(
            sa.select(sa.func.count()).select_from(todo.where(times.is_(None)).subquery())
        )
        if nulls:
            raise ValueError(
                f"{self.target.name}.{self.time_column} is NULL in {nulls} rows: "
                "fill them before deriving ULIDs from it"
            )
        if isinstance(zone, timezone):
            ends = todo.subquery()
            low, high = self.connection.execute(
                sa.select(
                    sa.func.min(ends.c[self.time_column]), sa.func.max(ends.c[self.time_column])
                )
            ).one()
            for value in (low, high):
                if value is not None:
                    self.millis(value)
            return
        result = self.connection.execute(
            todo, execution_options={"stream_results": True, "yield_per": self.batch_size}
        )
        with result:
            for (value,) in result:
                self.millis(value)

    def _estimate(self) -> int:
        paging = dialect_row(self.connection.dialect).paging
        query = sa.select(self.target.c[self.key]).where(self.target.c[self.column].is_(None))
        if paging.explain is None or paging.estimate is None:
            return 0
        sql = str(query.compile(self.connection, compile_kwargs={"literal_binds": True}))
        try:
            return max(
                0, paging.estimate(self.connection.exec_driver_sql(paging.explain + sql).first())
            )
        except (sa.exc.SQLAlchemyError, KeyError, ValueError, TypeError):
            return 0  # only for the progress report

    def _next_batch(self, last: Any, limit: int | None = None) -> list[Any]:
        key = self.target.c[self.key]
        query = (
            sa.select(key, self.target.c[self.time_column])
            .where(self.target.c[self.column].is_(None))
            .order_by(key)
            .limit(self.batch_size if limit is None else limit)
        )
        if last is not None:
            query = query.where(key > last)
        return list(self.connection.execute(query).all())

    def _fill(self, rows: list[Any]) -> int:
        """Give one batch its ids: one statement, bounded by the batch's keys."""
        # Ties in one millisecond are numbered in key order (the order the
        # rows were read in), as the generator numbers ids made live within
        # one millisecond: a stable sort by the millisecond keeps it.
        millis = [self._row_millis(row[1], row[0]) for row in rows]
        now = [0]
        generate = self.make_ids(lambda: now[0])
        ids: list[Any] = [None] * len(rows)
        for i in sorted(range(len(rows)), key=millis.__getitem__):
            now[0] = millis[i]
            ids[i] = generate()
        dialect = self.connection.dialect
        id_type = self.target.c[self.column].type
        bind = id_type.bind_processor(dialect)
        batch = FillRows(
            table=quote(dialect, self.target.name, self.target.schema),
            key=quote(dialect, self.key),
            column=quote(dialect, self.column),
            key_type=self.target.c[self.key].type,
            id_type=id_type,
            keys=[row[0] for row in rows],
            ids=ids if bind is None else [bind(i) for i in ids],
            time=quote(dialect, self.time_column),
            time_type=self.target.c[self.time_column].type,
            times=[row[1] for row in rows],
        )
        return database_for(dialect).fill_batch(self.connection, batch)

    def _row_millis(self, value: Any, key: Any) -> int:
        """The row's time as Unix milliseconds; a clear error for a row written meanwhile.

        The times were checked before the first DDL; a row written since
        (NULL or out-of-range time) stops the backfill here, named.
        """
        try:
            if value is None:
                raise ValueError("it is NULL")
            return self.millis(value)
        except (ValueError, TypeError) as exc:
            raise ValueError(
                f"{self.target.name}.{self.time_column} of the row with "
                f"{self.key} = {key!r}, written while the online backfill of "
                f"{self.target.name}.{self.column} ran, cannot date an id: {exc}. "
                f"Give the row a valid {self.time_column} (or delete it) and rerun "
                "the migration: it carries on from where it stopped"
            ) from None


def exact_key_type(key_type: Any) -> Any:
    """``key_type`` reading its values exactly as stored, to find their rows again.

    A reflected MariaDB ``DOUBLE`` reads as a ``Decimal`` rounded to 10
    places: ``1e-11`` and ``2e-11`` would both read as ``0``.
    """
    if isinstance(key_type, sa.Float) and key_type.asdecimal:
        key_type = copy.copy(key_type)
        key_type.asdecimal = False
    return key_type


def error_code(error: sa.exc.DBAPIError) -> object:
    """The error number (MariaDB) or SQLSTATE (PostgreSQL) of a driver error.

    The number first: PyMySQL 1.1+ gives its errors the server's SQLSTATE
    too, a class shared by many errors (``HY000`` for a lock wait timeout),
    and a check by SQLSTATE missed every MariaDB number it looked for.
    """
    orig = error.orig
    args: tuple[Any, ...] = tuple(getattr(orig, "args", None) or ())
    if args and isinstance(args[0], int):
        return args[0]
    return getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)


def _columns(connection: Connection, table: sa.Table) -> list[Any]:
    return list(sa.inspect(connection).get_columns(table.name, schema=table.schema))
