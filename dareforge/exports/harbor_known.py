"""What is already known of a Harbor task's control runs, so that every exported task has its oracle 1 and no-op
0 established without running a sandbox for each one.

A control result is a function of the bytes the runs read and of the stack they run on, nothing else: the
task's `environment/` (its Dockerfile with the pins, its public files in `app/`), `solution/`, `tests/` (the
grader bundle, `grading.json`, the truth), the `artifacts` Harbor carries, the two timeouts, and this process's
package versions (the controls run on this interpreter). `control_key` hashes exactly those (not
`instruction.md` or `task.toml`, which name the release and its version), so the same task in a re-export or in
the next release version has the same key. A passing result is stored at `harbor-controls/<key[:2]>/<key>.json`
through the store (temp name, then rename: two exporters writing the same key both leave a whole entry) and
reused; a change of one byte of those files, of the grader, or of the stack is another key, so a reused result
never hides a run that would now fail. A failing result is never stored: it is run again.

Where no result is stored, the runs are established without a sandbox where the bytes are those the gate
certified:

- the oracle (`certify_oracle`): its `solve.sh` runs the task's reference scripts, on its public files, on the
  stack the task records; when every one of those exported files is byte for byte what the task record says the
  generator ran (its recorded sha256) and this process's stack is the recorded one, the oracle's output is the
  reference output the generator stored (IF: the reference run's predictions, certified reproducible by its
  repeated runs; MM/TS: the strong reference's predictions, whose score the store kept; QA/Lake: the certified
  answer). That stored output, graded here by the same grader and rule as `tests/grade.py`
  (`harbor_grader.host_grade`), is the oracle's grade. Anything else (a byte changed, another stack, a grade
  below 1) gets a real control run, which decides;
- the no-op (`derive_noop`): it leaves nothing, so the verifier grades an absent output (when the image's `/app`
  holds no file of the output's name); every grader gives an absent output its metric's worst score
  (`absent_output_score`, proven for every registered metric in `tests/test_harbor_known.py`), so its reward
  follows from `grading.json` alone.

Both certify in this process with the grader modules the bundle holds byte for byte; what only the sandbox
shows (`test.sh`, `grade.py`, the stand-ins, `solve.sh`) is proven by one real control run per distinct grader
bundle (`grader_key`, stored once proven) besides the seeded sample.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dareforge.errors import StoreError
from dareforge.exports.harbor_control import ControlRun
from dareforge.exports.harbor_grader import host_grade, reward_passes
from dareforge.families.family import Family
from dareforge.hashing import canonical_json, sha256_bytes
from dareforge.reference_solutions.metrics import get_metric
from dareforge.reference_solutions.reference_runner import package_versions
from dareforge.schema import ANSWER_METRIC, MetricSpec, SourceFile, Task
from dareforge.store import Store

CONTROL_FORMAT = 1
"""Bump when the control runs change what they mean (the harness in `harbor_control`): every stored result is
then run again."""
PREFIX = "harbor-controls"
KEYED = ("environment/", "solution/", "tests/")
"""The parts of a task folder a control run reads."""
RUN, CERTIFIED, DERIVED, REUSED = "run", "certified", "derived", "reused"
"""How a run's result was established: a sandboxed run, the gate's certificate, derived from the grader's
absent-output path, or a stored result of the same key."""


def control_key(
    files: dict[str, str], artifacts: list[str], solve_timeout: float, test_timeout: float
) -> str:
    """The content key of a task folder's control results; `files`: path in the folder -> sha256."""
    identity = {
        "format": CONTROL_FORMAT,
        "stack": package_versions(),
        "files": {rel: digest for rel, digest in sorted(files.items()) if rel.startswith(KEYED)},
        "artifacts": sorted(artifacts),
        "timeouts": [solve_timeout, test_timeout],
    }
    return sha256_bytes(canonical_json(identity))


def grader_key(files: dict[str, str], truth: str) -> str:
    """The key of a task folder's grader bundle: `tests/` without the task's own truth and `grading.json`, and
    the stack (one real no-op run per distinct key proves the absent-output path in the sandbox)."""
    own = {f"tests/{truth}", "tests/grading.json"}
    bundle = {rel: d for rel, d in sorted(files.items()) if rel.startswith("tests/") and rel not in own}
    return sha256_bytes(
        canonical_json({"format": CONTROL_FORMAT, "stack": package_versions(), "files": bundle})
    )


def entry_key(key: str) -> str:
    return f"{PREFIX}/{key[:2]}/{key}.json"


def _run(data: dict[str, Any]) -> ControlRun:
    return ControlRun(data["reward"], data.get("details") or {}, data.get("failure"))


def read_known(store: Store, key: str) -> tuple[ControlRun, ControlRun, dict[str, str]] | None:
    """The stored (oracle, no-op, how each was first established) of `key`, or None (absent or unreadable: run
    again, and the new result overwrites it)."""
    try:
        entry = store.read_json(entry_key(key))
        return _run(entry["oracle"]), _run(entry["noop"]), dict(entry["how"])
    except (StoreError, ValueError, KeyError, TypeError):
        return None


def write_known(store: Store, key: str, oracle: ControlRun, noop: ControlRun, how: dict[str, str]) -> None:
    """Store a passing result (oracle 1, no-op 0) only: a failure is always run again."""
    if oracle.reward != 1.0 or noop.reward != 0.0:
        raise ValueError(
            f"only a passing control result is stored, not oracle {oracle.reward} no-op {noop.reward}"
        )
    entry = {"key": key, "oracle": asdict(oracle), "noop": asdict(noop), "how": how}
    store.write_json(entry_key(key), entry)


def read_grader_proven(store: Store, key: str) -> bool:
    """Whether a real control run (oracle 1, no-op 0) already proved the grader bundle `key`'s packaged paths."""
    try:
        entry = store.read_json(f"{PREFIX}/graders/{key}.json")
        return entry["oracle"]["reward"] == 1.0 and entry["noop"]["reward"] == 0.0
    except (StoreError, ValueError, KeyError, TypeError):
        return False


def write_grader_proven(store: Store, key: str, oracle: ControlRun, noop: ControlRun) -> None:
    if oracle.reward != 1.0 or noop.reward != 0.0:
        raise ValueError(
            f"only a passing control run proves a grader, not oracle {oracle.reward} no-op {noop.reward}"
        )
    store.write_json(
        f"{PREFIX}/graders/{key}.json", {"key": key, "oracle": asdict(oracle), "noop": asdict(noop)}
    )


def absent_output_score(metric: MetricSpec) -> float:
    """The score every grader gives a submission file that does not exist: the metric's worst (an answer
    metric's 0)."""
    return 0.0 if metric.name == ANSWER_METRIC else get_metric(metric.name).worst


def _same(recorded: list[SourceFile], exported: dict[str, str], folder: str, names: list[str]) -> bool:
    by_name = {f.name: f.sha256 for f in recorded}
    return all(name in by_name and exported.get(f"{folder}/{name}") == by_name[name] for name in names)


def certify_oracle(
    task: Task, family: Family, task_dir: Path, files: dict[str, str], reference: Path | None
) -> ControlRun | None:
    """The oracle's result from the gate's certificate (module doc), or None when the bytes or the stack are
    not the certified ones, or its reference output does not earn 1 (then a real run decides). `reference`: a
    local copy of the task's stored reference output (None: the release holds none)."""
    if reference is None or list(task.package_versions) != package_versions():
        return None
    scripts = sorted(
        rel.split("/", 1)[1] for rel in files if rel.startswith("solution/") and rel.endswith(".py")
    )
    app = sorted(rel.split("/", 2)[2] for rel in files if rel.startswith("environment/app/"))
    truth = family.files.truth
    if not (
        scripts
        and _same(task.private_files, files, "solution", scripts)
        and _same(task.private_files, files, "tests", [truth])
        and _same(task.public_files, files, "environment/app", app)
        and len(app) == len(task.public_files)
    ):
        return None
    name = family.files.reference or truth
    recorded = {f.name: f.sha256 for f in task.private_files}.get(name)
    if recorded is None or sha256_bytes(reference.read_bytes()) != recorded:
        return None
    reward, details = host_grade(task_dir / "tests", reference)
    if reward != 1.0:
        return None
    return ControlRun(reward, {**details, "established": f"the stored {name} graded here"})


def derive_noop(family: Family, task: Task, bar: float, files: dict[str, str]) -> ControlRun | None:
    """A no-op's result from grading an absent output (module doc), or None when the image's `/app` holds a file
    of the output's name (the verifier would grade that: a real run decides)."""
    if f"environment/app/{family.files.output}" in files:
        return None
    score = absent_output_score(task.metric)
    passed = reward_passes(str(family.grading), score, bar)
    shown = None if math.isinf(score) else score
    return ControlRun(
        1.0 if passed else 0.0, {"score": shown, "bar": bar, "error": "no output", "passed": passed}
    )
