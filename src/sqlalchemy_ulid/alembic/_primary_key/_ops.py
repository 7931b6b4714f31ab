"""The Alembic ops that move a primary key, and every foreign key to it, to ULIDs.

``op.convert_primary_key_to_ulid`` and its reverse
``op.restore_legacy_primary_key``. The plan (reflection, refusals, dry-run
text, the stored state) is in ``_plan``; the phases in ``_phases``.
Importing this module registers both ops on Alembic's ``Operations``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from datetime import timedelta, tzinfo
from datetime import timezone as _timezone
from typing import Literal

import sqlalchemy as sa
from alembic.operations import MigrateOperation, Operations
from alembic.util import CommandError
from sqlalchemy.engine import Connection

from ..._types import Storage, _check_storage
from .._catalog import catalog_for
from .._inspect import plain_session, safe_name, strict_mode, unique_on
from .._invoke import invoke
from .._locks import DEFAULT_LOCK_TIMEOUT, check_lock_timeout
from .._online import phases_block
from .._plan.database import Database, UnsupportedDatabase, database_for
from .._plan.run import run_lock, unbounded
from .._proxy import DIRECT_CONNECTION, behind_a_proxy
from ._fill import add_shadows, fill_referencing, staged_key
from ._offline import write_offline
from ._phases import swap
from ._plan import ConversionRefused, Plan, build_plan, describe
from ._state import LOCK_OP, load_state, lock_target, mark_done, save_state

__all__ = ["ConvertPrimaryKeyToULIDOp", "RestoreLegacyPrimaryKeyOp"]

#: Alembic's own logger: its command line shows INFO lines from it.
log = logging.getLogger("alembic.runtime.migration")


class _KeyOp(MigrateOperation):
    def __init__(
        self,
        table_name: str,
        *,
        from_time: str | None = None,
        legacy_id: str = "legacy_id",
        storage: Storage = "auto",
        timezone: tzinfo | None = None,
        fold: int | None = None,
        batch_size: int = 10_000,
        schema: str | None = None,
        dry_run: bool = False,
        lock_timeout: float | timedelta | None = None,
    ) -> None:
        _check_storage(storage)
        if fold not in (None, 0, 1):
            raise ValueError(f"fold must be None, 0 or 1, got {fold!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if not isinstance(legacy_id, str) or not legacy_id.strip():
            raise ValueError(f"legacy_id must name a column, got {legacy_id!r}")
        if timezone is not None and not isinstance(timezone, tzinfo):
            raise TypeError(f"timezone must be a datetime.tzinfo, not {type(timezone).__name__}")
        self.table_name = table_name
        self.from_time = from_time
        self.legacy_id = legacy_id
        self.storage: Storage = storage
        self.timezone = timezone
        self.fold = fold
        self.batch_size = batch_size
        self.schema = schema
        self.dry_run = dry_run
        self.lock_timeout = (
            DEFAULT_LOCK_TIMEOUT if lock_timeout is None else check_lock_timeout(lock_timeout)
        )

    def _options(self) -> dict[str, object]:
        return {
            "from_time": self.from_time,
            "legacy_id": self.legacy_id,
            "storage": self.storage,
            "timezone": self.timezone,
            "fold": self.fold,
            "batch_size": self.batch_size,
            "schema": self.schema,
            "lock_timeout": self.lock_timeout,
        }


@Operations.register_operation("convert_primary_key_to_ulid")
class ConvertPrimaryKeyToULIDOp(_KeyOp):
    """Move an integer or UUID primary key, and its foreign keys, to ULIDs."""

    @classmethod
    def convert_primary_key_to_ulid(
        cls,
        operations: Operations,
        table_name: str,
        *,
        from_time: str | None = None,
        legacy_id: str = "legacy_id",
        storage: Storage = "auto",
        timezone: tzinfo | None = None,
        fold: int | None = None,
        batch_size: int = 10_000,
        schema: str | None = None,
        dry_run: bool = False,
        lock_timeout: float | timedelta | None = None,
    ) -> str | None:
        """Give a table ULID primary keys, and every column that references it their ULIDs.

        The key column keeps its name and holds the new ULID; its old
        values stay in a ``legacy_id`` column (unique, NOT NULL, keeping
        its sequence or AUTO_INCREMENT). Every column that references the
        key, found by reflection (through other referencing columns and
        self-references too), keeps its name and holds the referenced row's
        ULID; foreign keys and their indexes are recreated with their names.

        Phases: prepare (ULIDs computed and checked, the plan stored in
        ``ulid_key_conversions``, nullable shadow columns added), fill the
        key's shadow, fill each referencing shadow by a join (each committed
        on its own), then the swap (on PostgreSQL one transaction under
        ACCESS EXCLUSIVE locks on the tables). Rerun after a kill at any
        point, it continues the stored plan; rerun after success, it does
        nothing. PostgreSQL and MariaDB/MySQL, online or offline: in
        ``--sql`` mode the op writes a script that finds the foreign keys,
        makes the same refusals before any change and computes the new ids
        when it runs (on PostgreSQL for ``psql -v ON_ERROR_STOP=1``, on
        MariaDB 10.10+ for the ``mariadb`` client, the swap under ``LOCK
        TABLES ... WRITE``); the whole script is rerun after an interruption.

        Args:
            operations: supplied by Alembic (call it as
                ``op.convert_primary_key_to_ulid``).
            table_name: the table whose primary key changes.
            from_time: a date-time column (or integer Unix milliseconds)
                to date each row's ULID from, checked exactly like
                ``add_ulid_column``'s ``from_column``; ``None`` dates them
                now, handed out in the old keys' order.
            legacy_id: the column that keeps the old key values.
            storage: the new columns' :class:`~sqlalchemy_ulid.ULIDType` storage.
            timezone: the zone of naive ``from_time`` values (``None``: UTC).
            fold: for naive times in a DST fold or gap: ``None`` refuses.
            batch_size: rows computed and written per round trip.
            schema: the tables' schema.
            dry_run: only describe the plan (tables, row counts, columns,
                constraints, phases): logged and returned; under an Alembic
                command it then raises ``CommandError``, so that the
                revision is not recorded as applied.
            lock_timeout: seconds (or a timedelta) each DDL statement may
                wait for its lock before it is retried, a few times with a
                backoff; then ``LockTimeoutError`` names the blocking
                sessions (``None``: the default of every op).

        Returns:
            The plan's text.

        Raises:
            ConversionRefused: a composite key, a key neither integer nor
                UUID, a foreign key in another schema, a trigger or view on
                the tables, SQLite, a ``from_time`` column neither a
                timestamp nor integer milliseconds, or NULL times. Before any DDL.
            alembic.util.CommandError: offline (``--sql``), with
                ``dry_run=True`` (a dry run reads the database), a storage
                the script cannot write (uuid or binary on PostgreSQL,
                binary on MariaDB), a ``timezone`` other than UTC, or a
                database other than PostgreSQL and MariaDB.

        Example:
            >>> from sqlalchemy_ulid.alembic import ConvertPrimaryKeyToULIDOp
            >>> ConvertPrimaryKeyToULIDOp("customers").reverse().legacy_id
            'legacy_id'
        """
        result = invoke(cls, operations, locals())
        return result if isinstance(result, str) else None

    def reverse(self) -> RestoreLegacyPrimaryKeyOp:
        return RestoreLegacyPrimaryKeyOp(self.table_name, **self._options())  # type: ignore[arg-type]


@Operations.register_operation("restore_legacy_primary_key")
class RestoreLegacyPrimaryKeyOp(_KeyOp):
    """Undo ``convert_primary_key_to_ulid``: the legacy values become the key again."""

    @classmethod
    def restore_legacy_primary_key(
        cls,
        operations: Operations,
        table_name: str,
        *,
        from_time: str | None = None,
        legacy_id: str = "legacy_id",
        storage: Storage = "auto",
        timezone: tzinfo | None = None,
        fold: int | None = None,
        batch_size: int = 10_000,
        schema: str | None = None,
        dry_run: bool = False,
        lock_timeout: float | timedelta | None = None,
    ) -> str | None:
        """Restore the old primary key from ``legacy_id``, and every foreign key to it.

        The reverse of :meth:`convert_primary_key_to_ulid` (its downgrade):
        the ULID key column is dropped, ``legacy_id`` becomes the key under
        the key's name, and every referencing column gets back the old
        values, by a join. The same phases, refusals, dry run and reruns,
        online and offline (``--sql``: the downgrade script).
        ``from_time``, ``storage``, ``timezone``, ``fold`` are not used here;
        they are kept for the reverse op.

        Example:
            >>> from sqlalchemy_ulid.alembic import RestoreLegacyPrimaryKeyOp
            >>> RestoreLegacyPrimaryKeyOp("customers").reverse().table_name
            'customers'
        """
        result = invoke(cls, operations, locals())
        return result if isinstance(result, str) else None

    def reverse(self) -> ConvertPrimaryKeyToULIDOp:
        return ConvertPrimaryKeyToULIDOp(self.table_name, **self._options())  # type: ignore[arg-type]


@Operations.implementation_for(ConvertPrimaryKeyToULIDOp)
@plain_session
def _convert(operations: Operations, op: ConvertPrimaryKeyToULIDOp) -> str | None:
    return _run(operations, op, "ulid")


@Operations.implementation_for(RestoreLegacyPrimaryKeyOp)
@plain_session
def _restore(operations: Operations, op: RestoreLegacyPrimaryKeyOp) -> str | None:
    return _run(operations, op, "legacy")


def _run(operations: Operations, op: _KeyOp, direction: Literal["ulid", "legacy"]) -> str | None:
    context = operations.migration_context
    name = "convert_primary_key_to_ulid" if direction == "ulid" else "restore_legacy_primary_key"
    if context.as_sql:
        write_offline(operations, op, direction, name)
        return None
    connection = operations.get_bind()
    try:
        database: Database | None = database_for(connection.dialect)
    except UnsupportedDatabase:
        database = None  # no other session to exclude (SQLite)
    if op.dry_run:
        # It changes nothing: no lock to take.
        return _run_locked(operations, op, direction, name)
    # The run's own lock (the script's too), before anything is read.
    with run_lock(
        connection,
        database,
        name,
        lock_target(op.table_name, op.schema),
        op.schema,
        refusal=ConversionRefused,
        lock_op=LOCK_OP,
    ):
        return _run_locked(operations, op, direction, name)


def _run_locked(
    operations: Operations, op: _KeyOp, direction: Literal["ulid", "legacy"], name: str
) -> str | None:
    context = operations.migration_context
    connection = operations.get_bind()
    state = load_state(connection, op.schema, op.table_name)
    if state is None:
        if _finished(connection, op, direction):
            log.info("%s: %s is already done", name, op.table_name)
            return f"{name}: {op.table_name} is already done"
        plan = build_plan(
            connection,
            op.table_name,
            direction=direction,
            legacy_id=op.legacy_id,
            schema=op.schema,
            storage=op.storage,
            from_time=op.from_time,
        )
        done: list[str] = []
    else:
        plan, done = state
        if plan.direction != direction:
            raise ConversionRefused(
                f"an unfinished {plan.direction} conversion of {plan.table} is recorded in "
                "ulid_key_conversions: rerun the migration that started it first"
            )
    text = describe(plan, done)
    log.info("%s", text)
    if op.dry_run:
        if context.script is not None:
            raise CommandError(f"dry run, nothing was changed:\n{text}")
        return text
    if plan.direction == "ulid" and f"fill:{plan.table}" not in done and behind_a_proxy(connection):
        raise ConversionRefused(
            f"{name}: the new ids are kept in a temporary table, which lives on one "
            "server session, and this connection goes through a proxy or pooler that may "
            f"run the next transaction on another; nothing was changed: {DIRECT_CONNECTION}"
        )
    zone = op.timezone if op.timezone is not None else _timezone.utc
    with contextlib.ExitStack() as stack:
        fill = None
        if plan.direction == "ulid" and f"fill:{plan.table}" not in done:
            # Every new ULID is computed (and its time checked) before the
            # first DDL, in the migration's transaction: PostgreSQL reads
            # through a server-side cursor only inside one.
            fill = stack.enter_context(
                staged_key(connection, plan, timezone=zone, fold=op.fold, batch_size=op.batch_size)
            )
        if connection.in_transaction() and getattr(context, "_transaction", None) is None:
            # A transaction the context did not begin (the op called from
            # Python, or MariaDB outside a per-migration transaction):
            # autocommit_block() commits the preceding work, as Alembic
            # documents, but only in the transactions it began itself.
            connection.commit()
        with phases_block(operations):
            autocommit = operations.get_bind()
            with strict_mode(autocommit):
                _prepare_and_fill(autocommit, plan, done, op, fill, stored=state is not None)
    connection = operations.get_bind()
    # The swap's transaction runs without the statement timeout, as the first did.
    with catalog_for(connection.dialect).plain_session(connection), strict_mode(connection):
        swap(
            connection,
            plan,
            done,
            lock_timeout=op.lock_timeout,
            catch_up=lambda: _catch_up(connection, plan, op, zone),
        )
    log.info("%s: %s done", name, op.table_name)
    return text


def _finished(connection: Connection, op: _KeyOp, direction: str) -> bool:
    inspector = sa.inspect(connection)
    if not inspector.has_table(op.table_name, schema=op.schema):
        return False
    names = {c["name"] for c in inspector.get_columns(op.table_name, schema=op.schema)}
    if direction == "legacy":
        return op.legacy_id not in names
    # Converted: legacy_id is there with the unique constraint the op gave it
    # (a column of that name without it is the user's: build_plan refuses).
    unique = safe_name(f"uq_{op.table_name}_{op.legacy_id}", connection.dialect)
    return op.legacy_id in names and unique in unique_on(
        connection, op.table_name, op.legacy_id, op.schema
    )


def _prepare_and_fill(
    connection: Connection,
    plan: Plan,
    done: list[str],
    op: _KeyOp,
    fill: Callable[[], None] | None,
    *,
    stored: bool,
) -> None:
    """Phases 1 to 3, each committed on its own (the caller's autocommit block).

    Each one runs in a transaction without the statement timeout
    (``unbounded``); a fill is one statement over the whole table.
    """
    database = database_for(connection.dialect)

    def free() -> contextlib.AbstractContextManager[None]:
        return unbounded(connection, database)

    if "prepare" not in done:
        if not stored:
            with free():
                save_state(connection, plan)
        add_shadows(connection, plan, op.lock_timeout, free)
        with free():
            mark_done(connection, plan, done, "prepare")
    if fill is not None:
        with free():
            fill()
            mark_done(connection, plan, done, f"fill:{plan.table}")
    for column in plan.columns[1:]:
        step = f"fill:{column.table}.{column.column}"
        if step not in done:
            with free():
                fill_referencing(connection, plan, column, catch_up=False)
                mark_done(connection, plan, done, step)


def _catch_up(connection: Connection, plan: Plan, op: _KeyOp, zone: tzinfo) -> None:
    """Give new values to rows written since the fill (run under the swap's locks)."""
    if plan.direction == "ulid":
        with staged_key(
            connection, plan, timezone=zone, fold=op.fold, batch_size=op.batch_size
        ) as fill:
            fill()
    for column in plan.columns[1:]:
        fill_referencing(connection, plan, column, catch_up=True)
