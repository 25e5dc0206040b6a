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
graded against. Every exported task then has its oracle's reward 1 and a no-op's 0 established, each result
stored under a key of the bytes the runs read and reused by any later export (`harbor_known`): a stored result
of the same key; else the gate's certificate where the task's solution, public files and answers are byte for
byte the certified ones (the reference's stored output graded by the same grader is the oracle's run; the
grader's absent-output path is the no-op's); else a control run (`harbor_control`, no Docker). Control runs
also prove the packaging on a sample seeded by the task ids, up to `controls_per_family` exported tasks of each
family (default `CONTROLS_PER_FAMILY`, or every task) whose result is not stored, and on one task per distinct
grader bundle, on `run.jobs` workers. They follow Harbor's phases: the agent's (the oracle's `solve.sh`, or
nothing for a no-op) without `/tests`, then `test.sh` in a verifier of its own. Each oracle must earn reward 1
and a no-op agent reward 0; one that does not is a packaging bug and fails the export. (A goal task without a
stored score is always controlled, and left out when its oracle only scores below the bar.) Tasks are read one
at a time, so memory does not grow with the release either.
`README.md` at the top is the export's card: the counts, and every task left out with its reason. The folder
holds the answers: it is as private as the private release it is cut from. Same release, same bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dareforge.context import RunContext
from dareforge.exports import ExportError
from dareforge.exports.export_format import ExportJob, FolderLayout
from dareforge.exports.harbor_card import (
    CONTROLS_PER_FAMILY,
    SCHEMA_VERSION,
    HarborReport,
    card,
)
from dareforge.exports.harbor_control import APP, Controller, ControlRun
from dareforge.exports.harbor_grader import grader_files, grading_config
from dareforge.exports.harbor_known import (
    CERTIFIED,
    DERIVED,
    REUSED,
    RUN,
    certify_oracle,
    control_key,
    derive_noop,
    grader_key,
    read_grader_proven,
    read_known,
    write_grader_proven,
    write_known,
)
from dareforge.families.family import Family, Grading
from dareforge.families.registry import REGISTERED, bar_of, family_of
from dareforge.generators.questions.build import CLEANING, REFERENCE
from dareforge.hashing import sha256_bytes
from dareforge.publish.release import Release, ReleaseError
from dareforge.reference_solutions.reference_code import STRONG_SCRIPT
from dareforge.schema import Source, Task

VERIFIER_MODE = "separate"
"""`[verifier] environment_mode`: the verifier runs in a fresh container of the task's image, never in the one the
agent ran in (Harbor's lint rule `shared-verifier`); it gets only `artifacts` from the agent's."""
ORG = "dareforge"
APP_DIR = "app"
CONTROL_WORKERS = 4
SAMPLE_SEED = "dareforge-harbor-controls"
SOLUTIONS = {Grading.EXACT: [REFERENCE], Grading.GOAL: [STRONG_SCRIPT], Grading.ANSWER: [CLEANING, REFERENCE]}
"""The private scripts a family's oracle runs, in order (a missing optional one, e.g. a QA task's cleaning
step, is skipped)."""
RUNS_LINE = "You may run code at most "
REWARD_RULE = {
    Grading.EXACT: "1 when every prediction matches the reference run (score 1), else 0",
    Grading.GOAL: "1 when the metric reaches the task's pass bar (as its instruction states), else 0",
    Grading.ANSWER: "1 when the answer's score reaches the pass bar, else 0",
}


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
) -> dict[str, str]:
    """`grader`: the grader bundle (`grader_files()`, the same for every task). Returns each written file's
    sha256 by its path in the folder (what `control_key` hashes)."""
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
    return {rel: sha256_bytes(data) for rel, data in files.items()}


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


@dataclass(frozen=True)
class Exported:
    """An exported task whose control results no store entry holds yet: its folder's file digests and keys."""

    task_id: str
    files: dict[str, str]
    key: str
    grader: str


class HarborLayout(FolderLayout):
    def __init__(self, name: str, controls_per_family: int | None = CONTROLS_PER_FAMILY):
        """`controls_per_family`: how many exported tasks of each family get real control runs in the sandbox, a
        sample seeded by their ids (None: every task); every other one is established from what is known
        (`harbor_known`)."""
        super().__init__(name)
        self.controls_per_family = controls_per_family

    def write(self, job: ExportJob, folder: Path) -> HarborReport:
        """Every task of the job's release as a Harbor task, but those the store knows fail their oracle; every
        exported task's oracle and no-op established: reused, certified, or run in the sandbox (module doc)."""
        release = job.release
        report = HarborReport(release, Path(job.dest), controls_per_family=self.controls_per_family)
        sources = {s.id: s for s in job.ctx.store.read_records(Source)}
        splits = release.splits
        memory = job.ctx.config.sandbox.memory_mb
        grader = grader_files()
        expected_to_pass: dict[str, list[str]] = {}
        unknown: set[str] = set()
        left_out: dict[str, tuple[str, str]] = {}
        settled: dict[str, tuple[ControlRun, ControlRun, tuple[str, str]]] = {}
        pending: dict[str, Exported] = {}
        families: dict[str, str] = {}
        order = export_order(release)
        for task_id in job.ctx.each("harbor tasks", order):
            task = release.task(task_id)  # one at a time: memory does not grow with the release
            family = family_of(task)
            why = stored_verdict(task, family)
            if why is not None:
                report.skipped[task.id] = why
                left_out[task.id] = (task.family, why)
                continue
            where = folder / folder_name(task)
            files = write_task(
                release, task, where, splits.get(task.id), sources.get(task.source_id), memory, grader
            )
            report.tasks.append(folder_name(task))
            report.families[task.family] += 1
            families[task.id] = task.family
            key = control_key(files, artifacts(family), *_timeouts(task))
            found = read_known(release.store, key)
            if found is not None:
                settled[task.id] = (found[0], found[1], (REUSED, REUSED))
            else:
                pending[task.id] = Exported(task.id, files, key, grader_key(files, family.files.truth))
            if needs_control(task, family):
                unknown.add(task.id)
            else:
                expected_to_pass.setdefault(task.family, []).append(task.id)

        chosen = control_sample(expected_to_pass, self.controls_per_family) | unknown
        real = [i for i in order if i in pending and i in chosen]
        certified = self._certify(
            job.ctx, release, folder, [i for i in order if i in pending and i not in chosen], pending
        )
        real += [i for i in order if i in pending and i not in chosen and i not in certified]
        proven = {pending[i].grader for i in real}
        for task_id in [i for i in order if i in certified]:
            bundle = pending[task_id].grader
            if bundle not in proven and not read_grader_proven(release.store, bundle):
                # One real control run per grader bundle proves its packaged paths (test.sh, grade.py, the
                # stand-ins) on the oracle's output and on none: the certificate grades in this process.
                real.append(task_id)
                proven.add(bundle)
                del certified[task_id]
        # Stored before the control batch, which at catalog size runs for long: a stop there keeps them.
        for task_id, (oracle, noop, _) in certified.items():
            write_known(
                release.store, pending[task_id].key, oracle, noop, {"oracle": CERTIFIED, "noop": DERIVED}
            )
        running = set(real)
        self._run_controls(
            job, folder, report, left_out, [release.task(i) for i in order if i in running], pending
        )
        settled.update(certified)
        for task_id in order:
            if task_id in settled:
                oracle, noop, how = settled[task_id]
                _count(report, families[task_id], task_id, oracle, noop, how)
        (folder / "README.md").write_text(card(report, left_out))
        return report

    @staticmethod
    def _certify(
        ctx: RunContext, release: Release, folder: Path, ids: list[str], pending: dict[str, Exported]
    ) -> dict[str, tuple[ControlRun, ControlRun, tuple[str, str]]]:
        """The tasks of `ids` whose oracle the gate's certificate establishes and whose no-op earns 0 by the
        grader's absent-output path (`harbor_known`), with those results."""
        found = {}
        with tempfile.TemporaryDirectory(prefix="dfharbor-ref-") as scratch:
            for task_id in ctx.each("harbor certificates", ids):
                task = release.task(task_id)
                family = family_of(task)
                reference = _reference_file(release, task, family, Path(scratch))
                files = pending[task_id].files
                oracle = certify_oracle(task, family, folder / folder_name(task), files, reference)
                noop = derive_noop(family, task, bar_of(task), files) if oracle is not None else None
                if oracle is not None and noop is not None and noop.reward == 0.0:
                    found[task_id] = (oracle, noop, (CERTIFIED, DERIVED))
        return found

    def _run_controls(
        self,
        job: ExportJob,
        folder: Path,
        report: HarborReport,
        left_out: dict[str, tuple[str, str]],
        controlled: list[Task],
        pending: dict[str, Exported],
    ) -> None:
        """The real control runs, on `run.jobs` workers; a passing result is stored for reuse; a failure of a
        task the store says earns 1 fails the export as a packaging bug."""
        if not controlled:
            return
        controller = Controller(job.ctx.config.sandbox)
        store = job.release.store

        def control(task: Task) -> tuple[ControlRun, ControlRun]:
            where = folder / folder_name(task)
            solve, test = _timeouts(task)
            oracle = controller.run(where, oracle=True, solve_timeout=solve, test_timeout=test)
            noop = controller.run(where, oracle=False, solve_timeout=solve, test_timeout=test)
            if control_verdict(oracle, noop) is None:
                # Kept as soon as it passes: an export stopped during a long batch of controls (thousands at
                # catalog size) keeps what it established, and the next one runs only the rest.
                write_known(store, pending[task.id].key, oracle, noop, {"oracle": RUN, "noop": RUN})
                write_grader_proven(store, pending[task.id].grader, oracle, noop)
            return oracle, noop

        workers = max(1, job.ctx.config.run.jobs or os.cpu_count() or 1)
        with job.ctx.progress() as progress, ThreadPoolExecutor(min(workers, len(controlled))) as pool:
            bar = progress.add_task("harbor controls", total=len(controlled), item="")
            futures = {pool.submit(control, task): task for task in controlled}
            for done in as_completed(futures):
                progress.update(bar, advance=1, item=futures[done].id)
            runs = [future.result() for future in futures]
        packaging_bugs = []
        for task, (oracle, noop) in zip(controlled, runs, strict=True):
            report.controlled[task.family] += 1
            why = control_verdict(oracle, noop)
            if why is None:
                _count(report, task.family, task.id, oracle, noop, (RUN, RUN))
            elif needs_control(task, family_of(task)) and graded_below_bar(oracle):
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


def _timeouts(task: Task) -> tuple[float, float]:
    """The agent phase's and the verifier's seconds."""
    return agent_seconds(task), float(task.limits.seconds_per_execution)


def _reference_file(release: Release, task: Task, family: Family, scratch: Path) -> Path | None:
    """A local path of the task's stored reference output (an answer task's: its certified answer), or None."""
    key = f"{release.answers_dir(task.id)}/{family.files.reference or family.files.truth}"
    if not release.store.exists(key):
        return None
    if release.store.is_local:
        return release.store.local_path(key)
    copy = scratch / task.id
    copy.write_bytes(release.store.read_bytes(key))
    return copy


def _count(
    report: HarborReport,
    family: str,
    task_id: str,
    oracle: ControlRun,
    noop: ControlRun,
    how: tuple[str, str],
) -> None:
    report.rewards[task_id] = (oracle.reward, noop.reward)
    report.how[task_id] = how
    report.oracle_passed[family] += oracle.reward == 1.0
    report.noop_failed[family] += noop.reward == 0.0
    report.oracle_how[how[0]] += 1
    report.noop_how[how[1]] += 1
