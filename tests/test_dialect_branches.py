"""Nothing outside ``_dialects/`` asks which database it is (issue 32).

Per-database facts are fields of the database's row (``_dialects/<db>.py``);
code elsewhere reads the row's fields and capabilities. This test reads
``src/`` and fails on a branch on a database's name: a comparison with a
dialect's ``.name``, or a database name used as a comparison operand, a dict
key or a subscript. The migration layer (``alembic/``) still has some: the
migration engine moves them to ``alembic/<database>/``; until then each of its
files may keep at most the branches it has now, so the count only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "sqlalchemy_ulid"

DATABASES = frozenset(
    {"postgresql", "mysql", "mariadb", "sqlite", "mssql", "oracle", "cockroachdb"}
)

# The migration layer's known branches, per file (the migration engine's work
# removes them; lower a number when a branch goes, never raise one).
KNOWN_MIGRATION_BRANCHES = {
    "alembic/_inspect.py": 3,
    "alembic/_offline.py": 4,
    "alembic/_online.py": 4,
    "alembic/_primary_key/_offline.py": 2,
    "alembic/_storage/_op.py": 2,
}


def _is_database_name(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in DATABASES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_database_name(element) for element in node.elts)
    return False


def _is_dialect_name(node: ast.AST) -> bool:
    """``dialect.name``, ``engine.dialect.name``, ``self.dialect_name``..."""
    text = ast.unparse(node)
    return text.endswith(("dialect.name", "dialect_name"))


def branches(tree: ast.AST) -> list[int]:
    """Line numbers of the branches on a database's name in a module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_is_database_name(o) or _is_dialect_name(o) for o in operands):
                found.append(node.lineno)
        elif isinstance(node, ast.Dict):
            if any(key is not None and _is_database_name(key) for key in node.keys):
                found.append(node.lineno)
        elif isinstance(node, ast.Subscript) and _is_database_name(node.slice):
            found.append(node.lineno)
    return found


def _count() -> dict[str, list[int]]:
    counts = {}
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if relative.startswith("_dialects/"):
            continue
        found = branches(ast.parse(path.read_text(encoding="utf-8")))
        if found:
            counts[relative] = found
    return counts


def test_no_branch_on_a_database_name_outside_dialects() -> None:
    counts = _count()
    outside = {f: lines for f, lines in counts.items() if not f.startswith("alembic/")}
    assert outside == {}, f"branches on a database's name (use the dialect row): {outside}"


def test_the_migration_layer_only_loses_branches() -> None:
    counts = _count()
    migration = {f: len(lines) for f, lines in counts.items() if f.startswith("alembic/")}
    grown = {
        f: (n, KNOWN_MIGRATION_BRANCHES.get(f, 0))
        for f, n in migration.items()
        if n > KNOWN_MIGRATION_BRANCHES.get(f, 0)
    }
    assert grown == {}, f"new branches on a database's name in alembic/ (now, allowed): {grown}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("if dialect.name == 'sqlite': pass", 1),
        ("if engine.dialect.name in ('mysql', 'mariadb'): pass", 1),
        ("x = name != 'postgresql'", 1),
        ("TABLE = {'postgresql': 1, 'mysql': 2}", 1),
        ("x = TABLE['mysql']", 1),
        ("if self.dialect_name == other: pass", 1),
        # not branches: a message naming the dialect, a row's field, a call
        ("raise ValueError(f'not supported on {dialect.name}')", 0),
        ("if row.settle is None: pass", 0),
        ("compiles(InArray, 'postgresql')", 0),
        ("if table.name == 'x': pass", 0),
    ],
)
def test_the_check_finds_what_it_should(source: str, expected: int) -> None:
    assert len(branches(ast.parse(source))) == expected
