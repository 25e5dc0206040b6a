"""A release as Harbor tasks (registered as `harbor`): the task format of Terminal-Bench 2
(github.com/laude-institute/harbor), one folder per released task, each checked by a control run before it is
kept.

A task folder `<family>-<task id>/` (lower case) holds what Harbor's `Task` reads:

- `instruction.md`: our instruction, its line on code runs replaced by where the files are (`/app`, the working
  folder) and the time the agent has;
- `task.toml` in Harbor 0.25's schema (`schema_version` 1.4): `artifacts` (`/app/<output>`: the one file Harbor
  carries from the agent's container to the verifier's), `[task]` (name `dareforge/<folder>`, description,
  keywords), `[metadata]` (family, grading, metric, pass bar, what the reward means, the task's provenance:
  source, its title, address and license, release name, version and content fingerprint, generator version and
  seed, split, the package versions; a question's tier and operations), `[verifier]` (timeout: one code run's
  seconds; `environment_mode = "separate"`), `[agent]` (timeout: turns x seconds per run, the budget our
  protocol gives) and `[environment]` (1 CPU and the sandbox's `memory_mb`). `harbor lint` with its default
  rules finds nothing (`tests/test_harbor_package.py` runs it);
- `environment/Dockerfile`: `python:<version>-slim` with the task's `package_versions` pinned, working folder
  `/app` holding `environment/app/`, the task's public files;
- `solution/solve.sh`: the task's seeded reference from the private release, run in `/app`: an IF task's
  `reference.py` (the workflow the instruction states), an MM/TS task's `strong_reference.py`, a question's
  certified `reference.py` (a Lake's recorded `cleaning.py` first);
- `tests/`: `test.sh`, dareforge's grader and the private file it grades against (see `harbor_grader`); the
  answers are only here, never in `environment/`, `solution/` or the instruction.

The verifier runs apart from the agent (Harbor's separate mode): a fresh container of the same image, its `/app`
as the agent found it plus the agent's output, `/tests` and an empty `/logs/verifier`. With the verifier in the
agent's container, a link `/app/<output> -> /tests/<truth>` left by the agent resolved once `/tests` arrived
and was paid 1; now the link is dropped on the way (Harbor's copy keeps no link that leaves the artifact) and
the grader reads only a regular file in any case.

The reward Harbor reads (`/logs/verifier/reward.txt`) is binary: 1 when the grade passes dareforge's bar for the
task (IF: every prediction matches the reference run; MM/TS: the metric reaches the task's pass bar, its own
where it carries one, else its family's, as its instruction states; QA/Lake: the answer's score reaches `ANSWER_PASS_BAR`), else 0; the score itself is in
`/logs/verifier/grade.json`. A Lake task's sub-questions are not exported (Harbor grades one reward per task).

Which tasks are kept is decided from the store, without a run: a goal family's oracle runs its strong
reference, whose score the store kept when the task was made, so a task scored below its pass bar is
left out with that reason (`stored_verdict`); an exact or question family's reference made the answers it is
graded against. Control runs (`harbor_control`, no Docker) prove the packaging on a sample seeded by the task
ids, up to `controls_per_family` exported tasks of each family (default `CONTROLS_PER_FAMILY`, or every task),
so their cost does not grow with the release. They follow Harbor's phases: the agent's (the oracle's `solve.sh`,
or nothing for a no-op) without `/tests`, then `test.sh` in a verifier of its own. Each oracle must earn reward 1
and a no-op agent reward 0; one that does not is a packaging bug and fails the export. (A goal task without a stored score is always controlled, and left out when its oracle only scores
below the bar.) Tasks are read one at a time, so memory does not grow with the release either.
`README.md` at the top is the export's card: the counts, and every task left out with its reason. The folder
holds the answers: it is as private as the private release it is cut from. Same release, same bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dareforge.exports import ExportError
from dareforge.exports.export_format import ExportJob, FolderLayout, LayoutReport
from dareforge.exports.harbor_control import APP, Controller, ControlRun
from dareforge.exports.harbor_grader import grader_files, grading_config
from dareforge.families.family import Family, Grading
from dareforge.families.registry import REGISTERED, bar_of, bar_rule, family_of
from dareforge.generators.questions.build import CLEANING, REFERENCE
from dareforge.publish.release import Release, ReleaseError
from dareforge.reference_solutions.reference_code import STRONG_SCRIPT
from dareforge.schema import Source, Task

SCHEMA_VERSION = "1.4"
"""Harbor's task.toml schema version this layout writes (`TaskConfig.schema_version`): 0.25's, which has the
separate verifier (`[verifier] environment_mode`) and `artifacts`."""
VERIFIER_MODE = "separate"
"""`[verifier] environment_mode`: the verifier runs in a fresh container of the task's image, never in the one the
agent ran in (Harbor's lint rule `shared-verifier`); it gets only `artifacts` from the agent's."""
ORG = "dareforge"
APP_DIR = "app"
CONTROL_WORKERS = 4
CONTROLS_PER_FAMILY = 20
"""Exported tasks of each family whose oracle and no-op run by default: enough to catch a packaging bug of a
family (its grading in test.sh, its solve.sh, its files) in a time that does not grow with the release."""
SAMPLE_SEED = "dareforge-harbor-controls"
SUMMARY_LEFT_OUT = 10
"""Tasks left out that the summary names (a large release leaves out hundreds; the card lists them all)."""
SOLUTIONS = {Grading.EXACT: [REFERENCE], Grading.GOAL: [STRONG_SCRIPT], Grading.ANSWER: [CLEANING, REFERENCE]}
"""The private scripts a family's oracle runs, in order (a missing optional one, e.g. a QA task's cleaning
step, is skipped)."""
RUNS_LINE = "You may run code at most "
REWARD_RULE = {
    Grading.EXACT: "1 when every prediction matches the reference run (score 1), else 0",
    Grading.GOAL: "1 when the metric reaches the task's pass bar (as its instruction states), else 0",
    Grading.ANSWER: "1 when the answer's score reaches the pass bar, else 0",
}


@dataclass
class HarborReport(LayoutReport):
    tasks: list[str] = field(default_factory=list)
    families: Counter = field(default_factory=Counter)
    controls_per_family: int | None = CONTROLS_PER_FAMILY
    controlled: Counter = field(default_factory=Counter)
    """family -> tasks whose control runs ran (the seeded sample)."""
    oracle_passed: Counter = field(default_factory=Counter)
    noop_failed: Counter = field(default_factory=Counter)
    rewards: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    """task id -> (the oracle's reward, the no-op's reward) in the control runs."""

    @property
    def sample_rule(self) -> str:
        if self.controls_per_family is None:
            return "every exported task"
        return f"a seeded sample of up to {self.controls_per_family} per family"

    def summary(self) -> list[str]:
        lines = [
            f"exported {len(self.tasks)} of {len(self.tasks) + len(self.skipped)} tasks of {self.release.name}@"
            f"{self.release.version} to {self.dest} as Harbor tasks, {len(self.skipped)} left out; control runs "
            f"on {self.controlled.total()} ({self.sample_rule}): the oracle earned 1 on "
            f"{self.oracle_passed.total()}, a no-op 0 on {self.noop_failed.total()}"
        ]
        left_out = sorted(self.skipped.items())
        lines += [f"  left out {key}: {why}" for key, why in left_out[:SUMMARY_LEFT_OUT]]
        if len(left_out) > SUMMARY_LEFT_OUT:
            lines.append(
                f"  and {len(left_out) - SUMMARY_LEFT_OUT} more left out: its README.md lists every one"
            )
        return lines


def folder_name(task: Task) -> str:
    return f"{task.family.lower()}-{task.id}"


def agent_seconds(task: Task) -> float:
    return float(task.limits.turns * task.limits.seconds_per_execution)


def instruction(task: Task, family: Family) -> str:
    kept = [line for line in task.instruction.splitlines() if not line.startswith(RUNS_LINE)]
    text = "\n".join(kept).rstrip()
    output = family.files.output
    return (
        f"{text}\n\nThe files named above are in `/app`, your working directory; write `{output}` there "
        f"(`/app/{output}`) as a regular file, not a link: it is what is graded, and the only file the grader "
        f"gets. You have {agent_seconds(task):g} seconds.\n"
    )


def artifacts(family: Family) -> list[str]:
    """What Harbor copies from the agent's container into the verifier's (`artifacts`): the graded output only;
    the verifier's `/app` is otherwise the image's, as the agent found it."""
    return [f"{APP}/{family.files.output}"]


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def toml_text(document: dict[str, Any]) -> str:
    """Top-level scalars, then one table per dict value (values: scalars and lists; None is left out)."""
    lines = [
        f"{k} = {_toml_value(v)}" for k, v in document.items() if not isinstance(v, dict) and v is not None
    ]
    for name, table in document.items():
        if isinstance(table, dict):
            lines += ["", f"[{name}]"]
            lines += [f"{k} = {_toml_value(v)}" for k, v in table.items() if v is not None]
    return "\n".join(lines) + "\n"


def task_toml(
    task: Task, family: Family, release: Release, split: str | None, source: Source | None, memory_mb: int
) -> str:
    metric = task.metric
    metadata: dict[str, Any] = {
        "author_name": ORG,
        "category": "data-science",
        "tags": ["dareforge", "data-science", "tabular", task.family],
        "difficulty": task.difficulty,
        "task_id": task.id,
        "family": task.family,
        "asks": family.words.asks,
        "grading": str(family.grading),
        "metric": metric.name,
        "answer_type": metric.answer_type,
        "pass_bar": bar_of(task),
        "reward": REWARD_RULE[family.grading] + "; the score is in /logs/verifier/grade.json",
        "operations": list(task.operations) or None,
        "split": split,
        "source_id": task.source_id,
        "source_version": task.source_version,
        "source_title": source.title if source else None,
        "source_url": source.public_url if source else None,
        "license": (source.license if source else None) or "not stated",
        "release": release.name,
        "release_version": release.version,
        "release_fingerprint": release.manifest["content_fingerprint"],
        "generator_version": task.generator_version,
        "seed": task.seed,
        "package_versions": list(task.package_versions),
    }
    first_line = task.instruction.strip().splitlines()[0] if task.instruction.strip() else task.family
    document = {
        "schema_version": SCHEMA_VERSION,
        "artifacts": artifacts(family),
        "task": {
            "name": f"{ORG}/{folder_name(task)}",
            "description": f"{task.family} ({family.words.asks}): {first_line}",
            "keywords": ["dareforge", "data-science", task.family],
        },
        "metadata": metadata,
        "verifier": {
            "timeout_sec": float(task.limits.seconds_per_execution),
            "environment_mode": VERIFIER_MODE,
        },
        "agent": {"timeout_sec": agent_seconds(task)},
        "environment": {"cpus": 1, "memory_mb": memory_mb},
    }
    return toml_text(document)


def dockerfile(task: Task) -> str:
    pins = [p for p in task.package_versions if not p.startswith("python==")]
    python = next((p.split("==", 1)[1] for p in task.package_versions if p.startswith("python==")), "3.11")
    lines = [f"FROM python:{python}-slim", ""]
    if pins:
        lines += ["RUN pip install --no-cache-dir " + " ".join(sorted(pins)), ""]
    lines += ["WORKDIR /app", f"COPY {APP_DIR}/ /app/", ""]
    return "\n".join(lines)


def _private(release: Release, task: Task, name: str) -> bytes | None:
    key = f"{release.answers_dir(task.id)}/{name}"
    return release.store.read_bytes(key) if release.store.exists(key) else None


def write_task(
    release: Release,
    task: Task,
    target: Path,
    split: str | None,
    source: Source | None,
    memory_mb: int,
    grader: dict[str, bytes],
) -> None:
    """`grader`: the grader bundle (`grader_files()`, the same for every task)."""
    family = family_of(task)
    files: dict[str, bytes] = {
        "instruction.md": instruction(task, family).encode(),
        "task.toml": task_toml(task, family, release, split, source, memory_mb).encode(),
        "environment/Dockerfile": dockerfile(task).encode(),
    }
    for f in task.public_files:
        files[f"environment/{APP_DIR}/{f.name}"] = release.store.read_bytes(
            f"{release.files_dir(task.id)}/{f.name}"
        )
    steps = []
    for name in SOLUTIONS[family.grading]:
        script = _private(release, task, name)
        if script is None and name == CLEANING:
            continue
        if script is None:
            raise ReleaseError(
                f"task {task.id} has no {name} in the private release {release.private_prefix}"
            )
        files[f"solution/{name}"] = script
        steps.append(f"python /solution/{name}")
    files["solution/solve.sh"] = (
        "#!/bin/bash\n# The task's seeded reference from dareforge's private release, run in the working folder.\n"
        "set -euo pipefail\ncd /app\n" + "\n".join(steps) + "\n"
    ).encode()
    truth = family.files.truth
    answers = _private(release, task, truth)
    if answers is None:
        raise ReleaseError(f"task {task.id} has no {truth} in the private release {release.private_prefix}")
    files[f"tests/{truth}"] = answers
    files["tests/grading.json"] = grading_config(
        task.metric.model_dump(), task.family, str(family.grading), bar_of(task), family.files.output, truth
    )
    files.update({f"tests/{name}": data for name, data in grader.items()})
    for rel, data in sorted(files.items()):
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(0o755 if rel.endswith(".sh") else 0o644)


def control_verdict(oracle: ControlRun, noop: ControlRun) -> str | None:
    """Why a task's control runs failed (None: they passed): its oracle must earn 1 and a no-op 0."""
    if oracle.reward != 1.0:
        why = (
            oracle.failure
            or oracle.details.get("error")
            or (f"score {oracle.details.get('score')} below the bar {oracle.details.get('bar')}")
        )
        return f"the oracle (solution/solve.sh) earned reward {oracle.reward}: {why}"
    if noop.reward != 0.0:
        why = noop.failure or f"score {noop.details.get('score')}"
        return f"a no-op agent earned reward {noop.reward} (expected 0): {why}"
    return None


def graded_below_bar(oracle: ControlRun) -> bool:
    """Whether the oracle ran and was graded, and only its score missed the bar (the reference's fault, not the
    packaging's)."""
    return oracle.reward == 0.0 and oracle.failure is None and not oracle.details.get("error")


def stored_verdict(task: Task, family: Family) -> str | None:
    """Why the store already knows that `task`'s oracle cannot earn 1 (None: it earns 1, or only a run tells): a
    goal family's oracle runs the strong reference, whose score on the task's answers the store keeps; an exact
    or question family's reference made the answers it is graded against."""
    strong, passing = task.scores.strong, bar_of(task)
    if family.grading != Grading.GOAL or strong is None or strong >= passing:
        return None
    return (
        f"the strong reference (solution/solve.sh) scored {strong:.6g} when the task was made, below the bar "
        f"{passing:g}: its oracle cannot earn reward 1 (decided from the store, without a run)"
    )


def needs_control(task: Task, family: Family) -> bool:
    """Whether only a control run tells if the oracle earns 1: a goal task whose store holds no strong score."""
    return family.grading == Grading.GOAL and task.scores.strong is None


def sample_rank(task_id: str) -> str:
    return hashlib.sha256(f"{SAMPLE_SEED}:{task_id}".encode()).hexdigest()


def control_sample(ids_by_family: dict[str, list[str]], per_family: int | None) -> set[str]:
    """Up to `per_family` task ids of each family (None: all): those whose seeded hash ranks first, so the same
    ids give the same sample in any order and a task added to a release displaces a sampled one only by
    outranking it."""
    chosen: set[str] = set()
    for ids in ids_by_family.values():
        ranked = sorted(ids, key=sample_rank)
        chosen.update(ranked if per_family is None else ranked[:per_family])
    return chosen


def parse_controls(text: str | None) -> int | None:
    """`--controls`: a number of tasks per family, `all` (None), or nothing (the default)."""
    if text is None:
        return CONTROLS_PER_FAMILY
    if text == "all":
        return None
    if not text.isdigit():
        raise ExportError(f"--controls takes a number of tasks per family or `all`, not {text!r}")
    return int(text)


def export_order(release: Release) -> list[str]:
    """The release's task ids by registered family, then id (from its manifest: no task record is loaded)."""
    order = {name: i for i, name in enumerate(REGISTERED)}
    rows = sorted(
        release.manifest["tasks"], key=lambda r: (order.get(r["family"], len(order)), r["family"], r["id"])
    )
    return [r["id"] for r in rows]


class HarborLayout(FolderLayout):
    def __init__(self, name: str, controls_per_family: int | None = CONTROLS_PER_FAMILY):
        """`controls_per_family`: how many exported tasks of each family get control runs, a sample seeded by
        their ids (None: every task)."""
        super().__init__(name)
        self.controls_per_family = controls_per_family

    def write(self, job: ExportJob, folder: Path) -> HarborReport:
        """Every task of the job's release as a Harbor task, but those the store knows fail their oracle; a
        seeded sample of each family controlled in the sandbox (module doc)."""
        release = job.release
        report = HarborReport(release, Path(job.dest), controls_per_family=self.controls_per_family)
        controller = Controller(job.ctx.config.sandbox)
        sources = {s.id: s for s in job.ctx.store.read_records(Source)}
        splits = release.splits
        memory = job.ctx.config.sandbox.memory_mb
        grader = grader_files()
        expected_to_pass: dict[str, list[str]] = {}
        unknown: set[str] = set()
        left_out: dict[str, tuple[str, str]] = {}
        order = export_order(release)
        for task_id in order:
            task = release.task(task_id)  # one at a time: memory does not grow with the release
            family = family_of(task)
            why = stored_verdict(task, family)
            if why is not None:
                report.skipped[task.id] = why
                left_out[task.id] = (task.family, why)
                continue
            where = folder / folder_name(task)
            write_task(release, task, where, splits.get(task.id), sources.get(task.source_id), memory, grader)
            report.tasks.append(folder_name(task))
            report.families[task.family] += 1
            if needs_control(task, family):
                unknown.add(task.id)
            else:
                expected_to_pass.setdefault(task.family, []).append(task.id)

        chosen = control_sample(expected_to_pass, self.controls_per_family) | unknown
        controlled = [release.task(i) for i in order if i in chosen]

        def control(task: Task) -> tuple[ControlRun, ControlRun]:
            where = folder / folder_name(task)
            timeouts = {
                "solve_timeout": agent_seconds(task),
                "test_timeout": float(task.limits.seconds_per_execution),
            }
            return controller.run(where, oracle=True, **timeouts), controller.run(
                where, oracle=False, **timeouts
            )

        workers = max(1, min(CONTROL_WORKERS, os.cpu_count() or 1))
        with ThreadPoolExecutor(workers) as pool:
            runs = list(pool.map(control, controlled))
        packaging_bugs = []
        for task, (oracle, noop) in zip(controlled, runs, strict=True):
            report.controlled[task.family] += 1
            report.rewards[task.id] = (oracle.reward, noop.reward)
            report.oracle_passed[task.family] += oracle.reward == 1.0
            report.noop_failed[task.family] += noop.reward == 0.0
            why = control_verdict(oracle, noop)
            if why is None:
                continue
            if task.id in unknown and graded_below_bar(oracle):
                shutil.rmtree(folder / folder_name(task))
                report.tasks.remove(folder_name(task))
                report.families[task.family] -= 1
                report.skipped[task.id] = why
                left_out[task.id] = (task.family, why)
            elif graded_below_bar(oracle) and task.scores.strong is not None:
                packaging_bugs.append(
                    f"{task.family} {task.id}: {why} (the store kept {task.scores.strong:.6g}: the reference does "
                    "not reproduce its score here)"
                )
            else:
                packaging_bugs.append(f"{task.family} {task.id}: {why}")
        if packaging_bugs:
            raise ExportError(
                f"PACKAGING BUG: {len(packaging_bugs)} of {len(controlled)} controlled tasks failed their control "
                "runs though the store says their oracle earns 1 (the Harbor folders do not grade as dareforge "
                "does, or miss a file); nothing was exported:\n  " + "\n  ".join(packaging_bugs)
            )
        (folder / "README.md").write_text(card(report, left_out))
        return report


def card(report: HarborReport, left_out: dict[str, tuple[str, str]]) -> str:
    release = report.release
    lines = [
        f"# {release.name} as Harbor tasks",
        "",
        f"{len(report.tasks)} data-science tasks of the release `{release.name}@{release.version}` (content "
        f"fingerprint `{release.manifest['content_fingerprint'][:16]}`) in Harbor's task format "
        "(Terminal-Bench 2, github.com/laude-institute/harbor), one folder per task: `instruction.md`, "
        f"`task.toml` (schema {SCHEMA_VERSION}), `environment/Dockerfile` (the task's package versions pinned, its "
        "files in `/app`), `solution/solve.sh` (the task's seeded reference) and `tests/test.sh` (dareforge's own "
        "grader).",
        "",
        "Run one with Harbor, e.g. `harbor run --path <this folder>/<task folder> --agent oracle`.",
        "",
        "## Reward",
        "",
        "`/logs/verifier/reward.txt` is binary: 1 when the grade passes dareforge's bar for the task's family "
        "(IF: every prediction matches the reference run; MM and TS: the metric reaches the task's pass bar, "
        "in each `task.toml` and stated in its instruction; QA and Lake: the answer scores at least the pass bar), else 0. "
        "`/logs/verifier/grade.json` holds the score, the error if the output was refused, and the bar. A Lake "
        "task's sub-questions are not exported.",
        "",
        bar_rule(),
        "",
        "## Which tasks are kept, and the control runs",
        "",
        "A task whose oracle cannot earn 1 is left out, decided from the store without a run: an MM or TS "
        "task's oracle runs its strong reference, whose score on the task's answers the store kept when the task "
        "was made (below the task's pass bar: left out); an IF or question task's reference made the answers "
        "it is graded against.",
        "",
        f"Control runs prove the packaging (`solve.sh`, the grading in `test.sh`, the files) on {report.sample_rule} "
        "(the sample is drawn by a seeded hash of the task ids: the same release gives the same sample): each "
        "ran twice without Docker, in Harbor's two phases, each a dareforge bubblewrap sandbox with Harbor's paths "
        "bound: the agent's (`solve.sh`, or nothing) with `/app`, `/logs` and the oracle's `/solution` but no "
        "`/tests`, then the verifier's (`test.sh`) with `/tests`, a fresh `/logs` and the image's `/app` plus the "
        'agent\'s output, as `environment_mode = "separate"` runs it. The oracle must earn 1 and a no-op agent 0; '
        "a controlled task that fails either fails the whole export as a packaging bug.",
        "",
        f"- Tasks controlled: {report.controlled.total()}",
        f"- Oracle earned 1: {report.oracle_passed.total()} of {report.controlled.total()}",
        f"- No-op earned 0: {report.noop_failed.total()} of {report.controlled.total()}",
        f"- Exported: {len(report.tasks)}",
        f"- Left out: {len(left_out)}",
        "",
        "| family | exported | controlled | oracle earned 1 | no-op earned 0 |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {name} | {report.families[name]} | {report.controlled[name]} | {report.oracle_passed[name]} | "
        f"{report.noop_failed[name]} |"
        for name in REGISTERED
        if report.families[name]
    ]
    lines += ["", "## Left out", ""]
    if left_out:
        lines += ["| task | family | reason |", "|---|---|---|"]
        lines += [
            f"| {task_id} | {family} | {why.replace('|', '/')} |"
            for task_id, (family, why) in sorted(left_out.items())
        ]
    else:
        lines += ["None."]
    lines += [
        "",
        "## Privacy",
        "",
        f"Each `tests/` folder holds its task's answers: this folder is as private as `{release.name}-private`.",
        "",
    ]
    return "\n".join(lines)
