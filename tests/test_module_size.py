"""No module in ``src/`` is over 450 lines (issue 32: smaller rooms).

A module that grows past the limit has two jobs: split the second one into a
module of its own (as ``_comparator.py`` left ``_types.py``, or the per-database
SQL left ``_settle.py`` for the rows in ``_dialects/``).
"""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "sqlalchemy_ulid"
MAX_LINES = 450


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_is_over_the_limit() -> None:
    modules = sorted(SRC.rglob("*.py"))
    assert len(modules) > 100  # the whole package, its subpackages included
    over = {
        path.relative_to(SRC).as_posix(): n for path in modules if (n := _lines(path)) > MAX_LINES
    }
    assert over == {}, f"modules over {MAX_LINES} lines (split them): {over}"


def test_the_count_is_of_lines(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("a = 1\n" * MAX_LINES + "b = 2", encoding="utf-8")
    assert _lines(sample) == MAX_LINES + 1
