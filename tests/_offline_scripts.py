"""Alembic projects for the tests, and the ``--sql`` scripts of the online conversions.

``project()`` writes an Alembic project (its ``env.py``, its revisions,
optionally the example project's ``script.py.mako`` for ``alembic
revision``) and returns its ``Config``: the one way the suite writes one.
``alembic_sql()`` is what a real ``alembic upgrade/downgrade --sql`` writes
for one op: a project whose ``env.py`` writes the script for the URL, and
one revision running the op (its downgrade the reverse conversion).
``upgrade()`` and ``run_online()`` run an op as ``alembic upgrade`` does,
``op_sql()`` writes its script as ``--sql`` does, without a project.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.operations import MigrateOperation, Operations
from sqlalchemy.engine import Connection, Engine

#: An op to run: the op itself, or a call on ``Operations`` (``lambda op: op.add_ulid_column()``).
Op = MigrateOperation | Callable[[Operations], Any]

#: The example project, whose revision template ``project(..., template=True)`` copies.
EXAMPLE = Path(__file__).resolve().parent.parent / "migrations_example"


def project(
    where: Path,
    env_py: str,
    revisions: Mapping[str, str] | None = None,
    *,
    engine: Engine | None = None,
    template: bool = False,
    output_buffer: TextIO | None = None,
    ini: str | None = None,
) -> Config:
    """An Alembic project in ``where`` (made if missing), and its ``Config``.

    ``revisions`` maps a file name in ``versions/`` (without ``.py``) to its
    source; ``engine`` sets ``sqlalchemy.url``; ``template`` copies the
    example project's ``script.py.mako`` (``alembic revision`` needs it);
    ``ini`` (the lines after ``script_location``) writes ``alembic.ini``, for
    the ``alembic`` command line, and the ``Config`` reads it.
    Alembic's logging set-up is off (``configure_logger``), for env.py files
    that read it.
    """
    versions = where / "versions"
    versions.mkdir(parents=True, exist_ok=True)
    (where / "env.py").write_text(env_py)
    for name, source in (revisions or {}).items():
        (versions / f"{name}.py").write_text(source)
    if template:
        (where / "script.py.mako").write_text((EXAMPLE / "script.py.mako").read_text())
    file = None
    if ini is not None:
        file = str(where / "alembic.ini")
        Path(file).write_text(f"[alembic]\nscript_location = {where}\n{ini}")
    config = Config(file, output_buffer=output_buffer)
    config.set_main_option("script_location", str(where))
    if engine is not None:
        config.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False))
    config.attributes["configure_logger"] = False
    return config


_REVISION = """{imports}
revision = {revision!r}
down_revision = {down_revision!r}
branch_labels = None
depends_on = None


def upgrade():
    {up}


def downgrade():
    {down}
"""


def key_revisions(table: str, up: str, down: str = "") -> dict[str, str]:
    """``project()``'s revisions for a key conversion: ``pk0000`` (nothing), then ``pk0001``.

    ``pk0001`` converts ``table``'s key with the options ``up`` and restores
    it with ``down``; a test stamps the database at ``pk0000`` to get the
    script between the two.
    """
    return {
        "pk0000_base": _REVISION.format(
            imports="", revision="pk0000", down_revision=None, up="pass", down="pass"
        ),
        "pk0001_convert": _REVISION.format(
            imports="from alembic import op\n",
            revision="pk0001",
            down_revision="pk0000",
            up=f"op.convert_primary_key_to_ulid({table!r}, {up})",
            down=f"op.restore_legacy_primary_key({table!r}, {down})",
        ),
    }


#: The revisions' table: not ``alembic_version``, which a database may hold for another project.
VERSION_TABLE = "alembic_version_offline"


def alembic_sql(engine: Engine, tmp_path: Path, call: str, *, down: bool = False) -> str:
    """What a real ``alembic upgrade head --sql`` (or ``downgrade``) writes for ``call``."""
    reverse = call.replace('from_storage="', 'X="').replace('to_storage="', 'from_storage="')
    reverse = reverse.replace('X="', 'to_storage="')
    revision = _REVISION.format(
        imports="from alembic import op\n",
        revision="0001",
        down_revision=None,
        up=f"op.{call}",
        down=f"op.{reverse}",
    )
    buffer = io.StringIO()
    config = project(
        tmp_path / ("down" if down else "up"),
        textwrap.dedent(
            """\
            from alembic import context

            import sqlalchemy_ulid.alembic  # noqa: F401

            context.configure(
                url=context.config.get_main_option("sqlalchemy.url"),
                version_table="alembic_version_offline",
            )
            with context.begin_transaction():
                context.run_migrations()
            """
        ),
        {"0001_convert": revision},
        engine=engine,
        output_buffer=buffer,
    )
    if down:
        command.downgrade(config, "0001:base", sql=True)
    else:
        command.upgrade(config, "head", sql=True)
    return buffer.getvalue()


def upgrade(conn: Connection, op: Op) -> None:
    """Run ``op`` on ``conn`` as ``alembic upgrade`` does, in the transactions it nests.

    Alembic's ``run_migrations()`` begins two: the outer one is the
    migration's transaction on PostgreSQL, the inner one on MariaDB.
    """
    context = MigrationContext.configure(conn)
    with context.begin_transaction(), context.begin_transaction(_per_migration=True):
        _apply(Operations(context), op)


def run_online(engine: Engine, op: Op) -> None:
    """Run ``op`` as ``alembic upgrade`` does, on a connection of its own."""
    with engine.connect() as conn:
        upgrade(conn, op)


def op_sql(dialect: str | Engine, op: Op, **opts: Any) -> str:
    """The script ``alembic upgrade --sql`` writes for ``op`` on ``dialect`` (a name, an engine)."""
    buffer = io.StringIO()
    name = dialect if isinstance(dialect, str) else dialect.dialect.name
    context = MigrationContext.configure(
        dialect_name=name, opts={"as_sql": True, "output_buffer": buffer, **opts}
    )
    _apply(Operations(context), op)
    return buffer.getvalue()


def _apply(operations: Operations, op: Op) -> None:
    if isinstance(op, MigrateOperation):
        operations.invoke(op)
    else:
        op(operations)
