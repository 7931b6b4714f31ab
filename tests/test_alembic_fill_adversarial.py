"""The online backfill of ``add_ulid_column(..., online=True)`` against keys a user may have.

Each batch's keys are read into Python and sent back to find their rows
(``key = value``, ``key > last``): every key type must come back as it
went, or be refused before any change. The oracle, after every run: every
row has exactly one id, the ids are distinct and valid, and each carries
its own row's time. On PostgreSQL and MariaDB (PostgreSQL 18 too, with
``SQLALCHEMY_ULID_POSTGRESQL_URL`` on port 5418).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.engine import Connection, Engine

import _databases
import sqlalchemy_ulid.alembic
from _sessions import Release, hold
from conftest import Backend, private_engine
from sqlalchemy_ulid import ULID
from sqlalchemy_ulid.alembic import BackfillProgress

TABLE = "fill_adversarial"
BASE = datetime(2021, 3, 1, 8, 0, 0)
EPOCH = datetime(1970, 1, 1)
_drop = _databases.dropper(TABLE)


@pytest.fixture
def mariadb(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["mysql"], _drop) as engine:
        yield engine


@pytest.fixture
def postgresql(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["postgresql"], _drop) as engine:
        yield engine


def _time_type(engine: Engine) -> str:
    return "DATETIME(6)" if engine.dialect.name == "mysql" else "TIMESTAMP(6)"


def _seed(engine: Engine, key_type: str, keys: Sequence[str], *before: str) -> None:
    """``TABLE`` keyed by ``key_type``, a row a key (SQL literals), a second apart."""
    with engine.begin() as conn:
        for statement in before:
            conn.exec_driver_sql(statement)
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (k {key_type} PRIMARY KEY, "
            f"created_at {_time_type(engine)} NOT NULL)"
        )
        for i, key in enumerate(keys):
            when = BASE + timedelta(seconds=i, microseconds=i)
            # No parameters, but the driver formats the statement all the same.
            key_sql = key.replace("%", "%%")
            conn.exec_driver_sql(f"INSERT INTO {TABLE} VALUES ({key_sql}, '{when.isoformat(' ')}')")


def _online(engine: Engine, batch_size: int = 2, sql_mode: str | None = None) -> None:
    """Run the op as ``alembic upgrade`` does, unique=False: the oracle finds duplicates."""
    with engine.connect() as conn:
        if sql_mode is not None:
            conn.exec_driver_sql(f"SET SESSION sql_mode = '{sql_mode}'")
            conn.commit()
        context = MigrationContext.configure(conn)
        with context.begin_transaction(), context.begin_transaction(_per_migration=True):
            Operations(context).add_ulid_column(
                TABLE, "public_id", "created_at", online=True, batch_size=batch_size, unique=False
            )


def _column_added(conn: Connection) -> bool:
    return "public_id" in {c["name"] for c in sa.inspect(conn).get_columns(TABLE)}


def _check(engine: Engine, rows: int) -> None:
    """The oracle: ``rows`` rows, each with its own valid id, dated by its own time."""
    table = sa.Table(
        TABLE,
        sa.MetaData(),
        sa.Column("created_at", sa.DateTime),
        sa.Column("public_id", sqlalchemy_ulid.ULIDType()),
    )
    with engine.connect() as conn:
        found = conn.execute(sa.select(table.c.created_at, table.c.public_id)).all()
    assert len(found) == rows
    ids = [row.public_id for row in found]
    assert all(isinstance(i, ULID) for i in ids), "a row has no id"
    assert len(set(ids)) == len(ids), "two rows share an id"
    for when, ulid in found:
        assert ulid.timestamp_ms == (when - EPOCH) // timedelta(milliseconds=1)


# -- a session's sql_mode -----------------------------------------------------------


@pytest.mark.parametrize("mode", ["ANSI", "ORACLE", "MSSQL"])
def test_a_session_sql_mode_never_makes_the_fill_guess_its_key(mariadb: Engine, mode: str) -> None:
    # ANSI and ORACLE stand for sets that include ANSI_QUOTES: with them set on
    # the session, reflection read no primary key, and the fill walked a
    # column named "id" that was no key: every row got the first row's id.
    with mariadb.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (k INT PRIMARY KEY, id INT NOT NULL, created_at DATETIME(6))"
        )
        conn.exec_driver_sql(
            f"INSERT INTO {TABLE} VALUES (1, 7, '2021-01-01 00:00:01'), "
            "(2, 7, '2021-01-01 00:00:02'), (3, 7, '2021-06-01 00:00:03')"
        )
    _online(mariadb, sql_mode=mode)
    _check(mariadb, 3)


# -- key types that work -----------------------------------------------------------

_MARIADB_KEYS = {
    "bigint unsigned above 2**63": (
        "BIGINT UNSIGNED",
        ["0", "1", "9223372036854775808", "18446744073709551614", "18446744073709551615"],
    ),
    "decimal(30,0), negative": (
        "DECIMAL(30,0)",
        ["-999999999999999999999999999999", "-5", "0", "7", "123456789012345678901234567890"],
    ),
    "double: read as Decimal it was rounded to 10 places": (
        "DOUBLE",
        ["0.1", "0.30000000000000004", "0.3", "1e300", "-1e-300", "1e-11", "2e-11"],
    ),
    "datetime(6)": (
        "DATETIME(6)",
        ["'1970-01-01 00:00:01.999999'", "'2021-01-01 00:00:00'", "'2021-01-01 00:00:00.000001'"],
    ),
    "varbinary with trailing zero bytes": (
        "VARBINARY(8)",
        ["x''", "x'00'", "x'61'", "x'6100'", "x'610000'", "x'5c27'", "x'ff'"],
    ),
    "latin1 key outside ASCII: the derived table's text was not converted": (
        "VARCHAR(10) CHARACTER SET latin1 COLLATE latin1_bin",
        ["'a'", "'A'", "'é'", "'E'", "'ÿ'"],
    ),
    "no-pad collation, trailing spaces": (
        "VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin",
        ["'a'", "'a '", "'a  '", "' a'", "'b'"],
    ),
    "binary collation, accents and case": (
        "VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        ["'a'", "'A'", "'á'", "'b'", "'B'", "'😀'"],
    ),
    "numbers as text, short then long": (
        "VARCHAR(300)",
        ["'10'", "'9'", "'010'", "'1e1'", "' 10'", f"'{'x' * 299}'", "'-1'"],
    ),
}

_POSTGRESQL_KEYS = {
    "a key column of its own collation: CAST took the COLLATE and failed": (
        'TEXT COLLATE "C"',
        ["'a'", "'B'", "'c'", "'D'", "'é'", "'E'"],
    ),
    "varchar of its own collation": ('VARCHAR(20) COLLATE "C"', ["'x'", "'X'", "'x '"]),
    "numeric, unconstrained": ("NUMERIC", ["1.10", "1e20", "-0.000001", "12345678901234.5"]),
    "bytea with trailing zero bytes": ("BYTEA", ["'\\x'", "'\\x00'", "'\\x61'", "'\\x6100'"]),
    "timestamptz(6)": (
        "TIMESTAMPTZ(6)",
        [
            "'1970-01-01 00:00:01.999999+00'",
            "'2021-03-28 01:30:00.5+00'",
            "'2038-01-19 03:14:08+00'",
        ],
    ),
    "interval": ("INTERVAL", ["'1 day'", "'25 hours'", "'-1 second'", "'1 mon'"]),
}


@pytest.mark.parametrize("case", sorted(_MARIADB_KEYS))
def test_mariadb_key_types_find_their_rows(mariadb: Engine, case: str) -> None:
    key_type, keys = _MARIADB_KEYS[case]
    _seed(mariadb, key_type, keys)
    _online(mariadb)
    _check(mariadb, len(keys))


@pytest.mark.parametrize("case", sorted(_POSTGRESQL_KEYS))
def test_postgresql_key_types_find_their_rows(postgresql: Engine, case: str) -> None:
    key_type, keys = _POSTGRESQL_KEYS[case]
    _seed(postgresql, key_type, keys)
    _online(postgresql)
    _check(postgresql, len(keys))


# -- key types refused before any change -------------------------------------------

_REFUSED = [
    # single precision: 0.1 reads back as 0.1, stored as 0.100000001...; the
    # walk read the same rows for ever
    ("mysql", "FLOAT", ["0.1", "0.2", "0.3"], ()),
    ("postgresql", "REAL", ["0.1", "0.2", "0.3"], ()),
    # sorted by member number, compared with text as text: rows were skipped
    ("mysql", "ENUM('v2', 'v1', 'v0')", ["'v2'", "'v1'", "'v0'"], ()),
    ("mysql", "SET('c', 'b', 'a')", ["'a'", "'b'", "'a,b'", "'c'"], ()),
    # values that do not go back as they came: failed after ADD COLUMN
    ("postgresql", "JSONB", ["'{\"a\": 1}'", "'[1]'", "'2'"], ()),
    ("postgresql", "INTEGER[]", ["'{1,2}'", "'{1}'", "'{}'"], ()),
    ("postgresql", "MONEY", ["'1.50'", "'-3'"], ()),
    ("postgresql", "INT4RANGE", ["'[1,2)'", "'empty'"], ()),
    ("postgresql", "BOOLEAN", ["true", "false"], ()),
]


@pytest.mark.parametrize(
    ("backend", "key_type", "keys", "before"), _REFUSED, ids=[r[1] for r in _REFUSED]
)
def test_keys_the_walk_cannot_use_are_refused_before_any_change(
    backends: dict[str, Backend],
    backend: str,
    key_type: str,
    keys: list[str],
    before: tuple[str, ...],
) -> None:
    with private_engine(backends[backend], _drop) as engine:
        _seed(engine, key_type, keys, *before)
        with pytest.raises(ValueError, match="Nothing was changed; run the op without"):
            _online(engine)
        with engine.connect() as conn:
            assert not _column_added(conn)


# -- a seeded generator of keys ----------------------------------------------------


def _fuzzed_keys(rng: random.Random, kind: str) -> list[str]:
    """Distinct keys of ``kind`` as SQL literals, in no order."""
    if kind == "int":
        values: set[str] = {str(rng.randint(-(2**63), 2**63 - 1)) for _ in range(25)}
        values |= {"0", "-1", "1"}
    else:
        alphabet = "aAbB 0é9ß_%\\'"
        values = set()
        for _ in range(25):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
            values.add(text.rstrip() or "x")
    ordered = sorted(values)
    rng.shuffle(ordered)
    # A backslash doubled: one on MariaDB, two on PostgreSQL; distinct either way.
    return [
        v if kind == "int" else "'" + v.replace("\\", "\\\\").replace("'", "''") + "'"
        for v in ordered
    ]


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("kind", ["int", "text"])
def test_seeded_keys_each_get_exactly_one_id(server: Engine, seed: int, kind: str) -> None:
    rng = random.Random(f"{seed}-{kind}")
    keys = _fuzzed_keys(rng, kind)
    key_type = "BIGINT" if kind == "int" else "VARCHAR(20)"
    if server.dialect.name == "mysql" and kind == "text":
        # Case, accents and "ss" apart: distinct keys stay distinct.
        key_type += " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
    _seed(server, key_type, keys)
    _online(server, batch_size=rng.randint(1, 7))
    _check(server, len(keys))


def test_the_one_transaction_op_finds_double_keys_too(mariadb: Engine) -> None:
    # Read as Decimal rounded to 10 places, 1e-11 and 2e-11 were one staged key.
    keys = ["1e-11", "2e-11", "0.3", "0.30000000000000004", "1e300"]
    _seed(mariadb, "DOUBLE", keys)
    with mariadb.connect() as conn:
        context = MigrationContext.configure(conn)
        with context.begin_transaction(), context.begin_transaction(_per_migration=True):
            Operations(context).add_ulid_column(TABLE, "public_id", "created_at", unique=False)
    _check(mariadb, len(keys))


# -- a writer changes a row's time while its batch waits ---------------------------


def test_a_row_whose_time_changes_while_its_batch_waits_gets_its_new_time(
    server: Engine,
) -> None:
    _seed(server, "INTEGER", ["1", "2", "3"])
    releases: list[Release] = []

    def after_first_batch(report: BackfillProgress) -> None:
        if releases:
            return
        # Commit once the backfill's UPDATE waits for this row (bounded); on
        # MariaDB, once it runs: with one row a batch, it waits for ours.
        like = (
            f"UPDATE {TABLE} AS t JOIN%" if server.dialect.name == "mysql" else f"UPDATE {TABLE} %"
        )
        update = f"UPDATE {TABLE} SET created_at = '2030-01-01 00:00:00' WHERE k = 2"
        releases.append(hold(server, update, like=like, bound=10))

    with server.connect() as conn:
        context = MigrationContext.configure(conn)
        with context.begin_transaction(), context.begin_transaction(_per_migration=True):
            Operations(context).add_ulid_column(
                TABLE,
                "public_id",
                "created_at",
                online=True,
                batch_size=1,
                unique=False,
                progress=after_first_batch,
            )
    releases[0].join()
    assert releases[0].seen, "the backfill's UPDATE was never seen waiting for the writer"
    _check(server, 3)
