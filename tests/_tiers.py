"""Which backends a test reaches, for ``--only-backends``.

``--only-backends=postgresql`` (or ``SQLALCHEMY_ULID_ONLY_BACKENDS``) keeps
only the tests that reach one of the named backends, and deselects the rest:
CI's pg18 job runs the suite against PostgreSQL 18 that way, since a test
that never reaches PostgreSQL runs the same in the main job. It narrows the
selection only: every backend the run requires is still required, and a
kept test that also uses a missing server still fails.

What a test reaches, first match wins:

1. its parameters: a test run once per backend (the ``backend`` fixture, or
   any fixture or ``parametrize`` whose value is a backend name) reaches the
   backend of that run;
2. a ``backends`` marker: ``@pytest.mark.backends("mysql")``;
3. the ``backends`` fixture: a test (or a fixture it uses) that takes it and
   only ever subscripts it with a name, ``backends["mysql"]``, reaches those
   backends; any other use (``backends[name]``, passing it on) could reach
   any of them, so the test is kept whatever is asked;
4. neither: the test uses no database, and is deselected.
"""

from __future__ import annotations

import ast
import inspect
import os
import textwrap
from collections.abc import Callable, Iterable
from typing import Any

import pytest

BACKENDS = ("sqlite", "postgresql", "mysql")
ENVIRONMENT = "SQLALCHEMY_ULID_ONLY_BACKENDS"
_ALL = frozenset(BACKENDS)
_NONE: frozenset[str] = frozenset()


def add_option(group: Any) -> None:
    group.addoption(
        "--only-backends",
        default=None,
        help=(
            "comma-separated backends: run only the tests that reach one of them "
            f"(deselect the others and those using no database); also {ENVIRONMENT}"
        ),
    )


def wanted(config: pytest.Config) -> frozenset[str] | None:
    """The backends asked for, or None when the option is not given."""
    raw = config.getoption("--only-backends") or os.environ.get(ENVIRONMENT, "")
    names = frozenset(part.strip() for part in raw.split(",") if part.strip())
    if not names:
        return None
    unknown = sorted(names - _ALL)
    if unknown:
        raise pytest.UsageError(
            f"--only-backends: unknown backend(s) {', '.join(unknown)}; "
            f"choose from {', '.join(BACKENDS)}"
        )
    return names


def select(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the items that reach none of the backends asked for (if any)."""
    names = wanted(config)
    if names is None:
        return
    kept, dropped = [], []
    for item in items:
        (kept if reached(item) & names else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def reached(item: pytest.Item) -> frozenset[str]:
    """The backends ``item`` may reach (all three when that cannot be told)."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        named = frozenset(
            value for value in callspec.params.values() if isinstance(value, str) and value in _ALL
        )
        if named:
            return named
    marker = item.get_closest_marker("backends")
    if marker is not None and marker.args:
        return frozenset(marker.args)
    if "backends" not in getattr(item, "fixturenames", ()):
        return _NONE
    functions: list[Callable[..., Any]] = []
    function = getattr(item, "function", None)
    if function is not None and "backends" in _argnames(function):
        functions.append(function)
    fixtureinfo = getattr(item, "_fixtureinfo", None)
    definitions = fixtureinfo.name2fixturedefs if fixtureinfo is not None else {}
    for name, fixturedefs in definitions.items():
        if name != "backends" and "backends" in fixturedefs[-1].argnames:
            functions.append(fixturedefs[-1].func)
    found: set[str] = set()
    for candidate in functions:
        subscripts = _subscripts(candidate)
        if subscripts is None:
            return _ALL
        found |= subscripts
    return frozenset(found) or _ALL


def _argnames(function: Callable[..., Any]) -> Iterable[str]:
    try:
        return inspect.signature(function).parameters
    except (TypeError, ValueError):
        return ()


def _subscripts(function: Callable[..., Any]) -> set[str] | None:
    """The names ``function`` subscripts ``backends`` with, or None for any other use."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return None
    subscripted: set[int] = set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == "backends"
        ):
            key = node.slice
            if not (isinstance(key, ast.Constant) and key.value in _ALL):
                return None
            subscripted.add(id(node.value))
            names.add(key.value)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "backends" and id(node) not in subscripted:
            return None
    return names
