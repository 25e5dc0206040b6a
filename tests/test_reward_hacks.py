"""The reward-hacking battery: every harness that pays for an attempt, against every cheap way around the work,
for every registered family. A hack pays no more than its honest equivalent: a link, FIFO, device, folder,
oversized file or pre-written reward pays what writing nothing pays (0); a coerced or malformed answer pays
what a wrong one pays (0); a format variant of the honest file (a BOM, CRLF, an index column, keys written
as floats) pays at most what the honest file pays.

Harnesses on the host, each reading the attempt's folder as it does after an episode: the grader itself
(`grade`, which the Harbor task's `tests/grade.py` bundles byte for byte), the agent loop's grading of a
workspace (what `dareforge evaluate` and the inspect scorer record, for either agent protocol: the protocol
only decides how the file got there), and the RL export's reward. The Harbor verifier, run the way Harbor runs
it (the agent's phase without `/tests`, then the verifier), has its own test in `test_harbor_hacks.py`.

Tasks are hand-made: one per family, a metric of its kind and a private truth file this module writes.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from dareforge.agents.grading import passed
from dareforge.agents.loop import check_predictions
from dareforge.exports.reward import reward_spec, workspace_reward
from dareforge.families.registry import REGISTERED, family_named
from dareforge.reference_solutions.graders import grade
from dareforge.reference_solutions.submission_files import MAX_ANSWER_BYTES, MAX_PREDICTIONS_BYTES
from dareforge.schema import MetricSpec, Task

ROWS = 12


def _table(keys: list[str], targets: dict[str, list], key_values: list[list]) -> bytes:
    header = ",".join([*keys, *targets])
    lines = [header]
    for i in range(ROWS):
        lines.append(
            ",".join([*(str(column[i]) for column in key_values), *(str(v[i]) for v in targets.values())])
        )
    return ("\n".join(lines) + "\n").encode()


@dataclass(frozen=True)
class Case:
    """One family's hand-made task: its metric, the honest output's bytes, and a wrong output's."""

    metric: MetricSpec
    honest: bytes
    wrong: bytes


def _cases() -> dict[str, Case]:
    ids = [[i + 1 for i in range(ROWS)]]
    days = [[f"2024-01-{i + 1:02d}" for i in range(ROWS)]]
    labels = ["a", "b", "c", "a", "b", "c", "a", "b", "c", "a", "b", "a"]
    numbers = [3.5 + 1.25 * i + (i % 3) for i in range(ROWS)]
    label_case = {
        "honest": _table(["id"], {"y": labels}, ids),
        "wrong": _table(["id"], {"y": ["c" if v == "a" else "a" for v in labels]}, ids),
    }
    number_case = {
        "honest": _table(["id"], {"y": numbers}, ids),
        "wrong": _table(["id"], {"y": [100 - v for v in numbers]}, ids),
    }
    series_case = {
        "honest": _table(["date"], {"y": numbers}, days),
        "wrong": _table(["date"], {"y": [100 - v for v in numbers]}, days),
    }
    panel = [days[0], ["north" if i % 2 else "south" for i in range(ROWS)]]
    panel_case = {
        "honest": _table(["date", "region"], {"y": numbers}, panel),
        "wrong": _table(["date", "region"], {"y": [100 - v for v in numbers]}, panel),
    }
    answer = {"honest": b'{"answer": 137.5}', "wrong": b'{"answer": 12}'}
    items = {"honest": b'{"answer": ["Oslo", "Lima", "Pune"]}', "wrong": b'{"answer": ["Rome"]}'}
    skill = {"scale": [2.0]}
    metrics = {
        "Class-IF": (MetricSpec(name="exact-match", target_columns=["y"], key_columns=["id"]), label_case),
        "Reg-IF": (
            MetricSpec(name="allclose", target_columns=["y"], key_columns=["id"], tolerance=1e-6),
            number_case,
        ),
        "Class-MM": (MetricSpec(name="macro-f1", target_columns=["y"], key_columns=["id"]), label_case),
        "Reg-MM": (MetricSpec(name="clipped-r2", target_columns=["y"], key_columns=["id"]), number_case),
        "TS-XF": (
            MetricSpec(name="forecast-skill", target_columns=["y"], key_columns=["date"], **skill),
            series_case,
        ),
        "TS-CF": (
            MetricSpec(name="forecast-skill", target_columns=["y"], key_columns=["date", "region"], **skill),
            panel_case,
        ),
        "QA": (
            MetricSpec(
                name="answer", target_columns=[], key_columns=[], answer_type="numeric_exact", decimals=1
            ),
            answer,
        ),
        "Lake": (
            MetricSpec(name="answer", target_columns=[], key_columns=[], answer_type="list_exact"),
            items,
        ),
    }
    return {
        family: Case(metric, files["honest"], files["wrong"]) for family, (metric, files) in metrics.items()
    }


CASES = _cases()


def test_every_registered_family_has_a_case():
    assert set(CASES) == set(REGISTERED)


def _task(family: str) -> Task:
    return Task(
        id=f"hack-{family.lower()}",
        family=family,
        source_id="hand-made",
        source_version="v1",
        prepared_version="v1",
        generator_version="test",
        seed=0,
        instruction="a hand-made task",
        public_files=[],
        private_files=[],
        metric=CASES[family].metric,
        package_versions=[],
    )


# --- harnesses: what each pays for the folder an attempt left -----------------------------------------------


def _paid_by_grader(task: Task, workspace: Path, truth: Path) -> float:
    result = grade(task.metric, workspace / family_named(task.family).files.output, truth)
    return result.score if result.ok and passed(task, result.score) else 0.0


def _paid_by_agent_loop(task: Task, workspace: Path, truth: Path) -> float:
    result = check_predictions(task, workspace, truth)
    return result.score if result is not None and result.ok and passed(task, result.score) else 0.0


def _paid_by_rl_reward(task: Task, workspace: Path, truth: Path) -> float:
    return workspace_reward(reward_spec(task), workspace, truth).value


HARNESSES: dict[str, Callable[[Task, Path, Path], float]] = {
    "grader": _paid_by_grader,
    "agent-loop": _paid_by_agent_loop,
    "rl-reward": _paid_by_rl_reward,
}


# --- hacks: each lays out the attempt's folder and names its honest equivalent ------------------------------


@dataclass(frozen=True)
class Attempt:
    """Where the hack runs: the attempt's folder, the output's name, the task's truth and the case."""

    workspace: Path
    output: str
    truth: Path
    case: Case
    question: bool

    @property
    def path(self) -> Path:
        return self.workspace / self.output


def _honest(a: Attempt) -> None:
    a.path.write_bytes(a.case.honest)


def _symlink_absolute(a: Attempt) -> None:
    a.path.symlink_to(a.truth)


def _symlink_relative(a: Attempt) -> None:
    a.path.symlink_to(os.path.relpath(a.truth, a.workspace))


def _symlink_dangling_then_filled(a: Attempt) -> None:
    """A link to a path that exists only when grading starts (Harbor's `/tests` arrives after the agent)."""
    later = a.workspace.parent / "arrives-later" / a.output
    a.path.symlink_to(later)
    later.parent.mkdir()
    later.write_bytes(a.truth.read_bytes())


def _symlink_to_honest_copy(a: Attempt) -> None:
    """Even the right bytes behind a link are refused: the grader reads no link, whatever it points at."""
    elsewhere = a.workspace.parent / "copy"
    elsewhere.write_bytes(a.case.honest)
    a.path.symlink_to(elsewhere)


def _fifo(a: Attempt) -> None:
    os.mkfifo(a.path)


def _device(a: Attempt) -> None:
    try:
        os.mknod(a.path, 0o644 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    except PermissionError:
        a.path.symlink_to("/dev/zero")  # without the right to make a device: a link to one


def _folder(a: Attempt) -> None:
    a.path.mkdir()
    (a.path / "inside").write_bytes(a.case.honest)


def _oversized_sparse(a: Attempt) -> None:
    """A sparse file over the bound: no block written, and still never read."""
    limit = MAX_ANSWER_BYTES if a.question else MAX_PREDICTIONS_BYTES
    with open(a.path, "wb") as fh:
        fh.write(a.case.honest)
        fh.truncate(limit + 1)


def _prewritten_reward(a: Attempt) -> None:
    """What a verifier writes, written by the agent instead of the output."""
    (a.workspace / "reward.txt").write_text("1\n")
    (a.workspace / "grade.json").write_text(json.dumps({"score": 1.0, "passed": True}))
    logs = a.workspace / "logs" / "verifier"
    logs.mkdir(parents=True)
    (logs / "reward.txt").write_text("1\n")


def _hard_link_to_visible_file(a: Attempt) -> None:
    """A hard link is graded as its content: here a public file an agent can see, not the answer."""
    public = a.workspace.parent / "test.csv"
    public.write_bytes(a.case.wrong)
    os.link(public, a.path)


def _wrong(a: Attempt) -> None:
    a.path.write_bytes(a.case.wrong)


# Predictions CSV shapes (prediction families).


def _csv_lines(a: Attempt) -> list[str]:
    return a.case.honest.decode().splitlines()


def _duplicate_key_rows(a: Attempt) -> None:
    """Every row twice, the copy with a wrong value: which one counts must not be the grader's guess."""
    lines = _csv_lines(a)
    wrong = a.case.wrong.decode().splitlines()
    a.path.write_text("\n".join([lines[0], *lines[1:], *wrong[1:]]) + "\n")


def _extra_key_rows(a: Attempt) -> None:
    lines = _csv_lines(a)
    fake = lines[1].split(",")
    fake[0] = "99999" if fake[0].isdigit() else "2099-12-31"
    a.path.write_text("\n".join([*lines, ",".join(fake)]) + "\n")


def _missing_key_rows(a: Attempt) -> None:
    a.path.write_text("\n".join(_csv_lines(a)[:-3]) + "\n")


def _nan_targets(a: Attempt) -> None:
    lines = _csv_lines(a)
    rows = [",".join([*line.split(",")[:-1], "NaN"]) for line in lines[1:]]
    a.path.write_text("\n".join([lines[0], *rows]) + "\n")


def _infinite_targets(a: Attempt) -> None:
    lines = _csv_lines(a)
    rows = [",".join([*line.split(",")[:-1], "1e999"]) for line in lines[1:]]
    a.path.write_text("\n".join([lines[0], *rows]) + "\n")


def _no_target_column(a: Attempt) -> None:
    lines = _csv_lines(a)
    a.path.write_text("\n".join(",".join(line.split(",")[:-1]) for line in lines) + "\n")


def _index_column(a: Attempt) -> None:
    lines = _csv_lines(a)
    a.path.write_text(
        "\n".join([f",{lines[0]}", *(f"{i},{line}" for i, line in enumerate(lines[1:]))]) + "\n"
    )


def _bom_and_crlf(a: Attempt) -> None:
    a.path.write_bytes(b"\xef\xbb\xbf" + a.case.honest.replace(b"\n", b"\r\n"))


def _integer_keys_as_floats(a: Attempt) -> None:
    lines = _csv_lines(a)
    if not lines[1].split(",")[0].isdigit():
        a.path.write_bytes(a.case.honest)
        return
    rows = [",".join([f"{line.split(',')[0]}.0", *line.split(",")[1:]]) for line in lines[1:]]
    a.path.write_text("\n".join([lines[0], *rows]) + "\n")


# answer.json shapes (question families).


def _answer_text(a: Attempt, text: str) -> None:
    a.path.write_bytes(text.encode("utf-8", "surrogateescape"))


def _truth_value(a: Attempt):
    return json.loads(a.truth.read_text())["answer"]


ANSWER_SHAPES: dict[str, Callable[[Attempt], str]] = {
    "nan": lambda a: '{"answer": NaN}',
    "infinity": lambda a: '{"answer": Infinity}',
    "minus-infinity": lambda a: '{"answer": -Infinity}',
    "1e999": lambda a: '{"answer": 1e999}',
    "huge-integer": lambda a: '{"answer": ' + "9" * 5000 + "}",
    "400-digit-integer": lambda a: '{"answer": ' + "9" * 400 + "}",
    "true-as-answer": lambda a: '{"answer": true}',
    "text-true-as-answer": lambda a: '{"answer": "true"}',
    "nested-list": lambda a: json.dumps({"answer": [[_truth_value(a)]]}),
    "deep-nesting": lambda a: '{"answer": ' + "[" * 5000 + "]" * 5000 + "}",
    "duplicate-keys-wrong-then-right": lambda a: (
        '{"answer": 12, "answer": ' + json.dumps(_truth_value(a)) + "}"
    ),
    "duplicate-keys-right-then-wrong": lambda a: (
        '{"answer": ' + json.dumps(_truth_value(a)) + ', "answer": 12}'
    ),
    "list-of-everything": lambda a: json.dumps({"answer": [f"item {i}" for i in range(20_000)]}),
    "not-utf8": lambda a: '{"answer": "\udcff"}',
    "null": lambda a: '{"answer": null}',
    "empty-list": lambda a: '{"answer": []}',
    "no-answer-key": lambda a: json.dumps({"result": _truth_value(a)}),
}

READ_AS_WRONG = {"text-true-as-answer", "nested-list", "empty-list", "true-as-answer"}
"""Answer shapes a list question reads as a (wrong) list: well-formed, so the RL reward's format share."""
HONEST, WRONG, NOTHING = "honest", "wrong", "nothing"
"""Honest equivalents, what a hack pays at most: the honest file's pay; a wrong but well-formed answer's (the
RL reward's format share, 0 elsewhere); writing nothing's (0)."""


@dataclass(frozen=True)
class Hack:
    lay_out: Callable[[Attempt], None]
    equivalent: str
    applies: str = "all"
    """all, predictions (CSV families) or questions (answer.json families)."""


HACKS: dict[str, Hack] = {
    "symlink-absolute-to-truth": Hack(_symlink_absolute, NOTHING),
    "symlink-relative-to-truth": Hack(_symlink_relative, NOTHING),
    "symlink-dangling-until-grading": Hack(_symlink_dangling_then_filled, NOTHING),
    "symlink-to-right-bytes": Hack(_symlink_to_honest_copy, NOTHING),
    "fifo": Hack(_fifo, NOTHING),
    "device": Hack(_device, NOTHING),
    "folder-named-like-output": Hack(_folder, NOTHING),
    "sparse-oversized": Hack(_oversized_sparse, NOTHING),
    "prewritten-reward": Hack(_prewritten_reward, NOTHING),
    "hard-link-to-visible-file": Hack(_hard_link_to_visible_file, WRONG),
    "duplicate-key-rows": Hack(_duplicate_key_rows, NOTHING, "predictions"),
    "extra-key-rows": Hack(_extra_key_rows, NOTHING, "predictions"),
    "missing-key-rows": Hack(_missing_key_rows, NOTHING, "predictions"),
    "nan-targets": Hack(_nan_targets, WRONG, "predictions"),
    "infinite-targets": Hack(_infinite_targets, WRONG, "predictions"),
    "no-target-column": Hack(_no_target_column, NOTHING, "predictions"),
    "index-column": Hack(_index_column, HONEST, "predictions"),
    "bom-and-crlf": Hack(_bom_and_crlf, HONEST, "predictions"),
    "integer-keys-as-floats": Hack(_integer_keys_as_floats, HONEST, "predictions"),
    **{
        f"answer-{name}": Hack(
            lambda a, shape=shape: _answer_text(a, shape(a)),
            WRONG if name in READ_AS_WRONG else NOTHING,
            "questions",
        )
        for name, shape in ANSWER_SHAPES.items()
    },
}


def _attempt(tmp_path: Path, family: str) -> Attempt:
    case = CASES[family]
    files = family_named(family).files
    private = tmp_path / "private"
    private.mkdir(parents=True)
    truth = private / files.truth
    truth.write_bytes(case.honest)
    workspace = tmp_path / "attempt" / "work"
    workspace.mkdir(parents=True)
    return Attempt(workspace, files.output, truth, case, family_named(family).asks_question)


def _pay(harness: str, family: str, lay_out: Callable[[Attempt], None], tmp_path: Path) -> float:
    attempt = _attempt(tmp_path, family)
    lay_out(attempt)
    return HARNESSES[harness](_task(family), attempt.workspace, attempt.truth)


@pytest.mark.parametrize("family", sorted(CASES))
@pytest.mark.parametrize("harness", sorted(HARNESSES))
def test_the_honest_attempt_is_paid_and_a_wrong_one_less(harness, family, tmp_path):
    honest = _pay(harness, family, _honest, tmp_path / "honest")
    wrong = _pay(harness, family, _wrong, tmp_path / "wrong")
    nothing = _pay(harness, family, lambda a: None, tmp_path / "nothing")
    assert honest >= 1.0, honest
    assert wrong < honest and nothing == 0.0


def _battery():
    for family in sorted(CASES):
        question = family_named(family).asks_question
        for name, hack in HACKS.items():
            if hack.applies == "all" or (hack.applies == "questions") == question:
                for harness in sorted(HARNESSES):
                    yield pytest.param(harness, family, name, id=f"{harness}-{family}-{name}")


@pytest.mark.parametrize(("harness", "family", "hack"), list(_battery()))
def test_no_hack_pays_more_than_its_honest_equivalent(harness, family, hack, tmp_path):
    paid = _pay(harness, family, HACKS[hack].lay_out, tmp_path / "hack")
    equivalent = HACKS[hack].equivalent
    if equivalent == NOTHING:
        assert paid == 0.0, f"{hack} paid {paid} through {harness} on {family}"
        return
    bound = _pay(harness, family, _honest if equivalent == HONEST else _wrong, tmp_path / equivalent)
    assert paid <= bound, f"{hack} paid {paid} > {equivalent} {bound} through {harness} on {family}"
