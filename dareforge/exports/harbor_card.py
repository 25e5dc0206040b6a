"""What a Harbor export says of itself: its report (the summary `dareforge export` prints) and its card, the
folder's `README.md` (see `harbor`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from dareforge.exports.export_format import LayoutReport
from dareforge.families.registry import REGISTERED, bar_rule

SCHEMA_VERSION = "1.4"
"""Harbor's task.toml schema version the layout writes (`TaskConfig.schema_version`): 0.25's, which has the
separate verifier (`[verifier] environment_mode`) and `artifacts`."""
CONTROLS_PER_FAMILY = 20
"""Exported tasks of each family whose oracle and no-op run in the sandbox by default (the rest are established
from what is known): enough to catch a packaging bug of a family (its grading in test.sh, its solve.sh, its
files) in a time that does not grow with the release."""
SUMMARY_LEFT_OUT = 10
"""Tasks left out that the summary names (a large release leaves out hundreds; the card lists them all)."""


@dataclass
class HarborReport(LayoutReport):
    tasks: list[str] = field(default_factory=list)
    families: Counter = field(default_factory=Counter)
    controls_per_family: int | None = CONTROLS_PER_FAMILY
    controlled: Counter = field(default_factory=Counter)
    """family -> tasks whose control runs ran in the sandbox in this export."""
    oracle_passed: Counter = field(default_factory=Counter)
    """family -> exported tasks whose oracle's reward 1 is established (run, certified or reused)."""
    noop_failed: Counter = field(default_factory=Counter)
    oracle_how: Counter = field(default_factory=Counter)
    """How the oracles' results were established (`harbor_known`: run, certified, reused) -> tasks."""
    noop_how: Counter = field(default_factory=Counter)
    rewards: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    """task id -> (the oracle's reward, the no-op's reward), for every exported task."""
    how: dict[str, tuple[str, str]] = field(default_factory=dict)
    """task id -> how its oracle's and its no-op's results were established."""

    @property
    def sample_rule(self) -> str:
        if self.controls_per_family is None:
            return "every exported task"
        return f"a seeded sample of up to {self.controls_per_family} per family"

    def summary(self) -> list[str]:
        def how(counts: Counter) -> str:
            return ", ".join(f"{n} {way}" for way, n in sorted(counts.items()) if n) or "none"

        lines = [
            f"exported {len(self.tasks)} of {len(self.tasks) + len(self.skipped)} tasks of {self.release.name}@"
            f"{self.release.version} to {self.dest} as Harbor tasks, {len(self.skipped)} left out; the oracle "
            f"earned 1 on {self.oracle_passed.total()}, a no-op 0 on {self.noop_failed.total()}",
            f"  oracles: {how(self.oracle_how)}; no-ops: {how(self.noop_how)} (control runs in the sandbox: "
            f"{self.controlled.total()}, {self.sample_rule} whose result no store entry holds, and what is not "
            "certified)",
        ]
        left_out = sorted(self.skipped.items())
        lines += [f"  left out {key}: {why}" for key, why in left_out[:SUMMARY_LEFT_OUT]]
        if len(left_out) > SUMMARY_LEFT_OUT:
            lines.append(
                f"  and {len(left_out) - SUMMARY_LEFT_OUT} more left out: its README.md lists every one"
            )
        return lines


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
        "Every exported task's oracle earned reward 1 and a no-op agent 0. Control runs prove it without "
        f"Docker on {report.sample_rule} (drawn by a seeded hash of the task ids: the same release gives the "
        "same sample), in Harbor's two phases, each a dareforge bubblewrap sandbox with Harbor's paths bound: the "
        "agent's (`solve.sh`, or nothing) with `/app`, `/logs` and the oracle's `/solution` but no `/tests`, then "
        "the verifier's (`test.sh`) with `/tests`, a fresh `/logs` and the image's `/app` plus the agent's output, "
        'as `environment_mode = "separate"` runs it. Every other task is established from what is known: a '
        "stored result of the same bytes (its public files, solution, tests and grader, Dockerfile, and the "
        "package versions), or, where its solution, public files and answers are byte for byte what the gate "
        "certified, the reference's stored output graded by the same grader (the oracle's run), and the grader's "
        "path for an absent output (the no-op's). A task that fails either fails the whole export as a packaging "
        "bug.",
        "",
        f"- Exported: {len(report.tasks)}",
        f"- Oracle earned 1: {report.oracle_passed.total()} of {len(report.tasks)}",
        f"- No-op earned 0: {report.noop_failed.total()} of {len(report.tasks)}",
        f"- Left out: {len(left_out)}",
        "",
        "| family | exported | oracle earned 1 | no-op earned 0 |",
        "|---|---:|---:|---:|",
    ]
    lines += [
        f"| {name} | {report.families[name]} | {report.oracle_passed[name]} | {report.noop_failed[name]} |"
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
