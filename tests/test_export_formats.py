"""Export formats are registered by name: a throwaway format (one class in this file, one registry line) is
written by the corpus stage with every other training format and by `dareforge export`, versioned and listed
like `sft` and `rl`; an unknown name is an error that lists the registered ones.

Runs on the iris store and release of tests/test_exports.py (every task on the release's test side).
"""

from __future__ import annotations

from datetime import date

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from dareforge.cli import app
from dareforge.context import RunContext
from dareforge.exports import ExportError
from dareforge.exports.export_format import (
    ExportContent,
    ExportJob,
    TrainingExport,
    list_export_versions,
    load_export,
    split_tables,
    verify_export,
)
from dareforge.exports.formats import FORMATS, Registered, export_format
from dareforge.hashing import content_fingerprint
from dareforge.trajectories.corpus import build_corpus
from tests.test_exports import built  # noqa: F401  (the iris store and its release)
from tests.test_publish import DAY

TASK_LIST_SCHEMA = pa.schema(
    [
        pa.field("task_id", pa.string(), False),
        pa.field("family", pa.string(), False),
        pa.field("split", pa.string(), False),
    ]
)


class TaskList(TrainingExport):
    """The throwaway format: one row per task, its id, family and side of the release."""

    format = "task-list/1"

    def content(self, job: ExportJob, name: str) -> ExportContent:
        rows = [
            {"task_id": t.id, "family": t.family, "split": job.release.splits[t.id]}
            for t in sorted(job.tasks, key=lambda t: t.id)
        ]
        meta = {
            "content_fingerprint": content_fingerprint({"format": self.format, "rows": rows}),
            "task_ids": [r["task_id"] for r in rows],
        }
        return ExportContent({"default": split_tables(rows, TASK_LIST_SCHEMA)}, meta)

    def card(self, meta: dict) -> str:
        return f"# {meta['pretty_name']}\n\n{len(meta['task_ids'])} tasks, version {meta['version']}.\n"


@pytest.fixture
def task_list(monkeypatch):
    monkeypatch.setitem(
        FORMATS, "task-list", Registered(f"{__name__}:TaskList", "every task's id and family")
    )


@pytest.fixture(scope="module")
def ctx(built):  # noqa: F811
    """The store of `built`, exporting tasks on both sides (a corpus takes the train side by default)."""
    cfg = built[0].config.model_copy(deep=True)
    cfg.synthesize.split = "all"
    return RunContext.from_config(cfg, show_progress=False)


def test_a_format_registered_in_one_line_is_exported_versioned_and_listed(built, ctx, task_list):  # noqa: F811
    _, release, _, tasks = built
    result = build_corpus(ctx, "bench", today=DAY)
    assert list(result.exports) == ["rl", "task-list"]  # every training format; sft has no trajectories here
    assert any("no trajectories" in note for note in result.notes)
    written = result.exports["task-list"]
    assert written.created and (written.name, written.version) == ("bench-task-list", "2026.01.15")
    assert list_export_versions(ctx, "bench-task-list") == ["2026.01.15"]
    export = load_export(ctx, "bench-task-list")
    assert export.kind == "task-list export" and export.manifest["format"] == "task-list/1"
    assert {e["name"] for e in export.manifest["files"]} == {"README.md", "data/test.parquet"}
    assert ctx.store.read_bytes(f"{export.prefix}/README.md").decode().startswith("# bench-task-list\n")
    assert sorted(r["task_id"] for r in export.rows()) == sorted(t.id for t in tasks)
    assert {r["split"] for r in export.rows()} == set(release.splits.values()) == {"test"}
    assert verify_export(ctx, "bench-task-list") == []

    again = build_corpus(ctx, "bench", formats=["task-list"], today=date(2026, 2, 1))
    assert list(again.exports) == ["task-list"] and not again.exports["task-list"].created
    assert list_export_versions(ctx, "bench-task-list") == ["2026.01.15"]  # same content, same version


def test_dareforge_export_writes_and_publishes_a_registered_format(built, task_list, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("DAREFORGE_SYNTHESIZE__SPLIT", "all")
    store = built[0].config.store.root
    args = ["-q", "--store", store, "export", "--format", "task-list", "--release", "bench"]
    result = CliRunner().invoke(app, [*args, "--to", str(tmp_path / "published")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "task-list export bench-task-list@" in result.output
    (version,) = list_export_versions(built[0], "bench-task-list")[-1:]
    published = tmp_path / "published" / "bench-task-list" / version
    assert {p.name for p in published.rglob("*") if p.is_file()} == {
        "README.md",
        "test.parquet",
        "manifest.json",
    }


def test_dareforge_export_help_lists_the_registered_formats():
    result = CliRunner().invoke(app, ["export", "--help"], env={"COLUMNS": "300"})
    assert result.exit_code == 0
    for name, entry in FORMATS.items():
        assert f"{name}: {entry.summary}" in result.output


def test_an_unknown_format_is_an_error_listing_the_registered_ones(built, task_list):  # noqa: F811
    with pytest.raises(ExportError) as unknown:
        export_format("parquet-dump")
    assert str(unknown.value) == (
        "no export format 'parquet-dump'; the registered formats are sft, rl, dare-bench, kramabench, harbor, task-list"
    )
    store = built[0].config.store.root
    result = CliRunner().invoke(app, ["-q", "--store", store, "export", "--format", "parquet-dump"])
    assert result.exit_code == 2 and "the registered formats are sft, rl, dare-bench" in result.output
    with pytest.raises(ExportError, match="dare-bench: another benchmark's folder layout"):
        build_corpus(built[0], "bench", formats=["dare-bench"])
