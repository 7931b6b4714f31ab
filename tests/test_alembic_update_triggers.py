"""Which ops fire a user's ``UPDATE`` row triggers on the table they change, and how often.

A user's ``BEFORE UPDATE`` and ``AFTER UPDATE`` row triggers on the table
count their firings into an audit table; each op runs on a table of
:data:`ROWS` rows, in each of its modes (one transaction, run or as a
``--sql`` script; ``online=True``, run or as a script, which psql or the
mariadb client runs), and the counts are pinned in :data:`FIRINGS`
(``docs/alembic.md``, "Triggers", tells users the same): once a row each
way, none, or a refusal before any change (nothing fired). Online and
script agree for every op.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.operations import MigrateOperation, Operations
from sqlalchemy.engine import Engine

import _clients
import _databases
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _offline_scripts import op_sql, run_online
from sqlalchemy_ulid.alembic import (
    AddULIDColumnOp,
    AddUUID7ColumnOp,
    AlterULIDStorageOp,
    AlterUUID7StorageOp,
    ConvertPrimaryKeyToULIDOp,
)

TABLE = "trg_orders"
AUDIT = "trg_audit"
ROWS = 6
#: How long the client may take to run a script, at most.
BOUND = 90.0

#: The modes: one (online=False, run), one-script (online=False, --sql),
#: online (online=True, run), script (online=True, --sql, run by psql or mariadb).
_ONCE = (ROWS, ROWS)
_PG_STORAGE = "triggers or views depend on trg_orders"
_MARIADB_STORAGE = "trg_orders has triggers"
_KEY = "triggers depend on the tables whose key columns would change"

#: (server, op, mode) -> (BEFORE UPDATE firings, AFTER UPDATE firings), or the
#: refusal's text (the op refuses a table with a trigger of the user's).
FIRINGS: dict[tuple[str, str, str], tuple[int, int] | str] = {
    # The backfill: one UPDATE of each row, each way, on both servers.
    **{
        (server, name, mode): _ONCE
        for server in ("postgresql", "mysql")
        for name in ("add_ulid_column", "add_uuid7_column")
        for mode in ("one", "online", "script")
    },
    **{
        (server, name, mode): expected
        for name in ("alter_ulid_storage", "alter_uuid7_storage")
        for server, mode, expected in (
            # PostgreSQL rewrites the column (ALTER ... TYPE ... USING): no row trigger fires.
            ("postgresql", "one", (0, 0)),
            ("postgresql", "one-script", (0, 0)),
            ("postgresql", "online", _PG_STORAGE),
            ("postgresql", "script", _PG_STORAGE),
            # MariaDB converts in place through a holding type: one UPDATE of each row.
            ("mysql", "one", _ONCE),
            ("mysql", "one-script", _ONCE),
            ("mysql", "online", _MARIADB_STORAGE),
            ("mysql", "script", _MARIADB_STORAGE),
        )
    },
    **{
        (server, "convert_primary_key_to_ulid", mode): _KEY
        for server in ("postgresql", "mysql")
        for mode in ("online", "script")
    },
}


_drop = _databases.dropper(
    TABLE,
    AUDIT,
    "sqlalchemy_ulid_migrations",
    "ulid_key_conversions",
    "ulid_key_conversions_offline",
    functions=["trg_count()"],
    conversions=[TABLE],
)


def _seed(engine: Engine) -> None:
    base = datetime(2024, 1, 1)
    postgresql = engine.dialect.name == "postgresql"
    key = "serial PRIMARY KEY" if postgresql else "INT AUTO_INCREMENT PRIMARY KEY"
    time_type = "timestamp" if postgresql else "DATETIME(3)"
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (id {key}, created_at {time_type} NOT NULL, "
            "ref CHAR(26) NOT NULL, u CHAR(36) NOT NULL)"
        )
        rows = ", ".join(
            f"('{base + timedelta(seconds=i)}', '01ARZ3NDEKTSV4RRFFQ69G{i:04d}', "
            f"'01890a5d-ac96-774b-bcce-b302099a{i:04d}')"
            for i in range(ROWS)
        )
        conn.exec_driver_sql(f"INSERT INTO {TABLE} (created_at, ref, u) VALUES {rows}")
        conn.exec_driver_sql(f"CREATE TABLE {AUDIT} (tg VARCHAR(10) NOT NULL)")
        # The triggers name no column: the key conversion refuses one that names the key.
        if postgresql:
            conn.exec_driver_sql(
                "CREATE FUNCTION trg_count() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"INSERT INTO {AUDIT} VALUES (TG_WHEN); RETURN NEW; END $$"
            )
            for when in ("BEFORE", "AFTER"):
                conn.exec_driver_sql(
                    f"CREATE TRIGGER trg_{when.lower()} {when} UPDATE ON {TABLE} "
                    "FOR EACH ROW EXECUTE FUNCTION trg_count()"
                )
        else:
            for when in ("BEFORE", "AFTER"):
                conn.exec_driver_sql(
                    f"CREATE TRIGGER trg_{when.lower()} {when} UPDATE ON {TABLE} "
                    f"FOR EACH ROW INSERT INTO {AUDIT} VALUES ('{when}')"
                )


def _op(name: str, online: bool) -> MigrateOperation:
    if name == "add_ulid_column":
        return AddULIDColumnOp(TABLE, "public_id", "created_at", online=online)
    if name == "add_uuid7_column":
        # MariaDB's script needs the storage named (binary), PostgreSQL's too.
        return AddUUID7ColumnOp(TABLE, "public_id", "created_at", storage="binary", online=online)
    if name == "alter_ulid_storage":
        return AlterULIDStorageOp(
            TABLE, "ref", from_storage="text", to_storage="binary", nullable=False, online=online
        )
    if name == "alter_uuid7_storage":
        return AlterUUID7StorageOp(
            TABLE, "u", from_storage="text", to_storage="binary", nullable=False, online=online
        )
    assert name == "convert_primary_key_to_ulid"
    return ConvertPrimaryKeyToULIDOp(TABLE, from_time="created_at")


def _firings(engine: Engine) -> tuple[int, int]:
    with engine.connect() as conn:
        counts = dict(conn.exec_driver_sql(f"SELECT tg, COUNT(*) FROM {AUDIT} GROUP BY tg").all())
    return int(counts.get("BEFORE", 0)), int(counts.get("AFTER", 0))


def _rows(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.exec_driver_sql(f"SELECT COUNT(*) FROM {TABLE}").scalar_one())


#: what each op runs in: the add ops write a script with online=True only,
#: and the key conversion has one mode online (its phases) and its script
CASES = sorted({(name, mode) for _, name, mode in FIRINGS})


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_update_triggers_fire_as_documented(server: Engine, name: str, mode: str) -> None:
    dialect = server.dialect.name
    expected = FIRINGS[(dialect, name, mode)]
    _seed(server)
    op = _op(name, online=mode in ("online", "script"))
    found: Any
    try:
        if mode.endswith("script"):
            script = op_sql(server, op)
            done = _clients.run(server, script, timeout=BOUND)
            if done.returncode != 0:
                raise ValueError(done.stderr)
        else:
            run_online(server, op)
    except (ValueError, sa.exc.DBAPIError) as exc:
        found = str(exc)
    else:
        found = _firings(server)
        assert _rows(server) == ROWS
    if isinstance(expected, str):
        assert expected in str(found)
        assert _firings(server) == (0, 0)
    else:
        assert found == expected


def test_a_trigger_is_kept_from_firing_as_the_docs_say(server: Engine) -> None:
    """PostgreSQL: ``BEFORE UPDATE OF <its columns>`` is not fired by the backfill;
    MariaDB: a guard on a session variable set around the op on the migration's
    connection. The AFTER trigger, left as it was, fires once a row."""
    _seed(server)
    postgresql = server.dialect.name == "postgresql"
    with server.begin() as conn:
        if postgresql:
            conn.exec_driver_sql(f"DROP TRIGGER trg_before ON {TABLE}")
            conn.exec_driver_sql(
                f"CREATE TRIGGER trg_before BEFORE UPDATE OF created_at, ref ON {TABLE} "
                "FOR EACH ROW EXECUTE FUNCTION trg_count()"
            )
        else:
            conn.exec_driver_sql("DROP TRIGGER trg_before")
            conn.exec_driver_sql(
                f"CREATE TRIGGER trg_before BEFORE UPDATE ON {TABLE} FOR EACH ROW BEGIN "
                f"IF @skip_audit IS NULL THEN INSERT INTO {AUDIT} VALUES ('BEFORE'); END IF; END"
            )

    def add(operations: Operations) -> None:
        if not postgresql:
            operations.execute("SET @skip_audit = 1")
        operations.invoke(_op("add_ulid_column", online=True))
        if not postgresql:
            operations.execute("SET @skip_audit = NULL")

    run_online(server, add)
    assert _firings(server) == (0, ROWS)
    assert _rows(server) == ROWS
