"""The Alembic ops on real databases: every value survives, bad input changes nothing."""

from __future__ import annotations

import io
import itertools
import random
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from alembic.util import CommandError
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Connection, Engine

import _clients
import _databases
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from conftest import Backend, recording
from sqlalchemy_ulid import ULID, InvalidULID, ULIDType, new_ulid
from sqlalchemy_ulid._time import to_ms

ORDERS, EVENTS = "ops_orders", "ops_events"
DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql")


_drop = _databases.dropper(ORDERS, EVENTS)


@pytest.fixture
def clean(engine: Engine) -> Iterator[Engine]:
    _drop(engine)
    yield engine
    _drop(engine)


def _op(conn: Connection) -> Operations:
    return Operations(MigrationContext.configure(conn))


def _offline_op(dialect_name: str) -> tuple[Operations, io.StringIO]:
    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect_name=dialect_name, opts={"as_sql": True, "output_buffer": buffer}
    )
    return Operations(context), buffer


def _statements(script: str) -> list[str]:
    """The statements of a --sql script, a MariaDB block (between DELIMITER lines) as one."""
    statements, current, delimiter = [], [], ";"
    for line in script.splitlines():
        if line.startswith("DELIMITER "):
            delimiter = line.split()[1]
            continue
        if line.rstrip().endswith(delimiter):
            current.append(line.rstrip()[: -len(delimiter)])
            statements.append("\n".join(current))
            current = []
        else:
            current.append(line)
    return [s for s in [*statements, "\n".join(current)] if s.strip()]


def _orders(metadata: sa.MetaData) -> sa.Table:
    return sa.Table(
        ORDERS,
        metadata,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("created_at", DATETIME, nullable=True),
        sa.Column("note", sa.String(40)),
    )


def _events(metadata: sa.MetaData, ref_type: sa.types.TypeEngine[Any]) -> sa.Table:
    return sa.Table(
        EVENTS,
        metadata,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("ref", ref_type, nullable=True),
        sa.UniqueConstraint("ref", name="uq_ops_events_ref"),
    )


def _columns(conn: Connection, table: str) -> dict[str, dict[str, Any]]:
    return {c["name"]: dict(c) for c in sa.inspect(conn).get_columns(table)}


# -- add_ulid_column ----------------------------------------------------------


def _seed_orders(engine: Engine, rows: list[dict[str, Any]]) -> sa.Table:
    table = _orders(sa.MetaData())
    with engine.begin() as conn:
        table.create(conn)
        conn.execute(table.insert(), rows)
    return table


def _read_backfilled(engine: Engine) -> list[tuple[int, datetime, str | None, ULID]]:
    table = sa.Table(
        ORDERS,
        sa.MetaData(),
        sa.Column("id", sa.Integer),
        sa.Column("created_at", DATETIME),
        sa.Column("note", sa.String(40)),
        sa.Column("public_id", ULIDType()),
    )
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.select(table).order_by(table.c.id))]  # type: ignore[misc]


def test_backfill_dates_ulids_from_the_rows_and_breaks_ties_by_key(clean: Engine) -> None:
    base = datetime(2021, 3, 4, 5, 6, 7, 123000)
    rows = []
    for i in range(1, 301):
        # Keys deliberately out of time order; many rows share a millisecond,
        # some differ by microseconds inside one millisecond.
        when = base - timedelta(minutes=(i * 37) % 11, microseconds=(i % 3) * 100)
        rows.append({"id": i, "created_at": when, "note": f"n{i}"})
    _seed_orders(clean, rows)
    berlin_summer = timezone(timedelta(hours=2))
    with clean.begin() as conn:
        _op(conn).add_ulid_column(
            ORDERS, "public_id", "created_at", timezone=berlin_summer, batch_size=7
        )

    result = _read_backfilled(clean)
    assert [(r[0], r[1], r[2]) for r in result] == [
        (r["id"], r["created_at"], r["note"]) for r in rows
    ]
    for _, created, _, public_id in result:
        assert public_id.timestamp_ms == to_ms(created.replace(tzinfo=berlin_summer))
    by_time = sorted(result, key=lambda r: (r[1], r[0]))
    assert [r[3] for r in by_time] == sorted(r[3] for r in result)
    # Ties are consecutive: each ULID of a millisecond is the previous plus one.
    for earlier, later in itertools.pairwise(by_time):
        if earlier[3].timestamp_ms == later[3].timestamp_ms:
            assert int(later[3]) == int(earlier[3]) + 1

    with clean.connect() as conn:
        column = _columns(conn, ORDERS)["public_id"]
        assert column["nullable"] is False
        table = sa.table(ORDERS, sa.column("id"), sa.column("created_at"), sa.column("public_id"))
        duplicate = {"id": 999, "created_at": base, "public_id": result[0][3].bytes}
        with pytest.raises(sa.exc.IntegrityError):
            conn.execute(table.insert().values(**_bind(conn, duplicate)))
        conn.rollback()


def _bind(conn: Connection, row: dict[str, Any]) -> dict[str, Any]:
    """Bind public_id through ULIDType for the connected database."""
    value = ULIDType().process_bind_param(ULID.from_bytes(row["public_id"]), conn.dialect)
    return {**row, "public_id": value}


def test_backfill_refuses_null_timestamps_before_altering_anything(clean: Engine) -> None:
    _seed_orders(
        clean,
        [
            {"id": 1, "created_at": datetime(2020, 1, 1), "note": None},
            {"id": 2, "created_at": None, "note": None},
        ],
    )
    with clean.begin() as conn, pytest.raises(ValueError, match="NULL in 1 rows"):
        _op(conn).add_ulid_column(ORDERS, "public_id", "created_at")
    with clean.connect() as conn:
        assert "public_id" not in _columns(conn, ORDERS)


def test_backfill_needs_a_primary_key(clean: Engine) -> None:
    with clean.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE {ORDERS} (created_at TIMESTAMP)"))
    with clean.begin() as conn, pytest.raises(ValueError, match="no primary key"):
        _op(conn).add_ulid_column(ORDERS, "public_id", "created_at")
    with clean.connect() as conn:
        assert "public_id" not in _columns(conn, ORDERS)


def test_backfill_raises_a_clear_error_offline(backend: Backend) -> None:
    op, buffer = _offline_op(backend.name)
    with pytest.raises(CommandError, match=r"offline.*computed from the rows"):
        op.add_ulid_column(ORDERS, "public_id", "created_at")
    assert buffer.getvalue() == ""


def test_drop_ulid_column_undoes_add(clean: Engine) -> None:
    _seed_orders(clean, [{"id": 1, "created_at": datetime(2020, 1, 1), "note": "x"}])
    with clean.begin() as conn:
        _op(conn).add_ulid_column(ORDERS, "public_id", "created_at")
    with clean.begin() as conn:
        _op(conn).drop_ulid_column(ORDERS, "public_id")
    with clean.connect() as conn:
        assert set(_columns(conn, ORDERS)) == {"id", "created_at", "note"}
        assert sa.inspect(conn).get_unique_constraints(ORDERS) == []


# -- alter_ulid_storage -------------------------------------------------------


def _seed_events(engine: Engine, values: list[str | None]) -> None:
    table = _events(sa.MetaData(), sa.CHAR(26))
    with engine.begin() as conn:
        table.create(conn)
        conn.execute(table.insert(), [{"id": i, "ref": v} for i, v in enumerate(values)])


def _read_events(engine: Engine, storage: str) -> list[tuple[int, str | None]]:
    table = _events(sa.MetaData(), ULIDType(storage, as_str=True))  # type: ignore[arg-type]
    with engine.connect() as conn:
        return [(row.id, row.ref) for row in conn.execute(sa.select(table).order_by(table.c.id))]


def _sample_texts(count: int) -> list[str | None]:
    values: list[str | None] = [str(ULID.from_bytes(bytes(16))), str(ULID.from_int((1 << 128) - 1))]
    values += [str(new_ulid()) for _ in range(count)]
    values.append(None)
    return values


@pytest.mark.parametrize("to_storage", ["auto", "binary"])
def test_text_to_binary_and_back_keeps_every_value(clean: Engine, to_storage: str) -> None:
    values = _sample_texts(200)
    values[5] = values[5].lower()  # type: ignore[union-attr]  # lowercase text is a ULID too
    _seed_events(clean, values)
    expected = [(i, None if v is None else str(ULID(v))) for i, v in enumerate(values)]

    with clean.begin() as conn:
        _op(conn).alter_ulid_storage(EVENTS, "ref", from_storage="text", to_storage=to_storage)
    assert _read_events(clean, to_storage) == expected
    with clean.connect() as conn:
        reflected = _columns(conn, EVENTS)["ref"]["type"].compile(dialect=conn.dialect)
        assert "CHAR" not in reflected.upper()
        assert [u["name"] for u in sa.inspect(conn).get_unique_constraints(EVENTS)] == [
            "uq_ops_events_ref"
        ]
        # Database order is ULID order after the conversion.
        table = _events(sa.MetaData(), ULIDType(to_storage, as_str=True))  # type: ignore[arg-type]
        ordered = conn.scalars(
            sa.select(table.c.ref).where(table.c.ref.is_not(None)).order_by(table.c.ref)
        ).all()
        assert ordered == sorted(v for _, v in expected if v is not None)

    with clean.begin() as conn:
        _op(conn).alter_ulid_storage(EVENTS, "ref", from_storage=to_storage, to_storage="text")
    assert _read_events(clean, "text") == expected


@pytest.mark.parametrize(
    "bad",
    [
        "8ZZZZZZZZZZZZZZZZZZZZZZZZZ",  # first character above 7: more than 128 bits
        "01ARZ3NDEKTSV4RRFFQ69G5FAU",  # U is not in Crockford's alphabet
        "01ARZ3NDEKTSV4RRFFQ69G5FA",  # 25 characters
    ],
)
def test_conversion_refuses_non_ulid_text_and_changes_nothing(clean: Engine, bad: str) -> None:
    values = [*_sample_texts(3), bad]
    _seed_events(clean, values)
    with clean.connect() as conn:
        before = conn.execute(sa.text(f"SELECT id, ref FROM {EVENTS} ORDER BY id")).all()
    with clean.begin() as conn, pytest.raises(InvalidULID, match="not ULIDs"):
        _op(conn).alter_ulid_storage(EVENTS, "ref", from_storage="text", to_storage="auto")
    with clean.connect() as conn:
        assert conn.execute(sa.text(f"SELECT id, ref FROM {EVENTS} ORDER BY id")).all() == before
        assert "CHAR" in str(_columns(conn, EVENTS)["ref"]["type"]).upper()


def test_same_kind_conversion_is_refused(backend: Backend) -> None:
    op, _ = _offline_op(backend.name)
    with pytest.raises(ValueError, match="nothing to convert"):
        op.alter_ulid_storage(EVENTS, "ref", from_storage="text", to_storage="text", nullable=True)


def test_offline_conversion_sql_runs_and_keeps_every_value(clean: Engine, backend: Backend) -> None:
    """The --sql output, run by the database itself, converts like the online op."""
    values = _sample_texts(50)
    _seed_events(clean, values)
    op, buffer = _offline_op(backend.name)
    op.alter_ulid_storage(
        EVENTS,
        "ref",
        from_storage="text",
        to_storage="auto",
        nullable=True,
        copy_from=_events(sa.MetaData(), sa.CHAR(26)),
    )
    script = buffer.getvalue()
    if backend.name == "postgresql":  # one DO block, for psql
        done = _clients.psql(clean, script, timeout=60)
        assert done.returncode == 0, done.stderr
    else:
        with clean.begin() as conn:
            dbapi = conn.connection.driver_connection
            if hasattr(dbapi, "create_function"):  # sqlite3 before 3.41 lacks unhex()
                dbapi.create_function("unhex", 1, bytes.fromhex)
            for statement in _statements(script):
                conn.exec_driver_sql(statement)
    assert _read_events(clean, "auto") == [
        (i, None if v is None else str(ULID(v))) for i, v in enumerate(values)
    ]


def test_offline_conversion_needs_nullable(backend: Backend) -> None:
    op, _ = _offline_op(backend.name)
    with pytest.raises(CommandError, match="nullable="):
        op.alter_ulid_storage(EVENTS, "ref", from_storage="text", to_storage="auto")


# -- the server-side function -------------------------------------------------


def test_create_and_drop_ulid_function(engine: Engine, backend: Backend) -> None:
    with engine.begin() as conn:
        _op(conn).create_ulid_function()
        value = ULIDType().process_result_value(
            conn.scalar(sa.text("SELECT gen_ulid()")), conn.dialect
        )
        assert abs(value.timestamp_ms - time.time() * 1000) < 60_000
        _op(conn).drop_ulid_function()
    if backend.name != "sqlite":  # SQLite's function lives on the connection
        with engine.connect() as conn, pytest.raises(sa.exc.DBAPIError):
            conn.scalar(sa.text("SELECT gen_ulid()"))


def test_ulid_function_ddl_offline(backend: Backend) -> None:
    op, buffer = _offline_op(backend.name)
    op.create_ulid_function()
    op.drop_ulid_function()
    script = buffer.getvalue()
    if backend.name == "sqlite":
        assert script == ""
    else:
        assert "CREATE" in script
        assert "FUNCTION" in script
        assert "DROP FUNCTION IF EXISTS gen_ulid" in script


# -- 100k rows ----------------------------------------------------------------

ROWS = 100_000


def test_100k_rows_survive_backfill_and_conversion(
    clean: Engine, backend: Backend, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(5)
    start = datetime(2019, 1, 1)
    texts = sorted(str(new_ulid()) for _ in range(ROWS))
    rows = [
        {
            "id": i,
            # About 3 rows per millisecond on average: plenty of ties.
            "created_at": start + timedelta(milliseconds=rng.randrange(ROWS // 3)),
            "ref": texts[i],
        }
        for i in range(ROWS)
    ]
    table = sa.Table(
        ORDERS,
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("created_at", DATETIME, nullable=False),
        sa.Column("ref", sa.CHAR(26), nullable=False),
    )
    with clean.begin() as conn:
        table.create(conn)
        conn.execute(table.insert(), rows)

    began = time.perf_counter()
    with clean.begin() as conn:
        _op(conn).add_ulid_column(ORDERS, "public_id", "created_at")
    backfilled = time.perf_counter()
    with clean.begin() as conn:
        _op(conn).alter_ulid_storage(ORDERS, "ref", from_storage="text", to_storage="auto")
    converted = time.perf_counter()

    after = sa.Table(
        ORDERS,
        sa.MetaData(),
        sa.Column("id", sa.Integer),
        sa.Column("created_at", DATETIME),
        sa.Column("ref", ULIDType(as_str=True)),
        sa.Column("public_id", ULIDType()),
    )
    with clean.connect() as conn:
        result = conn.execute(sa.select(after).order_by(after.c.public_id)).all()
    assert len(result) == ROWS
    assert {(r.id, r.created_at, r.ref) for r in result} == {
        (r["id"], r["created_at"], r["ref"]) for r in rows
    }
    assert [(r.created_at, r.id) for r in result] == sorted((r.created_at, r.id) for r in result)
    utc = timezone.utc
    assert all(r.public_id.timestamp_ms == to_ms(r.created_at.replace(tzinfo=utc)) for r in result)
    with capsys.disabled():
        print(
            f"\n[{backend.name}] 100k rows: backfill {backfilled - began:.1f} s, "
            f"text->binary {converted - backfilled:.1f} s"
        )


# -- never invent an id ---------------------------------------------------------

VALID = "01HTQW311N1KR5G0Y75M3EF00V"
# Each row: text, and why the Python parser accepts or refuses it.
TEXT_CASES = [
    VALID,  # canonical
    VALID.lower(),  # lowercase is a ULID too
    "7ZZZZZZZZZZZZZZZZZZZZZZZZZ",  # the largest ULID
    "01HTQW311N1KR5G0Y75M3EF00U",  # U is not Crockford
    "01HTQW311N1KR5G0Y75M3EF00I",  # nor I
    "01HTQW311N1KR5G0Y75M3EF00L",  # nor L
    "01HTQW311N1KR5G0Y75M3EF00O",  # nor O
    "8ZZZZZZZZZZZZZZZZZZZZZZZZZ",  # above 128 bits
    VALID + "\n",  # a trailing newline (REGEXP's $ matches before it)
    VALID[:-1] + "\n",  # 26 characters, the last a newline
    " " + VALID[1:],  # a space instead of the first character
    VALID[:-1],  # 25 characters
    VALID + "0",  # 27 characters
    VALID[:-1] + "\u212a",  # the Kelvin sign, which case-folds to k
    VALID[:-1] + "\uff10",  # a fullwidth digit zero
    VALID[:-1] + "\u017f",  # long s, which upper-cases to S
    VALID[:-1] + "-",  # punctuation
    VALID[:13] + "_" + VALID[14:],  # int() would skip an underscore
]


def _parses(text: str) -> bool:
    try:
        ULID(text)
    except InvalidULID:
        return False
    return True


def test_sql_text_check_agrees_with_the_parser(clean: Engine) -> None:
    from sqlalchemy_ulid._dialects import dialect_row

    table = sa.Table(
        EVENTS,
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("ref", sa.Unicode(40)),
    )
    with clean.begin() as conn:
        table.create(conn)
        conn.execute(table.insert(), [{"id": i, "ref": t} for i, t in enumerate(TEXT_CASES)])
        convert = dialect_row(conn.dialect).key_sql("ulid").convert
        assert convert is not None
        valid = convert.valid_text("ref")
        found = conn.exec_driver_sql(
            f"SELECT id, CASE WHEN {valid} THEN 1 ELSE 0 END FROM {EVENTS} ORDER BY id"
        ).all()
    assert [(i, bool(ok)) for i, ok in found] == [(i, _parses(t)) for i, t in enumerate(TEXT_CASES)]


@pytest.mark.parametrize(
    "bad",
    [
        "01HTQW311N1KR5G0Y75M3EF00U",  # U: once converted to a different, valid-looking id
        VALID[:-1] + "\n",  # a newline where a character should be
        "8ZZZZZZZZZZZZZZZZZZZZZZZZZ",  # above 128 bits
    ],
)
def test_the_conversion_statement_itself_refuses_bad_text(
    clean: Engine, backend: Backend, bad: str
) -> None:
    """No check before it: the offline script (and a value written after the
    online check) reaches the conversion itself, which must fail, not invent."""
    _seed_events(clean, [VALID, bad, None])
    op, buffer = _offline_op(backend.name)
    op.alter_ulid_storage(
        EVENTS,
        "ref",
        from_storage="text",
        to_storage="auto",
        nullable=True,
        copy_from=_events(sa.MetaData(), sa.CHAR(26)),
    )
    statements = _statements(buffer.getvalue())
    # PostgreSQL converts in its ALTER ... USING, the others in an UPDATE
    # (MariaDB's script: inside the block that converts the values).
    lines = [line.strip().rstrip(";") for s in statements for line in s.splitlines()]
    [update] = [s for s in statements if "USING CASE" in s or s.lstrip().startswith("UPDATE")] or [
        line for line in lines if line.startswith("UPDATE")
    ]
    with clean.begin() as conn:
        before = conn.execute(sa.text(f"SELECT id, ref FROM {EVENTS} ORDER BY id")).all()
        if backend.name == "mysql":
            # The holding type first, as the script does; and the laxest
            # sql_mode: the refusal must not depend on strict mode.
            conn.exec_driver_sql(f"ALTER TABLE {EVENTS} MODIFY ref VARBINARY(26) NULL")
            conn.exec_driver_sql("SET SESSION sql_mode = ''")
    try:
        with clean.begin() as conn, pytest.raises(sa.exc.DBAPIError):
            conn.exec_driver_sql(update.replace("%%", "%"))
    finally:
        if backend.name == "mysql":
            with clean.begin() as conn:
                conn.exec_driver_sql("SET SESSION sql_mode = DEFAULT")
    with clean.connect() as conn:
        after = conn.execute(sa.text(f"SELECT id, ref FROM {EVENTS} ORDER BY id")).all()
    assert [(i, r.decode() if isinstance(r, bytes) else r) for i, r in after] == before


def test_online_conversion_refuses_a_bad_value_that_slips_past_the_check(
    clean: Engine, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value committed between the check and the conversion: refused, with InvalidULID."""
    from sqlalchemy_ulid.alembic._storage import _alter as _alembic_storage
    from sqlalchemy_ulid.alembic._storage import _one_mariadb, _values

    _seed_events(clean, [VALID, "01HTQW311N1KR5G0Y75M3EF00U"])
    checks = []
    real_check = _values.check_text

    def first_check_sees_nothing(*args: Any, **kwargs: Any) -> None:
        checks.append(args)
        if len(checks) > 1:  # the check after the failure is the real one
            real_check(*args, **kwargs)

    # The check before any DDL (_values; on MariaDB the SQL checks of
    # _one_mariadb too) and the one after a failure (_alter).
    monkeypatch.setattr(_one_mariadb, "refuse_in_place", lambda *args: None)
    monkeypatch.setattr(_values, "check_text", first_check_sees_nothing)
    monkeypatch.setattr(_alembic_storage, "check_text", first_check_sees_nothing)
    with clean.begin() as conn, pytest.raises(InvalidULID, match="EF00U"):
        _op(conn).alter_ulid_storage(EVENTS, "ref", from_storage="text", to_storage="auto")
    assert len(checks) == 2


# -- checks before the first DDL, reruns, names -------------------------------------


def test_times_before_1970_refuse_before_the_column_is_added(clean: Engine) -> None:
    _seed_orders(
        clean,
        [
            {"id": 1, "created_at": datetime(2020, 1, 1), "note": None},
            {"id": 2, "created_at": datetime(1969, 12, 31, 23, 59), "note": None},
        ],
    )
    with clean.begin() as conn, pytest.raises(InvalidULID, match="outside"):
        _op(conn).add_ulid_column(ORDERS, "public_id", "created_at")
    with clean.connect() as conn:
        assert "public_id" not in _columns(conn, ORDERS)


BERLIN = "Europe/Berlin"


@pytest.mark.parametrize(
    ("naive", "fold", "expected_utc"),
    [
        (datetime(2021, 3, 28, 2, 30), None, None),  # in the spring gap: refused
        (datetime(2021, 10, 31, 2, 30), None, None),  # in the autumn fold: refused
        (datetime(2021, 10, 31, 2, 30), 0, datetime(2021, 10, 31, 0, 30)),  # fold=0: summer
        (datetime(2021, 10, 31, 2, 30), 1, datetime(2021, 10, 31, 1, 30)),  # fold=1: winter
    ],
)
def test_dst_gaps_and_folds_are_refused_unless_told(
    clean: Engine, naive: datetime, fold: int | None, expected_utc: datetime | None
) -> None:
    from zoneinfo import ZoneInfo

    _seed_orders(clean, [{"id": 1, "created_at": naive, "note": None}])
    zone = ZoneInfo(BERLIN)
    if expected_utc is None:
        with clean.begin() as conn, pytest.raises(ValueError, match="daylight-saving"):
            _op(conn).add_ulid_column(ORDERS, "public_id", "created_at", timezone=zone)
        with clean.connect() as conn:
            assert "public_id" not in _columns(conn, ORDERS)
        return
    with clean.begin() as conn:
        _op(conn).add_ulid_column(ORDERS, "public_id", "created_at", timezone=zone, fold=fold)
    [(_, _, _, public_id)] = _read_backfilled(clean)
    assert public_id.datetime == expected_utc.replace(tzinfo=timezone.utc)


def test_long_table_names_get_a_shortened_constraint_name(clean: Engine, backend: Backend) -> None:
    name = "ops_" + "x" * 48  # 52 characters: uq_<table>_public_id is 65
    with clean.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE IF EXISTS {name}"))
        table = sa.Table(
            name,
            sa.MetaData(),
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("created_at", DATETIME, nullable=False),
        )
        table.create(conn)
        conn.execute(table.insert(), [{"id": 1, "created_at": datetime(2020, 1, 1)}])
    try:
        with clean.begin() as conn:
            _op(conn).add_ulid_column(name, "public_id", "created_at")
        with clean.connect() as conn:
            [unique] = [
                *sa.inspect(conn).get_unique_constraints(name),
                *(i for i in sa.inspect(conn).get_indexes(name) if i["unique"]),
            ][:1]
            assert unique["column_names"] == ["public_id"]
            limit = {"postgresql": 63, "mysql": 64}.get(backend.name, 1000)
            assert len(str(unique["name"])) <= limit
        with clean.begin() as conn:
            _op(conn).drop_ulid_column(name, "public_id")
        with clean.connect() as conn:
            assert "public_id" not in _columns(conn, name)
    finally:
        with clean.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {name}"))


def test_percent_in_a_table_name_is_escaped_once(engine: Engine) -> None:
    name = "ops_50%_off"
    quoted = engine.dialect.identifier_preparer.quote(name)
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE IF EXISTS {quoted}".replace("%%", "%")))
    table = sa.Table(
        name,
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("created_at", DATETIME, nullable=False),
        sa.Column("ref", sa.CHAR(26)),
    )
    try:
        with engine.begin() as conn:
            table.create(conn)
            conn.execute(
                table.insert(), [{"id": 1, "created_at": datetime(2020, 1, 1), "ref": VALID}]
            )
        with engine.begin() as conn:
            _op(conn).add_ulid_column(name, "public_id", "created_at")
            _op(conn).alter_ulid_storage(name, "ref", from_storage="text", to_storage="auto")
        after = sa.Table(name, sa.MetaData(), sa.Column("ref", ULIDType(as_str=True)))
        with engine.connect() as conn:
            assert conn.scalars(sa.select(after.c.ref)).all() == [VALID]
    finally:
        table.drop(engine, checkfirst=True)


def test_rerun_fills_only_null_rows_of_an_existing_column(clean: Engine) -> None:
    _seed_orders(
        clean,
        [{"id": i, "created_at": datetime(2020, 1, 1, 0, 0, i), "note": None} for i in range(5)],
    )
    keep = new_ulid()
    with clean.begin() as conn:
        # An interrupted earlier run: the column is there, one row filled.
        _op(conn).add_column(ORDERS, sa.Column("public_id", ULIDType(), nullable=True))
        table = sa.Table(
            ORDERS, sa.MetaData(), sa.Column("id", sa.Integer), sa.Column("public_id", ULIDType())
        )
        conn.execute(table.update().where(table.c.id == 3).values(public_id=keep))
    with clean.begin() as conn:
        _op(conn).add_ulid_column(ORDERS, "public_id", "created_at")
    result = {r[0]: r[3] for r in _read_backfilled(clean)}
    assert result[3] == keep
    assert all(v is not None for v in result.values())
    with clean.connect() as conn:
        assert _columns(conn, ORDERS)["public_id"]["nullable"] is False


def test_drop_ulid_column_offline_on_sqlite_runs() -> None:
    op, buffer = _offline_op("sqlite")
    op.drop_ulid_column(ORDERS, "public_id")
    script = buffer.getvalue()
    engine = sa.create_engine("sqlite://")
    with engine.begin() as conn:
        _seed_orders_on(conn)
        _op(conn).add_ulid_column(ORDERS, "public_id", "created_at")
    with engine.begin() as conn:
        for statement in script.split(";\n"):
            if statement.strip():
                conn.exec_driver_sql(statement)
        assert "public_id" not in _columns(conn, ORDERS)


def _seed_orders_on(conn: Connection) -> None:
    table = _orders(sa.MetaData())
    table.create(conn)
    conn.execute(table.insert(), [{"id": 1, "created_at": datetime(2020, 1, 1), "note": None}])


def test_conversion_keeps_default_comment_and_nullability(clean: Engine, backend: Backend) -> None:
    with clean.begin() as conn:
        conn.execute(
            sa.text(
                f"CREATE TABLE {EVENTS} (id INTEGER PRIMARY KEY, "
                f"ref CHAR(26) NOT NULL DEFAULT '{VALID}'"
                + (" COMMENT 'partner id'" if backend.name == "mysql" else "")
                + ")"
            )
        )
        if backend.name == "postgresql":
            conn.execute(sa.text(f"COMMENT ON COLUMN {EVENTS}.ref IS 'partner id'"))
        conn.execute(sa.text(f"INSERT INTO {EVENTS} (id, ref) VALUES (1, '{new_ulid()}')"))
    with clean.begin() as conn:
        _op(conn).alter_ulid_storage(EVENTS, "ref", from_storage="text", to_storage="auto")
    with clean.begin() as conn:
        column = _columns(conn, EVENTS)["ref"]
        assert column["nullable"] is False
        if backend.name == "mysql":  # SQLAlchemy misreads a COMMENT after DEFAULT f()
            comment = conn.scalar(
                sa.text(
                    "SELECT COLUMN_COMMENT FROM information_schema.COLUMNS WHERE "
                    f"TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{EVENTS}' AND COLUMN_NAME = 'ref'"
                )
            )
            assert comment == "partner id"
        elif backend.name == "postgresql":  # SQLite keeps no comments
            assert column["comment"] == "partner id"
        conn.execute(sa.text(f"INSERT INTO {EVENTS} (id) VALUES (2)"))
        table = sa.Table(
            EVENTS,
            sa.MetaData(),
            sa.Column("id", sa.Integer),
            sa.Column("ref", ULIDType(as_str=True)),
        )
        assert conn.scalar(sa.select(table.c.ref).where(table.c.id == 2)) == VALID


@pytest.mark.parametrize("storage", ["auto", "binary"])
def test_a_literal_default_comes_back_with_the_downgrade(
    clean: Engine, backend: Backend, storage: str
) -> None:
    """The reverse op reads the DEFAULT the forward op wrote, on every database."""
    with clean.begin() as conn:
        conn.execute(
            sa.text(
                f"CREATE TABLE {EVENTS} (id INTEGER PRIMARY KEY, "
                f"ref CHAR(26) NOT NULL DEFAULT '{VALID}')"
            )
        )
    for from_, to in (("text", storage), (storage, "text")):
        with clean.begin() as conn:
            _op(conn).alter_ulid_storage(
                EVENTS, "ref", from_storage=from_, to_storage=to, nullable=False
            )
    with clean.begin() as conn:
        conn.execute(sa.text(f"INSERT INTO {EVENTS} (id) VALUES (1)"))
        stored = conn.scalar(sa.text(f"SELECT ref FROM {EVENTS} WHERE id = 1"))
    assert stored == VALID


def test_a_key_referenced_by_foreign_keys_is_refused_before_any_change(
    clean: Engine, backend: Backend
) -> None:
    metadata = sa.MetaData()
    parent = sa.Table(EVENTS, metadata, sa.Column("ref", sa.CHAR(26), primary_key=True))
    child = sa.Table(
        ORDERS,
        metadata,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("event_ref", sa.CHAR(26), sa.ForeignKey(f"{EVENTS}.ref")),
    )
    with clean.begin() as conn:
        metadata.create_all(conn)
        conn.execute(parent.insert(), [{"ref": VALID}])
        conn.execute(child.insert(), [{"id": 1, "event_ref": VALID}])
    try:
        with clean.begin() as conn, pytest.raises(ValueError, match="foreign keys"):
            _op(conn).alter_ulid_storage(EVENTS, "ref", from_storage="text", to_storage="auto")
        with clean.begin() as conn, pytest.raises(ValueError, match="foreign keys"):
            _op(conn).alter_ulid_storage(
                ORDERS, "event_ref", from_storage="text", to_storage="auto"
            )
        with clean.connect() as conn:
            assert "CHAR" in str(_columns(conn, EVENTS)["ref"]["type"]).upper()
    finally:
        with clean.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {ORDERS}"))


def test_the_documented_foreign_key_sequence_converts_key_and_references(
    clean: Engine, backend: Backend
) -> None:
    if backend.name == "sqlite":
        return  # SQLite changes constraints by copying the table (batch mode)
    metadata = sa.MetaData()
    parent = sa.Table(EVENTS, metadata, sa.Column("id", sa.CHAR(26), primary_key=True))
    child = sa.Table(
        ORDERS,
        metadata,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "customer_id",
            sa.CHAR(26),
            sa.ForeignKey(f"{EVENTS}.id", name="fk_orders_customer_id"),
            nullable=False,
        ),
    )
    with clean.begin() as conn:
        metadata.create_all(conn)
        conn.execute(parent.insert(), [{"id": VALID}])
        conn.execute(child.insert(), [{"id": 1, "customer_id": VALID}])
    try:
        with clean.begin() as conn:
            op = _op(conn)
            op.drop_constraint("fk_orders_customer_id", ORDERS, type_="foreignkey")
            op.alter_ulid_storage(EVENTS, "id", from_storage="text", to_storage="auto")
            op.alter_ulid_storage(ORDERS, "customer_id", from_storage="text", to_storage="auto")
            op.create_foreign_key("fk_orders_customer_id", ORDERS, EVENTS, ["customer_id"], ["id"])
        after = sa.Table(ORDERS, sa.MetaData(), sa.Column("customer_id", ULIDType(as_str=True)))
        with clean.begin() as conn:
            assert conn.scalars(sa.select(after.c.customer_id)).all() == [VALID]
            with pytest.raises(sa.exc.IntegrityError):  # the foreign key is back
                conn.execute(
                    sa.insert(
                        sa.table(ORDERS, sa.column("id"), sa.column("customer_id", ULIDType()))
                    ).values(id=2, customer_id=new_ulid())
                )
    finally:
        with clean.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {ORDERS}"))


def test_drop_after_an_interrupted_add_needs_no_options(clean: Engine) -> None:
    """The column is there but the unique constraint is not: drop works as written."""
    _seed_orders(clean, [{"id": 1, "created_at": datetime(2020, 1, 1), "note": None}])
    with clean.begin() as conn:
        _op(conn).add_column(ORDERS, sa.Column("public_id", ULIDType(), nullable=True))
    with clean.begin() as conn:
        _op(conn).drop_ulid_column(ORDERS, "public_id")
    with clean.begin() as conn:
        _op(conn).drop_ulid_column(ORDERS, "public_id")  # and again: nothing to do
    with clean.connect() as conn:
        assert "public_id" not in _columns(conn, ORDERS)


def test_the_backfill_reads_the_table_once(clean: Engine) -> None:
    """One ordered streaming SELECT, not an ORDER BY ... LIMIT per batch
    (which re-sorts the table each time: quadratic without an index)."""
    _seed_orders(
        clean,
        [
            {"id": i, "created_at": datetime(2020, 1, 1, 0, 0, i % 7), "note": None}
            for i in range(50)
        ],
    )
    with recording(clean) as seen, clean.begin() as conn:
        _op(conn).add_ulid_column(ORDERS, "public_id", "created_at", batch_size=5)
    ordered = [s for s in seen if "ORDER BY" in s and ORDERS in s]
    assert len(ordered) == 1, ordered
    assert "LIMIT" not in ordered[0]


def test_postgresql_writers_are_not_blocked_while_ids_are_computed(
    clean: Engine, backend: Backend
) -> None:
    """The ids are computed before ADD COLUMN: until then the op holds no lock
    that stops writers (it used to hold ACCESS EXCLUSIVE for the whole backfill)."""
    if backend.name != "postgresql":
        return  # MariaDB's ADD COLUMN does not keep writers out either
    _seed_orders(
        clean, [{"id": i, "created_at": datetime(2020, 1, 1), "note": None} for i in range(20)]
    )
    assert backend.url is not None
    other = sa.create_engine(backend.url, poolclass=sa.pool.NullPool)
    written = []

    def write_from_another_session(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("INSERT INTO _ulid_backfill") and not written:
            with other.begin() as writer:
                writer.exec_driver_sql("SET LOCAL lock_timeout = '2s'")
                writer.exec_driver_sql(f"UPDATE {ORDERS} SET note = 'written' WHERE id = 3")
            written.append(True)

    sa.event.listen(clean, "before_cursor_execute", write_from_another_session)
    try:
        with clean.begin() as conn:
            _op(conn).add_ulid_column(ORDERS, "public_id", "created_at", batch_size=5)
    finally:
        sa.event.remove(clean, "before_cursor_execute", write_from_another_session)
        other.dispose()
    assert written == [True]
    assert {r[0]: r[2] for r in _read_backfilled(clean)}[3] == "written"


def test_a_default_that_cannot_be_converted_is_refused_before_any_change(
    clean: Engine,
) -> None:
    with clean.begin() as conn:
        conn.execute(
            sa.text(f"CREATE TABLE {EVENTS} (id INTEGER PRIMARY KEY, ref CHAR(26) DEFAULT 'none')")
        )
        conn.execute(sa.text(f"INSERT INTO {EVENTS} (id, ref) VALUES (1, '{VALID}')"))
    with clean.begin() as conn, pytest.raises(ValueError, match="DEFAULT"):
        _op(conn).alter_ulid_storage(EVENTS, "ref", from_storage="text", to_storage="auto")
    with clean.connect() as conn:
        assert "CHAR" in str(_columns(conn, EVENTS)["ref"]["type"]).upper()


def test_a_too_long_constraint_name_is_refused_before_any_change(
    clean: Engine, backend: Backend
) -> None:
    if backend.name == "sqlite":
        return  # SQLite has no length limit on names
    _seed_orders(clean, [{"id": 1, "created_at": datetime(2020, 1, 1), "note": None}])
    with clean.begin() as conn, pytest.raises(ValueError, match="allows"):
        _op(conn).add_ulid_column(ORDERS, "public_id", "created_at", constraint_name="u" * 65)
    with clean.connect() as conn:
        assert "public_id" not in _columns(conn, ORDERS)
