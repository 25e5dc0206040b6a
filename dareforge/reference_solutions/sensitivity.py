"""Mutation testing of an IF instruction: does each requirement it states change the predictions?

For each requirement of a spec (`spec.mutants`: each filter, the feature lists, date parts, imputers, scaler,
encoder, model class, each parameter and the seed) a mutant spec breaks only that requirement with a
neighbouring legal value. A requirement *matters* when its mutant's predictions differ from the reference's
on at least one test row, as an IF attempt is graded (`graders.grade` with the task's metric: classes exactly,
numbers beyond the regression tolerance): ignoring it would then cost an agent its score. An unstated
requirement (`IFSpec.unstated`) that has a mutant must not matter: the instruction would be missing it.

Every mutant runs in one script in the reference worker, which reads the task's files once and fits each
mutant on a fresh copy of them with its own reference script's sections (`if_reference_sections`); mutants
that change only the model share one fit of the preprocessing, as the reference's Pipeline would have done it
(`sensitivity_script`). A mutant's predictions byte for byte the reference's are not graded again. The
result is stored with the task (`private/sensitivity.json`) and the `sensitivity` check reports it.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import pandas as pd

from dareforge.reference_solutions.graders import GradeResult, grade
from dareforge.reference_solutions.reference_code import (
    HEADER,
    PREDICTIONS,
    SECTION_KINDS,
    estimator_code,
    if_reference_sections,
    preprocess_code,
)
from dareforge.reference_solutions.reference_runner import ReferenceRunner
from dareforge.reference_solutions.spec import IFSpec, Mutant, as_followed, may_be_left_out, mutants
from dareforge.schema import MetricSpec

SENSITIVITY = "sensitivity.json"
"""An IF task's sensitivity result, kept privately (it names what the instruction could leave out)."""
OUTCOMES = "mutants.json"
"""What the sensitivity script writes beside the mutants' predictions: each mutant's CPU seconds or error."""


FOLLOWED = "the instruction as followed"
"""The run of what an agent builds from the settled instruction (`settle`)."""


def mutant_file(index: int) -> str:
    return f"mutant-{index}.csv"


@dataclass(frozen=True)
class Requirement:
    """One requirement's verdict: `matters` when its mutant's predictions differ from the reference's on at
    least one test row (`rows_differ` of `rows`); a mutant that failed to run (`error`) counts as not
    mattering."""

    name: str
    stated: bool
    matters: bool
    rows_differ: int = 0
    rows: int = 0
    cpu_seconds: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class Sensitivity:
    requirements: list[Requirement] = field(default_factory=list)
    cpu_seconds: float = 0.0
    """CPU seconds spent: the worker's on the scripts (reading the files once, every mutant) and the grading."""
    followed: Requirement | None = None
    """What an agent following the settled instruction builds (`settle`), when it left something out."""

    @property
    def stated(self) -> list[Requirement]:
        return [r for r in self.requirements if r.stated]

    @property
    def mattering(self) -> list[Requirement]:
        return [r for r in self.stated if r.matters]

    @property
    def silent(self) -> list[Requirement]:
        """Unstated requirements whose mutant changed the predictions: the instruction misses them."""
        return [r for r in self.requirements if not r.stated and r.matters]

    def to_json(self) -> str:
        """The stored form, without CPU seconds: a task's files are a function of its inputs (the generate
        report counts the seconds, `seconds_in["sensitivity"]`)."""

        def timeless(requirement: Requirement) -> dict:
            return {k: v for k, v in asdict(requirement).items() if k != "cpu_seconds"}

        data = {
            "requirements": [timeless(r) for r in self.requirements],
            "followed": timeless(self.followed) if self.followed else None,
        }
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Sensitivity:
        data = json.loads(text)
        followed = data.get("followed")
        return cls(
            [Requirement(**r) for r in data["requirements"]],
            followed=Requirement(**followed) if followed else None,
        )


_SCRIPT = """
import json as _json
import os as _os
import time as _time
import traceback as _traceback

_frames = (train, test)
_outcomes = [None] * {count}
for _shared, _members in {groups!r}:
    _started = _time.process_time()
    _namespace = {{"__name__": "__main__", "train": _frames[0].copy(), "test": _frames[1].copy()}}
    try:
        exec(compile(_shared, "preprocessing.py", "exec"), _namespace)
        _failed = None
    except Exception:
        _failed = _traceback.format_exc(limit=-2)[-2000:]
    for _index, _code in _members:
        _error = _failed
        if _failed is None:
            try:
                exec(compile(_code, f"mutant-{{_index}}.py", "exec"), _namespace)
                _os.replace({predictions!r}, f"mutant-{{_index}}.csv")
            except Exception:
                _error = _traceback.format_exc(limit=-2)[-2000:]
        _outcomes[_index] = {{"cpu_seconds": _time.process_time() - _started, "error": _error}}
        _started = _time.process_time()
with open({outcomes!r}, "w") as _out:
    _json.dump(_outcomes, _out)
"""


def sensitivity_script(specs: list[IFSpec]) -> str:
    """One script that fits every spec of `specs` on the task's files, read once, its predictions renamed
    `mutant-<i>.csv`, its CPU seconds or error in `mutants.json`.

    Specs whose rows, features and preprocessing are the same (the model, parameter and seed mutants: those
    of the reference) share one fit of the preprocessing: each group runs its specs' reference sections up to
    the features on fresh copies of the frames, fits the reference's preprocessing step once
    (`preprocess_code`), then each spec's model (`estimator_code`) with its own fit and predict sections. That
    is what the reference's Pipeline does in its fit and predict, so the predictions are the spec's own
    reference script's; the first spec of a group is charged the shared part's CPU seconds."""
    if not specs:
        raise ValueError("a sensitivity script needs at least one spec")
    loads, groups = set(), {}
    for index, spec in enumerate(specs):
        sections = dict.fromkeys(SECTION_KINDS, "")
        for section in if_reference_sections(spec):
            sections[section.kind] += section.code
        loads.add(sections["load"])
        shared = (
            HEADER
            + "".join(sections[kind] for kind in ("filter", "dates", "features"))
            + (
                f"preprocess = {preprocess_code(spec)}\n"
                f"X = preprocess.fit_transform(X, train[{spec.target!r}])\n"
                "X_test = preprocess.transform(X_test)\n"
            )
        )
        # Each model imports its own class; the shared part ran the rest of the imports in the same namespace.
        imports = sections["imports"].removeprefix(HEADER)
        model = imports + f"model = {estimator_code(spec)}\n" + sections["fit"] + sections["predict"]
        groups.setdefault(shared, []).append((index, model))
    if len(loads) > 1:
        raise ValueError(
            "IF reference scripts load their files in different ways; one script cannot share it"
        )
    head = "".join(s.code for s in if_reference_sections(specs[0]) if s.kind in ("imports", "load"))
    return head + _SCRIPT.format(
        count=len(specs), groups=list(groups.items()), predictions=PREDICTIONS, outcomes=OUTCOMES
    )


def mutation_test(
    runner: ReferenceRunner,
    spec: IFSpec,
    public: Path,
    reference_predictions: Path,
    metric: MetricSpec,
    scratch: Path,
) -> tuple[IFSpec, Sensitivity]:
    """`measure` then `settle`: the spec whose instruction states what matters, and what was found."""
    where = (public, reference_predictions, metric, scratch)
    return settle(runner, spec, measure(runner, spec, *where), *where)


def _reference(path: Path) -> pd.DataFrame:
    """The reference predictions as the grader reads a table (every cell as text), read once for all mutants."""
    return pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")


def measure(
    runner: ReferenceRunner,
    spec: IFSpec,
    public: Path,
    reference_predictions: Path,
    metric: MetricSpec,
    scratch: Path,
) -> Sensitivity:
    """Run every mutant of `spec` on a copy of the task's `public` files in `scratch` (made afresh) and grade
    each against `reference_predictions` with the task's `metric`."""
    verdicts, cpu_seconds = _run(runner, mutants(spec), public, reference_predictions, metric, scratch)
    return Sensitivity(verdicts, cpu_seconds)


def settle(
    runner: ReferenceRunner,
    spec: IFSpec,
    found: Sensitivity,
    public: Path,
    reference_predictions: Path,
    metric: MetricSpec,
    scratch: Path,
) -> tuple[IFSpec, Sensitivity]:
    """The spec whose instruction states what `found` shows to matter, and `found` with what it states.

    A stated requirement that changes nothing is left out when an agent told nothing of it has a default
    (`spec.may_be_left_out`: a filter, a parameter, the seed, an imputer); an unstated one that changes the
    predictions (a scaler in front of a tree, through rounding) is stated. What an agent builds from the
    settled instruction, every unstated requirement done otherwise at once (`spec.as_followed`: filters
    dropped, parameters at their defaults), is run too: if it misses the reference, the requirements left
    out here are stated after all."""
    silent = {r.name for r in found.silent}
    kept = [name for name in spec.unstated if name not in silent]
    idle = [r.name for r in found.stated if not r.matters and not r.error and may_be_left_out(r.name)]
    settled = spec.model_copy(update={"unstated": kept + idle})
    followed, cpu_seconds = None, found.cpu_seconds
    if idle:
        check = Mutant(FOLLOWED, False, as_followed(settled))
        verdicts, spent = _run(runner, [check], public, reference_predictions, metric, scratch)
        followed, cpu_seconds = verdicts[0], cpu_seconds + spent
        if followed.matters or followed.error:
            settled = spec.model_copy(update={"unstated": kept})
    requirements = [replace(r, stated=r.name not in settled.unstated) for r in found.requirements]
    return settled, Sensitivity(requirements, cpu_seconds, followed)


def _run(
    runner: ReferenceRunner,
    found: list[Mutant],
    public: Path,
    reference_predictions: Path,
    metric: MetricSpec,
    scratch: Path,
) -> tuple[list[Requirement], float]:
    """Each mutant's verdict, and the CPU seconds spent: the worker's on the script, this process's grading."""
    started = time.process_time()
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(public, scratch)
    reference = _reference(reference_predictions)
    outcome = runner.run(sensitivity_script([m.spec for m in found]), scratch)
    if not outcome.ok:
        lines = (outcome.error or "no error message").strip().splitlines()
        raise ValueError(f"the sensitivity script failed: {lines[-1]}")
    runs = json.loads((scratch / OUTCOMES).read_text())
    graded = _grader(metric, reference_predictions, reference)
    verdicts = [
        _verdict(m, run, scratch / mutant_file(i), graded)
        for i, (m, run) in enumerate(zip(found, runs, strict=True))
    ]
    return verdicts, outcome.cpu_seconds + time.process_time() - started


def _grader(
    metric: MetricSpec, reference_predictions: Path, reference: pd.DataFrame
) -> Callable[[Path], GradeResult]:
    """Grades predictions against the reference's with `metric`. A grade depends on the two files' contents
    only, so predictions byte for byte the reference's (a requirement that changes nothing, often) take the
    reference's grade against itself, computed once; when that grade names a problem (it names the file),
    each is graded on its own."""
    own = reference_predictions.read_bytes()
    itself: list[GradeResult] = []

    def graded(predictions: Path) -> GradeResult:
        if predictions.stat().st_size == len(own) and predictions.read_bytes() == own:
            if not itself:
                itself.append(grade(metric, reference_predictions, reference))
            if not itself[0].error:
                return itself[0]
        return grade(metric, predictions, reference)

    return graded


def _verdict(
    mutant: Mutant, run: dict, predictions: Path, graded: Callable[[Path], GradeResult]
) -> Requirement:
    base = {"name": mutant.requirement, "stated": mutant.stated, "cpu_seconds": run["cpu_seconds"]}
    if run["error"] is not None:
        return Requirement(**base, matters=False, error=run["error"].strip().splitlines()[-1])
    result = graded(predictions)
    if result.error:
        return Requirement(**base, matters=False, error=result.error)
    differ = round((1.0 - result.score) * result.rows)
    return Requirement(**base, matters=result.score < 1.0, rows_differ=differ, rows=result.rows)
