from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from dareforge.errors import DareforgeError
from dareforge.reference_solutions import metrics as m
from dareforge.reference_solutions.graders import GradeResult, GradingError, grade
from dareforge.reference_solutions.metrics import METRICS, InvalidPredictionError, get_metric, is_pass_metric
from dareforge.schema import MetricSpec

ANSWERS = "id,y\n007,1\n008,0\n009,1\n"


def spec(name: str = "exact-match", targets=("y",), keys=("id",), **kw) -> MetricSpec:
    return MetricSpec(name=name, target_columns=list(targets), key_columns=list(keys), **kw)


def write(tmp_path, name: str, content: str | bytes):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


# --- bad submissions score the worst value with a specific message -------------------------------------

BAD_SUBMISSIONS = {
    "missing file": (None, ["submission file not found", "does not exist"]),
    "empty file": ("", ["is empty"]),
    "not utf-8": (b"\xff\xfe\x00i\x00d\n\x81\x82", ["could not read submission", "UTF-8"]),
    "ragged rows": ("id,y\n007,1\n008,0,5,6\n009,1\n", ["could not read submission", "Expected 2 fields"]),
    "missing target column": (
        "id,pred\n007,1\n008,0\n009,1\n",
        ["missing column(s) 'y'", "found columns 'id', 'pred'"],
    ),
    "missing key column": (
        "ID,y\n007,1\n008,0\n009,1\n",
        ["missing column(s) 'id'", "found columns 'ID', 'y'"],
    ),
    "duplicate keys": (
        "id,y\n007,1\n007,1\n008,0\n009,1\n",
        ["1 duplicate row(s)", "id='007' appears 2 times", "one row per key"],
    ),
    "missing keys": (
        "id,y\n007,1\n008,0\n",
        ["2 rows but 3 were expected", "1 expected key(s) are missing", "'009'"],
    ),
    "extra keys": (
        "id,y\n007,1\n008,0\n009,1\n010,1\n",
        ["4 rows but 3 were expected", "1 unexpected key(s)", "id='010'"],
    ),
    "header only": ("id,y\n", ["0 rows but 3 were expected", "3 expected key(s) are missing"]),
    "empty target values": ("id,y\n007,\n008,0\n009,\n", ["column 'y' has 2 empty value(s)", "id='007'"]),
}


@pytest.mark.parametrize("case", list(BAD_SUBMISSIONS))
def test_bad_submission_scores_zero_with_specific_error(tmp_path, case):
    content, expected = BAD_SUBMISSIONS[case]
    answers = write(tmp_path, "answers.csv", ANSWERS)
    submission = (
        tmp_path / "submission.csv" if content is None else write(tmp_path, "submission.csv", content)
    )
    result = grade(spec(), submission, answers)
    assert result.score == 0.0
    assert not result.ok
    for fragment in expected:
        assert fragment in result.error


def test_key_examples_are_the_smallest_missing_and_unexpected_keys(tmp_path):
    """Whatever the rows' order, the message names the same examples: the smallest key, column by column."""
    answers = write(tmp_path, "answers.csv", "g,id,y\nb,2,1\na,9,0\nb,1,1\na,3,0\n")
    submission = write(tmp_path, "submission.csv", "g,id,y\nc,5,1\na,3,0\nb,0,1\nc,4,1\n")
    result = grade(spec(keys=("g", "id")), submission, answers)
    assert "3 expected key(s) are missing, e.g. g='a', id='9'" in result.error
    assert "3 unexpected key(s) not in the test set, e.g. g='b', id='0'" in result.error


def test_keys_with_leading_zeros_dropped_are_reported_not_joined(tmp_path):
    answers = write(tmp_path, "answers.csv", ANSWERS)
    submission = write(tmp_path, "submission.csv", "id,y\n7,1\n8,0\n9,1\n")
    result = grade(spec(), submission, answers)
    assert result.score == 0.0
    assert "3 expected key(s) are missing" in result.error
    assert "3 unexpected key(s)" in result.error
    assert "rows but" not in result.error  # the row count is right; only the keys are wrong
    assert "'007', not '7'" in result.error
    assert result.rows == 3


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("nan", "column 'y' has 1 empty or NaN value(s), e.g. at id='008'"),
        ("", "column 'y' has 1 empty or NaN value(s), e.g. at id='008'"),
        ("abc", "column 'y' has 1 non-numeric value(s), e.g. 'abc' at id='008'"),
        ("1_000", "non-numeric"),
        ("inf", "column 'y' has 1 infinite value(s)"),
    ],
)
def test_bad_values_in_numeric_metric(tmp_path, value, expected):
    answers = write(tmp_path, "answers.csv", "id,y\n007,1.5\n008,2.5\n009,4\n")
    submission = write(tmp_path, "submission.csv", f"id,y\n007,1.5\n008,{value}\n009,4\n")
    result = grade(spec("clipped-r2"), submission, answers)
    assert result.score == 0.0
    assert expected in result.error


def test_invalid_prediction_for_lower_is_better_metric_scores_infinity(tmp_path):
    answers = write(tmp_path, "answers.csv", "id,y\n1,1\n2,2\n")
    submission = write(tmp_path, "submission.csv", "id,y\n1,-1\n2,2\n")
    result = grade(spec("rmsle"), submission, answers)
    assert result.score == math.inf
    assert "negative predictions" in result.error


def test_probability_out_of_range_is_a_submission_error(tmp_path):
    answers = write(tmp_path, "answers.csv", "id,y\n1,1\n2,0\n")
    submission = write(tmp_path, "submission.csv", "id,y\n1,1.2\n2,0.1\n")
    result = grade(spec("log-loss"), submission, answers)
    assert result.score == math.inf
    assert "probabilities in [0, 1]" in result.error


def test_dataframe_submission_with_nan_is_an_empty_value(tmp_path):
    answers = pd.DataFrame({"id": ["a", "b"], "y": ["x", "y"]})
    submission = pd.DataFrame({"id": ["a", "b"], "y": ["x", np.nan]})
    result = grade(spec(), submission, answers)
    assert result.score == 0.0
    assert "column 'y' has 1 empty value(s), e.g. at id='b'" in result.error


# --- bad answers are the benchmark's fault: they raise --------------------------------------------------


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        (None, "answers file not found"),
        ("id,z\n1,1\n", "answers is missing column(s) 'y'"),
        ("id,y\n1,1\n1,2\n", "answers has 1 duplicate row(s)"),
        ("id,y\n1,1\n2,\n", "answers column 'y' has 1 empty"),
        ("id,y\n", "answers have no rows"),
    ],
)
def test_bad_answers_raise(tmp_path, answers, expected):
    path = tmp_path / "answers.csv" if answers is None else write(tmp_path, "answers.csv", answers)
    submission = write(tmp_path, "submission.csv", "id,y\n1,1\n2,2\n")
    with pytest.raises(GradingError, match="regenerate the task") as info:
        grade(spec(), submission, path)
    assert expected in str(info.value)
    assert isinstance(info.value, DareforgeError)


def test_non_numeric_answers_raise_for_numeric_metric(tmp_path):
    answers = write(tmp_path, "answers.csv", "id,y\n1,cat\n2,3\n")
    submission = write(tmp_path, "submission.csv", "id,y\n1,1\n2,2\n")
    with pytest.raises(GradingError, match="answers column 'y' has 1 non-numeric"):
        grade(spec("rmse"), submission, answers)


@pytest.mark.parametrize(
    ("metric", "match"),
    [
        (
            spec("f2-score"),
            "unknown metric 'f2-score'; known metrics: accuracy, allclose, allclose-all-rows, clipped-r2",
        ),
        (spec("allclose"), "set MetricSpec.tolerance"),
        (spec("allclose", tolerance=-0.1), "set MetricSpec.tolerance"),
        (spec("map-at-k"), "set MetricSpec.k"),
        (spec(keys=()), "needs key_columns and target_columns"),
        (spec(keys=("y",)), "both key and target"),
    ],
)
def test_bad_metric_spec_raises(tmp_path, metric, match):
    answers = write(tmp_path, "answers.csv", ANSWERS)
    with pytest.raises(GradingError, match=match):
        grade(metric, answers, answers)


# --- metric functions on hand-computed values ----------------------------------------------------------

E1 = math.e - 1  # log1p(E1) == 1

HAND_COMPUTED = [
    ("exact 1 == 1.0, a != A", m.exact_match, ["1", "a", "x"], ["1.0", "A", "x"], {}, 2 / 3),
    ("exact whitespace and exponent", m.exact_match, ["2", "100", "-0"], [" 2 ", "1e2", "0"], {}, 1.0),
    ("exact numbers vs text", m.exact_match, [1, 2.5, "b"], ["1", "2.50", "b "], {}, 1.0),
    ("accuracy", m.accuracy, ["a", "b", "b", "c"], ["a", "b", "c", "c"], {}, 0.75),
    # tolerance 0.1: slack 0.1*max(|10|,1)=1 and 0.1*max(|0|,1)=0.1; the boundary itself passes.
    ("allclose at boundary", m.allclose, [10, 10, 0, 0], [11, 11.0001, 0.1, 0.1001], {"tolerance": 0.1}, 0.5),
    ("allclose negative truth", m.allclose, [-200, -200], [-210, -221], {"tolerance": 0.05}, 0.5),
    # a: P=1/2 R=1/2 F1=1/2; b: P=2/3 R=1 F1=4/5; c: never predicted, F1=0.
    ("macro-f1 by hand", m.macro_f1, ["a", "a", "b", "b", "c"], ["a", "b", "b", "b", "a"], {}, 1.3 / 3),
    ("macro-f1 canonical labels", m.macro_f1, ["1", "2"], ["1.0", "2"], {}, 1.0),
    ("clipped-r2 worse than mean", m.clipped_r2, [1, 2, 3], [3, 2, 1], {}, 0.0),  # R² = 1 - 8/2 = -3
    ("clipped-r2 partial", m.clipped_r2, [1, 2, 3], [1, 2, 4], {}, 0.5),  # 1 - 1/2
    ("rmse", m.rmse, [0, 0], [3, 4], {}, math.sqrt(12.5)),
    ("mae", m.mae, [0, 0], [3, 4], {}, 3.5),
    ("rmsle", m.rmsle, [0, E1], [E1, E1], {}, math.sqrt(0.5)),
    ("log-loss coin flip", m.log_loss, [1, 0], [0.5, 0.5], {}, math.log(2)),
    ("roc-auc", m.roc_auc, [0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8], {}, 0.75),
    # row 1: hits at 1 and 3 -> (1 + 2/3)/2; row 2: hit at 2 -> 1/2; row 3: none -> 0.
    ("map@3", m.map_at_k, ["a b", "c", "d"], ["a x b", "x c", "y z"], {"k": 3}, (5 / 6 + 0.5) / 3),
    ("map@1", m.map_at_k, ["a b", "c", "d"], ["a x b", "x c", "y z"], {"k": 1}, 1 / 3),
    ("map repeated prediction counts once", m.map_at_k, ["a b"], ["a a b"], {"k": 3}, (1 + 2 / 3) / 2),
]


@pytest.mark.parametrize(
    ("fn", "y_true", "y_pred", "kwargs", "expected"),
    [case[1:] for case in HAND_COMPUTED],
    ids=[case[0] for case in HAND_COMPUTED],
)
def test_metric_hand_computed(fn, y_true, y_pred, kwargs, expected):
    assert fn(y_true, y_pred, **kwargs) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("fn", "y_true", "y_pred", "error", "match"),
    [
        (m.rmsle, [1, 2], [1, -0.5], InvalidPredictionError, "negative predictions"),
        (m.rmsle, [-1, 2], [1, 2], GradingError, "negative answers"),
        (m.log_loss, [1, 0], [1.5, 0.0], InvalidPredictionError, r"probabilities in \[0, 1\]"),
        (m.log_loss, [2, 0], [0.5, 0.5], GradingError, "0 or 1"),
        (m.roc_auc, [1, 1], [0.5, 0.7], GradingError, "both classes"),
        (m.rmse, [1, 2], [1, float("nan")], InvalidPredictionError, "NaN or infinite"),
        (m.rmse, [1, 2], [1, "x"], InvalidPredictionError, "must be numeric"),
        (m.mae, [1, 2], [1], InvalidPredictionError, "1 predictions for 2 answers"),
        (m.clipped_r2, [1], [1], GradingError, "at least 2"),
    ],
)
def test_metric_input_errors(fn, y_true, y_pred, error, match):
    with pytest.raises(error, match=match):
        fn(y_true, y_pred)


def test_registry():
    assert is_pass_metric("exact-match") and is_pass_metric("allclose")
    assert is_pass_metric("exact-match-all-rows") and is_pass_metric("allclose-all-rows")
    assert not any(is_pass_metric(n) for n in ("macro-f1", "clipped-r2", "rmse"))
    assert get_metric("MAP@K") is METRICS["map-at-k"]
    assert get_metric("log_loss") is METRICS["log-loss"]
    assert {n for n, x in METRICS.items() if not x.higher_is_better} == {"rmse", "mae", "rmsle", "log-loss"}
    with pytest.raises(GradingError, match="known metrics: accuracy"):
        is_pass_metric("qwk")


# --- grading end to end ------------------------------------------------------------------------------

RNG = np.random.default_rng(0)
IDS = [f"{i:04d}" for i in range(40)]
LABELS = [str(v) for v in RNG.choice(["cat", "dog", "eel"], size=40)]
NUMBERS = [f"{v:.6f}" for v in RNG.normal(10, 3, size=40)]
BINARY = [str(i % 2) for i in range(40)]
PERFECT = {
    "exact-match": (LABELS, {}),
    "allclose": (NUMBERS, {"tolerance": 1e-6}),
    "exact-match-all-rows": (LABELS, {}),
    "allclose-all-rows": (NUMBERS, {"tolerance": 1e-5}),
    "macro-f1": (LABELS, {}),
    "clipped-r2": (NUMBERS, {}),
    "forecast-skill": (NUMBERS, {"scale": [0.5]}),
    "accuracy": (LABELS, {}),
}


@pytest.mark.parametrize("name", list(PERFECT))
def test_perfect_submission_scores_one(tmp_path, name):
    values, params = PERFECT[name]
    frame = pd.DataFrame({"id": IDS, "y": values})
    answers = tmp_path / "answers.csv"
    frame.to_csv(answers, index=False)
    submission = tmp_path / "submission.csv"
    frame.sample(frac=1, random_state=1).to_csv(submission, index=False)
    result = grade(spec(name, **params), submission, answers)
    assert result == GradeResult(score=1.0, error=None, rows=40)


SHUFFLE_CASES = {
    "exact-match": (LABELS, {}),
    "macro-f1": (LABELS, {}),
    "allclose": (NUMBERS, {"tolerance": 0.05}),
    "clipped-r2": (NUMBERS, {}),
    "forecast-skill": (NUMBERS, {"scale": [5.0]}),
    "rmse": (NUMBERS, {}),
    "roc-auc": (BINARY, {}),
    "map-at-k": (LABELS, {"k": 2}),
}


@pytest.mark.parametrize("name", list(SHUFFLE_CASES))
def test_row_order_does_not_matter(tmp_path, name):
    values, params = SHUFFLE_CASES[name]
    answers = pd.DataFrame({"id": IDS, "y": values})
    noisy = list(RNG.permutation(values))  # an imperfect prediction, so the score is not trivially 1
    if name == "roc-auc":
        noisy = [f"{v:.3f}" for v in RNG.uniform(size=40)]
    elif name == "map-at-k":
        noisy = [f"{a} {b}" for a, b in zip(noisy, values, strict=True)]
    submission = pd.DataFrame({"id": IDS, "y": noisy})
    metric = spec(name, **params)
    in_order = grade(metric, submission, answers)
    shuffled = grade(metric, submission.sample(frac=1, random_state=2), answers)
    assert in_order.ok and shuffled.ok
    assert shuffled.score == pytest.approx(in_order.score)


def test_if_rules_row_share_and_all_rows(tmp_path):
    """Our releases' IF rule scores the share of matching rows; DARE-bench's (the `-all-rows` metrics the
    DARE-bench layout exports) scores 1 only when every row matches, with numpy.allclose's tolerances."""
    labels = pd.DataFrame({"id": IDS, "y": LABELS})
    one_wrong = labels.assign(y=["bird", *LABELS[1:]])
    assert grade(spec("exact-match"), one_wrong, labels).score == pytest.approx(39 / 40)
    assert grade(spec("exact-match-all-rows"), one_wrong, labels).score == 0.0
    assert (
        grade(spec("exact-match-all-rows"), labels.assign(y=[f" {v} " for v in LABELS]), labels).score == 1.0
    )

    numbers = pd.DataFrame({"id": IDS, "y": NUMBERS})
    noised = numbers.assign(y=[repr(float(v) * (1 + 5e-6)) for v in NUMBERS])
    assert grade(spec("allclose", tolerance=1e-6), noised, numbers).score == 0.0
    assert grade(spec("allclose-all-rows", tolerance=1e-5), noised, numbers).score == 1.0
    wrong = noised.assign(y=["1000", *noised["y"][1:]])
    assert grade(spec("allclose", tolerance=1e-5), wrong, numbers).score == pytest.approx(39 / 40)
    assert grade(spec("allclose-all-rows", tolerance=1e-5), wrong, numbers).score == 0.0
    # numpy measures the slack on the prediction (|true - pred| <= 1e-8 + rtol * |pred|), and has an absolute
    # floor of 1e-8, where our row rule measures it on max(|answer|, 1).
    assert m.allclose_all_rows([0.0], [5e-9], tolerance=1e-5) == 1.0
    assert m.allclose_all_rows([0.0], [2e-8], tolerance=1e-5) == 0.0
    assert m.allclose([0.0], [2e-8], tolerance=1e-5) == 1.0
    assert m.allclose_all_rows([1.0], [1.0 + 1.00001e-5], tolerance=1e-5) == 1.0
    assert m.allclose([1.0], [1.0 + 1.00001e-5], tolerance=1e-5) == 0.0
    with pytest.raises(GradingError, match="relative tolerance"):
        grade(spec("allclose-all-rows"), numbers, numbers)


def test_several_targets_are_averaged(tmp_path):
    answers = write(tmp_path, "answers.csv", "id,a,b\n1,x,p\n2,y,q\n3,z,r\n4,w,s\n")
    submission = write(tmp_path, "submission.csv", "id,b,a,extra\n4,s,w,?\n3,r,z,?\n2,0,y,?\n1,0,x,?\n")
    result = grade(spec(targets=("a", "b")), submission, answers)
    assert result.score == pytest.approx((1.0 + 0.5) / 2)


def test_several_numeric_targets_are_clipped_then_averaged(tmp_path):
    answers = pd.DataFrame({"id": ["1", "2", "3"], "a": ["1", "2", "3"], "b": ["1", "2", "3"]})
    submission = pd.DataFrame({"id": ["1", "2", "3"], "a": ["1", "2", "4"], "b": ["3", "2", "1"]})
    result = grade(spec("clipped-r2", targets=("a", "b")), submission, answers)
    assert result.score == pytest.approx((0.5 + 0.0) / 2)


def test_forecast_skill_takes_each_targets_scale_and_refuses_a_spec_without_one(tmp_path):
    answers = pd.DataFrame(
        {"id": ["1", "2", "3", "4"], "a": ["1", "2", "3", "4"], "b": ["10", "20", "30", "40"]}
    )
    submission = answers.assign(a=["2", "3", "4", "5"], b=["10", "20", "30", "40"])  # a off by 1, b exact
    result = grade(spec("forecast-skill", targets=("a", "b"), scale=[2.0, 1.0]), submission, answers)
    assert result.score == pytest.approx((0.5 + 1.0) / 2)
    worse = answers.assign(a=["9", "9", "9", "9"], b=answers["b"])
    assert grade(spec("forecast-skill", targets=("a", "b"), scale=[2.0, 1.0]), worse, answers).score == 0.5
    with pytest.raises(GradingError, match="forecast-skill needs a finite scale > 0"):
        grade(spec("forecast-skill", targets=("a", "b"), scale=[2.0]), submission, answers)


TS_ANSWERS = "date,entity,y\n2020-01-01,A,1\n2020-01-01,B,2\n2020-01-02,A,3\n2020-01-02,B,4\n"


def test_composite_keys_join_on_every_key_column(tmp_path):
    metric = spec("allclose", keys=("date", "entity"), tolerance=1e-9)
    answers = write(tmp_path, "answers.csv", TS_ANSWERS)
    shuffled = write(
        tmp_path,
        "shuffled.csv",
        "entity,date,y\nB,2020-01-02,4\nA,2020-01-01,1\nB,2020-01-01,2\nA,2020-01-02,3\n",
    )
    assert grade(metric, shuffled, answers).score == 1.0
    swapped = write(
        tmp_path,
        "swapped.csv",
        "date,entity,y\n2020-01-01,A,2\n2020-01-01,B,1\n2020-01-02,A,3\n2020-01-02,B,4\n",
    )
    assert grade(metric, swapped, answers).score == 0.5
    missing = write(
        tmp_path, "missing.csv", "date,entity,y\n2020-01-01,A,1\n2020-01-01,B,2\n2020-01-02,A,3\n"
    )
    result = grade(metric, missing, answers)
    assert result.score == 0.0
    assert "date='2020-01-02', entity='B'" in result.error
    duplicated = write(tmp_path, "dup.csv", TS_ANSWERS + "2020-01-02,B,4\n")
    assert "date='2020-01-02', entity='B' appears 2 times" in grade(metric, duplicated, answers).error


def test_ids_with_leading_zeros_keep_their_form(tmp_path):
    answers = write(tmp_path, "answers.csv", "id,y\n007,a\n07,b\n7,c\n")
    submission = write(tmp_path, "submission.csv", "id,y\n7,c\n007,a\n07,b\n")
    assert grade(spec(), submission, answers).score == 1.0
    crossed = write(tmp_path, "crossed.csv", "id,y\n007,c\n07,b\n7,a\n")
    assert grade(spec(), crossed, answers).score == pytest.approx(1 / 3)


def test_header_whitespace_bom_and_extra_columns_are_tolerated(tmp_path):
    answers = write(tmp_path, "answers.csv", ANSWERS)
    submission = write(tmp_path, "submission.csv", "\ufeffUnnamed: 0, id , y\n0,007, 1\n1,008,0.0\n2,009,1\n")
    assert grade(spec(), submission, answers) == GradeResult(score=1.0, error=None, rows=3)


def test_string_paths_and_dataframes_are_accepted(tmp_path):
    answers = write(tmp_path, "answers.csv", ANSWERS)
    submission = pd.DataFrame({"id": ["007", "008", "009"], "y": [1, 0, 0]})
    assert grade(spec(), submission, str(answers)).score == pytest.approx(2 / 3)


# --- integer keys match by value -------------------------------------------------------------------------

INT_IDS = [str(i) for i in range(-3, 37)]
"""Ids as an integer column of the test file holds them (one negative, one zero)."""
FLOAT_IDS = [f"{int(i)}.0" for i in INT_IDS]
"""The same ids as pandas writes them back after reading an integer column that held a missing value."""
KEYED_FAMILIES = {
    "Class-IF exact-match": (spec("exact-match"), LABELS),
    "Reg-IF allclose": (spec("allclose", tolerance=1e-6), NUMBERS),
    "Class-MM macro-f1": (spec("macro-f1"), LABELS),
    "Reg-MM clipped-r2": (spec("clipped-r2"), NUMBERS),
}


def _keyed(ids: list[str], values: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"id": ids, "y": values})


@pytest.mark.parametrize("family", list(KEYED_FAMILIES))
def test_integer_ids_written_as_floats_match_by_value(tmp_path, family):
    metric, values = KEYED_FAMILIES[family]
    answers = write(tmp_path, "answers.csv", _keyed(INT_IDS, values).to_csv(index=False))
    submission = write(tmp_path, "submission.csv", _keyed(FLOAT_IDS, values).iloc[::-1].to_csv(index=False))
    assert grade(metric, submission, answers) == GradeResult(score=1.0, error=None, rows=40)
    # pandas' own round trip: an integer column with a missing value comes back as floats
    frame = pd.DataFrame({"id": [*map(int, INT_IDS), None], "y": [*values, values[0]]}).iloc[:-1]
    assert frame["id"].dtype == float
    assert grade(metric, frame, answers).score == 1.0


@pytest.mark.parametrize("family", list(KEYED_FAMILIES))
def test_a_non_integral_float_id_does_not_match_and_is_named(tmp_path, family):
    metric, values = KEYED_FAMILIES[family]
    answers = write(tmp_path, "answers.csv", _keyed(INT_IDS, values).to_csv(index=False))
    ids = [*FLOAT_IDS[:-1], "36.5"]
    result = grade(
        metric, write(tmp_path, "submission.csv", _keyed(ids, values).to_csv(index=False)), answers
    )
    assert result.score == 0.0
    assert "1 expected key(s) are missing, e.g. id='36'" in result.error
    assert "1 unexpected key(s) not in the test set, e.g. id='36.5'" in result.error
    assert (
        "key 'id' holds whole numbers in the test set, but 1 submission value(s) are not whole"
        in result.error
    )
    assert "Integer keys ('id') match by value ('12' == '12.0')" in result.error


def test_ts_cf_time_and_entity_keys_match_integers_by_value(tmp_path):
    """TS-CF joins on time and entity: an integer year and an integer entity both match by value."""
    metric = spec("clipped-r2", keys=("year", "store"))
    answers = write(tmp_path, "answers.csv", "year,store,y\n2019,1,10\n2019,2,20\n2020,1,12\n2020,2,25\n")
    floats = write(
        tmp_path, "floats.csv", "store,year,y\n2.0,2020.0,25\n1.0,2019.0,10\n2.0,2019,20\n1,2020.00,12\n"
    )
    assert grade(metric, floats, answers) == GradeResult(score=1.0, error=None, rows=4)
    half = write(tmp_path, "half.csv", "store,year,y\n2.5,2020,25\n1,2019,10\n2,2019,20\n1,2020,12\n")
    result = grade(metric, half, answers)
    assert result.score == 0.0
    assert "year='2020', store='2'" in result.error and "year='2020', store='2.5'" in result.error
    assert "key 'store' holds whole numbers" in result.error
    # a date time key is text: it still needs its exact form, while the integer entity matches by value
    dated = write(tmp_path, "dated.csv", TS_ANSWERS.replace("A,", "1,").replace("B,", "2,"))
    shifted = write(
        tmp_path,
        "shifted.csv",
        "date,entity,y\n2020-01-01,1.0,1\n2020-01-01,2.0,2\n2020-1-2,1.0,3\n2020-01-02,2.0,4\n",
    )
    result = grade(spec("allclose", keys=("date", "entity"), tolerance=1e-9), shifted, dated)
    assert result.score == 0.0 and "date='2020-1-2', entity='1'" in result.error


def test_a_whole_number_written_twice_is_a_duplicate_key(tmp_path):
    answers = write(tmp_path, "answers.csv", "id,y\n1,a\n2,b\n")
    result = grade(spec(), write(tmp_path, "submission.csv", "id,y\n1,a\n1.0,a\n2,b\n"), answers)
    assert result.score == 0.0 and "id='1' appears 2 times" in result.error


@pytest.mark.parametrize(
    ("answers", "submitted"),
    [
        ("id,y\n007,a\n07,b\n7,c\n", "id,y\n7.0,c\n007,a\n07,b\n"),  # zero-padded ids are text
        ("id,y\nk1,a\nk2,b\n3,c\n", "id,y\nk1,a\nk2,b\n3.0,c\n"),  # a column with any text is text
        ("id,y\n-0,a\n1,b\n2,c\n", "id,y\n0,a\n1,b\n2,c\n"),  # "-0" is not how an integer is written
    ],
)
def test_text_keys_stay_exact(tmp_path, answers, submitted):
    result = grade(spec(), write(tmp_path, "s.csv", submitted), write(tmp_path, "a.csv", answers))
    assert result.score == 0.0
    assert "are compared as exact text" in result.error


@pytest.mark.parametrize("text", ["1.2e1", "12.", "+12", " 12.000 ", "1.2E+1"])
def test_whole_numbers_in_any_notation_match_an_integer_key(tmp_path, text):
    answers = write(tmp_path, "answers.csv", "id,y\n12,a\n13,b\n")
    submission = write(tmp_path, "submission.csv", f'id,y\n"{text}",a\n13,b\n')
    assert grade(spec(), submission, answers).score == 1.0


@pytest.mark.parametrize("text", ["1_2", "12.0001", "nan", "inf", "1e999999999", "0x0c"])
def test_other_numbers_never_match_an_integer_key(tmp_path, text):
    answers = write(tmp_path, "answers.csv", "id,y\n12,a\n13,b\n")
    submission = write(tmp_path, "submission.csv", f"id,y\n{text},a\n13,b\n")
    result = grade(spec(), submission, answers)
    assert result.score == 0.0 and "1 expected key(s) are missing, e.g. id='12'" in result.error


@pytest.mark.parametrize(
    ("name", "scale"), [("macro-f1", None), ("clipped-r2", None), ("forecast-skill", 1.3)]
)
def test_a_goal_metric_on_many_resamples_at_once_is_the_metric_of_each_resample(name, scale):
    # The at-once form is what the solver ladder's bootstrap uses: it must score every resample as the
    # metric itself scores that resample's rows (R² on large, offset values: its sums must not lose them).
    rng = np.random.default_rng(1)
    rows, resamples = 50, 30
    if name == "macro-f1":
        truth, predicted = rng.choice(list("abc"), rows), rng.choice(list("abcd"), rows)
    else:
        centre, spread = (1e9, 1e6) if name == "clipped-r2" else (0.0, 1.0)
        truth, predicted = rng.normal(centre, spread, rows), rng.normal(centre, spread, rows)
    drawn = rng.integers(0, rows, size=(resamples, rows))
    counts = np.stack([np.bincount(d, minlength=rows) for d in drawn])
    metric = get_metric(name)
    assert metric.resampled is not None
    at_once = metric.on_resamples(truth, predicted, counts, scale=scale)
    one_by_one = [metric(truth[d], predicted[d], scale=scale) for d in drawn]
    assert at_once == pytest.approx(one_by_one, abs=1e-12)
    # Without an at-once form, the metric is called on each resample: the same scores.
    looped = dataclasses.replace(metric, resampled=None).on_resamples(truth, predicted, counts, scale=scale)
    assert looped == pytest.approx(one_by_one, abs=1e-12)
