"""The key conversion's offline (``--sql``) script for PostgreSQL, run by ``psql``.

``convert_primary_key_to_ulid`` / ``restore_legacy_primary_key`` find it
through the registered :class:`~.PostgreSQL` database
(:meth:`~.._plan.database.Database.primary_key_script`).

Nothing can be reflected while the script is written, so the script does,
when it runs, what the online op does from reflection: a first ``DO``
block (``_offline_pg_plan``) finds the key and every column that references
it in ``pg_catalog`` (the same closure as the online plan), makes every
refusal of the online op before any change, and keeps the plan in a
temporary table for the blocks after it. Then, as online: the shadow
columns (each committed), the key's fill in batches (each committed), each
referencing shadow by a join, and the swap in the migration's transaction
under ``lock_timeout`` (``_offline_pg_swap``).

A shadow column carries a comment naming the conversion until the swap
gives the column its own comment back: a rerun after a kill tells its own
shadows from a user's column that way, and every phase does only what is
still missing (a fill writes only NULL shadows; the swap is one
transaction). Finished, the whole script is a no-op.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from alembic.operations import Operations
from alembic.util import CommandError

from ..._dialects import dialect_row
from ..._types import ULIDType
from .._inspect import check_identifier, safe_name
from .._offline import _MAX_BATCH
from .._plan.render_pg import comment, run_lock_sql
from .._primary_key._offline import refuse_local_zone
from .._primary_key._offline_pg_plan import Names, plan_block
from .._primary_key._offline_pg_swap import (
    fill_key_block,
    fill_referencing_block,
    prepare_block,
    swap_block,
)
from .._primary_key._state import LOCK_OP, lock_target
from .catalog import STATE

if TYPE_CHECKING:
    from .._primary_key._ops import _KeyOp

__all__ = ["postgresql_script"]

#: Tries of a DDL statement whose lock wait timed out, before the script stops.
LOCK_TRIES = 4


def postgresql_script(
    operations: Operations, op: _KeyOp, direction: Literal["ulid", "legacy"], name: str
) -> None:
    """Write the op's phases for PostgreSQL into the ``--sql`` output.

    Raises:
        alembic.util.CommandError: ``dry_run=True`` (a dry run reads the
            database), a storage other than uuid or binary, or a
            ``timezone`` other than UTC.
        ValueError: ``batch_size`` over 65,535 or a ``legacy_id`` the
            database would cut short.
    """
    context = operations.get_context()
    dialect = context.dialect
    if op.dry_run:
        raise CommandError(
            f"{name}(dry_run=True) reads the tables to describe its plan, so it needs a "
            "database: run the dry run online (alembic upgrade without --sql); nothing "
            "was written"
        )
    kind = dialect_row(dialect).kind(op.storage)
    if direction == "ulid":
        if kind not in ("uuid", "binary"):
            raise CommandError(
                f"{name} offline needs uuid or binary storage on PostgreSQL, not {op.storage!r}"
            )
        refuse_local_zone(op.timezone, name)
    if op.batch_size > _MAX_BATCH:
        raise ValueError(f"offline, batch_size is at most {_MAX_BATCH}, got {op.batch_size}")
    check_identifier(op.legacy_id, "legacy_id", dialect)
    if direction == "ulid":
        new_type = str(ULIDType(op.storage).load_dialect_impl(dialect).compile(dialect=dialect))
    else:
        new_type = ""  # the legacy column's own type, read when the script runs
    names = Names(
        op_name=name,
        direction=direction,
        table=op.table_name,
        schema=op.schema,
        legacy_id=op.legacy_id,
        from_time=op.from_time if direction == "ulid" else None,
        legacy_unique=safe_name(f"uq_{op.table_name}_{op.legacy_id}", dialect),
        new_type=new_type,
        kind=kind,
        batch_size=op.batch_size,
        lock_tries=LOCK_TRIES,
    )
    out = context.impl.static_output
    lock_ms = max(1, round(op.lock_timeout * 1000))
    with context.autocommit_block():
        out(_header(names))
        # Each block reads what committed before its statements: under a
        # REPEATABLE READ or SERIALIZABLE default a fill batch that waited
        # for a writer's row fails, and the swap's catch-up would miss rows.
        out("SET default_transaction_isolation = 'read committed';")
        # Each phase is one statement however many batches it commits: a
        # role's statement_timeout would cancel it on every rerun. Each lock
        # wait is bounded by lock_timeout instead.
        out("SET statement_timeout = 0;")
        out(f"SET lock_timeout = '{lock_ms}ms';")
        take_lock, give_back_lock = run_lock_sql(
            STATE, name, lock_target(op.table_name, op.schema), op.schema, LOCK_OP
        )
        out(take_lock)
        out(plan_block(names))
        out(prepare_block(names))
        if direction == "ulid":
            out(fill_key_block(names))
        out(fill_referencing_block(names))
    out(swap_block(names))
    out("RESET lock_timeout;")
    out("RESET default_transaction_isolation;")
    out("RESET statement_timeout;")
    out(give_back_lock)


def _header(names: Names) -> str:
    target = f"{names.schema}.{names.table}" if names.schema else names.table
    what = (
        "gives it ULID primary keys (the old values stay in "
        f"{names.legacy_id}), and every column that references it their ULIDs"
        if names.direction == "ulid"
        else f"gives it back the primary key kept in {names.legacy_id}, and every "
        "column that references it the old values"
    )
    text = f"""\
{names.op_name}({target}): this script {what}.
Run it with psql outside a transaction (not psql -1 / --single-transaction):
  psql -v ON_ERROR_STOP=1 -f script.sql
It finds the foreign keys in the catalog when it runs and stops, before any
change, on what the online op refuses. Then: the shadow columns (each
committed), the fill in batches of {names.batch_size} rows (each committed), the
referencing columns by a join, and the swap in one transaction that locks
the tables (ACCESS EXCLUSIVE) for its duration.
If a statement fails with 'canceling statement due to lock timeout', or the
script is interrupted at any point, run the whole script again: it goes on
where it stopped; run again after it finished, it does nothing."""
    return "\n".join(f"-- {comment(line)}".rstrip() for line in text.splitlines())
