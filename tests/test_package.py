"""The package surface: lazy names, light import, public module names."""

from __future__ import annotations

import subprocess
import sys

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


def test_unknown_name_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        sqlalchemy_ulid.nope  # noqa: B018
