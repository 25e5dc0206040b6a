"""A finished release in DARE-bench's own layout (registered as `dare-bench`), so DARE-bench's tools can run and
score our tasks.

DARE-bench (Snowflake-Labs/dare-bench, `data/eval/`) keeps a `question_list.json` beside `databases/`. Each
entry names a folder (`file_path`) holding one source's two task variants: `question_v1` (IF for tabular,
XF for time series) and `question_v2` (MM, CF), with `task` one of `classification`, `regression`,
`time_series_analysis`, the `available_tools`, and the files each variant needs. A folder has `source/`
(what the agent gets) and `verify/` (ground truth and `all_metadata.json`). Its scorer picks the ground truth
by task and variant: tabular v1 `simulated_pred_local.csv` (the reference run's predictions, since IF is
graded against the reference), tabular v2 `ground_truth.csv`, time series `ground_truth_v1.csv` /
`ground_truth_v2.csv`; it joins on `row_id` when the ground truth has one, else on every non-target column.

Our mapping (`dest` plays DARE-bench's `data/eval/`):

- folder `<source id, dots as underscores>_<class|reg|ts>` (the kind its families declare,
  `Family.dare_bench`): v1 = the source's IF (or XF) task with the lowest seed, v2 = its MM (or CF)
  task. Further IF seeds get folders `<slug>-2_<kind>`, ... whose v2 repeats the MM task; the entry's
  `dareforge.v2_duplicate_of` names the folder that has it first (drop those entries when scoring v2, or the MM
  task counts twice). A source missing one of the two variants (e.g. the gate rejected
  its MM task) is skipped and reported: DARE-bench's loader needs both.
- `source/`: tabular `train_v1.csv`, `val_v1.csv` (the IF task's train/test), `train_v2.csv`, `val_v2.csv`
  (the MM task's); time series `train.csv` (shared by XF and CF; `train_v1.csv`/`train_v2.csv` if they
  differ), `val_v1.csv` (XF test), `val_v2.csv` (CF test); and `metadata.txt` (title, description, columns).
- `verify/`: the ground truth named as above, cut to the metric's key and target columns (our answers files
  may hold more, and DARE-bench joins on every non-target column), and `all_metadata.json` with `question`
  (target, problem_type, needed files, time column, the IF spec's model and features) and `data_info`.
- the questions are our instructions with the file names swapped to the exported ones (`train.csv` ->
  `train_v1.csv`, `test.csv` -> `val_v1.csv`, `predictions.csv` -> `prediction.csv`, the file DARE-bench's
  scorer reads).

DARE-bench's `reference_solution.py` cannot rebuild our IF workflows from `all_metadata.json` (their grammar
differs), so do not let it re-simulate (`force_simulate`): `simulated_pred_local.csv` is our reference run on
the stack in `dareforge.package_versions`; our `reference.py` is in the private release.
"""

from __future__ import annotations

import io
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dareforge.exports.export_format import ExportJob, FolderLayout, LayoutReport
from dareforge.families.registry import family_named
from dareforge.generators.instructions import METRIC_WORDS
from dareforge.publish.release import Release, ReleaseError
from dareforge.schema import Source

PROBLEM_TYPES = {"class": "classification", "reg": "regression", "ts": "time_series_analysis"}
GROUND_TRUTH = {("class", 1): "simulated_pred_local.csv", ("reg", 1): "simulated_pred_local.csv"}
GROUND_TRUTH.update({("class", 2): "ground_truth.csv", ("reg", 2): "ground_truth.csv"})
GROUND_TRUTH.update({("ts", 1): "ground_truth_v1.csv", ("ts", 2): "ground_truth_v2.csv"})
TOOLS = ["python_executor"]


@dataclass
class DareBenchReport(LayoutReport):
    folders: list[str] = field(default_factory=list)

    def summary(self) -> list[str]:
        lines = [
            f"exported {self.release.name}@{self.release.version} to {self.dest}: {len(self.folders)} folders"
        ]
        return lines + [f"  skipped {key}: {why}" for key, why in sorted(self.skipped.items())]


@dataclass
class _Task:
    row: dict[str, Any]
    private: dict[str, Any]

    @property
    def id(self) -> str:
        return self.row["id"]

    @property
    def public(self) -> dict[str, dict[str, Any]]:
        return {f["name"]: f for f in self.row["files"]}

    @property
    def secret(self) -> dict[str, dict[str, Any]]:
        return {f["name"]: f for f in self.private["files"]}


def _slug(source_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9-]+", "_", source_id).strip("_")


def _rename(instruction: str, names: dict[str, str]) -> str:
    for old, new in {**names, "predictions.csv": "prediction.csv"}.items():
        instruction = instruction.replace(f"`{old}`", f"`{new}`")
    # DARE-bench scores every forecast by clipped R²; our releases use forecast skill (see `forecast.py`).
    ours, theirs = METRIC_WORDS["forecast-skill"], METRIC_WORDS["clipped-r2"]
    return instruction.replace(f"scored by the {ours}", f"scored by the {theirs}")


def _dare_metric(metric: dict[str, Any]) -> dict[str, Any]:
    """The metric as DARE-bench scores the task: clipped R² for a forecast, which our releases score by
    forecast skill (the seasonal-naive scale only means something to that metric)."""
    if metric["name"] != "forecast-skill":
        return metric
    return {**metric, "name": "clipped-r2", "scale": None, "dareforge_metric": "forecast-skill"}


def _cut(data: bytes, columns: list[str]) -> bytes:
    """Keep only `columns` (key + target), every cell as its exact text."""
    frame = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ReleaseError(f"ground truth lacks columns {missing}")
    return frame[columns].to_csv(index=False).encode()


def _metadata_text(source: Source | None, source_id: str, columns: list[str]) -> str:
    title = source.title if source else source_id
    lines = [title, ""]
    if source and source.description:
        lines += [source.description.strip(), ""]
    if source and source.public_url:
        lines += [f"Source: {source.public_url}", ""]
    lines += ["=== Columns ===", "", *columns, ""]
    return "\n".join(lines)


def _spec_fields(task: _Task) -> dict[str, Any]:
    """What DARE-bench's metadata says about an IF reference, from our sampled spec."""
    if not task.private.get("spec"):
        return {}
    spec = json.loads(task.private["spec"])
    model = spec.get("model") or {}
    return {
        "model_type": model.get("name"),
        "random_state": (model.get("params") or {}).get("random_state"),
        "numerical_features": spec.get("numeric", []),
        "categorical_features": spec.get("categorical", []),
    }


class _Writer:
    def __init__(self, release: Release, root: Path):
        self.release, self.root = release, root

    def public(self, task: _Task, name: str) -> bytes:
        return self.release.store.read_bytes(f"{self.release.prefix}/{task.public[name]['path']}")

    def secret(self, task: _Task, name: str) -> bytes:
        return self.release.store.read_bytes(f"{self.release.private_prefix}/{task.secret[name]['path']}")

    def put(self, folder: str, rel: str, data: bytes) -> None:
        path = self.root / "databases" / folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _file_names(kind: str, v1: _Task, v2: _Task) -> tuple[dict[str, str], dict[str, str]]:
    """Exported names of each variant's public files (train.csv, test.csv, and any other)."""
    shared_train = (
        kind == "ts"
        and "train.csv" in v1.public
        and v1.public["train.csv"]["sha256"] == v2.public.get("train.csv", {}).get("sha256")
    )
    names = []
    for n, task in ((1, v1), (2, v2)):
        mapping = {}
        for name in task.public:
            stem, dot, ext = name.rpartition(".")
            if name == "train.csv":
                mapping[name] = "train.csv" if shared_train else f"train_v{n}.csv"
            elif name == "test.csv":
                mapping[name] = f"val_v{n}.csv"
            else:
                mapping[name] = f"{stem}_v{n}{dot}{ext}" if dot else f"{name}_v{n}"
        names.append(mapping)
    return names[0], names[1]


class DareBenchLayout(FolderLayout):
    def write(self, job: ExportJob, folder: Path) -> DareBenchReport:
        """The job's release in DARE-bench's layout (see the module doc), every task tagged with its split."""
        release = job.release
        private = {r["id"]: r for r in release.private_rows()}
        tasks = [_Task(r, private[r["id"]]) for r in release.rows()]
        sources = {s.id: s for s in job.ctx.store.read_records(Source)}
        report = DareBenchReport(release, Path(job.dest))
        groups: dict[tuple[str, str], dict[int, list[_Task]]] = defaultdict(lambda: {1: [], 2: []})
        for task in tasks:
            slot = family_named(task.row["family"]).dare_bench
            if slot is None:
                report.skipped[task.id] = f"family {task.row['family']} has no DARE-bench counterpart"
                continue
            groups[(task.row["source_id"], slot.kind)][slot.variant].append(task)

        writer = _Writer(release, folder)
        questions = []
        for (source_id, kind), variants in sorted(groups.items()):
            v1s = sorted(variants[1], key=lambda t: (t.row["seed"], t.id))
            v2s = sorted(variants[2], key=lambda t: (t.row["seed"], t.id))
            if not v1s or not v2s:
                missing = "v1 (IF/XF)" if not v1s else "v2 (MM/CF)"
                for task in v1s + v2s:
                    report.skipped[task.id] = f"{source_id} has no {missing} task to pair with"
                continue
            first = f"{_slug(source_id)}_{kind}"
            for i in range(max(len(v1s), len(v2s))):
                v1, v2 = v1s[min(i, len(v1s) - 1)], v2s[min(i, len(v2s) - 1)]
                pair_folder = first if i == 0 else f"{_slug(source_id)}-{i + 1}_{kind}"
                entry = _export_pair(writer, pair_folder, kind, v1, v2, sources.get(source_id), release)
                entry["dareforge"]["v1_duplicate_of"] = first if i >= len(v1s) else None
                entry["dareforge"]["v2_duplicate_of"] = first if i >= len(v2s) else None
                questions.append(entry)
                report.folders.append(pair_folder)
        (folder / "question_list.json").write_text(json.dumps(questions, indent=2, ensure_ascii=False) + "\n")
        return report


def _export_pair(
    writer: _Writer, folder: str, kind: str, v1: _Task, v2: _Task, source: Source | None, release: Release
) -> dict[str, Any]:
    names1, names2 = _file_names(kind, v1, v2)
    for task, names in ((v1, names1), (v2, names2)):
        for name, exported in names.items():
            writer.put(folder, f"source/{exported}", writer.public(task, name))
    columns = v1.public.get("train.csv", {}).get("columns") or []
    writer.put(folder, "source/metadata.txt", _metadata_text(source, v1.row["source_id"], columns).encode())
    for n, task in ((1, v1), (2, v2)):
        metric = task.row["metric"]
        truth = family_named(task.row["family"]).files.truth
        if truth not in task.secret:
            raise ReleaseError(f"task {task.id} ({task.row['family']}) has no {truth} in the private release")
        data = _cut(writer.secret(task, truth), [*metric["key_columns"], *metric["target_columns"]])
        writer.put(folder, f"verify/{GROUND_TRUTH[(kind, n)]}", data)
    needed = [[*sorted(set(names.values())), "metadata.txt"] for names in (names1, names2)]
    question: dict[str, Any] = {
        "target": v1.row["metric"]["target_columns"],
        "problem_type": PROBLEM_TYPES[kind],
        "needed_files_v1": needed[0],
        "needed_files_v2": needed[1],
        "output_file": "prediction.csv",
    }
    if kind == "ts":
        keys = v2.row["metric"]["key_columns"]
        question["time_column"] = keys[0] if keys else None
        question["entity_column"] = keys[1] if len(keys) > 1 else None
    else:
        question.update(_spec_fields(v1))
    question["dareforge"] = {
        "release": release.name,
        "version": release.version,
        **{
            f"v{n}": {
                "task_id": t.id,
                "family": t.row["family"],
                "metric": _dare_metric(t.row["metric"]),
                "package_versions": t.row["package_versions"],
            }
            for n, t in ((1, v1), (2, v2))
        },
    }
    when = (source.last_updated or source.deadline) if source else None
    metadata = {
        "question": question,
        "data_info": {
            "ref": source.ref if source else v1.row["source_id"],
            "title": source.title if source else v1.row["source_id"],
            "url": source.public_url if source else None,
            "lastUpdated": when.isoformat() if when else None,
            "licenseName": source.license if source else None,
        },
    }
    writer.put(
        folder,
        "verify/all_metadata.json",
        (json.dumps(metadata, indent=2, ensure_ascii=False) + "\n").encode(),
    )
    return {
        "file_path": folder,
        "question_v1": _rename(v1.row["instruction"], names1),
        "question_v2": _rename(v2.row["instruction"], names2),
        "task": PROBLEM_TYPES[kind],
        "available_tools": TOOLS,
        "needed_files_v1": needed[0],
        "needed_files_v2": needed[1],
        "split": v1.row["split"],
        "dareforge": {"task_id_v1": v1.id, "task_id_v2": v2.id},
    }
