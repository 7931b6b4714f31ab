"""``add_ulid_column(..., online=True)``: the op in phases, each committed on its own.

No phase holds a lock that writers wait for longer than a metadata change:

PostgreSQL
    1. ``ADD COLUMN`` (nullable: no rewrite), and with ``server_default=True``
       ``SET DEFAULT`` the server's generator (new rows get ids from now on);
    2. the batched backfill (``_backfill``), one short transaction a batch;
    3. ``CHECK (col IS NOT NULL) NOT VALID`` (instant), then ``VALIDATE
       CONSTRAINT`` (a scan that writers do not wait for);
    4. ``SET NOT NULL`` (instant: the validated check proves it), then the
       check is dropped;
    5. ``CREATE UNIQUE INDEX CONCURRENTLY`` (an INVALID leftover of a killed
       run is dropped first), then ``ADD CONSTRAINT ... UNIQUE USING INDEX``.

MariaDB
    1. ``ADD COLUMN ..., ALGORITHM=INSTANT`` (and ``SET DEFAULT``);
    2. the batched backfill;
    3. ``MODIFY ... NOT NULL`` and the unique key in one ``ALTER TABLE ...,
       ALGORITHM=INPLACE, LOCK=NONE``: the table is rebuilt while writers go on.

Every DDL statement runs through :func:`~._locks.lock_safe_ddl`. Each phase
reads what is done first, so a rerun after a kill goes on from there, and a
rerun after success does nothing. The phases run in Alembic's
``autocommit_block()``: the migration's transaction is committed first.

Offline (``--sql``) the same phases are written out, the backfill as a
block that commits after every batch: a ``DO`` block on PostgreSQL
(``_offline``), a ``BEGIN NOT ATOMIC`` block on MariaDB (``_offline_mariadb``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timezone as _timezone
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from alembic.operations import Operations
from alembic.util import CommandError
from sqlalchemy.engine import Connection

from .._dialects import dialect_row
from ._backfill import Backfill, error_code
from ._concurrent_index import build_index_concurrently
from ._inspect import (
    check_identifier,
    column_state,
    quote,
    run,
    safe_name,
    strict_mode,
    unique_on,
    utc_session,
)
from ._locks import DEFAULT_LOCK_TIMEOUT, lock_safe_ddl
from ._offline import add_offline

if TYPE_CHECKING:
    from ._add import AddULIDColumnOp

__all__ = ["add_online", "check_online_context"]

#: Rounds of "backfill the rows written meanwhile, try the constraint again".
_ROUNDS = 3
_MYSQL_NULL_ERRORS = frozenset({1265, 1138, 1048})  # data truncated, invalid NULL


def check_online_context(operations: Operations, op_name: str = "add_ulid_column") -> None:
    """Refuse, before any SQL, a migration context where phases cannot commit.

    ``autocommit_block()`` commits the transaction Alembic began. A
    connection handed to Alembic inside a transaction of the caller's own
    cannot be committed by Alembic: refuse rather than commit it.
    """
    context = operations.get_context()
    if context.as_sql:
        return
    # Alembic's own bookkeeping: the transaction it began (None: not its own).
    own = getattr(context, "_transaction", None)
    if context._in_connection_transaction() and own is None:
        raise CommandError(
            f"{op_name}(online=True) commits after each phase, through Alembic's "
            "autocommit_block(), but the connection is in a transaction that Alembic did "
            "not begin. Run it from env.py's context.begin_transaction() (the usual "
            "env.py), on a connection with no transaction of your own."
        )


@contextlib.contextmanager
def phases_block(operations: Operations) -> Iterator[None]:
    """Alembic's ``autocommit_block()``, for phases that commit on their own.

    With the session gone (killed, a failover), Alembic cannot commit the
    block's transaction as it leaves it; the error of that commit would hide
    the one that stopped the phases, so that one is raised instead.
    """
    failure: list[BaseException] = []
    try:
        with operations.get_context().autocommit_block():
            try:
                yield
            except BaseException as exc:
                failure.append(exc)
                raise
    except sa.exc.SQLAlchemyError as exc:
        if failure and exc is not failure[0]:
            raise failure[0] from None
        raise


def add_online(operations: Operations, op: AddULIDColumnOp, millis: Any) -> None:
    """Run ``op`` in phases; ``millis`` is the op's strict row-time conversion."""
    if operations.get_context().as_sql:
        add_offline(operations, op)
        return
    connection = operations.get_bind()
    dialect = connection.dialect
    if dialect.name == "sqlite":
        raise ValueError(
            f"{op.op_name}(online=True) is for PostgreSQL and MariaDB/MySQL, whose "
            "writers it keeps going; SQLite has one writer at a time: drop online=True"
        )
    if dialect.name not in ("postgresql", "mysql", "mariadb"):
        raise ValueError(f"{op.op_name}(online=True) is not supported on {dialect.name}")
    check_online_context(operations)
    # TIMESTAMP times read in UTC, whatever the session's time_zone (MariaDB).
    with utc_session(connection):
        plan = _Plan(connection, op)
        plan.check_times(connection, op, millis)
        with phases_block(operations):
            _phases(operations, op, plan, millis)


def _phases(operations: Operations, op: AddULIDColumnOp, plan: _Plan, millis: Any) -> None:
    connection = operations.get_bind()
    with strict_mode(connection), _staging(connection, plan) as staging:
        backfill = Backfill(
            connection,
            plan.target,
            staging,
            plan.key,
            op.column_name,
            millis,
            op.from_column,
            op.batch_size,
            op.pause,
            op.progress,
            op.id_maker,
        )
        if connection.dialect.name == "postgresql":
            _postgresql(connection, op, plan, backfill)
        else:
            _mysql(connection, op, plan, backfill)


class _Plan:
    """What the phases need, read and checked before any DDL."""

    def __init__(self, connection: Connection, op: AddULIDColumnOp) -> None:
        dialect = connection.dialect
        table = sa.Table(op.table_name, sa.MetaData(), schema=op.schema, autoload_with=connection)
        keys = list(table.primary_key.columns)
        if len(keys) != 1:
            raise ValueError(
                f"{op.op_name}(online=True) needs a single-column primary key on "
                f"{op.table_name} to walk it in batches; it has {len(keys) or 'none'}"
            )
        self.key = keys[0].name
        if op.from_column not in table.c:
            raise ValueError(f"{op.table_name} has no column {op.from_column!r}")
        self.column_type = op.column_type(dialect)
        self.table_sql = quote(dialect, op.table_name, op.schema)
        self.column_sql = quote(dialect, op.column_name)
        self.type_sql = self.column_type.compile(dialect=dialect)
        self.constraint = op.constraint_name or safe_name(
            f"uq_{op.table_name}_{op.column_name}", dialect
        )
        self.check = safe_name(f"ck_{op.table_name}_{op.column_name}_not_null", dialect)
        check_identifier(op.column_name, "column name", dialect)
        check_identifier(self.constraint, "constraint name", dialect)
        self.existing = column_state(connection, op.table_name, op.column_name, op.schema)
        if self.existing is not None:
            from ._add import _check_existing  # the op's own check (_add imports us)

            _check_existing(self.existing, self.column_type, op, dialect)
        self.target = sa.Table(
            op.table_name,
            sa.MetaData(),
            sa.Column(self.key, keys[0].type, primary_key=True),
            sa.Column(op.from_column, table.c[op.from_column].type),
            sa.Column(op.column_name, self.column_type),
            schema=op.schema,
        )
        self.staging_table = sa.Table(
            "_ulid_online_backfill",
            sa.MetaData(),
            sa.Column(self.key, keys[0].type, primary_key=True, autoincrement=False),
            sa.Column("ulid", self.column_type, nullable=False),
            prefixes=["TEMPORARY"],
        )
        # The op's own DEFAULT (ValueError, before any DDL, where the database
        # has no generator for this storage), as the SQL after SET DEFAULT: in
        # parentheses, as MariaDB needs an expression default to be.
        self.default_sql = None
        if op.server_default:
            default = op.make_server_default(dialect)
            self.default_sql = str(default.compile(dialect=dialect))
            _check_default_runs(connection, op, self.default_sql)
        self.lock_timeout = op.lock_timeout if op.lock_timeout is not None else DEFAULT_LOCK_TIMEOUT
        if dialect.name != "postgresql":
            _mysql_refusals(connection, op)

    def check_times(self, connection: Connection, op: AddULIDColumnOp, millis: Any) -> None:
        """Refuse, before any DDL, a NULL or out-of-range time in a row without an id.

        A fixed offset keeps the order of times, so the earliest and latest
        decide; a zone with DST changes is checked row by row (a gap or a
        fold), in one streaming read.
        """
        times = self.target.c[op.from_column]
        todo = sa.select(times).select_from(self.target)
        if self.existing is not None:
            todo = todo.where(self.target.c[op.column_name].is_(None))
        nulls = connection.scalar(
            sa.select(sa.func.count()).select_from(todo.where(times.is_(None)).subquery())
        )
        if nulls:
            raise ValueError(
                f"{op.table_name}.{op.from_column} is NULL in {nulls} rows: "
                "fill them before deriving ULIDs from it"
            )
        if isinstance(op.timezone, _timezone):
            ends = todo.subquery()
            low, high = connection.execute(
                sa.select(sa.func.min(ends.c[op.from_column]), sa.func.max(ends.c[op.from_column]))
            ).one()
            for value in (low, high):
                if value is not None:
                    millis(value)
            return
        result = connection.execute(
            todo, execution_options={"stream_results": True, "yield_per": op.batch_size}
        )
        with result:
            for (value,) in result:
                millis(value)

    def ddl(self, connection: Connection, *statements: str) -> None:
        lock_safe_ddl(connection, statements, lock_timeout=self.lock_timeout)


def _check_default_runs(connection: Connection, op: AddULIDColumnOp, sql: str) -> None:
    """Evaluate the DEFAULT once, before any DDL: its function may not be installed.

    Online, ``ADD COLUMN`` commits on its own: a ``SET DEFAULT`` that then
    fails (``gen_ulid()`` not created yet) would leave the column behind.
    """
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


@contextlib.contextmanager
def _staging(connection: Connection, plan: _Plan) -> Any:
    if dialect_row(connection.dialect).unnest_arrays:
        yield plan.staging_table  # never created: the batches bind arrays
        return
    drop = dialect_row(connection.dialect).drop_temporary.format(
        quote(connection.dialect, plan.staging_table.name)
    )
    run(connection, drop)
    plan.staging_table.create(connection)
    try:
        yield plan.staging_table
    finally:
        with contextlib.suppress(sa.exc.SQLAlchemyError):
            run(connection, drop)


def _add_column(connection: Connection, op: AddULIDColumnOp, plan: _Plan, suffix: str) -> None:
    state = column_state(connection, op.table_name, op.column_name, op.schema)
    if state is None:
        plan.ddl(
            connection,
            f"ALTER TABLE {plan.table_sql} ADD COLUMN {plan.column_sql} {plan.type_sql}{suffix}",
        )
        state = column_state(connection, op.table_name, op.column_name, op.schema)
    assert state is not None
    if plan.default_sql is not None and state.default is None:
        plan.ddl(
            connection,
            f"ALTER TABLE {plan.table_sql} ALTER COLUMN {plan.column_sql} "
            f"SET DEFAULT {plan.default_sql}",
        )


def _nulls(connection: Connection, plan: _Plan, op: AddULIDColumnOp) -> int:
    column = plan.target.c[op.column_name]
    query = sa.select(sa.func.count()).select_from(plan.target).where(column.is_(None))
    return int(connection.scalar(query) or 0)


def _late_rows_error(op: AddULIDColumnOp, late: int) -> CommandError:
    return CommandError(
        f"{late} rows were written to {op.table_name} without {op.column_name} while "
        f"{op.op_name}(online=True) ran, so it cannot be made NOT NULL yet. Deploy the "
        "application with a default for the column (or pass server_default=True), then "
        "rerun the migration: it carries on from where it stopped"
    )


# -- PostgreSQL -----------------------------------------------------------------


def _postgresql(
    connection: Connection, op: AddULIDColumnOp, plan: _Plan, backfill: Backfill
) -> None:
    _add_column(connection, op, plan, "")
    table, column, check = plan.table_sql, plan.column_sql, quote(connection.dialect, plan.check)
    state = column_state(connection, op.table_name, op.column_name, op.schema)
    assert state is not None
    if state.nullable:
        backfill.run()
        validated = _pg_check(connection, plan)
        if validated is None:
            plan.ddl(
                connection,
                f"ALTER TABLE {table} ADD CONSTRAINT {check} "
                f"CHECK ({column} IS NOT NULL) NOT VALID",
            )
            validated = False
        for round_ in range(_ROUNDS + 1):
            if validated:
                break
            try:
                # SHARE UPDATE EXCLUSIVE: writers go on while it scans.
                plan.ddl(connection, f"ALTER TABLE {table} VALIDATE CONSTRAINT {check}")
                validated = True
            except sa.exc.IntegrityError:
                # Rows written without the column before the check existed.
                if round_ == _ROUNDS or not backfill.run():
                    raise _late_rows_error(op, _nulls(connection, plan, op)) from None
        plan.ddl(connection, f"ALTER TABLE {table} ALTER COLUMN {column} SET NOT NULL")
    if _pg_check(connection, plan) is not None:
        plan.ddl(connection, f"ALTER TABLE {table} DROP CONSTRAINT {check}")
    if op.unique:
        _pg_unique(connection, op, plan)


def _pg_regclass(plan: _Plan) -> dict[str, str]:
    return {"table": plan.table_sql}


def _pg_check(connection: Connection, plan: _Plan) -> bool | None:
    """Whether our NOT NULL check exists validated (None: it does not exist)."""
    row = connection.execute(
        sa.text(
            "SELECT convalidated FROM pg_constraint "
            "WHERE conrelid = to_regclass(:table) AND conname = :name AND contype = 'c'"
        ),
        {**_pg_regclass(plan), "name": plan.check},
    ).first()
    return None if row is None else bool(row[0])


def _pg_index(connection: Connection, plan: _Plan) -> tuple[bool, bool] | None:
    """(valid, backs a constraint) of the index named like the constraint, or None."""
    row = connection.execute(
        sa.text(
            "SELECT i.indisvalid, EXISTS (SELECT 1 FROM pg_constraint c "
            "WHERE c.conindid = i.indexrelid AND c.conrelid = i.indrelid) "
            "FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid "
            "WHERE i.indrelid = to_regclass(:table) AND x.relname = :name"
        ),
        {**_pg_regclass(plan), "name": plan.constraint},
    ).first()
    return None if row is None else (bool(row[0]), bool(row[1]))


def _pg_unique(connection: Connection, op: AddULIDColumnOp, plan: _Plan) -> None:
    dialect = connection.dialect
    index = _pg_index(connection, plan)
    if index is None and unique_on(connection, op.table_name, op.column_name, op.schema):
        return  # unique already, under another name
    if index is not None and index[1]:
        return  # the constraint exists
    name = quote(dialect, plan.constraint)
    qualified = quote(dialect, plan.constraint, op.schema)
    if index is None or not index[0]:
        # A timed-out try, or a killed earlier run, leaves an INVALID index
        # under the name: it is dropped and built again.
        build_index_concurrently(
            connection,
            f"CREATE UNIQUE INDEX CONCURRENTLY {name} ON {plan.table_sql} ({plan.column_sql})",
            table=plan.table_sql,
            name=plan.constraint,
            qualified=qualified,
            lock_timeout=plan.lock_timeout,
        )
    plan.ddl(
        connection,
        f"ALTER TABLE {plan.table_sql} ADD CONSTRAINT {name} UNIQUE USING INDEX {name}",
    )


# -- MariaDB / MySQL -------------------------------------------------------------


def _mysql_refusals(connection: Connection, op: AddULIDColumnOp) -> None:
    """Refuse, before any DDL, a table InnoDB cannot alter online."""
    row = connection.execute(
        sa.text(
            "SELECT ENGINE FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :table"
        ),
        {"schema": op.schema, "table": op.table_name},
    ).first()
    if row is None or str(row[0]).lower() != "innodb":
        raise ValueError(
            f"{op.op_name}(online=True) needs an InnoDB table; {op.table_name} is "
            f"{row[0] if row else 'missing'}"
        )
    special = connection.execute(
        sa.text(
            "SELECT DISTINCT INDEX_NAME, INDEX_TYPE FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :table "
            "AND INDEX_TYPE IN ('FULLTEXT', 'SPATIAL')"
        ),
        {"schema": op.schema, "table": op.table_name},
    ).all()
    if special:
        names = ", ".join(f"{r[0]} ({r[1]})" for r in special)
        raise ValueError(
            f"{op.table_name} has {names}: with such an index InnoDB can neither add a "
            "column instantly nor rebuild the table while writers go on "
            "(ALGORITHM=INSTANT / LOCK=NONE). Nothing was changed; run add_ulid_column "
            "without online=True in a quiet period, or drop the index first"
        )


def _mysql(connection: Connection, op: AddULIDColumnOp, plan: _Plan, backfill: Backfill) -> None:
    _add_column(connection, op, plan, " NULL, ALGORITHM=INSTANT")
    for round_ in range(_ROUNDS + 1):
        backfill.run()
        state = column_state(connection, op.table_name, op.column_name, op.schema)
        assert state is not None
        clauses = []
        if state.nullable:
            restate = f"MODIFY {plan.column_sql} {plan.type_sql} NOT NULL"
            if state.default is not None:
                restate += f" DEFAULT ({state.default})"
            if state.comment is not None:
                restate += f" COMMENT '{_mysql_string(state.comment)}'"
            clauses.append(restate)
        if op.unique and not unique_on(connection, op.table_name, op.column_name, op.schema):
            name = quote(connection.dialect, plan.constraint)
            clauses.append(f"ADD CONSTRAINT {name} UNIQUE ({plan.column_sql})")
        if not clauses:
            return
        try:
            plan.ddl(
                connection,
                f"ALTER TABLE {plan.table_sql} {', '.join(clauses)}, ALGORITHM=INPLACE, LOCK=NONE",
            )
            return
        except sa.exc.DBAPIError as exc:
            if exc.connection_invalidated or error_code(exc) not in _MYSQL_NULL_ERRORS:
                raise
            if round_ == _ROUNDS:
                raise _late_rows_error(op, _nulls(connection, plan, op)) from exc


def _mysql_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "''")
