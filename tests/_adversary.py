"""Shared helpers of the adversarial Alembic tests (PostgreSQL and MariaDB).

Each test builds a table the way a user would (a rule, a named NOT NULL, a
partitioned table, odd names...), runs one op as ``alembic upgrade`` does,
and checks either that it was refused before any DDL or that it did the
right thing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.operations import Operations
from sqlalchemy.engine import Engine

import sqlalchemy_ulid.alembic  # noqa: F401  (registers the ops)
from _offline_scripts import upgrade
from conftest import recording

#: Statement heads that change the schema or the data.
CHANGES = ("ALTER", "CREATE", "INSERT", "UPDATE", "DELETE", "DROP", "RENAME", "REPLACE", "DO")


def changes(statements: list[str]) -> list[str]:
    """The statements of ``statements`` that change something."""
    return [s for s in statements if s.lstrip().upper().startswith(CHANGES)]


def run_op(
    engine: Engine,
    call: Callable[[Operations], Any],
    *,
    setup: Callable[[sa.Connection], None] | None = None,
) -> list[str]:
    """Run ``call(op)`` as ``alembic upgrade`` does; return every statement sent.

    ``setup`` runs on the op's connection first (session settings a user left).
    """
    with recording(engine) as seen, engine.connect() as conn:
        if setup is not None:
            setup(conn)
            conn.commit()
            seen.clear()
        upgrade(conn, call)
    return seen


@contextmanager
def refused_before_ddl(engine: Engine, match: str) -> Iterator[list[str]]:
    """Assert the block raises a ValueError matching ``match`` before any DDL."""
    with recording(engine) as seen, pytest.raises(ValueError, match=match):
        yield seen
    assert changes(seen) == [], changes(seen)


def execute(engine: Engine, *statements: str) -> None:
    """Run ``statements`` in one transaction."""
    with engine.begin() as conn:
        for statement in statements:
            conn.exec_driver_sql(statement)


def scalar(engine: Engine, statement: str, **params: Any) -> Any:
    """The first column of the first row of ``statement``."""
    with engine.connect() as conn:
        return conn.execute(sa.text(statement), params).scalar()


def rows(engine: Engine, statement: str, **params: Any) -> list[tuple[Any, ...]]:
    """Every row of ``statement``, as tuples."""
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.text(statement), params)]
