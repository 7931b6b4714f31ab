"""The command line: ``new`` and ``inspect``.

:func:`main` is pure: it returns the exit status and the text for stdout and
stderr, and prints nothing. Only :func:`run`, the entry point, prints.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from . import __version__
from ._codec import InvalidULID
from ._generator import MonotonicGenerator
from ._time import to_ms
from ._ulid import ULID

if TYPE_CHECKING:
    from ._typeid import TypeID

__all__ = ["Result", "main", "run"]

_FORMATS: dict[str, Callable[[ULID], str]] = {
    "canonical": str,
    "uuid": lambda u: str(u.to_uuid()),
    "hex": lambda u: u.hex,
}


@dataclass(frozen=True)
class Result:
    """What a command produced: exit status, stdout text, stderr text."""

    status: int
    stdout: str = ""
    stderr: str = ""


class _UsageError(Exception):
    pass


class _HelpRequested(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class _Parser(argparse.ArgumentParser):
    # argparse prints and exits on a usage error and on --help; we want a
    # value back, so both raise and main() turns them into a Result.
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(message)

    def print_help(self, file: object = None) -> None:
        raise _HelpRequested(self.format_help())


class _Version(argparse.Action):
    # argparse's own "version" action prints and exits; this one answers
    # through main() like --help does.
    def __call__(self, *args: object, **kwargs: object) -> None:
        raise _HelpRequested(f"sqlalchemy-ulid {__version__}\n")


def _parser() -> _Parser:
    parser = _Parser(
        prog="sqlalchemy-ulid",
        description="Generate and inspect ULIDs.",
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version and exit")
    commands = parser.add_subparsers(
        dest="command",
        required=True,
        parser_class=_Parser,
        metavar="COMMAND",
        help="new or inspect; COMMAND --help shows its options",
    )
    new = commands.add_parser("new", help="print new monotonic ULIDs, one per line")
    new.add_argument("-n", type=_count, default=1, metavar="N", help="how many (default 1)")
    new.add_argument(
        "--at",
        metavar="WHEN",
        help="timestamp: ISO 8601 with a zone (2024-04-05T19:34:38.901Z) or epoch milliseconds",
    )
    new.add_argument(
        "--format",
        choices=sorted(_FORMATS),
        default="canonical",
        help="canonical: 26 characters of Crockford base32 (the default); "
        "uuid: the same 128 bits as a UUID; hex: 32 lower-case hex digits",
    )
    inspect = commands.add_parser("inspect", help="decode ULIDs and typed ids (TypeIDs)")
    inspect.add_argument(
        "ulids",
        nargs="+",
        metavar="ID",
        help="ULIDs in any case, or typed ids such as user_01h455vb4pex5vsknk084sn02q; "
        "each bad one is reported, the good ones are still shown",
    )
    inspect.add_argument("--json", action="store_true", help="one JSON object per line")
    return parser


# ASCII digits only: str.isdigit() and int() also take Arabic-Indic and other digits.
_EPOCH_MS = re.compile(r"-?[0-9]+")
# Lines written per chunk by the entry point: output streams, memory stays flat.
_CHUNK_LINES = 4096


def _count(text: str) -> int:
    # Strict: int() would also take "1_000", " 2 " and non-ASCII digits.
    if not _EPOCH_MS.fullmatch(text):
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}")
    return int(text)


def _parse_when(text: str) -> int:
    if _EPOCH_MS.fullmatch(text):
        return to_ms(int(text))
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"--at: not an ISO 8601 time or epoch milliseconds: {text!r}") from None
    if when.tzinfo is None:
        # Advice for a shell, not Python: the zone goes on the argument itself.
        raise ValueError(
            f"--at {text}: naive datetime, no time zone; add one, "
            f"e.g. --at {text}Z (UTC) or --at {text}+02:00"
        )
    try:
        return to_ms(when)
    except ValueError as exc:
        raise ValueError(f"--at {text}: {exc}") from None


def _new_chunks(count: int, at: str | None, fmt: str) -> Iterator[str]:
    """Check the arguments now; return the output as chunks of lines, made lazily."""
    if count < 1:
        raise ValueError(f"-n must be at least 1, got {count}")
    if at is None:
        generator = MonotonicGenerator()
    else:
        ms = _parse_when(at)
        generator = MonotonicGenerator(clock=lambda: ms)
    render = _FORMATS[fmt]

    def chunks() -> Iterator[str]:
        for start in range(0, count, _CHUNK_LINES):
            lines = min(_CHUNK_LINES, count - start)
            yield "".join([render(generator()) + "\n" for _ in range(lines)])

    return chunks()


def _new(count: int, at: str | None, fmt: str) -> Result:
    return Result(0, "".join(_new_chunks(count, at, fmt)))


def describe(ulid: ULID) -> dict[str, object]:
    """Return the fields ``inspect`` shows for one ULID."""
    try:
        when: str | None = ulid.datetime.isoformat().replace("+00:00", "Z")
    except OverflowError:
        when = None
    return {
        "ulid": str(ulid),
        "timestamp_ms": ulid.timestamp_ms,
        "datetime": when,
        "randomness": ulid.randomness.hex(),
        "uuid": str(ulid.to_uuid()),
        "hex": ulid.hex,
    }


def describe_typeid(typeid: TypeID) -> dict[str, object]:
    """Return the fields ``inspect`` shows for one typed id."""
    value = typeid.uuid
    when: str | None = None
    if value.version == 7 and value.variant == uuid.RFC_4122:
        # Only a UUIDv7 says its time; other versions' first bits are not one.
        try:
            when = typeid.datetime.isoformat().replace("+00:00", "Z")
        except OverflowError:
            when = None
    return {
        "typeid": str(typeid),
        "prefix": typeid.prefix,
        "suffix": typeid.suffix,
        "uuid": str(value),
        "version": value.version if value.variant == uuid.RFC_4122 else None,
        "timestamp_ms": typeid.int >> 80 if when is not None else None,
        "datetime": when,
        "hex": value.hex,
    }


def _describe(text: str) -> dict[str, object]:
    # An underscore names a typed id (a ULID has none); a prefix-less typed
    # id is 26 lowercase characters, which read as the same 128 bits as a ULID.
    if "_" in text:
        from ._typeid import TypeID

        return describe_typeid(TypeID.parse(text))
    return describe(ULID(text))


def _shown(text: str) -> str:
    # Long garbage stays readable in the error line.
    return repr(text) if len(text) <= 40 else repr(text[:37] + "...")


def _inspect(texts: Sequence[str], as_json: bool) -> Result:
    """Show every good ULID or typed id; name each bad one on stderr, and exit 2 if any was bad."""
    shown: list[str] = []
    errors: list[str] = []
    for position, text in enumerate(texts, start=1):
        try:
            fields = _describe(text)
        except InvalidULID as exc:  # InvalidTypeID too
            errors.append(f"sqlalchemy-ulid: error: argument {position} {_shown(text)}: {exc}\n")
            continue
        if as_json:
            shown.append(json.dumps(fields) + "\n")
            continue
        width = max(map(len, fields))
        shown.append(
            "".join(
                f"{key:<{width}}  {'-' if value is None else value}\n"
                for key, value in fields.items()
            )
        )
    stdout = "".join(shown) if as_json else "\n".join(shown)
    return Result(2 if errors else 0, stdout, "".join(errors))


def main(argv: Sequence[str] | None = None) -> Result:
    r"""Run the command line on ``argv`` and return what it produced.

    Example:
        >>> main(["inspect", "--json", "01HTQW311N1KR5G0Y75M3EF00H"]).status
        0
        >>> main(["inspect", "nope"]).stderr
        "sqlalchemy-ulid: error: argument 1 'nope': a ULID is 26 characters, got 4\n"
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser()
    if not argv:
        # A bare call: show what there is to run, as a usage error.
        return Result(2, "", parser.format_help())
    try:
        args = parser.parse_args(argv)
        if args.command == "new":
            return _new(args.n, args.at, args.format)
        return _inspect(args.ulids, args.json)
    except _HelpRequested as help_requested:
        return Result(0, help_requested.text)
    except (_UsageError, InvalidULID, ValueError, TypeError) as exc:
        return Result(2, "", f"sqlalchemy-ulid: error: {exc}\n")


def _streamed(argv: Sequence[str]) -> Iterator[str] | None:
    """The output of a valid ``new`` command as it is made; None for anything else."""
    try:
        args = _parser().parse_args(list(argv))
        if args.command == "new":
            return _new_chunks(args.n, args.at, args.format)
    except (_HelpRequested, _UsageError, ValueError, TypeError):
        pass  # main() reports it
    return None


def run() -> None:
    """Print what :func:`main` returns and exit with its status (the entry point).

    ``new`` output is written in chunks as it is made, so ``-n 100000000``
    starts at once and runs in constant memory.
    """
    chunks = _streamed(sys.argv[1:])
    if chunks is None:
        result = main()
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        sys.exit(result.status)
    try:
        for chunk in chunks:
            sys.stdout.write(chunk)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, as other tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)
    sys.exit(0)
