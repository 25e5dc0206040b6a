"""The solver ladder as a picture: one row per rung, its score as a dot and its bootstrap interval as a bar,
on the task's own metric scale, with the pass bar as a line. Drawn server-side as inline SVG (no script: the
pages' Content-Security-Policy forbids it); the template writes the elements, so every label is escaped like
any other text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

WIDTH, ROW, LEFT, RIGHT, TOP = 660, 26, 200, 20, 24
"""The plot's width, a rung's row height, the label column, the right margin and the axis band (pixels)."""
LABEL_CHARS = 26
"""A rung's label is cut to what fits the label column; its title (a tooltip) keeps the whole name."""


@dataclass(frozen=True)
class Rung:
    name: str
    label: str
    score: float
    low: float
    high: float
    y: float
    x: float
    x_low: float
    x_high: float


@dataclass(frozen=True)
class LadderPlot:
    width: int
    height: int
    rungs: list[Rung]
    ticks: list[tuple[float, str]]
    """(x, label) of the axis ticks."""
    bar_x: float | None
    bar: float | None
    top: int = TOP
    left: int = LEFT


def ladder_plot(rungs: list[dict[str, Any]], bar: float | None) -> LadderPlot | None:
    """The plot of scored `rungs` (`validators.gate.ladder_rungs`: weakest first) and the pass `bar`; None
    when no rung was scored."""
    if not rungs:
        return None
    values = [v for r in rungs for v in (r["low"], r["high"], r["score"])] + (
        [bar] if bar is not None else []
    )
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.05 or 0.05
    lo, hi = lo - pad, hi + pad
    span = WIDTH - LEFT - RIGHT

    def x(value: float) -> float:
        return round(LEFT + (value - lo) / (hi - lo) * span, 1)

    drawn = [
        Rung(
            str(r["name"]),
            _cut(str(r["name"])),
            r["score"],
            r["low"],
            r["high"],
            TOP + ROW * i + ROW / 2,
            x(r["score"]),
            x(r["low"]),
            x(r["high"]),
        )
        for i, r in enumerate(rungs)
    ]
    ticks = [(x(lo + (hi - lo) * k / 4), f"{lo + (hi - lo) * k / 4:.3g}") for k in range(5)]
    return LadderPlot(WIDTH, TOP + ROW * len(rungs) + 8, drawn, ticks, None if bar is None else x(bar), bar)


def _cut(name: str) -> str:
    return name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "…"
