"""`dareforge teach`: train the proxy on each corpus variant, evaluate base and tuned, record, write the card.

The torch parts run as children of `teach.python` (`.venv-teach`, built by `make teach`): `dareforge.teach.train`
(one LoRA run) and `dareforge.teach.serve` (the model behind an OpenAI-compatible endpoint). Everything else is
here and needs no torch. Evaluation is `dareforge.agents.evaluate` itself, given an endpoint for the served model
(protocol `tools`, the form the corpus trains), so base and tuned play the same tasks with the same sandbox,
limits and samples; the model id names the adapter's hash, so the request cache and trajectory ids never mix
two models. An adapter is stored under `teach/<export>/<version>/adapters/<variant>-<hash>/` (each file written
atomically, its manifest last); a later run with the same recipe and rows reuses it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import resource
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dareforge.agents.evaluate import EvaluationReport, evaluate, split_tasks
from dareforge.child_python import child_env, python_argv
from dareforge.config import EndpointConfig, TeachConfig
from dareforge.context import RunContext
from dareforge.exports.export_format import Export, load_export
from dareforge.hashing import short_hash
from dareforge.llm.local import FIND_PACKAGE, REPO_ROOT, ServerProcess
from dareforge.publish.files import write
from dareforge.publish.release import load_release
from dareforge.publish.versions import MANIFEST
from dareforge.teach import card, stats
from dareforge.teach.corpus import TeachError, check_disjoint, sample_tasks, train_rows

log = logging.getLogger(__name__)
ROOT = "teach"
EMBEDDED = "embedded"


@dataclass
class TeachReport:
    record_key: str
    record: dict[str, Any]
    lines: list[str] = field(default_factory=list)


def teach_python(cfg: TeachConfig) -> Path:
    python = Path(cfg.python)
    if not python.is_absolute() and not python.exists():
        python = REPO_ROOT / python
    if not python.exists():
        raise TeachError(f"the training runtime is not installed ({cfg.python} missing): run `make teach`")
    return python


def _child(python: Path, *args: str, timeout: float) -> str:
    """The child's stdout; never waited on past `timeout` (subprocess.run kills it there)."""
    try:
        done = subprocess.run(
            python_argv("-m", *args, python=python),
            capture_output=True,
            text=True,
            env=child_env(),
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        raise TeachError(
            f"`{' '.join(args[:2])}` in {python} ran past {timeout:.0f} s and was stopped: raise "
            "teach.train_timeout_s, or shorten the recipe (teach.steps, teach.max_length)"
        ) from e
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).splitlines()[-25:])
        raise TeachError(f"`{' '.join(args[:2])}` in {python} failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def model_source(cfg: TeachConfig, python: Path, llm_package: str, llm_file: str) -> str:
    """What `teach.model` names: the embedded GGUF file (found in the teach venv), else the path or Hub id."""
    if cfg.model != EMBEDDED:
        return cfg.model
    folder = subprocess.run(
        python_argv("-c", FIND_PACKAGE, llm_package, python=python, isolated=True),
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.strip()
    if not folder or not (Path(folder) / llm_file).is_file():
        raise TeachError(f"package {llm_package} ({llm_file}) is not installed in {python}: run `make teach`")
    return str(Path(folder) / llm_file)


def precision(cfg: TeachConfig, cpu_flags: str | None = None) -> str:
    """`teach.precision` resolved: `auto` is bfloat16 where the device computes it natively (CUDA, or a CPU
    whose /proc/cpuinfo flags name avx512_bf16 or amx_bf16), else float32 (emulated bf16 would be slower)."""
    if cfg.precision != "auto":
        return cfg.precision
    if cfg.device == "cuda":
        return "bfloat16"
    if cpu_flags is None:
        cpuinfo = Path("/proc/cpuinfo")
        cpu_flags = cpuinfo.read_text(errors="replace") if cpuinfo.is_file() else ""
    return "bfloat16" if {"avx512_bf16", "amx_bf16"} & set(cpu_flags.split()) else "float32"


def model_label(cfg: TeachConfig, llm_package: str, llm_file: str) -> str:
    """What the record, the card, the adapter's key and the served model's name call `teach.model`: for the
    embedded model its package and file, never where this machine installed it, so the same recipe keys the same
    adapter (and the card carries no host path) anywhere."""
    return f"{EMBEDDED}:{llm_package}/{llm_file}" if cfg.model == EMBEDDED else cfg.model


def recipe(cfg: TeachConfig, model: str) -> dict[str, Any]:
    keys = ("chat_template", "max_length", "steps", "batch_size", "grad_accumulation", "learning_rate")
    keys += ("lora_rank", "lora_alpha", "seed", "device")
    return {"model": model, **{k: getattr(cfg, k) for k in keys}, "precision": precision(cfg)}


def store_adapter(ctx: RunContext, key: str, folder: Path, result: dict[str, Any]) -> None:
    """Each adapter file written atomically, then the manifest (sha256 of each) last: it marks a finished one."""
    files = [write(ctx.store, f"{key}/{p.name}", p.name, p.read_bytes()) for p in sorted(folder.iterdir())]
    ctx.store.write_json(f"{key}/{MANIFEST}", {"files": files, "result": result})


def train_variant(
    ctx: RunContext, cfg: TeachConfig, python: Path, base: Path, export: Export, ids: list[str], key: str
) -> tuple[Path, dict[str, Any]]:
    """The adapter of `ids` (trained now, or found in the store) as a local folder, and the training result."""
    if not ctx.store.exists(f"{key}/{MANIFEST}"):
        work = ctx.scratch_dir("teach-train")
        try:
            spec = {
                **recipe(cfg, str(base)),
                "model_folder": str(base),
                "export_folder": ctx.store.path(export.prefix),
                "hf_cache": str(ctx.work_dir / "teach" / "hf"),
                "ids": ids,
                "threads": cfg.threads,
                "out_dir": str(work),
            }
            (work / "spec.json").write_text(json.dumps(spec))
            _child(python, "dareforge.teach.train", str(work / "spec.json"), timeout=cfg.train_timeout_s)
            result = json.loads((work / "result.json").read_text())
            store_adapter(ctx, key, work / "adapter", result)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return Path(ctx.store.path(key)), ctx.store.read_json(f"{key}/{MANIFEST}")["result"]


def served_evaluation(
    ctx: RunContext,
    cfg: TeachConfig,
    python: Path,
    base: Path,
    adapter: Path | None,
    name: str,
    model_id: str,
    release: tuple[str, str],
    task_ids: Sequence[str],
) -> EvaluationReport:
    """Serve the model, then `evaluate` it through an endpoint added to the config for this call only."""
    command = [
        "-m", "dareforge.teach.serve", "--model", str(base), "--name", model_id, "--port", str(cfg.port),
        "--template", cfg.chat_template, "--device", cfg.device, "--threads", str(cfg.threads),
        "--dtype", precision(cfg),
    ]  # fmt: skip
    if adapter is not None:
        command += ["--adapter", str(adapter)]
    server = ServerProcess(
        python_argv(*command, python=python),
        cfg.port,
        ctx.work_dir / "teach" / f"{name}.log",
        cfg.start_timeout_s,
    )
    endpoint = EndpointConfig(
        name=name, base_url=server.base_url, model=model_id, max_concurrency=1, timeout_s=1800.0, max_retries=1,
        protocol="tools",
    )  # fmt: skip
    llm = ctx.config.llm.model_copy(
        update={"endpoints": [*(e for e in ctx.config.llm.endpoints if e.name != name), endpoint]}
    )
    scoped = dataclasses.replace(ctx, config=ctx.config.model_copy(update={"llm": llm}))
    server.start()
    try:
        return evaluate(
            scoped, name, release[0], "test", cfg.samples, version=release[1], temperature=0.0,
            max_tokens=cfg.max_tokens, task_ids=task_ids,
        )  # fmt: skip
    finally:
        server.stop()


def teach(
    ctx: RunContext, release: str, version: str | None = None, cfg: TeachConfig | None = None
) -> TeachReport:
    """See the module doc. `cfg` defaults to the config's `teach` section."""
    started = time.monotonic()
    cfg = cfg or ctx.config.teach
    rel = load_release(ctx, release, version)
    export = load_export(ctx, f"{rel.name}-sft")
    made_from = export.manifest["release"]
    if (made_from["name"], made_from["version"]) != (rel.name, rel.version):
        raise TeachError(
            f"the latest export {export.name}@{export.version} was made from {made_from['name']}@"
            f"{made_from['version']}, not {rel.name}@{rel.version}: export it again (`dareforge export`)"
        )
    tasks = rel.tasks()
    by_id = {t.id: t for t in tasks}
    test = sample_tasks(split_tasks(rel, "test"), cfg.tasks_per_family, cfg.seed)
    rows = export.rows("tools", "train")
    corpora = {v: train_rows(rows, v, cfg.examples, cfg.seed) for v in cfg.variants}
    for chosen in corpora.values():
        check_disjoint(chosen, by_id, test)
    python = teach_python(cfg)
    llm = ctx.config.llm.local
    model = model_source(cfg, python, llm.model_package, llm.model_file)
    label = model_label(cfg, llm.model_package, llm.model_file)
    base = Path(
        _child(
            python,
            "dareforge.teach.train",
            "prepare",
            model,
            str(ctx.work_dir / "teach" / "models"),
            timeout=cfg.train_timeout_s,
        ).strip()
    )
    task_ids = [t.id for t in test]
    # The arithmetic is part of the model's name: bf16 and float32 answer differently, and the cache keys on it.
    base_id = f"{Path(model).stem}-{precision(cfg)}@{short_hash(label)}"
    rel_ref = (rel.name, rel.version)
    prefix = f"{ROOT}/{export.name}/{export.version}"
    # Every adapter is trained before anything is evaluated: a recipe that cannot train (teach.max_length too
    # short for the rows, say) stops in minutes, not after the base model's evaluation.
    digests = {
        v: short_hash(
            json.dumps({"recipe": recipe(cfg, label), "ids": [str(r["id"]) for r in chosen]}, sort_keys=True)
        )
        for v, chosen in corpora.items()
    }
    adapters: dict[str, tuple[str, Path, dict[str, Any]]] = {}  # digest -> store key, folder, training result
    for variant, chosen in corpora.items():
        digest = digests[variant]
        if chosen and digest not in adapters:
            key = f"{prefix}/adapters/{variant.replace('+', '-')}-{digest}"
            ids = [str(r["id"]) for r in chosen]
            adapters[digest] = (key, *train_variant(ctx, cfg, python, base, export, ids, key))
    before = served_evaluation(ctx, cfg, python, base, None, "teach-base", base_id, rel_ref, task_ids)
    before_tasks = stats.per_task(before.trajectories)
    variants: list[dict[str, Any]] = []
    evaluated: dict[str, dict[str, Any]] = {}  # digest -> the first variant's entry
    for variant, chosen in corpora.items():
        digest = digests[variant]
        if not chosen:
            variants.append(
                {"name": variant, "rows": 0, "note": "no training rows: not trained", "changes": []}
            )
            continue
        if digest in evaluated:
            same = evaluated[digest]
            variants.append(
                {**same, "name": variant, "note": f"the same rows as `{same['name']}`: its result"}
            )
            continue
        key, adapter, result = adapters[digest]
        after = served_evaluation(
            ctx, cfg, python, base, adapter, f"teach-{variant.replace('+', '-')}", f"{base_id}+lora-{digest}",
            rel_ref, task_ids,
        )  # fmt: skip
        changes = stats.compare(before_tasks, stats.per_task(after.trajectories), cfg.bootstrap, cfg.seed)
        kinds = sorted({str(r["source"]).partition(":")[0] for r in chosen})
        evaluated[digest] = {
            "name": variant, "rows": len(chosen), "note": f"kinds: {', '.join(kinds)}", "adapter": key,
            "training": result, "changes": [c.row() for c in changes],
        }  # fmt: skip
        variants.append(evaluated[digest])
    record = {
        "release": f"{rel.name}@{rel.version}",
        "export": f"{export.name}@{export.version}",
        "recipe": recipe(cfg, label),
        "evaluation": {
            "tasks": len(test),
            "sources": len({t.source_id for t in test}),
            "samples": cfg.samples,
            "max_tokens": cfg.max_tokens,
            "protocol": "tools",
            "task_ids": task_ids,
        },
        "variants": variants,
        "wall_s": round(time.monotonic() - started, 1),
        "peak_rss_mb": {
            "dareforge": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "largest_child": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1),
        },
    }
    record_key = f"{prefix}/{short_hash(json.dumps(record['recipe'], sort_keys=True))}.json"
    ctx.store.write_json(record_key, record)
    card.attach(export, card.section(record))
    lines = [card.verdict(variants) if any(v["changes"] for v in variants) else "nothing was trained"]
    return TeachReport(record_key, record, lines)
