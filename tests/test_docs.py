"""Every ```python block in docs/*.md and README.md runs here.

How a page is run:

* The blocks of one page run in order, in one namespace, so a later block can
  use what an earlier one defined. The working directory is the repository
  root, as for a reader following the docs from a clone.
* By default a page runs once, with ``DATABASE_URL`` set to the suite's SQLite
  URL. Blocks that want a database write
  ``create_engine(os.environ.get("DATABASE_URL", "sqlite://"))``, which also
  works for a reader who copies the block.
* A page that should run on the servers too says so anywhere in its text::

      <!-- docs-test: backends=sqlite,postgresql,mysql -->

  It then runs once per listed backend (the conftest ``backend`` fixture, so a
  required backend that is missing fails), with ``DATABASE_URL`` set to it.
  Tables the page creates are dropped afterwards: those that appeared during
  the run and are named in the page (or its snippets), so a test running
  concurrently on the same database keeps its own tables.
* A page that needs third-party packages beyond the core test extra (the
  integrations in the ``tests-integrations`` extra) names their modules::

      <!-- docs-test: requires=advanced_alchemy,litestar -->

  and is skipped where one is missing (an environment without that extra,
  or SQLAlchemy older than those packages support, as at our floor).
* Markers on the line just before a fence apply to that block only:

      <!-- docs-test: only=postgresql -->     run only on these backends
      <!-- docs-test: skip=REASON -->         never run; REASON is required

  Keep skips rare: each one is a block that can drift from the code.
* A line ``--8<-- "path"`` inside a block (pymdownx.snippets) is replaced by
  the file at that path, relative to the repository root, as MkDocs does.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import _databases

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]

_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w+-]*)[^\n]*$")
_MARKER = re.compile(r"<!--\s*docs-test:\s*(?P<body>.*?)\s*-->")
_SNIPPET = re.compile(r'^\s*--8<--\s+"(?P<path>[^"]+)"\s*$')


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    source: str
    only: frozenset[str] | None = None
    skip: str | None = None


def _expand_snippets(source: str) -> str:
    lines = []
    for line in source.splitlines():
        match = _SNIPPET.match(line)
        lines.append((ROOT / match["path"]).read_text() if match else line)
    return "\n".join(lines) + "\n"


def requirements(page: Path) -> list[str]:
    """Return the third-party modules the page's blocks need."""
    names: list[str] = []
    for match in _MARKER.finditer(page.read_text()):
        key, _, value = match["body"].partition("=")
        if key == "requires":
            names += [name.strip() for name in value.split(",")]
    return names


def parse(page: Path) -> tuple[list[str], list[Block]]:
    """Return the page's backends and its python blocks."""
    text = page.read_text()
    backends = ["sqlite"]
    for match in _MARKER.finditer(text):
        key, _, value = match["body"].partition("=")
        if key == "backends":
            backends = [name.strip() for name in value.split(",")]
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, lang = opening["indent"], opening["lang"]
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            body.append(lines[j][len(indent) :])
            j += 1
        if lang == "python":
            block = Block(page, i + 1, _expand_snippets("\n".join(body)))
            previous = lines[i - 1].strip() if i else ""
            marker = _MARKER.fullmatch(previous)
            if marker:
                key, _, value = marker["body"].partition("=")
                if key == "skip":
                    assert value.strip(), f"{page.name}:{i + 1}: a skip needs a reason"
                    block.skip = value.strip()
                elif key == "only":
                    block.only = frozenset(name.strip() for name in value.split(","))
                else:
                    raise AssertionError(f"{page.name}:{i}: unknown docs-test marker {key!r}")
            blocks.append(block)
        i = j + 1
    return backends, blocks


def _cases() -> Iterator[object]:
    for page in PAGES:
        backends, blocks = parse(page)
        if not any(block.skip is None for block in blocks):
            continue
        for name in backends:
            yield pytest.param(page, name, id=f"{page.name}-{name}")


@pytest.mark.parametrize(("page", "backend"), list(_cases()), indirect=["backend"])
def test_page_runs(
    page: Path,
    backend: object,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    for module in requirements(page):
        # ImportError too: sqlmodel installs on the floor's SQLAlchemy 2.0.8 but
        # needs 2.0.14 to import (sqlalchemy.sql.elements.TryCast).
        pytest.importorskip(
            module, reason=f"{page.name} needs {module} (tests-integrations)", exc_type=ImportError
        )
    name: str = backend.name  # type: ignore[attr-defined]
    engine = _page_engine(backend, request)
    url = engine.url.render_as_string(hide_password=False)
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.chdir(ROOT)
    tables_before = set(sa.inspect(engine).get_table_names())
    page_text = "\n".join(block.source for block in parse(page)[1]) + page.read_text()
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    # Declarative classes and pydantic models look their module up by name.
    module = type(sys)(namespace["__name__"])
    module.__dict__.update(namespace)
    monkeypatch.setitem(sys.modules, str(namespace["__name__"]), module)
    namespace = module.__dict__
    try:
        for block in parse(page)[1]:
            if block.skip is not None or (block.only is not None and name not in block.only):
                continue
            code = compile(block.source, f"{page.relative_to(ROOT)}:{block.line}", "exec")
            exec(code, namespace)
    finally:
        for value in namespace.values():
            if isinstance(value, sa.Engine) and value is not engine:
                value.dispose()
        _drop_new_tables(engine, tables_before, page_text)


def _page_engine(backend: object, request: pytest.FixtureRequest) -> sa.Engine:
    """The page's engine: on a server, in a database of its own, dropped after the test.

    The pages use the names a user would (``alembic_version``, ``events``),
    which the suite's database may already hold.
    """
    if backend.name == "sqlite":  # type: ignore[attr-defined]
        return backend.engine  # type: ignore[attr-defined,no-any-return]
    own = _databases.own_database(backend.url, "docs")  # type: ignore[attr-defined]
    engine = sa.create_engine(own.__enter__())

    def release() -> None:
        engine.dispose()
        own.__exit__(None, None, None)

    request.addfinalizer(release)
    return engine


def _drop_new_tables(engine: sa.Engine, before: set[str], page_text: str) -> None:
    engine.dispose()  # the page may have left connections holding locks
    new = {
        name
        for name in set(sa.inspect(engine).get_table_names()) - before
        if re.search(rf"\b{re.escape(name)}\b", page_text)
    }
    if new:
        meta = sa.MetaData()
        meta.reflect(engine, only=sorted(new))
        meta.drop_all(engine)


def test_every_skip_has_a_reason_and_markers_parse() -> None:
    skipped = [block for page in PAGES for block in parse(page)[1] if block.skip]
    # Skips are for blocks that truly cannot run here; keep them rare.
    assert len(skipped) <= 3, [(b.page.name, b.line, b.skip) for b in skipped]


#: The widest code line a page may show: at 88 characters a block fits the
#: text column of the built site at 1280 px (tests/test_site.py checks that
#: no block scrolls), the same limit ruff puts on the project's code.
MAX_CODE_LINE = 88


def code_lines(page: Path) -> Iterator[tuple[int, str]]:
    """Yield (line number, text) for every line inside a fenced block of ``page``.

    Included files (``--8<--``) are expanded, so a long line in an example
    script counts against the page that shows it; their lines are numbered
    by the include line.
    """
    inside: str | None = None  # the open fence's indent
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        opening = _FENCE.match(line)
        if inside is None:
            if opening:
                inside = opening["indent"]
            continue
        if line.strip() == "```":
            inside = None
            continue
        snippet = _SNIPPET.match(line)
        if snippet:
            for included in (ROOT / snippet["path"]).read_text().splitlines():
                yield number, included
        else:
            yield number, line[len(inside) :]


def test_code_lines_fit_the_column() -> None:
    long = [
        f"{page.relative_to(ROOT)}:{number}: {len(text)} > {MAX_CODE_LINE}: {text.strip()[:60]}"
        for page in PAGES
        for number, text in code_lines(page)
        if len(text) > MAX_CODE_LINE
    ]
    assert long == [], "\n".join(long)


def test_the_line_check_sees_fences_and_includes(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    wide = "x" * (MAX_CODE_LINE + 1)
    page.write_text(
        f"{wide}\n\n```python\nok = 1\n{wide}\n```\n\n"
        f'    ```bash\n    {wide}\n    ```\n\n```\n--8<-- "tests/test_docs.py"\n```\n'
    )
    found = [(number, len(text)) for number, text in code_lines(page)]
    assert (5, MAX_CODE_LINE + 1) in found  # a python block
    assert (9, MAX_CODE_LINE + 1) in found  # an indented bash block
    assert (1, MAX_CODE_LINE + 1) not in found  # prose is not code
    assert any(number == 13 for number, _ in found)  # the included file's lines


CHARTS = ROOT / "docs" / "assets" / "charts"


def test_charts_match_the_benchmark_tables() -> None:
    """benchmarks/charts.py draws the charts from docs/benchmarks.md's tables.

    ``--check`` redraws each one and compares its text (labels and the
    numbers written on it) with the SVG on disk.
    """
    pytest.importorskip("matplotlib", reason="matplotlib is in the bench extra")
    import subprocess

    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "charts.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_chart_layout_check_refuses_what_a_phone_cannot_read() -> None:
    """benchmarks/charts.py's check: small, overlapping, crossed or cut-off text."""
    pytest.importorskip("matplotlib", reason="matplotlib is in the bench extra")
    import importlib.util

    spec = importlib.util.spec_from_file_location("charts", ROOT / "benchmarks" / "charts.py")
    assert spec is not None
    assert spec.loader is not None
    charts = importlib.util.module_from_spec(spec)
    sys.modules["charts"] = charts  # its dataclasses look their module up
    try:
        spec.loader.exec_module(charts)
    finally:
        del sys.modules["charts"]
    plt = charts.plt

    def problems(draw: Any) -> list[str]:
        fig, ax = plt.subplots(figsize=(charts.WIDTH, 3))
        ax.set_xlim(0, 100)
        ax.set_ylim(0, 10)
        draw(ax)
        fig.canvas.draw()
        try:
            return list(charts.layout_problems(fig))
        finally:
            plt.close(fig)

    assert problems(lambda ax: ax.text(10, 5, "fine", fontsize=10)) == []
    assert problems(lambda ax: ax.text(10, 5, "tiny", fontsize=7)) == ["'tiny' is 7 pt, under 9"]
    assert problems(lambda ax: (ax.text(10, 5, "one"), ax.text(11, 5, "two"))) == [
        "'one' overlaps 'two'"
    ]
    assert problems(lambda ax: (ax.axvline(20, linestyle="--"), ax.text(15, 5, "crossed"))) == [
        "'crossed' is crossed by a line"
    ]
    assert problems(lambda ax: ax.text(95, 5, "a label far too long for the figure")) == [
        "'a label far too long for the figure' leaves the figure"
    ]

    def tiny(_: Any) -> Any:
        fig = plt.figure(figsize=(2, 1))
        fig.text(0.1, 0.5, "small", fontsize=5)
        return fig

    charts.CHARTS["tiny.svg"] = tiny  # render() writes nothing; it raises first
    with pytest.raises(charts.LayoutError, match="'small' is 5 pt"):
        charts.render("tiny.svg", [])


def test_every_chart_is_shown_small_and_with_text_as_text() -> None:
    pages = "\n".join(page.read_text() for page in PAGES)
    charts = sorted(CHARTS.glob("*.svg"))
    assert {chart.name for chart in charts} >= {
        "pagination.svg",
        "storage.svg",
        "feed_lag.svg",
        "late_commit.svg",
    }
    for chart in charts:
        svg = chart.read_text()
        assert f"assets/charts/{chart.name}" in pages, f"{chart.name} is on no page"
        assert len(svg) < 60_000, f"{chart.name} is {len(svg)} bytes"
        # svg.fonttype "none": text is <text>, not glyph outlines (small, searchable).
        assert "<text" in svg
        assert '<defs>\n  <path id="DejaVuSans' not in svg
    # The numbers on the pagination chart are the table's: the deepest OFFSET page.
    assert "142.57 ms" in (CHARTS / "pagination.svg").read_text()
    assert "142.57" in (ROOT / "docs" / "benchmarks.md").read_text()


#: A table longer than this (data rows) is folded on the benchmarks page.
BIG_TABLE_ROWS = 10


def _outline(text: str) -> list[tuple[int, str, list[str]]]:
    """(level, title, body lines) per heading of a Markdown page, fences skipped."""
    outline: list[tuple[int, str, list[str]]] = [(0, "", [])]
    fence = False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        heading = None if fence else re.match(r"(#+) (.*)", line)
        if heading:
            outline.append((len(heading.group(1)), heading.group(2), []))
        else:
            outline[-1][2].append(line)
    return outline


def _tables_outside_details(lines: list[str]) -> list[tuple[int, str]]:
    """(data rows, first row) of each table not inside a <details> block."""
    found, depth, i = [], 0, 0
    while i < len(lines):
        line = lines[i]
        depth += line.startswith("<details") - line.startswith("</details>")
        if line.startswith("|") and i + 1 < len(lines) and re.match(r"\|[-:| ]+\|$", lines[i + 1]):
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            if depth == 0:
                found.append((j - i - 2, line))
            i = j
            continue
        i += 1
    return found


def test_benchmarks_page_structure() -> None:
    """A summary first, then one ``##`` per area, one ``###`` per benchmark;
    the long tables folded, so the page reads as an outline on a phone."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    outline = _outline(text)
    sections = [(level, title) for level, title, _ in outline[1:]]
    assert sections[0] == (1, "Benchmarks")
    assert sections[1] == (2, "Summary")
    summary = outline[2][2]
    assert any("assets/charts/" in line for line in summary)  # the summary chart
    assert _tables_outside_details(summary), "the summary has a table"
    areas = [title for level, title in sections if level == 2][1:]
    assert len(areas) >= 4, areas
    for index, (level, title, body) in enumerate(outline):
        if level == 2 and title != "Summary":
            # an area: a short introduction, then its benchmarks
            assert outline[index + 1][0] == 3, f"area {title!r} opens with no ### benchmark"
            assert not any(line.startswith(("|", "```")) for line in body), title
    assert sum(level == 3 for level, _ in sections) >= 20
    # Every area is linked from the summary, and every link lands on a heading.
    slugs = {re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") for _, title in sections}
    for area in areas:
        assert f"](#{re.sub(r'[^a-z0-9]+', '-', area.lower()).strip('-')})" in "\n".join(summary)
    for link in re.findall(r"\]\(#([a-z0-9-]+)\)", "\n".join(summary)):
        assert link in slugs, link
    big = [
        (rows, first)
        for _, _, body in outline
        for rows, first in _tables_outside_details(body)
        if rows > BIG_TABLE_ROWS
    ]
    assert big == [], f"tables of more than {BIG_TABLE_ROWS} rows not folded: {big}"
    # Each fold has a title and is closed.
    lines = text.splitlines()
    opened = [i for i, line in enumerate(lines) if line.startswith("<details")]
    assert len(opened) == sum(line.startswith("</details>") for line in lines) >= 10
    assert all(lines[i + 1].startswith("<summary>") for i in opened)


# Words that speak of how the project is run, not to the reader.
_INTERNAL = re.compile(r"\b(?:issue\s+\d+|the foundation issue|the issue)\b", re.IGNORECASE)


def test_docs_speak_to_users_not_about_the_project() -> None:
    sources = [*PAGES, ROOT / "CHANGELOG.md"]
    found = [
        f"{page.relative_to(ROOT)}:{number}: {line.strip()}"
        for page in sources
        for number, line in enumerate(page.read_text().splitlines(), start=1)
        if _INTERNAL.search(line) and "github.com" not in line
    ]
    assert found == [], "\n".join(found)


def test_the_internals_tree_names_every_top_level_module() -> None:
    """docs/internals.md's tree stays true: each module or package of the top is in it."""
    page = (ROOT / "docs" / "internals.md").read_text(encoding="utf-8")
    tree = page.split("## The tree", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    named = set(re.findall(r"[\w.]+(?:\.py|/)", tree))
    src = ROOT / "src" / "sqlalchemy_ulid"
    present = {path.name for path in src.glob("*.py")} | {
        path.name + "/" for path in src.iterdir() if (path / "__init__.py").is_file()
    }
    assert sorted(present - named) == []
    # Every top-level module the tree names is there (not a renamed or gone one).
    listed = {name for name in named if re.fullmatch(r"_\w+\.py", name)}
    nested = {path.name for path in src.rglob("*.py")}
    assert sorted(listed - nested) == []
