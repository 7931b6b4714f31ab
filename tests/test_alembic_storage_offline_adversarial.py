"""The offline (``--sql``) storage conversion script, run the ways users run it.

Each test is a way a user ran ``alembic upgrade --sql`` through the real
``psql`` on PostgreSQL in its default settings and got a different table
than they asked for: without ``ON_ERROR_STOP``, on a partitioned table,
with an index the rebuild would change, with a schema first on the
``search_path`` that does not hold the table. The online op is held to
the same refusals where it shares the cause.
"""

from __future__ import annotations

import io
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.engine import Connection, Engine

import _clients
import _databases
import _writers
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _offline_scripts import VERSION_TABLE, alembic_sql, op_sql
from _sessions import Release, When, kill_application, waiting
from conftest import Backend, private_engine
from sqlalchemy_ulid import ULID, new_ulid

TABLE = "adv_items"
OTHER_SCHEMA = "adv_first"
ULIDS = [f"01ARZ3NDEKTSV4RRFFQ69G5F{n:02d}" for n in range(10, 40)]


@pytest.fixture
def engine(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["postgresql"], _drop) as engine:
        yield engine


_drop = _databases.dropper(
    *(TABLE, f"{TABLE}_a", f"{TABLE}_b", f"{TABLE}_kid", VERSION_TABLE),
    functions=[f"{TABLE}_ref__ulid_sync()"],
    schemas=[OTHER_SCHEMA],
    conversions=[TABLE, f"{TABLE}_a", f"{TABLE}_b", f"{TABLE}_kid"],
    also=[f"DROP PUBLICATION IF EXISTS {TABLE}_pub"],
)


def _create(engine: Engine, ddl: str = "", *, nullable: bool = False) -> None:
    """``adv_items``: ``ref`` a ULID in text storage, ``name`` text; then ``ddl``."""
    null = "" if nullable else " NOT NULL"
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (id int PRIMARY KEY, ref char(26){null}, name text, "
            "gone boolean NOT NULL DEFAULT false)"
        )
        conn.execute(
            sa.text(f"INSERT INTO {TABLE} (id, ref, name) VALUES (:id, :ref, 'n')"),
            [{"id": i, "ref": ref} for i, ref in enumerate(ULIDS)],
        )
        for statement in filter(None, (s.strip() for s in ddl.split(";"))):
            conn.exec_driver_sql(statement)


def _shape(engine: Engine, table: str = TABLE) -> dict[str, Any]:
    """Columns, index definitions and constraints, as the catalog spells them."""
    with engine.connect() as conn:
        rel = conn.exec_driver_sql(f"SELECT to_regclass('{table}')::oid").scalar()

        def rows(sql: str) -> list[tuple[Any, ...]]:
            return sorted(tuple(r) for r in conn.exec_driver_sql(sql, (rel,)).all())

        return {
            "columns": rows(
                "SELECT attname, format_type(atttypid, atttypmod), attnotnull "
                "FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped"
            ),
            "indexes": rows(
                "SELECT pg_get_indexdef(indexrelid), indisreplident FROM pg_index "
                "WHERE indrelid = %s"
            ),
            "constraints": rows(
                "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s"
            ),
            "triggers": rows("SELECT tgname FROM pg_trigger WHERE tgrelid = %s"),
        }


def _op_sql(table: str = TABLE, **options: Any) -> str:
    """The op's own part of an ``--sql`` script (the ULID ``ref``, text to uuid)."""
    return op_sql(
        "postgresql",
        lambda ops: ops.alter_ulid_storage(
            table, "ref", from_storage="text", to_storage="auto", online=True, **options
        ),
        transactional_ddl=True,
    )


def _online(engine: Engine, table: str = TABLE, search_path: str | None = None) -> None:
    with engine.connect() as conn:
        if search_path is not None:
            conn.exec_driver_sql(f"SET search_path = {search_path}")
            conn.commit()
        context = MigrationContext.configure(conn, opts={"transactional_ddl": True})
        with context.begin_transaction():
            Operations(context).alter_ulid_storage(
                table, "ref", from_storage="text", to_storage="auto", online=True
            )


def _alembic_upgrade_sql(engine: Engine, tmp_path: Path) -> str:
    """What a real ``alembic upgrade head --sql`` writes for the conversion."""
    return alembic_sql(
        engine,
        tmp_path,
        f"alter_ulid_storage('{TABLE}', 'ref', from_storage='text', to_storage='auto', "
        "online=True)",
    )


def _scalar(engine: Engine, sql: str) -> Any:
    with engine.connect() as conn:
        return conn.exec_driver_sql(sql).scalar()


@pytest.mark.parametrize(
    "ddl",
    [
        # The swap's DROP COLUMN would drop this CHECK with the old column.
        f"ALTER TABLE {TABLE} ADD CONSTRAINT ck_ref CHECK (ref <> '')",
        # A value that is not a ULID: the copy would convert every row but it.
        f"INSERT INTO {TABLE} (id, ref) VALUES (99, 'not a ulid at all 12345678')",
    ],
    ids=["check-constraint", "not-a-ulid"],
)
def test_without_on_error_stop_a_refusal_still_stops_the_script(
    engine: Engine, tmp_path: Path, ddl: str
) -> None:
    # psql -f upgrade.sql, as users type it: without ON_ERROR_STOP psql
    # goes on after a failed statement, to the phases the check refused.
    _create(engine, ddl)
    before = _shape(engine)
    done = _clients.psql(engine, _alembic_upgrade_sql(engine, tmp_path), stop=False)
    assert done.returncode != 0, done.stderr
    assert "nothing was changed" in done.stderr
    assert _shape(engine) == before
    assert _scalar(engine, f"SELECT count(*) FROM {VERSION_TABLE}") == 0  # not stamped


def _partitioned(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (id int PRIMARY KEY, ref char(26) NOT NULL) "
            "PARTITION BY RANGE (id)"
        )
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE}_a PARTITION OF {TABLE} FOR VALUES FROM (0) TO (20)"
        )
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE}_b PARTITION OF {TABLE} FOR VALUES FROM (20) TO (99)"
        )
        conn.exec_driver_sql(f"CREATE INDEX ix_{TABLE}_ref ON {TABLE} (id, ref)")
        conn.execute(
            sa.text(f"INSERT INTO {TABLE} VALUES (:id, :ref)"),
            [{"id": i, "ref": ref} for i, ref in enumerate(ULIDS)],
        )


def _inherited(engine: Engine) -> None:
    _create(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE {TABLE}_kid (extra int) INHERITS ({TABLE})")
        conn.exec_driver_sql(
            f"INSERT INTO {TABLE}_kid (id, ref, name) VALUES (500, '{ULIDS[0]}', 'k')"
        )


@pytest.mark.parametrize(
    ("build", "target"),
    [
        (_partitioned, TABLE),  # CREATE INDEX CONCURRENTLY fails on it, after the copy
        (_partitioned, f"{TABLE}_a"),  # a partition takes no ADD COLUMN of its own
        (_inherited, TABLE),  # the copy and the swap would reach into the child
        (_inherited, f"{TABLE}_kid"),  # the inherited column cannot be dropped
    ],
    ids=["partitioned", "partition", "inheritance-parent", "inheritance-child"],
)
def test_partitioned_and_inherited_tables_are_refused_before_any_change(
    engine: Engine, build: Any, target: str
) -> None:
    build(engine)
    before = _shape(engine, target)
    done = _clients.psql(engine, _op_sql(target))
    assert done.returncode != 0
    assert "partitioned, a partition or in an inheritance tree" in done.stderr, done.stderr
    assert "nothing was changed" in done.stderr
    assert _shape(engine, target) == before
    with pytest.raises(ValueError, match="partitioned, a partition or in an inheritance tree"):
        _online(engine, target)
    assert _shape(engine, target) == before


@pytest.mark.parametrize(
    ("ddl", "lost"),
    [
        # Two NULLs would become allowed in the rebuilt unique index.
        (f"CREATE UNIQUE INDEX ix_ref ON {TABLE} (ref) NULLS NOT DISTINCT", "NULLS NOT DISTINCT"),
        # The other column's collation and operator class would become the defaults.
        (f'CREATE INDEX ix_name_ref ON {TABLE} (name COLLATE "C", ref)', "collation"),
        (f"CREATE INDEX ix_name_ref ON {TABLE} (name text_pattern_ops, ref)", "operator class"),
        (f"CREATE INDEX ix_ref ON {TABLE} (ref) WITH (fillfactor = 50)", "storage parameters"),
        # Logical replication's key for UPDATE and DELETE: the table would have none.
        (
            f"CREATE UNIQUE INDEX ix_ref ON {TABLE} (ref); "
            f"ALTER TABLE {TABLE} REPLICA IDENTITY USING INDEX ix_ref",
            "REPLICA IDENTITY",
        ),
    ],
    ids=["nulls-not-distinct", "collation", "opclass", "fillfactor", "replica-identity"],
)
def test_an_index_the_rebuild_would_change_is_refused_before_any_change(
    engine: Engine, ddl: str, lost: str
) -> None:
    _create(engine, ddl)
    before = _shape(engine)
    done = _clients.psql(engine, _op_sql())
    assert done.returncode != 0
    assert lost in done.stderr, done.stderr
    assert "nothing was changed" in done.stderr
    assert _shape(engine) == before
    with pytest.raises(ValueError, match=lost):
        _online(engine)
    assert _shape(engine) == before


def test_a_replica_identity_index_refused_keeps_a_published_table_writable(
    engine: Engine,
) -> None:
    # What the refusal prevents: after a swap that dropped the identity's
    # index, a published table refuses every UPDATE and DELETE.
    _create(
        engine,
        f"CREATE UNIQUE INDEX ix_ref ON {TABLE} (ref); "
        f"ALTER TABLE {TABLE} REPLICA IDENTITY USING INDEX ix_ref; "
        f"CREATE PUBLICATION {TABLE}_pub FOR TABLE {TABLE}",
    )
    assert _clients.psql(engine, _op_sql()).returncode != 0
    with engine.begin() as conn:
        assert conn.exec_driver_sql(f"UPDATE {TABLE} SET name = 'm'").rowcount == len(ULIDS)


def test_the_checks_read_the_tables_schema_not_the_first_on_the_search_path(
    engine: Engine,
) -> None:
    # search_path's first schema exists (as "$user" often does) but the table
    # is found in the next one: every check must look where the table is.
    _create(engine, f"CREATE UNIQUE INDEX ix_live_ref ON {TABLE} (ref) WHERE NOT gone")
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {OTHER_SCHEMA}")
    before = _shape(engine)
    options = {"PGOPTIONS": f"-c search_path={OTHER_SCHEMA},public"}
    done = _clients.psql(engine, _op_sql(), env=options)
    assert done.returncode != 0
    assert "the index ix_live_ref uses ref with a WHERE clause" in done.stderr, done.stderr
    assert _shape(engine) == before
    with pytest.raises(ValueError, match="ix_live_ref"):
        _online(engine, search_path=f"{OTHER_SCHEMA}, public")
    assert _shape(engine) == before


def _ulid_values(engine: Engine) -> dict[int, str]:
    """Every row's ``ref`` as ULID text, in either storage."""
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(f"SELECT id, ref FROM {TABLE}").all()
    return {
        key: str(ULID.from_uuid(value)) if isinstance(value, uuid.UUID) else value.strip()
        for key, value in rows
    }


class _Writers(_writers.Writers):
    """Four writers inserting, updating and deleting rows of their own, timed.

    They write ``ref`` (bound as text) until the copy is proved, then only
    the other columns, through the index builds and the swap.
    """

    def __init__(self, engine: Engine, seeded: dict[int, str]) -> None:
        super().__init__(engine, 4, settle=0, join=30)
        self.expected = dict(seeded)
        self.waits: list[float] = []
        self.lock = threading.Lock()

    def write(self, conn: Connection, writer: int) -> None:
        mine = [k for k in self.expected if k % 4 == writer]
        next_id = 1_000_000 * (writer + 1)
        while not self.stop.is_set():
            proved = conn.exec_driver_sql(
                f"SELECT count(*) FROM pg_constraint WHERE conname = "
                f"'ck_{TABLE}_ref__ulid_same' OR (conrelid = to_regclass('{TABLE}') "
                "AND contype = 'u' AND conname = 'uq_ref' AND (SELECT atttypid FROM "
                f"pg_attribute WHERE attrelid = to_regclass('{TABLE}') AND attname = "
                "'ref') = 'uuid'::regtype)"
            ).scalar()
            conn.rollback()
            started = time.monotonic()
            with conn.begin():
                if proved:
                    conn.execute(
                        sa.text(f"UPDATE {TABLE} SET n = n + 1 WHERE id = :i"),
                        {"i": mine[len(self.waits) % len(mine)]},
                    )
                    gone = mine.pop()
                    conn.execute(sa.text(f"DELETE FROM {TABLE} WHERE id = :i"), {"i": gone})
                else:
                    new, changed, gone = str(new_ulid()), str(new_ulid()), mine.pop()
                    target = mine[len(self.waits) % len(mine)]
                    _writers.insert_and_change(conn, TABLE, next_id, new, target, changed)
                    conn.execute(sa.text(f"DELETE FROM {TABLE} WHERE id = :i"), {"i": gone})
            with self.lock:
                self.waits.append(time.monotonic() - started)
                self.expected.pop(gone)
                if not proved:
                    self.expected[next_id], self.expected[target] = new, changed
            next_id += 1
            time.sleep(0.003)


def _killed_waiting(engine: Engine, like: str, bound: float) -> When:
    """psql's session (``adv-kill``) ended once it waits for a lock in a statement ``LIKE like``."""
    return When(
        engine,
        lambda conn: waiting(conn, like, "adv-kill"),
        lambda: kill_application(engine, "adv-kill"),
        bound=bound,
    )


def _reverse_sql() -> str:
    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect_name="postgresql",
        opts={"as_sql": True, "output_buffer": buffer, "transactional_ddl": True},
    )
    Operations(context).alter_ulid_storage(
        TABLE, "ref", from_storage="auto", to_storage="text", online=True
    )
    return buffer.getvalue()


def test_killed_in_an_index_build_then_downgraded_then_run_again_under_four_writers(
    engine: Engine,
) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, ref char(26) NOT NULL "
            "CONSTRAINT uq_ref UNIQUE, n int)"
        )
        conn.exec_driver_sql(f"CREATE INDEX ix_n_ref ON {TABLE} (n, ref)")
        conn.exec_driver_sql(
            f"INSERT INTO {TABLE} SELECT g, '01ARZ3NDEKTSV4RRFF' || lpad(g::text, 8, '0'), g "
            "FROM generate_series(1, 20000) g"
        )
    seeded = _ulid_values(engine)
    before = _shape(engine)
    script = _op_sql(batch_size=1000, pause=0.02)
    # Phases 0-5, then a writer's open transaction: the rerun's first
    # CREATE INDEX CONCURRENTLY waits for it, and psql's session is killed
    # there, leaving an INVALID index on the new column.
    upto_builds = script[: script.index("-- indexes (concurrent)")]
    first = _clients.psql(engine, upto_builds)
    assert first.returncode == 0, first.stderr
    with engine.connect() as writer:
        writer.exec_driver_sql(f"UPDATE {TABLE} SET n = n WHERE id = 1")
        thread = _killed_waiting(engine, "CREATE %INDEX CONCURRENTLY%", bound=60)
        killed = _clients.psql(engine, script, app="adv-kill")
        thread.join(timeout=70)
        writer.rollback()
    assert thread.seen
    assert killed.returncode != 0
    assert "terminating connection" in killed.stderr, killed.stderr
    assert _scalar(engine, "SELECT count(*) FROM pg_index WHERE NOT indisvalid") >= 1
    # The downgrade of the interrupted run only removes what it left.
    down = _clients.psql(engine, _reverse_sql())
    assert down.returncode == 0, down.stderr
    assert "undoing the interrupted conversion" in down.stderr
    assert _shape(engine) == before
    assert _ulid_values(engine) == seeded
    assert _scalar(engine, "SELECT to_regclass('sqlalchemy_ulid_migrations')") is None
    # Run again from the start while four writers go on.
    with _Writers(engine, seeded) as writers:
        time.sleep(0.2)
        done = _clients.psql(engine, script)
        time.sleep(0.2)
    assert done.returncode == 0, done.stderr
    assert not writers.errors, writers.errors
    assert len(writers.waits) > 50
    assert max(writers.waits) < 1.5, sorted(writers.waits)[-5:]
    assert _ulid_values(engine) == writers.expected
    converted = f"SELECT atttypid::regtype::text FROM pg_attribute WHERE attrelid = '{TABLE}'::regclass AND attname = 'ref'"  # noqa: E501
    assert _scalar(engine, converted) == "uuid"


def test_run_in_one_transaction_it_stops_first_saying_why(engine: Engine) -> None:
    # A rerun "from the op's first comment" (without Alembic's COMMIT before
    # it) with psql -1: the blocks cannot commit inside psql's transaction.
    _create(engine)
    before = _shape(engine)
    script = _op_sql()
    rerun = script[script.index("-- alter_ulid_storage(") :]
    done = _clients.psql(engine, rerun, "--single-transaction", stop=False)
    assert done.returncode != 0
    assert "outside a transaction (not psql -1 or --single-transaction" in done.stderr, done.stderr
    assert "invalid transaction termination" not in done.stderr
    assert _shape(engine) == before
    assert _scalar(engine, "SELECT to_regclass('sqlalchemy_ulid_migrations')") is None


def test_the_downgrade_after_a_kill_before_the_new_column_leaves_no_state_row(
    engine: Engine,
) -> None:
    # Killed after the state table was made and before the new column: the
    # downgrade finds the column in text storage and nothing else of the run
    # but the state table, which would stay behind.
    _create(engine)
    before = _shape(engine)
    script = _op_sql()
    marker = "-- add shadow (ddl)"
    assert script.count(marker) == 1
    cut = script.replace(marker, "SELECT pg_terminate_backend(pg_backend_pid());\n" + marker)
    assert "terminating connection" in _clients.psql(engine, cut, stop=False).stderr
    assert _scalar(engine, "SELECT to_regclass('sqlalchemy_ulid_migrations')") is not None
    done = _clients.psql(engine, _reverse_sql(), stop=False)
    assert done.returncode == 0, done.stderr
    assert _scalar(engine, "SELECT to_regclass('sqlalchemy_ulid_migrations')") is None
    assert _shape(engine) == before


def test_killed_inside_the_swap_waiting_for_its_lock_the_rerun_finishes(engine: Engine) -> None:
    _create(engine, f"CREATE INDEX ix_name_ref ON {TABLE} (name, ref)")
    seeded = _ulid_values(engine)
    script = _op_sql(lock_timeout=20)
    assert (
        _clients.psql(engine, script[: script.index("-- swap (ddl)")], stop=False).returncode == 0
    )
    # A writer's open transaction: the swap's LOCK TABLE waits, and is killed.
    with engine.connect() as writer:
        writer.exec_driver_sql(f"UPDATE {TABLE} SET name = 'w' WHERE id = 1")
        thread = _killed_waiting(engine, "DO $ulid%", bound=30)
        killed = _clients.psql(engine, script, app="adv-kill", stop=False)
        thread.join(timeout=40)
        writer.rollback()
    assert thread.seen
    assert "server closed the connection" in killed.stderr, killed.stderr
    assert "ref__ulid" in {column for column, *_ in _shape(engine)["columns"]}  # nothing swapped
    done = _clients.psql(engine, script, stop=False)
    assert done.returncode == 0, done.stderr
    assert _ulid_values(engine) == seeded
    assert [c for c in _shape(engine)["columns"] if c[0] == "ref"] == [("ref", "uuid", True)]


def test_a_serializable_default_isolation_does_not_fail_the_copy_behind_a_writer(
    engine: Engine,
) -> None:
    # default_transaction_isolation = serializable (set on a database or role
    # for SSI): a copy batch that waits for a writer's row lock then fails with
    # "could not serialize access", on every rerun while writers go on.
    _create(engine)
    seeded = _ulid_values(engine)
    script = _op_sql()
    serializable = {"PGOPTIONS": "-c default_transaction_isolation=serializable"}
    assert (
        _clients.psql(
            engine, script[: script.index("-- copy (fill)")], env=serializable, stop=False
        ).returncode
        == 0
    )
    with engine.connect() as writer:
        writer.exec_driver_sql(f"UPDATE {TABLE} SET name = 'w' WHERE id = 1")
        # Committed once the copy's batch waits for this row.
        committer = Release(engine, writer.commit, application="adv-iso")
        try:
            done = _clients.psql(
                engine, script, env={**serializable, "PGAPPNAME": "adv-iso"}, stop=False
            )
        finally:
            committer.join()
    assert done.returncode == 0, done.stderr
    assert _ulid_values(engine) == seeded


def test_a_statement_timeout_does_not_cancel_the_long_phases(engine: Engine) -> None:
    # A role or database statement_timeout (production guard against runaway
    # queries) applies to each of psql's statements: the copy is one DO block
    # and an index build one statement, however many batches they take.
    _create(engine, f"CREATE INDEX ix_name_ref ON {TABLE} (name, ref)")
    seeded = _ulid_values(engine)
    done = _clients.psql(
        engine,
        _op_sql(batch_size=2, pause=0.05),
        env={"PGOPTIONS": "-c statement_timeout=300"},
        stop=False,
    )
    assert done.returncode == 0, done.stderr
    assert _ulid_values(engine) == seeded
