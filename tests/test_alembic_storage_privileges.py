"""``alter_ulid_storage(..., online=True)`` on MariaDB as a user without ``TRIGGER``.

docs/alembic.md says the op needs the ``TRIGGER`` privilege, stops at the
first ``CREATE TRIGGER`` without it, and finishes when rerun once it is
granted. This runs it as such a user, on the real server.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

import _databases
import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _offline_scripts import run_online
from conftest import Backend, private_engine
from sqlalchemy_ulid import ULID, new_ulid

TABLE = "priv_orders"
PASSWORD = "ulid-test-only"
#: The client connects over TCP to 127.0.0.1, which the server may name either way.
HOSTS = ("localhost", "127.0.0.1")


_drop = _databases.dropper(TABLE, conversions=[TABLE])


@pytest.fixture
def root(backends: dict[str, Backend]) -> Iterator[Engine]:
    with private_engine(backends["mysql"], _drop) as engine:
        yield engine


@pytest.fixture
def user(root: Engine) -> Iterator[tuple[Engine, str]]:
    """A user with every privilege the op needs on the database but TRIGGER."""
    database = root.url.database
    assert database
    name = f"u_{database}"[:80]  # one user per test database: CI jobs share the server
    hosts = HOSTS
    with root.begin() as conn:
        for host in hosts:
            conn.exec_driver_sql(f"DROP USER IF EXISTS '{name}'@'{host}'")
            conn.exec_driver_sql(f"CREATE USER '{name}'@'{host}' IDENTIFIED BY '{PASSWORD}'")
            conn.exec_driver_sql(
                "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, DROP, INDEX "
                f"ON `{database}`.* TO '{name}'@'{host}'"
            )
    engine = sa.create_engine(
        root.url.set(username=name, password=PASSWORD), poolclass=sa.pool.NullPool
    )
    try:
        yield engine, name
    finally:
        engine.dispose()
        with root.begin() as conn:
            for host in hosts:
                conn.exec_driver_sql(f"DROP USER IF EXISTS '{name}'@'{host}'")


def _migrate(engine: Engine) -> None:
    """Run the op as `alembic upgrade` does, in the transaction Alembic began."""
    run_online(
        engine,
        lambda op: op.alter_ulid_storage(
            TABLE, "ref", from_storage="text", to_storage="auto", online=True
        ),
    )


def test_without_trigger_the_op_stops_at_create_trigger_and_the_rerun_finishes(
    root: Engine, user: tuple[Engine, str]
) -> None:
    engine, name = user
    values = {i: str(new_ulid()) for i in range(1, 41)}
    with root.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (id INT PRIMARY KEY, ref CHAR(26) NOT NULL) ENGINE=InnoDB"
        )
        conn.execute(
            sa.text(f"INSERT INTO {TABLE} VALUES (:i, :r)"),
            [{"i": i, "r": r} for i, r in values.items()],
        )
    with pytest.raises(sa.exc.OperationalError, match="TRIGGER command denied"):
        _migrate(engine)
    with root.connect() as conn:
        tables = set(sa.inspect(conn).get_table_names())
        assert f"_{TABLE}__new" in tables  # the step before the triggers ran
        assert conn.exec_driver_sql(f"SELECT COUNT(*) FROM {TABLE}").scalar() == len(values)
        assert str(sa.inspect(conn).get_columns(TABLE)[1]["type"]).startswith("CHAR")
    database = root.url.database
    with root.begin() as conn:
        for host in HOSTS:
            conn.exec_driver_sql(f"GRANT TRIGGER ON `{database}`.* TO '{name}'@'{host}'")
    _migrate(engine)
    with root.connect() as conn:
        rows = dict(conn.exec_driver_sql(f"SELECT id, ref FROM {TABLE}").all())
        assert not {f"_{TABLE}__new", f"_{TABLE}__old"} & set(sa.inspect(conn).get_table_names())
    assert rows == {i: ULID(r).bytes for i, r in values.items()}
