"""The suite's own databases: one per pytest-xdist worker, seeded leftovers, and the leftover guard.

``worker_url(url, worker)`` makes ``<database>_<worker>`` afresh on the
configured server and returns its URL; ``drop_database`` removes it at the
end. ``Catalog`` lists what a database holds (tables, views, schemas) so the
guard can fail a test that leaves something behind, then drop it.
``seed``/``check_seeded`` create and verify the tables another tool could
have left in a database (``SQLALCHEMY_ULID_SEED_TABLES``). ``skip_tls_probe``
spares each PyMySQL connection a TLS context nobody uses.

A test's own clean-up: ``drop_tables`` (``dropper``: as a function of the
engine) drops its tables, views, triggers, functions and schemas, and what
the online ops left of its tables: ``forget_conversions`` (their state
rows, PostgreSQL) and ``drop_conversion_leftovers`` (triggers and copies,
MariaDB).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, make_url

_PG_OBJECTS = """
SELECT n.nspname, c.relname, c.relkind
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg\\_toast%%' AND n.nspname NOT LIKE 'pg\\_temp\\_%%'
UNION ALL
SELECT n.nspname, '', 'schema' FROM pg_namespace n
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'public')
  AND n.nspname NOT LIKE 'pg\\_%%'
"""
_MARIADB_OBJECTS = """
SELECT table_schema, table_name, table_type FROM information_schema.tables
WHERE table_schema = DATABASE()
"""
#: what a PostgreSQL relkind is dropped with
_PG_DROP = {"v": "VIEW", "m": "MATERIALIZED VIEW", "f": "FOREIGN TABLE"}


def skip_tls_probe() -> None:
    """PyMySQL connections in this process skip TLS unless their URL asks for it.

    Given no ``ssl*`` option, PyMySQL (2.x) makes a default TLS context for
    every connection, loading the system's CA bundle (30 ms of CPU each, 110
    ms on the loaded CI machine), and the suite's servers have TLS off. The
    suite's NullPool engines connect hundreds of times per test (one MariaDB
    fault test: 283 connections, 66 s before and 20 s after). A URL with an
    ``ssl*`` option is left as it is.
    """
    from sqlalchemy.dialects.mysql.pymysql import MySQLDialect_pymysql

    if not sa.event.contains(MySQLDialect_pymysql, "do_connect", _without_tls):
        sa.event.listen(MySQLDialect_pymysql, "do_connect", _without_tls)


def _without_tls(dialect: object, record: object, cargs: object, cparams: dict[str, Any]) -> None:
    # asyncmy's dialect is a subclass of PyMySQL's, and its connect() has no
    # ssl_disabled: only PyMySQL itself is told.
    if getattr(dialect, "driver", None) != "pymysql":
        return
    if not any(key.startswith("ssl") for key in cparams):
        cparams["ssl_disabled"] = True


@contextlib.contextmanager
def _admin(url: str) -> Iterator[Connection]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def worker_url(url: str, worker: str) -> str:
    """Make ``<database>_<worker>`` afresh beside ``url``'s database; its URL.

    The new database gets the configured one's character set and collation
    on MariaDB/MySQL.
    """
    parsed = make_url(url)
    name = f"{parsed.database}_{worker}"
    with _admin(url) as conn:
        quote = conn.dialect.identifier_preparer.quote_identifier
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quote(name)} WITH (FORCE)")
            conn.exec_driver_sql(f"CREATE DATABASE {quote(name)}")
        else:
            charset, collation = conn.exec_driver_sql(
                "SELECT default_character_set_name, default_collation_name "
                "FROM information_schema.schemata WHERE schema_name = DATABASE()"
            ).one()
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quote(name)}")
            conn.exec_driver_sql(
                f"CREATE DATABASE {quote(name)} CHARACTER SET {charset} COLLATE {collation}"
            )
    return parsed.set(database=name).render_as_string(hide_password=False)


def drop_database(admin_url: str, name: str) -> None:
    """Drop the worker's database ``name`` (from a session on ``admin_url``'s)."""
    with _admin(admin_url) as conn:
        quote = conn.dialect.identifier_preparer.quote_identifier
        force = " WITH (FORCE)" if conn.dialect.name == "postgresql" else ""
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quote(name)}{force}")


class Catalog:
    """What one server database holds, asked on a connection of its own."""

    def __init__(self, url: str) -> None:
        self.engine: Engine = sa.create_engine(
            url, poolclass=sa.pool.NullPool, isolation_level="AUTOCOMMIT"
        )
        self.conn: Connection | None = None

    def _query(self, sql: str) -> set[tuple[str, str, str]]:
        for attempt in range(2):  # a test may have ended the session: once more
            try:
                if self.conn is None:
                    self.conn = self.engine.connect()
                return {(str(a), str(b), str(c)) for a, b, c in self.conn.exec_driver_sql(sql)}
            except sa.exc.DBAPIError:
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def objects(self) -> set[tuple[str, str, str]]:
        """(schema, name, kind) of every table, view and schema."""
        postgresql = self.engine.dialect.name == "postgresql"
        return self._query(_PG_OBJECTS if postgresql else _MARIADB_OBJECTS)

    def drop(self, objects: Iterable[tuple[str, str, str]]) -> None:
        """Drop what a test left behind."""
        assert self.conn is not None
        quote = self.engine.dialect.identifier_preparer.quote_identifier
        postgresql = self.engine.dialect.name == "postgresql"
        if not postgresql:
            self.conn.exec_driver_sql("SET SESSION foreign_key_checks = 0")
        for schema, name, kind in sorted(objects, key=lambda o: o[2] == "schema"):
            with contextlib.suppress(sa.exc.DBAPIError):
                if kind == "schema":
                    self.conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {quote(schema)} CASCADE")
                elif postgresql:
                    what = _PG_DROP.get(kind, "TABLE")
                    self.conn.exec_driver_sql(
                        f"DROP {what} IF EXISTS {quote(schema)}.{quote(name)} CASCADE"
                    )
                else:
                    what = "VIEW" if kind == "VIEW" else "TABLE"
                    self.conn.exec_driver_sql(f"DROP {what} IF EXISTS {quote(name)}")
        if not postgresql:
            self.conn.exec_driver_sql("SET SESSION foreign_key_checks = 1")

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = None

    def dispose(self) -> None:
        self.close()
        self.engine.dispose()


def seed(url: str, tables: Iterable[str]) -> dict[str, list[tuple[object, ...]]]:
    """Create each of ``tables`` with a row (unless there), as another tool would; their rows."""
    seeded = {}
    with _admin(url) as conn:
        quote = conn.dialect.identifier_preparer.quote_identifier
        for table in tables:
            if not sa.inspect(conn).has_table(table):
                conn.exec_driver_sql(f"CREATE TABLE {quote(table)} (seeded varchar(40))")
                conn.exec_driver_sql(f"INSERT INTO {quote(table)} VALUES ('left by another tool')")
            seeded[table] = _rows(conn, table)
    return seeded


def check_seeded(url: str, seeded: dict[str, list[tuple[object, ...]]]) -> list[str]:
    """What changed in the seeded tables (empty: nothing)."""
    changed = []
    with _admin(url) as conn:
        for table, rows in seeded.items():
            if not sa.inspect(conn).has_table(table):
                changed.append(f"{url}: the seeded table {table} is gone")
            elif _rows(conn, table) != rows:
                changed.append(f"{url}: the seeded table {table} changed")
    return changed


def _rows(conn: Connection, table: str) -> list[tuple[object, ...]]:
    quote = conn.dialect.identifier_preparer.quote_identifier
    return sorted(
        (tuple(row) for row in conn.exec_driver_sql(f"SELECT * FROM {quote(table)}")), key=repr
    )


@contextlib.contextmanager
def own_database(url: str, suffix: str) -> Iterator[str]:
    """A database of the test's own beside ``url``'s (``<database>_<suffix>``), dropped after."""
    made = worker_url(url, suffix)
    try:
        yield made
    finally:
        drop_database(url, str(make_url(made).database))


def drop_tables(
    target: Engine | Connection,
    *names: str,
    views: Iterable[str] = (),
    triggers: Iterable[str] = (),
    functions: Iterable[str] = (),
    schemas: Iterable[str] = (),
    conversions: Iterable[str] = (),
    also: Iterable[str | Callable[[Connection], object]] = (),
) -> None:
    """A test's clean-up: drop what it made, each only if it is there.

    In this order: ``views``; ``triggers`` (MariaDB, SQLite: PostgreSQL's go
    with their table); the tables ``names``; ``functions`` (PostgreSQL's,
    with their arguments: ``"f()"``); ``schemas``; what the online ops left of the
    tables ``conversions`` (PostgreSQL: their state rows, MariaDB: their
    triggers and copies); then ``also``, statements or functions of the
    connection. PostgreSQL drops with ``CASCADE``; MariaDB with its foreign
    key checks off, so no order of tables fails. Names are used as given
    (quote the odd ones). On an engine, in one transaction of its own.
    """
    if isinstance(target, Engine):
        with target.begin() as conn:
            drop_tables(
                conn,
                *names,
                views=views,
                triggers=triggers,
                functions=functions,
                schemas=schemas,
                conversions=conversions,
                also=also,
            )
        return
    conn = target
    postgresql = conn.dialect.name == "postgresql"
    mariadb = conn.dialect.name == "mysql"
    cascade = " CASCADE" if postgresql else ""
    statements = [f"DROP VIEW IF EXISTS {view}{cascade}" for view in views]
    statements += [f"DROP TRIGGER IF EXISTS {t}" for t in triggers if not postgresql]
    statements += [f"DROP TABLE IF EXISTS {table}{cascade}" for table in names]
    statements += [f"DROP FUNCTION IF EXISTS {f} CASCADE" for f in functions if postgresql]
    statements += [f"DROP SCHEMA IF EXISTS {schema}{cascade}" for schema in schemas]
    if mariadb:
        conn.exec_driver_sql("SET SESSION foreign_key_checks = 0")
    try:
        for statement in statements:
            conn.exec_driver_sql(statement)
        conversions = tuple(conversions)
        if conversions and postgresql:
            forget_conversions(conn, *conversions)
        for table in conversions if mariadb else ():
            drop_conversion_leftovers(conn, table)
        for step in also:
            if isinstance(step, str):
                conn.exec_driver_sql(step)
            else:
                step(conn)
    finally:
        if mariadb:
            conn.exec_driver_sql("SET SESSION foreign_key_checks = 1")


def dropper(*names: str, **options: Any) -> Callable[[Engine], None]:
    """``drop_tables(engine, *names, **options)`` as a function of the engine.

    The clean-up ``private_engine`` runs before and after a test.
    """

    def drop(engine: Engine) -> None:
        drop_tables(engine, *names, **options)

    return drop


def forget_conversions(conn: Connection, *tables: str) -> None:
    """PostgreSQL: the online ops' state rows of ``tables``, and their table once empty.

    Only these tables' rows: another test may be converting in this database.
    """
    names = ", ".join(f"'{table}'" for table in tables)
    conn.exec_driver_sql(
        "DO $$ BEGIN IF to_regclass('sqlalchemy_ulid_migrations') IS NOT NULL THEN "
        "DELETE FROM sqlalchemy_ulid_migrations "
        f"WHERE split_part(target, '.', 1) IN ({names}); "
        "IF NOT EXISTS (SELECT 1 FROM sqlalchemy_ulid_migrations) THEN "
        "DROP TABLE sqlalchemy_ulid_migrations; END IF; END IF; END $$"
    )


def drop_conversion_leftovers(conn: Connection, table: str) -> None:
    """MariaDB: what an online storage conversion of ``table`` cut short leaves.

    Its three triggers and its ``_<table>__new`` and ``_<table>__old`` copies;
    drop the tables that reference them first. And its row in the ops' state
    table (the table too, once empty).
    """
    for event in ("del", "upd", "ins"):
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS _{table}__ulid_{event}")
    for copy in ("new", "old"):
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS _{table}__{copy}")
    if sa.inspect(conn).has_table("sqlalchemy_ulid_migrations"):
        conn.execute(
            sa.text("DELETE FROM sqlalchemy_ulid_migrations WHERE target LIKE :t"),
            {"t": f"{table}.%"},
        )
        if not conn.exec_driver_sql("SELECT 1 FROM sqlalchemy_ulid_migrations LIMIT 1").first():
            conn.exec_driver_sql("DROP TABLE sqlalchemy_ulid_migrations")
