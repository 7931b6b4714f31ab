"""The command line, through main() and as real subprocesses."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from itertools import pairwise
from pathlib import Path

import pytest

from sqlalchemy_ulid import ULID
from sqlalchemy_ulid._cli import Result, main

WORKED = "01HTQW311N1KR5G0Y75M3EF00H"
WORKED_MS = 1712345678901
SCRIPT = Path(sys.executable).with_name("sqlalchemy-ulid")
JSON_KEYS = ["ulid", "timestamp_ms", "datetime", "randomness", "uuid", "hex"]


def run(*args: str, script: bool = False) -> subprocess.CompletedProcess[str]:
    command = [str(SCRIPT)] if script else [sys.executable, "-m", "sqlalchemy_ulid"]
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
        check=False,
    )


@pytest.fixture(params=["python -m", "console script"])
def cli(request: pytest.FixtureRequest) -> bool:
    """Whether to run the console script (True) or ``python -m`` (False)."""
    if request.param == "console script" and not SCRIPT.exists():
        pytest.fail(f"console script not installed at {SCRIPT}")
    return bool(request.param == "console script")


# -- new ---------------------------------------------------------------------------------


def test_new_prints_one_ulid() -> None:
    before = ULID.min_at(datetime.now(timezone.utc))
    done = run("new")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert len(lines) == 1
    made = ULID(lines[0])
    assert str(made) == lines[0]  # canonical: uppercase
    assert made >= before


def test_new_many_are_monotonic(cli: bool) -> None:
    done = run("new", "-n", "500", script=cli)
    assert done.returncode == 0, done.stderr
    values = [ULID(line) for line in done.stdout.splitlines()]
    assert len(values) == 500
    assert all(a < b for a, b in pairwise(values))


@pytest.mark.parametrize(
    "when",
    [
        "2024-04-05T19:34:38.901Z",
        "2024-04-05T19:34:38.901+00:00",
        "2024-04-06T01:04:38.901+05:30",
        "2024-04-05T12:34:38.901-07:00",
        "2024-04-05T19:34:38.901500Z",  # sub-millisecond part: floored
        str(WORKED_MS),
    ],
)
def test_new_at_sets_the_timestamp(when: str) -> None:
    result = main(["new", "-n", "3", "--at", when])
    assert result.status == 0, result.stderr
    values = [ULID(line) for line in result.stdout.splitlines()]
    assert [u.timestamp_ms for u in values] == [WORKED_MS] * 3
    assert [b.int - a.int for a, b in pairwise(values)] == [1, 1]


def test_new_at_in_a_subprocess() -> None:
    done = run("new", "-n", "2", "--at", "2024-04-06T01:04:38.901+05:30", "--format", "hex")
    assert done.returncode == 0, done.stderr
    values = [ULID.from_hex(line) for line in done.stdout.splitlines()]
    assert [u.timestamp_ms for u in values] == [WORKED_MS] * 2


@pytest.mark.parametrize(
    ("fmt", "parse"),
    [
        ("canonical", ULID),
        ("uuid", lambda line: ULID.from_uuid(uuid.UUID(line))),
        ("hex", ULID.from_hex),
    ],
)
def test_new_formats(fmt: str, parse: Callable[[str], ULID]) -> None:
    result = main(["new", "-n", "3", "--at", str(WORKED_MS), "--format", fmt])
    assert result.status == 0, result.stderr
    lines = result.stdout.splitlines()
    values = [parse(line) for line in lines]
    assert [u.timestamp_ms for u in values] == [WORKED_MS] * 3
    assert all(b.int == a.int + 1 for a, b in pairwise(values))
    if fmt == "canonical":
        assert all(line == str(ULID(line)) for line in lines)
    if fmt == "uuid":
        assert all(str(uuid.UUID(line)) == line for line in lines)
    if fmt == "hex":
        assert all(len(line) == 32 and line == line.lower() for line in lines)


# -- inspect -------------------------------------------------------------------------------


def test_inspect_text() -> None:
    done = run("inspect", WORKED.lower())
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    out = done.stdout
    for expected in (
        WORKED,
        str(WORKED_MS),
        "2024-04-05T19:34:38.901",
        "0cf05803c72d06e78011",
        "018eafc1-8435-0cf0-5803-c72d06e78011",
        "018eafc184350cf05803c72d06e78011",
    ):
        assert expected in out


def test_inspect_json(cli: bool) -> None:
    other = "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"  # past year 9999: no datetime
    done = run("inspect", "--json", WORKED, other, script=cli)
    assert done.returncode == 0, done.stderr
    first, second = (json.loads(line) for line in done.stdout.splitlines())
    assert list(first) == JSON_KEYS
    assert first == {
        "ulid": WORKED,
        "timestamp_ms": WORKED_MS,
        "datetime": first["datetime"],
        "randomness": "0cf05803c72d06e78011",
        "uuid": "018eafc1-8435-0cf0-5803-c72d06e78011",
        "hex": "018eafc184350cf05803c72d06e78011",
    }
    when = datetime.fromisoformat(first["datetime"].replace("Z", "+00:00"))
    assert when == datetime(2024, 4, 5, 19, 34, 38, 901000, tzinfo=timezone.utc)
    assert second["ulid"] == other
    assert second["timestamp_ms"] == (1 << 48) - 1
    assert second["datetime"] is None


# -- errors --------------------------------------------------------------------------------

BAD_ARGS: list[tuple[list[str], str]] = [
    (["inspect", "nope"], "a ULID is 26 characters, got 4"),  # too short
    (["inspect", WORKED[:-1] + "U"], "invalid character 'U' at position 25"),  # U not Crockford
    (["inspect", "8" + WORKED[1:]], "first character must be 0-7"),  # over 128 bits
    (["inspect", "--json", WORKED[:-1] + "\u0663"], "position 25"),  # Arabic-Indic digit
    (["new", "-n", "0"], "-n must be at least 1, got 0"),  # nothing to make
    (["new", "-n", "-3"], "-n must be at least 1, got -3"),  # negative count
    (["new", "-n", "many"], "invalid int value: 'many'"),  # not a number
    (["new", "--at", "2024-04-05T19:34:38"], "e.g. --at 2024-04-05T19:34:38Z"),  # no zone
    (["new", "--at", "yesterday"], "not an ISO 8601 time or epoch milliseconds"),  # prose
    (["new", "--at", "\u0661\u0662\u0663"], "not an ISO 8601 time"),  # Arabic-Indic digits
    (["new", "--at", "1969-12-31T23:59:59Z"], "59Z: datetime 1969-12-31T23:59:59+00:00 is before"),
    (["new", "--at", str(1 << 48)], "outside 0 .. 2**48 - 1"),  # past 48 bits
    (["new", "--format", "base64"], "invalid choice: 'base64'"),  # unknown format
    (["inspect"], "the following arguments are required: ID"),  # nothing to inspect
    (["new", "--bogus"], "unrecognized arguments: --bogus"),  # unknown option
    (["frobnicate"], "invalid choice: 'frobnicate'"),  # unknown command
]


@pytest.mark.parametrize(("args", "message"), BAD_ARGS)
def test_invalid_input_is_status_2_with_one_line_error(args: list[str], message: str) -> None:
    result = main(args)
    assert result.status == 2
    assert result.stdout == ""
    assert result.stderr.startswith("sqlalchemy-ulid: error: ")
    assert message in result.stderr
    assert result.stderr.count("\n") == 1
    assert result.stderr.endswith("\n")


# The same through the real entry point, for a sample of the table; the
# processes run side by side because each one pays for its own start-up.
SUBPROCESS_BAD_ARGS: list[tuple[list[str], str]] = [
    (["inspect", WORKED[:-1] + "U"], "invalid character 'U' at position 25"),  # U not Crockford
    (["new", "-n", "0"], "-n must be at least 1, got 0"),  # nothing to make
    (["new", "--at", "2024-04-05T19:34:38"], "--at 2024-04-05T19:34:38Z"),  # no zone
]


def test_invalid_input_in_subprocesses() -> None:
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "sqlalchemy_ulid", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        for args, _ in SUBPROCESS_BAD_ARGS
    ]
    for process, (args, message) in zip(processes, SUBPROCESS_BAD_ARGS, strict=True):
        stdout, stderr = process.communicate(timeout=60)
        assert process.returncode == 2, args
        assert stdout == "", args
        assert stderr.startswith("sqlalchemy-ulid: error: "), args
        assert message in stderr, args
        assert stderr.count("\n") == 1, args


def test_console_script_reports_errors_too() -> None:
    if not SCRIPT.exists():
        pytest.fail(f"console script not installed at {SCRIPT}")
    done = run("new", "-n", "0", script=True)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "sqlalchemy-ulid: error: -n must be at least 1, got 0\n"


def test_help_in_a_subprocess() -> None:
    done = run("--help")
    assert done.returncode == 0
    assert done.stderr == ""
    assert done.stdout.startswith("usage: sqlalchemy-ulid")
    assert "inspect" in done.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--help"], "usage: sqlalchemy-ulid [-h]"),
        (["-h"], "usage: sqlalchemy-ulid [-h]"),
        (["new", "--help"], "--format {canonical,hex,uuid}"),
        (["inspect", "-h"], "--json"),
    ],
)
def test_help(args: list[str], expected: str) -> None:
    result = main(args)
    assert (result.status, result.stderr) == (0, "")
    assert result.stdout.startswith("usage: sqlalchemy-ulid")
    assert expected in result.stdout


def test_a_bare_call_prints_usage_and_the_commands(cli: bool) -> None:
    done = run(script=cli)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("usage: sqlalchemy-ulid")
    assert "new" in done.stderr
    assert "inspect" in done.stderr
    assert main([]) == Result(2, "", done.stderr)


@pytest.mark.parametrize("command", [None, "new", "inspect"])
def test_every_option_and_argument_has_help(command: str | None) -> None:
    from sqlalchemy_ulid._cli import _parser

    parser = _parser()
    if command:
        parser = next(
            action.choices[command]
            for action in parser._actions
            if isinstance(action.choices, dict)
        )
    for action in parser._actions:
        assert action.help, (command, action.dest)


def test_inspect_shows_the_good_ulids_and_names_each_bad_one(cli: bool) -> None:
    over = "8" + WORKED[1:]
    done = run("inspect", WORKED, "hello", WORKED.lower(), over, script=cli)
    assert done.returncode == 2
    assert done.stdout.count(f"ulid          {WORKED}") == 2  # both good ones shown
    assert done.stderr.splitlines() == [
        "sqlalchemy-ulid: error: argument 2 'hello': a ULID is 26 characters, got 5",
        f"sqlalchemy-ulid: error: argument 4 '{over}': first character must be 0-7, "
        "got '8': the value would exceed 128 bits",
    ]
    as_json = main(["inspect", "--json", "nope", WORKED])
    assert as_json.status == 2
    assert [json.loads(line)["ulid"] for line in as_json.stdout.splitlines()] == [WORKED]
    assert as_json.stderr.startswith("sqlalchemy-ulid: error: argument 1 'nope': ")


def test_long_bad_arguments_are_shortened_in_the_error() -> None:
    result = main(["inspect", "X" * 200])
    assert result.status == 2
    assert "'" + "X" * 37 + "...'" in result.stderr
    assert len(result.stderr) < 200


# -- main() is pure -------------------------------------------------------------------------


def test_main_returns_a_result_and_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    result = main(["new", "-n", "2", "--at", str(WORKED_MS)])
    assert isinstance(result, Result)
    assert result.status == 0
    assert [ULID(line).timestamp_ms for line in result.stdout.splitlines()] == [WORKED_MS] * 2
    assert result.stderr == ""

    result = main(["inspect", "--json", WORKED])
    assert (result.status, result.stderr) == (0, "")
    assert json.loads(result.stdout)["ulid"] == WORKED

    assert main(["inspect", "nope"]) == Result(
        2, "", "sqlalchemy-ulid: error: argument 1 'nope': a ULID is 26 characters, got 4\n"
    )
    assert main(["new", "-n", "0"]).status == 2
    assert main(["bogus"]).status == 2

    helped = main(["--help"])
    assert helped.status == 0
    assert helped.stdout.startswith("usage: sqlalchemy-ulid")
    assert "inspect" in helped.stdout
    assert "--format" in main(["new", "--help"]).stdout

    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "")


# -- strict -n and streamed output (issue 10, item 9) --------------------------------------

STRICT_COUNTS = [
    "\u0663",  # Arabic-Indic three: int() takes it
    "1_000",  # underscores: int() takes them
    " 2 ",  # spaces: int() strips them
    "+2",  # a sign is not a count
    "2.0",  # not a whole number
]


@pytest.mark.parametrize("text", STRICT_COUNTS)
def test_new_count_is_ascii_digits_only(text: str) -> None:
    result = main(["new", "-n", text])
    assert result.status == 2
    assert result.stdout == ""
    assert f"argument -n: invalid int value: {text!r}" in result.stderr


def test_new_streams_its_output() -> None:
    # A count far too large to build in memory: the first line still comes at once.
    process = subprocess.Popen(
        [sys.executable, "-m", "sqlalchemy_ulid", "new", "-n", "1000000000000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], 20)
        assert ready, "no output within 20 s: the output is not streamed"
        first = process.stdout.readline()
        assert ULID(first.strip()) is not None
    finally:
        process.kill()
        process.communicate(timeout=30)


_PEAK_MEMORY = """
import atexit, resource, sys
atexit.register(lambda: sys.stderr.write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)))
sys.argv = ["sqlalchemy-ulid", "new", "-n", sys.argv[1]]
from sqlalchemy_ulid._cli import run
run()
"""


def test_new_memory_stays_flat() -> None:
    peaks = []
    for count in ("1", "250000"):
        done = subprocess.run(
            [sys.executable, "-c", _PEAK_MEMORY, count],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=True,
        )
        peaks.append(int(done.stderr.strip()))  # KiB on Linux
    # Building 250,000 lines in memory costs over 30 MB (a list of them; 6.8 MB
    # for their text alone); streaming, under 1 MB. The bound is 20 bytes a
    # line, as it was with a million lines and 20 MB.
    assert peaks[1] - peaks[0] < 5_000, peaks


def test_new_into_a_closed_pipe_stops_quietly() -> None:
    done = subprocess.run(
        f"{sys.executable} -m sqlalchemy_ulid new -n 200000 | head -n 1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert len(done.stdout.splitlines()) == 1
    assert "Traceback" not in done.stderr
