"""The release report's figures: PNGs drawn with matplotlib's Agg canvas at a fixed size, without the
matplotlib version in their metadata, so the same counts give the same bytes."""

from __future__ import annotations

import base64
import io
from collections import Counter
from typing import Any

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from dareforge.publish.source_split import SPLITS

DPI = 100
WIDTH = 8.0  # inches; every figure is WIDTH x its fixed height at DPI
SPLIT_COLORS = {"train": "#4c78a8", "test": "#f58518"}
ACCEPTED, REJECTED = "#54a24b", "#c44e52"
BASELINE, STRONG = "#9d9d9d", "#4c78a8"

_RC = {
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "axes.edgecolor": "#888888",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.color": "#e6e6e6",
    "grid.linewidth": 0.8,
    "xtick.color": "#444444",
    "ytick.color": "#444444",
    "legend.frameon": False,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "savefig.transparent": False,
}


def _png(fig: Figure) -> str:
    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _figure(height: float, **subplots: Any) -> tuple[Figure, Any]:
    fig = Figure(figsize=(WIDTH, height), dpi=DPI, layout="constrained")
    return fig, fig.subplots(**subplots)


def funnel_plot(stages: list[tuple[str, int]]) -> str:
    with matplotlib.rc_context(_RC):
        fig, ax = _figure(2.9)
        labels = [label for label, _ in stages]
        values = [n for _, n in stages]
        top = max(values) or 1
        colors = ["#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c"][: len(stages)]
        bars = ax.barh(range(len(stages)), values, color=colors, height=0.65)
        ax.set_yticks(range(len(stages)), labels)
        ax.invert_yaxis()
        ax.set_xlim(0, top * 1.18)
        ax.grid(axis="y", visible=False)
        ax.set_xlabel("sources")
        for bar, n in zip(bars, values, strict=True):
            share = f" ({n / values[0]:.0%})" if values[0] else ""
            ax.text(
                bar.get_width() + top * 0.01, bar.get_y() + bar.get_height() / 2, f"{n}{share}", va="center"
            )
        ax.set_title("Sources through the pipeline", loc="left")
        return _png(fig)


def family_plot(families: list[str], counts: dict[str, dict[str, int]]) -> str:
    with matplotlib.rc_context(_RC):
        fig, ax = _figure(3.0)
        x = range(len(families))
        bottom = [0] * len(families)
        for side in SPLITS:
            values = [counts[f].get(side, 0) for f in families]
            ax.bar(x, values, bottom=bottom, color=SPLIT_COLORS.get(side), width=0.6, label=side)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        top = max(bottom) if bottom else 1
        for i, total in enumerate(bottom):
            ax.text(i, total + top * 0.02, str(total), ha="center", va="bottom")
        ax.set_xticks(list(x), families)
        ax.set_ylim(0, top * 1.15 or 1)
        ax.grid(axis="x", visible=False)
        ax.set_ylabel("tasks")
        ax.legend(loc="lower right", ncols=len(SPLITS), bbox_to_anchor=(1.0, 1.0))
        ax.set_title("Released tasks per family and split", loc="left")
        return _png(fig)


def _jitter(i: int) -> float:
    return ((i * 0.6180339887) % 1.0 - 0.5) * 0.16


def score_plot(groups: list[tuple[str, str, list[tuple[float, float]]]]) -> str:
    with matplotlib.rc_context(_RC):
        fig, axes = _figure(3.2, ncols=len(groups), squeeze=False)
        for ax, (family, metric, pairs) in zip(axes[0], groups, strict=True):
            baseline = [b for b, _ in pairs]
            strong = [s for _, s in pairs]
            for i, (b, s) in enumerate(pairs):
                ax.plot([_jitter(i), 1 + _jitter(i)], [b, s], color="#bbbbbb", linewidth=0.8, zorder=1)
            ax.boxplot(
                [baseline, strong],
                positions=[0, 1],
                widths=0.45,
                showfliers=False,
                medianprops={"color": "#222222"},
                boxprops={"color": "#666666"},
                whiskerprops={"color": "#666666"},
                capprops={"color": "#666666"},
                zorder=2,
            )
            for x0, values, color in ((0, baseline, BASELINE), (1, strong, STRONG)):
                xs = [x0 + _jitter(i) for i in range(len(values))]
                ax.scatter(xs, values, s=18, color=color, edgecolors="white", linewidths=0.5, zorder=3)
            ax.set_xticks([0, 1], ["baseline", "strong"])
            ax.set_xlim(-0.6, 1.6)
            ax.grid(axis="x", visible=False)
            ax.set_title(f"{family} (n={len(pairs)})")
            ax.set_ylabel(metric)
        return _png(fig)


def validation_plot(families: list[str], counts: Counter) -> str:
    with matplotlib.rc_context(_RC):
        fig, ax = _figure(0.9 + 0.38 * len(families))
        y = range(len(families))
        accepted = [counts[(f, True)] for f in families]
        rejected = [counts[(f, False)] for f in families]
        ax.barh(y, accepted, color=ACCEPTED, height=0.6, label="accepted")
        ax.barh(y, rejected, left=accepted, color=REJECTED, height=0.6, label="rejected")
        for i, (a, r) in enumerate(zip(accepted, rejected, strict=True)):
            if a:
                ax.text(a / 2, i, str(a), ha="center", va="center", color="white", fontweight="bold")
            if r:
                ax.text(a + r / 2, i, str(r), ha="center", va="center", color="white", fontweight="bold")
        ax.set_yticks(list(y), families)
        ax.invert_yaxis()
        ax.grid(axis="y", visible=False)
        ax.set_xlabel("tasks")
        ax.set_xlim(0, max((a + r for a, r in zip(accepted, rejected, strict=True)), default=1) * 1.05 or 1)
        ax.legend(loc="lower right", ncols=2, bbox_to_anchor=(1.0, 1.0))
        ax.set_title("Validation verdicts per family", loc="left")
        return _png(fig)


def ladder_plot(ladders: list[tuple[str, int, list[dict[str, Any]]]]) -> str:
    """Per family (`ladders`: family, its tasks, its rungs in ladder order as `skill` sums them up): each rung's
    mean score over the tasks that scored it, in a band from the mean low to the mean high end of the
    intervals."""
    with matplotlib.rc_context(_RC):
        fig, axes = _figure(3.2, ncols=len(ladders), squeeze=False, sharey=True)
        for ax, (family, n, rungs) in zip(axes[0], ladders, strict=True):
            scored = [(i, r) for i, r in enumerate(rungs) if r["score"] is not None]
            xs = [i for i, _ in scored]
            ax.fill_between(
                xs, [r["low"] for _, r in scored], [r["high"] for _, r in scored], color=STRONG, alpha=0.2
            )
            ax.plot(xs, [r["score"] for _, r in scored], color=STRONG, marker="o", markersize=4)
            ax.set_xticks(range(len(rungs)), [r["name"] for r in rungs], rotation=30, ha="right")
            ax.grid(axis="x", visible=False)
            ax.set_title(f"{family} (n={n})")
        axes[0][0].set_ylabel("mean score")
        return _png(fig)


def distribution_plot(families: list[str], bins: dict[str, dict[str, list[int]]]) -> str:
    """Histograms over [0, 1] of each measure in `bins` (measure -> family -> counts per equal-width bin), one
    panel per measure, families stacked."""
    with matplotlib.rc_context(_RC):
        fig, axes = _figure(2.8, ncols=len(bins), squeeze=False)
        for ax, (measure, counts) in zip(axes[0], bins.items(), strict=True):
            n = len(counts[families[0]])
            lefts, bottom = [k / n for k in range(n)], [0] * n
            for i, family in enumerate(families):
                ax.bar(
                    lefts,
                    counts[family],
                    width=1 / n,
                    bottom=bottom,
                    align="edge",
                    color=f"C{i}",
                    edgecolor="white",
                    label=family,
                )
                bottom = [b + c for b, c in zip(bottom, counts[family], strict=True)]
            ax.set_xlim(0, 1)
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(axis="x", visible=False)
            ax.set_xlabel(measure)
            ax.set_ylabel("released tasks")
        axes[0][-1].legend(loc="upper right")
        return _png(fig)
