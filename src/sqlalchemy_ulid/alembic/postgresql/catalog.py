"""PostgreSQL's catalog, as the SQL of guards and checks (one place for it).

Each function takes SQL literals (the quoted, qualified table as a string
literal, a bare name as a string literal) and returns an SQL expression, so
that a guard reads the same online (``SELECT <guard>``) and in a script
(``IF <guard> THEN``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect

from ..._dialects._migration import PG_LOCKS
from .._catalog import Catalog
from .._plan.render_pg import dollar_quoted
from .._plan.state import StateSQL, literal

__all__ = [
    "INDEX_ROWS",
    "IN_RUNNER",
    "LOCKS",
    "RUNNER",
    "STATE",
    "UNBOUNDED",
    "KeyCatalog",
    "PostgreSQLCatalog",
    "column_default_missing",
    "column_exists",
    "column_nullable",
    "column_where",
    "constraint_exists",
    "index_ddl",
    "index_named",
    "literal",
    "unique_elsewhere",
]


#: Our statements run without the role's or database's statement_timeout
#: (a whole-table check or a batch on a big table would be cancelled), until
#: the end of their transaction only: nothing stays on a pooled session.
UNBOUNDED = "SET LOCAL statement_timeout = 0"
#: Marks a transaction the online runner opened for its checks, which the
#: script's "outside a transaction" check (for ``psql -1``) must let through.
RUNNER = "SET LOCAL sqlalchemy_ulid.runner = 'on'"
IN_RUNNER = "current_setting('sqlalchemy_ulid.runner', true) = 'on'"


def _lock_set(seconds: float, in_transaction: bool) -> tuple[str, ...]:
    return (f"SET LOCAL lock_timeout = '{max(1, round(seconds * 1000))}ms'",)


def _lock_restore(row: tuple[Any, ...], in_transaction: bool) -> tuple[str, ...]:
    return ()


#: The session's id, the lock-timeout error, who blocks a session.
LOCKS = replace(PG_LOCKS, set=_lock_set, restore=_lock_restore, peer=None)

STATE = StateSQL(
    create=(
        "CREATE TABLE IF NOT EXISTS {table} (op text NOT NULL, target text NOT NULL, "
        "plan text NOT NULL, step text NOT NULL, done boolean NOT NULL DEFAULT false, "
        "PRIMARY KEY (op, target))"
    ),
    upsert=(
        "INSERT INTO {table} (op, target, plan, step, done) "
        "VALUES ({op}, {target}, {plan}, {step}, {done}) "
        "ON CONFLICT (op, target) DO UPDATE SET plan = EXCLUDED.plan, step = EXCLUDED.step, "
        "done = EXCLUDED.done"
    ),
    insert_new=(
        "INSERT INTO {table} (op, target, plan, step, done) "
        "VALUES ({op}, {target}, {plan}, {step}, {done}) ON CONFLICT (op, target) DO NOTHING"
    ),
    # One lock for every transaction that creates, joins or drops a state
    # table (the storage op's earlier state table took it too).
    lock=(
        "BEGIN",
        UNBOUNDED,
        "SELECT pg_advisory_xact_lock(hashtext('sqlalchemy_ulid.ulid_storage_conversions'))",
    ),
    unlock=("COMMIT",),
    abort=("ROLLBACK",),
    # A transaction's lock (none lives on a session: a pooler may hand it on).
    # Named for the table's schema too: the same op on a table of the same
    # name in another schema is another run.
    schema="COALESCE(current_schema(), '')",
    claim="SELECT pg_try_advisory_xact_lock(hashtext({schema} || ':' || {name}))::int",
    release="",
    # A script's steps are many transactions: the same key, locked for the
    # session (run a script on a direct connection, as psql does).
    script_claim="pg_try_advisory_lock(hashtext({schema} || ':' || {name}))",
    script_release="pg_advisory_unlock(hashtext({schema} || ':' || {name}))",
)


def _attribute(table: str, column: str, where: str = "TRUE") -> str:
    return (
        f"EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = to_regclass({table}) "
        f"AND a.attname = {column} AND a.attnum > 0 AND NOT a.attisdropped AND {where})"
    )


def column_where(table: str, column: str, where: str) -> str:
    """SQL true when the table has the column and ``where`` holds for its row ``a``."""
    return _attribute(table, column, where)


def column_exists(table: str, column: str) -> str:
    """SQL true when the table has the column."""
    return _attribute(table, column)


def column_nullable(table: str, column: str) -> str:
    """SQL true when the column exists and takes NULL."""
    return _attribute(table, column, "NOT a.attnotnull")


def column_default_missing(table: str, column: str) -> str:
    """SQL true when the column exists without a DEFAULT."""
    return _attribute(table, column, "NOT a.atthasdef")


def constraint_exists(table: str, name: str, where: str = "TRUE") -> str:
    """SQL true when the table has the constraint ``name`` (``where`` on ``c``)."""
    return (
        "EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conrelid = to_regclass("
        f"{table}) AND c.conname = {name} AND {where})"
    )


def index_named(table: str, name: str, where: str = "TRUE") -> str:
    """An index ``name`` on the table (``where`` on ``x``, its pg_index row)."""
    return (
        "EXISTS (SELECT 1 FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        f"WHERE x.indrelid = to_regclass({table}) AND i.relname = {name} AND {where})"
    )


def unique_elsewhere(table: str, column: str, name: str) -> str:
    """A valid unique index on the column alone, under another name than ``name``."""
    return (
        "EXISTS (SELECT 1 FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        "JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = x.indkey[0] "
        f"WHERE x.indrelid = to_regclass({table}) AND x.indisunique AND x.indisvalid "
        f"AND x.indnkeyatts = 1 AND x.indpred IS NULL AND x.indexprs IS NULL "
        f"AND a.attname = {column} AND i.relname <> {name})"
    )


#: The rows ``index_ddl`` reads: an index ``x``, its ``pg_class`` row ``i``,
#: its table's ``t``, and ``c``, the unique constraint that owns it (if one does).
INDEX_ROWS = (
    "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
    "JOIN pg_class t ON t.oid = x.indrelid LEFT JOIN pg_constraint c "
    "ON c.conindid = x.indexrelid AND c.conrelid = x.indrelid AND c.contype = 'u'"
)


def index_ddl(table_sql: str) -> str:
    """SQL of the DDL making an index of ``INDEX_ROWS`` again (online and offline), as printed.

    Storage parameters and ``NULLS NOT DISTINCT`` come back with it; a unique
    constraint's index as the constraint, on ``table_sql`` (SQL of the quoted,
    qualified table). ``ON ONLY`` goes, or a partitioned table's partitions had none.
    """
    return (
        "CASE WHEN c.oid IS NOT NULL THEN format('ALTER TABLE %s ADD CONSTRAINT %I %s', "
        f"{table_sql}, c.conname, pg_get_constraintdef(c.oid)) "
        "WHEN t.relkind = 'p' THEN replace(pg_get_indexdef(x.indexrelid), "
        "format('INDEX %I ON ONLY ', i.relname), format('INDEX %I ON ', i.relname)) "
        "ELSE pg_get_indexdef(x.indexrelid) END"
    )


def _of_constraint(what: str, table_sql: str, name: str) -> str:
    """SQL of ``what`` (on ``c``, its pg_constraint row) of the table's constraint ``name``."""
    return (
        f"(SELECT {what} FROM pg_constraint c WHERE "
        f"c.conrelid = to_regclass({literal(table_sql)}) AND c.conname = {literal(name)})"
    )


class KeyCatalog:
    """The key conversion's swap guards (SQL true while a change is still to do), and comments.

    Each method takes the table as (its quoted, qualified name, its name, its
    schema), the form every database's are given.
    """

    #: a string literal
    literal = staticmethod(literal)

    @staticmethod
    def constraint_comment(table_sql: str, table: str, schema: str | None, name: str) -> str:
        """SQL of the comment on the table's constraint ``name`` (NULL: none)."""
        return _of_constraint("obj_description(c.oid, 'pg_constraint')", table_sql, name)

    @staticmethod
    def primary_key_comment(table_sql: str, table: str, schema: str | None, name: str) -> str:
        """SQL of the comment on the table's primary key constraint ``name`` (NULL: none)."""
        return KeyCatalog.constraint_comment(table_sql, table, schema, name)

    @staticmethod
    def foreign_key_validated(table_sql: str, table: str, schema: str | None, name: str) -> str:
        """SQL true unless the table's foreign key ``name`` is NOT VALID."""
        return _of_constraint("c.convalidated", table_sql, name)

    @staticmethod
    def unique_constraint(table_sql: str, table: str, schema: str | None, name: str) -> str:
        """SQL true when the index ``name`` is the table's unique constraint's."""
        return constraint_exists(literal(table_sql), literal(name), "c.contype = 'u'")

    @staticmethod
    def not_null_name(table_sql: str, table: str, schema: str | None, name: str) -> str:
        """SQL of the name of column ``name``'s NOT NULL constraint (PostgreSQL 18+; NULL: none)."""
        return (
            "(SELECT c.conname FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = "
            f"c.conrelid AND a.attnum = c.conkey[1] WHERE c.conrelid = to_regclass("
            f"{literal(table_sql)}) AND c.contype = 'n' AND a.attname = {literal(name)})"
        )

    @staticmethod
    def named_not_null(table: str, column: str, name: str) -> str:
        """The DDL making ``column`` NOT NULL under the constraint ``name`` (all quoted)."""
        return f"ALTER TABLE {table} ADD CONSTRAINT {name} NOT NULL {column}"

    @staticmethod
    def index_comment(table_sql: str, table: str, schema: str | None, name: str) -> str:
        """SQL of the comment on the table's index ``name`` (NULL: none)."""
        return (
            "(SELECT obj_description(x.indexrelid, 'pg_class') FROM pg_index x JOIN pg_class i "
            f"ON i.oid = x.indexrelid WHERE x.indrelid = to_regclass({literal(table_sql)}) "
            f"AND i.relname = {literal(name)})"
        )

    @staticmethod
    def index_definition(table_sql: str, table: str, schema: str | None, name: str) -> str:
        """SQL of the DDL that creates the table's index (or unique constraint) ``name`` again."""
        return (
            f"(SELECT {index_ddl(literal(table_sql))} {INDEX_ROWS} "
            f"WHERE x.indrelid = to_regclass({literal(table_sql)}) AND i.relname = {literal(name)})"
        )

    @staticmethod
    def create_index(statement: str, comment: str | None) -> str:
        """``CREATE INDEX`` or ``ADD PRIMARY KEY`` as compiled: the comment comes after."""
        return statement

    @staticmethod
    def comment_sql(
        table_sql: str, schema_sql: str | None, index: bool, name_sql: str, comment: str
    ) -> str | None:
        """The statement giving a constraint (or an index) its comment back."""
        if index:
            name = f"{schema_sql}.{name_sql}" if schema_sql else name_sql
            return f"COMMENT ON INDEX {name} IS {literal(comment)}"
        return f"COMMENT ON CONSTRAINT {name_sql} ON {table_sql} IS {literal(comment)}"

    @staticmethod
    def has_column(table_sql: str, table: str, schema: str | None, column: str) -> str:
        """SQL true when the table has the column."""
        return column_exists(literal(table_sql), literal(column))

    @staticmethod
    def nullable(table_sql: str, table: str, schema: str | None, column: str) -> str:
        """SQL true when the column exists and takes NULL."""
        return column_nullable(literal(table_sql), literal(column))

    @staticmethod
    def comment_differs(
        table_sql: str, table: str, schema: str | None, column: str, comment: str
    ) -> str:
        """SQL true when the column exists with another comment than ``comment``."""
        where = f"col_description(a.attrelid, a.attnum) IS DISTINCT FROM {literal(comment)}"
        return _attribute(literal(table_sql), literal(column), where)

    @staticmethod
    def has_primary_key(table_sql: str, table: str, schema: str | None) -> str:
        """SQL true when the table has a primary key."""
        return (
            "EXISTS (SELECT 1 FROM pg_index x WHERE x.indrelid = "
            f"to_regclass({literal(table_sql)}) AND x.indisprimary)"
        )

    @staticmethod
    def has_foreign_key(table_sql: str, table: str, schema: str | None, name: str) -> str:
        """SQL true when the table has the foreign key ``name``."""
        return constraint_exists(literal(table_sql), literal(name), "c.contype = 'f'")

    @staticmethod
    def has_index(table_sql: str, table: str, schema: str | None, name: str) -> str:
        """SQL true when the table has an index (or a unique constraint's) named ``name``."""
        return index_named(literal(table_sql), literal(name))


def _column_users(table: str, column: str) -> str:
    """SQL of the names (``name``) of the triggers, views and rules using the column.

    ``table`` (the quoted, qualified name) and ``column`` are SQL expressions.
    """
    return (
        "SELECT 'the trigger ' || t.tgname AS name FROM pg_trigger t JOIN pg_proc p "
        f"ON p.oid = t.tgfoid WHERE t.tgrelid = to_regclass({table}) AND NOT t.tgisinternal "
        f"AND strpos(lower(p.prosrc), lower({column})) > 0 "
        f"UNION {rewrite_users(table, column)}"
    )


def rewrite_users(table: str, column: str) -> str:
    """SQL of the names (``name``) of the views and rules reading the column (SQL arguments).

    PostgreSQL changes neither the type of such a column nor drops it.
    """
    return (
        "SELECT CASE WHEN r.rulename = '_RETURN' THEN 'the view ' || v.relname "
        "ELSE 'the rule ' || r.rulename END AS name FROM pg_depend d "
        "JOIN pg_rewrite r ON r.oid = d.objid JOIN pg_class v ON v.oid = r.ev_class "
        "JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid "
        f"WHERE d.classid = 'pg_rewrite'::regclass AND d.refobjid = to_regclass({table}) "
        f"AND a.attname = {column}"
    )


class PostgreSQLCatalog(Catalog):
    """PostgreSQL's: reflection reads its columns whole, and its sessions are always strict."""

    __dialect__ = ("postgresql",)

    def column_users(
        self, connection: Connection, table: str, column: str, schema: str | None
    ) -> list[str]:
        """Triggers whose function's source names the column, views and rules reading it.

        PL/pgSQL is not in ``pg_depend``: after the drop every write fails.
        """
        preparer = connection.dialect.identifier_preparer
        table_sql = ".".join(preparer.quote(part) for part in (schema, table) if part)
        query = _column_users(":table", ":column") + " ORDER BY 1"
        found = connection.execute(sa.text(query), {"table": table_sql, "column": column})
        return [str(name) for name in found.scalars()]

    def plain_session(self, connection: Connection) -> contextlib.AbstractContextManager[None]:
        """Turn a role's or database's ``statement_timeout`` off for the op's transaction.

        ``SET LOCAL``: it ends with the migration's transaction, so nothing
        stays on the session (a pooler may hand it on), and it is put back
        when the op is done, for the migration's next statements. An online
        op's own transactions (after ``autocommit_block()`` committed this
        one) each turn it off again (``unbounded_frame``).
        """
        if not connection.in_transaction():
            return contextlib.nullcontext()
        saved = str(connection.exec_driver_sql("SHOW statement_timeout").scalar())
        if saved == "0":
            return contextlib.nullcontext()
        return _unbounded_transaction(connection, saved)

    def column_users_check(
        self,
        dialect: Dialect,
        table: str,
        column: str,
        schema: str | None,
        refusal: tuple[str, str],
    ) -> str:
        """A DO block raising, before any change, when a trigger, view or rule uses the column."""
        preparer = dialect.identifier_preparer
        table_sql = literal(".".join(preparer.quote(part) for part in (schema, table) if part))
        users = _column_users(table_sql, literal(column))
        body = (
            "\nDECLARE\n  users text;\nBEGIN\n"
            f"  IF {_attribute(table_sql, literal(column))} THEN\n"
            f"    SELECT string_agg(u.name, ', ' ORDER BY u.name) INTO users FROM ({users}) AS u;\n"
            "    IF users IS NOT NULL THEN\n"
            f"      RAISE EXCEPTION '%', {literal(refusal[0])} || users || {literal(refusal[1])};\n"
            "    END IF;\n  END IF;\nEND\n"
        )
        return f"DO {dollar_quoted('check', body)};"


@contextlib.contextmanager
def _unbounded_transaction(connection: Connection, saved: str) -> Iterator[None]:
    """``SET LOCAL statement_timeout = 0`` for the block, ``saved`` again after it.

    After a failure nothing is put back: the transaction is rolled back,
    and its ``SET LOCAL`` with it.
    """
    connection.exec_driver_sql(UNBOUNDED)
    yield
    # Not when autocommit_block() ended the transaction (the next one has the session's).
    if (
        connection.in_transaction()
        and str(connection.exec_driver_sql("SHOW statement_timeout").scalar()) == "0"
    ):
        connection.execute(
            sa.text("SELECT set_config('statement_timeout', :value, true)"), {"value": saved}
        )
