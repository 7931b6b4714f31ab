"""MariaDB's catalog (``information_schema``), as the SQL of guards and checks.

Each function returns an SQL expression that reads the same online
(``SELECT <guard>``) and in a script (``IF <guard> THEN``). ``where`` is the
condition naming the table (:func:`table_where`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect

from ..._dialects._migration import MYSQL_LOCKS
from .._catalog import Catalog
from .._plan.render_mariadb import compound, signal
from .._plan.state import StateSQL, literal

__all__ = [
    "LOCKS",
    "STATE",
    "KeyCatalog",
    "MariaDBCatalog",
    "column",
    "column_exists",
    "lit",
    "table_where",
]


def lit(text: str) -> str:
    """A MariaDB string literal (the scripts turn NO_BACKSLASH_ESCAPES off)."""
    return literal(text, backslashes=True)


def _no_set(seconds: float, in_transaction: bool) -> tuple[str, ...]:
    return ()


def _no_restore(row: tuple[Any, ...], in_transaction: bool) -> tuple[str, ...]:
    return ()


#: The session's id, the lock-timeout error, who blocks a session. A
#: metadata lock is held by a session with an open transaction on the table,
#: and INNODB_TRX lists those (a transaction that only read is there too).
LOCKS = replace(MYSQL_LOCKS, set=_no_set, restore=_no_restore)

#: The sql_mode names that stand for a set of modes including ANSI_QUOTES.
_QUOTING_MODES = ("ANSI", "DB2", "MAXDB", "MSSQL", "ORACLE", "POSTGRESQL")

#: The name of the state table's lock (``{database}``: SQL of its database),
#: and of a run's own lock (``{schema}``: SQL of the table's database,
#: ``{name}``: the op and target, hashed).
_STATE_LOCK = "CONCAT('sqlalchemy_ulid_state:', SHA1({database}))"
_RUN_LOCK = "CONCAT('sqlalchemy_ulid:', SHA1(CONCAT({schema}, ':', {name})))"

STATE = StateSQL(
    create=(
        "CREATE TABLE IF NOT EXISTS {table} (op VARCHAR(64) NOT NULL, "
        "target VARCHAR(190) NOT NULL, plan VARCHAR(64) NOT NULL, step VARCHAR(190) NOT NULL, "
        "done BOOL NOT NULL DEFAULT FALSE, PRIMARY KEY (op, target)) "
        "ENGINE=InnoDB CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
    ),
    upsert=(
        "INSERT INTO {table} (op, target, plan, step, done) "
        "VALUES ({op}, {target}, {plan}, {step}, {done}) "
        "ON DUPLICATE KEY UPDATE plan = VALUES(plan), step = VALUES(step), done = VALUES(done)"
    ),
    insert_new=(
        "INSERT IGNORE INTO {table} (op, target, plan, step, done) "
        "VALUES ({op}, {target}, {plan}, {step}, {done})"
    ),
    # A named lock of the session (DDL commits on its own here): at most 600 s.
    # Named locks are the server's: each database's state table has its own.
    lock=(f"DO GET_LOCK({_STATE_LOCK}, 600)",),
    unlock=(f"DO RELEASE_LOCK({_STATE_LOCK})",),
    abort=(f"DO RELEASE_LOCK({_STATE_LOCK})",),
    database="COALESCE(DATABASE(), '')",
    schema="COALESCE(DATABASE(), '')",
    # Named for the table's database too: a named lock is the server's, and the same
    # op on a table of the same name in another database is another run.
    claim=f"SELECT COALESCE(GET_LOCK({_RUN_LOCK}, 0), 0)",
    # A SELECT, which reads and writes nothing (a DO reads as a change to a
    # watcher of the statements an op sends).
    release=f"SELECT RELEASE_LOCK({_RUN_LOCK})",
    # GET_LOCK is the session's: the same lock, online or in a script.
    script_claim=f"COALESCE(GET_LOCK({_RUN_LOCK}, 0), 0) = 1",
    script_release=f"COALESCE(RELEASE_LOCK({_RUN_LOCK}), 0) = 1",
    backslashes=True,
)


def table_where(table: str, schema: str | None, alias: str = "") -> str:
    """The condition naming the table in an ``information_schema`` view (``alias.``)."""
    in_schema = "DATABASE()" if schema is None else lit(schema)
    return f"{alias}TABLE_SCHEMA = {in_schema} AND {alias}TABLE_NAME = {lit(table)}"


def column(where: str, name: str, condition: str = "TRUE") -> str:
    """SQL true when the table has the column and ``condition`` holds for it."""
    return (
        f"EXISTS (SELECT 1 FROM information_schema.COLUMNS WHERE {where} "
        f"AND COLUMN_NAME = {lit(name)} AND {condition})"
    )


def column_exists(where: str, name: str) -> str:
    """SQL true when the table has the column."""
    return column(where, name)


def _exists(view: str, table: str, schema: str | None, where: str) -> str:
    """SQL true when ``information_schema.<view>`` has a row of the table where ``where``."""
    return (
        f"EXISTS (SELECT 1 FROM information_schema.{view} WHERE "
        f"{table_where(table, schema)} AND {where})"
    )


class KeyCatalog:
    """The key conversion's swap guards (SQL true while a change is still to do), and comments.

    Each method takes the table as (its quoted, qualified name, its name, its
    schema), the form every database's are given. MariaDB's foreign keys
    have no comments, and an index's comment is part of its definition.
    """

    #: a string literal
    literal = staticmethod(lit)

    @staticmethod
    def constraint_comment(table_sql: str, table: str, schema: str | None, name: str) -> str:
        """SQL of the comment on the table's constraint ``name``: none here."""
        return "NULL"

    @staticmethod
    def foreign_key_validated(table_sql: str, table: str, schema: str | None, name: str) -> str:
        """SQL true: every foreign key here is checked when it is added."""
        return "TRUE"

    @staticmethod
    def unique_constraint(table_sql: str, table: str, schema: str | None, name: str) -> str:
        """SQL false: a unique key here is an index, dropped and created as one."""
        return "FALSE"

    @staticmethod
    def not_null_name(table_sql: str, table: str, schema: str | None, name: str) -> str:
        """SQL NULL: NOT NULL is no constraint here."""
        return "NULL"

    @staticmethod
    def index_comment(table_sql: str, table: str, schema: str | None, name: str) -> str:
        """SQL of the comment on the table's index ``name`` (NULL: none)."""
        return (
            "(SELECT NULLIF(MAX(INDEX_COMMENT), '') FROM information_schema.STATISTICS WHERE "
            f"{table_where(table, schema)} AND INDEX_NAME = {lit(name)})"
        )

    @staticmethod
    def primary_key_comment(table_sql: str, table: str, schema: str | None, name: str) -> str:
        """SQL of the comment on the table's primary key: its index's (NULL: none)."""
        return KeyCatalog.index_comment(table_sql, table, schema, "PRIMARY")

    @staticmethod
    def index_definition(table_sql: str, table: str, schema: str | None, name: str) -> str:
        """SQL NULL: an index is created again from its columns (what it may have is checked)."""
        return "NULL"

    @staticmethod
    def create_index(statement: str, comment: str | None) -> str:
        """``CREATE INDEX`` or ``ADD PRIMARY KEY`` with the index's comment (its definition's)."""
        return statement if comment is None else f"{statement} COMMENT {lit(comment)}"

    @staticmethod
    def comment_sql(
        table_sql: str, schema_sql: str | None, index: bool, name_sql: str, comment: str
    ) -> str | None:
        """No statement gives a comment back on its own here."""
        return None

    @staticmethod
    def has_column(table_sql: str, table: str, schema: str | None, name: str) -> str:
        """SQL true when the table has the column."""
        return column_exists(table_where(table, schema), name)

    @staticmethod
    def nullable(table_sql: str, table: str, schema: str | None, name: str) -> str:
        """SQL true when the column exists and takes NULL."""
        return column(table_where(table, schema), name, "IS_NULLABLE = 'YES'")

    @staticmethod
    def comment_differs(
        table_sql: str, table: str, schema: str | None, name: str, comment: str
    ) -> str:
        """SQL true when the column exists with another comment than ``comment``."""
        return column(table_where(table, schema), name, f"COLUMN_COMMENT <> {lit(comment)}")

    @staticmethod
    def has_primary_key(table_sql: str, table: str, schema: str | None) -> str:
        """SQL true when the table has a primary key."""
        return _exists("TABLE_CONSTRAINTS", table, schema, "CONSTRAINT_TYPE = 'PRIMARY KEY'")

    @staticmethod
    def has_foreign_key(table_sql: str, table: str, schema: str | None, name: str) -> str:
        """SQL true when the table has the foreign key ``name``."""
        where = f"CONSTRAINT_TYPE = 'FOREIGN KEY' AND CONSTRAINT_NAME = {lit(name)}"
        return _exists("TABLE_CONSTRAINTS", table, schema, where)

    @staticmethod
    def has_index(table_sql: str, table: str, schema: str | None, name: str) -> str:
        """SQL true when the table has an index (or a unique constraint) named ``name``."""
        return _exists("STATISTICS", table, schema, f"INDEX_NAME = {lit(name)}")


def _column_users(schema: str, table: str, column: str) -> str:
    """SQL of the names (``name``) of the triggers and views naming the column (SQL arguments)."""
    return (
        "SELECT CONCAT('the trigger ', TRIGGER_NAME) AS name FROM information_schema.TRIGGERS "
        f"WHERE EVENT_OBJECT_SCHEMA = {schema} "
        f"AND EVENT_OBJECT_TABLE = {table} AND LOCATE({column}, ACTION_STATEMENT) > 0 "
        "UNION SELECT CONCAT('the view ', TABLE_NAME) FROM information_schema.VIEWS "
        f"WHERE TABLE_SCHEMA = {schema} AND VIEW_DEFINITION LIKE "
        f"CONCAT('%`', REPLACE({table}, '`', '``'), '`.`', REPLACE({column}, '`', '``'), '`%')"
    )


class MariaDBCatalog(Catalog):
    """MariaDB's and MySQL's: the server's own column text, strict mode, UTC reads."""

    __dialect__ = ("mysql", "mariadb")

    def column_text(
        self, connection: Connection, table: str, column: str, schema: str | None
    ) -> tuple[str | None, str | None]:
        """The column's DEFAULT and COMMENT, from ``information_schema``.

        SQLAlchemy cuts long DEFAULT expressions short and misses a COMMENT
        after a function DEFAULT.
        """
        row = connection.execute(
            sa.text(
                "SELECT COLUMN_DEFAULT, COLUMN_COMMENT FROM information_schema.COLUMNS WHERE "
                "TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND TABLE_NAME = :table "
                "AND COLUMN_NAME = :column"
            ),
            {"schema": schema, "table": table, "column": column},
        ).one()
        return row[0], row[1]

    def strict_mode(self, connection: Connection) -> contextlib.AbstractContextManager[None]:
        """Add ``STRICT_ALL_TABLES`` to the session's ``sql_mode``, put back after the block."""
        mode = str(connection.exec_driver_sql("SELECT @@SESSION.sql_mode").scalar() or "")
        if "STRICT_ALL_TABLES" in mode.split(","):
            return contextlib.nullcontext()
        return _session_setting(
            connection,
            "SET SESSION sql_mode = "
            "CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), 'STRICT_ALL_TABLES')",
            sa.text("SET SESSION sql_mode = :value"),
            mode,
        )

    def column_users(
        self, connection: Connection, table: str, column: str, schema: str | None
    ) -> list[str]:
        """Triggers and views whose SQL names the column.

        The server drops it all the same, and every write (a trigger) or
        read (a view) fails after.
        """
        query = _column_users("COALESCE(:schema, DATABASE())", ":table", ":column")
        found = connection.execute(
            sa.text(query + " ORDER BY 1"), {"schema": schema, "table": table, "column": column}
        )
        return [str(name) for name in found.scalars()]

    def column_users_check(
        self,
        dialect: Dialect,
        table: str,
        column: str,
        schema: str | None,
        refusal: tuple[str, str],
    ) -> str:
        """A compound block signalling, before any change, when a trigger or view names it."""
        in_schema = "DATABASE()" if schema is None else lit(schema)
        users = _column_users(in_schema, lit(table), lit(column))
        message = f"CONCAT({lit(refusal[0])}, users, {lit(refusal[1])})"
        return compound(
            "  DECLARE message VARCHAR(512) CHARACTER SET utf8mb4;\n"
            "  DECLARE users TEXT;\n"
            f"  IF {column_exists(table_where(table, schema), column)} THEN\n"
            "    SELECT GROUP_CONCAT(u.name ORDER BY u.name SEPARATOR ', ') INTO users\n"
            f"      FROM ({users}) AS u;\n"
            "    IF users IS NOT NULL THEN\n"
            f"      {signal(message)}\n"
            "    END IF;\n  END IF;\n"
        )

    def column_checks(
        self, connection: Connection, table: str, column: str, schema: str | None
    ) -> list[str]:
        """CHECK constraints whose clause names the column (as the server quotes it)."""
        query = (
            "SELECT c.CONSTRAINT_NAME FROM information_schema.CHECK_CONSTRAINTS c "
            "JOIN information_schema.TABLE_CONSTRAINTS t ON t.CONSTRAINT_SCHEMA = "
            "c.CONSTRAINT_SCHEMA AND t.CONSTRAINT_NAME = c.CONSTRAINT_NAME "
            "AND t.CONSTRAINT_TYPE = 'CHECK' "
            "WHERE c.CONSTRAINT_SCHEMA = COALESCE(:schema, DATABASE()) AND t.TABLE_NAME = :table "
            "AND c.CHECK_CLAUSE LIKE CONCAT('%`', REPLACE(:column, '`', '``'), '`%') ORDER BY 1"
        )
        found = connection.execute(
            sa.text(query), {"schema": schema, "table": table, "column": column}
        )
        return [str(name) for name in found.scalars()]

    def reflected_name(self, name: str) -> str:
        """SQLAlchemy reads a name quoted in ``SHOW CREATE TABLE``: a backtick comes doubled."""
        return name.replace("``", "`")

    def plain_session(self, connection: Connection) -> contextlib.AbstractContextManager[None]:
        """Take out of the session's ``sql_mode`` what SQLAlchemy did not see at connect.

        ``ANSI_QUOTES`` set on the session after SQLAlchemy connected makes
        ``SHOW CREATE TABLE`` quote with ``"``, which SQLAlchemy's
        reflection then does not parse: no columns, no primary key (a drop
        did nothing, the ops named columns missing). ``NO_BACKSLASH_ESCAPES``
        makes the server keep the backslashes SQLAlchemy doubles in a
        literal (a carried comment). The modes that stand for a set
        including ``ANSI_QUOTES`` (``ANSI``, ``ORACLE``, ...) go too, or
        setting the rest would bring it back. A statement timeout of the
        user's or the server's (MariaDB ``max_statement_time``, MySQL
        ``max_execution_time``) is turned off: it would cancel a whole-table
        check or a batch of ours on a big table. All are put back after the
        block. A connection outside a transaction is left outside one.
        """
        outside = not connection.in_transaction()
        mode = str(connection.exec_driver_sql("SELECT @@SESSION.sql_mode").scalar() or "")
        drop = {"NO_BACKSLASH_ESCAPES"}
        if not getattr(connection.dialect, "_server_ansiquotes", False):
            drop |= {"ANSI_QUOTES", *_QUOTING_MODES}
        parts = [part for part in mode.split(",") if part]
        kept = [part for part in parts if part not in drop]
        timeout = _statement_timeout(connection)
        if outside:
            connection.commit()
        if kept == parts and timeout is None:
            return contextlib.nullcontext()
        return _plain(connection, timeout, None if kept == parts else (",".join(kept), mode))

    def utc_session(self, connection: Connection) -> contextlib.AbstractContextManager[None]:
        """Set the session's ``time_zone`` to UTC (``DATETIME`` is not converted either way)."""
        zone = str(connection.exec_driver_sql("SELECT @@SESSION.time_zone").scalar())
        if zone == "+00:00":
            return contextlib.nullcontext()
        return _session_setting(
            connection,
            "SET SESSION time_zone = '+00:00'",
            sa.text("SET SESSION time_zone = :value"),
            zone,
        )


@contextlib.contextmanager
def _plain(
    connection: Connection,
    timeout: tuple[str, object] | None,
    mode: tuple[str, str] | None,
) -> Iterator[None]:
    """The block without the session's statement timeout, in ``sql_mode`` ``mode[0]``."""
    with contextlib.ExitStack() as stack:
        if timeout is not None:
            name, value = timeout
            stack.enter_context(
                _session_setting(
                    connection,
                    f"SET SESSION {name} = 0",
                    sa.text(f"SET SESSION {name} = :value"),
                    value,
                )
            )
        if mode is not None:
            stack.enter_context(_sql_mode(connection, *mode))
        yield


def _statement_timeout(connection: Connection) -> tuple[str, object] | None:
    """(its name, its value): the session's statement timeout; None: it has none."""
    # MariaDB: max_statement_time, any statement; MySQL: max_execution_time,
    # SELECTs only (its DDL and writes have none).
    name = (
        "max_statement_time"
        if getattr(connection.dialect, "is_mariadb", False)
        else "max_execution_time"
    )
    value = connection.exec_driver_sql(f"SELECT @@SESSION.{name}").scalar()
    return None if not value else (name, value)


@contextlib.contextmanager
def _sql_mode(connection: Connection, mode: str, saved: str) -> Iterator[None]:
    """Set the session's ``sql_mode`` for the block, in or out of a transaction as it was."""

    def set_mode(value: str) -> None:
        outside = not connection.in_transaction()
        connection.execute(sa.text("SET SESSION sql_mode = :value"), {"value": value})
        if outside:
            connection.commit()

    set_mode(mode)
    try:
        yield
    except BaseException:
        with contextlib.suppress(sa.exc.SQLAlchemyError):
            set_mode(saved)
        raise
    set_mode(saved)


@contextlib.contextmanager
def _session_setting(
    connection: Connection, change: str, restore: sa.TextClause, value: object
) -> Iterator[None]:
    """Run ``change``, then the block, then ``restore`` with the setting's old value."""
    connection.exec_driver_sql(change)
    try:
        yield
    except BaseException:
        # The connection may be gone (that is why we are here): the setting
        # dies with the session, and the error that brought us here is the
        # one to report.
        with contextlib.suppress(sa.exc.SQLAlchemyError):
            connection.execute(restore, {"value": value})
        raise
    connection.execute(restore, {"value": value})
