"""NOT NULL through the storage and key conversions on PostgreSQL, 15 and 18 alike.

PostgreSQL 18 records every NOT NULL as a ``pg_constraint`` row (contype
``'n'``) that depends on its column; the ops' check of what ``DROP COLUMN``
would take must not count it. A seeded generator of tables (NOT NULL or
not on the converted column and on its neighbour, with or without a CHECK
on the column) runs each conversion, online and as an offline script: a
NOT NULL column stays NOT NULL (on 18, with exactly one NOT NULL row, on
the column), a nullable one stays nullable, and a CHECK is still refused
with nothing changed. The key conversion and its reverse, online and
offline, keep a referencing column's NOT NULL (or its absence) the same way.
"""

from __future__ import annotations

import io
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.engine import Engine

import _clients
import _databases
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from conftest import Backend, private_engine
from sqlalchemy_ulid import new_ulid, new_uuid7

TABLE = "nn_items"
PARENT = "nn_parents"

#: (op, from storage, to storage, the column's type as created, a value)
OPS: list[tuple[str, str, str, str]] = [
    ("alter_ulid_storage", "text", "auto", "varchar(26)"),
    ("alter_ulid_storage", "auto", "binary", "uuid"),
    ("alter_uuid7_storage", "text", "native", "varchar(36)"),
]


@pytest.fixture
def engine(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["postgresql"], _drop) as engine:
        yield engine


_drop = _databases.dropper(TABLE, PARENT, conversions=[TABLE])


def _value(op: str, type_: str) -> str:
    if op == "alter_uuid7_storage":
        return str(new_uuid7())
    return str(new_ulid()) if type_.startswith("varchar") else str(new_ulid().to_uuid())


def _create(
    engine: Engine, op: str, type_: str, ref_null: bool, other_null: bool, check: bool
) -> None:
    ref = f"ref {type_}{'' if ref_null else ' NOT NULL'}"
    if check:
        ref += " CONSTRAINT nn_ref_check CHECK (ref IS DISTINCT FROM NULL OR id > 0)"
    other = f"other {type_}{'' if other_null else ' NOT NULL'}"
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {TABLE} CASCADE")
        conn.exec_driver_sql(f"CREATE TABLE {TABLE} (id int PRIMARY KEY, {ref}, {other})")
        for i in range(1, 41):
            conn.exec_driver_sql(
                f"INSERT INTO {TABLE} VALUES ({i}, %s, %s)",
                (None if ref_null and i % 3 == 0 else _value(op, type_), _value(op, type_)),
            )


def _not_null(engine: Engine, table: str = TABLE) -> dict[str, tuple[bool, list[int]]]:
    """Each column: NOT NULL or not, and the columns of the NOT NULL rows naming it (18)."""
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT a.attname, a.attnotnull, ARRAY(SELECT c.conkey[1] FROM pg_constraint c "
            "WHERE c.conrelid = a.attrelid AND c.contype = 'n' AND a.attnum = ANY (c.conkey)) "
            f"FROM pg_attribute a WHERE a.attrelid = '{table}'::regclass AND a.attnum > 0 "
            "AND NOT a.attisdropped"
        ).all()
        counts = conn.exec_driver_sql(
            "SELECT count(*) FROM pg_constraint WHERE contype = 'n' "
            f"AND conrelid = '{table}'::regclass"
        ).scalar()
    assert counts == sum(len(r[2]) for r in rows)  # no NOT NULL row left on a dropped column
    return {name: (notnull, list(keys)) for name, notnull, keys in rows}


def _online(engine: Engine, op: str, from_: str, to: str) -> None:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"transactional_ddl": True})
        with context.begin_transaction():
            getattr(Operations(context), op)(
                TABLE, "ref", from_storage=from_, to_storage=to, online=True, batch_size=15
            )


def _offline(engine: Engine, op: str, from_: str, to: str) -> None:
    _script(
        engine,
        lambda ops: getattr(ops, op)(
            TABLE, "ref", from_storage=from_, to_storage=to, online=True, batch_size=15
        ),
    )


def _script(engine: Engine, call: Callable[[Operations], Any]) -> None:
    """Run what ``call`` writes as an offline script, with psql."""
    buffer = io.StringIO()
    context = MigrationContext.configure(
        dialect_name="postgresql",
        opts={"as_sql": True, "output_buffer": buffer, "transactional_ddl": True},
    )
    with context.begin_transaction():  # as alembic upgrade --sql writes it
        call(Operations(context))
    done = _clients.psql(engine, buffer.getvalue(), timeout=120)
    if done.returncode != 0:
        raise ValueError(done.stderr)


def _cases() -> list[tuple[Any, ...]]:
    rng = random.Random(30)
    cases = []
    for n in range(12):
        op, from_, to, type_ = OPS[n % len(OPS)]
        cases.append(
            (op, from_, to, type_, rng.random() < 0.4, rng.random() < 0.5, rng.random() < 0.25,
             "offline" if n % 2 else "online")
        )  # fmt: skip
    return cases


@pytest.mark.parametrize(
    ("op", "from_", "to", "type_", "ref_null", "other_null", "check", "how"), _cases()
)
def test_not_null_is_kept_and_is_not_a_dependant(
    engine: Engine,
    op: str,
    from_: str,
    to: str,
    type_: str,
    ref_null: bool,
    other_null: bool,
    check: bool,
    how: str,
) -> None:
    _create(engine, op, type_, ref_null, other_null, check)
    before = _not_null(engine)
    version = engine.dialect.server_version_info or (0,)
    if version >= (18,):
        assert bool(before["ref"][1]) == (not ref_null)  # the case this test is about
    run = _online if how == "online" else _offline
    if check:
        with pytest.raises(ValueError, match="nn_ref_check"):
            run(engine, op, from_, to)
        assert _not_null(engine) == before  # nothing was changed
        return
    run(engine, op, from_, to)
    after = _not_null(engine)
    assert {k: v[0] for k, v in after.items()} == {k: v[0] for k, v in before.items()}
    ref_keys = after["ref"][1]
    assert len(ref_keys) == (1 if version >= (18,) and not ref_null else 0)
    if ref_keys:  # the old column's name, given to the new one at the swap (docs/alembic.md)
        with engine.connect() as conn:
            name = conn.exec_driver_sql(
                f"SELECT conname FROM pg_constraint WHERE conrelid = '{TABLE}'::regclass "
                f"AND contype = 'n' AND conkey = ARRAY[{ref_keys[0]}]::int2[]"
            ).scalar()
        assert name == f"{TABLE}_ref_not_null"
    if not ref_null:
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
            conn.exec_driver_sql(
                f"INSERT INTO {TABLE} (id, ref, other) VALUES (0, NULL, %s)", (_value(op, type_),)
            )


@pytest.mark.parametrize("how", ["online", "offline"])
@pytest.mark.parametrize("child_null", [False, True])
def test_key_conversion_and_its_reverse_keep_not_null(
    engine: Engine, how: str, child_null: bool
) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {TABLE}, {PARENT} CASCADE")
        conn.exec_driver_sql(
            f"CREATE TABLE {PARENT} (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, "
            "name text NOT NULL)"
        )
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (id int PRIMARY KEY, parent_id bigint"
            f"{'' if child_null else ' NOT NULL'} REFERENCES {PARENT}, note text)"
        )
        conn.exec_driver_sql(
            f"INSERT INTO {PARENT} SELECT g, timestamptz '2024-01-01 00:00+00' + g * "
            "interval '1 s', 'p' || g FROM generate_series(1, 30) g"
        )
        conn.exec_driver_sql(
            f"INSERT INTO {TABLE} SELECT g, 1 + mod(g, 30), NULL FROM generate_series(1, 60) g"
        )
    before = {t: _not_null(engine, t) for t in (PARENT, TABLE)}
    version = engine.dialect.server_version_info or (0,)

    def run(name: str, **options: Any) -> None:
        def call(ops: Operations) -> None:
            getattr(ops, name)(PARENT, **options)

        if how == "offline":
            _script(engine, call)
            return
        with engine.connect() as conn:
            context = MigrationContext.configure(conn)
            with context.begin_transaction():
                call(Operations(context))

    def flags(table: str) -> dict[str, bool]:
        return {k: v[0] for k, v in _not_null(engine, table).items()}

    run("convert_primary_key_to_ulid", from_time="created_at", batch_size=7)
    after = {t: _not_null(engine, t) for t in (PARENT, TABLE)}
    assert after[TABLE]["parent_id"][0] == (not child_null)
    assert after[PARENT]["id"][0]
    assert after[PARENT]["legacy_id"][0]  # the old key, kept NOT NULL beside the new one
    if version >= (18,):
        assert len(after[TABLE]["parent_id"][1]) == (0 if child_null else 1)
        assert len(after[PARENT]["id"][1]) == 1
    run("restore_legacy_primary_key")
    assert {t: flags(t) for t in (PARENT, TABLE)} == {
        t: {k: v[0] for k, v in before[t].items()} for t in (PARENT, TABLE)
    }
