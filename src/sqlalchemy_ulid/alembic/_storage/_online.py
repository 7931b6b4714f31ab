"""``alter_ulid_storage(..., online=True)`` on PostgreSQL: a shadow column, then a swap.

No phase makes a writer wait longer than a metadata change:

1. a small table, ``ulid_storage_conversions``, remembers the conversion
   and how far its copy got; then ``ADD COLUMN <col>__ulid`` (nullable, the
   new type: no rewrite);
2. a ``BEFORE INSERT OR UPDATE`` trigger sets the shadow from the column
   with the conversion SQL, which fails on a value that is not a ULID: from
   here on every write keeps the shadow in step, and none stores a wrong id;
3. the copy, in key order, one short statement a batch that also records
   the batch's last key: a rerun goes on after it, without rereading the
   finished ranges;
4. a ``CHECK`` that the shadow equals the converted column, ``NOT VALID``
   then ``VALIDATE`` (writers go on): proof that no row holds another id,
   even one written by a session that skips triggers; for a NOT NULL
   column the same for ``shadow IS NOT NULL``, then ``SET NOT NULL``
   (instant);
5. each index, unique constraint and primary key on the column is built
   again on the shadow with ``CREATE [UNIQUE] INDEX CONCURRENTLY``;
6. the swap, one transaction under a lock taken with ``lock_timeout``:
   the trigger and the old column go, the shadow is renamed, the constraints
   are added ``USING INDEX``, the DEFAULT and COMMENT are carried.

Every step reads the catalog first, so a rerun after a kill goes on from
there, and a rerun after success does nothing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from alembic.operations import Operations
from sqlalchemy.engine import Connection

from ..._dialects import dialect_row
from .._concurrent_index import build_index_concurrently
from .._inspect import column_state, quote, run, safe_name, unescape_percent
from .._locks import DEFAULT_LOCK_TIMEOUT, lock_safe_ddl
from .._online import check_online_context, phases_block
from .._plan.batches import BatchLoop, run_batches
from ._plan import Index, Plan, build_plan
from ._values import check_text

if TYPE_CHECKING:
    from ._op import AlterULIDStorageOp

__all__ = ["STATE_TABLE", "alter_online"]

logger = logging.getLogger("alembic.runtime.migration")

#: The table that remembers a conversion in progress and its copy's last key.
STATE_TABLE = "ulid_storage_conversions"
#: Taken by the transactions that create, join or drop the state table.
_STATE_LOCK = f"SELECT pg_advisory_xact_lock(hashtext('sqlalchemy_ulid.{STATE_TABLE}'))"


def alter_online(operations: Operations, op: AlterULIDStorageOp) -> None:
    """Run ``op`` on PostgreSQL in phases (see the module docstring)."""
    context = operations.get_context()
    if context.as_sql:
        from ._offline import alter_offline

        alter_offline(operations, op)
        return
    check_online_context(operations)
    connection = operations.get_bind()
    if _undo_interrupted(operations, op):
        return
    plan = build_plan(connection, op)
    if plan is None:
        return
    with phases_block(operations):
        _phases(connection, op, plan)


def _undo_interrupted(operations: Operations, op: AlterULIDStorageOp) -> bool:
    """Remove what an interrupted conversion the other way left; False: there is none.

    The column is still in ``to_storage``, a shadow in ``from_storage`` is
    beside it and the state table records that conversion: this op is its
    undoing (the downgrade, or a revision that abandons it). The trigger,
    its function and the shadow (its indexes and checks with it) go in one
    transaction; the column and its values were never changed.
    """
    connection = operations.get_bind()
    dialect = connection.dialect
    if not sa.inspect(connection).has_table(op.table_name, schema=op.schema):
        return False
    state = column_state(connection, op.table_name, op.column_name, op.schema)
    shadow_name = safe_name(f"{op.column_name}__ulid", dialect)
    shadow = column_state(connection, op.table_name, shadow_name, op.schema)
    if state is None or shadow is None:
        return False
    if op.found_kind(state.type, None) != op.kind(op.to_storage, dialect):
        return False
    if op.found_kind(shadow.type, None) != op.kind(op.from_storage, dialect):
        return False
    state_table = quote(dialect, STATE_TABLE, op.schema)
    if not sa.inspect(connection).has_table(STATE_TABLE, schema=op.schema):
        return False
    recorded = connection.execute(
        sa.text(f"SELECT 1 FROM {state_table} WHERE table_name = :t AND column_name = :c"),
        {"t": op.table_name, "c": op.column_name},
    ).first()
    if recorded is None:
        return False
    table = quote(dialect, op.table_name, op.schema)
    names = f"{op.table_name}_{op.column_name}"
    trigger = quote(dialect, safe_name(f"{names}__ulid_sync", dialect))
    function = quote(dialect, safe_name(f"{names}__ulid_sync", dialect), op.schema)
    timeout = DEFAULT_LOCK_TIMEOUT if op.lock_timeout is None else op.lock_timeout
    statements = [
        f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE",
        f"DROP TRIGGER IF EXISTS {trigger} ON {table}",
        f"DROP FUNCTION IF EXISTS {function}()",
        f"ALTER TABLE {table} DROP COLUMN {quote(dialect, shadow_name)}",
        *_forget(dialect, op.table_name, op.column_name, op.schema),
    ]
    logger.info("alter_ulid_storage: undoing the interrupted conversion of %s", names)
    with operations.get_context().autocommit_block():
        lock_safe_ddl(connection, [";\n".join(statements)], lock_timeout=timeout)
    return True


# -- the phases -------------------------------------------------------------------------


def _phases(connection: Connection, op: AlterULIDStorageOp, plan: Plan) -> None:
    timeout = DEFAULT_LOCK_TIMEOUT if op.lock_timeout is None else op.lock_timeout

    def ddl(*statements: str) -> None:
        lock_safe_ddl(connection, statements, lock_timeout=timeout)

    table = plan.q(connection, plan.table, schema=True)
    shadow = plan.q(connection, plan.shadow)
    state_table = quote(connection.dialect, STATE_TABLE, plan.schema)
    fresh = column_state(connection, plan.table, plan.shadow, plan.schema) is None
    # A fresh start forgets a copy position an abandoned conversion left.
    conflict = "DO UPDATE SET last_key = NULL" if fresh else "DO NOTHING"
    # One transaction, under the lock the last swap takes to drop the table:
    # two conversions starting at once would both create it (one failing),
    # or one would drop it between the other's CREATE and INSERT.
    ddl(
        ";\n".join(
            [
                _STATE_LOCK,
                f"CREATE TABLE IF NOT EXISTS {state_table} (table_name TEXT NOT NULL, "
                "column_name TEXT NOT NULL, last_key TEXT, "
                "PRIMARY KEY (table_name, column_name))",
                f"INSERT INTO {state_table} (table_name, column_name) VALUES "
                f"({_literal(connection.dialect, plan.table)}, "
                f"{_literal(connection.dialect, plan.column)}) "
                f"ON CONFLICT (table_name, column_name) {conflict}",
            ]
        )
    )
    if fresh:
        ddl(f"ALTER TABLE {table} ADD COLUMN {shadow} {plan.new_type} NULL")
    _trigger(connection, op, plan, ddl)
    _copy(connection, op, plan)
    _prove_same(connection, op, plan, ddl)
    state = column_state(connection, plan.table, plan.shadow, plan.schema)
    assert state is not None
    check = plan.q(connection, plan.check)
    if not plan.nullable and state.nullable:
        if _check_state(connection, plan, plan.check) is None:
            ddl(
                f"ALTER TABLE {table} ADD CONSTRAINT {check} CHECK ({shadow} IS NOT NULL) NOT VALID"
            )
        if not _check_state(connection, plan, plan.check):
            ddl(f"ALTER TABLE {table} VALIDATE CONSTRAINT {check}")
        ddl(f"ALTER TABLE {table} ALTER COLUMN {shadow} SET NOT NULL")
    if _check_state(connection, plan, plan.check) is not None:
        ddl(f"ALTER TABLE {table} DROP CONSTRAINT {check}")
    for index in plan.indexes:
        _build_index(connection, plan, index, timeout)
    ddl(";\n".join(_swap(connection, plan)))


def _trigger(connection: Connection, op: AlterULIDStorageOp, plan: Plan, ddl: Any) -> None:
    sql = op.convert_sql(dialect_row(connection.dialect))
    assert sql is not None
    column, shadow = plan.q(connection, plan.column), plan.q(connection, plan.shadow)
    function = plan.q(connection, plan.function, schema=True)
    converted = sql.convert(f"NEW.{column}", plan.from_kind, plan.to_kind)
    # CREATE OR REPLACE: a rerun leaves it as it is, and no table lock is taken.
    run(
        connection,
        f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $ulid$ "
        f"BEGIN NEW.{shadow} := {converted}; RETURN NEW; END $ulid$",
    )
    exists = connection.execute(
        sa.text("SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass(:table) AND tgname = :name"),
        {"table": plan.q(connection, plan.table, schema=True), "name": plan.trigger},
    ).first()
    if exists is None:
        ddl(
            f"CREATE TRIGGER {plan.q(connection, plan.trigger)} BEFORE INSERT OR UPDATE ON "
            f"{plan.q(connection, plan.table, schema=True)} FOR EACH ROW EXECUTE FUNCTION "
            f"{function}()"
        )


def _copy(connection: Connection, op: AlterULIDStorageOp, plan: Plan) -> int:
    """Copy the rows the trigger has not seen, in key order, recording each batch's end."""
    sql = op.convert_sql(dialect_row(connection.dialect))
    assert sql is not None
    dialect = connection.dialect
    table = plan.q(connection, plan.table, schema=True)
    key, column, shadow = (plan.q(connection, n) for n in (plan.key, plan.column, plan.shadow))
    state_table = quote(dialect, STATE_TABLE, plan.schema)

    def statement(after: bool) -> sa.TextClause:
        where = f"{key} <= CAST(:high AS {plan.key_type}) "
        if after:
            where += f"AND {key} > CAST(:last AS {plan.key_type}) "
        return sa.text(
            f"WITH batch AS (SELECT {key} AS k FROM {table} WHERE {where}"
            f"ORDER BY {key} LIMIT :n), "
            "top AS (SELECT k FROM batch ORDER BY k DESC LIMIT 1), "
            # The trigger converts (once): the row is only touched.
            f"moved AS (UPDATE {table} AS t SET {column} = t.{column} FROM batch "
            f"WHERE t.{key} = batch.k AND t.{shadow} IS NULL AND t.{column} IS NOT NULL "
            "RETURNING 1), "
            f"mark AS (UPDATE {state_table} SET last_key = (SELECT CAST(k AS TEXT) FROM top) "
            "WHERE table_name = :t AND column_name = :c AND EXISTS (SELECT 1 FROM top) "
            "RETURNING 1) "
            "SELECT (SELECT CAST(k AS TEXT) FROM top), (SELECT count(*) FROM moved), "
            "(SELECT count(*) FROM mark)"
        )

    last = connection.execute(
        sa.text(f"SELECT last_key FROM {state_table} WHERE table_name = :t AND column_name = :c"),
        {"t": plan.table, "c": plan.column},
    ).scalar()
    total = int(
        connection.execute(
            sa.text("SELECT GREATEST(reltuples, 0) FROM pg_class WHERE oid = to_regclass(:t)"),
            {"t": table},
        ).scalar()
        or 0
    )
    # The trigger existed before this read: a row with a higher key was
    # written after it, through it (the equality check proves it later).
    high = connection.execute(
        # Qualified: ORDER BY a bare name would sort by the text output column.
        sa.text(f"SELECT CAST(t.{key} AS TEXT) FROM {table} AS t ORDER BY t.{key} DESC LIMIT 1")
    ).scalar()
    if high is None:
        return 0
    resume = [last]

    def batch(limit: int) -> int | None:
        params = {"last": resume[0], "high": high, "n": limit, "t": plan.table, "c": plan.column}
        top, moved, _ = connection.execute(statement(resume[0] is not None), params).one()
        if top is None:
            return None
        resume[0] = top
        return int(moved)

    loop = BatchLoop(
        plan.table,
        plan.column,
        op.batch_size,
        pause=op.pause,
        progress=op.progress,
        total=total,
        what="copy",
    )
    try:
        return run_batches(loop, batch)[0]
    except sa.exc.DBAPIError as exc:
        if op.checked_before(plan.from_kind) and not exc.connection_invalidated:
            bad = f"{shadow} IS NULL AND {sql.bad_text(column, plan.from_kind)}"
            check_text(connection, table, column, bad, op, exc)
        raise


def _prove_same(connection: Connection, op: AlterULIDStorageOp, plan: Plan, ddl: Any) -> None:
    """Prove every row's shadow is its converted value: a CHECK, ``NOT VALID`` then validated.

    The trigger keeps the shadow in step, but a session that skips triggers
    (``session_replication_role = replica``) does not run it; a CHECK runs
    for every session. Rows such a session wrote are converted again, then
    the check is validated again. The check goes with the old column.
    """
    sql = op.convert_sql(dialect_row(connection.dialect))
    assert sql is not None
    table = plan.q(connection, plan.table, schema=True)
    column, shadow = plan.q(connection, plan.column), plan.q(connection, plan.shadow)
    converted = sql.convert(column, plan.from_kind, plan.to_kind)
    same = plan.q(connection, plan.same)
    if _check_state(connection, plan, plan.same) is None:
        ddl(
            f"ALTER TABLE {table} ADD CONSTRAINT {same} CHECK "
            f"({shadow} IS NOT DISTINCT FROM {converted}) NOT VALID"
        )
    for round_ in range(3):
        if _check_state(connection, plan, plan.same):
            return
        try:
            # SHARE UPDATE EXCLUSIVE: writers go on while it scans.
            ddl(f"ALTER TABLE {table} VALIDATE CONSTRAINT {same}")
            return
        except sa.exc.DBAPIError as exc:
            if exc.connection_invalidated:
                raise
            if op.checked_before(plan.from_kind):
                bad = sql.bad_text(column, plan.from_kind)
                check_text(connection, table, column, bad, op, exc)
            if round_ == 2 or not isinstance(exc, sa.exc.IntegrityError):
                raise
        fixed = run(
            connection,
            f"UPDATE {table} SET {shadow} = {converted} "
            f"WHERE {shadow} IS DISTINCT FROM {converted}",
        ).rowcount
        logger.warning(
            "%s: %s rows of %s were written without the trigger; converted again",
            op.op_name,
            fixed,
            plan.table,
        )


def _check_state(connection: Connection, plan: Plan, name: str) -> bool | None:
    row = connection.execute(
        sa.text(
            "SELECT convalidated FROM pg_constraint "
            "WHERE conrelid = to_regclass(:table) AND conname = :name AND contype = 'c'"
        ),
        {"table": plan.q(connection, plan.table, schema=True), "name": name},
    ).first()
    return None if row is None else bool(row[0])


def _build_index(connection: Connection, plan: Plan, index: Index, timeout: float) -> None:
    """``CREATE [UNIQUE] INDEX CONCURRENTLY`` on the shadow; an INVALID leftover rebuilt."""
    columns = ", ".join(
        plan.q(connection, plan.shadow if c == plan.column else c) for c in index.columns
    )
    unique = "UNIQUE " if index.unique else ""
    table = plan.q(connection, plan.table, schema=True)
    build_index_concurrently(
        connection,
        f"CREATE {unique}INDEX CONCURRENTLY {plan.q(connection, index.shadow)} "
        f"ON {table} ({columns})",
        table=table,
        name=index.shadow,
        qualified=plan.q(connection, index.shadow, schema=True),
        lock_timeout=timeout,
    )


def _swap(connection: Connection, plan: Plan) -> list[str]:
    """The swap's statements, sent as one: PostgreSQL runs them as one transaction."""
    dialect = connection.dialect
    table = plan.q(connection, plan.table, schema=True)
    column, shadow = plan.q(connection, plan.column), plan.q(connection, plan.shadow)
    statements = [
        f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE",
        f"DROP TRIGGER {plan.q(connection, plan.trigger)} ON {table}",
        f"DROP FUNCTION {plan.q(connection, plan.function, schema=True)}()",
        # Drops the old indexes and constraints with it; no data is rewritten.
        f"ALTER TABLE {table} DROP COLUMN {column}",
        f"ALTER TABLE {table} RENAME COLUMN {shadow} TO {column}",
    ]
    for index in plan.indexes:
        name, built = plan.q(connection, index.name), plan.q(connection, index.shadow)
        if index.constraint is not None:
            kind = "PRIMARY KEY" if index.constraint == "p" else "UNIQUE"
            statements.append(
                f"ALTER TABLE {table} ADD CONSTRAINT {name} {kind} USING INDEX {built}"
            )
        else:
            statements.append(
                f"ALTER INDEX {plan.q(connection, index.shadow, schema=True)} RENAME TO {name}"
            )
    if plan.default is not None:
        statements.append(f"ALTER TABLE {table} ALTER COLUMN {column} SET DEFAULT {plan.default}")
    if plan.comment is not None:
        statements.append(
            f"COMMENT ON COLUMN {table}.{column} IS {_literal(dialect, plan.comment)}"
        )
    statements.extend(_forget(dialect, plan.table, plan.column, plan.schema))
    return statements


def _forget(dialect: Any, table: str, column: str, schema: str | None) -> list[str]:
    """Statements removing the conversion's row, and the state table after the last one."""
    state = quote(dialect, STATE_TABLE, schema)
    return [
        _STATE_LOCK,
        f"DELETE FROM {state} WHERE table_name = {_literal(dialect, table)} "
        f"AND column_name = {_literal(dialect, column)}",
        # The last conversion takes its table with it (autogenerate would see it).
        f"DO $ulid$ BEGIN IF NOT EXISTS (SELECT 1 FROM {state}) THEN DROP TABLE {state}; "
        "END IF; END $ulid$",
    ]


def _literal(dialect: Any, text: str) -> str:
    # The literal is escaped for the driver, and lock_safe_ddl escapes once more.
    literal = sa.String().literal_processor(dialect)  # type: ignore[no-untyped-call]
    return unescape_percent(dialect, str(literal(text)))
