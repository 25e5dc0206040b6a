"""The records every stage reads and writes, and their Arrow schemas (derived here, so each is defined once)."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import ClassVar, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, field_validator

from dareforge.arrow_types import arrow_schema_of


class Origin(StrEnum):
    KAGGLE_COMPETITION = "kaggle-competition"
    KAGGLE_DATASET = "kaggle-dataset"
    MIRROR = "mirror"
    BUILTIN = "builtin"


class SourceStatus(StrEnum):
    OK = "ok"
    NEEDS_RULES = "needs-rules"
    FAILED = "failed"


class Record(BaseModel):
    """A row of a store table; `table` names the table, `key_field` the column that partitions it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    table: ClassVar[str]

    @classmethod
    def arrow_schema(cls) -> pa.Schema:
        return arrow_schema_of(cls)


class SourceFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Path relative to the source's file root, with forward slashes.")
    size: int
    sha256: str
    encoding: str | None = Field(
        None,
        description="Text encoding of a table file; 'undecodable: ...' when not UTF-8 and unknown, "
        "'binary: ...' when it is no text at all.",
    )
    columns: list[str] | None = Field(None, description="Header of a CSV/TSV table.")
    rows: int | None = Field(None, description="Data lines of a text table (quoted line breaks count extra).")
    note: str | None = Field(
        None,
        description="A workbook or JSON document: the tables read from it, or why none was (see "
        "`crawlers.documents`).",
    )


class LeaderboardEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    team: str
    score: str = Field(description="As the competition reports it (text: metrics differ in form).")
    submitted: datetime | None = None


class Source(Record):
    table: ClassVar[str] = "sources"

    id: str = Field(description="Stable id: '<origin>.<slug>', safe as a path component.")
    origin: Origin
    kind: Literal["competition", "dataset"]
    ref: str = Field(description="The origin's own reference (Kaggle slug, owner/name, package:name).")
    title: str
    description: str = ""
    category: str | None = None
    url: str | None = None
    deadline: datetime | None = None
    last_updated: datetime | None = None
    evaluation_metric: str | None = None
    license: str | None = None
    total_bytes: int = 0
    files: list[SourceFile] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    team_count: int | None = None
    has_leaderboard: bool | None = None
    leaderboard: list[LeaderboardEntry] = Field(
        default_factory=list, description="Top public leaderboard rows."
    )
    accepts_submissions: bool | None = None
    n_rows: int | None = None
    target_columns: list[str] = Field(default_factory=list)
    id_column: str | None = None
    time_column: str | None = None
    entity_column: str | None = Field(None, description="Series key of a panel (one series per value).")
    task_hint: str | None = Field(None, description="classification, regression or time-series, when known.")
    origin_package: str | None = Field(None, description="For builtin sources: the package and version.")
    version: str = Field(
        description="Fingerprint of what defines the source's data; a change means re-download."
    )
    raw_version: str | None = Field(
        None, description="Version of the files held in the store (may lag on failure)."
    )
    status: SourceStatus = SourceStatus.OK
    status_detail: str | None = None
    rules_url: str | None = None

    @field_validator("deadline", "last_updated")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        # Kaggle sends naive UTC timestamps; Arrow columns are tz-aware, so make every value comparable.
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value

    @property
    def tables(self) -> list[SourceFile]:
        return [f for f in self.files if f.columns is not None]

    @property
    def public_url(self) -> str | None:
        """`url` when it is a web address, what released files may cite; None for a mirror's `file:` URL, a
        folder of the machine that crawled it."""
        return self.url if self.url and self.url.lower().startswith(("https://", "http://")) else None


class FilterDecision(Record):
    table: ClassVar[str] = "filter_decisions"

    source_id: str
    source_version: str
    rule: str
    kept: bool
    reason: str
    measured: str | None = None
    rules_fingerprint: str


class TaskType(StrEnum):
    CLASSIFICATION = "classification"
    REGRESSION = "regression"
    TIME_SERIES = "time-series"


class ColumnKind(StrEnum):
    NUMERIC = "numeric"
    CATEGORICAL = "categorical"
    DATETIME = "datetime"
    TEXT = "text"


class ColumnProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    dtype: str = Field(description="DuckDB's type for the column.")
    kind: ColumnKind
    missing_rate: float
    distinct: int
    min: str | None = Field(None, description="As text, so one field serves numbers and timestamps.")
    max: str | None = None
    mean: float | None = None
    std: float | None = None
    top_values: list[str] = Field(
        default_factory=list, description="Most frequent values (categorical only)."
    )


class TimeAxis(BaseModel):
    """How a framing's time column is made from the source's columns.

    native: a column DuckDB reads as dates or timestamps; text: a text column parsed with `format` (strptime);
    quarter: text such as 1959Q1 or Q1-1959; parts: year and month (or quarter) columns combined into a date;
    epoch: seconds (`format` "s") or milliseconds ("ms") since 1970; decimal-year: 1949.0833 for Feb 1949;
    year: integer years, kept as numbers; index: the source's own row order (a sequence column).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["native", "text", "quarter", "parts", "epoch", "decimal-year", "year", "index"]
    columns: list[str] = Field(description="The source columns the time is made from.")
    format: str | None = Field(None, description="strptime format (text) or unit (epoch: s or ms).")
    frequency: str | None = Field(None, description="hourly, daily, weekly, monthly, quarterly, yearly, ...")


class Framing(Record):
    """One way to pose a task on a source: its target, problem type and special columns, with the evidence for
    it and the data checks it passed or failed. A source may have several chosen framings (a label to classify
    and a series to forecast); prepared sources and tasks are keyed by framing."""

    table: ClassVar[str] = "framings"

    source_id: str
    source_version: str
    framing: str = Field(description="Id within the source, e.g. 'classification-species' or 'ts-co2'.")
    status: Literal["chosen", "rejected"]
    task_type: TaskType | None = Field(None, description="None for a source with no candidate at all.")
    target_columns: list[str]
    table_file: str | None = Field(None, description="The source file holding the rows.")
    id_column: str | None = None
    time_column: str | None = Field(None, description="The time column as prepared files name it.")
    time_axis: TimeAxis | None = None
    entity_column: str | None = Field(None, description="Series key of a panel (one series per value).")
    split: Literal["chronological"] | None = Field(
        None,
        description="How prepare must split a tabular framing: chronological when its rows are indexed by time "
        "(`time_column`), so that no date interpolates the answer; None: the usual random or stratified split.",
    )
    forecast_from_time: bool | None = Field(
        None,
        description="A series: whether a quick model forecasts it from its timestamps (and entity) alone better "
        "than every model-free forecast; TS-CF is posed only then (a random walk's CF task measures nothing).",
    )
    questions_only: bool = Field(
        False,
        description="No target passed its checks (noise labels, formulas): the table is prepared under the "
        "best-ranked such target for question tasks (QA, Lake) only, which need no learnable target.",
    )
    known_columns: list[str] = Field(
        default_factory=list, description="Time series: columns known in the forecast window (XF features)."
    )
    excluded_columns: list[str] = Field(
        default_factory=list, description="Columns left out of features: ids, free text, constant, leaks."
    )
    dropped_columns: list[str] = Field(
        default_factory=list,
        description="Columns removed from the prepared files altogether: they give the target away alone, or "
        "number the rows in file order (which may follow the target).",
    )
    confidence: float = Field(description="0..1: how strongly the evidence points at this framing.")
    proposers: list[str] = Field(
        description="Who proposed it: config, source, description, title, tags, name (what the column's name "
        "says), data, model."
    )
    evidence: list[str] = Field(description="Each piece of evidence, as a sentence.")
    checks: list[str] = Field(default_factory=list, description="Data checks run, with what they measured.")
    reason: str = Field(description="Why it was chosen, or why it lost.")
    understand_version: str


class PreparedSource(Record):
    """A framing of a source profiled and split: public train, public test features, private answers."""

    table: ClassVar[str] = "prepared"

    source_id: str
    source_version: str
    framing: str = Field(
        "",
        description="The framing (see `framings`) this preparation poses; empty in records from before framings.",
    )
    questions_only: bool = Field(False, description="Question tasks only (see `Framing.questions_only`).")
    forecast_from_time: bool | None = Field(None, description="See `Framing.forecast_from_time`.")
    excluded_columns: list[str] = Field(
        default_factory=list, description="Columns no feature list may use (the framing's exclusions)."
    )
    version: str = Field(description="Fingerprint of the source version and prepare config.")
    task_type: TaskType
    target_columns: list[str]
    id_column: str = Field(description="Unique row key; `row_id` when the source has none.")
    time_column: str | None = None
    entity_column: str | None = None
    group_column: str | None = None
    columns: list[ColumnProfile]
    n_rows: int
    n_train: int
    n_test: int
    split: Literal["stratified", "chronological", "grouped", "random"]
    seed: int
    files: list[SourceFile] = Field(description="train.csv, test.csv (no target), answers.csv (id + target).")


class PrepareFailure(Record):
    """Why the last `prepare` of a source failed; removed once the source prepares. Generate reports it."""

    table: ClassVar[str] = "prepare_failures"

    source_id: str
    source_version: str
    reason: str = Field(description="What failed and the fix, as the prepare stage reported it.")


AnswerType = Literal[
    "string_exact",
    "string_approximate",
    "numeric_exact",
    "numeric_approximate",
    "list_exact",
    "list_approximate",
    "boolean",
]
"""KramaBench's answer types (its own spelling, so its evaluator reads ours), plus boolean."""

ANSWER_METRIC = "answer"
"""The metric name of a question task: one typed answer in `answer.json`, graded by its type."""


class MetricSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(
        description="exact-match, allclose, macro-f1, clipped-r2, a competition metric, or `answer` (questions)."
    )
    target_columns: list[str] = Field(description="Prediction columns graded; empty for an `answer` metric.")
    key_columns: list[str] = Field(
        description="Columns that identify a prediction row (id; time+entity for CF); empty for `answer`."
    )
    tolerance: float | None = Field(None, description="Relative tolerance of allclose.")
    k: int | None = Field(None, description="For MAP@k.")
    scale: list[float] | None = Field(
        None,
        description="forecast-skill: per target (in `target_columns` order), the best model-free forecast's MAE "
        "on the test rows, the unit the score is measured in (see `reference_solutions.forecast`).",
    )
    answer_type: AnswerType | None = Field(None, description="How an `answer` metric grades the value.")
    decimals: int | None = Field(
        None, description="`answer`: the decimals the question asks to round a number to (None: not rounded)."
    )
    unit: str | None = Field(
        None,
        description="`answer`: the unit the question states (e.g. '%'); a number may carry it as a suffix.",
    )


Difficulty = Literal["easy", "medium", "hard"]
"""A question's tier, from the operations its certified program needs (see `generators.questions.tiers`)."""


class SubTask(BaseModel):
    """A key step of a question task's pipeline, asked as its own question with its own certified answer
    (KramaBench's sub-tasks); its answer lives in the task's private `subtask-<id>.json`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(description="Short id within the task, e.g. 's1'.")
    question: str
    metric: MetricSpec


class TaskLimits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    turns: int = 5
    seconds_per_execution: int = 200


class TaskScores(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    MEASURED: ClassVar[frozenset[str]] = frozenset({"reference_seconds"})
    """Fields that measure the machine that ran the references, not the task: the store keeps them (the
    runtime check reads them), a release leaves them out (its bytes are a function of its inputs)."""

    baseline: float | None = Field(
        None,
        description="Best trivial predictor: majority class or classes at their shares; mean (per entity).",
    )
    strong: float | None = Field(None, description="A strong default model (gradient boosting).")
    reference_seconds: float | None = Field(
        None, description="CPU seconds of the reference runs (fit+predict)."
    )


class Task(Record):
    """A generated task: the public part an agent sees, and where its private part lives."""

    table: ClassVar[str] = "tasks"

    id: str = Field(description="Hash of source version, spec and seed: stable across identical refreshes.")
    family: str = Field(description="A registered family's name (`dareforge.families.registry`).")
    source_id: str
    source_version: str
    framing: str = Field(
        "", description="The framing of the source the task poses (see `framings`); empty before framings."
    )
    prepared_version: str
    generator_version: str
    seed: int
    instruction: str
    public_files: list[SourceFile] = Field(description="Under tasks/<id>/public/.")
    private_files: list[SourceFile] = Field(
        description="Under tasks/<id>/private/: answers, reference outputs."
    )
    metric: MetricSpec
    limits: TaskLimits = Field(default_factory=TaskLimits)
    scores: TaskScores = Field(default_factory=TaskScores)
    pass_bar: float | None = Field(
        None,
        description="Goal tasks whose strong reference scores below the family's pass bar: the task's own bar, "
        "the score an attempt must reach (its instruction states it; every grader honours it). None: the "
        "family's bar (`families.registry.bar_of`).",
    )
    spec: str | None = Field(
        None,
        description="The sampled IF workflow spec, or a question task's program and parameters, as JSON.",
    )
    subtasks: list[SubTask] = Field(
        default_factory=list, description="Question tasks: the key steps, each with its own certified answer."
    )
    difficulty: Difficulty | None = Field(
        None,
        description="Question tasks: easy (one operation, or what a one-step shortcut answers), medium (two), "
        "hard (three or more, or a join across files). Prediction tasks: None (their ladder places them).",
    )
    operations: list[str] = Field(
        default_factory=list,
        description="Question tasks: the operations the reference program performs, in order.",
    )
    package_versions: list[str] = Field(description="'name==version' of the stack that made the reference.")
    status: Literal["candidate", "rejected"] = "candidate"
    reject_reason: str | None = None
    variant_of: str | None = Field(
        None,
        description="For an obscured variant (renamed, rescaled, re-keyed data): the original task's id.",
    )


class Validation(Record):
    """One check's finding about one task: a score or flag with its reason. The gate applies thresholds later."""

    table: ClassVar[str] = "validations"

    task_id: str
    source_id: str
    check: str
    score: float | None = Field(None, description="What the threshold applies to (see the check's doc).")
    flagged: bool = Field(False, description="A defect the check found regardless of thresholds.")
    reason: str
    details: str | None = Field(None, description="JSON with what was measured, for auditors.")
    checks_version: str


class Verdict(Record):
    """The gate's decision for a task under the thresholds in force when it ran."""

    table: ClassVar[str] = "verdicts"

    task_id: str
    source_id: str
    family: str
    accepted: bool
    reasons: list[str]
    thresholds_fingerprint: str


class ToolCall(BaseModel):
    """One tool call of a model reply, as the endpoint sent it: `arguments` is the raw text, parsed or not."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str
    arguments: str


class Step(BaseModel):
    """One message of a trajectory; an assistant turn may carry code, and its execution the output.

    Roles: `system`, `user` and `assistant` are messages as the model saw them; `tool` is the answer to one tool
    call (`tool_call_id`) under the tools protocol; `execution` is a kernel run, recorded but never sent.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant", "execution", "tool"]
    content: str
    code: str | None = None
    error: str | None = None
    seconds: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list, description="An assistant reply's tool calls.")
    tool_call_id: str | None = Field(None, description="The call a `tool` message answers.")
    drift: str | None = Field(
        None, description="How an assistant reply strayed from the protocol and was still read (tags)."
    )


Outcome = Literal[
    "graded",
    "instruction-non-adherence",
    "code-error",
    "execution-limit",
    "turn-limit",
    "format-error",
    "no-code",
    "llm-error",
]
"""How an agent's attempt ended; the failure categories of DARE-bench's tables, plus `no-code` (no reply held
code to run in any form the protocol reads, nor a tool call that tried to, and no valid predictions were
written), told apart from `format-error` (the model drifted from the protocol: code ran, or was tried in an
unreadable tool call, but the last reply could not be read, or the predictions file is missing or ill-formed).
See `dareforge.agents.loop.classify`."""

ProtocolName = Literal["tags", "tools"]
"""How an agent talks to its model: tags in the reply text, or the chat API's native tool calls."""


class Trajectory(Record):
    """An agent's attempt at a task: every message, code cell, output and timing, and how it was graded."""

    table: ClassVar[str] = "trajectories"

    id: str = Field(description="Hash of task, endpoint, model, sampling parameters and sample index.")
    task_id: str
    family: str
    endpoint: str
    model: str
    sample: int = 0
    temperature: float = 0.0
    protocol: ProtocolName = "tags"
    steps: list[Step]
    files: list[SourceFile] = Field(
        default_factory=list, description="Files the agent left in its workspace."
    )
    outcome: Outcome
    score: float | None = None
    passed: bool | None = None
    detail: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


class ProbeResult(Record):
    """One model's attempt at a task in a probe: without its data (shortcut), or on the original or obscured
    data (memorization). The agent's full trajectory is stored under `trajectory_id`."""

    table: ClassVar[str] = "probes"

    task_id: str
    source_id: str
    family: str
    probe: Literal["no-data", "original", "obscured"]
    endpoint: str
    model: str
    sample: int
    trajectory_id: str
    outcome: Outcome
    score: float | None = None
    passed: bool = False
    probe_version: str


class Judgement(Record):
    """An LLM judge's scores of one trajectory on the six criteria of the DSGym paper (1 worst to 5 best)."""

    table: ClassVar[str] = "judgements"

    trajectory_id: str
    task_id: str
    judge_endpoint: str
    judge_model: str
    status: Literal["scored", "malformed", "llm-error"]
    query_clarity: float | None = Field(None, description="Query clarity and feasibility.")
    educational_value: float | None = None
    exploratory_competence: float | None = None
    execution_robustness: float | None = None
    task_alignment: float | None = None
    answer_plausibility: float | None = None
    overall: float | None = Field(None, description="Mean of the six criteria.")
    rationale: str = ""
    attempts: int = Field(1, description="Judge calls made (malformed replies are retried).")
    detail: str | None = Field(None, description="Why the judgement is malformed or failed.")
    judge_version: str


ReviewDecision = Literal["accepted", "rejected", "needs-fix"]


class Review(Record):  # a person's decision about a task as they saw it: see `dareforge.reviews`
    table: ClassVar[str] = "reviews"

    id: str = Field(description="Hash of task, reviewer, time, decision and note: one partition per review.")
    task_id: str
    release: str | None = Field(None, description="NAME@VERSION the reviewer looked at, when known.")
    task_fingerprint: str = Field(description="`reviews.task_fingerprint` of the task when it was reviewed.")
    reviewer: str
    decision: ReviewDecision
    note: str = ""
    at: datetime = Field(description="When the review was recorded (UTC).")


RECORDS: dict[str, type[Record]] = {
    cls.table: cls
    for cls in (
        Source,
        FilterDecision,
        Framing,
        PreparedSource,
        PrepareFailure,
        Task,
        Validation,
        Verdict,
        Trajectory,
        ProbeResult,
        Judgement,
        Review,
    )
}
