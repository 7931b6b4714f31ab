"""``alter_uuid7_storage(..., online=True)`` on PostgreSQL and MariaDB, with writers going on.

Two writer threads insert rows and change the UUIDv7 column of rows they own
while the op runs. Afterwards every row holds exactly the value last written
to it (or seeded), converted, and the schema is the one the one-transaction
op makes on an identical table. A UUID of another version, written while the
op copies, makes the writer's statement fail and is stored nowhere. The op is
killed inside its copy: the rerun finishes, and a second rerun sends no DDL.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.engine import Connection, Engine

import _databases
import _writers
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _sessions import session_killer
from conftest import Backend, private_engine, recording
from sqlalchemy_ulid import InvalidULID, new_uuid7
from sqlalchemy_ulid._dialects import dialect_row
from sqlalchemy_ulid.alembic import BackfillProgress

TABLE = "u7o_items"
TWIN = "u7o_twin"
V4 = uuid.UUID("9f3c1e4a-5b6d-4c7e-8f90-a1b2c3d4e5f6")  # a valid UUID of version 4
DDL = ("ALTER", "CREATE", "DROP", "RENAME", "UPDATE", "INSERT", "DELETE")
#: The statement each server's copy sends once a batch.
COPY = {"postgresql": "WITH batch", "mysql": "INSERT IGNORE"}
#: The statement that begins each server's swap.
SWAP = {"postgresql": "LOCK TABLE", "mysql": "RENAME TABLE"}
PAIRS = [("text", "auto"), ("auto", "text"), ("text", "binary"), ("binary", "text")]


def _engine(backends: dict[str, Backend], name: str) -> Iterator[Engine]:
    with private_engine(backends[name], _drop) as engine:
        yield engine


@pytest.fixture(params=["postgresql", "mysql"])
def server(request: pytest.FixtureRequest, backends: dict[str, Backend]) -> Iterator[Engine]:
    yield from _engine(backends, request.param)


@pytest.fixture
def postgresql(backends: dict[str, Backend]) -> Iterator[Engine]:
    yield from _engine(backends, "postgresql")


def _name(engine: Engine) -> str:
    return "postgresql" if engine.dialect.name == "postgresql" else "mysql"


_drop = _databases.dropper(
    TABLE,
    TWIN,
    functions=[f"{TABLE}_ref__ulid_sync()", "u7o_touch()"],
    conversions=[TABLE, TWIN],
)


def _type(storage: str, dialect: sa.engine.Dialect) -> sa.types.TypeEngine[Any]:
    if storage == "text":
        return sa.CHAR(36)
    if storage == "binary":
        return dialect_row(dialect).binary()
    return sa.Uuid()


def _table(name: str, storage: str, dialect: sa.engine.Dialect) -> sa.Table:
    return sa.Table(
        name,
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("ref", _type(storage, dialect), nullable=False, comment="a 100% ref"),
        sa.Column("n", sa.Integer),
        sa.UniqueConstraint("ref", name=f"uq_{name}_ref"),
        sa.Index(f"ix_{name}_n_ref", "n", "ref"),
        mysql_engine="InnoDB",
    )


def _create(engine: Engine, name: str, storage: str, rows: int) -> dict[int, uuid.UUID]:
    table = _table(name, storage, engine.dialect)
    values = {i: new_uuid7() for i in range(rows)}
    with engine.begin() as conn:
        table.create(conn)
        items = [{"id": i, "ref": _bind(v, storage), "n": i} for i, v in values.items()]
        for start in range(0, rows, 5000):
            conn.execute(table.insert(), items[start : start + 5000])
    return values


def _bind(value: uuid.UUID, storage: str) -> Any:
    if storage == "text":
        return str(value)
    if storage == "binary":
        return value.bytes
    return value


def _as_uuid(value: Any) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, bytes):
        return uuid.UUID(bytes=value)
    return uuid.UUID(value)


def _values(engine: Engine, name: str, storage: str) -> dict[int, uuid.UUID]:
    table = _table(name, storage, engine.dialect)
    with engine.connect() as conn:
        return {r[0]: _as_uuid(r[1]) for r in conn.execute(sa.select(table.c.id, table.c.ref))}


def _run(engine: Engine, name: str, from_: str, to: str, **options: Any) -> None:
    """Run the op as ``alembic upgrade`` does: in the transaction Alembic began."""
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            context = MigrationContext.configure(conn, opts={"transactional_ddl": True})
            with context.begin_transaction():
                Operations(context).alter_uuid7_storage(
                    name, "ref", from_storage=from_, to_storage=to, **options
                )
            return
        conn.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 10")
        conn.commit()
        context = MigrationContext.configure(conn)
        with context.begin_transaction(), context.begin_transaction(_per_migration=True):
            Operations(context).alter_uuid7_storage(
                name, "ref", from_storage=from_, to_storage=to, **options
            )


def _schema(engine: Engine, name: str) -> dict[str, Any]:
    inspector = sa.inspect(engine)
    schema: dict[str, Any] = {
        # A dict: on PostgreSQL the converted column comes last.
        "columns": {
            c["name"]: (str(c["type"]), c["nullable"], c.get("default"), c.get("comment"))
            for c in inspector.get_columns(name)
        },
        "pk": inspector.get_pk_constraint(name)["constrained_columns"],
        "unique": sorted(
            (str(u["name"]).replace(name, "T"), tuple(u["column_names"]))
            for u in inspector.get_unique_constraints(name)
        ),
        "indexes": sorted(
            (str(i["name"]).replace(name, "T"), tuple(i["column_names"]), i["unique"])
            for i in inspector.get_indexes(name)
        ),
        "checks": inspector.get_check_constraints(name),
    }
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            schema["triggers"] = conn.exec_driver_sql(
                f"SELECT count(*) FROM pg_trigger WHERE tgrelid = '{name}'::regclass "
                "AND NOT tgisinternal"
            ).scalar()
        else:
            ddl = str(conn.exec_driver_sql(f"SHOW CREATE TABLE {name}").one()[1])
            schema["ddl"] = ddl.replace(name, "T")
            schema["triggers"] = conn.exec_driver_sql(
                "SELECT COUNT(*) FROM information_schema.TRIGGERS "
                f"WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = '{name}'"
            ).scalar()
    return schema


def _leftovers(engine: Engine) -> list[str]:
    inspector = sa.inspect(engine)
    tables = [t for t in inspector.get_table_names() if t.startswith(f"_{TABLE}")]
    columns = [c["name"] for c in inspector.get_columns(TABLE) if c["name"] != "ref"]
    return tables + [c for c in columns if c not in ("id", "n")]


class Writers(_writers.SwapFollowers):
    """Two threads that insert rows and change the ``ref`` of rows they own.

    Each binds values in the old storage until the swap starts, then in the
    new one (as an application deployed for either storage would). The swap
    waits for the statement in flight: one bound for the old storage must not
    reach the new column (PostgreSQL would cast bytea to its text form).
    """

    def __init__(self, engine: Engine, storage: str, new: str, owned: list[int]) -> None:
        super().__init__(engine, 2, join=20, wait_in_flight=True)
        self.storages = (storage, new)
        self.expected: dict[int, uuid.UUID] = {}
        self.owned = owned

    def _write(self, conn: Any, sql: str, params: dict[str, Any]) -> bool:
        def send(swapping: bool) -> None:
            storage = self.storages[swapping]
            statement = sa.text(sql).bindparams(
                sa.bindparam("r", type_=_type(storage, self.engine.dialect))
            )
            conn.execute(statement, {**params, "r": _bind(params["r"], storage)})

        return self.attempt(conn, send)

    def begin(self, conn: Connection, n: int) -> None:
        if self.engine.dialect.name != "postgresql":
            conn.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 10")

    def write(self, conn: Connection, n: int) -> None:
        rng = random.Random(n)
        mine = [k for k in self.owned if k % 2 == n]
        key = 10_000_000 + n * 1_000_000
        while not self.stop.is_set():
            new, changed, target = new_uuid7(), new_uuid7(), rng.choice(mine)
            if self._write(
                conn,
                f"INSERT INTO {TABLE} (id, ref, n) VALUES (:k, :r, 0)",
                {"k": key, "r": new},
            ):
                self.expected[key] = new
            if self._write(
                conn,
                f"UPDATE {TABLE} SET ref = :r WHERE id = :k",
                {"k": target, "r": changed},
            ):
                self.expected[target] = changed
            key += 1
            time.sleep(0.002)

    def check(self) -> None:
        super().check()
        assert len(self.expected) > 20, "the writers hardly wrote: the test proves nothing"


@pytest.mark.parametrize(("from_", "to"), PAIRS)
def test_writers_keep_going_and_every_uuid7_is_converted(
    server: Engine, from_: str, to: str
) -> None:
    before = _create(server, TABLE, from_, 10_000)
    _create(server, TWIN, from_, 10)
    reports: list[BackfillProgress] = []
    writers = Writers(server, from_, to, list(before))
    unwatch = writers.watch(SWAP[_name(server)])
    try:
        with writers:
            _run(server, TABLE, from_, to, online=True, batch_size=1000, progress=reports.append)
    finally:
        unwatch()
    writers.check()
    assert writers.swapping.is_set()
    expected = {**before, **writers.expected}
    assert _values(server, TABLE, to) == expected  # every row: its last value, converted
    assert reports
    _run(server, TWIN, from_, to)  # the one-transaction op
    assert _schema(server, TABLE) == _schema(server, TWIN)
    assert not _leftovers(server)
    # Back again (the downgrade), online too.
    _run(server, TABLE, to, from_, online=True, batch_size=5000)
    _run(server, TWIN, to, from_)
    assert _values(server, TABLE, from_) == expected
    assert _schema(server, TABLE) == _schema(server, TWIN)


@pytest.mark.parametrize("from_", ["text", "binary"])
def test_a_non_v7_written_mid_copy_fails_that_statement_and_is_stored_nowhere(
    server: Engine, from_: str
) -> None:
    before = _create(server, TABLE, from_, 3000)
    failures: list[BaseException] = []
    stored: list[str] = []
    bad = sa.bindparam("r", type_=_type(from_, server.dialect))

    def write_v4(report: BackfillProgress) -> None:
        if failures or stored:
            return
        for sql in (
            f"UPDATE {TABLE} SET ref = :r WHERE id = 2999",  # ahead of the copy
            f"UPDATE {TABLE} SET ref = :r WHERE id = 0",  # behind it
            f"INSERT INTO {TABLE} (id, ref, n) VALUES (5000, :r, 0)",
        ):
            try:
                with server.begin() as conn:
                    conn.execute(sa.text(sql).bindparams(bad), {"r": _bind(V4, from_)})
                stored.append(sql)
            except sa.exc.DBAPIError as exc:
                failures.append(exc)

    _run(server, TABLE, from_, "auto", online=True, batch_size=500, pause=0.01, progress=write_v4)
    assert not stored
    assert len(failures) == 3
    assert all("not a UUIDv7" in str(f) for f in failures), failures[0]
    assert _values(server, TABLE, "auto") == before


def test_a_non_v7_written_past_the_trigger_stops_the_op_naming_it(postgresql: Engine) -> None:
    # PostgreSQL only: a session there may skip triggers.
    server = postgresql
    before = _create(server, TABLE, "text", 2000)
    written: list[int] = []

    def sneak(report: BackfillProgress) -> None:
        if written:
            return
        # A session that skips triggers (a restore, replication's apply)
        # writes a UUIDv4 ahead of the copy.
        with server.begin() as conn:
            conn.exec_driver_sql("SET LOCAL session_replication_role = replica")
            conn.exec_driver_sql(f"UPDATE {TABLE} SET ref = '{V4}' WHERE id = 1900")
        written.append(1)

    with pytest.raises(InvalidULID, match=f"not UUIDv7s.*{V4}"):
        _run(server, TABLE, "text", "auto", online=True, batch_size=300, progress=sneak)
    with server.connect() as conn:
        shadow = conn.exec_driver_sql(f"SELECT ref__ulid FROM {TABLE} WHERE id = 1900").scalar()
    assert shadow is None  # nothing wrong stored
    with server.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {TABLE} SET ref = '{before[1900]}' WHERE id = 1900")
    _run(server, TABLE, "text", "auto", online=True, batch_size=300)
    assert _values(server, TABLE, "auto") == before


@pytest.mark.parametrize("from_", ["text", "auto", "binary"])
def test_a_non_v7_already_there_is_refused_before_any_ddl(server: Engine, from_: str) -> None:
    to = "text" if from_ != "text" else "binary"
    _create(server, TABLE, from_, 50)
    with server.begin() as conn:
        conn.execute(
            sa.text(f"UPDATE {TABLE} SET ref = :r WHERE id = 7").bindparams(
                sa.bindparam("r", type_=_type(from_, server.dialect))
            ),
            {"r": _bind(V4, from_)},
        )
    with recording(server) as seen, pytest.raises(InvalidULID, match="not UUIDv7s"):
        _run(server, TABLE, from_, to, online=True)
    assert not [s for s in seen if s.lstrip().upper().startswith(DDL)]
    assert not _leftovers(server)


def test_a_table_with_another_trigger_is_refused_before_any_ddl(server: Engine) -> None:
    _create(server, TABLE, "text", 20)
    with server.begin() as conn:
        if server.dialect.name == "postgresql":
            conn.exec_driver_sql(
                "CREATE FUNCTION u7o_touch() RETURNS trigger LANGUAGE plpgsql "
                "AS $$ BEGIN NEW.n := 1; RETURN NEW; END $$"
            )
            body = "EXECUTE FUNCTION u7o_touch()"
        else:
            body = "SET NEW.n = 1"
        conn.exec_driver_sql(
            f"CREATE TRIGGER u7o_touch BEFORE INSERT ON {TABLE} FOR EACH ROW {body}"
        )
    with recording(server) as seen, pytest.raises(ValueError, match="u7o_touch"):
        _run(server, TABLE, "text", "binary", online=True)
    assert not [s for s in seen if s.lstrip().upper().startswith(DDL)]
    assert not _leftovers(server)


def _is_copy(statement: str, copy: str) -> bool:
    """A statement of the copy (not the state table's row, which MariaDB also inserts IGNORE)."""
    text = statement.lstrip().replace("`", "")
    return text.startswith(copy) and not text.startswith(f"{copy} INTO sqlalchemy_ulid_migrations")


def _killer(engine: Engine, nth_copy: int) -> Callable[[], bool]:
    """Kill the op's session before its ``nth_copy``-th copy statement; returns 'killed?'."""
    copy = COPY[_name(engine)]
    copies = [0]

    def when(statement: str, _: int) -> bool:
        if _is_copy(statement, copy):
            copies[0] += 1
        return copies[0] == nth_copy

    return session_killer(engine, when)


@pytest.mark.parametrize(("from_", "to"), [("text", "auto"), ("binary", "text")])
def test_killed_mid_copy_then_rerun_finishes_and_a_second_rerun_sends_no_ddl(
    server: Engine, from_: str, to: str
) -> None:
    before = _create(server, TABLE, from_, 3000)
    _create(server, TWIN, from_, 10)
    done = _killer(server, 3)
    try:
        with pytest.raises(sa.exc.DBAPIError):
            _run(server, TABLE, from_, to, online=True, batch_size=500)
    finally:
        assert done()
    with recording(server) as seen:
        _run(server, TABLE, from_, to, online=True, batch_size=500)
    # Two batches were committed before the kill: the rerun goes on after them.
    copies = [s for s in seen if _is_copy(s, COPY[_name(server)])]
    assert 0 < len(copies) <= 3000 // 500 - 2 + 1
    assert _values(server, TABLE, to) == before
    _run(server, TWIN, from_, to)
    assert _schema(server, TABLE) == _schema(server, TWIN)
    assert not _leftovers(server)
    with recording(server) as seen:
        _run(server, TABLE, from_, to, online=True)
    assert not [s for s in seen if s.lstrip().upper().startswith(DDL)]


@pytest.fixture
def mariadb(backends: dict[str, Backend]) -> Iterator[Engine]:
    yield from _engine(backends, "mysql")


@pytest.mark.parametrize(
    ("op_name", "holding"), [("alter_uuid7_storage", 36), ("alter_ulid_storage", 26)]
)
def test_an_interrupted_one_transaction_run_is_not_taken_for_done(
    mariadb: Engine, op_name: str, holding: int
) -> None:
    # The one-transaction op on MariaDB stopped between its MODIFY to the
    # holding VARBINARY and its UPDATE: online=True must not call it converted.
    with mariadb.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (id INT PRIMARY KEY, ref VARBINARY({holding}) NOT NULL) "
            "ENGINE=InnoDB"
        )
        value = str(new_uuid7()) if holding == 36 else "01ARZ3NDEKTSV4RRFFQ69G5FAV"
        conn.execute(sa.text(f"INSERT INTO {TABLE} VALUES (1, :v)"), {"v": value.encode()})
    with mariadb.connect() as conn:
        context = MigrationContext.configure(conn)
        method = getattr(Operations(context), op_name)
        with recording(mariadb) as seen, pytest.raises(ValueError, match="was interrupted"):
            method(TABLE, "ref", from_storage="text", to_storage="binary", online=True)
    assert not [s for s in seen if s.lstrip().upper().startswith(DDL)]
    with mariadb.connect() as conn:
        assert conn.exec_driver_sql(f"SELECT ref FROM {TABLE}").scalar() == value.encode()


@pytest.mark.parametrize(("from_", "to"), [("text", "binary"), ("text", "auto")])
def test_a_uuid7_literal_default_and_the_comment_are_carried(
    server: Engine, from_: str, to: str
) -> None:
    literal = new_uuid7()
    for name in (TABLE, TWIN):
        _create(server, name, from_, 30)
        with server.begin() as conn:
            conn.execute(sa.text(f"ALTER TABLE {name} ALTER COLUMN ref SET DEFAULT '{literal}'"))
    _run(server, TABLE, from_, to, online=True, batch_size=7)
    _run(server, TWIN, from_, to)
    assert _schema(server, TABLE) == _schema(server, TWIN)
    assert not _leftovers(server)
    with server.begin() as conn:
        conn.exec_driver_sql(f"INSERT INTO {TABLE} (id, n) VALUES (100, 0)")
    assert _values(server, TABLE, to)[100] == literal
