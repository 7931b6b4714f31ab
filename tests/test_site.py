"""The built documentation site, in a real browser (headless Chromium).

``mkdocs build`` writes the site to a temporary directory, a local HTTP
server serves it, and Playwright drives the system Chromium
(``/usr/bin/chromium``, the Debian package; ``playwright install`` is never
run) through every page at a desktop width (1280 px) and a phone width
(390 px). What is checked, on every page at both widths:

* no console error and no uncaught exception; no request the site makes
  fails;
* every image loaded (``naturalWidth > 0``);
* every internal link points at a page of the site, and its ``#anchor`` at
  an element of that page;
* nothing is wider than its column, where "wider" means:

  - at 1280 px, no code block and no table scrolls at all: every code line
    (88 characters at most, see test_docs.py) and every table is fully
    visible without a scrollbar;
  - at 390 px, 88 characters cannot fit a phone, so a code block or a table
    may scroll inside its own box (Material gives tables a scroll wrapper),
    but that box stays inside the text column, and the page itself never
    scrolls sideways.

A screenshot of each page at each width goes to
``$SQLALCHEMY_ULID_ARTIFACTS/screenshots`` (default ``build/screenshots``),
for CI to keep: the whole page for the landing page, the quick start,
pagination and benchmarks, the first screen for the others.

Where the browser is missing the tests fail if the run requires it
(``SQLALCHEMY_ULID_REQUIRE_BACKENDS=all``, as CI sets, with the docs tools
installed; or ``SQLALCHEMY_ULID_REQUIRE_BROWSER=1``), and skip otherwise. A
job without the ``docs`` extra (no mkdocs) skips them, unless
``SQLALCHEMY_ULID_REQUIRE_BROWSER=1``.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path(os.environ.get("SQLALCHEMY_ULID_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WIDTHS = {"desktop": 1280, "phone": 390}
# Pages shot whole (the rest: the first screen, which is quicker).
FULL_PAGE_SHOTS = {"/", "/quickstart/", "/tutorial/", "/fastapi/", "/pagination/", "/benchmarks/"}
#: The smallest text on a chart, as the browser draws it (CSS px), at any width.
MIN_CHART_TEXT_PX = 10.0
MAX_SHOT_HEIGHT = 6000  # px: the first several screens of a long page, not all 18,000
ARTIFACTS = Path(os.environ.get("SQLALCHEMY_ULID_ARTIFACTS", ROOT / "build")) / "screenshots"


def _browser_required() -> bool:
    if os.environ.get("SQLALCHEMY_ULID_REQUIRE_BROWSER") == "1":
        return True
    required = os.environ.get("SQLALCHEMY_ULID_REQUIRE_BACKENDS", "")
    names = {part.strip() for part in required.split(",")}
    has_docs_tools = importlib.util.find_spec("mkdocs") is not None
    return bool(names & {"all", "chromium"}) and has_docs_tools


def _missing() -> str | None:
    """Why the browser test cannot run here, or None."""
    for module, extra in (("mkdocs", "docs"), ("material", "docs"), ("playwright", "docs")):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (the {extra!r} extra)"
    if not CHROMIUM.exists():
        return f"no Chromium at {CHROMIUM} (apt-get install -y chromium)"
    return None


# What a page runs in the browser: every check that needs the layout.
_MEASURE = """
() => {
  // Folded blocks (<details>) are measured open, and folded again after.
  const folded = [...document.querySelectorAll('details:not([open])')];
  folded.forEach((el) => { el.open = true; });
  // The content column: Material lets code blocks and tables reach into its
  // padding (full-bleed on phones), so its box, not the text's, is the limit.
  const column = document.querySelector('.md-content');
  const box = column.getBoundingClientRect();
  const describe = (el) => {
    const text = (el.innerText || '').trim().split('\\n')[0].slice(0, 60);
    return `${el.tagName.toLowerCase()} "${text}"`;
  };
  const blocks = [
    ...[...document.querySelectorAll('.md-typeset pre > code')].map(
      (el) => ['code block', el]),
    ...[...document.querySelectorAll('.md-typeset__scrollwrap')].map(
      (el) => ['table', el]),
  ];
  const measured = {
    pageScrollWidth: document.documentElement.scrollWidth,
    viewportWidth: window.innerWidth,
    blocks: blocks.map(([kind, el]) => {
      const rect = el.getBoundingClientRect();
      return {
        kind, what: describe(el),
        scrollWidth: el.scrollWidth, clientWidth: el.clientWidth,
        left: rect.left, right: rect.right,
        columnLeft: box.left, columnRight: box.right,
      };
    }),
    brokenImages: [...document.images]
      .filter((img) => !(img.complete && img.naturalWidth > 0))
      .map((img) => img.getAttribute('src')),
    links: [...document.querySelectorAll('a[href]')].map((a) => a.href),
    charts: [...document.querySelectorAll('.md-typeset img[src*="assets/charts/"]')].map(
      (img) => ({src: img.getAttribute('src'), width: img.getBoundingClientRect().width,
                 right: img.getBoundingClientRect().right, columnRight: box.right,
                 natural: img.naturalWidth})),
    version: (document.querySelector('.md-header__version') || {}).textContent || null,
    versionClipped: (() => {
      // The version label shows whole: inside its title box, which is not
      // cut off (Material ellipsizes a title too long for the header).
      const label = document.querySelector('.md-header__version');
      if (!label) return null;
      const rect = label.getBoundingClientRect();
      const title = label.closest('.md-ellipsis') || label.parentElement;
      const outer = title.getBoundingClientRect();
      return rect.width === 0 || rect.right > outer.right + 1
        || title.scrollWidth > title.clientWidth + 1 || rect.right > window.innerWidth;
    })(),
    // Inline code in a table cell wraps only at a space, never mid-token.
    midTokenBreaks: [...document.querySelectorAll('.md-typeset td code, .md-typeset th code')]
      .filter((el) => el.getClientRects().length > 1 && el.childNodes.length === 1
        && el.firstChild.nodeType === Node.TEXT_NODE)
      .filter((el) => {
        const node = el.firstChild;
        const text = node.textContent;
        const range = document.createRange();
        let top = null;
        for (let i = 0; i < text.length; i++) {
          range.setStart(node, i);
          range.setEnd(node, i + 1);
          const rect = range.getClientRects()[0];
          if (!rect || rect.width === 0) continue;
          if (top !== null && rect.top > top + 2 && !/\\s/.test(text[i - 1])
              && !/\\s/.test(text[i])) return true;
          top = rect.top;
        }
        return false;
      })
      .map((el) => el.textContent),
  };
  folded.forEach((el) => { el.open = false; });
  return measured;
}
"""


@dataclass
class Crawl:
    """What the browser saw, by category; each entry names page and width."""

    base: str
    pages: list[str]
    console: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    too_wide: list[str] = field(default_factory=list)
    links: dict[str, set[str]] = field(default_factory=dict)  # href -> pages
    screenshots: list[Path] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # phase -> wall time
    blocks_seen: dict[str, int] = field(default_factory=dict)  # width -> blocks
    small_charts: list[str] = field(default_factory=list)
    charts_seen: int = 0
    versions: set[str | None] = field(default_factory=set)  # in the header
    clipped_versions: list[str] = field(default_factory=list)
    broken_code: list[str] = field(default_factory=list)  # code split mid-token


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _pages(site: Path) -> list[str]:
    """Every page of the site as a URL path ("/", "/quickstart/", ...)."""
    pages = []
    for index in sorted(site.rglob("index.html")):
        relative = index.parent.relative_to(site)
        if relative.parts and relative.parts[0] in ("assets", "search"):
            continue
        pages.append("/" if not relative.parts else f"/{relative.as_posix()}/")
    return pages


def _check_blocks(crawl: Crawl, where: str, width: str, measured: dict[str, Any]) -> None:
    if measured["pageScrollWidth"] > measured["viewportWidth"]:
        crawl.too_wide.append(
            f"{where}: the page scrolls sideways "
            f"({measured['pageScrollWidth']} > {measured['viewportWidth']} px)"
        )
    for block in measured["blocks"]:
        crawl.blocks_seen[width] = crawl.blocks_seen.get(width, 0) + 1
        name = f"{where}: {block['kind']} {block['what']}"
        if width == "desktop" and block["scrollWidth"] > block["clientWidth"]:
            crawl.too_wide.append(
                f"{name} scrolls ({block['scrollWidth']} > {block['clientWidth']} px)"
            )
        if block["right"] > block["columnRight"] + 1 or block["left"] < block["columnLeft"] - 1:
            crawl.too_wide.append(
                f"{name} leaves the column ({block['left']:.0f}..{block['right']:.0f} "
                f"outside {block['columnLeft']:.0f}..{block['columnRight']:.0f})"
            )


@functools.cache
def _svg_text_scale(name: str) -> tuple[float, float]:
    """(the chart's width in SVG units, its smallest font size in those units)."""
    svg = (ROOT / "docs" / "assets" / "charts" / name).read_text(encoding="utf-8")
    view_box = re.search(r'viewBox="0 0 ([\d.]+) [\d.]+"', svg)
    sizes = [float(size) for size in re.findall(r"font-size: ?([\d.]+)px", svg)]
    assert view_box is not None, name
    assert sizes, name
    return float(view_box.group(1)), min(sizes)


def _chart_problems(where: str, chart: dict[str, Any]) -> list[str]:
    """A chart that leaves the column, or whose smallest text is drawn too small."""
    problems = []
    units, smallest = _svg_text_scale(chart["src"].rsplit("/", 1)[-1])
    drawn = smallest * chart["width"] / units
    if drawn < MIN_CHART_TEXT_PX:
        problems.append(
            f"{where}: {chart['src']} drawn {chart['width']:.0f} px wide: its smallest "
            f"text is {drawn:.1f} px"
        )
    if chart["right"] > chart["columnRight"] + 1:
        problems.append(f"{where}: {chart['src']} is wider than the column")
    return problems


def _visit(crawl: Crawl, browser: Any) -> None:
    """Load each page once, then lay it out at each width in turn.

    Resizing the viewport re-runs the layout (and Material's own resize
    handlers) without a second load, which halves the time.
    """
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": WIDTHS["desktop"], "height": 900})
    page = context.new_page()
    current = {"where": ""}

    def on_console(msg: Any) -> None:
        if msg.type == "error":
            crawl.console.append(f"{current['where']}: {msg.text}")

    def on_response(response: Any) -> None:
        if response.status >= 400:
            crawl.requests.append(f"{current['where']}: {response.url} {response.status}")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: crawl.console.append(f"{current['where']}: {exc}"))
    page.on("requestfailed", lambda req: crawl.requests.append(f"{current['where']}: {req.url}"))
    page.on("response", on_response)
    for path in crawl.pages:
        current["where"] = path
        page.set_viewport_size({"width": WIDTHS["desktop"], "height": 900})
        page.goto(crawl.base + path, wait_until="load")
        name = path.strip("/").replace("/", "_") or "index"
        for width_name, width in WIDTHS.items():
            where = current["where"] = f"{path} at {width} px"
            page.set_viewport_size({"width": width, "height": 900})
            measured = page.evaluate(_MEASURE)
            _check_blocks(crawl, where, width_name, measured)
            crawl.images += [f"{where}: {src} did not load" for src in measured["brokenImages"]]
            crawl.versions.add(measured["version"])
            if measured["versionClipped"]:
                crawl.clipped_versions.append(where)
            crawl.broken_code += [f"{where}: `{code}`" for code in measured["midTokenBreaks"]]
            for chart in measured["charts"]:
                crawl.charts_seen += 1
                crawl.small_charts += _chart_problems(where, chart)
            for href in measured["links"]:
                crawl.links.setdefault(href, set()).add(path)
            shot = ARTIFACTS / f"{name}-{width}.png"
            began = time.monotonic()
            _screenshot(page, shot, whole=path in FULL_PAGE_SHOTS)
            crawl.seconds["screenshots"] = crawl.seconds.get("screenshots", 0.0) + (
                time.monotonic() - began
            )
            crawl.screenshots.append(shot)
    context.close()


def _screenshot(page: Any, path: Path, *, whole: bool) -> None:
    """The first screen, or (``whole``) the page down to ``MAX_SHOT_HEIGHT``."""
    if not whole:
        page.screenshot(path=str(path))
        return
    width, height = page.evaluate(
        "[document.documentElement.clientWidth, document.documentElement.scrollHeight]"
    )
    clip = {"x": 0, "y": 0, "width": width, "height": min(height, MAX_SHOT_HEIGHT)}
    page.screenshot(path=str(path), full_page=True, clip=clip)


@pytest.fixture(scope="module")
def crawl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawl]:
    missing = _missing()
    if missing is not None:
        if _browser_required():
            pytest.fail(f"the browser test is required here: {missing}", pytrace=False)
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    started = time.monotonic()
    site = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    built_at = time.monotonic()
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    result = Crawl(base=f"http://127.0.0.1:{server.server_address[1]}", pages=_pages(site))
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=60_000
            )
            try:
                _visit(result, browser)
            finally:
                browser.close()
        result.seconds["build"] = built_at - started
        result.seconds["browser"] = time.monotonic() - built_at
        result.site = site  # type: ignore[attr-defined]
        yield result
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_every_page_was_visited(crawl: Crawl) -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    pages_in_nav = re.findall(r":\s*([\w-]+)\.md\s*$", nav, flags=re.MULTILINE)
    expected = {"/" if name == "index" else f"/{name}/" for name in pages_in_nav}
    assert expected <= set(crawl.pages), expected - set(crawl.pages)
    assert len(crawl.screenshots) == len(crawl.pages) * len(WIDTHS)
    assert all(shot.stat().st_size > 10_000 for shot in crawl.screenshots)


def test_no_console_errors(crawl: Crawl) -> None:
    assert crawl.console == [], "\n".join(crawl.console)


def test_no_failed_requests(crawl: Crawl) -> None:
    assert crawl.requests == [], "\n".join(crawl.requests)


def test_no_broken_images(crawl: Crawl) -> None:
    assert crawl.images == [], "\n".join(crawl.images)


def test_no_broken_internal_links(crawl: Crawl) -> None:
    site: Path = crawl.site  # type: ignore[attr-defined]
    broken = []
    anchors: dict[Path, set[str]] = {}
    for href, pages in sorted(crawl.links.items()):
        if not href.startswith(crawl.base):
            continue  # another site: not ours to check, and no network here
        parts = urlsplit(href)
        target = site / unquote(parts.path).lstrip("/")
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            broken.append(f"{href} (from {', '.join(sorted(pages))}): no such page")
            continue
        if parts.fragment and target.suffix == ".html":
            if target not in anchors:
                html = target.read_text(encoding="utf-8")
                anchors[target] = set(re.findall(r'\bid="([^"]+)"', html))
            if unquote(parts.fragment) not in anchors[target]:
                broken.append(f"{href} (from {', '.join(sorted(pages))}): no such anchor")
    assert broken == [], "\n".join(broken)
    assert any(urljoin(crawl.base, "/quickstart/") in href for href in crawl.links)


def test_code_blocks_and_tables_fit_their_column(crawl: Crawl) -> None:
    # The check measured something at both widths: the site has code and tables.
    assert crawl.blocks_seen.get("desktop", 0) > 100
    assert crawl.blocks_seen.get("phone", 0) > 100
    assert crawl.too_wide == [], "\n".join(crawl.too_wide)


def test_charts_fit_the_column_with_legible_text(crawl: Crawl) -> None:
    # At 390 px a chart fits the column whole (the page never scrolls
    # sideways, checked above) and its smallest text is 10 px or more.
    assert crawl.charts_seen >= 8  # the charts of pagination and benchmarks, two widths
    assert crawl.small_charts == [], "\n".join(crawl.small_charts)


def test_the_header_shows_the_version(crawl: Crawl) -> None:
    from sqlalchemy_ulid import __version__

    assert crawl.versions == {__version__}
    assert crawl.clipped_versions == [], "\n".join(crawl.clipped_versions)


def test_code_in_table_cells_breaks_only_between_tokens(crawl: Crawl) -> None:
    assert crawl.broken_code == [], "\n".join(crawl.broken_code)


def test_the_new_pages_are_there(crawl: Crawl) -> None:
    assert {"/tutorial/", "/fastapi/", "/sqlmodel/"} <= set(crawl.pages)


def test_the_crawl_stays_quick(crawl: Crawl) -> None:
    # Not a benchmark: a guard against the test growing into minutes. Under
    # a load average of 8 on 2 cores the whole module took about 2 minutes.
    print(", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in crawl.seconds.items()))
    assert crawl.seconds["browser"] < 300
