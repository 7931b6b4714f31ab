"""The core package never imports an integration or its third-party package."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest

THIRD_PARTY = (
    "fastapi",
    "fastapi_pagination",
    "sqlakeyset",
    "ulid",
    "orjson",
    "msgspec",
    "litestar",
    "sqladmin",
    "advanced_alchemy",
    "strawberry",
    "graphql",
    "typeid",
)


def test_core_and_its_lazy_names_import_no_integration() -> None:
    code = (
        "import sys, sqlalchemy_ulid as s\n"
        "for name in s.__all__: getattr(s, name)\n"  # load every lazy name too
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {THIRD_PARTY!r}"
        " or m.startswith('sqlalchemy_ulid.contrib'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize(
    ("module", "package", "extra"),
    [
        ("fastapi", "fastapi", "fastapi"),
        ("fastapi", "pydantic", "fastapi"),  # its dependency
        ("fastapi_pagination", "fastapi_pagination", "fastapi-pagination"),
        ("fastapi_pagination", "fastapi", "fastapi-pagination"),  # its dependency
        ("sqladmin", "sqladmin", "sqladmin"),
        ("sqladmin", "markupsafe", "sqladmin"),  # its dependency, missing first
        ("sqlakeyset", "sqlakeyset", "sqlakeyset"),
        ("python_ulid", "ulid", "python-ulid"),
        ("typeid_python", "typeid", "typeid-python"),
        ("strawberry", "strawberry", "strawberry"),
        ("strawberry", "graphql", "strawberry"),  # its dependency
        ("advanced_alchemy", "advanced_alchemy", "advanced-alchemy"),
    ],
)
def test_contrib_without_its_package_names_the_extra(module: str, package: str, extra: str) -> None:
    # A None entry in sys.modules makes "import <package>" fail as if it
    # were not installed, in this subprocess only.
    code = (
        "import sys\n"
        f"sys.modules[{package!r}] = None\n"
        "try:\n"
        f"    import sqlalchemy_ulid.contrib.{module}\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("ImportError "), out.stdout + out.stderr
    assert f"sqlalchemy_ulid.contrib.{module} needs the {extra} extra" in out.stdout
    assert f"pip install 'sqlalchemy-ulid[{extra}]'" in out.stdout
    # Which import failed: the hidden package, or (in a run without the
    # extras) another of the integration's packages that is not installed.
    cause = out.stdout.split(" extra (", 1)[1].rsplit("): pip install", 1)[0]
    named = re.search(r"No module named '([\w.]+)'|import of ([\w.]+) halted", cause)
    assert named is not None, cause
    failed = (named.group(1) or named.group(2)).split(".")[0]
    assert failed == package or importlib.util.find_spec(failed) is None, cause
