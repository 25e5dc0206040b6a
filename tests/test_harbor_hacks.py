"""The Harbor task's reward, taken the way Harbor takes it (separate verifier): an agent phase with `/app` and
`/logs` but no `/tests` (and `/solution` only for the oracle's `solve.sh`), then a verifier in a second sandbox
with `/tests`, a fresh `/logs` and the image's `/app` plus the graded output carried over. Each hostile agent is a
shell script run in the agent phase; each pays no more than its honest equivalent (almost always 0).

The issue's first exploit (a link from the output to `/tests/<truth>`) runs on every family of the small release
`tests/test_harbor.py` builds (Class-IF, Class-MM, TS-CF, QA, Lake); its relative form, the second exploit (a
`cp` from `/tests` in the agent's phase) and the rest (a pre-written reward, a process left behind, a FIFO, a folder, hard links) on one
predictions family and one question family, to keep the cost to seconds per run. The oracle earning 1 and a
no-op 0 for every family under these phases is `test_harbor.py`'s control-run test. The grader's own refusals
(links, FIFOs, folders, huge files, malformed answers) are the battery in `test_reward_hacks.py`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from dareforge.config import SandboxConfig
from dareforge.exports.harbor import folder_name
from dareforge.exports.harbor_control import Controller, ControlRun
from dareforge.sandbox import probe

pytestmark = pytest.mark.skipif(not probe().available, reason="the control runs need bubblewrap")

EVERY_FAMILY = ["Class-IF", "Class-MM", "TS-CF", "QA", "Lake"]
TWO_FAMILIES = ["Class-IF", "QA"]
"""A predictions CSV and an answer.json: the two kinds of output the grader reads."""
GOLD = ".gold"
"""Where a test puts the right answer in the agent's `/app` (never graded: only the output is carried)."""
SECONDS = 120.0


@pytest.fixture(scope="module")
def tasks(harbor_export) -> dict[str, Path]:
    """family -> one exported task folder (conftest's `harbor_export`, without control runs: test_harbor.py has
    those)."""
    release, report = harbor_export
    folders: dict[str, Path] = {}
    for task in sorted(release.tasks(), key=lambda t: t.id):
        if folder_name(task) in report.tasks:
            folders.setdefault(task.family, report.dest / folder_name(task))
    return folders


@pytest.fixture(scope="module")
def controller() -> Controller:
    return Controller(SandboxConfig())


def _names(folder: Path) -> tuple[str, str]:
    """The task's graded output and the truth file under /tests."""
    grading = json.loads((folder / "tests" / "grading.json").read_text())
    return grading["output"], grading["truth"]


def _agent(controller: Controller, folder: Path, script: str, *, gold: bool = False) -> ControlRun:
    """`script` as the agent; with `gold`, the right answer is in its /app as `.gold` to begin with."""
    output, truth = _names(folder)
    place = {GOLD: (folder / "tests" / truth).read_bytes()} if gold else None
    script = script.format(output=output, truth=truth, gold=GOLD)
    return controller.run(
        folder, oracle=False, agent=script, place=place, solve_timeout=SECONDS, test_timeout=SECONDS
    )


def _refused(run: ControlRun) -> None:
    assert run.reward == 0.0, run
    assert run.details.get("passed") is False and run.details.get("error"), run.details


ABSOLUTE, RELATIVE = "ln -s /tests/{truth} /app/{output}", "ln -s ../tests/{truth} /app/{output}"


@pytest.mark.parametrize(
    ("family", "link"),
    [*((f, ABSOLUTE) for f in EVERY_FAMILY), *((f, RELATIVE) for f in TWO_FAMILIES)],
    ids=[*(f"{f}-abs" for f in EVERY_FAMILY), *(f"{f}-rel" for f in TWO_FAMILIES)],
)
def test_a_link_to_the_truth_that_resolves_only_at_grading_pays_0(tasks, controller, family, link):
    run = _agent(controller, tasks[family], link)
    _refused(run)
    assert "link" in run.details["error"], run.details


@pytest.mark.parametrize("family", TWO_FAMILIES)
def test_the_agent_finds_no_tests_to_copy_the_truth_from(tasks, controller, family):
    run = _agent(controller, tasks[family], "cp /tests/{truth} /app/{output}")
    assert run.failure and "No such file or directory" in run.failure, run
    _refused(run)


@pytest.mark.parametrize("family", TWO_FAMILIES)
def test_the_agent_phase_has_no_tests_and_no_solution_and_the_oracles_no_tests(tasks, controller, family):
    # Paid 1 only when the agent's sandbox holds neither folder: these can pass only if the phases are right.
    honest = "test ! -e /tests && test ! -e /solution && cp /app/{gold} /app/{output}"
    assert _agent(controller, tasks[family], honest, gold=True).reward == 1.0
    # The oracle's solve.sh, replaced by one that copies the truth: it sees /solution, never /tests.
    folder = tasks[family].parent.parent / f"tampered-{family}"
    shutil.copytree(tasks[family], folder)
    output, truth = _names(folder)
    (folder / "solution" / "solve.sh").write_text(
        f"#!/bin/bash\nset -euo pipefail\ntest -d /solution\ncp /tests/{truth} /app/{output}\n"
    )
    run = controller.run(folder, oracle=True, solve_timeout=SECONDS, test_timeout=SECONDS)
    assert run.failure and "solution/solve.sh exited" in run.failure and "/tests/" in run.failure, run
    _refused(run)


@pytest.mark.parametrize("family", TWO_FAMILIES)
def test_a_reward_written_by_the_agent_does_not_count(tasks, controller, family):
    script = (
        "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && echo '{{\"reward\": 1}}' > "
        '/logs/verifier/reward.json && echo \'{{"passed": true, "score": 1}}\' > /logs/verifier/grade.json'
    )
    _refused(_agent(controller, tasks[family], script))


def _alive(marker: str) -> list[int]:
    """Processes whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue  # gone meanwhile, or not ours to read
    return found


@pytest.mark.parametrize("family", TWO_FAMILIES)
def test_a_process_left_behind_by_the_agent_does_not_outlive_its_phase(tasks, controller, family):
    # It would write the right answer once the agent's phase is over; detached (setsid), in the background.
    marker = f"4242.{os.getpid()}{len(family)}"
    script = (
        "(sleep 2; cp /app/{gold} /app/{output}) & setsid sleep " + marker + " >/dev/null 2>&1 < /dev/null & "
        "exit 0"
    )
    run = _agent(controller, tasks[family], script, gold=True)
    _refused(run)
    assert "not found" in run.details["error"] or "does not exist" in run.details["error"], run.details
    assert _alive(marker) == [], "the agent's PID namespace ended with its phase, and every process in it"


@pytest.mark.parametrize("family", TWO_FAMILIES)
@pytest.mark.parametrize(
    "make",
    ["mkfifo /app/{output}", "mkdir /app/{output} && cp /app/{gold} /app/{output}/{output}"],
    ids=["fifo", "folder"],
)
def test_an_output_that_is_no_regular_file_pays_0(tasks, controller, family, make):
    _refused(_agent(controller, tasks[family], make, gold=True))


@pytest.mark.parametrize("family", TWO_FAMILIES)
def test_a_hard_link_is_graded_as_its_content(tasks, controller, family):
    # To the right answer the agent has: paid as that file would be. To a public file: graded, and wrong.
    assert _agent(controller, tasks[family], "ln /app/{gold} /app/{output}", gold=True).reward == 1.0
    public = sorted(p.name for p in (tasks[family] / "environment" / "app").iterdir())[0]
    run = _agent(controller, tasks[family], f"ln /app/{public} /app/{{output}}")
    _refused(run)
    assert "link" not in run.details["error"], run.details


def test_carrying_a_huge_sparse_output_writes_no_data(tmp_path):
    """An agent's sparse file over the grader's bound reaches the verifier as a sparse file of the same size
    (which the grader refuses on its size), never as gigabytes copied onto the host's disk."""
    from dareforge.exports.harbor_control import carry
    from dareforge.reference_solutions.submission_files import MAX_PREDICTIONS_BYTES

    source, target = tmp_path / "agent.csv", tmp_path / "verifier.csv"
    with open(source, "wb") as fh:
        fh.write(b"id,y\n1,2\n")
        fh.truncate(MAX_PREDICTIONS_BYTES * 4)
    carry(source, target)
    assert target.stat().st_size == source.stat().st_size
    assert target.stat().st_blocks * 512 < 1 << 20
