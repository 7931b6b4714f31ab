"""Nothing outside ``_dialects/`` asks which database it is (issue 32).

Per-database facts are fields of the database's row (``_dialects/<db>.py``);
code elsewhere reads the row's fields and capabilities. This test reads
``src/`` and fails on a branch on a database's name: a comparison with a
dialect's ``.name`` (``==``, ``in``, a ``match``, a string method on it), or
a database name used as a comparison operand, a dict key or a subscript. A
registry looked up by the name (``_ROWS.get(dialect.name)``, the migration
engine's ``database_for``) is dispatch, not a branch: each database's code
stays in its own module.
The migration layer (``alembic/``) still has some: the migration engine moves
them to ``alembic/<database>/``. Until then each of its modules keeps exactly
the count listed in ``KNOWN_MIGRATION_BRANCHES``: a new branch fails, and so
does a removed one until its count in the list is lowered to match.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from _source import parse

SRC = Path(__file__).resolve().parent.parent / "src" / "sqlalchemy_ulid"

DATABASES = frozenset(
    {"postgresql", "mysql", "mariadb", "sqlite", "mssql", "oracle", "cockroachdb"}
)

# The migration layer's branches, per module path (as measured at d8f03bb).
# Exact: lower a number (or drop the entry) when a branch goes; never raise one.
# Empty since alembic/_inspect.py asks the per-database catalogs (issue 32).
KNOWN_MIGRATION_BRANCHES: dict[str, int] = {}


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


def _asks_the_name(node: ast.AST) -> bool:
    """A method of the name itself: ``dialect.name.startswith("mysql")`` and the like."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and _is_dialect_name(node.func.value)
    )


def _is_branch(node: ast.AST) -> bool:
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        return any(_is_database_name(o) or _is_dialect_name(o) for o in operands)
    if isinstance(node, ast.Dict):
        return any(key is not None and _is_database_name(key) for key in node.keys)
    if isinstance(node, ast.Subscript):
        return _is_database_name(node.slice)
    if isinstance(node, ast.Match):
        return _is_dialect_name(node.subject)
    return _asks_the_name(node)


def branches(tree: ast.AST) -> list[int]:
    """Line numbers of the branches on a database's name in a module."""
    return [getattr(node, "lineno", 0) for node in ast.walk(tree) if _is_branch(node)]


def _count() -> dict[str, list[int]]:
    counts = {}
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if relative.startswith("_dialects/"):
            continue
        found = branches(parse(path.read_text(encoding="utf-8")))
        if found:
            counts[relative] = found
    return counts


def test_no_branch_on_a_database_name_outside_dialects() -> None:
    counts = _count()
    outside = {f: lines for f, lines in counts.items() if not f.startswith("alembic/")}
    assert outside == {}, f"branches on a database's name (use the dialect row): {outside}"


def test_the_migration_layer_keeps_exactly_its_listed_branches() -> None:
    counts = _count()
    migration = {f: len(lines) for f, lines in counts.items() if f.startswith("alembic/")}
    grown = {
        f: (n, KNOWN_MIGRATION_BRANCHES.get(f, 0))
        for f, n in migration.items()
        if n > KNOWN_MIGRATION_BRANCHES.get(f, 0)
    }
    assert grown == {}, (
        "new branches on a database's name in alembic/ (found, listed): "
        f"{grown}; put the fact in the database's row or in alembic/<database>/ instead"
    )
    shrunk = {
        f: (migration.get(f, 0), listed)
        for f, listed in KNOWN_MIGRATION_BRANCHES.items()
        if migration.get(f, 0) < listed
    }
    assert shrunk == {}, (
        "fewer branches than listed (found, listed): "
        f"{shrunk}; lower these counts in KNOWN_MIGRATION_BRANCHES (drop an entry at 0)"
    )


def test_the_list_names_only_migration_modules() -> None:
    assert all(f.startswith("alembic/") for f in KNOWN_MIGRATION_BRANCHES)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("if dialect.name == 'sqlite': pass", 1),
        ("if engine.dialect.name in ('mysql', 'mariadb'): pass", 1),
        ("x = name != 'postgresql'", 1),
        ("TABLE = {'postgresql': 1, 'mysql': 2}", 1),
        ("x = TABLE['mysql']", 1),
        ("if self.dialect_name == other: pass", 1),
        ("if dialect.name not in ('mysql', 'mariadb'): pass", 1),
        ("x = dialect.name.startswith('mysql')", 1),
        ("match dialect.name:\n    case _: pass", 1),
        # not branches: a message naming the dialect, a row's field, a call
        ("raise ValueError(f'not supported on {dialect.name}')", 0),
        ("if row.settle is None: pass", 0),
        ("compiles(InArray, 'postgresql')", 0),
        ("if table.name == 'x': pass", 0),
        ("x = stmt.with_hint(t, 'h', dialect_name='*')", 0),
        ("x = options.get(name)", 0),
        # a registry looked up by name: dispatch to the database's own module
        ("x = _REGISTRY.get(dialect.name)", 0),
    ],
)
def test_the_check_finds_what_it_should(source: str, expected: int) -> None:
    assert len(branches(parse(source))) == expected
