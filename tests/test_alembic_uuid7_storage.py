"""op.alter_uuid7_storage on real databases: every UUIDv7 survives, nothing else is stored."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.operations import Operations
from alembic.util import CommandError
from sqlalchemy.engine import Connection, Engine

import _clients
import _databases
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _offline_scripts import op_sql
from conftest import Backend, recording
from sqlalchemy_ulid import InvalidULID, new_uuid7, uuid7_max_at, uuid7_min_at
from sqlalchemy_ulid._dialects import dialect_row

TABLE = "u7_storage"
V4 = uuid.UUID("9f3c1e4a-5b6d-4c7e-8f90-a1b2c3d4e5f6")  # a valid UUID of version 4


@pytest.fixture
def clean(engine: Engine) -> Iterator[Engine]:
    _drop(engine)
    yield engine
    _drop(engine)


_drop = _databases.dropper(TABLE)


def _op(conn: Connection) -> Operations:
    return Operations(MigrationContext.configure(conn))


def _type(storage: str, dialect: sa.engine.Dialect) -> sa.types.TypeEngine[Any]:
    if storage == "text":
        return sa.CHAR(36)
    if storage == "hex":
        return sa.CHAR(32)
    if storage == "binary":
        return dialect_row(dialect).binary()
    return sa.Uuid()


def _table(
    storage: str, dialect: sa.engine.Dialect, type_: sa.types.TypeEngine[Any] | None = None
) -> sa.Table:
    return sa.Table(
        TABLE,
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("ref", type_ or _type(storage, dialect), nullable=True),
        sa.UniqueConstraint("ref", name="uq_u7_storage_ref"),
    )


def _stored(value: uuid.UUID | None, storage: str, upper: bool = False) -> Any:
    if value is None or storage in ("auto", "native"):
        return value
    if storage == "binary":
        return value.bytes
    text = str(value) if storage == "text" else value.hex
    return text.upper() if upper else text


def _decoded(value: Any) -> uuid.UUID | None:
    if value is None or isinstance(value, uuid.UUID):
        return value
    if isinstance(value, (bytes, memoryview)) and len(value) == 16:
        return uuid.UUID(bytes=bytes(value))
    if isinstance(value, (bytes, memoryview)):  # text in MariaDB's holding type
        return uuid.UUID(bytes(value).decode("ascii"))
    return uuid.UUID(value)


def _seed_raw(
    engine: Engine, storage: str, raw: list[Any], type_: sa.types.TypeEngine[Any] | None = None
) -> None:
    table = _table(storage, engine.dialect, type_)
    with engine.begin() as conn:
        table.create(conn)
        conn.execute(table.insert(), [{"id": i, "ref": v} for i, v in enumerate(raw)])


def _sample(count: int) -> list[uuid.UUID | None]:
    values: list[uuid.UUID | None] = [uuid7_min_at(0), uuid7_max_at((1 << 48) - 1)]
    values += [new_uuid7() for _ in range(count)]
    values.append(None)
    return values


def _seed(engine: Engine, storage: str, values: list[uuid.UUID | None]) -> None:
    # Text and hex in either case: the row after the edge values is uppercase.
    raw = [_stored(v, storage, upper=i == 2) for i, v in enumerate(values)]
    _seed_raw(engine, storage, raw)


def _read(engine: Engine, storage: str) -> list[tuple[int, uuid.UUID | None]]:
    table = _table(storage, engine.dialect)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(table).order_by(table.c.id))
        return [(row.id, _decoded(row.ref)) for row in rows]


def _raw(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.exec_driver_sql(f"SELECT id, ref FROM {TABLE}")]


def _ordered(engine: Engine) -> list[uuid.UUID | None]:
    with engine.connect() as conn:
        sql = f"SELECT ref FROM {TABLE} WHERE ref IS NOT NULL ORDER BY ref"
        return [_decoded(v) for v in conn.exec_driver_sql(sql).scalars()]


def _reflected(engine: Engine) -> str:
    with engine.connect() as conn:
        columns = {c["name"]: c for c in sa.inspect(conn).get_columns(TABLE)}
        return str(columns["ref"]["type"].compile(dialect=conn.dialect)).upper()


@pytest.mark.parametrize(
    ("from_storage", "to_storage"),
    [("text", "auto"), ("text", "binary"), ("hex", "binary"), ("text", "hex"), ("auto", "binary")],
)
def test_round_trip_keeps_every_value_and_the_order(
    clean: Engine, from_storage: str, to_storage: str
) -> None:
    values = _sample(200)
    _seed(clean, from_storage, values)
    expected = list(enumerate(values))
    before = _reflected(clean)

    with clean.begin() as conn:
        _op(conn).alter_uuid7_storage(
            TABLE,
            "ref",
            from_storage=from_storage,  # type: ignore[arg-type]
            to_storage=to_storage,  # type: ignore[arg-type]
        )
    assert _read(clean, to_storage) == expected
    assert _reflected(clean) != before
    # Database order is UUIDv7 order after the conversion.
    assert _ordered(clean) == sorted(v for v in values if v is not None)
    with clean.connect() as conn:
        assert [u["name"] for u in sa.inspect(conn).get_unique_constraints(TABLE)] == [
            "uq_u7_storage_ref"
        ]
    if to_storage in ("text", "hex"):  # written in lowercase
        assert all(r is None or r == r.lower() for _, r in _raw(clean))

    # A rerun after success changes nothing.
    with clean.begin() as conn, recording(clean) as seen:
        _op(conn).alter_uuid7_storage(
            TABLE,
            "ref",
            from_storage=from_storage,  # type: ignore[arg-type]
            to_storage=to_storage,  # type: ignore[arg-type]
        )
    assert not [s for s in seen if s.lstrip().upper().startswith(("ALTER", "UPDATE", "CREATE"))]

    with clean.begin() as conn:
        _op(conn).alter_uuid7_storage(
            TABLE,
            "ref",
            from_storage=to_storage,  # type: ignore[arg-type]
            to_storage=from_storage,  # type: ignore[arg-type]
        )
    assert _read(clean, from_storage) == expected
    assert _reflected(clean) == before


_BAD_TEXT = [
    str(V4),  # a UUID, but version 4
    "0190a0b1-c2d3-7e4f-c012-3456789abcde",  # version 7, variant 110 (not 10)
    "0190a0b1c2d37e4f8012-3456789abcde",  # hyphens missing
    "{0190a0b1-c2d3-7e4f-8012-3456789abcde}",  # braces
    "0190a0b1-c2d3-7e4f-8012-3456789abcdg",  # g is not hex
    "0190a0b1-c2d3-7e4f-8012-3456789abcd",  # 35 characters
]
_BAD_HEX = [
    V4.hex,  # version 4
    "0190a0b1-c2d3-7e4f-8012-3456789abcde"[:32],  # hyphens in a hex column
    "0190a0b1c2d37e4f8012 3456789abcde",  # a space
]
_BAD_BINARY = [
    V4.bytes,  # version 4
    # A fixed UUIDv7, not a new one: pytest-xdist workers must collect the same ids.
    uuid.UUID("0190a0b1-c2d3-7e4f-8012-3456789abcde").bytes[:15],  # 15 bytes
    uuid.UUID("0190a0b1-c2d3-7e4f-8012-3456789abcde").bytes + b"\x00",  # 17 bytes
]


@pytest.mark.parametrize(
    ("storage", "bad"),
    [("text", b) for b in _BAD_TEXT]
    + [("hex", b) for b in _BAD_HEX]
    + [("binary", b) for b in _BAD_BINARY]
    + [("auto", V4)],
)
def test_a_value_that_is_not_a_uuid7_is_refused_and_nothing_changes(
    clean: Engine, backend: Backend, storage: str, bad: Any
) -> None:
    if storage == "auto" and backend.name != "postgresql":
        bad = V4  # CHAR(32) hex through sa.Uuid
    # MariaDB's BINARY(16) pads and truncates: other lengths live in a VARBINARY.
    varbinary = storage == "binary" and backend.name == "mysql"
    to_storage = "binary" if storage != "binary" else "text"
    values: list[Any] = [_stored(v, storage) for v in _sample(3)]
    # Longer text fits a VARCHAR: the op reads it as its storage's text form.
    type_ = sa.VARBINARY(17) if varbinary else sa.String(40) if storage in ("text", "hex") else None
    _seed_raw(clean, storage, [*values, bad], type_)
    before, type_before = _raw(clean), _reflected(clean)
    with clean.begin() as conn, pytest.raises(InvalidULID, match="not UUIDv7s"):
        _op(conn).alter_uuid7_storage(
            TABLE,
            "ref",
            from_storage=storage,  # type: ignore[arg-type]
            to_storage=to_storage,  # type: ignore[arg-type]
        )
    assert _raw(clean) == before
    assert _reflected(clean) == type_before


def _offline(backend: Backend, from_storage: str, to_storage: str) -> str:
    # Our MySQL-family server is MariaDB: its dialect name says it has UUID.
    name = "mariadb" if backend.name == "mysql" else backend.name
    assert backend.engine is not None
    copy_from = _table(from_storage, backend.engine.dialect)
    return op_sql(
        name,
        lambda ops: ops.alter_uuid7_storage(
            TABLE,
            "ref",
            from_storage=from_storage,  # type: ignore[arg-type]
            to_storage=to_storage,  # type: ignore[arg-type]
            nullable=True,
            copy_from=copy_from,
        ),
    )


def _run_script(engine: Engine, script: str) -> None:
    if engine.dialect.name == "sqlite":
        with engine.begin() as conn:
            dbapi = conn.connection.driver_connection
            dbapi.create_function("unhex", 1, bytes.fromhex)  # type: ignore[union-attr]
            for statement in script.split(";\n"):
                if statement.strip():
                    conn.exec_driver_sql(statement)
        return
    done = _clients.run(engine, script)
    if done.returncode:
        raise RuntimeError(done.stderr)


@pytest.mark.parametrize(("from_storage", "to_storage"), [("text", "auto"), ("binary", "text")])
def test_the_offline_script_run_by_the_client_gives_the_same_table(
    clean: Engine, backend: Backend, from_storage: str, to_storage: str
) -> None:
    values = _sample(50)
    _seed(clean, from_storage, values)
    _run_script(clean, _offline(backend, from_storage, to_storage))
    offline = (_read(clean, to_storage), _reflected(clean))
    _drop(clean)
    _seed(clean, from_storage, values)
    with clean.begin() as conn:
        _op(conn).alter_uuid7_storage(
            TABLE,
            "ref",
            from_storage=from_storage,  # type: ignore[arg-type]
            to_storage=to_storage,  # type: ignore[arg-type]
        )
    assert (_read(clean, to_storage), _reflected(clean)) == offline
    assert offline[0] == list(enumerate(values))


@pytest.mark.parametrize(
    ("storage", "bad"), [("text", str(V4)), ("binary", V4.bytes), ("hex", V4.hex)]
)
def test_the_conversion_sql_itself_refuses_another_version(
    clean: Engine, backend: Backend, storage: str, bad: Any
) -> None:
    """A value the online check never saw (an offline script) stops the script."""
    _seed_raw(clean, storage, [_stored(new_uuid7(), storage), bad])
    before = _raw(clean)
    to_storage = "text" if storage == "binary" else "binary"
    with pytest.raises((RuntimeError, sa.exc.DBAPIError)):
        _run_script(clean, _offline(backend, storage, to_storage))
    if backend.name != "mysql":  # MariaDB's MODIFY to the holding type is not undone
        assert _raw(clean) == before
    else:
        assert sorted(_decoded(v) for _, v in _raw(clean)) == sorted(_decoded(v) for _, v in before)


@pytest.fixture
def mariadb(backends: dict[str, Backend]) -> Iterator[Engine]:
    """MariaDB alone: its DDL is not transactional, so a run can stop half-way."""
    engine = backends["mysql"].engine
    if engine is None:
        pytest.fail(f"backend missing: {backends['mysql'].reason}", pytrace=False)
    _drop(engine)
    yield engine
    _drop(engine)


class Interrupted(Exception):
    """The fault a hook raises in place of a statement."""


@pytest.mark.parametrize("kill", [False, True], ids=["statement fails", "session killed"])
@pytest.mark.parametrize(
    ("stop_before", "to_storage"),
    [("UPDATE", "binary"), ("ALTER", "binary"), ("UPDATE", "hex"), ("UPDATE", "auto")],
)
def test_rerun_after_an_interruption_between_the_statements_finishes(
    mariadb: Engine, kill: bool, stop_before: str, to_storage: str
) -> None:
    """Stopped before the UPDATE (or before the final MODIFY), a rerun finishes."""
    values = _sample(20)
    _seed(mariadb, "text", values)
    private = sa.create_engine(mariadb.url, poolclass=sa.pool.NullPool)
    seen: list[str] = []

    def stop(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        # The first ALTER is the MODIFY to the holding type: stop at the next.
        seen.append(statement)
        if not statement.lstrip().upper().startswith(stop_before):
            return
        if stop_before == "ALTER" and sum(s.lstrip().startswith("ALTER") for s in seen) < 2:
            return
        if not kill:
            raise Interrupted(statement[:60])
        with mariadb.connect() as admin:
            admin.exec_driver_sql(f"KILL {session}")

    def interrupted_run() -> None:
        nonlocal session
        with private.begin() as conn:
            session = int(conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar_one())
            sa.event.listen(private, "before_cursor_execute", stop)
            _op(conn).alter_uuid7_storage(
                TABLE,
                "ref",
                from_storage="text",
                to_storage=to_storage,  # type: ignore[arg-type]
            )

    session = 0
    try:
        with pytest.raises(sa.exc.DBAPIError if kill else Interrupted):
            interrupted_run()
    finally:
        sa.event.remove(private, "before_cursor_execute", stop)
        private.dispose()
    assert _reflected(mariadb) == "VARBINARY(36)"
    with mariadb.begin() as conn:
        _op(conn).alter_uuid7_storage(
            TABLE,
            "ref",
            from_storage="text",
            to_storage=to_storage,  # type: ignore[arg-type]
        )
    assert _read(mariadb, to_storage) == list(enumerate(values))


def test_refusals_before_any_sql(backend: Backend) -> None:
    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect_name=backend.name, opts={"as_sql": True, "output_buffer": buffer}
    )
    op = Operations(context)
    with pytest.raises(ValueError, match="storage must be one of"):
        op.alter_uuid7_storage(TABLE, "ref", from_storage="uuid", to_storage="text")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="nothing to convert"):
        op.alter_uuid7_storage(TABLE, "ref", from_storage="text", to_storage="text", nullable=True)
    with pytest.raises(CommandError, match="nullable="):
        op.alter_uuid7_storage(TABLE, "ref", from_storage="text", to_storage="binary")
    assert buffer.getvalue() == ""
    if backend.name == "postgresql":
        # online=True writes the online phases (test_alembic_storage_offline runs them).
        op.alter_uuid7_storage(
            TABLE, "ref", from_storage="text", to_storage="binary", nullable=True, online=True
        )
        assert "-- swap (ddl)" in buffer.getvalue()
        return
    if backend.name == "mysql":
        # The shadow-table script (test_alembic_storage_offline_mariadb runs it).
        op.alter_uuid7_storage(
            TABLE, "ref", from_storage="text", to_storage="binary", nullable=True, online=True
        )
        assert "-- Phase 5:" in buffer.getvalue()
        return
    # SQLite has no online path at all.
    with pytest.raises(ValueError, match=r"alter_uuid7_storage\(online=True\)"):
        op.alter_uuid7_storage(
            TABLE, "ref", from_storage="text", to_storage="binary", nullable=True, online=True
        )
    assert buffer.getvalue() == ""


def test_reverse_swaps_the_storages() -> None:
    from sqlalchemy_ulid.alembic import AlterUUID7StorageOp

    op = AlterUUID7StorageOp(TABLE, "ref", from_storage="text", to_storage="binary")  # type: ignore[arg-type]
    back = op.reverse()
    assert type(back) is AlterUUID7StorageOp
    assert (back.from_storage, back.to_storage) == ("binary", "text")


def test_reverse_keeps_batches_sized_by_time_or_the_size_given() -> None:
    from sqlalchemy_ulid.alembic import AlterUUID7StorageOp

    timed = AlterUUID7StorageOp(TABLE, "ref", from_storage="text", to_storage="binary", online=True)  # type: ignore[arg-type]
    assert timed.sized_by_time
    assert timed.reverse().sized_by_time
    fixed = AlterUUID7StorageOp(
        TABLE,
        "ref",
        from_storage="text",
        to_storage="binary",
        online=True,
        batch_size=700,  # type: ignore[arg-type]
    )
    back = fixed.reverse()
    assert not back.sized_by_time
    assert back.batch_size == 700


def test_default_comment_and_nullability_are_kept(clean: Engine, backend: Backend) -> None:
    literal = new_uuid7()
    with clean.begin() as conn:
        conn.execute(
            sa.text(
                f"CREATE TABLE {TABLE} (id INTEGER PRIMARY KEY, "
                f"ref CHAR(36) NOT NULL DEFAULT '{literal}'"
                + (" COMMENT 'partner id'" if backend.name == "mysql" else "")
                + ")"
            )
        )
        if backend.name == "postgresql":
            conn.execute(sa.text(f"COMMENT ON COLUMN {TABLE}.ref IS 'partner id'"))
        conn.execute(sa.text(f"INSERT INTO {TABLE} (id, ref) VALUES (1, '{new_uuid7()}')"))
    with clean.begin() as conn:
        _op(conn).alter_uuid7_storage(TABLE, "ref", from_storage="text", to_storage="binary")
    with clean.begin() as conn:
        column = {c["name"]: c for c in sa.inspect(conn).get_columns(TABLE)}["ref"]
        assert column["nullable"] is False
        if backend.name == "mysql":
            comment = conn.scalar(
                sa.text(
                    "SELECT COLUMN_COMMENT FROM information_schema.COLUMNS WHERE "
                    f"TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{TABLE}' AND COLUMN_NAME = 'ref'"
                )
            )
            assert comment == "partner id"
        elif backend.name == "postgresql":
            assert column["comment"] == "partner id"
        conn.execute(sa.text(f"INSERT INTO {TABLE} (id) VALUES (2)"))
        stored = conn.execute(sa.text(f"SELECT ref FROM {TABLE} WHERE id = 2")).scalar()
        assert _decoded(stored) == literal


@pytest.mark.parametrize("storage", ["auto", "binary", "hex"])
def test_a_literal_default_comes_back_with_the_downgrade(
    clean: Engine, backend: Backend, storage: str
) -> None:
    """The reverse op reads the DEFAULT the forward op wrote, on every database."""
    literal = new_uuid7()
    with clean.begin() as conn:
        conn.execute(
            sa.text(
                f"CREATE TABLE {TABLE} (id INTEGER PRIMARY KEY, "
                f"ref CHAR(36) NOT NULL DEFAULT '{literal}')"
            )
        )
    for from_, to in (("text", storage), (storage, "text")):
        with clean.begin() as conn:
            _op(conn).alter_uuid7_storage(
                TABLE, "ref", from_storage=from_, to_storage=to, nullable=False
            )
    with clean.begin() as conn:
        conn.execute(sa.text(f"INSERT INTO {TABLE} (id) VALUES (1)"))
        stored = conn.scalar(sa.text(f"SELECT ref FROM {TABLE} WHERE id = 1"))
    assert stored == str(literal)


def test_a_default_of_another_version_is_refused(clean: Engine) -> None:
    with clean.begin() as conn:
        conn.execute(
            sa.text(f"CREATE TABLE {TABLE} (id INTEGER PRIMARY KEY, ref CHAR(36) DEFAULT '{V4}')")
        )
    with clean.begin() as conn, pytest.raises(ValueError, match="DEFAULT"):
        _op(conn).alter_uuid7_storage(TABLE, "ref", from_storage="text", to_storage="binary")
    assert "CHAR" in _reflected(clean)


def test_autogenerate_is_clean_after_converting_to_the_model_type(clean: Engine) -> None:
    _seed(clean, "text", _sample(5))
    with clean.begin() as conn:
        _op(conn).alter_uuid7_storage(TABLE, "ref", from_storage="text", to_storage="auto")
    model = sa.MetaData()
    sa.Table(
        TABLE,
        model,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("ref", sa.Uuid(), nullable=True),
        sa.UniqueConstraint("ref", name="uq_u7_storage_ref"),
    )
    with clean.connect() as conn:
        # This test's table only: the database may hold others'.
        context = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "include_name": lambda name, kind, _: kind != "table" or name == TABLE,
            },
        )
        assert compare_metadata(context, model) == []
