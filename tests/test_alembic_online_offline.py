"""``add_ulid_column(..., online=True)`` offline (``--sql``), run by psql and mariadb.

Odd table names (a quote, a percent) and time columns that cannot date ids:
the script is applied with the real ``psql`` or ``mariadb`` client, stopping
at the first error, as a user applies it. On MariaDB the script is written by
a real ``alembic upgrade --sql`` and applied while a writer inserts rows.
"""

from __future__ import annotations

import io
import os
import re
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from alembic.util import CommandError
from sqlalchemy.engine import Connection, Engine

import _clients
import _databases
import _writers
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _offline_scripts import VERSION_TABLE, alembic_sql, op_sql
from conftest import Backend, private_engine
from sqlalchemy_ulid import ULID
from sqlalchemy_ulid._time import to_ms
from sqlalchemy_ulid.alembic._inspect import safe_name

DAYS = ["'2024-01-01'", "'2024-01-02'"]
DAYS_MS = [1704067200000, 1704153600000]


@pytest.fixture
def pg(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["postgresql"]) as engine:
        yield engine


def _script(table: str) -> str:
    """The ``--sql`` output of ``add_ulid_column(table, ..., online=True)``."""
    return op_sql(
        "postgresql",
        lambda ops: ops.add_ulid_column(table, "public_id", "created_at", online=True),
        transactional_ddl=True,
    )


def _make(engine: Engine, table: str, time_type: str, values: list[str]) -> str:
    quoted = engine.dialect.identifier_preparer.quote(table)  # % doubled for the driver
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {quoted}")
        conn.exec_driver_sql(
            f"CREATE TABLE {quoted} (id int PRIMARY KEY, created_at {time_type} NOT NULL)"
        )
        rows = ", ".join(f"({i}, {v})" for i, v in enumerate(values, 1))
        conn.exec_driver_sql(f"INSERT INTO {quoted} VALUES {rows}")
    return quoted


@pytest.mark.parametrize(
    ("table", "time_type", "values", "millis"),
    [
        # A quote ended the script's string literals early.
        ("o'brien", "timestamp", DAYS, DAYS_MS),
        # A percent was read by format() and RAISE as a placeholder.
        ("100%_done", "timestamp", DAYS, DAYS_MS),
        # Both, and integer milliseconds.
        ("it's 50%", "bigint", ["1700000000123", "1700000000124"], [1700000000123, 1700000000124]),
    ],
)
def test_offline_script_runs_for_a_table_name_with_a_quote_or_percent(
    pg: Engine, table: str, time_type: str, values: list[str], millis: list[int]
) -> None:
    quoted = _make(pg, table, time_type, values)
    try:
        done = _clients.psql(pg, _script(table))
        assert done.returncode == 0, done.stderr
        assert f"rows of {table}.public_id filled" in done.stderr
        with pg.connect() as conn:
            ids = conn.exec_driver_sql(f"SELECT public_id FROM {quoted} ORDER BY id").scalars()
            made = [ULID.from_uuid(i).timestamp_ms for i in ids]
            column = next(
                c for c in sa.inspect(conn).get_columns(table) if c["name"] == "public_id"
            )
        assert made == millis
        assert column["nullable"] is False
    finally:
        _databases.drop_tables(pg, quoted)


@pytest.mark.parametrize(
    ("time_type", "value"),
    [
        ("double precision", "1700000000.5"),  # epoch seconds: ids dated 1970
        ("numeric(20,3)", "1700000000123.9"),  # milliseconds, but rounded
        ("real", "1700000000"),  # a float
        ("date", "'2024-01-01'"),  # a day, not a moment (refused online too)
    ],
)
@pytest.mark.parametrize("stop", [True, False], ids=["ON_ERROR_STOP=1", "psql -f alone"])
def test_offline_script_refuses_a_time_column_that_cannot_date_ids(
    pg: Engine, time_type: str, value: str, stop: bool
) -> None:
    quoted = _make(pg, "offline_num", time_type, [value])
    try:
        done = _clients.psql(pg, _script("offline_num"), stop=stop)
        assert done.returncode != 0
        assert "offline_num.created_at is" in done.stderr, done.stderr
        assert "not a timestamp or an integer of Unix milliseconds" in done.stderr
        with pg.connect() as conn:
            columns = [c["name"] for c in sa.inspect(conn).get_columns("offline_num")]
        assert columns == ["id", "created_at"]  # stopped before any change
    finally:
        _databases.drop_tables(pg, quoted)


def _pg_schema(engine: Engine, table: str) -> tuple[object, ...]:
    """What the op leaves: columns (type, nullability), constraints, indexes."""
    with engine.connect() as conn:
        inspector = sa.inspect(conn)
        columns = [(c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)]
        constraints = conn.exec_driver_sql(
            "SELECT conname, contype, convalidated FROM pg_constraint "
            "WHERE conrelid = %(t)s::regclass ORDER BY conname",
            {"t": engine.dialect.identifier_preparer.quote(table).replace("%%", "%")},
        ).all()
        indexes = conn.exec_driver_sql(
            "SELECT i.relname, x.indisvalid, x.indisunique FROM pg_index x "
            "JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = %(t)s::regclass "
            "ORDER BY i.relname",
            {"t": engine.dialect.identifier_preparer.quote(table).replace("%%", "%")},
        ).all()
    return columns, [tuple(r) for r in constraints], [tuple(r) for r in indexes]


@pytest.mark.parametrize(
    "table",
    [
        "offline_again",
        "it's 50% again",
        # uq_<table>_public_id is over 63 bytes: the constraint's name is hashed.
        "offline_again_with_a_name_long_enough_to_hash_its_unique_key",
    ],
)
def test_offline_script_run_whole_a_second_time_does_nothing(pg: Engine, table: str) -> None:
    # The second run failed with 'relation "uq_<table>_public_id" already exists'
    # (and, with a long name, 'relation "uq_<table>_<hash>" already exists').
    quoted = _make(pg, table, "timestamp", DAYS)
    try:
        script = _script(table)
        first = _clients.psql(pg, script)
        assert first.returncode == 0, first.stderr
        done = _pg_schema(pg, table)
        with pg.connect() as conn:
            ids = conn.exec_driver_sql(f"SELECT public_id FROM {quoted} ORDER BY id").all()
        again = _clients.psql(pg, script)
        assert again.returncode == 0, again.stderr
        assert _pg_schema(pg, table) == done
        with pg.connect() as conn:
            assert conn.exec_driver_sql(f"SELECT public_id FROM {quoted} ORDER BY id").all() == ids
        names = {c[0] for c in done[1]}
        assert safe_name(f"uq_{table}_public_id", pg.dialect) in names
        assert not any(n.startswith("ck_") for n in names)
    finally:
        _databases.drop_tables(pg, quoted)


def test_offline_script_rerun_drops_an_invalid_index_left_by_a_failed_build(pg: Engine) -> None:
    quoted = _make(pg, "offline_invalid", "timestamp", DAYS)
    try:
        script = _script("offline_invalid")
        phase4 = script.index("-- drop invalid unique index")
        head = _clients.psql(pg, script[:phase4])
        assert head.returncode == 0, head.stderr
        # A build that failed half-way (here: on a duplicate) leaves the index INVALID.
        with pg.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            second = conn.exec_driver_sql(
                "SELECT public_id FROM offline_invalid WHERE id = 2"
            ).scalar()
            conn.exec_driver_sql(
                "UPDATE offline_invalid SET public_id = "
                "(SELECT public_id FROM offline_invalid WHERE id = 1) WHERE id = 2"
            )
            with pytest.raises(sa.exc.IntegrityError):
                conn.exec_driver_sql(
                    "CREATE UNIQUE INDEX CONCURRENTLY uq_offline_invalid_public_id "
                    "ON offline_invalid (public_id)"
                )
            conn.exec_driver_sql(
                "UPDATE offline_invalid SET public_id = %(v)s WHERE id = 2", {"v": second}
            )
        assert ("uq_offline_invalid_public_id", False, True) in _pg_schema(pg, "offline_invalid")[2]
        rest = _clients.psql(pg, script)
        assert rest.returncode == 0, rest.stderr
        _, constraints, indexes = _pg_schema(pg, "offline_invalid")
        assert ("uq_offline_invalid_public_id", "u", True) in constraints
        assert ("uq_offline_invalid_public_id", True, True) in indexes
    finally:
        _databases.drop_tables(pg, quoted)


# -- MariaDB --------------------------------------------------------------------

#: The largest Unix millisecond a ULID holds.
MAX_MS = 2**48 - 1
#: A name of these tests' own: a database may hold an ``offline_live`` of
#: another tool's (and alembic_sql's version table is not ``alembic_version``).
LIVE = f"offline_live_{os.getpid()}"


@pytest.fixture
def maria(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["mysql"]) as engine:
        yield engine
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {VERSION_TABLE}, {LIVE}")


def _alembic_sql(engine: Engine, tmp_path: Path, call: str) -> str:
    """The script a real ``alembic upgrade head --sql`` writes for a revision running ``call``."""
    return alembic_sql(engine, tmp_path, call)


def _ours(script: str) -> str:
    """The op's part of an ``alembic --sql`` script (Alembic's own table is made once)."""
    start = script.index("-- add_ulid_column(")
    end = script.index("\n", script.index("SET SESSION sql_mode = @sqlalchemy_ulid_sql_mode"))
    return script[start:end]


def _maria_make(engine: Engine, quoted: str, columns: str, rows: str = "") -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {quoted}")
        conn.exec_driver_sql(f"CREATE TABLE {quoted} ({columns})")
        if rows:
            conn.exec_driver_sql(f"INSERT INTO {quoted} VALUES {rows}")


def _columns(engine: Engine, table: str) -> dict[str, tuple[str, bool]]:
    """Each column's type and nullability."""
    with engine.connect() as conn:
        return {
            c["name"]: (str(c["type"]), bool(c["nullable"]))
            for c in sa.inspect(conn).get_columns(table)
        }


class _LiveWriter(_writers.Writers):
    """Insert rows (no public_id: the column may not exist yet) until told to stop."""

    def begin(self, conn: Connection, n: int) -> None:
        conn.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 10, lock_wait_timeout = 10")

    def write(self, conn: Connection, n: int) -> None:
        while not self.stop.is_set():
            self.send(conn, f"INSERT INTO {LIVE} (created_at) VALUES (UTC_TIMESTAMP(3))")
            time.sleep(0.002)


def test_mariadb_offline_script_fills_while_a_writer_inserts(maria: Engine, tmp_path: Path) -> None:
    rows = 1500
    base = 1704067200000  # 2024-01-01, UTC
    # Three rows a millisecond: ties, numbered in key order within a batch.
    values = ", ".join(
        f"({i}, FROM_UNIXTIME({(base + (i - 1) // 3) / 1000:.3f}))" for i in range(1, rows + 1)
    )
    _maria_make(
        maria,
        LIVE,
        "id bigint AUTO_INCREMENT PRIMARY KEY, created_at datetime(3) NOT NULL",
    )
    with maria.begin() as conn:
        conn.exec_driver_sql("SET time_zone = '+00:00'")
        conn.exec_driver_sql(f"INSERT INTO {LIVE} VALUES {values}")
    script = _alembic_sql(
        maria,
        tmp_path,
        f"add_ulid_column('{LIVE}', 'public_id', 'created_at', online=True, "
        "server_default=True, batch_size=200, pause=0.02)",
    )
    assert "BEGIN NOT ATOMIC" in script
    assert "ALGORITHM=INSTANT" in script
    # lock_timeout's default, the statement's own (nothing left on the session)
    assert "SET STATEMENT lock_wait_timeout=1, innodb_lock_wait_timeout=1 FOR ALTER" in script
    with _LiveWriter(maria, 1, join=30, daemon=True) as writer:
        done = _clients.mariadb(maria, script)
    writer.check()
    assert done.returncode == 0, done.stderr
    # The rows, and the writer's rows inserted before the DEFAULT was set.
    filled = re.findall(rf"add_ulid_column: (\d+) rows of {LIVE}.public_id filled", done.stdout)
    assert int(filled[-1]) >= rows
    assert writer.latencies, "the writer inserted no row"
    with maria.connect() as conn:
        conn.exec_driver_sql("SET time_zone = '+00:00'")
        table = conn.exec_driver_sql(
            "SELECT id, FLOOR(UNIX_TIMESTAMP(created_at) * 1000), public_id "
            f"FROM {LIVE} ORDER BY id"
        ).all()
        unique = sa.inspect(conn).get_unique_constraints(LIVE)
    assert len(table) > rows
    ties: dict[tuple[int, int], int] = {}
    for key, ms, raw in table[:rows]:
        made = ULID.from_bytes(raw)
        assert made.timestamp_ms == int(ms)
        # The batches are the keys 1-200, 201-400, ...: ties restart in each one.
        group = (int(ms), (key - 1) // 200)
        ties[group] = ties.get(group, 0) + 1
        assert int.from_bytes(raw[6:8], "big") == ties[group], key
    for _key, ms, raw in table[rows:]:
        # The writer's rows: filled by the backfill, or by the DEFAULT (the time of insert).
        assert abs(ULID.from_bytes(raw).timestamp_ms - int(ms)) < 5000
    assert _columns(maria, LIVE)["public_id"] == ("BINARY(16)", False)
    assert [u["column_names"] for u in unique] == [["public_id"]]
    # The backfill block again: nothing to do, nothing changed.
    block = script[script.index("-- fill (fill)") : script.index("-- not null (ddl)")]
    again = _clients.mariadb(maria, block)
    assert again.returncode == 0, again.stderr
    assert "filled" not in again.stdout
    with maria.connect() as conn:
        after = conn.exec_driver_sql(f"SELECT id, public_id FROM {LIVE} ORDER BY id").all()
    assert [(r[0], r[2]) for r in table] == [tuple(r) for r in after[: len(table)]]
    _databases.drop_tables(maria, LIVE)


def test_mariadb_offline_script_runs_for_odd_names(maria: Engine, tmp_path: Path) -> None:
    # A quote, a backtick, a percent and a backslash, in the table and the key column.
    table, key = "o'brien`s 50% \\x", "k`ey'"
    # Quoted for the driver: a % doubled.
    quoted = maria.dialect.identifier_preparer.quote(table)
    key_sql = maria.dialect.identifier_preparer.quote(key)
    _maria_make(
        maria, quoted, f"{key_sql} int PRIMARY KEY, created_at bigint NOT NULL",
        "(1, 1700000000123), (2, 1700000000123), (3, 0)",
    )  # fmt: skip
    try:
        script = _alembic_sql(
            maria, tmp_path, f"add_ulid_column({table!r}, 'public_id', 'created_at', online=True)"
        )
        done = _clients.mariadb(maria, script)
        assert done.returncode == 0, done.stderr
        with maria.connect() as conn:
            ids = conn.exec_driver_sql(
                f"SELECT public_id FROM {quoted} ORDER BY {key_sql}"
            ).scalars()
            made = [ULID.from_bytes(raw) for raw in ids]
        assert [m.timestamp_ms for m in made] == [1700000000123, 1700000000123, 0]
        assert made[0] < made[1]
    finally:
        _databases.drop_tables(maria, quoted)


@pytest.mark.parametrize(
    ("time_type", "values"),
    [
        # Microseconds floored (not rounded up into the next millisecond), and
        # a DATETIME past 2038 (where UNIX_TIMESTAMP() gives up on MariaDB 10.11).
        ("datetime(6)", ["2024-01-01 00:00:00.000999", "2100-06-01 12:00:00.500000", "1970-01-01"]),
        # A TIMESTAMP is read in UTC, whatever the client session's time zone.
        ("timestamp(6)", ["2024-01-01 00:00:00.000999", "2038-01-19 03:14:07.999999"]),
    ],
)
def test_mariadb_offline_script_dates_ids_exactly(
    maria: Engine, tmp_path: Path, time_type: str, values: list[str]
) -> None:
    rows = ", ".join(f"({i}, '{v}')" for i, v in enumerate(values, 1))
    with maria.begin() as conn:
        conn.exec_driver_sql("SET time_zone = '+00:00'")
        conn.exec_driver_sql("DROP TABLE IF EXISTS offline_exact")
        conn.exec_driver_sql(
            f"CREATE TABLE offline_exact (id int PRIMARY KEY, created_at {time_type} NOT NULL)"
        )
        conn.exec_driver_sql(f"INSERT INTO offline_exact VALUES {rows}")
    try:
        script = _alembic_sql(
            maria,
            tmp_path,
            "add_ulid_column('offline_exact', 'public_id', 'created_at', online=True)",
        )
        done = _clients.mariadb(
            maria,
            script + "SELECT @@SESSION.time_zone AS zone_after;",
            "--init-command=SET time_zone = '+05:00'",
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.endswith("zone_after\n+05:00\n")  # the session's own, put back
        with maria.connect() as conn:
            ids = conn.exec_driver_sql("SELECT public_id FROM offline_exact ORDER BY id").scalars()
            made = [ULID.from_bytes(raw).timestamp_ms for raw in ids]
        expected = [to_ms(datetime.fromisoformat(v).replace(tzinfo=timezone.utc)) for v in values]
        assert made == expected
    finally:
        _databases.drop_tables(maria, "offline_exact")


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        # Two key columns: no order to walk in batches.
        ("(a int, b int, created_at datetime, PRIMARY KEY (a, b))",
         "single-column primary key on offline_bad to walk it in batches; it has 2 columns"),
        # No primary key at all.
        ("(a int, created_at datetime)",
         "single-column primary key on offline_bad to walk it in batches; it has 0 columns"),
        # A day, not a moment (refused online too).
        ("(id int PRIMARY KEY, created_at date)", "offline_bad.created_at is date, not a DATETIME"),
        # Epoch seconds in a float: ids dated 1970.
        ("(id int PRIMARY KEY, created_at double)", "offline_bad.created_at is double, not a"),
        # Rounded milliseconds.
        ("(id int PRIMARY KEY, created_at decimal(20,3))", "is decimal(20,3), not a"),
        # A FULLTEXT index: no instant ADD COLUMN, no LOCK=NONE rebuild.
        ("(id int PRIMARY KEY, created_at datetime, note text, FULLTEXT KEY ft (note))",
         "offline_bad has ft (FULLTEXT)"),
        # Not InnoDB.
        ("(id int PRIMARY KEY, created_at datetime) ENGINE=MyISAM",
         "needs an InnoDB table; offline_bad is MyISAM"),
        # The id column exists, of another type.
        ("(id int PRIMARY KEY, created_at datetime, public_id char(26))",
         "offline_bad.public_id exists as char(26), not binary(16)"),
        # The time column is missing.
        ("(id int PRIMARY KEY, made datetime)", "there is no column offline_bad.created_at"),
    ],
)  # fmt: skip
def test_mariadb_offline_script_refuses_before_any_change(
    maria: Engine, tmp_path: Path, definition: str, message: str
) -> None:
    with maria.begin() as conn:
        conn.exec_driver_sql("DROP TABLE IF EXISTS offline_bad")
        conn.exec_driver_sql(f"CREATE TABLE offline_bad {definition}")
    try:
        before = _columns(maria, "offline_bad")
        script = _alembic_sql(
            maria,
            tmp_path,
            "add_ulid_column('offline_bad', 'public_id', 'created_at', online=True)",
        )
        done = _clients.mariadb(maria, script)
        assert done.returncode != 0
        assert message in done.stderr, done.stderr
        assert "ERROR 1644 (45000)" in done.stderr
        assert _columns(maria, "offline_bad") == before  # stopped before any change
    finally:
        _databases.drop_tables(maria, "offline_bad")


@pytest.mark.parametrize(
    ("time_type", "values", "message"),
    [
        # Before 1970.
        ("bigint", "(1, 1700000000000), (2, -5), (3, 1700000000001)",
         "offline_times.created_at of the row with id = 2 is -5"),
        # Past the ULID range.
        ("bigint unsigned", f"(1, 1700000000000), (2, {MAX_MS + 1}), (3, 1)",
         f"the row with id = 2 is {MAX_MS + 1}"),
        # NULL.
        ("datetime(3)", "(1, '2024-01-01'), (2, NULL), (3, '2024-01-02')",
         "the row with id = 2 is NULL"),
        # Half a millisecond before 1970: floored, not rounded up to 0.
        ("datetime(6)", "(1, '2024-01-01'), (2, '1969-12-31 23:59:59.999500'), (3, '2024-01-02')",
         "the row with id = 2 is 1969-12-31 23:59:59.999500"),
    ],
)  # fmt: skip
def test_mariadb_offline_batch_stops_at_a_time_no_ulid_holds(
    maria: Engine, tmp_path: Path, time_type: str, values: str, message: str
) -> None:
    _maria_make(maria, "offline_times", f"id int PRIMARY KEY, created_at {time_type} NULL", values)
    try:
        script = _alembic_sql(
            maria,
            tmp_path,
            "add_ulid_column('offline_times', 'public_id', 'created_at', online=True, "
            "batch_size=1)",
        )
        done = _clients.mariadb(maria, script)
        assert done.returncode != 0
        assert message in done.stderr, done.stderr
        with maria.connect() as conn:
            stored = conn.exec_driver_sql(
                "SELECT id, public_id FROM offline_times ORDER BY id"
            ).all()
        # The batch before it was filled; the bad row and the ones after it were not.
        assert stored[0][1] is not None
        assert [r[1] for r in stored[1:]] == [None, None]
        assert _columns(maria, "offline_times")["public_id"] == ("BINARY(16)", True)
        # The row given a valid time, the script from its backfill on finishes the job.
        with maria.begin() as conn:
            conn.exec_driver_sql(
                "UPDATE offline_times SET created_at = "
                + ("1700000000002" if "int" in time_type else "'2024-01-03'")
                + " WHERE id = 2"
            )
        again = _clients.mariadb(maria, _ours(script))  # the op's whole script, again
        assert again.returncode == 0, again.stderr
        with maria.connect() as conn:
            after = conn.exec_driver_sql(
                "SELECT id, public_id FROM offline_times ORDER BY id"
            ).all()
        assert after[0] == stored[0]  # the batch filled before is kept
        assert all(raw is not None for _, raw in after)
        assert _columns(maria, "offline_times")["public_id"] == ("BINARY(16)", False)
    finally:
        _databases.drop_tables(maria, "offline_times")


@pytest.mark.parametrize(
    ("dialect_name", "storage", "message"),
    [
        # Text ids are not made in SQL here.
        ("mysql", "text", "offline needs binary storage, not 'text'"),
        ("postgresql", "text", "offline needs uuid or binary storage, not 'text'"),
        # One writer at a time: nothing to run online, and no script either.
        ("sqlite", "auto", "PostgreSQL and MariaDB only; on sqlite run this migration online"),
    ],
)
def test_offline_script_refusals_write_nothing(
    dialect_name: str, storage: str, message: str
) -> None:
    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect_name=dialect_name, opts={"as_sql": True, "output_buffer": buffer}
    )
    with pytest.raises(CommandError, match=re.escape(message)):
        Operations(context).add_ulid_column(
            "orders", "public_id", "created_at", online=True, storage=storage
        )
    assert buffer.getvalue() == ""


def test_mariadb_offline_not_null_step_stops_at_a_row_written_without_an_id(
    maria: Engine, tmp_path: Path
) -> None:
    """Without server_default, a row inserted after the backfill stops the NOT NULL
    step; the script run again fills it first, then finishes (as the docs say)."""
    _maria_make(
        maria,
        "offline_late",
        "id int PRIMARY KEY, created_at bigint NOT NULL",
        "(1, 1700000000000), (2, 1700000000001)",
    )
    try:
        script = _alembic_sql(
            maria,
            tmp_path,
            "add_ulid_column('offline_late', 'public_id', 'created_at', online=True)",
        )
        phase3 = script.index("-- not null (ddl)")
        # The session settings the script begins with (after Alembic's own table).
        setup = script[script.index("-- add_ulid_column(") : script.index("-- add_ulid_column:")]
        head = _clients.mariadb(maria, script[:phase3])
        assert head.returncode == 0, head.stderr
        with maria.begin() as conn:
            conn.exec_driver_sql("INSERT INTO offline_late (id, created_at) VALUES (3, 5)")
        tail = _clients.mariadb(maria, setup + script[phase3 : script.index("-- unique key (ddl)")])
        assert tail.returncode != 0
        assert "Data truncated for column 'public_id'" in tail.stderr, tail.stderr
        assert _columns(maria, "offline_late")["public_id"] == ("BINARY(16)", True)
        with maria.connect() as conn:
            late = conn.exec_driver_sql("SELECT public_id FROM offline_late WHERE id = 3").scalar()
        assert late is None  # no empty bytes, no id of another time
        again = _clients.mariadb(maria, _ours(script))
        assert again.returncode == 0, again.stderr
        with maria.connect() as conn:
            ids = conn.exec_driver_sql("SELECT public_id FROM offline_late ORDER BY id").scalars()
            made = [ULID.from_bytes(raw).timestamp_ms for raw in ids]
        assert made == [1700000000000, 1700000000001, 5]
        assert _columns(maria, "offline_late")["public_id"] == ("BINARY(16)", False)
    finally:
        _databases.drop_tables(maria, "offline_late")


def test_mariadb_offline_script_is_written_outside_the_migration_transaction() -> None:
    # An env.py with transactional_ddl=True: the block must not sit in its BEGIN.
    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect_name="mysql",
        opts={"as_sql": True, "output_buffer": buffer, "transactional_ddl": True},
    )
    with context.begin_transaction():
        Operations(context).add_ulid_column("orders", "public_id", "created_at", online=True)
    script = buffer.getvalue()
    ours = script.index("-- add_ulid_column(")
    assert script.rindex("COMMIT;", 0, ours) > script.rindex("BEGIN;", 0, ours)
    assert "BEGIN;" in script[script.rindex("DELIMITER ;") :]  # the migration's again, after
