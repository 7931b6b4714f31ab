"""Alembic environment for the sqlalchemy-ulid migration example.

The database URL comes from ``-x url=...``; without it, ``example.sqlite3``
next to this file.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import context

import sqlalchemy_ulid.alembic  # registers op.add_ulid_column & co.

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    from logging.config import fileConfig

    fileConfig(config.config_file_name)

DEFAULT_URL = f"sqlite:///{Path(__file__).with_name('example.sqlite3')}"
url = context.get_x_argument(as_dictionary=True).get("url") or DEFAULT_URL

# The migrations are written by hand; an application would point this at its
# models' MetaData for autogenerate.
target_metadata = config.attributes.get("target_metadata")

configure_args = {
    "target_metadata": target_metadata,
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
