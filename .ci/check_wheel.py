"""What a user gets from the built wheel, checked in a clean virtualenv.

Run by .ci/run with the virtualenv's python, never from the repository tree:

    check_wheel.py plain WHEEL SDIST POSTGRESQL_URL   only the wheel and psycopg[binary]
    check_wheel.py async URL...                       after installing WHEEL[an async extra]

``plain`` checks that greenlet is absent, that every public name imports in a
fresh process of its own, that ``sqlalchemy-ulid --version`` (the installed
entry point) and ``python -m sqlalchemy_ulid --version`` answer, that LICENSE
is in the wheel and the sdist and no half test suite is in the sdist, and runs
the README's "A taste" block against PostgreSQL. ``async`` connects an
AsyncEngine to each URL (``postgresql+asyncpg://``, ``mysql+asyncmy://``,
``sqlite+aiosqlite://``), which needs the greenlet that the extra brings.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tarfile
import zipfile
from importlib import metadata
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def check(condition: bool, message: str) -> None:
    if not condition:
        sys.exit(f"check_wheel: FAILED: {message}")
    print(f"check_wheel: ok: {message}")


def installed_from_site_packages() -> None:
    spec = importlib.util.find_spec("sqlalchemy_ulid")
    assert spec is not None
    assert spec.origin is not None
    check("site-packages" in spec.origin, f"sqlalchemy_ulid comes from {spec.origin}")


def public_names_each_in_a_fresh_process() -> None:
    import sqlalchemy_ulid

    for name in sqlalchemy_ulid.__all__:
        result = subprocess.run(
            [sys.executable, "-c", f"from sqlalchemy_ulid import {name}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        check(result.returncode == 0, f"from sqlalchemy_ulid import {name} {result.stderr[-300:]}")


def version_from_the_command_line() -> None:
    expected = f"sqlalchemy-ulid {metadata.version('sqlalchemy-ulid')}\n"
    for command in (
        [str(Path(sys.executable).with_name("sqlalchemy-ulid"))],
        [sys.executable, "-m", "sqlalchemy_ulid"],
    ):
        result = subprocess.run([*command, "--version"], capture_output=True, text=True)
        check(result.stdout == expected, f"{' '.join(command)} --version -> {result.stdout!r}")


def archives(wheel: str, sdist: str) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    check(any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "LICENSE in the wheel")
    with tarfile.open(sdist) as archive:
        members = [name.split("/", 1)[-1] for name in archive.getnames()]
    check("LICENSE" in members, "LICENSE in the sdist")
    check(not any(m.startswith("tests/") for m in members), "no tests/ in the sdist")


def readme_taste_on_postgresql(url: str) -> None:
    text = README.read_text()
    taste = text[text.index("## A taste") :]
    block = re.search(r"```python\n(.*?)```", taste, re.DOTALL)
    assert block is not None
    source = block[1]
    sqlite = 'sa.create_engine("sqlite://")'
    check(source.count(sqlite) == 1, "the README taste makes one engine")
    source = source.replace(sqlite, f"sa.create_engine({url!r})")
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    drop = sa.text("DROP TABLE IF EXISTS events")
    with engine.begin() as conn:
        conn.execute(drop)
    try:
        result = subprocess.run(
            [sys.executable, "-c", source], capture_output=True, text=True, timeout=120
        )
    finally:
        with engine.begin() as conn:
            conn.execute(drop)
        engine.dispose()
    fields = result.stdout.split()
    # It prints: <the id> <its creation time, UTC> 50 120
    check(
        result.returncode == 0 and fields[-2:] == ["50", "120"] and len(fields[0]) == 26,
        f"README taste on PostgreSQL printed {result.stdout.strip()!r} {result.stderr[-500:]}",
    )


def main() -> None:
    mode = sys.argv[1]
    if mode == "plain":
        wheel, sdist, url = sys.argv[2:5]
        check(importlib.util.find_spec("greenlet") is None, "greenlet is not installed")
        installed_from_site_packages()
        public_names_each_in_a_fresh_process()
        version_from_the_command_line()
        archives(wheel, sdist)
        readme_taste_on_postgresql(url)
        check(importlib.util.find_spec("greenlet") is None, "still no greenlet")
    elif mode == "async":
        check(importlib.util.find_spec("greenlet") is not None, "the extra brings greenlet")
        import asyncio

        import sqlalchemy as sa
        from sqlalchemy.ext.asyncio import create_async_engine

        async def connect(url: str) -> int:
            engine = create_async_engine(url)
            async with engine.connect() as conn:
                one = await conn.scalar(sa.text("SELECT 1"))
            await engine.dispose()
            return int(one)

        for url in sys.argv[2:]:
            driver = sa.make_url(url).drivername
            check(asyncio.run(connect(url)) == 1, f"{driver} connects ({sa.__version__})")
    else:
        sys.exit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
