"""An instruction names a split that is not random: a tabular task on rows indexed by time, and every forecast,
says that its test rows come after the training rows and by which column; a grouped split says which groups are
kept apart. Checked on every prediction task of a small store (grunfeld's yearly firm figures are split in
time; CO2 is a series)."""

from __future__ import annotations

import pytest

from dareforge.context import RunContext
from dareforge.families.registry import family_of
from dareforge.generators.instructions import split_note
from dareforge.generators.prepare import load_prepared
from dareforge.schema import PreparedSource, Task
from tests.stores import generate_tasks, prediction_only, store_config


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cfg = prediction_only(
        store_config(tmp_path_factory.mktemp("split"), ["statsmodels-grunfeld", "statsmodels-co2"])
    )
    cfg.generate.if_variants = 1
    return generate_tasks(RunContext.from_config(cfg, show_progress=False))


def test_every_prediction_task_of_a_split_in_time_names_it(built):
    tasks = [t for t in built.store.iter_records(Task) if not family_of(t).asks_question]
    named = 0
    for task in tasks:
        prepared = next(p for p in load_prepared(built, task.source_id) if p.version == task.prepared_version)
        if prepared.split in ("chronological", "grouped"):
            assert split_note(prepared) and split_note(prepared) in task.instruction, (
                task.family,
                task.instruction,
            )
            named += 1
        else:
            assert "The rows are split" not in task.instruction
    assert named >= 3 and {t.family for t in tasks} >= {"Reg-IF", "Reg-MM", "TS-XF"}


def test_a_grouped_split_names_its_groups_and_a_random_one_says_nothing():
    fields = {
        "source_id": "s",
        "source_version": "v",
        "version": "p",
        "task_type": "regression",
        "target_columns": ["y"],
        "id_column": "row_id",
        "columns": [],
        "n_rows": 10,
        "n_train": 8,
        "n_test": 2,
        "seed": 1,
        "files": [],
    }
    grouped = PreparedSource.model_validate({**fields, "split": "grouped", "group_column": "patient"})
    assert "`patient`" in split_note(grouped) and "no value of it in `test.csv`" in split_note(grouped)
    assert split_note(PreparedSource.model_validate({**fields, "split": "random"})) == ""
