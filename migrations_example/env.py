"""Alembic environment for the sqlalchemy-ulid migration example.

The database URL comes from ``-x url=...``; without it, ``example.sqlite3``
next to this file. The target metadata is the example's own models
(``models.py`` beside this file), so ``alembic check`` and
``alembic revision --autogenerate`` work from the command line.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import context

import sqlalchemy_ulid.alembic  # registers op.add_ulid_column & co.

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    from logging.config import fileConfig

    fileConfig(config.config_file_name)

DEFAULT_URL = f"sqlite:///{Path(__file__).with_name('example.sqlite3')}"
url = context.get_x_argument(as_dictionary=True).get("url") or DEFAULT_URL


def _models_metadata() -> sa.MetaData:
    # models.py is loaded from beside this file, whatever the working
    # directory; an application would write "from myapp.models import Base".
    spec = importlib.util.spec_from_file_location(
        "migrations_example_models", Path(__file__).with_name("models.py")
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # the ORM resolves annotations through it
    spec.loader.exec_module(module)
    return module.metadata  # type: ignore[no-any-return]


# A test or an application may hand in other metadata; the default is the
# example's own models, for `alembic check` and `revision --autogenerate`.
target_metadata = config.attributes.get("target_metadata") or _models_metadata()


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """Take a unique index on SQLite for the model's unique constraint of that name.

    SQLite cannot add a constraint to an existing table, so
    ``op.add_ulid_column(..., unique=True)`` makes a unique index there.
    """
    if context.get_context().dialect.name != "sqlite":
        return True
    tables = target_metadata.tables
    if type_ == "index" and reflected and obj.unique and obj.table.name in tables:
        unique = {
            c.name: {col.name for col in c.columns}
            for c in tables[obj.table.name].constraints
            if isinstance(c, sa.UniqueConstraint)
        }
        return unique.get(name) != {col.name for col in obj.columns}
    if type_ == "unique_constraint" and not reflected and compare_to is None:
        indexes = sa.inspect(context.get_bind()).get_indexes(obj.table.name)
        columns = [col.name for col in obj.columns]
        return not any(
            i["name"] == name and i["unique"] and i["column_names"] == columns for i in indexes
        )
    return True


configure_args = {
    "target_metadata": target_metadata,
    "include_object": include_object,
    # The one line autogenerate needs: render ULIDType columns as
    # sqlalchemy_ulid.ULIDType(...) and import sqlalchemy_ulid.
    "render_item": sqlalchemy_ulid.alembic.render_item,
}


def run_migrations_offline() -> None:
    context.configure(
        url=url, literal_binds=True, dialect_opts={"paramstyle": "named"}, **configure_args
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:  # handed in by a test or an application
        context.configure(connection=connection, **configure_args)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, **configure_args)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
