"""Question answers graded by KramaBench's answer types: one test per type, with its edge cases."""

from __future__ import annotations

import json

import pytest

from dareforge.reference_solutions.graders import GradingError, grade
from dareforge.schema import ANSWER_METRIC, MetricSpec


def answer_metric(answer_type: str, **kw) -> MetricSpec:
    return MetricSpec(name=ANSWER_METRIC, target_columns=[], key_columns=[], answer_type=answer_type, **kw)


def graded(tmp_path, metric: MetricSpec, expected, submitted, **kw):
    truth = tmp_path / "truth.json"
    truth.write_text(json.dumps({"answer": expected}))
    answer = tmp_path / "answer.json"
    answer.write_text(json.dumps({"answer": submitted}))
    return grade(metric, answer, truth, **kw)


def scores(tmp_path, metric, expected, submissions):
    return [graded(tmp_path, metric, expected, s).score for s in submissions]


def test_string_exact_normalises_case_space_quotes_and_numbers(tmp_path):
    metric = answer_metric("string_exact")
    passing = ["Setosa", "  setosa ", '"setosa"', "setosa.", "SETOSA"]
    assert scores(tmp_path, metric, "setosa", passing) == [1.0] * len(passing)
    assert scores(tmp_path, metric, "setosa", ["versicolor", "seto sa", "setosas"]) == [0.0] * 3
    # Labels that differ only by punctuation stay different (no stripping of every non-alphanumeric).
    assert graded(tmp_path, metric, "<=50K", ">50K").score == 0.0
    # A number-like label compares as its value: "7" == 7 == "7.0".
    assert scores(tmp_path, metric, "7", [7, "7.0", " 7 "]) == [1.0] * 3
    result = graded(tmp_path, metric, "setosa", ["setosa"])
    assert result.score == 0.0 and "must be a text" in result.error


def test_string_approximate_says_whether_a_judge_decided(tmp_path):
    metric = answer_metric("string_approximate")
    fallback = graded(tmp_path, metric, "New York City", "new york city")
    assert fallback.score == 1.0
    assert "no LLM judge configured" in fallback.method
    assert graded(tmp_path, metric, "New York City", "NYC").score == 0.0

    calls = []

    def judge(predicted: str, target: str) -> bool:
        calls.append((predicted, target))
        return predicted == "NYC"

    judged = graded(tmp_path, metric, "New York City", "NYC", paraphrase=judge)
    assert (judged.score, judged.method) == (1.0, "LLM judge (paraphrase)")
    assert calls == [("NYC", "New York City")]
    undecided = graded(tmp_path, metric, "New York City", "new york city", paraphrase=lambda p, t: None)
    assert undecided.score == 1.0 and "gave no verdict" in undecided.method


def test_numeric_exact_rounding_thousands_and_units(tmp_path):
    rounded = answer_metric("numeric_exact", decimals=2)
    # Within half a unit of the second decimal passes, rounded or not; a different rounding fails.
    assert scores(tmp_path, rounded, 3.14, [3.14, "3.14", 3.14159, 3.1351, "3.140"]) == [1.0] * 5
    assert scores(tmp_path, rounded, 3.14, [3.15, 3.134, 3.1]) == [0.0] * 3
    # Ties at .5 pass whichever way the agent rounded them.
    assert scores(tmp_path, rounded, 2.68, [2.675, 2.685]) == [1.0, 1.0]

    count = answer_metric("numeric_exact")
    assert scores(tmp_path, count, 1000, [1000, "1,000", "1000", 1000.0, "1e3", "+1,000"]) == [1.0] * 6
    assert scores(tmp_path, count, 1000, [999, 1000.4, "1,0000"]) == [0.0] * 3
    ambiguous = graded(tmp_path, count, 15, "1,5")
    assert ambiguous.score == 0.0 and "ambiguous" in ambiguous.error
    assert graded(tmp_path, count, 1, True).error  # a boolean is not a number

    percent = answer_metric("numeric_exact", decimals=1, unit="%")
    assert scores(tmp_path, percent, 12.5, ["12.5%", "12.5 %", 12.5, "12.5"]) == [1.0] * 4
    wrong_unit = graded(tmp_path, percent, 12.5, "12.5 kg")
    assert wrong_unit.score == 0.0 and "unit is '%'" in wrong_unit.error
    # A fraction where a percentage was asked is a different number.
    assert graded(tmp_path, percent, 12.5, 0.125).score == 0.0

    fractional = answer_metric("numeric_exact")
    assert scores(tmp_path, fractional, 0.1 + 0.2, [0.3, 0.3000001]) == [1.0, 1.0]
    assert graded(tmp_path, fractional, 0.3, 0.31).score == 0.0


def test_numeric_approximate_is_krama_bench_rae_score(tmp_path):
    metric = answer_metric("numeric_approximate", decimals=2)
    assert graded(tmp_path, metric, 100.0, 100.0).score == 1.0
    assert graded(tmp_path, metric, 100.0, 110.0).score == pytest.approx(1 / 1.1)
    assert graded(tmp_path, metric, 100.0, 90.0).score == pytest.approx(1 / 1.1)
    assert graded(tmp_path, metric, -50.0, "-75").score == pytest.approx(1 / 1.5)
    assert graded(tmp_path, metric, 1234.5, "1,234.5").score == 1.0
    assert graded(tmp_path, metric, 0.0, 0.0).score == 1.0
    assert graded(tmp_path, metric, 0.0, 0.001).score == 0.0
    result = graded(tmp_path, metric, 3.0, "about three")
    assert result.score == 0.0 and "cannot read 'about three' as a number" in result.error


def test_list_exact_is_f1_and_ignores_order(tmp_path):
    metric = answer_metric("list_exact")
    truth = ["a", "b", "c"]
    assert graded(tmp_path, metric, truth, ["c", "a", "b"]).score == 1.0  # order ignored
    assert graded(tmp_path, metric, truth, ["A ", "b"]).score == pytest.approx(0.8)  # P=1, R=2/3
    assert graded(tmp_path, metric, truth, ["a", "b", "c", "d"]).score == pytest.approx(6 / 7)
    # One-to-one: a repeated item matches once.
    assert graded(tmp_path, metric, truth, ["a", "a", "a"]).score == pytest.approx(1 / 3)  # P=R=1/3
    assert graded(tmp_path, metric, truth, "a, b, c").score == 1.0  # comma-separated text
    assert graded(tmp_path, metric, truth, '["a", "b", "c"]').score == 1.0  # a JSON list as text
    assert graded(tmp_path, metric, truth, []).score == 0.0
    assert graded(tmp_path, metric, [], []).score == 1.0
    numbers = answer_metric("list_exact", decimals=1)
    assert graded(tmp_path, numbers, [1.5, 1000], ["1,000", 1.52]).score == 1.0
    assert graded(tmp_path, numbers, [1.5, 1000], [1.6, 1000]).score == pytest.approx(0.5)
    result = graded(tmp_path, metric, truth, {"a": 1})
    assert result.score == 0.0 and "must be a list" in result.error


def test_list_approximate_matches_numbers_within_one_percent(tmp_path):
    metric = answer_metric("list_approximate")
    assert graded(tmp_path, metric, [100.0, 200.0], [100.9, 198.5]).score == 1.0
    assert graded(tmp_path, metric, [100.0, 200.0], [102.0, 200.0]).score == pytest.approx(0.5)
    fallback = graded(tmp_path, metric, ["Boston", "Austin"], ["boston", "Texas"])
    assert fallback.score == pytest.approx(0.5) and "no LLM judge" in fallback.method
    judged = graded(
        tmp_path, metric, ["Boston"], ["Beantown"], paraphrase=lambda p, t: (p, t) == ("Beantown", "Boston")
    )
    assert judged.score == 1.0 and "LLM judge" in judged.method


def test_boolean_reads_json_and_text(tmp_path):
    metric = answer_metric("boolean")
    assert scores(tmp_path, metric, True, [True, "true", "Yes", 1, "TRUE."]) == [1.0] * 5
    assert scores(tmp_path, metric, True, [False, "no", 0]) == [0.0] * 3
    result = graded(tmp_path, metric, True, "maybe")
    assert result.score == 0.0 and "not a boolean" in result.error


def test_answer_file_problems_are_the_submission_s_fault(tmp_path):
    metric = answer_metric("numeric_exact")
    truth = tmp_path / "truth.json"
    truth.write_text(json.dumps({"answer": 3}))
    missing = grade(metric, tmp_path / "answer.json", truth)
    assert (
        missing.score == 0.0 and "does not exist" in missing.error and '{"answer": <value>}' in missing.error
    )
    bad = tmp_path / "bad.json"
    bad.write_text("3,")
    assert "as UTF-8 JSON" in grade(metric, bad, truth).error
    bare = tmp_path / "bare.json"
    bare.write_text("3")
    assert 'JSON object with an "answer" key' in grade(metric, bare, truth).error


def test_bad_private_answer_or_spec_raises(tmp_path):
    truth = tmp_path / "truth.json"
    truth.write_text(json.dumps({"value": 3}))
    answer = tmp_path / "answer.json"
    answer.write_text(json.dumps({"answer": 3}))
    with pytest.raises(GradingError, match="regenerate the task"):
        grade(answer_metric("numeric_exact"), answer, truth)
    with pytest.raises(GradingError, match=r"set MetricSpec\.answer_type"):
        grade(MetricSpec(name=ANSWER_METRIC, target_columns=[], key_columns=[]), answer, answer)
