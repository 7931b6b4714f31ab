"""Cutting a psql or mariadb client script at its statement boundaries.

A small splitter, for the scripts the ops write: psql scripts (quotes,
dollar quotes, comments, backslash commands such as ``\\gexec``) and
mariadb client scripts (``DELIMITER`` lines, quotes, comments). The cut
points are drawn by a seeded generator (``SQLALCHEMY_ULID_EQUIVALENCE_SEED``,
``SQLALCHEMY_ULID_EQUIVALENCE_CUTS``), printed by the tests for reproduction.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Iterator

#: The seed of the cut points (printed by every test that uses it, for reproduction).
SEED = int(os.environ.get("SQLALCHEMY_ULID_EQUIVALENCE_SEED", "31"))
#: At most this many cut points per op and database.
CUTS = int(os.environ.get("SQLALCHEMY_ULID_EQUIVALENCE_CUTS", "8"))


def boundaries(script: str, client: str) -> list[int]:
    """The offsets just after each statement of ``script`` (a psql or mariadb client script).

    Each offset is at the end of the line the statement ends on; ``script[:offset]``
    is the script stopped after that statement. Client commands other than
    ``\\gexec`` (``\\set``, ``DELIMITER``) are not boundaries of their own.
    """
    split = _psql_ends if client == "postgresql" else _mariadb_ends
    ends = []
    for end in split(script):
        line_end = script.find("\n", end)
        ends.append(len(script) if line_end < 0 else line_end + 1)
    return sorted(set(ends))


def cut_points(script: str, client: str, seed: int = SEED, cuts: int = CUTS) -> list[int]:
    """At most ``cuts`` boundaries (not the last), chosen by ``seed``: the statement counts."""
    inner = boundaries(script, client)[:-1]
    chosen = random.Random(seed).sample(range(len(inner)), min(cuts, len(inner)))
    return sorted(chosen)


def cut(script: str, client: str, k: int) -> str:
    """``script`` stopped after its statement ``k`` (0-based)."""
    return script[: boundaries(script, client)[k]]


def _psql_ends(script: str) -> Iterator[int]:
    i, n, has_sql = 0, len(script), False
    while i < n:
        ch = script[i]
        if script.startswith("--", i):
            i = _line_end(script, i)
        elif script.startswith("/*", i):
            i = script.find("*/", i + 2) % (n + 1) + 2
        elif ch == "'":
            escapes = i > 0 and script[i - 1] in "eE"
            i = _quoted(script, i, "'", escapes)
            has_sql = True
        elif ch == '"':
            i = _quoted(script, i, '"', False)
            has_sql = True
        elif ch == "$" and (tag := re.match(r"\$([A-Za-z_]\w*)?\$", script[i:])):
            close = script.find(tag.group(0), i + len(tag.group(0)))
            i = (close if close >= 0 else n) + len(tag.group(0))
            has_sql = True
        elif ch == "\\":
            end = _line_end(script, i)
            if script.startswith("\\g", i):  # \g, \gexec, \gset: send the query buffer
                yield end - 1
                has_sql = False
            i = end
        elif ch == ";":
            if has_sql:
                yield i
            has_sql = False
            i += 1
        else:
            has_sql = has_sql or not ch.isspace()
            i += 1


def _mariadb_ends(script: str) -> Iterator[int]:
    i, n, has_sql, delimiter = 0, len(script), False, ";"
    while i < n:
        ch = script[i]
        at_line_start = i == 0 or script[i - 1] == "\n"
        if at_line_start and not has_sql and script[i : i + 10].upper() == "DELIMITER ":
            end = _line_end(script, i)
            delimiter = script[i + 10 : end].strip()
            i = end
        elif script.startswith("-- ", i) or ch == "#":
            i = _line_end(script, i)
        elif script.startswith("/*", i):
            i = script.find("*/", i + 2) % (n + 1) + 2
        elif ch in "'\"`":
            i = _quoted(script, i, ch, ch != "`")
            has_sql = True
        elif script.startswith(delimiter, i):
            if has_sql:
                yield i + len(delimiter) - 1
            has_sql = False
            i += len(delimiter)
        else:
            has_sql = has_sql or not ch.isspace()
            i += 1


def _line_end(script: str, i: int) -> int:
    end = script.find("\n", i)
    return len(script) if end < 0 else end + 1


def _quoted(script: str, i: int, quote: str, escapes: bool) -> int:
    """The offset after the quoted text starting at ``i`` (a doubled quote stays inside)."""
    j = i + 1
    while j < len(script):
        if escapes and script[j] == "\\":
            j += 2
        elif script[j] == quote:
            if script.startswith(quote * 2, j):
                j += 2
            else:
                return j + 1
        else:
            j += 1
    return j
