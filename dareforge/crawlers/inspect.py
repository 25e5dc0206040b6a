"""Identify the target of a source from explicit facts (the config, the crawler, a competition's files).

A Kaggle competition ships a labelled train file, an unlabelled test file and a sample submission, each under
a name of the competition's choosing (`gender_submission.csv`, `sampleSubmission.csv`,
`sample_submission.csv.zip`, ...). What the files hold tells them apart, whatever the names (`competition_files`):

- the sample submission has the test file's id column and the train file's target column(s), which the test
  file lacks, and one row per test row;
- the train file's columns that the test file lacks are outcomes, known only after the fact: the target(s),
  and the rest (a count's parts, a later measurement) never a feature of any task from the source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from dareforge.schema import Source, SourceFile

SAMPLE_SUBMISSION = re.compile(r"sample_?submission|submission_?(format|sample|example)", re.IGNORECASE)
"""The common names of a sample submission: a hint where the files cannot tell (a competition without a test
file); the files' contents decide otherwise."""
TEST_NAME = re.compile(r"(^|[^a-z])test([^a-z]|$)", re.IGNORECASE)
TRAIN_NAME = re.compile(r"train", re.IGNORECASE)


def _stem(file: SourceFile) -> str:
    """The file's name without its table and archive suffixes (`sample_submission.csv.zip` -> `sample_submission`)."""
    name = PurePosixPath(file.name).name
    while PurePosixPath(name).suffix.lower() in {".csv", ".tsv", ".zip", ".gz", ".txt", ".parquet"}:
        name = PurePosixPath(name).stem
    return name


@dataclass(frozen=True)
class CompetitionFiles:
    """A competition's files as their contents tell them apart (any of them None where not found)."""

    train: SourceFile | None = None
    test: SourceFile | None = None
    sample: SourceFile | None = None
    outcomes: list[str] = field(default_factory=list)
    """Train columns the test file lacks, other than the targets: known only afterwards."""

    @property
    def id_column(self) -> str | None:
        return self.sample.columns[0] if self.sample and self.sample.columns else None

    @property
    def targets(self) -> list[str]:
        if not self.sample or not self.sample.columns:
            return []
        header = self.sample.columns[1:]
        train = set(self.train.columns or []) if self.train else set()
        return [c for c in header if c in train] or header


def _is_sample(table: SourceFile, train: SourceFile | None, test: SourceFile | None) -> bool:
    """The id column of the test file, then the column(s) the test file lacks and the train file has, one row
    per test row; without a test file, a sample submission's common name and an id shared with the train file."""
    columns = table.columns or []
    if len(columns) < 2:
        return False
    train_columns = set(train.columns or []) if train else set()
    if test is None or not test.columns:
        return bool(SAMPLE_SUBMISSION.search(_stem(table))) and (
            not train_columns or columns[0] in train_columns
        )
    test_columns = set(test.columns)
    predicted = columns[1:]
    if columns[0] not in test_columns or any(c in test_columns for c in predicted):
        return False
    if train_columns and not any(c in train_columns for c in predicted):
        return False
    return table.rows is None or test.rows is None or table.rows == test.rows


def competition_files(files: list[SourceFile]) -> CompetitionFiles:
    """The train file, the test file, the sample submission and the outcome columns among `files` (tables are
    the files whose header was read)."""
    tables = sorted((f for f in files if f.columns), key=lambda f: f.name)
    if not tables:
        return CompetitionFiles()
    named_train = [f for f in tables if TRAIN_NAME.search(_stem(f))]
    train = max(named_train or tables, key=lambda f: (f.size, f.name))
    train_columns = set(train.columns or [])
    tests = [
        f
        for f in tables
        if f is not train
        and TEST_NAME.search(_stem(f))
        and not SAMPLE_SUBMISSION.search(_stem(f))
        and set(f.columns or []) < train_columns
    ]
    test = max(tests, key=lambda f: (len(f.columns or []), f.size, f.name)) if tests else None
    samples = [f for f in tables if f is not train and f is not test and _is_sample(f, train, test)]
    # The common name first where several fit (a submission of predicted probabilities beside the sample).
    samples.sort(key=lambda f: (not SAMPLE_SUBMISSION.search(_stem(f)), f.name))
    sample = samples[0] if samples else None
    found = CompetitionFiles(train, test, sample)
    outcomes = []
    if test is not None and test.columns:
        lacking = [c for c in train.columns or [] if c not in set(test.columns)]
        outcomes = [c for c in lacking if c not in found.targets]
    return CompetitionFiles(train, test, sample, outcomes)


def is_sample_submission(source: Source, file: SourceFile) -> bool:
    """Whether `file` is the source's sample submission (by its contents; by its name where they cannot tell)."""
    found = competition_files(source.files).sample
    if found is not None and found.name == file.name:
        return True
    return bool(SAMPLE_SUBMISSION.search(_stem(file)))


def identify_target(
    source: Source, files: list[SourceFile], override: list[str] | None
) -> tuple[list[str], str | None]:
    """(target columns, id column) from explicit facts only: the config, the crawler's own record, a
    competition's sample submission. Everything else (names, descriptions, the data) is the understand
    stage's job; empty targets leave it to that stage."""
    if override:
        return override, source.id_column
    if source.target_columns:
        return source.target_columns, source.id_column
    found = competition_files(files)
    if found.sample is not None:
        return found.targets, found.id_column
    return [], source.id_column
