"""Obscured variants (the KramaBench idea): the same task on renamed, rescaled and re-keyed data.

A model that memorized a public dataset (its column names, its rows, the answers of its test ids) can score on
a task without doing the work. Its obscured variant defeats that recall while a correct pipeline scores the
same: columns get seeded names (`f_3a9c`), categorical values seeded tokens (`v_1b2e`, class labels included),
numeric columns (features and regression or time-series targets) a seeded affine map per column (positive
scale, so order and filters survive; integer columns stay integer), and ids new integers in a seeded order.
Datetime and free-text columns keep their values (only their names change). `obscure:` switches each part.

How: the prepared source the original was built from is obscured once (written as its own prepared version,
`prepared/<source>/<obscured version>/`, with the map in its manifest), and the original's own family builder
runs on it, so instruction, reference code, noise rows, certificate and reference scores come from the same
code as every task. An IF variant's sampled workflow must equal the original's spec pushed through the map
(`obscure_spec`); otherwise (the original was generated under other settings) the variant is rejected with
that reason, as is one whose reference does not certify.

A variant's id hashes the original's id and the obscure settings; `variant_of` names the original; the record
is stored in the `tasks` partition `obscured--<source>` and never released or validated. Its private
`obscure.json` holds the map. A variant whose manifest exists is not built again.
"""

from __future__ import annotations

import ast
import json
import logging
import math
import random
import shutil
import time
from collections import defaultdict
from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

from dareforge.config import ObscureConfig
from dareforge.context import RunContext
from dareforge.describe import describe_file
from dareforge.errors import DareforgeError
from dareforge.families.family import Build
from dareforge.families.registry import family_of
from dareforge.generators.prepare import load_prepared
from dareforge.generators.taskio import Draft, Runners, TaskWriter, originals, read_frames
from dareforge.hashing import fingerprint
from dareforge.reference_solutions.spec import CategoryFilter, IFSpec, RangeFilter
from dareforge.report import StageReport
from dareforge.schema import ColumnKind, ColumnProfile, MetricSpec, PreparedSource, Task, TaskType

log = logging.getLogger(__name__)

OBSCURE_VERSION = "1"
PARTITION_PREFIX = "obscured--"
MAP_FILE = "obscure.json"
SIGNIFICANT_DIGITS = 12
"""Rescaled floats are rounded to this many significant digits (a monotone rounding: filters keep working)."""
FRAMES = ("train.csv", "test.csv", "answers.csv")


class ObscureError(DareforgeError):
    pass


class Affine(BaseModel):
    """`x -> scale * x + shift`; an integer column gets integer scale and shift."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scale: float
    shift: float
    integer: bool

    def value(self, x: float) -> float:
        y = self.scale * float(x) + self.shift
        return float(round(y)) if self.integer else float(f"{y:.{SIGNIFICANT_DIGITS}g}")

    def series(self, values: pd.Series) -> pd.Series:
        if self.integer:
            return values.astype("Int64") * int(self.scale) + int(self.shift)
        out = values.astype("float64") * self.scale + self.shift
        return out.map(lambda y: y if pd.isna(y) else float(f"{y:.{SIGNIFICANT_DIGITS}g}"))


class ObscureMap(BaseModel):
    """What an obscured source changed: new column names, category tokens per column, affine maps per
    numeric column, and whether ids were re-keyed (the id map itself is not kept: it can be as long as the data)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    columns: dict[str, str]
    categories: dict[str, dict[str, str]]
    affine: dict[str, Affine]
    id_column: str
    ids_rekeyed: bool

    def column(self, name: str) -> str:
        return self.columns.get(name, name)

    def category(self, column: str, value: str) -> str:
        """The token of a value as `astype(str)` writes it ("3.0" and "3" are the same number)."""
        tokens = self.categories.get(column, {})
        if value in tokens:
            return tokens[value]
        try:
            return tokens.get(category_key(float(value)), value)
        except ValueError:
            return value

    def number(self, column: str, x: float) -> float:
        affine = self.affine.get(column)
        return affine.value(x) if affine is not None else x


# -- the map --------------------------------------------------------------------------------------------------
def category_key(value: object) -> str:
    """A category's text; an integral float is written as an integer, since pandas reads a numeric column with
    gaps as floats in one file and as integers in another."""
    if isinstance(value, float | np.floating) and float(value).is_integer():
        return str(int(value))
    return str(value)


def _tokens(prefix: str, keys: Iterable[str], *salt: object) -> dict[str, str]:
    """Seeded, unique tokens for `keys`, as short as collisions allow, never equal to a key."""
    keys = sorted(set(keys))
    for length in (4, 6, 8, 12, 16):
        out = {k: f"{prefix}{fingerprint(*salt, k)[:length]}" for k in keys}
        values = set(out.values())
        if len(values) == len(keys) and not values & set(keys):
            return out
    raise ObscureError(f"could not make unique tokens for {len(keys)} values of {salt!r}")


def _affine(values: pd.Series, rng: random.Random) -> Affine | None:
    numbers = values.dropna().astype("float64")
    numbers = numbers[np.isfinite(numbers)]
    if numbers.empty:
        return None
    span = float(numbers.max() - numbers.min()) or float(numbers.abs().max()) or 1.0
    magnitude = 10.0 ** math.floor(math.log10(span))
    if bool((numbers == numbers.round()).all()):
        scale = rng.randint(2, 9)
        if float(numbers.abs().max()) * scale > 2**52:
            scale = 1  # keep very large integers exact
        shift = rng.choice([-1, 1]) * rng.randint(1, 9) * max(1, int(magnitude))
        return Affine(scale=scale, shift=shift, integer=True)
    scale = round(rng.choice([rng.uniform(0.2, 0.8), rng.uniform(1.5, 5.0)]), 3)
    shift = round(rng.choice([-1, 1]) * rng.uniform(1.0, 9.0), 2) * magnitude
    return Affine(scale=scale, shift=float(f"{shift:.6g}"), integer=False)


def _is_number(values: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)


def build_map(
    prepared: PreparedSource, frames: list[pd.DataFrame], seed: int, config: ObscureConfig
) -> ObscureMap:
    """The seeded map of one prepared source under `obscure:` settings `config`."""
    salt = (seed, prepared.source_id)
    names = list(dict.fromkeys(c for frame in frames for c in frame.columns))
    columns = _tokens("f_", names, *salt, "column") if config.rename_columns else {}
    kinds = {c.name: c.kind for c in prepared.columns}
    labels = set(prepared.target_columns) if prepared.task_type == TaskType.CLASSIFICATION else set()
    categories: dict[str, dict[str, str]] = {}
    affine: dict[str, Affine] = {}
    for name in names:
        if name == prepared.id_column:
            continue
        values = pd.concat([f[name] for f in frames if name in f.columns], ignore_index=True)
        if name in labels or kinds.get(name) == ColumnKind.CATEGORICAL:
            if config.rename_categories:
                keys = (category_key(v) for v in values.dropna())
                categories[name] = _tokens("v_", keys, *salt, "category", name)
        elif kinds.get(name) == ColumnKind.NUMERIC and config.rescale_numeric and _is_number(values):
            rng = random.Random(fingerprint(*salt, "affine", name))
            if (found := _affine(values, rng)) is not None:
                affine[name] = found
    return ObscureMap(
        columns=columns,
        categories=categories,
        affine=affine,
        id_column=prepared.id_column,
        ids_rekeyed=bool(config.rekey_ids),
    )


def _new_ids(ids: pd.Series, seed: int, source_id: str) -> dict[str, int]:
    """Distinct ids (as text) -> new integers in a seeded order, in a range no original integer id falls in."""
    keys = sorted({category_key(v) for v in ids.dropna()})
    numeric = pd.to_numeric(pd.Series(keys, dtype=object), errors="coerce").dropna().to_numpy()
    start = 10**5
    while ((numeric >= start) & (numeric < start + len(keys))).any():
        start *= 10
    order = np.random.default_rng(int(fingerprint(seed, source_id, "ids"), 16)).permutation(len(keys))
    return {key: start + int(i) for key, i in zip(keys, order, strict=True)}


def apply_map(
    mapping: ObscureMap, frames: list[pd.DataFrame], seed: int, source_id: str
) -> list[pd.DataFrame]:
    """The frames with the map applied, ids re-keyed consistently across all of them."""
    ids = None
    if mapping.ids_rekeyed:
        ids = _new_ids(
            pd.concat([f[mapping.id_column] for f in frames if mapping.id_column in f]), seed, source_id
        )
    out = []
    for frame in frames:
        frame = frame.copy()
        for name in frame.columns:
            if name == mapping.id_column and ids is not None:
                frame[name] = frame[name].map(lambda v: ids[category_key(v)]).astype("Int64")
            elif name in mapping.categories:
                tokens = mapping.categories[name]
                frame[name] = frame[name].map(lambda v, t=tokens: v if pd.isna(v) else t[category_key(v)])
            elif name in mapping.affine:
                frame[name] = mapping.affine[name].series(frame[name])
        out.append(frame.rename(columns=mapping.columns))
    return out


def obscure_spec(spec: IFSpec, mapping: ObscureMap) -> IFSpec:
    """An IF workflow pushed through the map: what the same workflow reads on the obscured data."""
    filters: list[RangeFilter | CategoryFilter] = []
    for f in spec.filters:
        if isinstance(f, RangeFilter):
            low, high = mapping.number(f.column, f.low), mapping.number(f.column, f.high)
            filters.append(RangeFilter(column=mapping.column(f.column), low=low, high=high))
        else:
            allowed = sorted(mapping.category(f.column, v) for v in f.allowed)
            filters.append(CategoryFilter(column=mapping.column(f.column), allowed=allowed))
    data = spec.model_dump()
    data.update(
        id_column=mapping.column(spec.id_column),
        target=mapping.column(spec.target),
        filters=[f.model_dump() for f in filters],
        numeric=[mapping.column(c) for c in spec.numeric],
        categorical=[mapping.column(c) for c in spec.categorical],
    )
    if spec.date_parts is not None:
        data["date_parts"] = {
            "column": mapping.column(spec.date_parts.column),
            "parts": spec.date_parts.parts,
        }
    return IFSpec.model_validate(data)


def obscure_metric(metric: MetricSpec, mapping: ObscureMap) -> MetricSpec:
    return metric.model_copy(
        update={
            "target_columns": [mapping.column(c) for c in metric.target_columns],
            "key_columns": [mapping.column(c) for c in metric.key_columns],
        }
    )


def _profile(column: ColumnProfile, mapping: ObscureMap) -> ColumnProfile:
    # Statistics of the original values would leak them; builders read only name, kind, missing rate, distinct.
    renamed = column.name in mapping.categories
    return column.model_copy(
        update={
            "name": mapping.column(column.name),
            "dtype": "VARCHAR" if renamed else column.dtype,
            "min": None,
            "max": None,
            "mean": None,
            "std": None,
            "top_values": [],
        }
    )


# -- the obscured prepared source -------------------------------------------------------------------------------
def settings_key(ctx: RunContext) -> str:
    return fingerprint(OBSCURE_VERSION, ctx.config.obscure.model_dump(mode="json"))


def variant_id(original_id: str, key: str) -> str:
    """The id of the variant of task `original_id` under the obscure settings `key` (`settings_key`)."""
    return fingerprint("obscured", original_id, key)


def obscure_source(
    ctx: RunContext, prepared: PreparedSource, key: str, written: list[str]
) -> tuple[PreparedSource, ObscureMap]:
    """The obscured prepared version of `prepared` (built and stored once; later calls read its manifest)."""
    version = fingerprint("obscured", prepared.version, key)
    prefix = f"prepared/{prepared.source_id}/{version}"
    manifest = ctx.store.read_manifest(prefix)
    if manifest is not None:
        return PreparedSource.model_validate(manifest["record"]), ObscureMap.model_validate(manifest["map"])
    seed = ctx.config.obscure.seed
    frames = list(read_frames(ctx, prepared))
    mapping = build_map(prepared, frames, seed, ctx.config.obscure)
    scratch = ctx.scratch_dir(f"obscure-{prepared.source_id}")
    try:
        files = []
        for name, frame in zip(FRAMES, apply_map(mapping, frames, seed, prepared.source_id), strict=True):
            frame.to_csv(scratch / name, index=False)
            files.append(describe_file(scratch / name, name))
            ctx.store.put_file(scratch / name, f"{prefix}/files/{name}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    record = prepared.model_copy(
        update={
            "version": version,
            "target_columns": [mapping.column(c) for c in prepared.target_columns],
            "id_column": mapping.column(prepared.id_column),
            **{
                name: mapping.column(value) if (value := getattr(prepared, name)) else None
                for name in ("time_column", "entity_column", "group_column")
            },
            "columns": [_profile(c, mapping) for c in prepared.columns],
            "excluded_columns": [mapping.column(c) for c in prepared.excluded_columns],
            "files": files,
        }
    )
    ctx.store.write_manifest(
        prefix,
        {
            "source_id": prepared.source_id,
            "version": version,
            "obscured_from": prepared.version,
            "files": [f.model_dump() for f in files],
            "record": record.model_dump(mode="json"),
            "map": mapping.model_dump(mode="json"),
        },
    )
    written.append(prefix)
    return record, mapping


# -- variants ---------------------------------------------------------------------------------------------------
class VariantWriter(TaskWriter):
    """Writes the variant of one original task: its id, `variant_of`, the map, and the check that the builder
    made the same task (the same IF workflow, the same metric) on the obscured data."""

    def __init__(self, ctx, prepared, report, original: Task, mapping: ObscureMap, key: str):
        super().__init__(ctx, prepared, report)
        self.original, self.mapping, self.key = original, mapping, key

    def task_id(self, family: str, seed: int, spec_key: str) -> str:
        return variant_id(self.original.id, self.key)

    def build(self, family: str, seed: int, spec_key: str, fill: Callable[[Draft], None]) -> Task | None:
        def fill_variant(draft: Draft) -> None:
            fill(draft)
            document = {
                "variant_of": self.original.id,
                "obscure": self.ctx.config.obscure.model_dump(mode="json"),
                "map": self.mapping.model_dump(mode="json"),
            }
            (draft.private / MAP_FILE).write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
            draft.fields["variant_of"] = self.original.id
            problem = self.mismatch(draft.fields)
            if problem and draft.fields.get("status") != "rejected":
                draft.fields.update(status="rejected", reject_reason=problem)

        return super().build(family, seed, spec_key, fill_variant)

    def mismatch(self, fields: dict) -> str | None:
        fix = "the original was generated under other settings; regenerate it, then obscure again"
        if family_of(self.original).asks_question:
            return None  # the family drew the same question through the map before building it
        if fields["metric"] != obscure_metric(self.original.metric, self.mapping):
            return f"the variant's metric differs from the original's mapped metric; {fix}"
        if self.original.spec is None:
            return None
        expected = obscure_spec(IFSpec.model_validate_json(self.original.spec), self.mapping)
        if IFSpec.model_validate_json(fields["spec"]) != expected:
            return f"the variant's workflow differs from the original's mapped workflow; {fix}"
        return None


def build_variant(build: Build, original: Task) -> Task | None:
    """The original's family builds its variant on the obscured framing (`build`)."""
    if build.family.variant is None:
        raise ObscureError(f"{build.family.name} tasks have no obscured variant ({build.family.no_variant})")
    return build.family.variant(build, original)


def same_question(original: dict, drawn: dict, mapping: ObscureMap) -> bool:
    """Whether `drawn` params are `original`'s pushed through the map: each column renamed, each category value
    its token, other texts and flags equal; numbers (thresholds, rescaled) only need to be numbers."""
    if set(original) != set(drawn):
        return False
    return all(_same_param(original[k], drawn[k], mapping) for k in original)


def _same_param(original: object, drawn: object, mapping: ObscureMap) -> bool:
    if isinstance(original, list) and isinstance(drawn, list):
        return len(original) == len(drawn) and all(
            _same_param(o, d, mapping) for o, d in zip(original, drawn, strict=True)
        )
    if isinstance(original, bool) or original is None:
        return original == drawn
    if isinstance(original, (int, float)):
        return isinstance(drawn, (int, float)) and not isinstance(drawn, bool)
    if isinstance(original, str):
        if original in mapping.columns:
            return drawn == mapping.columns[original]
        if isinstance(drawn, str) and (value := _literal(original)) is not None:
            # A value the question's code holds as a Python literal (its repr): compare what it stands for.
            return _same_param(value, _literal(drawn), mapping)
        return drawn == original or any(mapping.category(c, original) == drawn for c in mapping.categories)
    return original == drawn


def _literal(text: str) -> object | None:
    """The value of a Python literal's text (a quoted string, a number), or None when it is none."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None


def variants_of(ctx: RunContext) -> dict[str, Task]:
    """Original task id -> its stored candidate variant under the current obscure settings."""
    key = settings_key(ctx)
    found = {}
    for task in ctx.store.iter_records(Task):
        if task.variant_of and task.status == "candidate" and task.id == variant_id(task.variant_of, key):
            found[task.variant_of] = task
    return found


def load_map(ctx: RunContext, variant: Task) -> ObscureMap:
    """The map a stored variant was built with (from its private `obscure.json`)."""
    return ObscureMap.model_validate(ctx.store.read_json(f"tasks/{variant.id}/private/{MAP_FILE}")["map"])


def obscure_tasks(ctx: RunContext, task_ids: Iterable[str] | None = None) -> StageReport:
    """Build the obscured variant of every candidate task (only `task_ids` when given); see the module doc.

    The report's outcomes: `variants` (every variant built or found), `rejected` (variant -> why) and `skipped`
    (original task -> why it has no variant); failures: original task -> why building its variant failed;
    counts: candidate variants per family; reused: variants found finished."""
    started = time.perf_counter()
    report = StageReport("obscure")
    key = settings_key(ctx)
    by_source: dict[str, list[Task]] = defaultdict(list)
    for task in originals(ctx, task_ids):
        family = family_of(task)
        if family.variant is None:
            report.add(
                "skipped", task.id, f"{family.name} tasks have no obscured variant ({family.no_variant})"
            )
            continue
        by_source[task.source_id].append(task)
    runners: Runners | None = None
    try:
        with ctx.progress() as progress:
            bar = progress.add_task("obscure", total=sum(map(len, by_source.values())), item="")
            for source_id, tasks in sorted(by_source.items()):
                # Variants are written under prepared/<source>/ and tasks/, and their partition is read, merged
                # and rewritten: one process at a time per source.
                with ctx.source_lock(source_id):
                    variants = []
                    todo = []
                    for task in tasks:
                        manifest = ctx.store.read_manifest(f"tasks/{variant_id(task.id, key)}")
                        if manifest is None:
                            todo.append(task)
                        else:
                            report.reused += 1
                            variants.append(Task.model_validate(manifest["task"]))
                            progress.advance(bar)
                    if todo:
                        runners = runners or Runners.start(
                            ctx.config.generate.reference_timeout_s,
                            ctx.config.generate.reference_ready_timeout_s,
                        )
                        variants += _build_source(ctx, source_id, todo, key, runners, report, progress, bar)
                    _record(ctx, source_id, variants, report)
    finally:
        if runners is not None:
            runners.close()
    report.seconds = time.perf_counter() - started
    rejected, skipped = report.outcomes.get("rejected", {}), report.outcomes.get("skipped", {})
    report.lines = [
        f"obscure: {len(report.labels('variants'))} variants ({dict(report.counts)}), {len(rejected)} rejected, "
        f"{len(report.failures)} failed, {report.reused} reused, {len(skipped)} skipped",
        *(f"  {key}: {why}" for key, why in sorted({**rejected, **report.failures, **skipped}.items())),
    ]
    return report


def _build_source(ctx, source_id, tasks, key, runners, report, progress, bar) -> list[Task]:
    versions = {p.version: p for p in load_prepared(ctx, source_id)}
    built = []
    for task in tasks:
        if task.prepared_version not in versions:
            report.add(
                "skipped",
                task.id,
                f"built from prepared version {task.prepared_version}, which is no longer the source's "
                "prepared data; run `dareforge generate` for its current tasks",
            )
            progress.advance(bar)
    for prepared in versions.values():
        current = [t for t in tasks if t.prepared_version == prepared.version]
        if current:
            built += _build_framing(ctx, prepared, current, key, runners, report, progress, bar)
    return built


def _build_framing(ctx, prepared, current, key, runners, report, progress, bar) -> list[Task]:
    built = []
    obscured, mapping = obscure_source(ctx, prepared, key, report.written)
    read: dict[str, object] = {}  # the obscured frames, read once for every task of the framing

    def maps(original: dict, drawn: dict) -> bool:
        return same_question(original, drawn, mapping)

    for task in current:
        progress.update(bar, item=task.id)
        writer = VariantWriter(ctx, obscured, report, task, mapping, key)
        build = Build(ctx, obscured, writer, runners, family_of(task), maps=maps, read=read)
        try:
            variant = build_variant(build, task)
        except (DareforgeError, ValueError, KeyError) as exc:
            report.failures[task.id] = str(exc)
            log.warning("%s: no obscured variant: %s", task.id, exc)
            variant = None
        if variant is not None:
            built.append(variant)
        progress.advance(bar)
    return built


def _record(ctx: RunContext, source_id: str, variants: list[Task], report: StageReport) -> None:
    for variant in variants:
        report.add("variants", variant.id)
        if variant.status == "rejected":
            report.add("rejected", variant.id, variant.reject_reason or "")
        else:
            report.counts[variant.family] += 1
    if not variants:
        return
    partition = f"{PARTITION_PREFIX}{source_id}"
    # Variants of tasks outside this run (other task ids, other settings) stay in the partition.
    stored = {t.id: t for t in ctx.store.read_partition(Task, partition)}
    stored.update({v.id: v for v in variants})
    if ctx.store.write_records(partition, sorted(stored.values(), key=lambda t: t.id)):
        report.written.append(ctx.store.table_key(Task.table, partition))
