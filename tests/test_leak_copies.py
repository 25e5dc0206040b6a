"""Leaks a model fitted on the training rows cannot see (issue 41): a copy of the class label whose held-out
values were never in training, a formula that holds on most rows but not all, a target computed from a date.
Each table is made here; each leak is caught by the check that measures it on the task's held-out rows and
rejected by the gate, and the honest look-alike beside it is not.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dareforge.config import Config
from dareforge.reference_solutions.leaks import LabelCopies
from dareforge.validators.gate import reasons_against
from dareforge.validators.leakage import LeakageCopy, LeakageFeature, LeakageFormula
from tests.test_checks import make_view

CONFIG = Config()
N = 400


def _view(tmp_path, family: str, frame: pd.DataFrame, name: str, time: str | None = None, scores=None):
    """A task on `frame` (with `row_id` and target `y`): its last fifth is test.csv and the answers, the rows
    in time order when `time` is given (a split in time)."""
    keys = (time,) if family.startswith("TS") else ("row_id",)
    train, test = frame.iloc[: 4 * len(frame) // 5], frame.iloc[4 * len(frame) // 5 :]
    extra = {"scores": scores} if scores else {}
    return make_view(
        tmp_path,
        f"{family}-{name}",
        train,
        test.drop(columns=["y"]),
        test[[*keys, "y"]],
        family=family,
        keys=keys,
        time_column=time,
        **extra,
    )


def _rejected(view, check) -> str | None:
    finding = check.run(view, CONFIG)
    stored = finding.record(view.task.id, view.task.source_id, check.name, "test")
    return reasons_against(stored, CONFIG.validate_, view.family)


def _honest(rng, n: int = N) -> pd.DataFrame:
    return pd.DataFrame({"row_id": range(n), "noise": rng.normal(size=n).round(3)})


# --- a copy of the class label ----------------------------------------------------------------------


@pytest.mark.parametrize("family", ["Class-IF", "Class-MM"])
def test_a_copy_of_a_label_whose_test_values_are_new_is_caught(tmp_path, family):
    """The label is the cohort year, the rows in time order: the test rows' years were never in training, so
    a tree on the copy (`enrolled`, the same years) or on a day counter that follows them scores nothing."""
    rng = np.random.default_rng(1)
    frame = _honest(rng)
    frame["day"] = np.arange(N) * 5 + rng.integers(0, 3, N)
    frame["y"] = (2015 + frame["day"] // 365).astype(str)
    frame["enrolled"] = frame["y"].astype(int)
    for column, how in (("enrolled", "equal"), ("day", "monotone")):
        view = _view(tmp_path / column, family, frame[["row_id", "noise", "day", column, "y"]], column, "day")
        finding = LeakageCopy().run(view, CONFIG)
        assert {"column": column, "score": 1.0, "how": how} in finding.details["top"], finding
        assert _rejected(view, LeakageCopy()), finding
        single = LeakageFeature().run(view, CONFIG)
        assert single.score < CONFIG.validate_.leakage_max_single_feature, single


@pytest.mark.parametrize("family", ["Class-IF", "Class-MM"])
def test_a_relabelled_copy_right_on_most_rows_is_caught_where_the_tree_is_not_sure(tmp_path, family):
    """`flag` spells the label another way (Y/N for yes/no) and is wrong on 3% of the rows: below the
    single-feature bar, over the copy check's."""
    rng = np.random.default_rng(2)
    frame = _honest(rng, 2000)
    frame["y"] = rng.choice(["yes", "no"], 2000)
    wrong = rng.random(2000) < 0.03
    frame["flag"] = np.where((frame["y"] == "yes") ^ wrong, "Y", "N")
    view = _view(tmp_path, family, frame, "flag")
    finding = LeakageCopy().run(view, CONFIG)
    assert finding.details["top"][0]["column"] == "flag" and finding.details["top"][0]["how"] == "recoded"
    assert _rejected(view, LeakageCopy()), finding
    assert LeakageFeature().run(view, CONFIG).score < CONFIG.validate_.leakage_max_single_feature


def test_a_feature_that_predicts_the_label_well_gives_nothing_away(tmp_path):
    """A strong honest feature (a tree on it alone reaches macro-F1 0.96, below the single-feature bar; a
    threshold fitted on the held-out rows themselves would reproduce 98% of them) and a many-to-one one (each
    of six values mostly one label) are no copies: every held-out label was seen in training, where a model
    learns such a map; the copy check measures no map fitted on the rows it scores."""
    rng = np.random.default_rng(3)
    frame = _honest(rng, 2000)
    frame["score"] = rng.normal(size=2000).round(3)
    frame["y"] = np.where(frame["score"] + rng.normal(0, 0.08, 2000) > 0, "sick", "well")
    kind = rng.integers(0, 6, 2000)
    frame["kind"] = np.where((frame["y"] == "sick") ^ (rng.random(2000) < 0.1), kind % 3, 3 + kind % 3)
    view = _view(tmp_path, "Class-MM", frame, "honest")
    finding = LeakageCopy().run(view, CONFIG)
    assert finding.score is not None and finding.score < CONFIG.validate_.leakage_max_label_copy, finding
    assert not _rejected(view, LeakageCopy())
    assert LeakageFeature().run(view, CONFIG).score < CONFIG.validate_.leakage_max_single_feature


def test_a_label_copy_is_measured_beyond_the_majority_share():
    """A feature that says `no` on every row matches a 96%-`no` label on 96% of the rows and scores 0."""
    truth = pd.Series(["no"] * 96 + ["yes"] * 4)
    always = pd.Series(["no"] * 100)
    assert LabelCopies(truth, truth).score(always, always)[0] == 0.0
    assert LabelCopies(truth, truth).score(truth, truth) == (1.0, "equal")


# --- a formula on most rows, not all -------------------------------------------------------------------


def _ratio_frame(rng, broken: float) -> pd.DataFrame:
    frame = _honest(rng)
    frame["a"] = rng.uniform(10, 500, N).round(2)
    frame["b"] = rng.uniform(1, 9, N).round(2)
    frame["y"] = (frame["a"] / frame["b"]).round(2)
    wild = rng.random(N) < broken  # a sentinel or a typo: the formula does not hold on these rows
    frame.loc[wild, "y"] = rng.choice([0.0, 99999.0, -1.0], int(wild.sum()))
    return frame


@pytest.mark.parametrize("family", ["Reg-IF", "Reg-MM", "TS-XF"])
def test_a_ratio_that_holds_on_most_rows_is_caught(tmp_path, family):
    """`y = a / b` (to two decimals) on 97% of the rows, wild on the rest: the least-squares R² is ruined,
    the share of rows the formula reproduces is not."""
    rng = np.random.default_rng(4)
    frame = _ratio_frame(rng, 0.03)
    time = None
    if family.startswith("TS"):
        time = "day"
        frame["day"] = pd.date_range("2020-01-01", periods=N, freq="D").strftime("%Y-%m-%d")
    view = _view(tmp_path, family, frame, "ratio", time=time)
    finding = LeakageFormula().run(view, CONFIG)
    assert finding.score < CONFIG.validate_.leakage_max_formula_fit, finding  # R² alone misses it
    assert sorted(finding.details["share_columns"]) == ["a", "b"], finding
    assert finding.details["share"] >= CONFIG.validate_.leakage_max_formula_share, finding
    assert _rejected(view, LeakageFormula()), finding


@pytest.mark.parametrize("family", ["Reg-IF", "Reg-MM", "TS-XF"])
def test_a_formula_on_three_rows_in_four_that_beats_the_strong_reference_is_caught(tmp_path, family):
    """`y = a / b` exactly on 75% of the rows and within 10% on the rest: neither R² nor the share passes its
    bar, but a line through two public columns out-scores the task's best model; with a strong reference that
    knows more than the formula, the same table is a task."""
    rng = np.random.default_rng(6)
    frame = _ratio_frame(rng, 0.0)
    off = rng.random(N) < 0.25
    frame.loc[off, "y"] = (frame.loc[off, "y"] * rng.uniform(0.9, 1.1, int(off.sum()))).round(2)
    time = None
    if family.startswith("TS"):
        time = "day"
        frame["day"] = pd.date_range("2020-01-01", periods=N, freq="D").strftime("%Y-%m-%d")
    outcomes = {}
    for strong in (0.7, 0.999):
        view = _view(tmp_path / str(strong), family, frame, "rival", time=time, scores={"strong": strong})
        finding = LeakageFormula().run(view, CONFIG)
        assert finding.score < CONFIG.validate_.leakage_max_formula_fit, finding
        assert 0.5 <= finding.details["share"] < CONFIG.validate_.leakage_max_formula_share, finding
        outcomes[strong] = _rejected(view, LeakageFormula())
    assert outcomes[0.7] and "over_strong" in outcomes[0.7], outcomes
    assert outcomes[0.999] is None, outcomes


def test_a_noisy_honest_line_and_a_mostly_zero_target_are_no_formula(tmp_path):
    rng = np.random.default_rng(5)
    frame = _honest(rng)
    frame["a"] = rng.uniform(1, 50, N).round(2)
    frame["y"] = (2 * frame["a"] + rng.normal(0, 1, N)).round(2)  # R² about 0.995
    view = _view(tmp_path / "line", "Reg-MM", frame, "line")
    finding = LeakageFormula().run(view, CONFIG)
    assert finding.details["share"] < 0.2, finding
    assert not _rejected(view, LeakageFormula()), finding
    frame["y"] = np.where(rng.random(N) < 0.96, 0.0, frame["y"])  # the formula `0` holds on 96% of rows
    view = _view(tmp_path / "zeros", "Reg-MM", frame, "zeros")
    finding = LeakageFormula().run(view, CONFIG)
    assert finding.details["share"] < 0.5, finding
    assert not _rejected(view, LeakageFormula()), finding


# --- a target computed from a date ---------------------------------------------------------------------


def _dated(rng, n: int = N) -> pd.DataFrame:
    frame = _honest(rng, n)
    dates = pd.Timestamp("2019-03-01") + pd.to_timedelta(rng.integers(0, 1500, n), unit="D")
    frame["sold_on"] = dates.strftime("%m/%d/%Y")
    return frame.assign(_date=dates)


@pytest.mark.parametrize("family", ["Class-IF", "Class-MM"])
def test_a_label_that_is_the_weekday_of_a_date_is_caught(tmp_path, family):
    rng = np.random.default_rng(6)
    frame = _dated(rng)
    frame["y"] = frame.pop("_date").dt.day_name()
    view = _view(tmp_path, family, frame, "weekday")
    finding = LeakageCopy().run(view, CONFIG)
    assert finding.details["top"][0]["column"] == "sold_on.weekday", finding
    assert _rejected(view, LeakageCopy()), finding


DATE_TARGETS = {
    "year": lambda d: d.dt.year,
    "month": lambda d: d.dt.month,
    "day_of_year": lambda d: d.dt.day_of_year,
    "days": lambda d: (d - pd.Timestamp("2019-01-01")).dt.days,
    "weeks": lambda d: (d - pd.Timestamp("2019-01-01")).dt.days / 7,
}


@pytest.mark.parametrize("part", sorted(DATE_TARGETS))
@pytest.mark.parametrize("family", ["Reg-IF", "Reg-MM"])
def test_a_number_computed_from_a_date_is_caught(tmp_path, family, part):
    rng = np.random.default_rng(7)
    frame = _dated(rng)
    frame["y"] = DATE_TARGETS[part](frame.pop("_date")).astype(float)
    view = _view(tmp_path, family, frame, part)
    finding = LeakageFormula().run(view, CONFIG)
    assert finding.details["columns"][0].startswith("sold_on."), finding
    assert _rejected(view, LeakageFormula()), finding


def test_a_series_that_is_the_day_of_the_year_of_its_time_is_caught(tmp_path):
    """A forecast's time column is a key, not a feature; a target computed from it is still given away."""
    frame = pd.DataFrame({"row_id": range(N)})
    days = pd.date_range("2020-01-01", periods=N, freq="D")
    frame["day"] = days.strftime("%Y-%m-%d")
    frame["noise"] = np.random.default_rng(8).normal(size=N)
    frame["y"] = days.day_of_year.astype(float)
    view = _view(tmp_path, "TS-XF", frame, "doy", time="day")
    finding = LeakageFormula().run(view, CONFIG)
    assert "day.day_of_year" in finding.details["share_columns"], finding
    assert _rejected(view, LeakageFormula()), finding
