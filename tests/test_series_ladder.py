"""A forecast's solver ladder: rungs of different kinds that a seasonal series with a trend tells apart, and a
test window of whole seasons, larger on a short series."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from dareforge.reference_solutions.forecast import (
    clock,
    held_out_steps,
    is_dated,
    naive_forecasts,
    season_length,
)
from dareforge.reference_solutions.ladder import model_rungs
from dareforge.reference_solutions.reference_code import StrongSpec, strong_reference_code

MONTHS = 120
HELD_OUT = 24


def _seasonal(entities: tuple[str, ...] = ("a",), seed: int = 0) -> pd.DataFrame:
    """Monthly series with a trend, a yearly cycle and noise; each entity on its own level."""
    rng = np.random.default_rng(seed)
    frames = []
    for i, name in enumerate(entities):
        t = np.arange(MONTHS)
        y = 100 * (i + 1) + 0.8 * t + 12 * np.sin(2 * np.pi * t / 12) + rng.normal(0, 1.5, MONTHS)
        when = pd.date_range("2000-01-01", periods=MONTHS, freq="MS").strftime("%Y-%m-%d")
        frames.append(pd.DataFrame({"when": when, "shop": name, "sales": y.round(3)}))
    frame = pd.concat(frames).sort_values(["when", "shop"], kind="stable").reset_index(drop=True)
    frame.insert(0, "id", range(len(frame)))
    return frame


def _spec(entity: str | None) -> StrongSpec:
    return StrongSpec(
        classification=False,
        id_column="id",
        targets=["sales"],
        numeric=[],
        categorical=[entity] if entity else [],
        dates=["when"],
        output_keys=["id"],
        time_column="when",
        entity=entity,
    )


def _run(tmp_path, code: str, train: pd.DataFrame, test: pd.DataFrame) -> np.ndarray:
    train.to_csv(tmp_path / "train.csv", index=False)
    test.drop(columns=["sales"]).to_csv(tmp_path / "test.csv", index=False)
    (tmp_path / "rung.py").write_text(code)
    done = subprocess.run([sys.executable, "rung.py"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    predicted = pd.read_csv(tmp_path / "predictions.csv")
    assert predicted["id"].tolist() == test["id"].tolist()
    return predicted["sales"].to_numpy(dtype=float)


def _split(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    cut = sorted(frame["when"].unique())[-HELD_OUT]
    return frame[frame["when"] < cut], frame[frame["when"] >= cut]


def test_a_forecasts_rungs_are_of_different_kinds_and_only_the_top_one_is_the_strong_reference():
    spec = _spec(None)
    rungs = model_rungs(spec)
    assert [r.name for r in rungs] == ["smoothing", "linear", "strong"]
    codes = [r.code(spec) for r in rungs]
    assert len(set(codes)) == len(codes)
    assert codes[-1] == strong_reference_code(spec)
    assert "ExponentialSmoothing" in codes[0] and "Ridge(alpha=1.0)" in codes[1]
    # A table that is no series keeps the tabular ladder.
    tabular = StrongSpec(False, "id", ["y"], ["x"], [], [], ["id"], None)
    assert [r.name for r in model_rungs(tabular)] == ["linear", "tree", "boosted", "boosted+stopping"]


@pytest.mark.parametrize("entity", [None, "shop"])
def test_the_rungs_are_told_apart_on_a_seasonal_series_with_a_trend(tmp_path, entity):
    """Seasonal naive misses the trend, the linear model's one trend misses each shop's level, exponential
    smoothing per series follows both: their errors differ by more than the noise."""
    frame = _seasonal(("a", "b") if entity else ("a",))
    train, test = _split(frame)
    truth = test["sales"].to_numpy(dtype=float)
    naive = naive_forecasts(train, test, "when", "sales", entity)["seasonal naive"]
    smoothing, linear = (
        _run(tmp_path, r.code(_spec(entity)), train, test) for r in model_rungs(_spec(entity))[:2]
    )

    def mae(predicted: np.ndarray) -> float:
        return float(np.mean(np.abs(truth - predicted)))

    # The trend over a year is 0.8 * 12 ~ 10, the noise's MAE ~ 1.2: seasonal naive is off by about the trend.
    assert mae(smoothing) < 0.5 * mae(naive)
    assert mae(linear) < 0.5 * mae(naive)
    assert np.mean(np.abs(smoothing - linear)) > 0.5  # different models, not one model twice


def test_the_strong_reference_chooses_smoothing_where_it_forecasts_the_latest_training_rows_best(tmp_path):
    """A seasonal series flat for its first half that then climbs: the linear model's one slope is too shallow
    for the climb and trees carry its last level flat, while Holt-Winters follows the recent slope. The strong
    reference used to choose between those two only and lost to the smoothing rung by a wide margin."""
    rng = np.random.default_rng(1)
    t = np.arange(MONTHS)
    y = 100 + 3.0 * np.clip(t - 45, 0, None) + 6 * np.sin(2 * np.pi * t / 12) + rng.normal(0, 0.5, MONTHS)
    when = pd.date_range("2000-01-01", periods=MONTHS, freq="MS").strftime("%Y-%m-%d")
    frame = pd.DataFrame({"id": t, "when": when, "sales": y.round(3)})
    train, test = _split(frame)
    smoothing, linear, strong = (
        _run(tmp_path, r.code(_spec(None)), train, test) for r in model_rungs(_spec(None))
    )
    truth = test["sales"].to_numpy(dtype=float)

    def mae(predicted: np.ndarray) -> float:
        return float(np.mean(np.abs(truth - predicted)))

    assert np.allclose(strong, smoothing)  # the same choice, not another model that happens to be close
    assert mae(strong) < 0.5 * mae(linear)


def test_the_test_window_is_whole_seasons_and_larger_on_a_short_series():
    def steps(n: int, freq: str, share: float = 0.2) -> int:
        return held_out_steps(clock(pd.Series(pd.date_range("2000-01-01", periods=n, freq=freq))), share)

    assert steps(60, "MS") == 12  # a fifth of five years is one year
    assert steps(1000, "D") == 203  # 200 days, up to 29 whole weeks
    # 87 months: a fifth (17) leaves every interval wide; 30 would end mid-year, so two whole years
    assert steps(87, "MS") == 24
    # 40 years, no season: at least 30 steps where two thirds stay for training, so a third
    assert steps(40, "YS") == 13
    assert steps(100, "YS") == 30
    assert held_out_steps(np.array([1.0, 2.0]), 0.2) == 1  # never the whole series
    assert held_out_steps(np.repeat(np.arange(0.0, 500.0, 10.0), 3), 0.2) == 16  # distinct times, not rows


def test_years_as_plain_numbers_have_no_season_and_days_keep_theirs():
    """A yearly series whose time column holds 1871, 1872... steps by 1 like a daily one does in days: read as
    days it got a 7-step 'season' in the seasonal-naive bar and in the test window; plain numbers have none."""
    years = pd.Series(np.arange(1871, 1971))
    days = pd.Series(pd.date_range("2020-01-01", periods=100, freq="D"))
    assert not is_dated(years) and is_dated(days) and is_dated(days.dt.strftime("%Y-%m-%d"))
    assert season_length(clock(years), is_dated(years)) == 1
    assert season_length(clock(days), is_dated(days)) == 7
    # A short series holds out MIN_TEST_STEPS (30) of its times: in whole weeks for days, as they come for years.
    assert held_out_steps(clock(years), 0.2, is_dated(years)) == 30
    assert held_out_steps(clock(days), 0.2, is_dated(days)) == 28
    # The seasonal-naive forecast of a yearly series repeats the last year, not the value seven years before.
    train = pd.DataFrame({"year": years[:80], "y": np.arange(80.0)})
    test = pd.DataFrame({"year": years[80:83]})
    assert list(naive_forecasts(train, test, "year", "y", None)["seasonal naive"]) == [79.0, 79.0, 79.0]


def test_a_series_shorter_than_two_seasons_and_its_held_out_share_has_no_season():
    """80 weeks hold one yearly cycle and a half: no forecaster estimates a 52-week season from it, and the
    series was skipped for want of 130 weeks. It is a series without season; 130 weeks keep theirs."""
    from dareforge.families.family import SERIES

    def season(n: int, freq: str) -> int:
        when = pd.Series(pd.date_range("2020-01-06", periods=n, freq=freq))
        return season_length(clock(when), is_dated(when))

    assert season(80, "W-MON") == 1 and season(130, "W-MON") == 52
    assert season(24, "MS") == 1 and season(30, "MS") == 12
    assert SERIES.periods(season(80, "W-MON"), 0.2) <= 80  # forecast, not skipped
    assert SERIES.periods(season(130, "W-MON"), 0.2) == 130
    # The bar's seasonal-naive forecast of the short series is its last value, not the value 52 weeks before.
    weeks = pd.Series(pd.date_range("2020-01-06", periods=80, freq="W-MON")).dt.strftime("%Y-%m-%d")
    train = pd.DataFrame({"week": weeks[:64], "y": np.arange(64.0)})
    test = pd.DataFrame({"week": weeks[64:]})
    assert set(naive_forecasts(train, test, "week", "y", None)["seasonal naive"]) == {63.0}
