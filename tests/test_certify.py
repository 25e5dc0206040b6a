"""The IF determinism certificate: two runs at once, the twin in another process with two threads, and the thread
limit a reference worker applies per script."""

from __future__ import annotations

import pandas as pd
import pytest

from dareforge.generators.references import certify
from dareforge.generators.taskio import Draft, Runners
from dareforge.reference_solutions.reference_code import PREDICTIONS, REFERENCE_PREDICTIONS
from dareforge.reference_solutions.reference_runner import ReferenceRunner
from dareforge.schema import MetricSpec

METRIC = MetricSpec(name="exact-match", target_columns=["y"], key_columns=["row_id"])
BLAS_THREADS = """
from threadpoolctl import threadpool_info
threads = sorted({{lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}})
{extra}
open("threads.txt", "w").write(str(threads))
"""


@pytest.fixture(scope="module")
def runners():
    pair = Runners.start(timeout_s=120)
    yield pair
    pair.close()


def test_a_worker_limits_threads_per_script_even_after_a_script_imported_more(tmp_path):
    with ReferenceRunner(1, 120) as runner:
        for n, (threads, extra) in enumerate(
            [(None, ""), (2, ""), (2, "import sklearn.cluster"), (None, "")]
        ):
            folder = tmp_path / f"run{n}"
            folder.mkdir()
            runner.submit(BLAS_THREADS.format(extra=extra), folder, threads=threads)
            outcome = runner.collect()
            assert outcome.ok, outcome.error
            assert (folder / "threads.txt").read_text() == ("[2]" if threads else "[1]"), n


def _draft(tmp_path) -> Draft:
    draft = Draft(family="Reg-IF", seed=0, key="k", folder=tmp_path / "draft")
    draft.public.mkdir(parents=True)
    draft.private.mkdir()
    pd.DataFrame({"row_id": [1, 2, 3]}).to_csv(draft.public / "test.csv", index=False)
    return draft


def _predicting(expression: str) -> str:
    return (
        "import pandas as pd\n"
        "test = pd.read_csv('test.csv')\n"
        f"test['y'] = {expression}\n"
        f"test.to_csv({PREDICTIONS!r}, index=False)\n"
    )


def test_a_deterministic_reference_is_certified_and_its_first_run_kept(runners, tmp_path):
    draft = _draft(tmp_path)
    seconds, why = certify(runners, _predicting("test['row_id'] * 2"), draft, METRIC)
    assert why is None and seconds >= 0
    assert pd.read_csv(draft.private / REFERENCE_PREDICTIONS)["y"].tolist() == [2, 4, 6]


@pytest.mark.parametrize(
    ("expression", "what"),
    [
        # another process: another pid (as another hash seed or object address would)
        ("__import__('os').getpid() % 1000 + test['row_id'] * 0", "process"),
        # another thread count, as a BLAS or OpenMP reduction would
        (
            "max(lib['num_threads'] for lib in __import__('threadpoolctl').threadpool_info()) + test['row_id'] * 0",
            "threads",
        ),
    ],
)
def test_a_reference_that_depends_on_the_process_or_the_threads_is_not_certified(
    runners, tmp_path, expression, what
):
    _, why = certify(runners, _predicting(expression), _draft(tmp_path), METRIC)
    assert why is not None and why.startswith("not deterministic: the twin run"), (what, why)
