"""``cairn plot``: learning curves of ``cairn train`` runs.

Reads ``RUN_DIR/metrics.jsonl`` (one JSON object per training iteration, as
written by ``cairn train --checkpoint-dir RUN_DIR``) and draws the chosen
metrics against env steps. A ``.svg`` output is written without any plotting
library; other formats (``.png``, ``.pdf``) use matplotlib
(``pip install "cairn-rl[plot]"``). A one-line summary per run goes to stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any
from xml.sax.saxutils import escape

__all__ = ["cmd_plot", "load_metrics", "register"]

METRICS_FILE = "metrics.jsonl"
X_KEY = "num_env_steps_sampled_lifetime"
_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``plot`` subcommand to the ``cairn`` parser."""
    p = subparsers.add_parser(
        "plot",
        help="plot learning curves of training runs",
        description="Plot metrics of cairn train runs (RUN_DIR/metrics.jsonl) against env steps.",
    )
    p.add_argument("run_dir", nargs="+", help="a --checkpoint-dir of cairn train (or its metrics.jsonl)")
    p.add_argument("-o", "--output", default=None, help="image file (default RUN_DIR/curves.png)")
    p.add_argument(
        "--metric",
        action="append",
        default=None,
        help="metric to plot, repeatable (default episode_return_mean)",
    )
    p.set_defaults(func=cmd_plot)


def load_metrics(run: str) -> list[dict[str, Any]]:
    """The rows of a run's ``metrics.jsonl`` (a folder or the file itself).

    Raises:
        FileNotFoundError: No metrics file.
        ValueError: A line that is not JSON (other than a last line cut by a crash).
    """
    path = os.path.join(run, METRICS_FILE) if os.path.isdir(run) else run
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"No {METRICS_FILE} in {run}: plot reads the metrics that "
            "'cairn train --checkpoint-dir DIR' writes to DIR/metrics.jsonl."
        )
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            if number == len(lines):
                break  # the last line of a run killed while writing it
            raise ValueError(f"{path}, line {number}: not JSON ({err}).") from err
    return rows


def _series(rows: list[dict[str, Any]], metric: str) -> list[tuple[float, float]]:
    points = []
    for i, row in enumerate(rows):
        y = row.get(metric)
        x = row.get(X_KEY, i)
        if isinstance(y, int | float) and math.isfinite(y) and isinstance(x, int | float):
            points.append((float(x), float(y)))
    return points


def _write_svg(path: str, panels: list[tuple[str, dict[str, list[tuple[float, float]]]]]) -> None:
    width, height, pad = 640, 300, 56
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height * len(panels)}" font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height * len(panels)}" fill="white"/>',
    ]
    for index, (metric, runs) in enumerate(panels):
        top = index * height
        points = [p for series in runs.values() for p in series]
        if not points:
            continue
        x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
        y0, y1 = min(p[1] for p in points), max(p[1] for p in points)
        x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1)

        def sx(x: float, lo: float = x0, hi: float = x1) -> float:
            return pad + (x - lo) / (hi - lo) * (width - 2 * pad)

        def sy(y: float, lo: float = y0, hi: float = y1, t: int = top) -> float:
            return t + height - pad + (y - lo) / (hi - lo) * (2 * pad - height)

        parts.append(
            f'<rect x="{pad}" y="{top + pad}" width="{width - 2 * pad}" '
            f'height="{height - 2 * pad}" fill="none" stroke="#888"/>'
        )
        parts.append(f'<text x="{pad}" y="{top + pad - 8}">{escape(metric)}</text>')
        for value, anchor in ((y0, "end"), (y1, "end")):
            parts.append(f'<text x="{pad - 4}" y="{sy(value) + 4:.1f}" text-anchor="{anchor}">{value:.4g}</text>')
        for value in (x0, x1):
            parts.append(
                f'<text x="{sx(value):.1f}" y="{top + height - pad + 14}" text-anchor="middle">{value:.4g}</text>'
            )
        parts.append(f'<text x="{width / 2}" y="{top + height - pad + 30}" text-anchor="middle">{X_KEY}</text>')
        for color, (run, series) in zip(_COLORS * 10, runs.items(), strict=False):
            if not series:
                continue
            coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in series)
            parts.append(
                f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{coords}">'
                f"<title>{escape(run)}</title></polyline>"
            )
    parts.append("</svg>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts) + "\n")


def _write_matplotlib(path: str, panels: list[tuple[str, dict[str, list[tuple[float, float]]]]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ValueError(
            f"Writing {os.path.basename(path)} needs matplotlib ({err}). Run: "
            "pip install 'cairn-rl[plot]', or write an .svg (-o curves.svg), which needs nothing."
        ) from err
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 3 * len(panels)), squeeze=False)
    for ax, (metric, runs) in zip(axes[:, 0], panels, strict=True):
        for run, series in runs.items():
            if series:
                ax.plot([p[0] for p in series], [p[1] for p in series], label=run)
        ax.set_title(metric)
        ax.set_xlabel(X_KEY)
        ax.grid(alpha=0.3)
        if len(runs) > 1:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def cmd_plot(args: argparse.Namespace) -> int:
    """Handler of ``cairn plot``; returns the exit status."""
    metrics: list[str] = args.metric or ["episode_return_mean"]
    rows_by_run = {run: load_metrics(run) for run in args.run_dir}
    panels = [(metric, {run: _series(rows, metric) for run, rows in rows_by_run.items()}) for metric in metrics]
    for metric, runs in panels:
        if not any(runs.values()):
            raise ValueError(f"No run has values of metric {metric!r}.")
    first = args.run_dir[0]
    output = args.output or os.path.join(first if os.path.isdir(first) else os.path.dirname(first) or ".", "curves.png")
    if output.lower().endswith(".svg"):
        _write_svg(output, panels)
    else:
        _write_matplotlib(output, panels)
    for run, rows in rows_by_run.items():
        series = _series(rows, metrics[0])
        if series:
            best = max(y for _, y in series)
            print(
                f"{run}: {len(rows)} iterations, {int(series[-1][0])} env steps, "
                f"{metrics[0]} last {series[-1][1]:.4g}, best {best:.4g}"
            )
    print(f"wrote {output}", file=sys.stderr)
    return 0
