"""``cairn plot``: learning curves of ``cairn train`` runs.

Reads ``RUN_DIR/metrics.jsonl`` (one JSON object per training iteration, as
written by ``cairn train --checkpoint-dir RUN_DIR``; see
:mod:`cairn.cli.metrics_log`) and draws metrics against env steps
(``num_env_steps_sampled_lifetime``). By default the main panel is
``env_runners/episode_return_mean`` and smaller panels below show the PPO
losses and the policy entropy (``learners/<module id>/policy_loss``,
``vf_loss``, ``entropy``), one curve per run and module; several run folders
go on one figure, one colour per run. ``--metric M`` (repeatable) chooses the
panels instead: the first is the main one, and a name without an exact key
matches every ``.../M`` key (``--metric entropy`` finds
``learners/p0/entropy`` and ``learners/p1/entropy``). Runs written before
the metrics took RLlib's names plot the same: :func:`read_metrics` reads
their rows under today's names.

A ``.svg`` output is written without any plotting library; other formats
(``.png``, the default, and ``.pdf``) use matplotlib
(``pip install "cairn-rl[plot]"``). A one-line summary per run goes to stdout.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape

from cairn._display import safe_text
from cairn._metrics import RETURN_METRIC
from cairn.cli.command import Command
from cairn.cli.metrics_log import METRICS_FILE, read_metrics

__all__ = ["COMMAND", "build_panels", "cmd_plot", "nice_ticks"]

X_KEY = "num_env_steps_sampled_lifetime"
MAIN_METRIC = RETURN_METRIC
SMALL_METRICS = ("policy_loss", "vf_loss", "entropy")
_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
_STYLES = ["-", "--", ":", "-."]
_SVG_DASHES = ["", "6,3", "2,2", "6,2,2,2"]

Points = list[tuple[float, float]]


@dataclass
class Curve:
    """One line of a panel: a run (by index) and, for per-module metrics, the module."""

    run: int
    module: str
    points: Points


@dataclass
class Panel:
    """One plot: a metric and its curves over all runs."""

    metric: str
    curves: list[Curve] = field(default_factory=list)

    @property
    def modules(self) -> list[str]:
        """The distinct module labels of the curves, in first-seen order."""
        return list(dict.fromkeys(c.module for c in self.curves))


def _series(rows: list[dict[str, Any]], key: str) -> Points:
    points = []
    for i, row in enumerate(rows):
        y: Any = row.get(key)
        x: Any = row.get(X_KEY, i)
        # Non-finite values (NaN, 1e999 read as infinity) have no place on an axis: left out, on
        # either axis. Booleans are no metric values.
        if _finite(x) and _finite(y):
            points.append((float(x), float(y)))  # both numbers: _finite checked
    return points


def _finite(value: Any) -> bool:
    """A number a plot can place: an int or float (not a bool) that is finite as a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an int beyond any float
        return False


def _fraction(value: float, lo: float, hi: float) -> float:
    """Where ``value`` lies between ``lo`` and ``hi`` (0 to 1), without overflow near the float limits.

    ``hi - lo`` overflows to infinity when the two are near +-1.8e308; their halves never do.
    An axis of one value (``hi == lo``) puts it in the middle.
    """
    span = hi / 2 - lo / 2
    return 0.5 if span <= 0 else (value / 2 - lo / 2) / span


def nice_ticks(lo: float, hi: float, *, count: int = 5) -> list[float]:
    """About ``count`` round values (1, 2 or 5 times a power of ten apart) between ``lo`` and ``hi``.

    The axis labels of the SVG plot. ``lo`` and ``hi`` are finite, ``lo < hi``.
    """
    span = hi / 2 - lo / 2  # half the span: finite for any two finite floats
    raw = span / max(1, count - 1) * 2  # the step before rounding (infinite only for two ticks over it all)
    if not math.isfinite(raw) or raw <= 0:
        return [lo, hi] if hi > lo else [lo]
    magnitude = 10.0 ** math.floor(math.log10(raw))
    # The round step nearest the raw one: 1, 2, 5 or 10 times the power of ten below it.
    step = magnitude * next(m for limit, m in ((1.5, 1), (3.0, 2), (7.0, 5), (math.inf, 10)) if raw / magnitude < limit)
    if not math.isfinite(step):
        return [lo, hi]
    first = math.ceil(lo / step)
    ticks = []
    for k in range(first, first + 2 * count + 2):  # bounded: at most 2 * count + 2 ticks
        value = k * step
        if value > hi + step * 1e-9:
            break
        ticks.append(0.0 if abs(value) < step * 1e-9 else value)
    return ticks or [lo, hi]


def _curves(rows: list[dict[str, Any]], metric: str) -> dict[str, Points]:
    """Module label -> points of ``metric``: the exact key (label ``""``), else every ``.../metric`` key."""
    keys = {key for row in rows for key in row}
    if metric in keys:
        return {"": _series(rows, metric)}
    suffix = "/" + metric
    out: dict[str, Points] = {}
    for key in sorted(k for k in keys if k.endswith(suffix)):
        label = key[: -len(suffix)]
        out[label.removeprefix("learners/")] = _series(rows, key)
    return out


def build_panels(runs: list[list[dict[str, Any]]], metrics: list[str], *, required: int) -> list[Panel]:
    """The panels of ``metrics`` over ``runs`` (each a list of metrics rows).

    Args:
        runs: The rows of each run.
        metrics: Metric names; the first is the main panel.
        required: The first ``required`` metrics must have values in some run;
            later ones without values are left out.

    Raises:
        ValueError: A required metric without values in any run.
    """
    panels = []
    for index, metric in enumerate(metrics):
        panel = Panel(metric)
        for run_index, rows in enumerate(runs):
            for module, points in _curves(rows, metric).items():
                if points:
                    panel.curves.append(Curve(run_index, module, points))
        if panel.curves:
            panels.append(panel)
        elif index < required:
            raise ValueError(f"No run has values of metric {metric!r}.")
    return panels


def _label(labels: list[str], curve: Curve, panel: Panel, *, with_run: bool) -> str:
    parts = [labels[curve.run]] if with_run else []
    if curve.module and len(panel.modules) > 1:
        parts.append(curve.module)
    return " ".join(parts)


def _tick_text(value: float) -> str:
    """A tick label as the PNG's (matplotlib's EngFormatter): ``25 k``, ``1.5 M``, ``0.002``; never ``1e+04``."""
    for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.4g} {prefix}"
    return f"{value:.4g}"


def _write_svg(path: str, panels: list[Panel], labels: list[str]) -> None:
    width, height, pad, head = 640, 300, 56, 32
    total = head + height * len(panels)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{total}" font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{total}" fill="white"/>',
        # The figure's title, as the PNG's suptitle: which runs these are.
        f'<text x="{width / 2}" y="{head - 10}" text-anchor="middle" font-size="14">'
        f"{escape('cairn plot: ' + ', '.join(labels))}</text>",
    ]
    for index, panel in enumerate(panels):
        top = head + index * height
        points = [p for curve in panel.curves for p in curve.points]
        x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
        y0, y1 = min(p[1] for p in points), max(p[1] for p in points)
        # A flat axis is widened by 1 (which a value near the float limits does not notice: it
        # is then drawn in the middle, see _fraction).
        x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1)

        def sx(x: float, lo: float = x0, hi: float = x1) -> float:
            return pad + _fraction(x, lo, hi) * (width - 2 * pad)

        def sy(y: float, lo: float = y0, hi: float = y1, t: int = top) -> float:
            return t + height - pad - _fraction(y, lo, hi) * (height - 2 * pad)

        parts.append(
            f'<rect x="{pad}" y="{top + pad}" width="{width - 2 * pad}" '
            f'height="{height - 2 * pad}" fill="none" stroke="#888"/>'
        )
        parts.append(f'<text x="{pad}" y="{top + pad - 8}" font-size="13">{escape(panel.metric)}</text>')
        for value in nice_ticks(y0, y1):
            y = sy(value)
            parts.append(f'<line x1="{pad}" x2="{width - pad}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
            parts.append(f'<text x="{pad - 4}" y="{y + 4:.1f}" text-anchor="end">{_tick_text(value)}</text>')
        for value in nice_ticks(x0, x1):
            x = sx(value)
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top + pad}" y2="{top + height - pad}" stroke="#ddd"/>')
            parts.append(
                f'<text x="{x:.1f}" y="{top + height - pad + 14}" text-anchor="middle">{_tick_text(value)}</text>'
            )
        parts.append(f'<text x="{width / 2}" y="{top + height - pad + 30}" text-anchor="middle">env steps</text>')
        modules = panel.modules
        for curve in panel.curves:
            color = _COLORS[curve.run % len(_COLORS)]
            dash = _SVG_DASHES[modules.index(curve.module) % len(_SVG_DASHES)]
            coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in curve.points)
            dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
            title = _label(labels, curve, panel, with_run=True)
            parts.append(
                f'<polyline fill="none" stroke="{color}" stroke-width="1.5"{dash_attr} points="{coords}">'
                f"<title>{escape(title)}</title></polyline>"
            )
    parts.append("</svg>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts) + "\n")


def _write_matplotlib(path: str, panels: list[Panel], labels: list[str]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import EngFormatter
    except ImportError as err:
        raise ValueError(
            f"Writing {os.path.basename(path)} needs matplotlib ({err}). Run: "
            "pip install 'cairn-rl[plot]', or write an .svg (-o curves.svg), which needs nothing."
        ) from err
    try:
        with warnings.catch_warnings():
            # Values near the float limits overflow inside matplotlib's autoscaling: the error
            # below says so in one line, its RuntimeWarnings would only add noise.
            warnings.simplefilter("ignore", RuntimeWarning)
            _draw(plt, EngFormatter, path, panels, labels)
    except (ValueError, OverflowError) as err:
        largest = max(abs(v) for panel in panels for c in panel.curves for p in c.points for v in p)
        raise ValueError(
            f"matplotlib cannot draw {os.path.basename(path)} ({type(err).__name__}: {err}); the largest value "
            f"is {largest:.4g}. Write an .svg (-o curves.svg), which draws any finite value, or --metric "
            "another metric."
        ) from err


def _draw(plt: Any, EngFormatter: Any, path: str, panels: list[Panel], labels: list[str]) -> None:
    """Draw ``panels`` with matplotlib's pyplot into ``path`` (see :func:`_write_matplotlib`)."""
    small = panels[1:]
    columns = max(1, min(3, len(small)))
    small_rows = math.ceil(len(small) / columns)
    fig = plt.figure(figsize=(9, 3.8 + 2.3 * small_rows), dpi=100)
    try:
        grid = fig.add_gridspec(1 + small_rows, columns, height_ratios=[1.9] + [1.0] * small_rows)
        axes = [fig.add_subplot(grid[0, :])]
        axes += [fig.add_subplot(grid[1 + i // columns, i % columns]) for i in range(len(small))]
        several_runs = len(labels) > 1
        for index, (ax, panel) in enumerate(zip(axes, panels, strict=True)):
            is_main = index == 0
            bottom_row = is_main or (index - 1) // columns == small_rows - 1
            modules = panel.modules
            names = [_label(labels, curve, panel, with_run=is_main and several_runs) for curve in panel.curves]
            seen: set[str] = set()
            for curve, name in zip(panel.curves, names, strict=True):
                shown = name if name and name not in seen else None  # one legend entry per name
                seen.add(name)
                ax.plot(
                    [p[0] for p in curve.points],
                    [p[1] for p in curve.points],
                    color=_COLORS[curve.run % len(_COLORS)],
                    linestyle=_STYLES[modules.index(curve.module) % len(_STYLES)],
                    linewidth=1.6 if is_main else 1.1,
                    label=shown,
                )
            ax.set_title(panel.metric, fontsize=11 if is_main else 9)
            if is_main:
                ax.set_ylabel(panel.metric, fontsize=9)
            ax.xaxis.set_major_formatter(EngFormatter())
            ax.tick_params(labelsize=9 if is_main else 7)
            ax.grid(alpha=0.3)
            if bottom_row:
                ax.set_xlabel("env steps", fontsize=9 if is_main else 8)
            if len(set(names)) > 1:
                ax.legend(fontsize=8 if is_main else 6)
        fig.suptitle(f"cairn plot: {', '.join(labels)}", fontsize=12)
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)  # also when drawing failed: pyplot keeps every open figure


def _run_labels(runs: list[str]) -> list[str]:
    """Short names for the runs: folder names, or the paths as given when those collide."""
    names = []
    for run in runs:
        path = os.path.normpath(run)
        if os.path.basename(path) == METRICS_FILE:
            path = os.path.dirname(path) or "."
        names.append(os.path.basename(os.path.abspath(path)))
    if len(set(names)) == len(names):
        return names
    return [os.path.normpath(r) for r in runs]


def cmd_plot(args: argparse.Namespace) -> int:
    """Handler of ``cairn plot``; returns the exit status."""
    if args.metric:
        metrics: list[str] = list(args.metric)
        required = len(metrics)
    else:
        metrics, required = [MAIN_METRIC, *SMALL_METRICS], 1
    rows_by_run = [read_metrics(run) for run in args.run_dir]
    panels = build_panels(rows_by_run, metrics, required=required)
    labels = _run_labels(args.run_dir)
    first = args.run_dir[0]
    output = args.output or os.path.join(first if os.path.isdir(first) else os.path.dirname(first) or ".", "curves.png")
    if output.lower().endswith(".svg"):
        _write_svg(output, panels, labels)
    else:
        _write_matplotlib(output, panels, labels)
    main = panels[0]
    for index, (run, rows) in enumerate(zip(args.run_dir, rows_by_run, strict=True)):
        series = [c.points for c in main.curves if c.run == index]
        if series:
            last = series[0][-1]
            best = max(y for s in series for _, y in s)
            steps = f"{int(last[0])}" if abs(last[0]) < 1e15 else f"{last[0]:.4g}"
            print(
                f"{safe_text(run)}: {len(rows)} iterations, {steps} env steps, "
                f"{safe_text(main.metric)} last {last[1]:.4g}, best {best:.4g}"
            )
        else:
            print(f"{safe_text(run)}: {len(rows)} iterations, no {safe_text(main.metric)}")
    print(f"wrote {safe_text(output)}", file=sys.stderr)
    return 0


def _plot_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", nargs="+", help="a --checkpoint-dir of cairn train (or its metrics.jsonl)")
    p.add_argument(
        "-o",
        "--output",
        default=None,
        help="image file: .png (default RUN_DIR/curves.png) or .pdf with matplotlib, .svg without, e.g. -o c.svg",
    )
    p.add_argument(
        "--metric",
        action="append",
        default=None,
        help=(
            "metric to plot instead of the defaults, repeatable; the first is the main panel; "
            "a bare name such as entropy matches every learners/<module>/entropy, e.g. --metric entropy"
        ),
    )


COMMAND = Command(
    "plot",
    "plot learning curves of training runs",
    _plot_arguments,
    cmd_plot,
    description=(
        "Plot the learning curves of cairn train runs (RUN_DIR/metrics.jsonl) against env steps: "
        "env_runners/episode_return_mean in the main panel, the policy and value losses and the entropy "
        "below. Several runs go on one figure, one colour each."
    ),
    examples=(
        "cairn plot runs/cartpole                       # runs/cartpole/curves.png",
        "cairn plot runs/seed0 runs/seed1 -o compare.svg # no matplotlib needed",
        "cairn plot runs/cartpole --metric env_runners/episode_return_mean --metric entropy",
    ),
)
"""The ``plot`` command."""
