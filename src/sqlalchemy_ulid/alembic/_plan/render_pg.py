r"""A :class:`~.step.Plan` as a script for ``psql``.

The script runs outside a transaction, as psql runs a file, and sets
``ON_ERROR_STOP`` itself. Each step reads its guard first, so the whole
script can be run again after it finished (it does nothing) or after it
was stopped at any statement (it goes on from there):

* ``SET statement_timeout = 0`` first and ``RESET statement_timeout`` last:
  a role's or database's timeout would cancel a whole-table check or a
  batch loop (one ``DO`` statement);
* the run's own lock, a session advisory lock on the key an online run of
  the op on the column takes: the script stops at once, before any change,
  while another run holds it, and holds it itself until its end;
* the checks: one ``DO`` block, ``IF <guard> THEN RAISE EXCEPTION``, before
  any change;
* a ``ddl`` step: ``BEGIN; SET LOCAL lock_timeout; DO (IF <guard> THEN
  <statements>; <state row>) ; COMMIT;``: the timeout lives and dies with
  the step's transaction;
* a ``concurrent`` step: ``SELECT <statement> WHERE <guard> \gexec``, which
  runs it outside a transaction;
* ``batch`` and ``fill``: a ``DO`` block that loops, ``COMMIT`` after each
  batch, until a batch changes no row.
"""

from __future__ import annotations

from .state import STATE_TABLE, StateSQL, literal, under_way
from .step import LIMIT, Plan, Step

__all__ = ["render_pg", "run_lock_sql"]


def dollar_quoted(tag: str, body: str) -> str:
    """``body`` as a dollar-quoted string whose tag does not occur in it."""
    while f"${tag}$" in body:
        tag += "_"
    return f"${tag}${body}${tag}$"


def comment(text: str) -> str:
    """Text for a ``--`` comment line: a line break in a name must not end it."""
    return text.replace("\r", " ").replace("\n", " ")


def _do(body: str, declare: str = "") -> str:
    head = f"DECLARE\n{declare}" if declare else ""
    return f"DO {dollar_quoted('ulid', f'{chr(10)}{head}BEGIN{chr(10)}{body}END{chr(10)}')};"


#: The warning of a script whose session did not hold its lock at the end.
_LOST = literal(
    "this session did not hold the run's lock at the end: was the script run through a "
    "connection pooler? Run offline scripts with psql on a direct connection"
)


def _checks(plan: Plan) -> str:
    lines = []
    for step in plan.checks:
        lines.append(
            f"  IF ({step.guard}) THEN\n    RAISE EXCEPTION '%', {step.message};\n  END IF;\n"
        )
    return f"-- {comment(plan.op)}: what the op refuses, checked before any change\n" + _do(
        "".join(lines)
    )


def run_lock_sql(
    state: StateSQL, op: str, target: str, schema: str | None, lock_op: str | None = None
) -> tuple[str, str]:
    """A script's first block, which takes the run's lock or stops, and its last one.

    The lock an online run of ``op`` on ``target`` takes (``lock_op``: the
    lock's op when it is not ``op``), as a session lock taken without
    waiting and held by psql's session to the script's end.
    """
    take, give_back = state.script_lock(lock_op or op, target, schema)
    held = literal(under_way(op, target, "Run this script again"))
    first = (
        f"-- this run's lock, held to the end: another run of {comment(op)} on "
        f"{comment(target)}, online or a script, is refused meanwhile\n"
        + _do(f"  IF NOT {take} THEN\n    RAISE EXCEPTION '%', {held};\n  END IF;\n")
    )
    last = "-- this run's lock given back\n" + _do(
        f"  IF NOT {give_back} THEN\n    RAISE WARNING '%', {_LOST};\n  END IF;\n"
    )
    return first, last


def render_pg(plan: Plan, state: StateSQL, state_table: str) -> str:
    """The script of ``plan``; ``state_table`` is the state table's quoted name."""

    def mark(step: str, done: bool = False) -> str:
        return state.mark_sql(state_table, plan.op, plan.target, plan.digest, step, done)

    ms = max(1, round(plan.lock_timeout * 1000))
    take_lock, give_back_lock = run_lock_sql(state, plan.op, plan.target, plan.schema)
    lock = state.table_lock(plan.schema)
    out = [
        f"-- {comment(plan.op)}({comment(plan.target)}, online=True): each step below "
        "commits on its own and reads first whether it is still to do, so the script can "
        "be run again, whole, after an interruption (it goes on where it stopped) or "
        f"after it finished (it does nothing). The state of the run is in {STATE_TABLE}.",
        # Without it psql would go on past a refusal.
        "\\set ON_ERROR_STOP on",
        "-- no statement timeout of the role's or the database's: it would cancel a check "
        "or a batch loop on a big table (each lock wait stays bounded by lock_timeout)\n"
        "SET statement_timeout = 0;",
        take_lock,
        _checks(plan),
        "-- the state row, under the state table's lock\n"
        + "".join(
            f"{s};\n"
            for s in state.start_sql(state_table, plan.op, plan.target, plan.digest, plan.schema)
        ),
    ]
    for step in plan.steps:
        if step.kind not in ("check", "discover"):
            out.append(_step(step, mark(step.label), ms, plan))
    forget, empty, drop = state.finish_sql(state_table, plan.op, plan.target)
    out.append(
        "-- done: the state row forgotten, the table dropped when no other op runs\n"
        + "".join(f"{s};\n" for s in (*lock.take, forget))
        + _do(f"  IF {empty} THEN\n    {drop};\n  END IF;\n")
        + "".join(f"\n{s};" for s in lock.give_back)
    )
    out.append(give_back_lock + "\nRESET statement_timeout;")
    return "\n\n".join(out) + "\n"


def _step(step: Step, mark: str, ms: int, plan: Plan) -> str:
    pause = plan.pause
    title = f"-- {comment(step.label)} ({step.kind})"
    guard = "TRUE" if step.guard is None else f"({step.guard})"
    if step.kind == "ddl":
        body = "".join(f"    {s};\n" for s in step.statements)
        block = _do(f"  IF {guard} THEN\n{body}    {mark};\n  END IF;\n")
        return f"{title}\nBEGIN;\nSET LOCAL lock_timeout = '{ms}ms';\n{block}\nCOMMIT;"
    if step.kind == "concurrent" and step.generated:
        runs = "\n".join(
            f"SELECT q.s FROM ({s}) AS q(s) WHERE {guard} \\gexec" for s in step.statements
        )
        return f"{title}\n{runs}\n{mark};"
    if step.kind == "concurrent":
        runs = "\n".join(f"SELECT {literal(s)} WHERE {guard} \\gexec" for s in step.statements)
        return f"{title}\n{runs}\n{mark};"
    sleep = f"\n      PERFORM pg_sleep({pause:g});" if pause else ""
    if step.kind == "batch":
        statement = step.statements[0]
        body = (
            "    LOOP\n"
            f"      EXECUTE replace({dollar_quoted('batch', statement)}, "
            f"{literal(LIMIT)}, size::text);\n"
            "      GET DIAGNOSTICS changed = ROW_COUNT;\n"
            "      EXIT WHEN changed = 0;\n"
            f"      COMMIT;{sleep}\n"
            "    END LOOP;\n"
        )
        # Offline the batches are the plan's size (online they follow the clock).
        declare = f"  changed bigint;\n  size bigint := {plan.batch_size};\n"
    else:
        assert step.fill is not None
        body, declare = step.fill.script + "\n", step.fill.declare
    return f"{title}\n" + _do(f"  IF {guard} THEN\n{body}    {mark};\n  END IF;\n", declare)
