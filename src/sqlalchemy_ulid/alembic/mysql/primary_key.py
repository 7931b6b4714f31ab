"""The key conversion's offline (``--sql``) script for MariaDB/MySQL.

``convert_primary_key_to_ulid`` / ``restore_legacy_primary_key`` find it
through the registered :class:`~.MariaDB` database
(:meth:`~.._plan.database.Database.primary_key_script`).

Nothing can be reflected while the script is written, so the script does,
when the ``mariadb`` client runs it: its first block (``_offline_mariadb_plan``)
finds the key and every column that references it in ``information_schema``,
makes every refusal of the online op (``SIGNAL``, naming what it found) and
stores the steps, the DDL and DML built from those names, in
``ulid_key_conversions_offline``; its second block (``_offline_mariadb_run``)
runs them in order, recording each one. The steps are the online op's phases
(``_offline_mariadb_steps``). Run again after a kill at any point, the script
goes on with the stored steps; run after success, it does nothing.

What the script cannot do the way the online op does is refused here, before
anything is written: a dry run, a storage that is not 16 bytes, naive times in
another zone than UTC (the database would place them by its own rules).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from alembic.operations import Operations
from alembic.util import CommandError

from ..._dialects import dialect_row
from .._inspect import check_identifier
from .._offline_mariadb import _SAVED
from .._plan.render_mariadb import comment, run_lock_sql
from .._primary_key._offline import refuse_local_zone
from .._primary_key._offline_mariadb_plan import plan_block
from .._primary_key._offline_mariadb_run import run_block
from .._primary_key._offline_mariadb_sql import STEPS_TABLE, Names
from .._primary_key._state import LOCK_OP, lock_target
from .catalog import STATE

if TYPE_CHECKING:
    from .._primary_key._ops import _KeyOp

__all__ = ["mariadb_script"]

#: What the script's session changes, saved in user variables and restored.
_ALSO_SAVED = (*_SAVED, ("tx_isolation", "@sqlalchemy_ulid_isolation"))
#: Rows one batch may date: rows of one millisecond are numbered in 16 bits.
_MAX_BATCH = 65_535


def _refuse_unsafe(op: _KeyOp, direction: str, name: str, storage_kind: str) -> None:
    if op.dry_run:
        raise CommandError(
            f"{name}(dry_run=True) in offline (--sql) mode: nothing can be read to describe "
            "the plan while the script is written. Run the dry run online; the script "
            "prints its plan when it runs"
        )
    if direction == "ulid" and storage_kind != "binary":
        raise CommandError(
            f"{name} offline on MariaDB needs binary storage (BINARY(16)), not {op.storage!r}"
        )
    refuse_local_zone(op.timezone, name)
    if op.fold is not None:
        raise CommandError(
            f"{name} offline reads naive times as UTC, where fold= has no meaning; "
            "leave it out, or run this migration online"
        )
    if op.batch_size > _MAX_BATCH:
        raise ValueError(f"offline, batch_size is at most {_MAX_BATCH}, got {op.batch_size}")


def mariadb_script(
    operations: Operations, op: _KeyOp, direction: Literal["ulid", "legacy"], name: str
) -> None:
    """Write the op's phases for MariaDB into the ``--sql`` output."""
    context = operations.get_context()
    dialect = context.dialect
    _refuse_unsafe(op, direction, name, dialect_row(dialect).kind(op.storage))
    check_identifier(op.legacy_id, "legacy_id", dialect)
    names = Names.of(dialect, op, direction, name)
    locks = dialect_row(dialect).locks
    assert locks is not None
    out = context.impl.static_output
    label = comment(op.table_name)
    with context.autocommit_block():
        out(
            f"-- {name}({label}), for MariaDB 10.10+. Run this script with the mariadb client\n"
            "-- (mariadb --batch < script.sql), which stops at the first error. Block 1 checks\n"
            "-- the tables and stores the plan; block 2 runs it step by step (each statement\n"
            "-- commits on its own). If a statement fails (a lock wait timed out, the client\n"
            "-- or its session was killed), run the whole script again: it goes on from the\n"
            f"-- first step not done ({STEPS_TABLE}); after success it does nothing."
        )
        saved = ", ".join(f"{user} = @@SESSION.{setting}" for setting, user in _ALSO_SAVED)
        out(f"SET {saved};")
        out(
            "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION', "
            "time_zone = '+00:00', max_statement_time = 0;"
        )
        # READ COMMITTED: the statements that read the tables to fill them
        # (INSERT ... SELECT, CREATE ... SELECT) read without locking their rows.
        out("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED;")
        for statement in locks.set(max(1.0, op.lock_timeout), False):
            out(f"{statement};")
        take_lock, give_back_lock = run_lock_sql(
            STATE, name, lock_target(op.table_name, op.schema), op.schema, LOCK_OP
        )
        out(take_lock)
        out(plan_block(names))
        out(run_block(names))
        out(give_back_lock)
        restore = ", ".join(f"SESSION {setting} = {user}" for setting, user in _ALSO_SAVED)
        out(f"SET {restore};")
