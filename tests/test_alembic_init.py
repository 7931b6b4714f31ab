"""A fresh ``alembic init`` project, as docs/alembic.md and docs/sqlmodel.md set it up.

Real ``alembic init`` + ``revision --autogenerate`` + ``upgrade`` + ``check``
through the command line, on the three servers. The project's only edits are
the ones every Alembic project makes (the URL, ``target_metadata``) and the
documented line in ``script.py.mako``; without that line the first upgrade
fails with a NameError (the pitfall the docs warn about).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import _databases
from conftest import Backend

ORM_MODELS = """
import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy_ulid import ULID, ULIDPrimaryKey, ULIDType, UTCDateTime, new_uuid7


class Base(DeclarativeBase):
    pass


class Order(ULIDPrimaryKey, Base):
    __tablename__ = "{table}"
    public_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid(), default=new_uuid7, unique=True)
    code: Mapped[str] = mapped_column(ULIDType("text", as_str=True))
    parent: Mapped[ULID | None] = mapped_column(ULIDType(), index=True)
    paid_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

metadata = Base.metadata
"""

SQLMODEL_MODELS = """
import uuid

from sqlmodel import Field, SQLModel
from sqlalchemy_ulid import ULID, ULIDType, new_ulid, new_uuid7


class Hero(SQLModel, table=True):
    __tablename__ = "{table}"
    id: ULID = Field(default_factory=new_ulid, primary_key=True, sa_type=ULIDType)
    public_id: uuid.UUID = Field(default_factory=new_uuid7, unique=True)
    name: str = Field(max_length=80)
    team_id: ULID | None = Field(default=None, sa_type=ULIDType, index=True)

metadata = SQLModel.metadata
"""


def alembic(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(project)}
    return subprocess.run(
        [sys.executable, "-m", "alembic", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def init(tmp_path: Path, url: str, models: str, table: str, version_table: str) -> Path:
    """``alembic init``, then the edits every project makes: the URL, the metadata."""
    project = tmp_path / "project"
    project.mkdir()
    done = alembic(project, "init", "migrations")
    assert done.returncode == 0, done.stderr
    ini = project / "alembic.ini"
    ini.write_text(
        ini.read_text().replace(
            "sqlalchemy.url = driver://user:pass@localhost/dbname",
            f"sqlalchemy.url = {url.replace('%', '%%')}",
        )
    )
    (project / "models.py").write_text(textwrap.dedent(models.format(table=table)))
    env_py = project / "migrations" / "env.py"
    text = env_py.read_text()
    assert "target_metadata = None" in text
    text = text.replace("target_metadata = None", "from models import metadata as target_metadata")
    # This test's own alembic_version table, so a concurrent test keeps its own.
    text = text.replace(
        "target_metadata=target_metadata,",
        f"target_metadata=target_metadata, version_table={version_table!r},",
    )
    env_py.write_text(text)
    return project


def add_imports(project: Path, *modules: str) -> None:
    """The documented one-line edit (one line per module) of ``script.py.mako``."""
    mako = project / "migrations" / "script.py.mako"
    text = mako.read_text()
    assert "import sqlalchemy as sa\n" in text
    lines = "".join(f"import {module}\n" for module in modules)
    mako.write_text(text.replace("import sqlalchemy as sa\n", f"import sqlalchemy as sa\n{lines}"))


def _drop(url: str, *tables: str) -> None:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        _databases.drop_tables(engine, *tables)
    finally:
        engine.dispose()


@pytest.fixture
def backend(backend: Backend) -> Iterator[Backend]:
    """The backend, on a server in a database of these tests' own.

    ``alembic check`` compares the whole database with the models: a table of
    another tool's (or another test's) must not be there.
    """
    if backend.name == "sqlite" or backend.url is None:
        yield backend
        return
    with _databases.own_database(backend.url, "init") as url:
        engine = sa.create_engine(url)
        try:
            yield dataclasses.replace(backend, url=url, engine=engine)
        finally:
            engine.dispose()


@pytest.mark.parametrize(
    ("models", "imports"),
    [(ORM_MODELS, ["sqlalchemy_ulid"]), (SQLMODEL_MODELS, ["sqlalchemy_ulid", "sqlmodel"])],
    ids=["sqlalchemy", "sqlmodel"],
)
def test_a_fresh_project_autogenerates_upgrades_and_checks_clean(
    backend: Backend, tmp_path: Path, models: str, imports: list[str]
) -> None:
    if "sqlmodel" in imports:
        # A third-party limit: sqlmodel imports sqlalchemy.sql.elements.TryCast,
        # which SQLAlchemy added in 2.0.14 (the floor job's 2.0.8 lacks it).
        pytest.importorskip("sqlmodel", exc_type=ImportError)
    assert backend.url is not None
    suffix = uuid.uuid4().hex[:8]
    table, version_table = f"init_{suffix}", f"alembic_version_{suffix}"
    project = init(tmp_path, backend.url, models, table, version_table)
    add_imports(project, *imports)
    try:
        made = alembic(project, "revision", "--autogenerate", "-m", "first")
        assert made.returncode == 0, made.stderr
        (script,) = (project / "migrations" / "versions").glob("*.py")
        source = script.read_text()
        assert "sa.Column('id', sqlalchemy_ulid.ULIDType(), nullable=False)" in source
        assert "sqlalchemy_ulid._" not in source  # the public name only
        assert "sa.Uuid()" in source
        if "sqlmodel" not in imports:
            assert "sqlalchemy_ulid.ULIDType('text', as_str=True)" in source
            assert "sqlalchemy_ulid.UTCDateTime(timezone=True)" in source
        else:
            assert "sqlmodel.sql.sqltypes.AutoString(length=80)" in source
        upgraded = alembic(project, "upgrade", "head")
        assert upgraded.returncode == 0, upgraded.stderr
        checked = alembic(project, "check")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "No new upgrade operations detected" in checked.stdout + checked.stderr
        downgraded = alembic(project, "downgrade", "base")
        assert downgraded.returncode == 0, downgraded.stderr
    finally:
        _drop(backend.url, table, version_table)


def test_without_the_line_the_first_upgrade_fails(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/app.sqlite3"
    project = init(tmp_path, url, ORM_MODELS, "init_orders", "alembic_version")
    made = alembic(project, "revision", "--autogenerate", "-m", "first")
    assert made.returncode == 0, made.stderr
    upgraded = alembic(project, "upgrade", "head")
    assert upgraded.returncode != 0
    assert "NameError: name 'sqlalchemy_ulid' is not defined" in upgraded.stderr
