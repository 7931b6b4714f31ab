"""The package surface: lazy names, light import, public module names."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import sqlalchemy_ulid


def test_plain_import_does_not_load_sqlalchemy() -> None:
    # The CLI and code that only makes or parses ULIDs should not pay for
    # SQLAlchemy (over a second on a slow machine).
    code = (
        "import sys, sqlalchemy_ulid; sqlalchemy_ulid.new_ulid(); "
        "print('sqlalchemy' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize("name", sqlalchemy_ulid.__all__)
def test_every_public_name_resolves_under_the_package(name: str) -> None:
    obj = getattr(sqlalchemy_ulid, name)
    assert obj.__module__ == "sqlalchemy_ulid"
    assert name in dir(sqlalchemy_ulid)


def test_dir_lists_only_public_names() -> None:
    listed = set(dir(sqlalchemy_ulid))
    assert listed == {*sqlalchemy_ulid.__all__, "__version__"} | (
        {"alembic", "contrib"} & set(vars(sqlalchemy_ulid))
    )
    # The helpers __init__ imports for itself stay out of sight.
    assert not listed & {"Any", "TYPE_CHECKING", "importlib", "annotations"}


def test_unknown_name_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        sqlalchemy_ulid.nope  # noqa: B018


# -- what a plain install gives -------------------------------------------------

# Run with greenlet unimportable, as after `pip install sqlalchemy-ulid psycopg`
# on SQLAlchemy 2.1 (which no longer installs greenlet): resolving the name
# must work, and must not pull in sqlalchemy.ext.asyncio (which needs greenlet
# on 2.1, and is the half-import trap on every version). One process per name,
# forked from one interpreter that has imported SQLAlchemy's top package (as
# sqlalchemy_ulid would first) and nothing of ours: in one process a failed
# import leaves a half-imported module behind, and the next lookup "succeeds".
# The fork spares each name an interpreter's start and SQLAlchemy's import.
_RESOLVE_WITHOUT_GREENLET = """
import os, sys, traceback
sys.modules["greenlet"] = None  # import greenlet -> ImportError
import sqlalchemy

def trap():
    return sorted(m for m in sys.modules if m == "greenlet" and sys.modules[m] is not None
                  or m.startswith("sqlalchemy.ext.asyncio"))

assert not trap() and "sqlalchemy_ulid" not in sys.modules, trap()
for name in sys.argv[1:]:
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        try:
            import sqlalchemy_ulid
            getattr(sqlalchemy_ulid, name)
            print(name, "ok" if not trap() else "loaded " + ",".join(trap()), sep="\t")
        except BaseException as exc:
            print(name, f"raised {type(exc).__name__}: {exc}", sep="\t")
        sys.stdout.flush()
        os._exit(0)
    os.waitpid(pid, 0)
"""


def test_every_public_name_imports_without_greenlet_in_its_own_process() -> None:
    names = sqlalchemy_ulid.__all__
    command = [sys.executable, "-c", _RESOLVE_WITHOUT_GREENLET, *names]
    process = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr
    found = dict(line.split("\t", 1) for line in process.stdout.splitlines())
    assert sorted(found) == sorted(names), process.stderr
    assert {name: result for name, result in found.items() if result != "ok"} == {}


def test_sync_pagination_and_time_ranges_run_without_greenlet() -> None:
    code = """
import sys
sys.modules["greenlet"] = None
from datetime import datetime, timedelta, timezone
import sqlalchemy as sa
from sqlalchemy_ulid import ULIDType, created_since, new_ulid, paginate
table = sa.Table("t", sa.MetaData(), sa.Column("id", ULIDType(), primary_key=True))
engine = sa.create_engine("sqlite://")
table.metadata.create_all(engine)
with engine.begin() as conn:
    conn.execute(table.insert(), [{"id": new_ulid()} for _ in range(5)])
    page = paginate(conn, sa.select(table), table.c.id, limit=2)
    page = paginate(conn, sa.select(table), table.c.id, limit=2, after=page.next_cursor)
    hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    recent = conn.scalars(sa.select(table.c.id).where(created_since(table.c.id, hour_ago))).all()
print(len(page.items), page.has_more, len(recent))
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "True", "5"]


def test_async_extras_bring_greenlet() -> None:
    # SQLAlchemy 2.1 installs greenlet only through its [asyncio] extra, so
    # every extra with an async driver must ask for it.
    requires = metadata.requires("sqlalchemy-ulid") or []
    for extra in ("asyncio", "postgresql", "mysql", "sqlite-async"):
        in_extra = [r for r in requires if f'extra == "{extra}"' in r]
        assert any(r.startswith("SQLAlchemy[asyncio]") for r in in_extra), (extra, in_extra)
    assert not any(
        r.lower().startswith("greenlet") or "[asyncio]" in r
        for r in requires
        if "extra ==" not in r
    )


# -- the command line's version ----------------------------------------------------


def test_version_matches_the_installed_distribution() -> None:
    assert sqlalchemy_ulid.__version__ == metadata.version("sqlalchemy-ulid")


@pytest.mark.parametrize(
    "command",
    [
        pytest.param([str(Path(sys.executable).with_name("sqlalchemy-ulid"))], id="entry-point"),
        pytest.param([sys.executable, "-m", "sqlalchemy_ulid"], id="python-m"),
    ],
)
def test_version_from_the_command_line(command: list[str]) -> None:
    result = subprocess.run(
        [*command, "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        f"sqlalchemy-ulid {metadata.version('sqlalchemy-ulid')}\n",
        "",
    )


def test_an_async_engine_cannot_connect_without_greenlet() -> None:
    # Why every async-driver extra brings SQLAlchemy[asyncio] (docs/quickstart.md).
    code = """
import sys
sys.modules["greenlet"] = None
import asyncio
from sqlalchemy.ext.asyncio import create_async_engine
async def main():
    async with create_async_engine("sqlite+aiosqlite://").connect():
        pass
asyncio.run(main())
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "greenlet" in result.stderr.splitlines()[-1]


# -- metadata and the PyPI page ----------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
DOCS_URL = "https://sqlalchemy-ulid.readthedocs.io/en/latest/"


def _floors() -> dict[str, str]:
    lines = (ROOT / ".ci" / "floors.txt").read_text().splitlines()
    pins = [line.split("==") for line in lines if line and not line.startswith("#")]
    return {name: version for name, version in pins}


def test_declared_floors_are_the_ones_ci_tests() -> None:
    floors = _floors()
    assert set(floors) == {"SQLAlchemy", "alembic", "pydantic"}
    requires = metadata.requires("sqlalchemy-ulid") or []
    for name, version in floors.items():
        # Every requirement on the package, in the core or an extra, has that floor.
        on_it = [r for r in requires if re.match(rf"{name}(\[\w+\])?[<>=!~ ]", r, re.IGNORECASE)]
        assert on_it, name
        for requirement in on_it:
            assert re.match(rf"{name}(\[\w+\])?>={re.escape(version)}(;|$)", requirement), (
                requirement
            )
    quickstart = (ROOT / "docs" / "quickstart.md").read_text()
    readme = (ROOT / "README.md").read_text()
    for name, version in floors.items():
        assert f"| {version} (the floor)" in quickstart, name
        assert version in readme, name


def test_readme_links_are_absolute_and_point_at_pages_that_exist() -> None:
    # The README is the PyPI page, where links relative to the repository are dead.
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)]+)\)|<(https?://[^>]+)>", readme)
    links = [a or b for a, b in targets]
    assert links
    for link in links:
        assert link.startswith("https://"), link
        if link.startswith(DOCS_URL):
            page = link[len(DOCS_URL) :].split("#")[0].strip("/") or "index"
            assert (ROOT / "docs" / f"{page}.md").is_file(), link
    install = readme.index("pip install 'sqlalchemy-ulid[postgresql]'")
    assert install < readme.index("## ")  # the first thing a reader sees
