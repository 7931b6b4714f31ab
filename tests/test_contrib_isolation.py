"""The core package never imports an integration or its third-party package."""

from __future__ import annotations

import subprocess
import sys

THIRD_PARTY = (
    "fastapi_pagination",
    "sqlakeyset",
    "ulid",
    "orjson",
    "msgspec",
    "litestar",
    "sqladmin",
    "advanced_alchemy",
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
