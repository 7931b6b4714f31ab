"""Golden test: the key conversion online makes the DDL changes the PostgreSQL script makes.

``convert_primary_key_to_ulid`` / ``restore_legacy_primary_key`` are run
online, and their ``--sql`` script by the real ``psql`` on a twin of the
same tables (dropped and made again). The script runs its DDL by
``EXECUTE`` inside ``DO`` blocks, where no statement log sees it, so both
runs are read the same way, by the server: an event trigger
(``ddl_command_end``) snapshots the tables' catalog after every DDL
command of the test's sessions (the online op's, and psql's), and each
command becomes the changes it made, with their names:

* a column added (name, type, NULL or NOT NULL), dropped, renamed, set
  NOT NULL, commented;
* a constraint (primary key, foreign key, unique, NOT NULL where
  PostgreSQL 18 names it) or an index dropped, or added as the catalog
  prints it (``pg_get_constraintdef`` / ``pg_get_indexdef``), commented.

What a statement of the online op changed must be what a statement of the
script changed, change by change (the online op makes one step of each
clause, the script sometimes lets one ``DROP COLUMN`` take an index with
it: the changes are compared, not the statements). The online statements
are also captured as sent (``before_cursor_execute``): each DDL statement
must be one command the trigger saw, so the trigger misses none.

The tables: a key referenced by a foreign key from another table (NOT
NULL under a name of its own, a unique constraint and an index on the
referencing column, comments), a self-reference, a one-to-one table whose
key references the key (its primary key swapped too) and a table that
references that one (a second level), and a table, column, foreign key
and index whose names are 63 bytes, the column's shadow hashed.

What still differs is pinned below in ``DRIFT``, each item named with its
reason; the test fails on any other difference, and on a pinned one that is
gone (then remove it from ``DRIFT``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Engine

import _clients
from conftest import Backend
from sqlalchemy_ulid.alembic._primary_key._plan import STATE_TABLE
from test_alembic_primary_key import VERSION_TABLE
from test_alembic_primary_key_offline_postgresql import _project, _script

#: The sessions whose DDL the event trigger records (the online op's, psql's).
APP = "ulid_pk_golden"
#: Every table of the test starts so; the trigger reads only those.
PREFIX = "pkg_"
KEY = "pkg_customers_" + "k" * 38  # the legacy key's unique constraint: over 63, hashed
LONG_TABLE = "pkg_long_" + "t" * 54
LONG_COLUMN = "c" * 60 + "_id"  # its shadow's name is over 63 bytes: hashed
LONG_FK = "fk_" + "f" * 60
LONG_INDEX = "ix_" + "i" * 60
#: The schema of the tables in the test's second run (``schema=``).
SCHEMA_NAME = "pkg_golden"
TABLES = ("pkg_account_events", "pkg_accounts", "pkg_orders", LONG_TABLE, KEY)

SCHEMA = f"""
CREATE TABLE {KEY} (
  id integer PRIMARY KEY, created_at timestamptz NOT NULL, name text NOT NULL,
  referrer_id integer CONSTRAINT fk_pkg_referrer REFERENCES {KEY});
COMMENT ON COLUMN {KEY}.id IS 'the customer';
CREATE TABLE pkg_orders (
  id integer PRIMARY KEY,
  customer_id integer CONSTRAINT nn_pkg_orders_customer NOT NULL
    CONSTRAINT fk_pkg_orders_customer REFERENCES {KEY} ON DELETE CASCADE,
  note text NOT NULL,
  CONSTRAINT uq_pkg_orders_customer_note UNIQUE (customer_id, note));
CREATE INDEX ix_pkg_orders_customer ON pkg_orders (customer_id);
COMMENT ON COLUMN pkg_orders.customer_id IS 'who ordered';
COMMENT ON INDEX ix_pkg_orders_customer IS 'orders by customer';
COMMENT ON CONSTRAINT fk_pkg_orders_customer ON pkg_orders IS 'the customer''s';
COMMENT ON CONSTRAINT uq_pkg_orders_customer_note ON pkg_orders IS 'one note each';
COMMENT ON CONSTRAINT {KEY}_pkey ON {KEY} IS 'the key';
CREATE TABLE pkg_accounts (
  customer_id integer CONSTRAINT pk_pkg_accounts PRIMARY KEY
    CONSTRAINT fk_pkg_accounts_customer REFERENCES {KEY}
    ON UPDATE CASCADE DEFERRABLE INITIALLY DEFERRED,
  plan text NOT NULL,
  CONSTRAINT uq_pkg_accounts_plan UNIQUE NULLS NOT DISTINCT (customer_id, plan));
COMMENT ON CONSTRAINT pk_pkg_accounts ON pkg_accounts IS 'one account each';
CREATE UNIQUE INDEX ux_pkg_accounts_plan ON pkg_accounts (plan, customer_id) WITH (fillfactor = 70);
COMMENT ON INDEX ux_pkg_accounts_plan IS 'a plan once';
CREATE TABLE pkg_account_events (
  id integer PRIMARY KEY,
  account_id integer NOT NULL,
  kind text NOT NULL);
CREATE TABLE {LONG_TABLE} (
  id integer PRIMARY KEY,
  {LONG_COLUMN} integer CONSTRAINT {LONG_FK} REFERENCES {KEY} MATCH FULL);
CREATE INDEX {LONG_INDEX} ON {LONG_TABLE} ({LONG_COLUMN});
INSERT INTO {KEY} SELECT i, timestamptz '2023-03-01 08:00+00' + (i / 2) * interval '1 ms',
  'c' || i, CASE WHEN mod(i, 3) <> 0 AND i > 1 THEN i - 1 END FROM generate_series(1, 12) AS i;
INSERT INTO pkg_orders SELECT i, 1 + mod(i * 7, 12), 'o' || i FROM generate_series(1, 20) AS i;
INSERT INTO pkg_accounts SELECT i, 'p' || i FROM generate_series(1, 8) AS i;
INSERT INTO pkg_account_events SELECT i, 1 + mod(i, 8), 'k' || i FROM generate_series(1, 16) AS i;
ALTER TABLE pkg_account_events ADD CONSTRAINT fk_pkg_events_account FOREIGN KEY (account_id)
  REFERENCES pkg_accounts NOT VALID;
INSERT INTO {LONG_TABLE} SELECT i, CASE WHEN mod(i, 4) <> 0 THEN i END
  FROM generate_series(1, 9) AS i;
"""

#: The tables' catalog, as JSON; what the event trigger stores after each DDL command.
SNAPSHOT = r"""
CREATE VIEW pkg_golden_namespaces AS
  SELECT oid FROM pg_namespace WHERE nspname IN ('public', 'pkg_golden');
CREATE FUNCTION pkg_golden_snapshot() RETURNS jsonb LANGUAGE sql STABLE AS $f$
SELECT jsonb_build_object(
  'column', (SELECT coalesce(jsonb_agg(jsonb_build_array(c.relname, a.attnum, a.attname,
      format_type(a.atttypid, a.atttypmod), a.attnotnull, col_description(c.oid, a.attnum))),
      '[]')
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    WHERE c.relnamespace IN (SELECT oid FROM public.pkg_golden_namespaces) AND c.relkind = 'r'
    AND starts_with(c.relname, 'pkg_') AND a.attnum > 0 AND NOT a.attisdropped),
  'constraint', (SELECT coalesce(jsonb_agg(jsonb_build_array(c.relname, con.oid::bigint,
      con.conname, pg_get_constraintdef(con.oid),
      obj_description(con.oid, 'pg_constraint'))), '[]')
    FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid
    WHERE c.relnamespace IN (SELECT oid FROM public.pkg_golden_namespaces)
    AND starts_with(c.relname, 'pkg_')),
  'index', (SELECT coalesce(jsonb_agg(jsonb_build_array(c.relname, x.indexrelid::bigint,
      i.relname, pg_get_indexdef(x.indexrelid), obj_description(x.indexrelid, 'pg_class'))),
      '[]')
    FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class c ON c.oid = x.indrelid
    WHERE c.relnamespace IN (SELECT oid FROM public.pkg_golden_namespaces)
    AND starts_with(c.relname, 'pkg_')))
$f$;
CREATE TABLE pkg_golden_log (seq bigserial PRIMARY KEY, tag text NOT NULL, snap jsonb NOT NULL);
CREATE FUNCTION pkg_golden_record() RETURNS event_trigger LANGUAGE plpgsql AS $f$
BEGIN
  IF current_setting('application_name') = 'ulid_pk_golden' THEN
    INSERT INTO public.pkg_golden_log (tag, snap) VALUES (tg_tag, public.pkg_golden_snapshot());
  END IF;
END
$f$;
CREATE EVENT TRIGGER pkg_golden_ddl ON ddl_command_end EXECUTE FUNCTION pkg_golden_record();
"""

UNDO = """
DROP EVENT TRIGGER IF EXISTS pkg_golden_ddl;
DROP FUNCTION IF EXISTS pkg_golden_record();
DROP TABLE IF EXISTS pkg_golden_log;
DROP FUNCTION IF EXISTS pkg_golden_snapshot();
DROP VIEW IF EXISTS pkg_golden_namespaces;
"""

#: A change: what, then the names and the text it concerns.
Change = tuple[str, ...]


def _drop_tables(engine: Engine) -> None:
    with engine.begin() as conn:
        for name in (*TABLES, VERSION_TABLE, STATE_TABLE):
            conn.exec_driver_sql(f'DROP TABLE IF EXISTS "{name}" CASCADE')
        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {SCHEMA_NAME} CASCADE")


@pytest.fixture
def pg(backends: dict[str, Backend]) -> Iterator[Engine]:
    """An engine whose sessions the trigger records; the trigger made and dropped."""
    backend = backends["postgresql"]
    if backend.url is None:
        pytest.fail(f"backend missing: {backend.reason}", pytrace=False)
    engine = sa.create_engine(
        backend.url, poolclass=sa.pool.NullPool, connect_args={"application_name": APP}
    )
    try:
        _drop_tables(engine)
        with engine.begin() as conn:
            conn.exec_driver_sql(UNDO)
            conn.exec_driver_sql(SNAPSHOT)
        yield engine
    finally:
        try:
            _drop_tables(engine)
        finally:
            with engine.begin() as conn:
                conn.exec_driver_sql(UNDO)
            engine.dispose()


def _fresh(engine: Engine, config: Config, action: str) -> None:
    """The tables as the op starts: made again (converted first, to restore)."""
    _drop_tables(engine)
    schema = config.attributes["schema"]
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        conn.exec_driver_sql(f"SET LOCAL search_path TO {schema}")
        conn.exec_driver_sql(SCHEMA)
        conn.exec_driver_sql("SET LOCAL search_path TO public")
        _stamp(conn, config)
    if action == "downgrade":
        _online(config, engine, "upgrade")


def _stamp(conn: Any, config: Config) -> None:
    config.attributes["connection"] = conn
    command.stamp(config, "pk0000")


def _online(config: Config, engine: Engine, action: str) -> list[str]:
    """Run the op online; every statement it sent, in order."""
    sent: list[str] = []

    def listen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    sa.event.listen(engine, "before_cursor_execute", listen)
    try:
        with engine.connect() as conn:
            config.attributes["connection"] = conn
            if action == "upgrade":
                command.upgrade(config, "pk0001")
            else:
                command.downgrade(config, "pk0000")
            conn.commit()
    finally:
        sa.event.remove(engine, "before_cursor_execute", listen)
    return sent


def _recorded(engine: Engine, run: Any) -> list[tuple[str, list[Change]]]:
    """Run ``run``; each DDL command it made, as (its tag, the changes it made)."""
    with engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM pkg_golden_log")
        start = conn.exec_driver_sql("SELECT pkg_golden_snapshot()").scalar()
    run()
    with engine.begin() as conn:
        rows = conn.exec_driver_sql("SELECT tag, snap FROM pkg_golden_log ORDER BY seq").all()
    out = []
    before = start
    for tag, snap in rows:
        out.append((tag, _changes(before, snap)))
        before = snap
    return out


def _changes(before: dict[str, Any], after: dict[str, Any]) -> list[Change]:
    """What one command changed, with names, in a fixed order (a comment removed: NULL)."""
    out: list[Change] = []
    old = {(r[0], r[1]): r for r in before["column"]}
    new = {(r[0], r[1]): r for r in after["column"]}
    for key in old.keys() - new.keys():
        out.append(("drop column", key[0], old[key][2]))
    for key in new.keys() - old.keys():
        table, _, name, type_, not_null, comment = new[key]
        out.append(("add column", table, name, type_, "NOT NULL" if not_null else "NULL"))
        if comment is not None:
            out.append(("comment column", table, name, comment))
    for key in old.keys() & new.keys():
        (table, _, was, *a), (_, _, name, *b) = old[key], new[key]
        if was != name:
            out.append(("rename column", table, was, name))
        if a[0] != b[0]:
            out.append(("alter type", table, name, b[0]))
        if a[1] != b[1]:
            out.append(("set not null" if b[1] else "drop not null", table, name))
        if a[2] != b[2]:
            out.append(("comment column", table, name, b[2] or "NULL"))
    # A constraint or index is known by its oid: made again, it has a new one.
    for kind in ("constraint", "index"):
        was = {r[1]: r for r in before[kind]}
        now = {r[1]: r for r in after[kind]}
        for oid in was.keys() - now.keys():
            out.append((f"drop {kind}", was[oid][0], was[oid][2]))
        for oid in now.keys() - was.keys():
            table, _, name, definition, comment = now[oid]
            out.append((f"add {kind}", table, name, definition))
            if comment is not None:
                out.append((f"comment {kind}", table, name, comment))
        for oid in was.keys() & now.keys():
            (table, _, old_name, _, a), (_, _, name, _, b) = was[oid], now[oid]
            if old_name != name:
                out.append((f"rename {kind}", table, old_name, name))
            if a != b:
                out.append((f"comment {kind}", table, name, b or "NULL"))
    return sorted(out)


def _flat(recorded: list[tuple[str, list[Change]]]) -> list[Change]:
    return [c for _, changes in recorded for c in changes]


def _diff(online: list[Change], script: list[Change]) -> tuple[list[Change], list[Change]]:
    a, b = Counter(online), Counter(script)
    return sorted((a - b).elements()), sorted((b - a).elements())


#: The script marks each shadow it adds with a comment: a rerun tells its own
#: shadows from a user's column by it (online, the state table does). The
#: swap renames the marked shadow in, then gives the column the comment it
#: had (a change online makes too) or clears the marker. Same end schema.
MARKER = "sqlalchemy_ulid: {op} of {table} (offline): new values of {on}.{column}"


def _pinned(online: list[Change], op: str) -> tuple[list[Change], list[Change]]:
    """The known differences, from the online changes: (online only, script only)."""
    renamed = {(c[1], c[2]): c[3] for c in online if c[0] == "rename column"}
    commented = {(c[1], c[2]) for c in online if c[0] == "comment column"}
    script: list[Change] = []
    for c in online:
        if c[0] != "add column":
            continue
        on, shadow = c[1], c[2]
        column = renamed[on, shadow]
        text = MARKER.format(op=op, table=KEY, on=on, column=column)
        script.append(("comment column", on, shadow, text))
        if (on, column) not in commented:
            script.append(("comment column", on, column, "NULL"))
    return [], sorted(script)


@pytest.fixture(params=["public", SCHEMA_NAME])
def config(pg: Engine, tmp_path: Path, request: pytest.FixtureRequest) -> Config:
    """The op on the tables in the search path, or in a schema of their own (schema=)."""
    schema = "" if request.param == "public" else f"schema={request.param!r}"
    up = ", ".join(filter(None, ["from_time='created_at'", schema]))
    config = _project(tmp_path, pg, table=KEY, up=up, down=schema)
    config.attributes["schema"] = request.param
    return config


def _psql(engine: Engine, script: str) -> None:
    done = _clients.psql(engine, script, app=APP)
    assert done.returncode == 0, done.stderr


def _ddl(sent: list[str]) -> list[str]:
    """The DDL statements sent on the test's tables (not the op's own state or staging)."""
    return [
        s
        for s in sent
        if re.match(r"\s*(ALTER|CREATE|DROP|COMMENT) ", s)
        and "_ulid_backfill" not in s
        and STATE_TABLE not in s
    ]


def _phases(recorded: list[tuple[str, list[Change]]]) -> list[str]:
    """The commands' phases in order: shadows added (prepare), then the swap."""
    kinds: list[str] = []
    for _, changes in recorded:
        marked = all(c[0] == "add column" or c[-1].startswith("sqlalchemy_ulid:") for c in changes)
        kind = "prepare" if marked else "swap"
        if changes and (not kinds or kinds[-1] != kind):
            kinds.append(kind)
    return kinds


@pytest.mark.parametrize("action", ["upgrade", "downgrade"])
def test_online_makes_the_scripts_changes(pg: Engine, config: Config, action: str) -> None:
    op = "convert_primary_key_to_ulid" if action == "upgrade" else "restore_legacy_primary_key"
    _fresh(pg, config, action)
    sent: list[str] = []
    online = _recorded(pg, lambda: sent.extend(_online(config, pg, action)))
    _fresh(pg, config, action)
    script = _recorded(pg, lambda: _psql(pg, _script(config, action)))

    # The trigger saw each DDL statement the op sent, as one command.
    changed = [r for r in online if r[1]]
    assert len(changed) == len(_ddl(sent)) > 20
    assert _diff(_flat(online), _flat(script)) == _pinned(_flat(online), op)
    assert _phases(online) == _phases(script) == ["prepare", "swap"]

    flat = _flat(online)
    # The long names: the referencing column's shadow hashed to 63 bytes, the
    # foreign key and the index dropped and made again under their own names.
    shadow = next(c[2] for c in flat if c[0] == "add column" and c[1] == LONG_TABLE)
    assert len(shadow) <= 63, shadow
    assert not shadow.startswith(LONG_COLUMN), shadow
    for kind, name in (("constraint", LONG_FK), ("index", LONG_INDEX)):
        assert [c[0] for c in flat if c[2] == name] == [f"drop {kind}", f"add {kind}"]
    # Each comment on a recreated constraint or index comes back.
    comments = {(c[0], c[2], c[3]) for c in flat if c[0].startswith("comment")}
    assert {
        ("comment index", "ix_pkg_orders_customer", "orders by customer"),
        ("comment index", "ux_pkg_accounts_plan", "a plan once"),
        ("comment constraint", "fk_pkg_orders_customer", "the customer's"),
        ("comment constraint", "uq_pkg_orders_customer_note", "one note each"),
        ("comment constraint", "pk_pkg_accounts", "one account each"),
        ("comment constraint", f"{KEY}_pkey", "the key"),
    } <= comments
    with pg.connect() as conn:
        names_not_null = conn.dialect.server_version_info >= (18,)
    if names_not_null:
        # PostgreSQL 18 names NOT NULL: the new column keeps the old one's name.
        named = ("add constraint", "pkg_orders", "nn_pkg_orders_customer", "NOT NULL customer_id")
        assert named in flat
