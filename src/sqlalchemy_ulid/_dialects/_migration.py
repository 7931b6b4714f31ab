"""Migration-only SQL: lock timeouts for DDL, and the primary-key conversion's catalog queries.

These belong to the Alembic layer; they stay importable from
``sqlalchemy_ulid._dialects`` until the migration engine gives each database
its own ``alembic/<database>/`` package.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Dialect

__all__ = [
    "CHECK_CONSTRAINT",
    "GENERATED_COLUMN",
    "MYSQL_LOCKS",
    "PG_LOCKS",
    "KeyConversionSQL",
    "LockSQL",
    "key_conversion_sql",
    "mysql_check_constraints",
    "mysql_generated_columns",
]


#: How a generated column and a CHECK constraint that use a column are named in a refusal.
GENERATED_COLUMN = "CONCAT('the generated column ', g.COLUMN_NAME)"
CHECK_CONSTRAINT = "CONCAT('the CHECK constraint ', g.CONSTRAINT_NAME)"


def mysql_generated_columns(column: str, table: str, what: str = GENERATED_COLUMN) -> str:
    """MariaDB/MySQL: a query of the generated columns computed from a column.

    ``column`` is an SQL expression of the column's name, ``table`` a
    condition on ``g`` (``g.TABLE_SCHEMA``, ``g.TABLE_NAME``) naming its
    table, ``what`` what to select (one description per row, or an
    aggregate of them). The catalog writes a generation expression with its
    names in backticks. The online key conversion and its offline
    (``--sql``) script refuse what this finds: the swap's ``DROP COLUMN``
    fails on it.
    """
    return (
        f"SELECT {what} FROM information_schema.COLUMNS g WHERE g.IS_GENERATED = 'ALWAYS' "
        f"AND g.GENERATION_EXPRESSION LIKE CONCAT('%`', REPLACE({column}, '`', '``'), '`%') "
        f"AND ({table})"
    )


def mysql_check_constraints(
    column: str, table: str, what: str = CHECK_CONSTRAINT, schema: str | None = None
) -> str:
    """MariaDB/MySQL: a query of the CHECK constraints whose clause names a column.

    As :func:`mysql_generated_columns` (``g`` is the constraint's row of
    ``TABLE_CONSTRAINTS``). The swap's ``DROP COLUMN`` drops such a
    constraint without a word (MariaDB, one naming only the column) or
    fails on it (one naming other columns too; MySQL). ``schema`` (an
    expression) names ``k``'s database too, so that the server reads that
    database's constraints only, not every database's.
    """
    only = f"k.CONSTRAINT_SCHEMA = {schema} AND " if schema else ""
    return (
        f"SELECT {what} FROM information_schema.TABLE_CONSTRAINTS g "
        f"JOIN information_schema.CHECK_CONSTRAINTS k ON {only}k.CONSTRAINT_SCHEMA = "
        "g.CONSTRAINT_SCHEMA AND k.CONSTRAINT_NAME = g.CONSTRAINT_NAME "
        "WHERE g.CONSTRAINT_TYPE = 'CHECK' "
        f"AND k.CHECK_CLAUSE LIKE CONCAT('%`', REPLACE({column}, '`', '``'), '`%') "
        f"AND ({table})"
    )


#: The online op's ``:table`` (the name as it quotes it, only if needed) is ``g``'s table.
_QUOTED_TABLE_IS_G = (
    "(g.TABLE_SCHEMA = DATABASE() AND :table IN (g.TABLE_NAME, "
    "CONCAT('`', REPLACE(g.TABLE_NAME, '`', '``'), '`'))) "
    "OR :table IN (CONCAT(g.TABLE_SCHEMA, '.', g.TABLE_NAME), "
    "CONCAT('`', REPLACE(g.TABLE_SCHEMA, '`', '``'), '`.', g.TABLE_NAME), "
    "CONCAT(g.TABLE_SCHEMA, '.`', REPLACE(g.TABLE_NAME, '`', '``'), '`'), "
    "CONCAT('`', REPLACE(g.TABLE_SCHEMA, '`', '``'), '`.`', "
    "REPLACE(g.TABLE_NAME, '`', '``'), '`'))"
)


@dataclass(frozen=True)
class LockSQL:
    """One dialect's lock timeouts, for DDL that must not queue the application.

    A DDL statement waiting for its lock makes every later query on the table
    wait behind it; these bound that wait (see ``alembic/_locks.py``).
    """

    #: our session's id (PostgreSQL pid, MariaDB connection id)
    session_id: str
    #: one row: the session's current lock timeout setting(s)
    read: str
    #: (seconds, inside a transaction) -> statements setting the timeout(s)
    set: Callable[[float, bool], tuple[str, ...]]
    #: (the row read, inside a transaction) -> statements putting it back
    restore: Callable[[tuple[Any, ...], bool], tuple[str, ...]]
    #: error numbers / SQLSTATEs of "lock wait timed out"
    timeout_codes: frozenset[object]
    #: the sessions blocking session ``{pid}``: (id, state, query, seconds in transaction)
    blockers: str
    #: a failed statement aborts the transaction, so retry inside a savepoint
    transactional: bool
    #: one row: the client port the server sees (NULL over a Unix socket), and
    #: the server's socket directories and port; tells a proxy in between
    #: (see ``alembic/_proxy.py``). None: not checked.
    peer: str | None = None


def _pg_lock_set(seconds: float, in_transaction: bool) -> tuple[str, ...]:
    # statement_timeout off too: a role's or database's would cancel a
    # statement of ours that takes long on a big table (its lock waits stay
    # bounded by lock_timeout).
    scope = "LOCAL " if in_transaction else ""
    return (
        f"SET {scope}lock_timeout = '{max(1, round(seconds * 1000))}ms'",
        f"SET {scope}statement_timeout = 0",
    )


def _pg_lock_restore(row: tuple[Any, ...], in_transaction: bool) -> tuple[str, ...]:
    scope = "LOCAL " if in_transaction else ""
    return tuple(
        f"SET {scope}{name} = '" + str(value).replace("'", "''") + "'"
        for name, value in zip(("lock_timeout", "statement_timeout"), row, strict=True)
    )


def _mysql_lock_set(seconds: float, in_transaction: bool) -> tuple[str, ...]:
    # Whole seconds only. Below one second: 0, which fails at once if the
    # lock is taken (NOWAIT); the retries then do the waiting, between tries.
    whole = int(seconds)
    return (
        f"SET SESSION lock_wait_timeout = {whole}",
        f"SET SESSION innodb_lock_wait_timeout = {max(1, whole)}",
    )


def _mysql_lock_restore(row: tuple[Any, ...], in_transaction: bool) -> tuple[str, ...]:
    return (
        f"SET SESSION lock_wait_timeout = {int(row[0])}",
        f"SET SESSION innodb_lock_wait_timeout = {int(row[1])}",
    )


PG_LOCKS = LockSQL(
    session_id="SELECT pg_backend_pid()",
    read="SELECT current_setting('lock_timeout'), current_setting('statement_timeout')",
    set=_pg_lock_set,
    restore=_pg_lock_restore,
    timeout_codes=frozenset({"55P03"}),  # lock_not_available
    blockers=(
        "SELECT a.pid, a.state, a.query, "
        "EXTRACT(EPOCH FROM clock_timestamp() - a.xact_start) "
        "FROM pg_stat_activity a WHERE a.pid = ANY(pg_blocking_pids({pid})) ORDER BY a.pid"
    ),
    transactional=True,
    peer=(
        "SELECT inet_client_port(), current_setting('unix_socket_directories'), "
        "current_setting('port')"
    ),
)
# MariaDB has no pg_blocking_pids(): a metadata lock is held by a session
# with an open transaction on the table, and INNODB_TRX lists those (a
# transaction that only read is there too, from its first read).
MYSQL_LOCKS = LockSQL(
    session_id="SELECT CONNECTION_ID()",
    read="SELECT @@SESSION.lock_wait_timeout, @@SESSION.innodb_lock_wait_timeout",
    set=_mysql_lock_set,
    restore=_mysql_lock_restore,
    timeout_codes=frozenset({1205}),  # ER_LOCK_WAIT_TIMEOUT
    blockers=(
        "SELECT p.ID, TRIM(CONCAT_WS(' ', p.COMMAND, p.STATE)), "
        "COALESCE(p.INFO, t.trx_query), "
        "TIMESTAMPDIFF(SECOND, t.trx_started, NOW()) "
        "FROM information_schema.INNODB_TRX t "
        "JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id "
        "WHERE p.ID <> {pid} ORDER BY p.ID"
    ),
    transactional=False,
)


@dataclass(frozen=True)
class KeyConversionSQL:
    """One dialect's SQL for converting a primary key and its foreign keys.

    Templates take ``{table}`` (quoted, schema-qualified), ``{column}``
    (quoted) and ``{type}`` (compiled); the queries take ``:schema``
    (None: the connection's) and ``:tables`` (an expanding list of names).
    """

    #: makes a column NOT NULL
    set_not_null: str
    #: gives a column its comment (``{comment}``: a string literal; ``{null}``:
    #: ``NULL`` or ``NOT NULL``, for the databases that restate the column)
    set_comment: str
    #: names the triggers on the tables: rows of (trigger, table)
    triggers: str
    #: names the views that read the tables: rows of (view, table)
    views: str
    #: names the foreign keys in other schemas that reference the tables:
    #: rows of (constraint, its schema, its table, the referenced table)
    foreign_keys_elsewhere: str
    #: names every foreign key in the schema that references the tables, from
    #: the catalog: rows of (constraint, its table, the referenced table, the
    #: referenced column)
    foreign_keys_to: str
    #: names the indexes that use a column (``:table``, ``:column``) with what
    #: the op would not recreate: rows of (index, access method, has a
    #: predicate, has expressions, has INCLUDE columns, has DESC or NULLS
    #: FIRST, the rest it would lose named in a text, '' for none); None where
    #: the op recreates what reflection reports
    index_options: str | None = None
    #: (index name, what it has) for each index whose key part on ``:column``
    #: has a non-default operator class or another collation than the
    #: column's: the key conversion recreates an index as the catalog prints
    #: it, and those cannot apply to the column's new type. None: none here
    index_own_options: str | None = None
    #: what else uses a column (``:table`` quoted, ``:column``), which ``DROP
    #: COLUMN`` would drop with it (a CHECK constraint, extended statistics, a
    #: policy, a sequence owned by it) or refuse to drop (a generated column):
    #: not indexes, unique, primary and foreign keys (built again or refused
    #: before), NOT NULL (a constraint row since PostgreSQL 18; the op sets it
    #: on the new column), views and triggers (refused before), the column's
    #: DEFAULT or the constraints named ``:same`` and ``:check`` (the ops' own); rows of
    #: one description each (MariaDB/MySQL: generated columns only). None: none here
    dependants: str | None = None
    #: locks a table for the swap (``{tables}``: one quoted name), or None
    #: where DDL commits on its own and a lock would not outlive it
    lock: str | None = None
    #: run once the swap holds its first lock, ``{others}`` the number of
    #: tables still to lock: their waits, all told, become shorter than the
    #: server's deadlock detection, so that a deadlock with a writer waiting
    #: behind a held table ends by the swap's timeout (it lets go and tries
    #: again), never by the server cancelling the writer
    lock_held: str | None = None
    #: locks every table of the swap in one statement, held until ``unlock``
    #: (``{tables}``: the items of ``lock_table``, comma separated), where
    #: DDL commits on its own and ``lock`` would not outlive it: the
    #: catch-up and every step of the swap run under it, as in the script
    lock_tables: str | None = None
    #: one table of ``lock_tables`` (``{table}``: one quoted name, ``{alias}``:
    #: the alias under which the catch-up reads the table it joins)
    lock_table: str | None = None
    #: gives ``lock_tables`` up
    unlock: str | None = None
    #: renames the shadow column into place and restates it whole, in one
    #: statement (``{old}``: the shadow, quoted; ``{null}``; ``{comment}``:
    #: `` COMMENT <literal>`` or empty), where a rename would leave the new
    #: column NULL-able and without its comment until the next statements;
    #: None: a plain rename, then ``set_not_null`` and ``set_comment``
    rename_column: str | None = None


_KEY_CONVERSION: dict[str, KeyConversionSQL] = {
    "postgresql": KeyConversionSQL(
        set_not_null="ALTER TABLE {table} ALTER COLUMN {column} SET NOT NULL",
        set_comment="COMMENT ON COLUMN {table}.{column} IS {comment}",
        triggers=(
            "SELECT t.tgname, c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE NOT t.tgisinternal "
            "AND n.nspname = COALESCE(:schema, current_schema()) AND c.relname IN :tables"
        ),
        # A view is its _RETURN rule; any other rule (CREATE RULE, on the
        # table itself too) names columns in its SQL as a view does.
        views=(
            "SELECT DISTINCT CASE WHEN r.rulename = '_RETURN' THEN v.relname::text "
            "ELSE 'rule ' || r.rulename || ' on ' || v.relname END, c.relname FROM pg_depend d "
            "JOIN pg_rewrite r ON r.oid = d.objid JOIN pg_class v ON v.oid = r.ev_class "
            "JOIN pg_class c ON c.oid = d.refobjid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE d.classid = 'pg_rewrite'::regclass "
            "AND (v.oid <> c.oid OR r.rulename <> '_RETURN') "
            "AND n.nspname = COALESCE(:schema, current_schema()) AND c.relname IN :tables"
        ),
        # Reflection names the referred schema unreliably here: it leaves out
        # a schema on the search path, and guesses wrong when told not to.
        foreign_keys_elsewhere=(
            "SELECT con.conname, ns.nspname, cl.relname, rt.relname FROM pg_constraint con "
            "JOIN pg_class cl ON cl.oid = con.conrelid "
            "JOIN pg_namespace ns ON ns.oid = cl.relnamespace "
            "JOIN pg_class rt ON rt.oid = con.confrelid "
            "JOIN pg_namespace rns ON rns.oid = rt.relnamespace "
            "WHERE con.contype = 'f' AND rns.nspname = COALESCE(:schema, current_schema()) "
            "AND ns.nspname <> rns.nspname AND rt.relname IN :tables"
        ),
        foreign_keys_to=(
            "SELECT con.conname, cl.relname, rt.relname, a.attname FROM pg_constraint con "
            "JOIN pg_class cl ON cl.oid = con.conrelid "
            "JOIN pg_namespace ns ON ns.oid = cl.relnamespace "
            "JOIN pg_class rt ON rt.oid = con.confrelid "
            "JOIN pg_namespace rns ON rns.oid = rt.relnamespace "
            "JOIN pg_attribute a ON a.attrelid = rt.oid AND a.attnum = ANY (con.confkey) "
            "WHERE con.contype = 'f' AND rns.nspname = COALESCE(:schema, current_schema()) "
            "AND ns.nspname = rns.nspname AND rt.relname IN :tables"
        ),
        # pg_depend lists every column an index uses: key, INCLUDE,
        # expression and predicate columns alike. The rebuild names the
        # columns only: another column's collation or operator class, NULLS
        # NOT DISTINCT (read through to_jsonb: PostgreSQL 15+), storage
        # parameters and the replica identity would be lost (the converted
        # column's own collation and operator class do not apply to its
        # new type).
        index_options=(
            "SELECT DISTINCT i.relname, am.amname, x.indpred IS NOT NULL, "
            "x.indexprs IS NOT NULL, x.indnkeyatts <> x.indnatts, "
            "EXISTS (SELECT 1 FROM unnest(x.indoption::int2[]) o WHERE o <> 0), "
            "concat_ws(', ', CASE WHEN to_jsonb(x) ->> 'indnullsnotdistinct' = 'true' "
            "THEN 'NULLS NOT DISTINCT' END, CASE WHEN EXISTS (SELECT 1 FROM "
            "unnest(x.indcollation::oid[], x.indkey::int2[]) k(coll, n) JOIN pg_attribute c "
            "ON c.attrelid = x.indrelid AND c.attnum = k.n WHERE c.attname <> :column "
            "AND k.coll <> c.attcollation) THEN 'a collation of another column' END, "
            "CASE WHEN EXISTS (SELECT 1 FROM unnest(x.indclass::oid[], x.indkey::int2[]) "
            "k(opc, n) JOIN pg_opclass o ON o.oid = k.opc JOIN pg_attribute c "
            "ON c.attrelid = x.indrelid AND c.attnum = k.n WHERE c.attname <> :column "
            "AND NOT o.opcdefault) THEN 'an operator class of another column' END, "
            "CASE WHEN i.reloptions IS NOT NULL THEN 'storage parameters' END, "
            "CASE WHEN x.indisreplident THEN 'REPLICA IDENTITY' END) "
            "FROM pg_depend d JOIN pg_class i ON i.oid = d.objid "
            "JOIN pg_index x ON x.indexrelid = i.oid JOIN pg_am am ON am.oid = i.relam "
            "JOIN pg_class t ON t.oid = d.refobjid "
            "JOIN pg_namespace n ON n.oid = t.relnamespace "
            "JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = d.refobjsubid "
            "WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass "
            "AND NOT x.indisprimary AND n.nspname = COALESCE(:schema, current_schema()) "
            "AND t.relname = :table AND a.attname = :column"
        ),
        index_own_options=(
            "SELECT i.relname, concat_ws(', ', CASE WHEN NOT o.opcdefault "
            "THEN 'the operator class ' || o.opcname END, CASE WHEN k.coll <> a.attcollation "
            "THEN 'a collation' END) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
            "JOIN pg_class t ON t.oid = x.indrelid "
            "JOIN pg_namespace n ON n.oid = t.relnamespace "
            "CROSS JOIN LATERAL unnest(x.indclass::oid[], x.indcollation::oid[], "
            "x.indkey::int2[]) k(opc, coll, att) "
            "JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.att "
            "JOIN pg_opclass o ON o.oid = k.opc "
            "WHERE NOT x.indisprimary AND n.nspname = COALESCE(:schema, current_schema()) "
            "AND t.relname = :table AND a.attname = :column "
            "AND (NOT o.opcdefault OR k.coll <> a.attcollation)"
        ),
        dependants=(
            "WITH col AS (SELECT attrelid, attnum, attacl FROM pg_attribute "
            "WHERE attrelid = to_regclass(:table) AND attname = :column) "
            "SELECT COALESCE((SELECT 'the generated column ' || quote_ident(g.attname) "
            "FROM pg_attrdef f JOIN pg_attribute g "
            "ON g.attrelid = f.adrelid AND g.attnum = f.adnum "
            "WHERE d.classid = 'pg_attrdef'::regclass AND f.oid = d.objid), "
            "pg_describe_object(d.classid, d.objid, d.objsubid)) FROM pg_depend d, col "
            "WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = col.attrelid "
            "AND d.refobjsubid = col.attnum AND d.deptype IN ('n', 'a') "
            "AND d.classid NOT IN ('pg_rewrite'::regclass, 'pg_trigger'::regclass) "
            "AND NOT (d.classid = 'pg_attrdef'::regclass AND d.objid IN "
            "(SELECT oid FROM pg_attrdef WHERE adrelid = col.attrelid AND adnum = col.attnum)) "
            "AND NOT (d.classid = 'pg_class'::regclass AND d.objid IN "
            "(SELECT indexrelid FROM pg_index WHERE indrelid = col.attrelid)) "
            "AND NOT (d.classid = 'pg_constraint'::regclass AND d.objid IN (SELECT oid FROM "
            "pg_constraint WHERE contype IN ('p', 'u', 'f', 'n') "
            "OR conname IN (:same, :check))) "
            "UNION ALL SELECT 'GRANTs on the column' FROM col WHERE attacl IS NOT NULL"
        ),
        lock="LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE",
        lock_held=(
            "SELECT set_config('lock_timeout', greatest(1, floor(1000 * least("
            "extract(epoch FROM current_setting('lock_timeout')::interval), "
            "extract(epoch FROM current_setting('deadlock_timeout')::interval) * 0.8 "
            "/ {others})))::int || 'ms', true)"
        ),
    ),
    "mysql": KeyConversionSQL(
        set_not_null="ALTER TABLE {table} MODIFY {column} {type} NOT NULL",
        set_comment="ALTER TABLE {table} MODIFY {column} {type} {null} COMMENT {comment}",
        lock_tables="LOCK TABLES {tables}",
        lock_table="{table} WRITE, {table} AS {alias} READ",
        unlock="UNLOCK TABLES",
        rename_column="ALTER TABLE {table} CHANGE COLUMN {old} {column} {type} {null}{comment}",
        triggers=(
            "SELECT TRIGGER_NAME, EVENT_OBJECT_TABLE FROM information_schema.TRIGGERS "
            "WHERE EVENT_OBJECT_SCHEMA = COALESCE(:schema, DATABASE()) "
            "AND EVENT_OBJECT_TABLE IN :tables"
        ),
        # MariaDB 10.11 has no VIEW_TABLE_USAGE: a view whose text names
        # the table (quoted, as the server stores it) reads it.
        views=(
            "SELECT v.TABLE_NAME, t.TABLE_NAME FROM information_schema.VIEWS v "
            "JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = v.TABLE_SCHEMA "
            "WHERE v.TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND t.TABLE_NAME IN :tables "
            "AND v.VIEW_DEFINITION LIKE CONCAT('%`', t.TABLE_NAME, '`%')"
        ),
        foreign_keys_elsewhere=(
            "SELECT CONSTRAINT_NAME, CONSTRAINT_SCHEMA, TABLE_NAME, REFERENCED_TABLE_NAME "
            "FROM information_schema.REFERENTIAL_CONSTRAINTS "
            "WHERE UNIQUE_CONSTRAINT_SCHEMA = COALESCE(:schema, DATABASE()) "
            "AND CONSTRAINT_SCHEMA <> UNIQUE_CONSTRAINT_SCHEMA AND REFERENCED_TABLE_NAME IN :tables"
        ),
        foreign_keys_to=(
            "SELECT CONSTRAINT_NAME, TABLE_NAME, REFERENCED_TABLE_NAME, REFERENCED_COLUMN_NAME "
            "FROM information_schema.KEY_COLUMN_USAGE "
            "WHERE REFERENCED_TABLE_SCHEMA = COALESCE(:schema, DATABASE()) "
            "AND TABLE_SCHEMA = REFERENCED_TABLE_SCHEMA AND REFERENCED_TABLE_NAME IN :tables"
        ),
        # COLLATION 'D': a descending part (MariaDB 10.8+, MySQL 8); no
        # predicates or INCLUDE here, and a prefix cannot apply to a key type.
        index_options=(
            "SELECT INDEX_NAME, LOWER(INDEX_TYPE), 0, MAX(COLUMN_NAME IS NULL), 0, "
            "MAX(COALESCE(COLLATION, '') = 'D'), '' FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :table "
            "AND INDEX_NAME <> 'PRIMARY' AND INDEX_NAME IN (SELECT INDEX_NAME FROM "
            "information_schema.STATISTICS WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) "
            "AND TABLE_NAME = :table AND COLUMN_NAME = :column) "
            "GROUP BY INDEX_NAME, INDEX_TYPE"
        ),
        # A generated column naming the column: DROP COLUMN fails (error
        # 1054) in the middle of the swap; a CHECK constraint naming it is
        # dropped with it, or DROP COLUMN fails.
        dependants=(
            mysql_generated_columns(":column", _QUOTED_TABLE_IS_G)
            + " UNION ALL "
            + mysql_check_constraints(":column", _QUOTED_TABLE_IS_G)
        ),
    ),
}
_KEY_CONVERSION["mariadb"] = _KEY_CONVERSION["mysql"]


def key_conversion_sql(dialect: Dialect) -> KeyConversionSQL | None:
    """Return the dialect's primary-key conversion SQL (None: not supported here).

    Example:
        >>> from sqlalchemy.dialects import sqlite
        >>> key_conversion_sql(sqlite.dialect()) is None
        True
    """
    return _KEY_CONVERSION.get(dialect.name)
