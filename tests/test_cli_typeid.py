"""``inspect`` on typed ids, through main() and the real entry points."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from hypothesis import given

from sqlalchemy_ulid import TypeID
from sqlalchemy_ulid._cli import main
from strategies import typeid_parts

SPEC = "user_01h455vb4pex5vsknk084sn02q"  # the spec's UUIDv7 example
SPEC_UUID = "01890a5d-ac96-774b-bcce-b302099a8057"
SCRIPT = Path(sys.executable).with_name("sqlalchemy-ulid")
KEYS = ["typeid", "prefix", "suffix", "uuid", "version", "timestamp_ms", "datetime", "hex"]


@pytest.fixture(params=["python -m", "console script"])
def command(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "console script":
        if not SCRIPT.exists():
            pytest.fail(f"console script not installed at {SCRIPT}")
        return [str(SCRIPT)]
    return [sys.executable, "-m", "sqlalchemy_ulid"]


def run(command: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
        check=False,
    )


def test_inspect_a_typed_id(command: list[str]) -> None:
    done = run(command, "inspect", "--json", SPEC)
    assert (done.returncode, done.stderr) == (0, "")
    fields = json.loads(done.stdout)
    assert list(fields) == KEYS
    assert fields == {
        "typeid": SPEC,
        "prefix": "user",
        "suffix": "01h455vb4pex5vsknk084sn02q",
        "uuid": SPEC_UUID,
        "version": 7,
        "timestamp_ms": 1688096058518,
        "datetime": "2023-06-30T03:34:18.518000Z",
        "hex": SPEC_UUID.replace("-", ""),
    }


def test_inspect_mixes_ulids_typed_ids_and_bad_ones(command: list[str]) -> None:
    wrong = "user_8zzzzzzzzzzzzzzzzzzzzzzzzz"
    done = run(command, "inspect", SPEC, "01HTQW311N1KR5G0Y75M3EF00H", wrong, "User_x")
    assert done.returncode == 2
    assert f"typeid        {SPEC}\n" in done.stdout
    assert "prefix        user\n" in done.stdout
    assert "ulid          01HTQW311N1KR5G0Y75M3EF00H\n" in done.stdout
    assert done.stderr.splitlines() == [
        f"sqlalchemy-ulid: error: argument 3 '{wrong}': the suffix must start with 0-7, "
        "got '8': it would hold more than 128 bits",
        "sqlalchemy-ulid: error: argument 4 'User_x': uppercase 'U' at position 0 of prefix "
        "'User': a prefix is at most 63 lowercase ASCII letters and underscores",
    ]


def test_a_uuid_that_is_not_v7_has_no_time() -> None:
    v4 = uuid.UUID("0110c853-1d09-42d8-973e-1194e95b5f19")
    result = main(["inspect", "--json", str(TypeID.from_uuid("doc", v4))])
    fields = json.loads(result.stdout)
    assert (fields["version"], fields["timestamp_ms"], fields["datetime"]) == (4, None, None)
    # the spec's alphabet vector: not an RFC 9562 variant, so no version either
    result = main(["inspect", "--json", "prefix_0123456789abcdefghjkmnpqrs"])
    assert json.loads(result.stdout)["version"] is None


@given(typeid_parts())
def test_inspect_reads_back_every_typed_id(parts: tuple[str, uuid.UUID]) -> None:
    prefix, value = parts
    if not prefix:
        return  # without a prefix the text is a ULID's, and shown as one
    text = str(TypeID.from_uuid(prefix, value))
    result = main(["inspect", "--json", text])
    assert result.status == 0, result.stderr
    fields = json.loads(result.stdout)
    assert (fields["typeid"], fields["prefix"], fields["uuid"]) == (text, prefix, str(value))
