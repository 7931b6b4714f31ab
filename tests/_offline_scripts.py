"""The offline (``--sql``) scripts of the online storage conversions, as Alembic writes them.

One Alembic project per call in ``tmp_path``: an ``env.py`` that writes the
script for the URL, and one revision running the op (its downgrade the
reverse conversion), through the real ``alembic upgrade/downgrade --sql``.
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Engine

#: The revisions' table: not ``alembic_version``, which a database may hold for another project.
VERSION_TABLE = "alembic_version_offline"


def alembic_sql(engine: Engine, tmp_path: Path, call: str, *, down: bool = False) -> str:
    """What a real ``alembic upgrade head --sql`` (or ``downgrade``) writes for ``call``."""
    where = tmp_path / ("down" if down else "up")
    (where / "versions").mkdir(parents=True)
    (where / "env.py").write_text(
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
        )
    )
    reverse = call.replace('from_storage="', 'X="').replace('to_storage="', 'from_storage="')
    reverse = reverse.replace('X="', 'to_storage="')
    (where / "versions" / "0001_convert.py").write_text(
        "from alembic import op\n\nrevision = '0001'\ndown_revision = None\n"
        "branch_labels = None\ndepends_on = None\n\n\n"
        f"def upgrade() -> None:\n    op.{call}\n\n\ndef downgrade() -> None:\n    op.{reverse}\n"
    )
    buffer = io.StringIO()
    config = Config(output_buffer=buffer)
    config.set_main_option("script_location", str(where))
    config.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False))
    config.attributes["configure_logger"] = False
    if down:
        command.downgrade(config, "0001:base", sql=True)
    else:
        command.upgrade(config, "head", sql=True)
    return buffer.getvalue()
