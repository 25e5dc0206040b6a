"""Trajectory selection: each DARE-bench strategy on a hand-made set, judge thresholds, the diversity filter.

The set (task: trajectory, passed?, code runs, seconds, score):
    t1 (diverse, 3 of 4 passed): a1 yes 3 50s .90 | a2 yes 2 80s .95 | a3 yes 2 40s .85 | a4 no (code-error)
    t2 (not diverse, all passed): b1 yes 1 30s .90 | b2 yes 1 20s .90
    t3 (nothing passed):          c1 no | c2 no (turn-limit)
    t4 (diverse; the endpoint failure is not counted): d1 yes | d2 llm-error | d3 no
    t5 (not diverse: its only other attempt is an endpoint failure): e1 yes | e2 llm-error
"""

from __future__ import annotations

import typing

import pytest

from dareforge.config import JudgeConfig, SynthesizeConfig
from dareforge.judge import CRITERION_FIELDS
from dareforge.minhash import similarity
from dareforge.schema import Judgement, Step, Trajectory
from dareforge.trajectories.select import (
    STRATEGIES,
    SelectionError,
    code_signature,
    diverse_tasks,
    select,
)

FOREST = """import pandas as pd
from sklearn.ensemble import RandomForestClassifier
train = pd.read_csv('train.csv')
test = pd.read_csv('test.csv')
features = [c for c in train.columns if c not in ('id', 'species')]
model = RandomForestClassifier(n_estimators=300, random_state=0).fit(train[features], train['species'])
test['species'] = model.predict(test[features])
test[['id', 'species']].to_csv('predictions.csv', index=False)"""
LOGISTIC = """import pandas as pd
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.linear_model import LogisticRegression
df = pd.read_csv("train.csv"); X = df.drop(columns=["id", "species"]); y = df["species"]
clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, C=0.5))
clf.fit(X, y)
sub = pd.read_csv("test.csv")
pd.DataFrame({"id": sub["id"], "species": clf.predict(sub[X.columns])}).to_csv("predictions.csv", index=False)"""
BOOSTING = """import pandas as pd, numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.model_selection import cross_val_score
tr = pd.read_csv('train.csv')
cols = tr.select_dtypes(include=np.number).columns.drop('id')
gb = HistGradientBoostingClassifier(learning_rate=0.05, max_iter=400)
print(cross_val_score(gb, tr[cols], tr.species, cv=5, scoring='f1_macro').mean())
gb.fit(tr[cols], tr.species)
te = pd.read_csv('test.csv'); te.assign(species=gb.predict(te[cols]))[['id', 'species']].to_csv('predictions.csv', index=False)"""
NEIGHBOURS = """from sklearn.neighbors import KNeighborsClassifier
import pandas
a = pandas.read_csv('train.csv'); b = pandas.read_csv('test.csv')
knn = KNeighborsClassifier(7).fit(a[['x']], a.species)
b['species'] = knn.predict(b[['x']]); b[['id', 'species']].to_csv('predictions.csv', index=False)"""


def traj(
    tid: str,
    task: str,
    passed: bool = True,
    runs: int = 1,
    seconds: float = 10.0,
    score: float | None = None,
    code: str = FOREST,
    outcome: str | None = None,
) -> Trajectory:
    steps = [Step(role="system", content="rules"), Step(role="user", content="the task")]
    lines = code.split("\n")
    size = -(-len(lines) // max(runs, 1))
    for i in range(runs):  # the program cut into `runs` consecutive cells
        cell = "\n".join(lines[i * size : (i + 1) * size])
        steps += [
            Step(role="assistant", content=f"<code>{cell}</code>", code=cell),
            Step(role="execution", content="ok", code=cell, seconds=1.0),
        ]
    return Trajectory(
        id=tid,
        task_id=task,
        family="Class-MM",
        endpoint="agent",
        model="m",
        steps=steps,
        outcome=outcome or ("graded" if passed else "code-error"),
        score=score if score is not None else (0.9 if passed else 0.1),
        passed=passed,
        seconds=seconds,
    )


SET = [
    traj("a1", "t1", runs=3, seconds=50, score=0.90, code=FOREST),
    traj("a2", "t1", runs=2, seconds=80, score=0.95, code=LOGISTIC),
    traj("a3", "t1", runs=2, seconds=40, score=0.85, code=BOOSTING),
    traj("a4", "t1", passed=False, code=NEIGHBOURS),
    traj("b1", "t2", runs=1, seconds=30, score=0.90, code=FOREST),
    traj("b2", "t2", runs=1, seconds=20, score=0.90, code=LOGISTIC),
    traj("c1", "t3", passed=False),
    traj("c2", "t3", passed=False, outcome="turn-limit", code=LOGISTIC),
    traj("d1", "t4"),
    traj("d2", "t4", passed=False, outcome="llm-error", code=LOGISTIC),
    traj("d3", "t4", passed=False, code=BOOSTING),
    traj("e1", "t5"),
    traj("e2", "t5", passed=False, outcome="llm-error", code=LOGISTIC),
]
CONFIG = JudgeConfig()


def judged(tid: str, status: str = "scored", **scores: float) -> Judgement:
    values = {f: 4.0 for f in CRITERION_FIELDS} | scores if status == "scored" else {}
    overall = sum(values.values()) / 6 if values else None
    return Judgement(
        trajectory_id=tid,
        task_id="t?",
        judge_endpoint="judge",
        judge_model="jm",
        status=status,
        overall=overall,
        judge_version="v",
        **values,
    )


def test_strategies_match_the_config_choices():
    assert typing.get_args(SynthesizeConfig.model_fields["strategy"].annotation) == STRATEGIES


def test_diverse_tasks_are_those_whose_attempts_disagree():
    assert diverse_tasks(SET) == {"t1", "t4"}


@pytest.mark.parametrize(
    ("strategy", "kept"),
    [
        ("fastest-valid", ["a3", "b2", "d1", "e1"]),  # a3 and a2 both ran twice: a3 took fewer seconds
        ("all-valid", ["a2", "a1", "a3", "b2", "b1", "d1", "e1"]),  # best score first, then fastest
        ("diverse-valid", ["a2", "a1", "a3", "d1"]),
        ("top2-diverse", ["a2", "a1", "d1"]),
    ],
)
def test_each_strategy_keeps_exactly_the_expected_trajectories(strategy, kept):
    selection = select(SET, strategy=strategy, judge_config=CONFIG)
    assert selection.kept_ids == kept
    assert selection.diverse_tasks == {"t1", "t4"}
    assert sorted([*selection.kept_ids, *selection.reasons]) == sorted(t.id for t in SET)  # all decided
    assert selection.reasons["a4"] == "not verified (outcome code-error, score 0.1)"
    assert selection.reasons["d2"].startswith("not verified (outcome llm-error")
    assert selection == select(list(reversed(SET)), strategy=strategy, judge_config=CONFIG)  # order-free


def test_strategy_reasons_name_the_winner_or_the_missing_diversity():
    fastest = select(SET, strategy="fastest-valid", judge_config=CONFIG).reasons
    assert fastest["a1"] == fastest["a2"] == "strategy fastest-valid kept a3"
    assert fastest["b1"] == "strategy fastest-valid kept b2"
    top2 = select(SET, strategy="top2-diverse", judge_config=CONFIG)
    assert top2.reasons["a3"] == "strategy top2-diverse kept a2, a1"
    assert top2.reasons["b1"] == "strategy top2-diverse: task t2 is not diverse (2 of 2 attempts valid)"
    assert top2.reasons["e1"] == "strategy top2-diverse: task t5 is not diverse (1 of 1 attempts valid)"
    assert top2.counts() == {"verification": 6, "strategy": 4}


def test_a_caller_predicate_decides_validity_and_diversity():
    def strict(t: Trajectory) -> bool:  # e.g. a raised pass bar applied to the stored scores
        return t.passed is True and t.score >= 0.9

    selection = select(SET, strategy="fastest-valid", judge_config=CONFIG, valid=strict)
    assert selection.kept_ids == ["a2", "b2", "d1", "e1"]
    assert selection.reasons["a3"] == "not verified (outcome graded, score 0.85)"
    assert diverse_tasks(SET, strict) == {"t1", "t4"}
    assert diverse_tasks(SET, lambda t: t.passed is True and t.score >= 0.95) == {"t1"}


def test_diversity_can_come_from_other_attempts():
    gold = [traj("g1", "t2", code=FOREST)]
    samples = [traj("s1", "t2"), traj("s2", "t2", passed=False)]
    selection = select(gold, strategy="diverse-valid", judge_config=CONFIG, attempts=samples)
    assert selection.kept_ids == ["g1"] and selection.diverse_tasks == {"t2"}


def test_judge_thresholds_drop_with_reasons():
    judgements = [
        judged("a1", **(dict.fromkeys(CRITERION_FIELDS, 2) | {"task_alignment": 3})),  # mean 13/6
        judged("a2", query_clarity=5, educational_value=1, task_alignment=5),
        judged("a3", query_clarity=5),
        judged("b1", status="malformed"),
    ]
    selection = select(SET, judgements, strategy="all-valid", judge_config=CONFIG)
    assert selection.reasons["a1"] == "judge overall 2.17 < judge.min_overall=3"
    assert selection.reasons["a2"] == "judge educational_value 1 < judge.min_criterion=2"
    assert selection.kept_ids == ["a3", "b2", "b1", "d1", "e1"]  # unjudged and malformed pass by default
    strict = select(SET, judgements, strategy="all-valid", judge_config=JudgeConfig(require_judgement=True))
    assert strict.kept_ids == ["a3"]
    assert strict.reasons["b1"] == "judgement malformed (judge.require_judgement is set)"
    assert strict.reasons["b2"] == "no judgement (judge.require_judgement is set)"
    lenient = select(
        SET, judgements, strategy="all-valid", judge_config=JudgeConfig(min_overall=2, min_criterion=1)
    )
    assert lenient.kept_ids[:3] == ["a2", "a1", "a3"]
    assert select(SET, judgements, strategy="all-valid", judge_config=CONFIG).counts()["judge"] == 2


def test_near_duplicates_are_dropped_keeping_the_preferred_twin():
    commented = "# a first try\n" + FOREST.replace("\n", "  # step\n\n")  # other comments and blanks
    group = [
        traj("x1", "t9", runs=2, seconds=60, score=0.95, code=FOREST),
        traj("x2", "t9", runs=1, seconds=30, score=0.90, code=commented),
        traj("x3", "t9", runs=1, seconds=90, score=0.80, code=LOGISTIC),
    ]
    best_first = select(group, strategy="all-valid", judge_config=CONFIG)
    assert best_first.kept_ids == ["x1", "x3"]
    assert best_first.reasons["x2"] == "near-duplicate of x1 (similarity 1.00 >= judge.max_similarity=0.9)"
    fastest_first = select(group, strategy="fastest-valid", judge_config=CONFIG)
    assert fastest_first.kept_ids == ["x2"]
    assert fastest_first.reasons["x1"].startswith("near-duplicate of x2 (similarity 1.00")
    assert fastest_first.reasons["x3"] == "strategy fastest-valid kept x2"


def test_similarity_threshold_decides_for_close_variants():
    variant = FOREST.replace("n_estimators=300", "n_estimators=500")
    a, b = traj("v1", "t8", score=0.9, code=FOREST), traj("v2", "t8", score=0.8, code=variant)
    close = similarity(code_signature(a), code_signature(b))
    assert 0.6 < close < 1.0
    assert similarity(code_signature(a), code_signature(traj("v3", "t8", code=LOGISTIC))) < 0.3
    dropped = select([a, b], strategy="all-valid", judge_config=JudgeConfig(max_similarity=close - 0.01))
    assert dropped.kept_ids == ["v1"] and dropped.reasons["v2"].startswith("near-duplicate of v1")
    kept = select([a, b], strategy="all-valid", judge_config=JudgeConfig(max_similarity=close + 0.01))
    assert kept.kept_ids == ["v1", "v2"]


def test_trajectories_without_code_are_never_duplicates():
    bare = [traj(f"n{i}", "t7", runs=0, seconds=i) for i in (1, 2)]
    assert code_signature(bare[0]) is None
    assert select(bare, strategy="all-valid", judge_config=CONFIG).kept_ids == ["n1", "n2"]


def test_bad_input_is_refused_with_the_fix():
    with pytest.raises(
        SelectionError, match="unknown selection strategy 'best'; choose one of fastest-valid"
    ):
        select(SET, strategy="best", judge_config=CONFIG)
    with pytest.raises(SelectionError, match="a1 given more than once"):
        select([*SET, SET[0]], strategy="all-valid", judge_config=CONFIG)
