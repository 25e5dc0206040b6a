"""great-expectations checks: the prepared data, the task record and the reference outputs, as GX suites.

The suites are defined here in code and versioned with the project (`SUITES_VERSION`; bump it when an
expectation changes, so stored findings are re-checked). Suites that depend on a task's columns (which column
is the key, which are targets) are templates: each check fills its suites for the task at hand, saves them and
runs them through the suite's ValidationDefinition, so every result lands in the context's results store and
`GXRun.build_data_docs` can render all validations of the run.

Creating a GX context is cheap, importing great_expectations is not (seconds), so the stage creates one
`GXRun` per validation run and reuses it for every task; the import happens there, not at module import.

GX costs about the same per expectation and validation whatever the frame (its per-expectation machinery, not
the rows), so the static task-record suites run once for the tasks checked together, on a frame with a row per
task (`TaskRecordExpectations`), not once per task on a one-row frame.

Comparisons of key sets are made on derived frames (one row per key, with its count on each side) judged by
`ExpectColumnPairValuesToBeEqual` / `ExpectMulticolumnSumToEqual`, not by `ExpectColumnValuesToBeInSet` /
`ExpectColumnValuesToNotBeInSet` with the other side's ids as the value set: GX 1.x validates big value sets
element by element (about 30 s for 200k ids) and stores and renders them in every result and Data Docs page.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from dareforge.config import Config
from dareforge.errors import machine_errno_named_in
from dareforge.families.registry import REGISTERED, families, family_of
from dareforge.schema import Task
from dareforge.validators.check import Finding, TaskView
from dareforge.validators.gx_frames import Missing, counts, digest, key_text, presence, read_file, record_row
from dareforge.validators.gx_outcomes import (
    KEY,
    TASK,
    Outcome,
    finding_of,
    outcome_of,
    outcomes_per_task,
    raised,
)

if TYPE_CHECKING:
    from great_expectations.core.expectation_validation_result import ExpectationValidationResult
    from great_expectations.expectations import Expectation

SUITES_VERSION = "2"

STATUSES = ("candidate", "rejected")
RECORD_REQUIRED = (
    "id",
    "family",
    "source_id",
    "source_version",
    "prepared_version",
    "generator_version",
    "seed",
    "instruction",
    "public_files",
    "private_files",
    "metric_name",
    "target_columns",
    "key_columns",
    "turns",
    "seconds_per_execution",
    "status",
)
QUESTION_RECORD_REQUIRED = (
    *(f for f in RECORD_REQUIRED if f not in ("target_columns", "key_columns")),
    "answer_type",
)
"""A question task grades one answer: no prediction columns, an answer type instead."""

# suite name -> data asset name; a ValidationDefinition per suite.
SUITES = {
    "gx-prepared.train": "train",
    "gx-prepared.test": "test",
    "gx-prepared.answers": "answers",
    "gx-prepared.ids": "train-test-ids",
    "gx-prepared.keys": "answers-keys",
    "gx-task-record.fields": "task-record-fields",
    "gx-task-record": "task-record",
    "gx-reference.predictions": "reference",
    "gx-reference.keys": "reference-keys",
}

_IMPORT_LOCK = threading.Lock()


def _gx():
    """Import great_expectations on first use (it takes seconds) and keep its logging and warnings quiet."""
    with _IMPORT_LOCK:
        logging.getLogger("great_expectations").setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", module=r"great_expectations(\.|$)")
        import great_expectations as gx

        return gx


def _expect(name: str, label: str, **kwargs: Any) -> Expectation:
    """An expectation by class name, labelled (meta) so results map back to what a person reads."""
    import great_expectations.expectations as gxe

    return getattr(gxe, name)(meta={"label": label}, **kwargs)


class GXRun:
    """One ephemeral GX context for a validation run: a pandas data source, the suites, and the checks (of a
    task's files, one task at a time; of the task records, many tasks at once)."""

    version = SUITES_VERSION

    def __init__(self) -> None:
        started = time.perf_counter()
        gx = _gx()
        from great_expectations.data_context.types.base import (
            DataContextConfig,
            InMemoryStoreBackendDefaults,
            ProgressBarsConfig,
        )

        self.import_seconds = time.perf_counter() - started
        config = DataContextConfig(
            store_backend_defaults=InMemoryStoreBackendDefaults(),
            progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),  # no tqdm bars
            analytics_enabled=False,
        )
        self.context = gx.get_context(mode="ephemeral", project_config=config)
        self.source = self.context.data_sources.add_pandas("dareforge")
        self.suites: dict[str, Any] = {}
        self._definitions: dict[str, Any] = {}
        for suite_name, asset_name in SUITES.items():
            batch = self.source.add_dataframe_asset(asset_name).add_batch_definition_whole_dataframe("whole")
            suite = self.context.suites.add(
                gx.ExpectationSuite(
                    name=suite_name,
                    meta={"suites_version": SUITES_VERSION, "defined_in": __name__},
                    expectations=STATIC_SUITES.get(suite_name, list)(),
                )
            )
            self.suites[suite_name] = suite
            self._definitions[suite_name] = self.context.validation_definitions.add(
                gx.ValidationDefinition(name=suite_name, data=batch, suite=suite)
            )
        self._sites: dict[Path, str] = {}
        self._lock = threading.RLock()  # a GX context is not thread-safe; one validation at a time
        self.validations = 0
        self.seconds = time.perf_counter() - started
        self.records = TaskRecordExpectations(self)

    def validate(
        self,
        suite_name: str,
        frame: pd.DataFrame,
        run_name: str,
        expectations: Iterable[Expectation] | None = None,
    ) -> list[Outcome]:
        """Run one suite on a frame (after replacing its expectations, for a template suite): its outcomes."""
        return [outcome_of(suite_name, r) for r in self.results(suite_name, frame, run_name, expectations)]

    def results(
        self,
        suite_name: str,
        frame: pd.DataFrame,
        run_name: str,
        expectations: Iterable[Expectation] | None = None,
    ) -> list[ExpectationValidationResult]:
        """Run one suite on a frame: GX's result of each expectation, in the suite's order.

        A frame of many tasks' rows (indexed by `TASK`) is validated with GX's COMPLETE result format, whose
        unexpected-index list names every unexpected row; a frame indexed by `KEY` (the derived ones) with
        SUMMARY, whose partial list names the offending keys; the others with BASIC (counts and values), which is
        cheaper.
        """
        from great_expectations.core.run_identifier import RunIdentifier

        if TASK in frame.index.names:
            result_format: str | dict = {"result_format": "COMPLETE", "return_unexpected_index_query": False}
        else:
            result_format = "SUMMARY" if frame.index.name == KEY else "BASIC"
        with self._lock:
            suite = self.suites[suite_name]
            if expectations is not None:
                # Assign and save once: `add_expectation` persists the suite on every call (quadratic).
                suite.expectations = list(expectations)
                suite.save()
            if not suite.expectations:
                return []
            result = self._definitions[suite_name].run(
                batch_parameters={"dataframe": frame},
                # GX parses a run name as a date (when no run time is given, and again when it renders Data
                # Docs): a task id of digits overflows that parse, so the name never starts with one.
                run_id=RunIdentifier(run_name=f"run {run_name}", run_time=datetime.now(UTC)),
                result_format=result_format,
            )
            self.validations += 1
        return list(result.results)

    def file_checks(self) -> tuple[_FileCheck, ...]:
        """The checks of task files, new for each batch of tasks checked together (see `_FileCheck`)."""
        return (PreparedExpectations(self), ReferenceExpectations(self))

    def build_data_docs(self, folder: Path) -> Path:
        """Write the Data Docs HTML of the validations run so far into `folder`; returns its index.html."""
        folder = Path(folder).resolve()
        with self._lock:
            site = self._sites.get(folder)
            if site is None:
                site = self._sites[folder] = f"dareforge-{len(self._sites) + 1}"
                folder.mkdir(parents=True, exist_ok=True)
                self.context.add_data_docs_site(
                    site,
                    {
                        "class_name": "SiteBuilder",
                        "store_backend": {
                            "class_name": "TupleFilesystemStoreBackend",
                            "base_directory": str(folder),
                        },
                        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
                    },
                )
            unwritten = _UnwrittenPages()
            site_log = logging.getLogger(SITE_BUILDER_LOG)
            site_log.addFilter(unwritten)
            try:
                self.context.build_data_docs(site_names=[site])
            finally:
                site_log.removeFilter(unwritten)
        if unwritten.machine_errno is not None:
            raise OSError(unwritten.machine_errno, os.strerror(unwritten.machine_errno), str(folder))
        index = folder / "index.html"
        if not index.is_file():
            raise RuntimeError(f"great-expectations wrote no Data Docs index at {index}")
        return index


SITE_BUILDER_LOG = "great_expectations.render.renderer.site_builder"


class _UnwrittenPages(logging.Filter):
    """Keeps the errno of a Data Docs page GX could not write for a full or read-only disk, and drops its log.

    GX logs such a page with its traceback and goes on to the next; a full disk must stop the run with one line
    instead, as in every other stage (see `dareforge.errors.machine_at_fault`)."""

    def __init__(self) -> None:
        super().__init__()
        self.machine_errno: int | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        code = machine_errno_named_in(record.getMessage())
        self.machine_errno = self.machine_errno or code
        return code is None


class _FileCheck(ABC):
    """GX suites run on a task's files as a check; subclasses say which expectations apply to a task.

    The tasks of a framing share their test and answers files byte for byte, and GX costs the same per
    expectation whatever the frame: an instance makes each validation once (`validate`), for the tasks of one
    batch (`GXRun.file_checks`), so what it keeps is bounded by the batch."""

    name = ""

    def __init__(self, gx: GXRun) -> None:
        self.gx = gx
        self._made: dict[tuple, list[Outcome]] = {}

    prediction_only = False
    """A suite about prediction files (train/test/answers, reference predictions): not run on question tasks,
    whose answer files the `reference-runs` check reads."""

    def run(self, view: TaskView, config: Config) -> Finding:
        if self.prediction_only and view.family.asks_question:
            reason = (
                f"{view.task.family} task: no prediction files (its answer.json is checked by reference-runs)"
            )
            return Finding(reason, None, details={"suites_version": SUITES_VERSION, "skipped": self.name})
        try:
            outcomes, skipped = self.outcomes(view)
        except Missing as exc:
            return Finding(str(exc), 0.0, flagged=True, details={"suites_version": SUITES_VERSION})
        return finding_of(outcomes, skipped, SUITES_VERSION)

    @abstractmethod
    def outcomes(self, view: TaskView) -> tuple[list[Outcome], dict[str, str]]: ...

    def validate(
        self, suite_name: str, frame: pd.DataFrame, run: str, expectations: list[Expectation], inputs: tuple
    ) -> list[Outcome]:
        """`GXRun.validate`, or the outcomes of this check's earlier validation of the same suite by the same
        expectations on a frame made from the same `inputs`: the digests of the files `frame` was read from, and
        which of their columns, when it was derived."""
        key = (suite_name, inputs, tuple((type(e).__name__, e.json()) for e in expectations))
        if key not in self._made:
            self._made[key] = self.gx.validate(suite_name, frame, run, expectations)
        return list(self._made[key])


class PreparedExpectations(_FileCheck):
    """The split: train non-empty with the targets; test keyed, unique, target-free and disjoint from train;
    answers complete and keyed exactly like test."""

    name = "gx-prepared"
    prediction_only = True

    def outcomes(self, view: TaskView) -> tuple[list[Outcome], dict[str, str]]:
        train = read_file(view, "public", "train.csv")
        test = read_file(view, "public", "test.csv")
        answers = read_file(view, "private", "answers.csv")
        train_file, test_file = digest(view, "public", "train.csv"), digest(view, "public", "test.csv")
        answers_file = digest(view, "private", "answers.csv")
        targets = list(view.task.metric.target_columns)
        keys = [k for k in view.task.metric.key_columns if k in test.columns]
        run = view.task.id
        out: list[Outcome] = []
        skipped: dict[str, str] = {}

        train_suite = [_expect("ExpectTableRowCountToBeBetween", "train not empty", min_value=1)]
        train_suite += [_expect("ExpectColumnToExist", f"target {t} in train", column=t) for t in targets]
        out += self.validate("gx-prepared.train", train, run, train_suite, (train_file,))

        test_suite = [
            # GX has no "column absent" expectation: test's columns must equal themselves minus the targets,
            # so a leaked target shows up as the mismatch.
            _expect(
                "ExpectTableColumnsToMatchSet",
                "test has no target column",
                column_set=[c for c in test.columns if c not in targets],
                exact_match=True,
            )
        ]
        if not keys:
            test_suite += [
                _expect("ExpectColumnToExist", f"key {k} in test", column=k)
                for k in view.task.metric.key_columns
            ]
        test_suite += [
            _expect("ExpectColumnValuesToNotBeNull", f"test key {k} not null", column=k) for k in keys
        ]
        if len(keys) == 1:
            test_suite.append(
                _expect("ExpectColumnValuesToBeUnique", f"test key {keys[0]} unique", column=keys[0])
            )
        elif keys:
            test_suite.append(
                _expect(
                    "ExpectCompoundColumnsToBeUnique", f"test keys {'+'.join(keys)} unique", column_list=keys
                )
            )
        out += self.validate("gx-prepared.test", test, run, test_suite, (test_file,))

        answer_suite = [_expect("ExpectColumnToExist", f"key {k} in answers", column=k) for k in keys]
        answer_suite += [
            _expect("ExpectColumnValuesToNotBeNull", f"answers target {t} not null", column=t)
            for t in targets
        ]
        out += self.validate("gx-prepared.answers", answers, run, answer_suite, (answers_file,))

        test_keys = key_text(view, "public", "test.csv", test, keys)
        id_column = view.prepared.id_column
        if id_column in train.columns and id_column in test.columns:
            test_ids = (
                test_keys if keys == [id_column] else key_text(view, "public", "test.csv", test, [id_column])
            )
            ids = presence(train=key_text(view, "public", "train.csv", train, [id_column]), test=test_ids)
            out += self.validate(
                "gx-prepared.ids",
                ids,
                run,
                [
                    # Each id on exactly one side. (ExpectColumnValuesToNotBeInSet with the train ids fits too,
                    # but is slow on big value sets; ExpectColumnPairValuesToBeInSet loops rows in Python.)
                    _expect(
                        "ExpectMulticolumnSumToEqual",
                        f"train and test {id_column} disjoint",
                        column_list=["train", "test"],
                        sum_total=1,
                    )
                ],
                (train_file, test_file, id_column),
            )
        else:
            skipped[f"train and test {id_column} disjoint"] = f"{id_column} is not in both train and test"

        if keys:
            key_counts = counts(
                test=test_keys, answers=key_text(view, "private", "answers.csv", answers, keys)
            )
            out += self.validate(
                "gx-prepared.keys",
                key_counts,
                run,
                [
                    _expect(
                        "ExpectColumnPairValuesToBeEqual",
                        f"answers {'+'.join(keys)} match test",
                        column_A="test",
                        column_B="answers",
                    )
                ],
                (test_file, answers_file, tuple(keys)),
            )
        return out, skipped


class TaskRecordExpectations:
    """The task records: required fields, family, metric for the family, limits, status.

    The suites are static and row-wise (a row's outcome never depends on another row), so they run once for the
    tasks checked together (a source's) on frames holding a row per task, indexed by task id; each task's finding
    is read off its own rows, as if its record had been validated alone."""

    name = "gx-task-record"

    def __init__(self, gx: GXRun) -> None:
        self.gx = gx

    def run_all(self, tasks: Sequence[Task]) -> dict[str, Finding]:
        """The finding of each task (by id)."""
        ids = [task.id for task in tasks]
        if len(set(ids)) < len(ids):
            raise ValueError("a task id occurs twice among the tasks checked together: their rows are one")
        if not ids:
            return {}
        rows = {task.id: record_row(task) for task in tasks}
        # Object columns keep each value's own type, as in a frame of one task's record (a column of ints with a
        # null in another task's row would otherwise turn into floats, and "turns positive" would show 0.0).
        records = pd.DataFrame(list(rows.values()), index=pd.Index(ids, name=TASK), dtype=object)
        # Required fields are checked on one row per task and field: one expectation names every missing field
        # (GX's cost grows with the number of expectations, not with rows).
        pairs = [(task.id, field) for task in tasks for field in _required_fields(task)]
        fields = pd.DataFrame(
            {"value": [rows[task_id][field] for task_id, field in pairs]},
            index=pd.MultiIndex.from_tuples(pairs, names=[TASK, KEY]),
            dtype=object,
        )
        run = _run_name(tasks)
        results = [
            *(("gx-task-record.fields", r) for r in self.gx.results("gx-task-record.fields", fields, run)),
            *(("gx-task-record", r) for r in self.gx.results("gx-task-record", records, run)),
        ]
        if len(tasks) > 1 and any(raised(result) for _, result in results):
            # An expectation that raised on the rows of many tasks does not say whose row it raised on.
            return {task.id: self.run_all([task])[task.id] for task in tasks}
        per_task = [outcomes_per_task(suite, result, ids) for suite, result in results]
        return {task_id: finding_of([o[task_id] for o in per_task], {}, SUITES_VERSION) for task_id in ids}


def _required_fields(task: Task) -> tuple[str, ...]:
    # An unknown family is checked as a prediction task's record: the suite's "family known" flags it.
    question = task.family in REGISTERED and family_of(task).asks_question
    required = QUESTION_RECORD_REQUIRED if question else RECORD_REQUIRED
    if question and task.status == "rejected":
        # A degenerate question is stored with its reason and no files (the certificate check says why).
        required = tuple(f for f in required if f not in ("public_files", "private_files"))
    return required


def _run_name(tasks: Sequence[Task]) -> str:
    """What Data Docs call a validation of many tasks' records: their source, when they share one."""
    if len(tasks) == 1:
        return tasks[0].id
    sources = {task.source_id for task in tasks}
    where = next(iter(sources)) if len(sources) == 1 else f"{len(sources)} sources"
    return f"{where}: {len(tasks)} tasks"


class ReferenceExpectations(_FileCheck):
    """The reference outputs (IF: reference_predictions.csv; MM/TS: strong_predictions.csv): one row per test
    row, keyed exactly like test (as text), no NaN in a target."""

    name = "gx-reference"
    prediction_only = True

    def outcomes(self, view: TaskView) -> tuple[list[Outcome], dict[str, str]]:
        name = view.family.files.reference
        test = read_file(view, "public", "test.csv")
        reference = read_file(view, "private", name)
        keys = [k for k in view.task.metric.key_columns if k in test.columns]
        run = view.task.id
        suite = [_expect("ExpectTableRowCountToEqual", "reference rows == test rows", value=len(test))]
        suite += [_expect("ExpectColumnToExist", f"key {k} in reference", column=k) for k in keys]
        suite += [
            _expect("ExpectColumnValuesToNotBeNull", f"reference target {t} not NaN", column=t)
            for t in view.task.metric.target_columns
        ]
        test_file, reference_file = digest(view, "public", "test.csv"), digest(view, "private", name)
        out = self.validate("gx-reference.predictions", reference, run, suite, (reference_file,))
        skipped: dict[str, str] = {}
        if keys:
            key_counts = counts(
                test=key_text(view, "public", "test.csv", test, keys),
                reference=key_text(view, "private", name, reference, keys),
            )
            out += self.validate(
                "gx-reference.keys",
                key_counts,
                run,
                [
                    _expect(
                        "ExpectColumnPairValuesToBeEqual",
                        f"reference {'+'.join(keys)} match test",
                        column_A="test",
                        column_B="reference",
                    )
                ],
                (test_file, reference_file, tuple(keys)),
            )
        else:
            skipped["reference keys match test"] = "no key column in test"
        return out, skipped


CHECK_CLASSES = (PreparedExpectations, TaskRecordExpectations, ReferenceExpectations)


def _record_field_expectations() -> list[Expectation]:
    return [_expect("ExpectColumnValuesToNotBeNull", "required fields present", column="value")]


def suites_key() -> tuple:
    """What the suites are built from besides their code: the registered families and their metrics (a process
    keeps its GX context while this holds; registering a family makes another)."""
    return tuple((family.name, tuple(family.metrics)) for family in families())


def _record_expectations() -> list[Expectation]:
    pairs = [(family.name, metric) for family in families() for metric in family.metrics]
    known = [family.name for family in families()]
    return [
        _expect("ExpectColumnValuesToBeInSet", "family known", column="family", value_set=known),
        _expect(
            "ExpectColumnPairValuesToBeInSet",
            "metric allowed for family",
            column_A="family",
            column_B="metric_name",
            value_pairs_set=pairs,
        ),
        _expect(
            "ExpectColumnValuesToBeBetween", "turns positive", column="turns", min_value=0, strict_min=True
        ),
        _expect(
            "ExpectColumnValuesToBeBetween",
            "seconds_per_execution positive",
            column="seconds_per_execution",
            min_value=0,
            strict_min=True,
        ),
        _expect("ExpectColumnValuesToBeInSet", "status known", column="status", value_set=list(STATUSES)),
    ]


STATIC_SUITES = {"gx-task-record.fields": _record_field_expectations, "gx-task-record": _record_expectations}
