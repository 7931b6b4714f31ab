"""A differential fuzzer of ``paginate()``: generated statements against the unpaged query.

A seeded generator builds statements from a small grammar over two tables
(orders with nullable and NOT NULL columns, customers they may or may not
join): plain keys, expression keys (``coalesce``, ``CASE``, ``lower``,
arithmetic), inner and outer joins at the top and inside subqueries and
CTEs, unions whose branches differ in nullability, GROUP BY with aggregate
keys, window keys, DISTINCT (and DISTINCT ON on PostgreSQL), lossy keys
(``Numeric(asdecimal=False)``), interval keys, ORM entity keys from an
outer-joined entity; one to three sort keys before the paging column, in
random directions and NULL placements. The data has ties, NULLs and
duplicates.

For each statement :func:`check` walks every page forward and then backward at
a random page size, passing the cursors on as text (as from a URL) or, for
a bare id, as the ULID itself, and compares the rows with the unpaged
statement (the oracle: the database's own order). The only other accepted
outcome is a refusal: a ``ValueError`` raised by the first call before any
SQL ran (an engine listener counts the statements).

Each case is named by its ``shape`` (the feature it exercises) and
reproduces from ``(seed, index)``: :func:`case` builds the same statement
and page size from them, on the data :func:`rows` makes from the seed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from _paging_fuzz_data import Schema, tables
from _paging_fuzz_grammar import Case, case
from sqlalchemy_ulid import ULID, paginate

__all__ = ["Case", "Report", "Schema", "case", "check", "fresh_seed", "tables"]

#: what a case can end as; everything but "ok" and "refused" is a failure
FAILURES = ("crash", "late-refusal", "endless", "lost", "repeated", "extra", "misordered")


# -- walking a case ---------------------------------------------------------------


@dataclass
class Outcome:
    """How a case ended: "ok", "refused" or one of FAILURES, and what was seen."""

    kind: str
    detail: str = ""
    direction: str = ""


@dataclass
class _Counter:
    statements: int = 0

    def __call__(self, *args: Any) -> None:
        self.statements += 1


class _Failed(Exception):
    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome


def _cursor(value: Any, as_text: bool) -> Any:
    if isinstance(value, str) and not as_text and len(value) == 26:
        with contextlib.suppress(ValueError):
            return ULID(value)  # a bare id, handed back as the ULID
    return str(value)


def _compare(got: list[Any], want: list[Any], direction: str) -> Outcome | None:
    if got == want:
        return None
    have, need = Counter(got), Counter(want)
    lost = need - have
    repeated = [k for k, v in have.items() if v > 1]
    extra = have - need
    detail = f"{len(want)} rows expected, {len(got)} returned"
    if lost:
        return Outcome("lost", f"{detail}; lost {sorted(map(str, lost))[:6]}", direction)
    if repeated:
        return Outcome(
            "repeated", f"{detail}; repeated {sorted(map(str, repeated))[:6]}", direction
        )
    if extra:
        return Outcome(
            "extra", f"{detail}; not in the oracle {sorted(map(str, extra))[:6]}", direction
        )
    return Outcome("misordered", detail, direction)


def _call(counter: _Counter, first: bool, direction: str, fetch: Callable[[], Any]) -> Any:
    before = counter.statements
    try:
        page = fetch()
        _ = page.cursors  # made lazily: a failure there is the call's too
        return page
    except ValueError as exc:
        if first and counter.statements == before:
            raise
        ran = counter.statements - before
        raise _Failed(
            Outcome("late-refusal", f"{type(exc).__name__}: {exc} (after {ran} SQL)", direction)
        ) from exc
    except Exception as exc:  # a crash after SQL is exactly what the fuzzer is after
        raise _Failed(Outcome("crash", f"{type(exc).__name__}: {exc}"[:400], direction)) from exc


#: numbers no row holds, as a forged cursor may carry them
_FORGED = [["d", "NaN"], ["d", "Infinity"], ["d", "-Infinity"], ["f", "inf"], ["f", "nan"],
           ["d", "9" * 40], ["d", "0." + "1" * 40], ["d", "1E+400"], ["i", "9" * 30]]  # fmt: skip


def _forgeries(cursor: str) -> Iterator[str]:
    """The cursor with each of its numbers replaced by one that no row can hold."""
    from sqlalchemy_ulid._paging._cursor import _CHECK, _FINGERPRINT, _b64, _check

    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    head = raw[: 1 + _FINGERPRINT]
    typed = json.loads(raw[1 + _FINGERPRINT + _CHECK :])
    for index, (tag, _) in enumerate(typed[:-1]):
        if tag not in ("i", "f", "d"):
            continue
        for forged in _FORGED:
            body = json.dumps([*typed[:index], forged, *typed[index + 1 :]]).encode()
            yield _b64(head + _check(head, body) + body)


def _forge(the: Case, session: Any, counter: _Counter, cursor: str) -> Outcome | None:
    """Forged numbers in a real cursor: a page, or a refusal before any SQL."""
    stmt = the.statement
    for forged in _forgeries(cursor):
        for way in ("after", "before"):
            try:
                _call(
                    counter,
                    True,
                    f"forged {way}",
                    lambda f=forged, w=way: paginate(
                        session, stmt, the.column, limit=the.size, **{w: f}
                    ),
                )
            except _Failed as failed:
                failed.outcome.detail += f" (cursor {forged})"
                return failed.outcome
            except ValueError:
                pass  # refused before any SQL
    return None


def _walk(the: Case, session: Any, counter: _Counter, oracle: list[Any]) -> Outcome:
    stmt = the.statement
    got: list[Any] = []
    cursor = None
    last = None
    for step in range(len(oracle) + 3):
        page = _call(
            counter,
            step == 0,
            "forward",
            lambda c=cursor: paginate(session, stmt, the.column, after=c, limit=the.size),
        )
        got += [the.ident(item) for item in page.items]
        if page.items:
            last = page.cursors[-1]
        if page.next_cursor is None:
            break
        cursor = _cursor(page.next_cursor, the.as_text)
    else:
        return Outcome("endless", f"{len(got)} rows in {len(oracle) + 3} pages", "forward")
    wrong = _compare(got, oracle, "forward")
    if wrong is not None or last is None:
        return wrong or Outcome("ok")
    if len(the.keys) > 1 and isinstance(last, str):
        forged = _forge(the, session, counter, last)
        if forged is not None:
            return forged
    # Backward from the last row's cursor: every row before it.
    chunks: list[list[Any]] = []
    cursor = _cursor(last, the.as_text)
    for _ in range(len(oracle) + 3):
        page = _call(
            counter,
            False,
            "backward",
            lambda c=cursor: paginate(session, stmt, the.column, before=c, limit=the.size),
        )
        chunks.append([the.ident(item) for item in page.items])
        if page.prev_cursor is None:
            break
        cursor = _cursor(page.prev_cursor, the.as_text)
    else:
        return Outcome("endless", f"{len(oracle) + 3} pages", "backward")
    back = [row for chunk in reversed(chunks) for row in chunk]
    return _compare(back, oracle[:-1], "backward") or Outcome("ok")


def check(engine: Engine, the: Case) -> Outcome:
    """Walk ``the`` case forward and backward; compare with the unpaged statement."""
    counter = _Counter()
    sa.event.listen(engine, "before_cursor_execute", counter)
    try:
        with contextlib.ExitStack() as stack:
            if the.orm:
                session: Any = stack.enter_context(Session(engine))
            else:
                session = stack.enter_context(engine.connect())
            scalar = (
                len(the.select.column_descriptions) == 1
                if the.orm
                else len(the.select.selected_columns) == 1
            )
            result = session.execute(the.oracle)
            if the.shape == "eager-collection":  # (SQLAlchemy demands unique() here)
                result = result.unique()
            found = result.scalars().all() if scalar else result.all()
            # Rows whose paging column is NULL are never paged (documented).
            oracle = [i for i in map(the.ident, found) if i is not None]
            try:
                return _walk(the, session, counter, oracle)
            except _Failed as failed:
                return failed.outcome
            except ValueError as exc:  # the first call, before any SQL
                return Outcome("refused", f"{type(exc).__name__}: {exc}")
    finally:
        sa.event.remove(engine, "before_cursor_execute", counter)


def sql_of(engine: Engine, stmt: sa.Select[Any]) -> str:
    """The statement's SQL on ``engine``, values inlined where they can be."""
    try:
        return str(stmt.compile(engine, compile_kwargs={"literal_binds": True}))
    except Exception:
        return str(stmt.compile(engine))


@dataclass
class Report:
    """Counts per shape and outcome, and a reproduction of each failure."""

    backend: str
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def add(self, engine: Engine, seed: str, index: int, the: Case, outcome: Outcome) -> None:
        self.counts[the.shape, outcome.kind] += 1
        if outcome.kind in FAILURES:
            self.failures.append(
                f"--- {self.backend} seed={seed!r} case={index} shape={the.shape} "
                f"size={the.size} {'Session' if the.orm else 'Connection'}: "
                f"{outcome.kind} {outcome.direction}: {outcome.detail}\n"
                f"    rerun: SQLALCHEMY_ULID_FUZZ_SEED={seed} (case {index})\n"
                f"    {sql_of(engine, the.statement)}"
            )

    def table(self) -> str:
        shapes = sorted({shape for shape, _ in self.counts})
        kinds = ["ok", "refused", *FAILURES]
        lines = [f"{self.backend}: " + " ".join(f"{k:>12}" for k in ["shape", *kinds])]
        for shape in shapes:
            cells = [f"{self.counts[shape, k]:>12}" for k in kinds]
            lines.append(f"{self.backend}: {shape:>12} " + " ".join(cells))
        return "\n".join(lines)


def fresh_seed() -> str:
    return f"{uuid.uuid4().int % 10**8:08d}"
