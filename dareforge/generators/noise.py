"""IF noise rows, as in DARE-bench: a share of training rows get values the stated filters remove.

The filters' bounds are the observed ranges of the clean rows, so the clean rows all pass and every noisy row
fails at least one filter: an agent that applies the filters in order trains on exactly the clean rows, and
one that skips them trains on corrupted data and misses the reference predictions.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dareforge.reference_solutions.spec import CategoryFilter, IFSpec, RangeFilter


def keep_mask(frame: pd.DataFrame, filters: list[RangeFilter | CategoryFilter]) -> pd.Series:
    """Rows the filters keep (missing values always pass), with the same semantics as the reference code."""
    keep = pd.Series(True, index=frame.index)
    for f in filters:
        values = frame[f.column]
        if isinstance(f, RangeFilter):
            inside = pd.to_numeric(values, errors="coerce").between(f.low, f.high)
        else:
            inside = values.astype(str).isin(f.allowed)
        keep &= values.isna() | inside
    return keep


def add_noise(train: pd.DataFrame, spec: IFSpec, share: float, seed: int) -> tuple[pd.DataFrame, np.ndarray]:
    """Corrupt `share` of the rows in place of the originals; returns the noisy frame and the corrupted positions."""
    rng = np.random.default_rng(seed)
    count = round(len(train) * share)
    positions = (
        np.sort(rng.choice(len(train), size=count, replace=False)) if count else np.array([], dtype=int)
    )
    noisy = train.copy()
    chosen = rng.integers(len(spec.filters), size=count)
    for index, f in enumerate(spec.filters):
        rows = positions[chosen == index]
        if not len(rows):
            continue
        column = noisy.columns.get_loc(f.column)
        if isinstance(f, RangeFilter):
            span = (f.high - f.low) or abs(f.high) or 1.0
            offsets = np.round(span * (0.5 + rng.random(len(rows))), 4)
            values = np.where(rng.random(len(rows)) < 0.5, f.high + offsets, f.low - offsets)
            noisy[f.column] = noisy[f.column].astype("float64")
        else:
            values = np.array([f"unseen-{n}" for n in rng.integers(1000, 9999, size=len(rows))], dtype=object)
            noisy[f.column] = noisy[f.column].astype(object)
        noisy.iloc[rows, column] = values
    kept = keep_mask(noisy, spec.filters)
    expected = np.ones(len(noisy), dtype=bool)
    expected[positions] = False
    if not np.array_equal(kept.to_numpy(), expected):
        raise ValueError(f"noise rows for seed {seed} do not line up with the filters; a spec sampling bug")
    return noisy, positions
