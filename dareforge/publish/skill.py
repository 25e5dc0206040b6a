"""How well a release's tasks measure skill, per family: what the release card and report show of it.

Prediction families graded against a baseline (MM, TS) have a solver ladder (`validators.discrimination`):
its `discrimination` finding ranks the task's rungs, and the gate rejects a task whose rungs are not told
apart. Question families (QA, Lake) carry a difficulty tier on the task itself.

`skill_summary` condenses both into the `skill` block of a release's public manifest, from which the card and
the report draw. It holds aggregates only (counts, means, medians, per-rung means, histogram bins): a task's own
ladder scores would tell how well its reference does, which the public half never says. It holds no CPU seconds
either: a release's bytes are a function of its inputs, and timings measure the machine that ran the ladder.

The gated share describes the candidates the ladder ran on (the gate's rejections are, by definition, not
released); the tau, difficulty, headroom and rung figures describe the released tasks.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from dareforge.families.registry import family_named, in_order
from dareforge.schema import Task, Validation, Verdict

CHECK = "discrimination"
BINS = 10
"""Histogram bins of difficulty and headroom, equal widths over [0, 1] (a share of rungs; a gap below a best
score of 1)."""
TIERS = ("easy", "medium", "hard")
NOT_TIERED = "not tiered"
DIGITS = 4
"""Decimals kept of a figure in the manifest: the card prints fewer, the report's plots need no more."""

NO_LADDER = (
    "No solver ladder ran on this version's tasks (it runs when `validate.ladder_cpu_seconds` > 0), so there "
    "is no difficulty, headroom or non-discriminative share to show."
)
LADDER_COLUMNS = [
    "laddered",
    "non-discriminative",
    "released",
    "mean tau",
    "median difficulty",
    "median headroom",
]
LADDER_TEXT = (
    "Each prediction task's solver ladder (trivial, linear, tree, boosted, boosted with early stopping) is graded "
    "with the task's metric, with a bootstrap interval over the test rows. `laddered`: candidate tasks the ladder "
    "ran on; `non-discriminative`: the share of them the gate rejected because the rungs were not told apart; "
    "the rest describe the released tasks: `mean tau` (Kendall's tau between the rungs' order and their scores "
    "over the rung pairs whose intervals do not overlap; 1: scores rise with the rungs), `median "
    "difficulty` (the share of rungs the strong reference beats) and `median headroom` (1 minus the best "
    "rung's score)."
)
TRIVIAL_CHECK = "trivial"
TRIVIAL_COLUMNS = ["graded", "median", "max", "pass bar"]
TRIVIAL_TEXT = (
    "Each task's trivial answers, made without doing the task (IF: the reference predictions' most frequent "
    "value, mean and median on every row; MM and time series: the bar's own baselines and model-free "
    "forecasts; questions: 0, 1, the empty list, true, false, a column's first value, the numbers the question "
    "states), are graded with the task's grader. The gate rejects a task where the best one reaches its "
    "family's pass bar, or reproduces more than `validate.max_trivial_share` of an IF task's rows. Over the "
    "released tasks: the best trivial answer's score, median and max (`graded`: tasks graded so)."
)
SENSITIVITY = "sensitivity"
SENSITIVITY_COLUMNS = ["mutation-tested", "stated requirements", "that matter", "share that matter"]
SENSITIVITY_TEXT = (
    "Each instruction-following task's instruction is mutation-tested: for each requirement (each filter, the "
    "feature lists, imputers, scaler, encoder, model class, each parameter and the seed) the reference is run "
    "once more with only that requirement changed to a neighbouring value. A requirement matters when that "
    "changes a prediction on at least one test row; the instruction leaves out what cannot change one. Over the "
    "released tasks: the stated requirements and the share of them that matter."
)
TIER_COLUMNS = [*TIERS, NOT_TIERED, "hard share"]
TIER_TEXT = (
    "Question tasks are tiered by the operations their certified program needs: easy (one, or what a "
    "one-step shortcut answers), medium (two), hard (three or more, or a join across files, with sub-tasks). "
    "`hard share` is of the tiered tasks."
)


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), DIGITS)


def _bins(values: Iterable[float]) -> list[int]:
    counts = [0] * BINS
    for value in values:
        counts[min(max(int(value * BINS), 0), BINS - 1)] += 1
    return counts


def _ladders(validations: Iterable[Validation]) -> dict[str, dict[str, Any]]:
    """task id -> its ladder's details, for tasks the ladder ran on (a finding without rungs is one about why
    it could not run, e.g. a task without a strong reference)."""
    out = {}
    for finding in validations:
        if finding.check == CHECK and finding.details:
            details = json.loads(finding.details)
            if details.get("rungs"):
                out[finding.task_id] = details
    return out


def _rungs(ladders: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each rung's mean score and mean interval over the ladders that scored it, in ladder order."""
    scored: dict[str, list[dict[str, Any]]] = {}
    for details in ladders:
        for rung in details["rungs"]:
            # First seen, first listed: every ladder lists its rungs in order, failed ones included.
            scored.setdefault(rung["name"], [])
            if rung.get("score") is not None:
                scored[rung["name"]].append(rung)
    return [
        {
            "name": name,
            "tasks": len(rungs),
            **{
                key: _round(statistics.fmean(r[key] for r in rungs)) if rungs else None
                for key in ("score", "low", "high")
            },
        }
        for name, rungs in scored.items()
    ]


def _ladder_family(
    laddered: list[str], released: list[str], ladders: dict[str, dict[str, Any]], gated: set[str]
) -> dict[str, Any]:
    kept = [ladders[t] for t in released]

    def values(key: str) -> list[float]:
        return [d[key] for d in kept if d.get(key) is not None]

    def median(key: str) -> float | None:
        return _round(statistics.median(values(key))) if values(key) else None

    return {
        "laddered": len(laddered),
        "gated": sum(t in gated for t in laddered),
        "released": len(released),
        "mean_tau": _round(statistics.fmean(values("tau"))) if values("tau") else None,
        "median_difficulty": median("difficulty"),
        "median_headroom": median("headroom"),
        "difficulty_bins": _bins(values("difficulty")),
        "headroom_bins": _bins(values("headroom")),
        "rungs": _rungs(kept),
    }


def skill_summary(
    candidates: list[Task],
    released: list[Task],
    validations: Iterable[Validation],
    verdicts: Iterable[Verdict],
) -> dict[str, Any]:
    """The manifest's `skill` block: `ladder` (prediction family -> its ladder figures; empty when no ladder
    ran on any candidate), `trivial` (family -> the best trivial answer's median and max score over its
    released tasks), `tiers` (question family -> released tasks per tier, `not tiered` included) and
    `sensitivity` (IF family -> its stated requirements and how many matter)."""
    validations = list(
        validations
    )  # read thrice: the ladders', the trivial answers' and sensitivity findings
    ladders = _ladders(validations)
    gated = {v.task_id for v in verdicts if any(r.startswith(f"{CHECK}:") for r in v.reasons)}
    released_ids = {t.id for t in released}
    laddered: dict[str, list[str]] = defaultdict(list)
    for task in sorted(candidates, key=lambda t: t.id):
        if task.id in ladders:
            laddered[task.family].append(task.id)
    ladder = {
        family: _ladder_family(
            laddered[family], [t for t in laddered[family] if t in released_ids], ladders, gated
        )
        for family in in_order(laddered)
    }
    return {
        "ladder": ladder,
        "trivial": _trivial(released, validations),
        "tiers": _tiers(released),
        SENSITIVITY: _sensitivity(released, validations),
    }


def _trivial(released: list[Task], validations: Iterable[Validation]) -> dict[str, dict[str, Any]]:
    """Released family -> how its tasks' best trivial answers score (`trivial` findings with a score)."""
    best = {f.task_id: f.score for f in validations if f.check == TRIVIAL_CHECK and f.score is not None}
    scores: dict[str, list[float]] = defaultdict(list)
    for task in released:
        if task.id in best:
            scores[task.family].append(best[task.id])
    return {
        family: {
            "graded": len(scores[family]),
            "median": _round(statistics.median(scores[family])),
            "max": _round(max(scores[family])),
        }
        for family in in_order(scores)
    }


def _tiers(released: list[Task]) -> dict[str, dict[str, int]]:
    tiers: dict[str, Counter] = {}
    for task in released:
        if family_named(task.family).asks_question:
            tiers.setdefault(task.family, Counter())[task.difficulty or NOT_TIERED] += 1
    return {f: {t: tiers[f][t] for t in (*TIERS, NOT_TIERED)} for f in in_order(tiers)}


def _sensitivity(released: list[Task], validations: list[Validation]) -> dict[str, dict[str, int]]:
    """IF family -> its released tasks that were mutation-tested, their stated requirements and how many of them
    change the predictions (the `sensitivity` findings)."""
    found = {v.task_id: json.loads(v.details) for v in validations if v.check == SENSITIVITY and v.details}
    out: dict[str, dict[str, int]] = {}
    for task in sorted(released, key=lambda t: t.id):
        if task.id in found:
            figures = out.setdefault(task.family, {"tested": 0, "stated": 0, "matter": 0})
            figures["tested"] += 1
            figures["stated"] += found[task.id]["stated"]
            figures["matter"] += found[task.id]["matter"]
    return {family: out[family] for family in in_order(out)}


def sensitivity_rows(skill: dict[str, Any]) -> dict[str, list[str]]:
    """Family -> its cells under `SENSITIVITY_COLUMNS` (none for a manifest written before them)."""
    return {
        family: [str(f["tested"]), str(f["stated"]), str(f["matter"]), _share(f["matter"], f["stated"])]
        for family, f in skill.get(SENSITIVITY, {}).items()
    }


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "—"


def ladder_rows(skill: dict[str, Any]) -> dict[str, list[str]]:
    """Family -> its cells under `LADDER_COLUMNS`, as the card and the report print them."""
    return {
        family: [
            str(f["laddered"]),
            f"{f['gated']} ({_share(f['gated'], f['laddered'])})",
            str(f["released"]),
            _number(f["mean_tau"]),
            _number(f["median_difficulty"]),
            _number(f["median_headroom"]),
        ]
        for family, f in skill["ladder"].items()
    }


def trivial_rows(skill: dict[str, Any]) -> dict[str, list[str]]:
    """Family -> its cells under `TRIVIAL_COLUMNS` (none for a manifest made before the trivial check)."""
    return {
        family: [
            str(f["graded"]),
            _number(f["median"]),
            _number(f["max"]),
            f"{family_named(family).pass_bar:g}",
        ]
        for family, f in skill.get("trivial", {}).items()
    }


def tier_rows(skill: dict[str, Any]) -> dict[str, list[str]]:
    """Family -> its cells under `TIER_COLUMNS`."""
    rows = {}
    for family, counts in skill["tiers"].items():
        tiered = sum(counts[t] for t in TIERS)
        rows[family] = [*(str(counts[t]) for t in (*TIERS, NOT_TIERED)), _share(counts["hard"], tiered)]
    return rows
