"""No import circles among the package's modules but the known ones (issue 32).

The import graph is read from ``src/`` with :mod:`ast` (nothing is imported):
an edge for every ``import``/``from ... import`` of a package module, at module
level or inside a function, but not under ``if TYPE_CHECKING:`` (never run).
``from .pkg import name`` points at the module ``pkg.name`` when there is one,
else at ``pkg``. A circle is a strongly connected group of two or more modules.

Allowed: exactly the two circles that are lazy by design (the issue names
them): the value type imports its integration only when it is first used,
inside a function (a Pydantic schema, the ORM and bulk helpers, the IN-list
check), so no import order can trip on them. Nothing else: no circle inside
``alembic/`` (the storage conversion's group went with its hand-written
scripts), and none between the typed ids and their Pydantic glue (the glue is
handed the class, its ``coerce`` and its error instead of importing them).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from _source import parse

SRC = Path(__file__).resolve().parent.parent / "src" / "sqlalchemy_ulid"

#: Circles whose closing import sits inside a function (lazy by design): the only ones.
LAZY_CIRCLES = [
    frozenset({"_types", "_orm", "_bulk", "_in_list"}),
    frozenset({"_ulid", "_pydantic"}),
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(path): path for path in sorted(SRC.rglob("*.py"))}


def _package(module: str) -> str:
    is_package = MODULES[module].name == "__init__.py"
    return module if is_package else module.rpartition(".")[0]


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:``."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            for child in node.body:
                hidden.update(id(n) for n in ast.walk(child))
    return hidden


def _targets(node: ast.AST, package: str) -> Iterator[str]:
    """The package modules an import statement in ``package`` loads."""
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = package.split(".") if package else []
            base = base[: len(base) - node.level + 1]
            target = ".".join([*base, *([node.module] if node.module else [])])
        elif node.module and node.module.split(".")[0] == "sqlalchemy_ulid":
            target = node.module.removeprefix("sqlalchemy_ulid").lstrip(".")
        else:
            return
        for alias in node.names:
            sub = f"{target}.{alias.name}" if target else alias.name
            yield sub if sub in MODULES else target
    elif isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.split(".")[0] == "sqlalchemy_ulid":
                yield alias.name.removeprefix("sqlalchemy_ulid").lstrip(".")


def import_graph(*, lazy: bool = True) -> dict[str, set[str]]:
    """Module -> the package modules it imports (``lazy=False``: at module level only)."""
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = parse(path.read_text(encoding="utf-8"))
        hidden = _type_checking_only(tree)
        nodes = ast.walk(tree) if lazy else iter(tree.body)
        found = {
            target
            for node in nodes
            if id(node) not in hidden
            for target in _targets(node, _package(module))
        }
        graph[module] = {target for target in found if target in MODULES} - {module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected groups of two or more modules (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(frozenset(group))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_only_the_known_circles() -> None:
    new = [sorted(c) for c in circles(import_graph()) if not any(c <= a for a in LAZY_CIRCLES)]
    assert new == [], f"new import circles (import lazily or move the shared code down): {new}"


def test_the_typed_ids_and_their_pydantic_glue_are_no_circle() -> None:
    assert "_typeid" not in import_graph()["_typeid_pydantic"]


def test_the_lazy_circles_close_only_inside_functions() -> None:
    at_import = circles(import_graph(lazy=False))
    lazy = [sorted(c) for c in at_import if any(c & group for group in LAZY_CIRCLES)]
    assert lazy == [], f"a lazy circle is now closed at module level: {lazy}"


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [{"a", "b"}]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}, [{"a", "b", "c"}]),
        ({"a": {"b"}, "b": set()}, []),  # a chain is no circle
        ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [{"a", "b"}, {"c", "d"}]),
    ],
)
def test_circles_finds_what_it_should(graph: dict[str, set[str]], expected: list[set[str]]) -> None:
    assert sorted(map(sorted, circles(graph))) == sorted(map(sorted, expected))


def test_the_graph_sees_relative_and_lazy_imports() -> None:
    graph = import_graph()
    assert "_ulid" in graph["_types"]  # from ._ulid import ... (module level)
    assert "_orm" in graph["_types"]  # from . import _bulk, _orm (in a function)
    assert "_pydantic" not in import_graph(lazy=False)["_ulid"]  # only in a function
    assert "_paging" in graph["_feed._plan"]  # from .._paging import ... (a package)
