"""The reward-hacking battery (`dareforge.exports.reward_hacks`): every harness that pays for an attempt, against
every cheap way around the work, for every registered family. A hack pays no more than its honest equivalent: a link, FIFO, device, folder,
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

from pathlib import Path

import pytest

from dareforge.exports.reward_hacks import (
    EQUIVALENTS,
    HACKS,
    HARNESSES,
    HONEST,
    NOTHING,
    WRONG,
    applies,
    battery,
    pay,
    wrong_output,
)
from dareforge.families.registry import REGISTERED
from dareforge.reference_solutions.graders import grade
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


def _cases() -> dict[str, tuple[MetricSpec, bytes]]:
    """Per family: its metric and the honest output's bytes (the truth file holds the same)."""
    ids = [[i + 1 for i in range(ROWS)]]
    days = [[f"2024-01-{i + 1:02d}" for i in range(ROWS)]]
    panel = [days[0], ["north" if i % 2 else "south" for i in range(ROWS)]]
    labels = {"y": ["a", "b", "c", "a", "b", "c", "a", "b", "c", "a", "b", "a"]}
    numbers = {"y": [3.5 + 1.25 * i + (i % 3) for i in range(ROWS)]}
    skill = {"scale": [2.0]}
    return {
        "Class-IF": (
            MetricSpec(name="exact-match", target_columns=["y"], key_columns=["id"]),
            _table(["id"], labels, ids),
        ),
        "Reg-IF": (
            MetricSpec(name="allclose", target_columns=["y"], key_columns=["id"], tolerance=1e-6),
            _table(["id"], numbers, ids),
        ),
        "Class-MM": (
            MetricSpec(name="macro-f1", target_columns=["y"], key_columns=["id"]),
            _table(["id"], labels, ids),
        ),
        "Reg-MM": (
            MetricSpec(name="clipped-r2", target_columns=["y"], key_columns=["id"]),
            _table(["id"], numbers, ids),
        ),
        "TS-XF": (
            MetricSpec(name="forecast-skill", target_columns=["y"], key_columns=["date"], **skill),
            _table(["date"], numbers, days),
        ),
        "TS-CF": (
            MetricSpec(name="forecast-skill", target_columns=["y"], key_columns=["date", "region"], **skill),
            _table(["date", "region"], numbers, panel),
        ),
        "QA": (
            MetricSpec(
                name="answer", target_columns=[], key_columns=[], answer_type="numeric_exact", decimals=1
            ),
            b'{"answer": 137.5}',
        ),
        "Lake": (
            MetricSpec(name="answer", target_columns=[], key_columns=[], answer_type="list_exact"),
            b'{"answer": ["Oslo", "Lima", "Pune"]}',
        ),
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
        metric=CASES[family][0],
        package_versions=[],
    )


def _case_pay(harness: str, family: str, lay_out, root: Path) -> float:
    return pay(harness, _task(family), CASES[family][1], lay_out, root)


@pytest.mark.parametrize("family", sorted(CASES))
@pytest.mark.parametrize("harness", sorted(HARNESSES))
def test_the_honest_attempt_is_paid_and_a_wrong_one_less(harness, family, tmp_path):
    honest = _case_pay(harness, family, EQUIVALENTS[HONEST], tmp_path / "honest")
    wrong = _case_pay(harness, family, EQUIVALENTS[WRONG], tmp_path / "wrong")
    nothing = _case_pay(harness, family, EQUIVALENTS[NOTHING], tmp_path / "nothing")
    assert honest >= 1.0, honest
    assert wrong < honest and nothing == 0.0


def test_the_generic_wrong_output_is_wrong_for_every_family(tmp_path):
    for family, (_, honest) in CASES.items():
        files = _task(family).metric, tmp_path / f"{family}-wrong", tmp_path / f"{family}-truth"
        files[1].write_bytes(wrong_output(_task(family), honest))
        files[2].write_bytes(honest)
        result = grade(*files)
        assert result.ok and result.score < 1.0, (family, result)


def _battery():
    for family in sorted(CASES):
        for name, hack in HACKS.items():
            if applies(hack, _task(family)):
                for harness in sorted(HARNESSES):
                    yield pytest.param(harness, family, name, id=f"{harness}-{family}-{name}")


@pytest.mark.parametrize(("harness", "family", "hack"), list(_battery()))
def test_no_hack_pays_more_than_its_honest_equivalent(harness, family, hack, tmp_path):
    paid = _case_pay(harness, family, HACKS[hack].lay_out, tmp_path / "hack")
    equivalent = HACKS[hack].bound(CASES[family][1])
    bound = _case_pay(harness, family, EQUIVALENTS[equivalent], tmp_path / equivalent)
    assert paid <= bound, f"{hack} paid {paid} > {equivalent} {bound} through {harness} on {family}"
    if equivalent == NOTHING:
        assert paid == 0.0


def test_the_battery_of_one_task_counts_its_cases_and_finds_a_harness_that_pays_a_link(monkeypatch):
    """The battery itself can fail: a harness that follows links is caught."""
    task, truth = _task("Class-IF"), CASES["Class-IF"][1]
    cases, overpaid = battery(task, truth)
    assert overpaid == []
    assert cases == len(HARNESSES) * sum(applies(h, task) for h in HACKS.values())

    def follows_links(task, workspace, truth_path):
        output = workspace / "predictions.csv"
        return float(output.is_file() and output.read_bytes() == Path(truth_path).read_bytes())

    monkeypatch.setitem(HARNESSES, "naive", follows_links)
    _, overpaid = battery(task, truth, ["naive"])
    assert {o.hack for o in overpaid} >= {"symlink-absolute-to-truth", "symlink-relative-to-truth"}
