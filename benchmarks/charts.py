"""Draw the charts in docs/benchmarks.md from the tables the benchmark scripts printed.

The numbers come from docs/benchmarks.md itself: each benchmark script prints
Markdown tables, and those tables (with the command that made them) are what
the page shows. This script parses them, so a new benchmark run pasted into
the page is one command away from new charts:

    .venv/bin/python benchmarks/charts.py

It writes SVGs to docs/assets/charts/ (text kept as text, so they stay small
and searchable):

* pagination.svg   page time by depth: keyset ``after(cursor)``, OFFSET and
                   sqlakeyset (from bench_pagination.py's tables);
* storage.svg      primary-key and secondary-index size per key type (from
                   bench_storage.py's table);
* feed_lag.svg     rows missed and delivery lag per ``settle=`` mode (from
                   bench_feed.py's tables);
* late_commit.svg  a timeline of the late-commit skip and what
                   ``settle="auto"`` does about it. A diagram, not a
                   measurement: its timings are the explicit ones in
                   ``LATE_COMMIT`` below.

Every chart is one column of panels, 4 inches wide, so that a phone shows it
whole with legible text; before writing one, the script refuses it
(``LayoutError``) if any of its text is under 9 pt, leaves the figure,
overlaps other text or a legend, or is crossed by a plotted line.

``--check`` exits 1 if a chart on disk shows other text (titles, labels,
the numbers written on it) than the tables give now; the test suite runs it.
It compares the text, not the bytes, so another matplotlib release that
draws the same chart a little differently passes.
"""

from __future__ import annotations

import argparse
import io
import itertools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.text import Text
from matplotlib.transforms import Bbox

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmarks.md"
OUT = ROOT / "docs" / "assets" / "charts"

INK = "#0b3b3c"
TEAL = "#0f766e"
MINT = "#2dd4bf"
AMBER = "#d97706"
GREY = "#94a3b8"
RED = "#dc2626"

plt.rcParams.update(
    {
        "svg.fonttype": "none",  # text stays text: small files
        "svg.hashsalt": "sqlalchemy-ulid",  # stable ids: a rerun changes nothing
        "font.family": "sans-serif",
        "font.sans-serif": ["DejaVu Sans", "Helvetica", "Arial"],  # short: it is in every <text>
        "font.size": 10,
        "axes.edgecolor": GREY,
        "axes.labelcolor": INK,
        "axes.titlecolor": INK,
        "axes.titleweight": "bold",
        "axes.spines.top": False,
        "axes.spines.right": False,
        "xtick.color": INK,
        "ytick.color": INK,
        "legend.frameon": False,
    }
)


# -- reading the tables ------------------------------------------------------------


@dataclass
class Table:
    heading: str  # the nearest heading above the table
    header: list[str]
    rows: list[list[str]]

    def column(self, name: str) -> list[str]:
        index = self.header.index(name)
        return [row[index] for row in self.rows]


def _cells(line: str) -> list[str]:
    return [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]


def tables(text: str) -> list[Table]:
    """Every Markdown table of ``text``, with the heading it sits under."""
    found: list[Table] = []
    heading = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif line.startswith("<summary>"):  # a folded run's title is its heading
            heading = line.removeprefix("<summary>").removesuffix("</summary>").strip()
        if line.startswith("|") and i + 1 < len(lines) and re.match(r"\|[-:| ]+\|$", lines[i + 1]):
            header = _cells(line)
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            found.append(Table(heading, header, rows))
            continue
        i += 1
    return found


def number(cell: str) -> float:
    """``"1,344"`` -> 1344.0, ``"1.09x"`` -> 1.09, ``"30.1"`` -> 30.1."""
    match = re.search(r"-?[\d,]*\.?\d+", cell)
    if match is None:
        raise ValueError(f"no number in table cell {cell!r}")
    return float(match.group().replace(",", ""))


def find(all_tables: list[Table], heading: str, first_column: str) -> Table:
    for table in all_tables:
        if table.heading.startswith(heading) and table.header[0] == first_column:
            return table
    raise LookupError(f"no table under {heading!r} starting with column {first_column!r}")


# -- the charts ----------------------------------------------------------------------

#: Every chart is this wide (inches; 288 pt, 384 CSS px at its own size), so
#: that a phone's column (330 to 360 px at 390 px) shows it at 86 % or more.
WIDTH = 4.0
#: The smallest text a chart may hold (pt in the SVG): at 86 % it is 10.3 px.
MIN_FONT = 9.0


def pagination(all_tables: list[Table]) -> plt.Figure:
    fig, axes = plt.subplots(2, 1, figsize=(WIDTH, 5.6), sharex=True)
    for ax, server in zip(axes, ("PostgreSQL", "MariaDB"), strict=True):
        table = find(all_tables, server, "depth")
        depths = [number(d) if d != "0" else 0.0 for d in table.column("depth")]
        series = [
            ("OFFSET", "OFFSET", GREY, "s"),
            ("sqlakeyset", "sqlakeyset", AMBER, "^"),
            ("after(cursor)", "paginate(after=cursor)", TEAL, "o"),
        ]
        for column, label, color, marker in series:
            values = [number(v) for v in table.column(column)]
            ax.plot(depths, values, marker=marker, color=color, label=label, linewidth=2)
            ax.annotate(
                f"{values[-1]:g} ms",
                (depths[-1], values[-1]),
                textcoords="offset points",
                # Right of the last point, the keyset label below the others.
                xytext=(7, -3 if column == "OFFSET" else (-9 if column == "after(cursor)" else 3)),
                ha="left",
                va="center",
                color=color,
                fontsize=MIN_FONT,
            )
        ax.set_yscale("log")
        ticks = [1, 2, 5, 10, 20, 50, 100, 200]
        ax.set_yticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlim(-5, 125)
        ax.set_title(f"{server}, 1,000,000 rows", loc="left", fontsize=10)
        ax.set_xticks(depths, [f"{d:g}" for d in depths])
        ax.grid(axis="y", color="#e2e8f0", linewidth=0.8)
        ax.set_ylabel("median ms (log)")
    axes[1].set_xlabel("page depth (% of the table)")
    axes[0].legend(loc="upper left", fontsize=MIN_FONT, bbox_to_anchor=(0, 1.0), borderaxespad=0.2)
    axes[0].set_ylim(0.8, 2000)
    axes[1].set_ylim(0.8, 2000)
    fig.suptitle("One 50-row page, by depth", color=INK, fontweight="bold", x=0.02, ha="left")
    fig.tight_layout()
    return fig


def storage(all_tables: list[Table]) -> plt.Figure:
    table = find(all_tables, "Storage study", "database")
    fig, ax = plt.subplots(figsize=(WIDTH, 3.9))
    databases = list(dict.fromkeys(table.column("database")))
    keys = list(dict.fromkeys(table.column("key")))
    colors = {"ULID": TEAL, "UUIDv4": GREY, "CHAR(26)": AMBER}
    width = 0.26
    for k, key in enumerate(keys):
        rows = [row for row in table.rows if row[1] == key]
        primary = [number(row[table.header.index("primary key (MB)")]) for row in rows]
        secondary = [number(row[table.header.index("secondary index (MB)")]) for row in rows]
        xs = [d + (k - 1) * width for d in range(len(databases))]
        ax.bar(xs, primary, width * 0.92, color=colors.get(key, INK), label=key)
        ax.bar(
            xs,
            secondary,
            width * 0.92,
            bottom=primary,
            color=colors.get(key, INK),
            alpha=0.4,
            hatch="//",
            edgecolor="white",
        )
        for x, p, s in zip(xs, primary, secondary, strict=True):
            ax.text(x, p + s + 1.5, f"{p + s:.0f}", ha="center", fontsize=MIN_FONT, color=INK)
    ax.set_xticks(range(len(databases)), databases)
    ax.set_ylabel("MB for 1,000,000 rows")
    ax.set_title("Index size per key type", loc="left", pad=16)
    ax.text(
        0, 1.0, "solid: primary key; hatched: a secondary index",
        transform=ax.transAxes, fontsize=MIN_FONT, color=INK, va="bottom",
    )  # fmt: skip
    ax.legend(loc="upper left", fontsize=MIN_FONT, ncols=3, borderaxespad=0.2)
    ax.set_ylim(0, max(number(r[-2]) + number(r[-1]) for r in table.rows) * 1.35)
    fig.tight_layout()
    return fig


def feed_lag(all_tables: list[Table]) -> plt.Figure:
    fig, axes = plt.subplots(2, 1, figsize=(WIDTH, 5.8), sharex=True)
    scenario = "tx 0-200 ms + one 10 s"
    top_lag = 0.0
    for ax, server in zip(axes, ("PostgreSQL 15", "MariaDB 10.11"), strict=True):
        table = find(all_tables, server, "transactions")
        rows = [row for row in table.rows if row[0] == scenario]
        modes = [row[1] for row in rows]
        p50 = [number(row[table.header.index("lag p50 (s)")]) for row in rows]
        p99 = [number(row[table.header.index("lag p99 (s)")]) for row in rows]
        missed = [number(row[table.header.index("missed")]) for row in rows]
        written = [number(row[table.header.index("rows written")]) for row in rows]
        top_lag = max(top_lag, *p99)
        ys = range(len(modes))
        ax.barh([y + 0.18 for y in ys], p99, 0.36, color=MINT, label="lag p99")
        ax.barh([y - 0.18 for y in ys], p50, 0.36, color=TEAL, label="lag p50")
        for y, m, w, top in zip(ys, missed, written, p99, strict=True):
            text, color = (f"missed {m:.0f}\nof {w:,.0f}", RED) if m else ("none\nmissed", TEAL)
            ax.text(top + 0.3, y, text, va="center", fontsize=MIN_FONT, color=color)
        ax.set_yticks(list(ys), modes)
        ax.invert_yaxis()
        ax.set_title(server, loc="left", fontsize=10)
    axes[1].set_xlim(0, top_lag * 1.6)
    axes[1].set_xlabel("seconds from commit to delivery")
    axes[0].legend(loc="upper right", fontsize=MIN_FONT)
    fig.suptitle(
        f"Tailing a feed:\n{scenario} transactions", color=INK, fontweight="bold", x=0.02, ha="left"
    )
    fig.tight_layout()
    return fig


@dataclass(frozen=True)
class Txn:
    name: str
    begin: float  # ms: the id is made (the INSERT) here
    commit: float  # ms


#: The diagram's timeline (ms): A takes its id first but commits last.
LATE_COMMIT = {
    "txns": [Txn("A", 0, 70), Txn("B", 15, 30)],
    "polls": [40, 95],
    "margin": 10,
}


def late_commit(_: list[Table]) -> plt.Figure:
    txns, polls = LATE_COMMIT["txns"], LATE_COMMIT["polls"]
    fig, axes = plt.subplots(2, 1, figsize=(WIDTH, 5.4), sharex=True)
    titles = [
        "Without settle: the cursor\npasses A while A is open",
        'settle="auto": the page stops\nbefore the oldest open transaction',
    ]
    for ax, title, settled in zip(axes, titles, (False, True), strict=True):
        for row, txn in enumerate(txns):
            y = len(txns) - row
            ax.plot([txn.begin, txn.commit], [y, y], color=TEAL, linewidth=7, solid_capstyle="butt")
            ax.text(txn.begin - 2, y, f"id {txn.name}", ha="right", va="center", color=INK)
            ax.plot(txn.commit, y, marker="D", color=INK)
        for n, at in enumerate(polls):
            ax.axvline(at, color=AMBER, linestyle="--", linewidth=1.2)
            open_then = [t for t in txns if t.begin <= at < t.commit]
            if not settled:
                label = ("poll 1:\ngets B;\ncursor = B", "poll 2:\nnone after B;\nA never read")[n]
            else:
                if open_then:
                    horizon = min(t.begin for t in open_then) - LATE_COMMIT["margin"]
                    ax.axvspan(horizon, at, color=AMBER, alpha=0.12)
                label = "poll 1:\nA open:\nnothing yet" if n == 0 else "poll 2:\ngets A,\nthen B"
            ax.text(at + 1.5, -0.05, label, fontsize=MIN_FONT, va="bottom",
                    color=AMBER if settled else RED)  # fmt: skip
        if not settled:
            ax.text(97.5, 2, "A commits\nbehind\nthe cursor", fontsize=MIN_FONT, color=RED,
                    va="center")  # fmt: skip
        ax.set_ylim(-0.1, len(txns) + 0.9)
        ax.set_yticks([])
        ax.spines["left"].set_visible(False)
        ax.set_title(title, loc="left", fontsize=10)
    axes[1].set_xlim(-22, 150)
    axes[1].set_xlabel("time (ms), \u25c6 commit: a diagram, not data")
    fig.tight_layout()
    return fig


CHARTS = {
    "pagination.svg": pagination,
    "storage.svg": storage,
    "feed_lag.svg": feed_lag,
    "late_commit.svg": late_commit,
}


# -- the layout check ----------------------------------------------------------------


class LayoutError(ValueError):
    """A chart whose text is too small, leaves the figure, overlaps or is crossed."""


def _inside(box: Bbox, point: tuple[float, float]) -> bool:
    return bool(box.x0 < point[0] < box.x1 and box.y0 < point[1] < box.y1)


def layout_problems(figure: plt.Figure) -> list[str]:
    """What makes ``figure`` hard to read on a phone: each piece of text
    smaller than MIN_FONT, outside the figure, overlapping another, or
    crossed by a plotted line (a data line, a dashed marker line)."""
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    undrawn = set()  # tick labels of ticks outside the view: kept, never drawn
    for ax in figure.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick, at in zip(axis.get_major_ticks(), axis.get_majorticklocs(), strict=False):
                if not low - 1e-9 <= at <= high + 1e-9:
                    undrawn |= {id(tick.label1), id(tick.label2)}
    labels = [
        (text.get_text().replace("\n", " "), text.get_fontsize(), text.get_window_extent(renderer))
        for text in figure.findobj(Text)
        if text.get_visible() and text.get_text().strip() and id(text) not in undrawn
    ]
    problems = []
    frame = figure.bbox
    seen = set()
    unique = []
    for name, size, box in labels:
        key = (name, tuple(round(v, 1) for v in box.extents))
        if key not in seen:
            seen.add(key)
            unique.append((name, size, box))
    for name, size, box in unique:
        if size < MIN_FONT:
            problems.append(f"{name!r} is {size:g} pt, under {MIN_FONT:g}")
        if not frame.padded(0.5).contains(box.x0, box.y0) or not frame.padded(0.5).contains(
            box.x1, box.y1
        ):
            problems.append(f"{name!r} leaves the figure")
    for i, (name, _, box) in enumerate(unique):
        inner, near = box.padded(-1.0), box.padded(1.5)  # a line may not touch text
        for other, _, other_box in unique[i + 1 :]:
            if inner.overlaps(other_box.padded(-1.0)):
                problems.append(f"{name!r} overlaps {other!r}")
        for ax in figure.axes:
            for line in ax.get_lines():
                points = [tuple(p) for p in line.get_transform().transform(line.get_xydata())]
                if len(points) == 1:  # a marker alone
                    points *= 2
                for (x0, y0), (x1, y1) in itertools.pairwise(points):
                    steps = [k / 40 for k in range(41)]
                    if any(_inside(near, (x0 + (x1 - x0) * t, y0 + (y1 - y0) * t)) for t in steps):
                        problems.append(f"{name!r} is crossed by a line")
                        break
    # A legend (its swatches too) covers no other text.
    legends = [legend for ax in figure.axes if (legend := ax.get_legend()) is not None]
    legends += list(figure.legends)
    for legend in legends:
        box = legend.get_window_extent(renderer)
        own = {text.get_text() for text in legend.get_texts()}
        for name, _, other in unique:
            if name not in own and box.overlaps(other.padded(-1.0)):
                problems.append(f"the legend covers {name!r}")
    return sorted(set(problems))


def render(name: str, all_tables: list[Table]) -> str:
    figure = CHARTS[name](all_tables)
    figure.canvas.draw()
    problems = layout_problems(figure)
    if problems:
        plt.close(figure)
        raise LayoutError(f"{name}: " + "; ".join(problems))
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(figure)
    return buffer.getvalue()


def texts(svg: str) -> list[str]:
    """The text an SVG shows (svg.fonttype "none" keeps it as <text> elements)."""
    return sorted(re.findall(r"<text[^>]*>([^<]*)</text>", svg))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if a chart on disk is out of date"
    )
    args = parser.parse_args(argv)
    all_tables = tables(PAGE.read_text(encoding="utf-8"))
    OUT.mkdir(parents=True, exist_ok=True)
    stale = []
    for name in CHARTS:
        svg = render(name, all_tables)
        path = OUT / name
        if args.check:
            if not path.exists() or texts(path.read_text(encoding="utf-8")) != texts(svg):
                stale.append(name)
            continue
        path.write_text(svg, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)} ({len(svg) // 1024} KiB)")
    if stale:
        print(f"out of date: {', '.join(stale)}; run benchmarks/charts.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
