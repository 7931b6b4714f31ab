"""``add_ulid_column`` / ``add_uuid7_column(..., online=True)``: one plan, run or written.

The op's names are fixed here, once, for every database (:class:`AddNames`);
the database's planner (``postgresql/add_column.py``, ``mysql/add_column.py``)
turns them into a :class:`~._plan.step.Plan`. Online the runner
(``_plan/run.py``) executes it; offline (``--sql``) the database's renderer
writes it as a script. What only Python can check (every row's time in a
zone with DST changes, that the DEFAULT's function exists) is checked online
after the plan's checks and before its first change.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from datetime import timezone as _timezone
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from alembic.operations import Operations
from alembic.util import CommandError
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.exc import CompileError

from .._backfill import Backfill, exact_key_type
from .._inspect import check_identifier, quote, safe_name, strict_mode, utc_session
from .._locks import DEFAULT_LOCK_TIMEOUT
from .._online import check_online_context, phases_block
from .._plan.database import Database, UnsupportedDatabase, database_for
from .._plan.run import run_plan, unbounded

if TYPE_CHECKING:
    from .op import AddULIDColumnOp

__all__ = ["AddNames", "add_names", "add_offline", "add_online"]


@dataclass(frozen=True)
class AddNames:
    """The op's names and options, as every planner needs them (no database read)."""

    op_name: str
    table: str
    column: str
    from_column: str
    schema: str | None
    storage: str
    #: the ids: ``ulid`` or ``uuid7``
    key: str
    #: the storage's kind on this database (``uuid``, ``binary``, ``text``, ``hex``)
    kind: str
    table_sql: str
    column_sql: str
    from_sql: str
    type_sql: str
    constraint: str
    constraint_sql: str
    constraint_qualified: str
    check: str
    check_sql: str
    default_sql: str | None
    #: the DEFAULT's SQL on a server of a given version (None: no DEFAULT); the
    #: generator may be the server's own from some version on (PostgreSQL
    #: 18's ``uuidv7()``), which a script learns only as it runs
    default_for: Callable[[tuple[int, ...]], str] | None
    unique: bool
    lock_timeout: float
    batch_size: int
    pause: float

    @property
    def target(self) -> str:
        table = self.table if self.schema is None else f"{self.schema}.{self.table}"
        return f"{table}.{self.column}"


def add_names(op: AddULIDColumnOp, dialect: Dialect) -> AddNames:
    """The names the plan uses; ValueError for a name the database would not take."""
    check_identifier(op.column_name, "column name", dialect)
    constraint = op.constraint_name or safe_name(f"uq_{op.table_name}_{op.column_name}", dialect)
    check_identifier(constraint, "constraint name", dialect)
    check = safe_name(f"ck_{op.table_name}_{op.column_name}_not_null", dialect)
    column_type = op.column_type(dialect)
    default_sql = default_for = None
    if op.server_default:
        default_sql = str(op.make_server_default(dialect).compile(dialect=dialect))

        def default_for(version: tuple[int, ...]) -> str:
            server = copy.copy(dialect)
            server.server_version_info = version
            return str(op.make_server_default(server).compile(dialect=server))

    return AddNames(
        op_name=op.op_name,
        table=op.table_name,
        column=op.column_name,
        from_column=op.from_column,
        schema=op.schema,
        storage=str(op.storage),
        key=op.key,
        kind=_storage_kind(op, dialect),
        table_sql=quote(dialect, op.table_name, op.schema),
        column_sql=quote(dialect, op.column_name),
        from_sql=quote(dialect, op.from_column),
        type_sql=column_type.compile(dialect=dialect),
        constraint=constraint,
        constraint_sql=quote(dialect, constraint),
        constraint_qualified=quote(dialect, constraint, op.schema),
        check=check,
        check_sql=quote(dialect, check),
        default_sql=default_sql,
        default_for=default_for,
        unique=op.unique,
        lock_timeout=DEFAULT_LOCK_TIMEOUT if op.lock_timeout is None else op.lock_timeout,
        batch_size=op.batch_size,
        pause=op.pause,
    )


def _storage_kind(op: AddULIDColumnOp, dialect: Dialect) -> str:
    try:
        return op.storage_kind(dialect)
    except CompileError:
        return ""  # no uuid type here: the script refuses it, by storage


def _database(op: AddULIDColumnOp, dialect: Dialect) -> Database:
    try:
        database = database_for(dialect)
    except UnsupportedDatabase:
        raise ValueError(
            f"{op.op_name}(online=True) is for PostgreSQL and MariaDB/MySQL, whose writers "
            f"it keeps going; it is not supported on {dialect.name}"
        ) from None
    database.refuse_online(op.op_name)
    return database


def add_online(operations: Operations, op: AddULIDColumnOp, millis: Callable[[Any], int]) -> None:
    """Run ``op`` as its plan; ``millis`` is the op's strict row-time conversion."""
    if operations.get_context().as_sql:
        add_offline(operations, op)
        return
    connection = operations.get_bind()
    database = _database(op, connection.dialect)
    names = add_names(op, connection.dialect)
    check_online_context(operations, op.op_name)
    with utc_session(connection):
        if names.default_sql is not None:
            _check_default_runs(connection, op, names.default_sql)
        with phases_block(operations), strict_mode(connection), contextlib.ExitStack() as stack:
            # The table is reflected in a transaction without the statement timeout.
            with unbounded(connection, database):
                backfill = stack.enter_context(_backfill(connection, op, millis))
            run_plan(
                connection,
                database.add_column(names, backfill),
                database,
                progress=op.progress,
                sized_by_time=op.sized_by_time,
                late_error=lambda: _late_rows_error(op, backfill.missing()),
                before_changes=lambda: backfill.check_before_changes(op.timezone),
            )


@contextlib.contextmanager
def _backfill(
    connection: Connection, op: AddULIDColumnOp, millis: Callable[[Any], int]
) -> Iterator[Backfill]:
    """The online fill's Python body, on the table as it is (reflected once)."""
    table = sa.Table(op.table_name, sa.MetaData(), schema=op.schema, autoload_with=connection)
    keys = list(table.primary_key.columns)
    refusal = None
    if len(keys) != 1 or op.from_column not in table.c:
        # The plan's checks say which, in their own words, before any change;
        # if they pass, reflection read the table otherwise than the catalog:
        # the fill refuses then, rather than walk a column it guessed.
        key_type: Any = sa.Integer()
        key = keys[0].name if len(keys) == 1 else "id"
        refusal = (
            f"reflection found {len(keys)} primary-key columns on {op.table_name} and "
            f"{'a' if op.from_column in table.c else 'no'} column {op.from_column}"
        )
    else:
        key, key_type = keys[0].name, exact_key_type(keys[0].type)
        refusal = database_for(connection.dialect).fill_key_refusal(key_type)
    column_type = op.column_type(connection.dialect)
    time_type = table.c[op.from_column].type if op.from_column in table.c else sa.DateTime()
    target = sa.Table(
        op.table_name,
        sa.MetaData(),
        sa.Column(key, key_type, primary_key=True),
        sa.Column(op.from_column, time_type),
        sa.Column(op.column_name, column_type),
        schema=op.schema,
    )
    # The batches carry their ids in one statement each (the database's fill_batch).
    yield Backfill(
        connection,
        target,
        key,
        op.column_name,
        millis,
        op.from_column,
        op.batch_size,
        op.id_maker,
        key_refusal=None if refusal is None else f"{op.op_name}(online=True): {refusal}",
    )


def _check_default_runs(connection: Connection, op: AddULIDColumnOp, sql: str) -> None:
    """Evaluate the DEFAULT once, before any DDL: its function may not be installed."""
    try:
        with connection.begin_nested():
            connection.execute(sa.text(f"SELECT {sql}"))
    except sa.exc.DBAPIError as exc:
        if exc.connection_invalidated:
            raise
        function = "create_uuid7_function" if "uuid7" in op.op_name else "create_ulid_function"
        raise ValueError(
            f"{op.op_name}(server_default=True): the column's DEFAULT {sql} fails on this "
            f"database ({str(exc.orig).splitlines()[0]}); nothing was changed. On "
            f"PostgreSQL, run op.{function}() in an earlier migration"
        ) from exc


def _late_rows_error(op: AddULIDColumnOp, late: int) -> CommandError:
    return CommandError(
        f"{late} rows were written to {op.table_name} without {op.column_name} while "
        f"{op.op_name}(online=True) ran, so it cannot be made NOT NULL yet. Deploy the "
        "application with a default for the column (or pass server_default=True), then "
        "rerun the migration: it carries on from where it stopped"
    )


# -- offline ------------------------------------------------------------------------


def add_offline(operations: Operations, op: AddULIDColumnOp) -> None:
    """Write the op's plan into the ``--sql`` script."""
    context = operations.get_context()
    dialect = context.dialect
    try:
        database = database_for(dialect)
        kinds = database.script_kinds
    except UnsupportedDatabase:
        kinds = ()
    if not kinds:
        raise CommandError(
            f"{op.op_name}(online=True) writes an offline (--sql) script for "
            f"PostgreSQL and MariaDB only; on {dialect.name} run this migration online "
            "(alembic upgrade without --sql)"
        )
    if _storage_kind(op, dialect) not in kinds:
        raise CommandError(
            f"{op.op_name}(online=True) offline needs {' or '.join(kinds)} storage, "
            f"not {op.storage!r}"
        )
    zone = op.timezone
    if not (isinstance(zone, _timezone) and zone.utcoffset(None) == timedelta(0)):
        raise CommandError(
            f"{op.op_name}(online=True) offline reads naive times as UTC only: the "
            f"database would place them in {zone} by its own rules, not ours"
        )
    limit = database.script_max_batch[op.key]
    if op.batch_size > limit and not op.sized_by_time:
        raise ValueError(f"offline, batch_size is at most {limit}, got {op.batch_size}")
    # The script's batches keep one size: the online default, or the most a
    # script batch can number, whichever is less (4,095 rows for UUIDv7 ids).
    names = add_names(op, dialect)
    names = replace(names, batch_size=min(names.batch_size, limit))
    plan = database.add_column(names, None)
    with context.autocommit_block():
        context.impl.static_output(database.render(plan))
