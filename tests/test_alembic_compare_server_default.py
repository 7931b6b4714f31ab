"""Autogenerate with ``compare_server_default``: generated-id DEFAULTs are quiet, real changes not.

On every backend (SQLite, PostgreSQL 15 or 18, MariaDB) a table is made by
an Alembic ``create_table`` op, as ``upgrade`` makes it, with a column for
each ``ulid_server_default()`` / ``uuid7_server_default()`` storage. A real
``compare_metadata`` against the same model reports nothing, with
``compare_server_default=compare_server_default`` and (Alembic 1.18+) with
``compare_server_default=True`` and the ``sqlalchemy_ulid`` plugin. Against
a model whose DEFAULTs changed (another generator, none, one added) it
reports exactly those columns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import alembic
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy.engine import Engine

from sqlalchemy_ulid import (
    ULIDType,
    install_ulid_function,
    install_uuid7_function,
    ulid_server_default,
    uuid7_server_default,
)
from sqlalchemy_ulid.alembic import compare_server_default

TABLE = "acsd_items"
_PLUGINS = tuple(int(p) for p in alembic.__version__.split(".")[:2]) >= (1, 18)

#: name -> (type, the DEFAULT the table is made with, the DEFAULT of the changed model)
COLUMNS: dict[str, tuple[Callable[[], Any], Any, Any]] = {
    "u_auto": (ULIDType, ulid_server_default, ulid_server_default),
    "u_binary": (
        lambda: ULIDType("binary"),
        lambda: ulid_server_default("binary"),
        lambda: uuid7_server_default("binary"),  # another generator
    ),
    "v_auto": (sa.Uuid, uuid7_server_default, uuid7_server_default),
    "v_binary": (
        lambda: ULIDType("binary"),
        lambda: uuid7_server_default("binary"),
        lambda: uuid7_server_default("binary"),
    ),
    "v_hex": (
        lambda: sa.String(32),
        lambda: uuid7_server_default("hex"),
        lambda: None,  # the DEFAULT dropped
    ),
    "plain": (lambda: ULIDType("binary"), lambda: None, lambda: ulid_server_default("binary")),
}
CHANGED = {"u_binary", "v_hex", "plain"}


def _columns(which: int) -> list[sa.Column[Any]]:
    columns: list[sa.Column[Any]] = [
        sa.Column("n", sa.Integer, primary_key=True, autoincrement=False)
    ]
    for name, spec in COLUMNS.items():
        columns.append(sa.Column(name, spec[0](), server_default=spec[which](), nullable=True))
    return columns


def _model(which: int) -> sa.MetaData:
    metadata = sa.MetaData()
    sa.Table(TABLE, metadata, *_columns(which))
    return metadata


@pytest.fixture
def made(engine: Engine) -> Iterator[Engine]:
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE IF EXISTS {TABLE}"))
        if conn.dialect.name != "sqlite":
            install_ulid_function(conn)
            install_uuid7_function(conn)
        Operations(MigrationContext.configure(conn)).create_table(TABLE, *_columns(1))
    try:
        yield engine
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {TABLE}"))


def _diffs(engine: Engine, metadata: sa.MetaData, opts: dict[str, Any]) -> dict[str, set[str]]:
    """Column -> the kinds of change autogenerate reports for it (this table only)."""
    found: dict[str, set[str]] = {}
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn,
            opts={
                **opts,
                "include_name": lambda name, kind, parents: kind != "table" or name == TABLE,
            },
        )
        for diff in compare_metadata(context, metadata):
            for change in diff if isinstance(diff, list) else [diff]:
                if change[0].startswith("modify_"):
                    found.setdefault(change[3], set()).add(change[0])
                else:
                    found.setdefault(str(change[0]), set()).add(str(change[1:3]))
    return found


def _modes() -> list[str]:
    return ["callable", "plugin"]


def _opts(mode: str) -> dict[str, Any]:
    if mode == "callable":
        return {"compare_server_default": compare_server_default}
    return {
        "compare_server_default": True,
        "autogenerate_plugins": ["alembic.autogenerate.*", "sqlalchemy_ulid"],
    }


@pytest.mark.parametrize("mode", _modes())
def test_generated_id_defaults_compare_equal_and_changes_are_reported(
    made: Engine, mode: str
) -> None:
    if mode == "plugin" and not _PLUGINS:
        # Alembic before 1.18 has no plugins: the callable is the way there.
        with pytest.raises(ImportError):
            __import__("alembic.runtime.plugins")
        return
    opts = _opts(mode)
    assert _diffs(made, _model(1), opts) == {}
    changed = _diffs(made, _model(2), opts)
    assert changed == {name: {"modify_default"} for name in CHANGED}


def test_without_the_comparison_alembic_reports_the_generators_as_changed(made: Engine) -> None:
    # Why the comparison is needed: Alembic runs both DEFAULTs on the server
    # (two calls of a generator differ). SQLite compares the text itself.
    reported = _diffs(made, _model(1), {"compare_server_default": True})
    if made.dialect.name == "sqlite":
        assert reported == {}
    else:
        assert "u_auto" in reported
        assert "v_auto" in reported
