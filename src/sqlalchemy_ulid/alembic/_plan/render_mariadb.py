"""A :class:`~.step.Plan` as a script for the ``mariadb`` client.

MariaDB's DDL commits on its own; the client runs in autocommit and stops at
the first error. Each step is an anonymous block (``BEGIN NOT ATOMIC ...
END``, between ``DELIMITER`` lines) that reads its guard first, so the whole
script can be run again after it finished (it does nothing) or after it was
stopped at any statement (it goes on from there):

* the run's own lock, ``GET_LOCK`` of the name an online run of the op on
  the column takes, without waiting: the script stops at once, before any
  change, while another run holds it, and holds it itself until its end;
* the checks: one block, ``IF <guard> THEN SIGNAL``, before any change;
* a ``ddl`` step: ``IF <guard> THEN EXECUTE IMMEDIATE 'SET STATEMENT
  lock_wait_timeout=... FOR <statement>'``: the timeout is the statement's
  alone, nothing is left on the session;
* ``batch`` and ``fill``: a loop, ``COMMIT`` after each batch, until a batch
  changes no row.

A ``ddl`` step whose statement is made as it runs (``generated``: the
column list of a trigger, a counter) runs the step's query and each
statement it returns, in the same frame.

The session's character set (``utf8mb4``, the online op's), ``sql_mode``
(strict, so that ``NOT NULL`` refuses a NULL rather than store empty bytes;
no ``NO_BACKSLASH_ESCAPES``, which the literals assume), ``time_zone``
(UTC), ``group_concat_max_len`` (the column lists a script builds) and
``max_statement_time`` (0: a user's or the server's limit would cancel a
check or a batch loop on a big table) are set at the start and put back at
the end.
"""

from __future__ import annotations

from .state import STATE_TABLE, StateSQL, literal, under_way
from .step import LIMIT, Plan, Step

__all__ = ["compound", "lock_wrapped", "render_mariadb", "run_lock_sql", "signal"]

#: What the script's session changes, saved in user variables and restored.
SAVED = (
    ("sql_mode", "@sqlalchemy_ulid_sql_mode"),
    ("time_zone", "@sqlalchemy_ulid_time_zone"),
    ("max_statement_time", "@sqlalchemy_ulid_statement_time"),
    ("group_concat_max_len", "@sqlalchemy_ulid_concat"),
    ("character_set_client", "@sqlalchemy_ulid_client"),
    ("character_set_results", "@sqlalchemy_ulid_results"),
    ("collation_connection", "@sqlalchemy_ulid_collation"),
)


def lit(text: str) -> str:
    """A MariaDB string literal (the script turns NO_BACKSLASH_ESCAPES off)."""
    return literal(text, backslashes=True)


def comment(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")


def compound(body: str) -> str:
    """``body`` between DELIMITER lines, with a delimiter that does not occur in it."""
    mark = "$$"
    while mark in body:
        mark += "$"
    return f"DELIMITER {mark}\nBEGIN NOT ATOMIC\n{body}END\n{mark}\nDELIMITER ;"


def signal(message: str, limit: int = 512) -> str:
    """SIGNAL ``message`` (SQL of a string), cut to ``limit`` characters.

    MariaDB keeps 512 characters of MESSAGE_TEXT: the messages name tables,
    columns and constraints, and need the room. The block declares
    ``message VARCHAR(512)``; SIGNAL takes a variable or a literal, not an
    expression.
    """
    return (
        f"SET message = LEFT({message}, {limit});\n"
        "    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = message;"
    )


def lock_wrapped(statement: str, seconds: float) -> str:
    """``statement`` waiting at most ``seconds`` (whole, 0: no wait) for its locks."""
    whole = int(seconds)
    return (
        f"SET STATEMENT lock_wait_timeout={whole}, innodb_lock_wait_timeout={max(1, whole)} "
        f"FOR {statement}"
    )


def run_lock_sql(
    state: StateSQL, op: str, target: str, schema: str | None, lock_op: str | None = None
) -> tuple[str, str]:
    """A script's first block, which takes the run's lock or stops, and its last statement.

    The lock an online run of ``op`` on ``target`` takes (``lock_op``: the
    lock's op when it is not ``op``), taken without waiting and held by the
    script's session to its end: a script stops at once, before any
    change, while another run holds it.
    """
    take, give_back = state.script_lock(lock_op or op, target, schema)
    held = lit(under_way(op, target, "Run this script again"))
    first = (
        f"-- this run's lock, held to the end: another run of {comment(op)} on "
        f"{comment(target)}, online or a script, is refused meanwhile\n"
        + compound(
            "  DECLARE message VARCHAR(512) CHARACTER SET utf8mb4;\n"
            f"  IF NOT {take} THEN\n    {signal(held)}\n  END IF;\n"
        )
    )
    return first, f"-- this run's lock given back\nDO {give_back};"


def render_mariadb(plan: Plan, state: StateSQL, state_table: str) -> str:
    """The script of ``plan``; ``state_table`` is the state table's quoted name."""

    def mark(step: str, done: bool = False) -> str:
        return state.mark_sql(state_table, plan.op, plan.target, plan.digest, step, done)

    checks = "".join(
        f"  IF ({s.guard}) THEN\n    {signal(str(s.message))}\n  END IF;\n" for s in plan.checks
    )
    take_lock, give_back_lock = run_lock_sql(state, plan.op, plan.target, plan.schema)
    lock = state.table_lock(plan.schema)
    saved = ", ".join(f"{user} = @@SESSION.{name}" for name, user in SAVED)
    restore = ", ".join(f"SESSION {name} = {user}" for name, user in SAVED)
    out = [
        f"-- {comment(plan.op)}({comment(plan.target)}, online=True), for MariaDB 10.10+: "
        "run it with the mariadb client, which stops at the first error. Each step below "
        "commits on its own and reads first whether it is still to do, so the script can be "
        "run again, whole, after an interruption (it goes on where it stopped) or after it "
        f"finished (it does nothing). The state of the run is in {STATE_TABLE}."
        + "".join(f"\n-- {comment(note)}" for note in plan.notes),
        f"SET {saved};",
        # The online op's session (the driver's): utf8mb4, whose literals mix
        # with the conversion's ASCII text, and which triggers made here keep.
        "SET NAMES utf8mb4;",
        "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION', time_zone = '+00:00', "
        "group_concat_max_len = 4294967295, max_statement_time = 0;",
        take_lock,
        f"-- {comment(plan.op)}: what the op refuses, checked before any change\n"
        + compound("  DECLARE message VARCHAR(512) CHARACTER SET utf8mb4;\n" + checks),
        "-- the state row, under the state table's lock\n"
        + "".join(
            f"{s};\n"
            for s in state.start_sql(state_table, plan.op, plan.target, plan.digest, plan.schema)
        ),
    ]
    for step in plan.steps:
        if step.kind not in ("check", "discover"):
            # Whole seconds, at least one: no retry follows a lock wait of 0 here.
            out.append(_step(step, mark(step.label), max(1.0, plan.lock_timeout), plan))
    forget, empty, drop = state.finish_sql(state_table, plan.op, plan.target)
    out.append(
        "-- done: the state row forgotten, the table dropped when no other op runs\n"
        + "".join(f"{s};\n" for s in (*lock.take, forget))
        + compound(f"  IF {empty} THEN\n    {drop};\n  END IF;\n")
        + "".join(f"\n{s};" for s in lock.give_back)
    )
    out.append(give_back_lock)
    out.append(f"SET {restore};")
    return "\n\n".join(out) + "\n"


def _step(step: Step, mark: str, seconds: float, plan: Plan) -> str:
    pause = plan.pause
    title = f"-- {comment(step.label)} ({step.kind})"
    guard = "TRUE" if step.guard is None else f"({step.guard})"
    if step.kind == "ddl" and step.generated:
        # The statement is made as the step runs (online: the same query).
        body = (
            f"    FOR r IN ({step.statements[0]}) DO\n      IF r.ddl IS NOT NULL THEN\n"
            f"        EXECUTE IMMEDIATE CONCAT({lit(lock_wrapped('', seconds))}, r.ddl);\n"
            "      END IF;\n    END FOR;\n"
        )
        return f"{title}\n" + compound(f"  IF {guard} THEN\n{body}    {mark};\n  END IF;\n")
    if step.kind in ("ddl", "concurrent"):
        body = "".join(
            f"    EXECUTE IMMEDIATE {lit(lock_wrapped(s, seconds))};\n" for s in step.statements
        )
        return f"{title}\n" + compound(f"  IF {guard} THEN\n{body}    {mark};\n  END IF;\n")
    sleep = f"\n        DO SLEEP({pause:g});" if pause else ""
    if step.kind == "batch":
        statement = lit(step.statements[0])
        inner = (
            "    DECLARE changed BIGINT DEFAULT 1;\n"
            "    REPEAT\n"
            f"      EXECUTE IMMEDIATE REPLACE({statement}, {lit(LIMIT)}, '{plan.batch_size}');\n"
            "      SET changed = ROW_COUNT();\n"
            f"      COMMIT;{sleep}\n"
            "    UNTIL changed = 0 END REPEAT;\n"
        )
    else:
        assert step.fill is not None
        inner = step.fill.declare + step.fill.script + "\n"
    return f"{title}\n" + compound(
        f"  IF {guard} THEN\n  BEGIN\n{inner}  END;\n    {mark};\n  END IF;\n"
    )


# -- the checks of a plan as one block (storage conversions) ---------------------------------


def checks_block(checks: list[Step]) -> str:
    """``IF <guard> THEN SIGNAL <message>`` for each check, in one block, before any change.

    The online runner asks the same guards and messages (``run.run_checks``).
    """
    body = "".join(
        f"  IF ({s.guard}) THEN\n    {signal(str(s.message))}\n  END IF;\n" for s in checks
    )
    return compound("  DECLARE message VARCHAR(512) CHARACTER SET utf8mb4;\n" + body)
