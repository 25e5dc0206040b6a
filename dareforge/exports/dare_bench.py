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

Our mapping (`dest` plays DARE-bench's `data/`):

- the splits kept apart, as DARE-bench keeps its evaluation tasks (`data/eval/`) apart from its training
  tasks: our test split in `eval/`, our train split in `train/`, each with its own `question_list.json` and
  `databases/` (point DARE-bench's `datasci_eval_root` or `evaluation.py --databases_dir/--question_list` at
  `eval/`). Every entry also says its `split`.
- folder `<source id, dots as underscores>_<class|reg|ts>` (the kind its families declare,
  `Family.dare_bench`), or `<source id>-<target>_<kind>` for each target when a source frames two targets of
  one kind: v1 = that target's IF (or XF) task with the lowest seed, v2 = its MM (or CF) task. A
  DARE-bench folder is one source with one task of each variant, so a source's further IF seeds
  (`generate.if_variants`, 2 by default) are not exported (the report lists them): pairing each with the
  source's one MM task would pose that MM task again in another folder, and score it twice. A source missing
  one of the two variants (e.g. the gate rejected its MM task) is skipped and reported: DARE-bench's loader
  needs both. No task appears in two entries. A folder whose answers hold a value pandas reads as missing
  ("NA", "None", ...) is skipped and reported too: DARE-bench's evaluator reads them so, and would score no
  submission of that task 1.
- `source/`: tabular `train_v1.csv`, `val_v1.csv` (the IF task's train/test), `train_v2.csv`, `val_v2.csv`
  (the MM task's); time series `train.csv` (shared by XF and CF; `train_v1.csv`/`train_v2.csv` if they
  differ), `val_v1.csv` (XF test), `val_v2.csv` (CF test); and `metadata.txt` (title, description, columns).
- `verify/`: the ground truth named as above, cut to the metric's key and target columns (our answers files
  may hold more, and DARE-bench joins on every non-target column), and `all_metadata.json` with `question`
  (target, problem_type, needed files, time column; for tabular folders the fields DARE-bench's
  `reference_solution.py` reads: `selected_features`, `column_type_inference`, `model_type`, `imputer_type`,
  `random_state`, `save_file_type`) and `data_info`.
- the questions are our instructions with the file names swapped to the exported ones (`train.csv` ->
  `train_v1.csv`, `test.csv` -> `val_v1.csv`, `predictions.csv` -> `prediction.csv`, the file DARE-bench's
  scorer reads).

How IF is scored (`if_rule`). Our releases score an IF task by the share of rows that match the reference run
(`exact-match`, `allclose` within 1e-6 relative to max(|answer|, 1)). DARE-bench's `evaluation.py` scores it
all or nothing: 1 when the whole column equals the reference (classification) or passes numpy.allclose with
its defaults (rtol 1e-5, atol 1e-8, regression), else 0. The layout's default `if_rule="all-rows"` exports
DARE-bench's rule: each folder's `all_metadata.json` records the v1 metric as `exact-match-all-rows` or
`allclose-all-rows` (tolerance 1e-5), which our grader scores exactly as DARE-bench's evaluator does, and
keeps our release's metric beside it (`release_metric`). `if_rule="row-share"` exports our release's metric
unchanged; DARE-bench's evaluator then disagrees with it on every submission that misses a row.

DARE-bench's `reference_solution.py` generates its code from our `all_metadata.json`, but that template
(StandardScaler, one-hot, default hyperparameters, five estimators) is not our IF workflow (its filters,
scalers, encoders, date parts and hyperparameters), and it reads `train_v1_no_err.*`, which we do not ship:
do not let DARE-bench re-simulate (`force_simulate`). `simulated_pred_local.csv` is our reference run on the
stack in `dareforge.package_versions`; our `reference.py` is in the private release.
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dareforge.exports import ExportError
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
SPLIT_ROOTS = {"test": "eval", "train": "train"}
"""Where each split of the release goes: DARE-bench's `data/eval/` holds its evaluation tasks only."""
IF_RULES = ("all-rows", "row-share")
ALL_ROWS_METRICS = {"exact-match": "exact-match-all-rows", "allclose": "allclose-all-rows"}
SUMMARY_REASONS = 12
DARE_BENCH_RTOL = 1e-5
"""numpy.allclose's default relative tolerance, which DARE-bench's evaluator uses for IF regression."""


@dataclass
class DareBenchReport(LayoutReport):
    folders: list[str] = field(default_factory=list)

    def summary(self) -> list[str]:
        roots = [f.split("/")[0] for f in self.folders]
        counts = ", ".join(f"{roots.count(r)} in {r}/" for r in SPLIT_ROOTS.values() if r in roots)
        lines = [
            f"exported {self.release.name}@{self.release.version} to {self.dest}: {len(self.folders)} folders"
            + (f" ({counts})" if counts else "")
        ]
        return lines + self._skipped_lines()

    def _skipped_lines(self) -> list[str]:
        """Skipped tasks by reason, the commonest first; at most SUMMARY_REASONS lines (a whole-catalog release
        skips thousands: every QA and Lake task, every IF variant past the first)."""
        by_reason: dict[str, list[str]] = defaultdict(list)
        for key, why in sorted(self.skipped.items()):
            by_reason[why].append(key)
        ranked = sorted(by_reason.items(), key=lambda item: (-len(item[1]), item[0]))
        lines = [
            f"  skipped {keys[0]}: {why}" if len(keys) == 1 else f"  skipped {len(keys)} tasks: {why}"
            for why, keys in ranked[:SUMMARY_REASONS]
        ]
        rest = sum(len(keys) for _, keys in ranked[SUMMARY_REASONS:])
        if rest:
            lines.append(f"  and {rest} more skipped for {len(ranked) - SUMMARY_REASONS} other reasons")
        return lines


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


def _dare_metric(metric: dict[str, Any], if_rule: str) -> dict[str, Any]:
    """The metric as DARE-bench scores the task (a MetricSpec our grader scores the same way): clipped R² for a
    forecast, which our releases score by forecast skill; an IF task all or nothing under `if_rule="all-rows"`
    (see the module doc)."""
    if metric["name"] == "forecast-skill":
        return {**metric, "name": "clipped-r2", "scale": None}
    if if_rule == "all-rows" and metric["name"] in ALL_ROWS_METRICS:
        tolerance = DARE_BENCH_RTOL if metric["name"] == "allclose" else None
        return {**metric, "name": ALL_ROWS_METRICS[metric["name"]], "tolerance": tolerance}
    return metric


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
    """What DARE-bench's metadata says about an IF reference, from our sampled spec, in the form its
    `reference_solution.py` reads (the raw columns the workflow reads, each typed `numerical` or `categorical`;
    a date column counts as categorical, as DARE-bench types dates)."""
    if not task.private.get("spec"):
        return {}
    spec = json.loads(task.private["spec"])
    model = spec.get("model") or {}
    numeric, categorical = spec.get("numeric", []), spec.get("categorical", [])
    dates = [spec["date_parts"]["column"]] if spec.get("date_parts") else []
    kinds = {
        **{c: "numerical" for c in numeric},
        **{c: "categorical" for c in categorical + dates},
    }
    return {
        "model_type": model.get("name"),
        "random_state": (model.get("params") or {}).get("random_state"),
        "numerical_features": numeric,
        "categorical_features": categorical,
        "selected_features": [*numeric, *categorical, *dates],
        "column_type_inference": kinds,
        "imputer_type": spec.get("numeric_imputer"),
        "save_file_type": "csv",
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
    def __init__(self, name: str, if_rule: str = "all-rows"):
        """`if_rule`: how the exported metric scores IF tasks, `all-rows` (DARE-bench's rule, the default) or
        `row-share` (our releases' rule); see the module doc."""
        if if_rule not in IF_RULES:
            raise ExportError(f"unknown IF rule {if_rule!r}; choose one of {', '.join(IF_RULES)}")
        super().__init__(name)
        self.if_rule = if_rule

    def write(self, job: ExportJob, folder: Path) -> DareBenchReport:
        """The job's release in DARE-bench's layout (see the module doc), one list per split."""
        release = job.release
        private = {r["id"]: r for r in release.private_rows()}
        tasks = [_Task(r, private[r["id"]]) for r in release.rows()]
        sources = {s.id: s for s in job.ctx.store.read_records(Source)}
        report = DareBenchReport(release, Path(job.dest))
        # One folder per framing: a source may frame two targets of one kind (two classification targets),
        # and an IF task must be paired with the MM task of its own target.
        groups: dict[tuple[str, str, str], dict[int, list[_Task]]] = defaultdict(lambda: {1: [], 2: []})
        for task in tasks:
            slot = family_named(task.row["family"]).dare_bench
            if slot is None:
                report.skipped[task.id] = f"family {task.row['family']} has no DARE-bench counterpart"
                continue
            target = task.row["metric"]["target_columns"][0]
            groups[(task.row["source_id"], slot.kind, target)][slot.variant].append(task)
        framings = Counter((source_id, kind) for source_id, kind, _ in groups)
        used: set[str] = set()

        questions: dict[str, list[dict[str, Any]]] = {side: [] for side in SPLIT_ROOTS}
        for (source_id, kind, target), variants in sorted(groups.items()):
            v1s = sorted(variants[1], key=lambda t: (t.row["seed"], t.id))
            v2s = sorted(variants[2], key=lambda t: (t.row["seed"], t.id))
            if not v1s or not v2s:
                missing = "v1 (IF/XF)" if not v1s else "v2 (MM/CF)"
                for task in v1s + v2s:
                    report.skipped[task.id] = f"its source and target have no {missing} task to pair with"
                continue
            v1, v2 = v1s[0], v2s[0]
            named = _slug(source_id) if framings[(source_id, kind)] == 1 else _slug(f"{source_id}-{target}")
            pair_folder = f"{named}_{kind}"
            if pair_folder in used:
                for task in v1s + v2s:
                    report.skipped[task.id] = f"folder {pair_folder} is another framing's (its name collides)"
                continue
            used.add(pair_folder)
            split = v1.row["split"]
            if v2.row["split"] != split or split not in SPLIT_ROOTS:
                for task in v1s + v2s:
                    report.skipped[task.id] = (
                        f"{source_id}'s v1 is in split {split!r}, its v2 in {v2.row['split']!r}: a DARE-bench "
                        "folder holds one split's tasks"
                    )
                continue
            writer = _Writer(release, folder / SPLIT_ROOTS[split])
            unreadable = next((why for t in (v1, v2) if (why := _read_as_missing(writer, t))), None)
            if unreadable:
                for task in v1s + v2s:
                    report.skipped[task.id] = unreadable
                continue
            for n, extra in ((1, v1s[1:]), (2, v2s[1:])):
                for task in extra:
                    report.skipped[task.id] = (
                        f"a DARE-bench folder holds one v{n} task per source and target: the lowest seed's"
                    )
            entry = _export_pair(
                writer, pair_folder, kind, v1, v2, sources.get(source_id), release, self.if_rule
            )
            questions[split].append(entry)
            report.folders.append(f"{SPLIT_ROOTS[split]}/{pair_folder}")
        for split, entries in questions.items():
            if entries:
                path = folder / SPLIT_ROOTS[split] / "question_list.json"
                path.write_text(json.dumps(entries, indent=2, ensure_ascii=False) + "\n")
        return report


def read_as_missing(data: bytes, columns: list[str]) -> str | None:
    """The first cell of `columns` in CSV `data` that pandas' read_csv defaults, which DARE-bench's evaluator
    uses, read as missing ("NA", "None", "null", "", ...), as its text; None when there is none."""
    missing = pd.read_csv(io.BytesIO(data), usecols=columns).isna().to_numpy()
    if not missing.any():
        return None
    return pd.read_csv(io.BytesIO(data), usecols=columns, dtype=str, keep_default_na=False).to_numpy()[
        missing
    ][0]


def _read_as_missing(writer: _Writer, task: _Task) -> str | None:
    """Why DARE-bench could not score `task`: its evaluator would read an answer as missing, so no submission
    could score 1. None when it reads them all."""
    truth = family_named(task.row["family"]).files.truth
    if truth not in task.secret:
        return None  # `_export_pair` says what is missing
    text = read_as_missing(writer.secret(task, truth), task.row["metric"]["target_columns"])
    if text is None:
        return None
    return (
        f"task {task.id}'s answers hold {text!r}, which DARE-bench's evaluator reads as missing: no submission "
        "could score 1 there"
    )


def _export_pair(
    writer: _Writer,
    folder: str,
    kind: str,
    v1: _Task,
    v2: _Task,
    source: Source | None,
    release: Release,
    if_rule: str,
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
        "split": v1.row["split"],
        "if_rule": if_rule,
        **{
            f"v{n}": {
                "task_id": t.id,
                "family": t.row["family"],
                "metric": _dare_metric(t.row["metric"], if_rule),
                "release_metric": t.row["metric"],
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
