"""Lake tasks: a question over a folder of files, KramaBench-style, with sub-tasks.

The folder holds the files the answer needs, the source's training rows either split into parts (rows in
several files) or into two tables joined on the source's key, next to distractors: other sources' files and
a near-duplicate of one of them. The needed files carry controlled mess a careful analyst handles: a second
header row, "N/A" and "-" for missing cells, thousands separators, a column given in thousands with the unit in
its header, dates in mixed formats; in a joined lake, the second table's key under another name, or with a
prefix on every value, or both. Mess is applied to the public copy only, cell by cell on the text, and
`cleaning.py` (recorded privately) undoes it exactly: the reference answers from the clean files, and again
from the public files after the cleaning step, and both must agree.

Sub-tasks (the key steps of any correct pipeline, each with its own certified answer): which files hold the
data; the join key or the combined row count; a step the mess makes necessary (missing values once every
marker counts, a total over separated thousands, a maximum in the original unit, the earliest date, a file's
row count below its second header); then the question's own sub-questions when it is a pipeline.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd

from dareforge.context import RunContext
from dareforge.generators.prepare import load_prepared, prepared_file
from dareforge.generators.questions.build import Posed, subtask, subtasks_of
from dareforge.generators.questions.programs import PROGRAMS
from dareforge.generators.questions.question import Question, SubQuestion, Table, pick
from dareforge.generators.questions.scripts import Step
from dareforge.generators.questions.table_questions import answer_lines, program_order, seeded
from dareforge.generators.rawtable import is_missing_marker
from dareforge.generators.taskio import Draft
from dareforge.schema import PreparedSource, SubTask

MAX_LAKE_ROWS = 2000
MAX_DISTRACTOR_ROWS = 200
DISTRACTORS = 2
PARTS = (2, 3)
NEAR_DUPLICATE_DROP = 0.1
WRITTEN_MARKERS = ("N/A", "-")
"""How the mess writes an empty cell (each a `MISSING_MARKERS` entry, so any question reads it as missing)."""
KEY_PREFIX = "K-"
"""Written before every key of a joined lake's second table when its keys differ in form from the first's."""
DATE_FORMATS = ("%Y-%m-%d", "%d %b %Y", "%b %d, %Y")
SCALE_SUFFIX = " (thousands)"
LAKE_EXCLUDED_PROGRAMS = frozenset({"missing-audit"})
"""Programs not asked over a lake: "which columns miss values, in file order" has no one file order there."""
_PLAIN_NUMBER = re.compile(r"^(-?)(\d+)(\.\d*)?$")
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def slug(source_id: str) -> str:
    """A file stem for a source: its id without the origin, in lower case with underscores."""
    name = source_id.split(".", 1)[-1].lower()
    return re.sub(r"[^a-z0-9]+", "_", name).strip("_") or "data"


@dataclass
class Mess:
    """The mess of one needed file (column names as in the clean file)."""

    second_header: bool = False
    missing: list[str] = field(default_factory=list)
    thousands: list[str] = field(default_factory=list)
    scaled: list[str] = field(default_factory=list)
    dates: list[str] = field(default_factory=list)
    key: str | None = None
    """The join key, on the file whose key is written differently from the other's (`key_alias`, `key_prefix`)."""
    key_alias: str | None = None
    key_prefix: str | None = None

    def kinds(self) -> list[str]:
        return [
            k
            for k, on in (
                ("second-header", self.second_header),
                ("missing-markers", self.missing),
                ("thousands-separators", self.thousands),
                ("unit-in-header", self.scaled),
                ("mixed-dates", self.dates),
                ("renamed-key", self.key_alias),
                ("prefixed-key", self.key_prefix),
            )
            if on
        ]


@dataclass
class LakePlan:
    """Every seeded choice of one lake, made before anything is written (its spec defines the task id)."""

    question: Question
    layout: str  # "parts" | "join"
    needed: dict[str, list[str]]  # file -> its clean columns
    rows: dict[str, list[int]]  # file -> positions of the text table's rows it holds, in order
    key: str | None
    mess: dict[str, Mess]
    distractors: list[tuple[str, PreparedSource]]  # file name -> the other framing it copies
    near_duplicate: tuple[str, str] | None  # (copy's name, the distractor it copies)


class DistractorPool(Sequence[PreparedSource]):
    """The prepared framings of every framed source but one, sorted by source id, each read from the store when
    drawn as a distractor. Reading them all up front made every generate call (one per source under Airflow)
    cost O(sources): 0.46 s of a call's 1.9 s at 164 sources, ~6 s at 2,260."""

    def __init__(self, ctx: RunContext, framings: dict[str, int], exclude: str):
        self._ctx = ctx
        self._at = [(s, n) for s in sorted(framings) if s != exclude for n in range(framings[s])]

    @staticmethod
    def framings(ctx: RunContext, source_ids: list[str]) -> dict[str, int]:
        """Prepared framings per source, for the sources given (one query, not one read per source)."""
        wanted = set(source_ids)
        rows = (
            ctx.store.connect().sql("select source_id, count(*) from prepared group by source_id").fetchall()
        )
        return {source_id: count for source_id, count in rows if source_id in wanted}

    def __len__(self) -> int:
        return len(self._at)

    def __getitem__(self, index):  # type: ignore[override]  # ints only: draws are single indices
        source_id, n = self._at[index]
        return load_prepared(self._ctx, source_id)[n]


def lake_questions(
    ctx: RunContext, prepared: PreparedSource, pool: Sequence[PreparedSource], title: str
) -> Iterator[tuple[Posed, Callable[[Draft], Path]]]:
    """The candidate lakes on a framing's training rows, in the order a builder poses them: each a posed
    question and the step that lays out its folder in a draft. Choices are seeded by the framing and the
    attempt's number, so a re-run draws the same lakes."""
    cfg = ctx.config.generate
    text = _text_table(prepared_file(ctx, prepared, "train.csv"))
    base = seeded(cfg.seed, prepared.source_id, prepared.framing, "lake")
    if len(text) > MAX_LAKE_ROWS:
        keep = np.sort(base.choice(len(text), MAX_LAKE_ROWS, replace=False))
        text = text.iloc[keep].reset_index(drop=True)
    frame = _typed(text)
    table = Table.of(frame, prepared)
    order = program_order(base, LAKE_EXCLUDED_PROGRAMS)
    for attempt in range(cfg.lakes_per_source * cfg.question_attempts):
        rng = seeded(cfg.seed, prepared.source_id, prepared.framing, "lake", attempt)
        question = PROGRAMS[order[attempt % len(order)]].draw(table, rng)
        if question is None:
            continue
        plan = _plan(prepared, text, frame, question, pool, rng)

        def stage(draft: Draft, plan: LakePlan = plan) -> Path:
            return _materialize(ctx, plan, text, draft)

        yield _posed(plan, prepared, title), stage


# --- planning ------------------------------------------------------------------------------------------


def _text_table(path: Path) -> pd.DataFrame:
    """A CSV with every cell as its exact text ("" for an empty cell): mess and cleaning work on text."""
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def _typed(text: pd.DataFrame) -> pd.DataFrame:
    """The text table as pandas would read it from a file (for choosing questions)."""
    buffer = io.StringIO()
    text.to_csv(buffer, index=False)
    buffer.seek(0)
    return pd.read_csv(buffer)


def _plan(
    prepared: PreparedSource,
    text: pd.DataFrame,
    frame: pd.DataFrame,
    question: Question,
    pool: Sequence[PreparedSource],
    rng: np.random.Generator,
) -> LakePlan:
    stem = slug(prepared.source_id)
    columns = list(text.columns)
    key = prepared.id_column if prepared.id_column in columns else None
    others = [c for c in columns if c != key]
    if key and len(others) >= 3 and rng.random() < 0.5:
        layout = "join"
        used = [c for c in question.columns if c in others]
        rest = [others[i] for i in rng.permutation(len(others)) if others[i] not in used]
        # The question's columns span both tables when it reads two or more, so the join is needed.
        first = used[:1] + rest[: len(rest) // 2]
        second = used[1:] + rest[len(rest) // 2 :]
        if not second:
            second, first = first[-1:], first[:-1]
        main, details = f"{stem}_main.csv", f"{stem}_details.csv"
        needed = {
            main: [key, *[c for c in others if c in first]],
            details: [key, *[c for c in others if c in second]],
        }
        positions = list(range(len(text)))
        rows = {main: positions, details: [positions[i] for i in rng.permutation(len(positions))]}
    else:
        layout, key = "parts", None
        count = int(rng.choice(PARTS))
        bounds = np.linspace(0, len(text), count + 1).round().astype(int)
        needed = {f"{stem}_part{i + 1}.csv": columns for i in range(count)}
        rows = {name: list(range(bounds[i], bounds[i + 1])) for i, name in enumerate(sorted(needed))}
    # Years and category codes are numbers nobody writes with separators or in thousands.
    coded = Table.of(frame, prepared)
    codes = {*coded.years, *coded.categorical}
    mess = {
        name: _choose_mess(text.iloc[rows[name]][cols], frame.iloc[rows[name]][cols], key, codes, rng)
        for name, cols in sorted(needed.items())
    }
    if layout == "join":
        _differ_key(mess[details], key, {*needed[main], *needed[details]}, rng)
    chosen = [pool[i] for i in rng.permutation(len(pool))[:DISTRACTORS]] if pool else []
    distractors = []
    for other in chosen:
        name = f"{slug(other.source_id)}.csv"
        if name not in needed and name not in dict(distractors):
            distractors.append((name, other))
    near = None
    if distractors:
        original = distractors[0][0]
        near = (original.replace(".csv", "_old.csv"), original)
    return LakePlan(question, layout, needed, rows, key, mess, distractors, near)


def _differ_key(mess: Mess, key: str, taken: set[str], rng: np.random.Generator) -> None:
    """The second table's key under another name, with a prefix on every value, or both: a join on the
    shared name, or on the values as written, then finds nothing."""
    style = int(rng.integers(3))  # 0: renamed, 1: prefixed, 2: both
    mess.key = key
    if style != 1:
        aliases = [a for a in (f"{key}_ref", f"ref_{key}", key.upper(), key.title()) if a not in taken]
        mess.key_alias = pick(rng, aliases) if aliases else None
    if style != 0 or mess.key_alias is None:
        mess.key_prefix = KEY_PREFIX


def _choose_mess(
    text: pd.DataFrame, frame: pd.DataFrame, key: str | None, codes: set[str], rng: np.random.Generator
) -> Mess:
    """Two or three kinds of mess among those the file's own cells allow (a second header always can). The
    key is never touched; `codes` (years, category codes) are numbers never rewritten as amounts."""
    columns = list(text.columns)
    candidates: dict[str, list[str]] = {"second-header": ["*"]}
    numeric = [c for c in columns if c != key and c not in codes and pd.api.types.is_numeric_dtype(frame[c])]
    large = [c for c in numeric if (frame[c].abs() >= 1000).any()]
    plain = [c for c in large if text[c].map(lambda t: t == "" or bool(_PLAIN_NUMBER.match(t))).all()]
    missing = [
        # A column with markers of its own (`Unknown`) would mix them with the written ones.
        c
        for c in columns
        if c != key and (text[c] == "").any() and not (is_missing_marker(text[c]) & (text[c] != "")).any()
    ]
    dates = [
        c for c in columns if c != key and text[c].map(lambda t: t == "" or bool(_ISO_DATE.match(t))).all()
    ]
    dates = [c for c in dates if (text[c] != "").any() and c not in numeric]
    if missing:
        candidates["missing-markers"] = missing
    if plain:
        candidates["thousands-separators"] = plain
    if large:
        candidates["unit-in-header"] = large
    if dates:
        candidates["mixed-dates"] = dates
    kinds = sorted(candidates)
    picked = [kinds[i] for i in rng.permutation(len(kinds))[: int(rng.integers(2, 4))]]
    mess = Mess(second_header="second-header" in picked)
    taken: set[str] = set()
    for kind, target in (
        ("missing-markers", mess.missing),
        ("thousands-separators", mess.thousands),
        ("unit-in-header", mess.scaled),
        ("mixed-dates", mess.dates),
    ):
        if kind in picked:
            free = [c for c in candidates[kind] if c not in taken]
            if free:
                column = free[int(rng.integers(len(free)))]
                target.append(column)
                taken.add(column)
    return mess


# --- the question, its sub-tasks and its cleaning step --------------------------------------------------


def _load_code(plan: LakePlan) -> str:
    names = sorted(plan.needed)
    if plan.layout == "join":
        main_name = next(n for n in names if n.endswith("_main.csv"))
        details_name = next(n for n in names if n.endswith("_details.csv"))
        return (
            f"df = pd.read_csv({main_name!r}).merge(pd.read_csv({details_name!r}), on={plan.key!r}, "
            'how="inner", validate="one_to_one")'
        )
    return f"df = pd.concat([pd.read_csv(name) for name in {names!r}], ignore_index=True)"


def _needed_files(plan: LakePlan) -> list[str]:
    if plan.layout == "parts":
        return sorted(plan.needed)
    used = set(plan.question.columns)
    files = [name for name, cols in plan.needed.items() if used & set(cols[1:])]
    return sorted(files if files else plan.needed)


def _sub(
    sub_id: str, text: str, step: Step, note: str | None = None, answer_in_data: bool = False
) -> tuple[SubTask, Step]:
    return subtask(sub_id, SubQuestion(text, step, answer_in_data, note))


def _subtasks(plan: LakePlan, title: str) -> list[tuple[SubTask, Step]]:
    files = _needed_files(plan)
    subs = [
        _sub(
            "s1",
            f'Which files hold the data of "{title}" that the question needs? List the file names.',
            Step(f"answer = {files!r}", "list_exact"),
            note="a JSON list of file names, in any order",
        )
    ]
    names = sorted(plan.needed)
    if plan.layout == "join":
        first, second = names
        renamed = any(plan.mess[name].key_alias for name in names)
        ask = (
            f"Which column of `{first}` holds the key to join `{second}` on (`{second}` holds the same keys, "
            "under another name)?"
            if renamed
            else f"Which column do `{first}` and `{second}` share, the key to join them on?"
        )
        subs.append(_sub("s2", ask, join_key_step(first, second), note="a JSON string: the column's name"))
    else:
        subs.append(
            _sub(
                "s2",
                f"How many data rows do the files {', '.join(f'`{n}`' for n in names)} hold together, not "
                "counting header lines?",
                Step("answer = len(df)", "numeric_exact"),
            )
        )
    if step := _mess_subtask(plan):
        subs.append(step)
    return subs + subtasks_of(plan.question, first=len(subs) + 1)


def join_key_step(first: str, second: str) -> Step:
    """The join key of two files: the first column of `first` that `second` has too. Each header is read once:
    read in the list's condition, `second`'s was read again for every column of `first`, 9.7 CPU-s a run on a
    lake of 377 columns."""
    return Step(
        f"second_columns = set(pd.read_csv({second!r}, nrows=0).columns)\n"
        f"shared = [c for c in pd.read_csv({first!r}, nrows=0).columns if c in second_columns]\n"
        "answer = shared[0]",
        "string_exact",
    )


def _mess_subtask(plan: LakePlan) -> tuple[SubTask, Step] | None:
    """A sub-question only a correct cleaning answers, for the first mess (by file name) that has one."""
    for name in sorted(plan.mess):
        mess = plan.mess[name]
        if mess.missing:
            c = mess.missing[0]
            return _sub(
                "s3",
                f"How many values of `{c}` are missing in the data, whatever marker a file uses for a missing "
                "value?",
                Step(f"answer = int(df[{c!r}].isna().sum())", "numeric_exact"),
            )
        if mess.thousands:
            c = mess.thousands[0]
            return _sub(
                "s3",
                f"What is the sum of `{c}` over all rows of the data, ignoring missing values? Round to 2 "
                "decimal places.",
                Step(f"answer = df[{c!r}].sum()", "numeric_approximate", 2),
            )
        if mess.scaled:
            c = mess.scaled[0]
            return _sub(
                "s3",
                f"What is the largest `{c}` in the data, in the unit of `{c}` itself (not in thousands)?",
                Step(f"answer = df[{c!r}].max()", "numeric_exact"),
                answer_in_data=True,
            )
        if mess.dates:
            c = mess.dates[0]
            return _sub(
                "s3",
                f"What is the earliest `{c}` in the data?",
                Step(f'answer = pd.to_datetime(df[{c!r}]).min().strftime("%Y-%m-%d")', "string_exact"),
                note="a JSON string: the date written YYYY-MM-DD",
            )
        if mess.second_header:
            return _sub(
                "s3",
                f"How many data rows does `{name}` hold, not counting its header lines?",
                Step(f"answer = len(pd.read_csv({name!r}))", "numeric_exact"),
            )
    return None


CLEANING_HEADER = f'''\
"""Undo the mess of the needed files, in place: the reference then reads them as clean tables."""
import os
from datetime import datetime
from decimal import Decimal

import pandas as pd

DATE_FORMATS = {list(DATE_FORMATS)!r}
MISSING_MARKERS = {{marker: "" for marker in {list(WRITTEN_MARKERS)!r}}}


def iso_date(text):
    if text == "":
        return text
    for fmt in DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt).strftime("%Y-%m-%d")
        except ValueError:
            pass
    raise ValueError(f"no known date format fits {{text!r}}")


def clean(name, header_lines=1, missing=(), thousands=(), scaled=(), dates=(), key=None, alias=None, prefix=None):
    table = pd.read_csv(name, dtype=str, keep_default_na=False, skiprows=range(1, header_lines))
    if alias:
        table = table.rename(columns={{alias: key}})
    if prefix:
        table[key] = table[key].str.removeprefix(prefix)
    for column in missing:
        table[column] = table[column].replace(MISSING_MARKERS)
    for column in thousands:
        table[column] = table[column].str.replace(",", "", regex=False)
    for column in scaled:
        given = column + {SCALE_SUFFIX!r}
        table[given] = [format(Decimal(v).scaleb(3), "f") if v else v for v in table[given]]
        table = table.rename(columns={{given: column}})
    for column in dates:
        table[column] = table[column].map(iso_date)
    # The inputs may be read-only links (an agent's sandbox): replace the link, never write through it.
    os.remove(name)
    table.to_csv(name, index=False)
'''


def _cleaning_code(plan: LakePlan) -> str:
    calls = []
    for name in sorted(plan.needed):
        mess = plan.mess[name]
        args = [repr(name)]
        if mess.second_header:
            args.append("header_lines=2")
        for attr in ("missing", "thousands", "scaled", "dates"):
            if getattr(mess, attr):
                args.append(f"{attr}={getattr(mess, attr)!r}")
        if mess.key_alias or mess.key_prefix:
            args.append(f"key={mess.key!r}, alias={mess.key_alias!r}, prefix={mess.key_prefix!r}")
        calls.append(f"clean({', '.join(args)})")
    return CLEANING_HEADER + "\n\n" + "\n".join(calls) + "\n"


def lake_instruction(plan: LakePlan, question: Question, title: str) -> str:
    files = len(plan.needed) + len(plan.distractors) + (plan.near_duplicate is not None)
    return "\n".join(
        [
            f"The working directory holds a small data lake of {files} CSV files. Some are unrelated to the "
            "question; the data it needs may be split over several files or need a join, and may be untidy "
            "(how missing values, numbers, units, dates, headers and keys are written): clean what you use.",
            "",
            f'The question is about the data of "{title}".',
            *answer_lines(question),
        ]
    )


def _posed(plan: LakePlan, prepared: PreparedSource, title: str) -> Posed:
    q = plan.question
    spec = {
        "kind": "lake",
        "program": q.program,
        "params": q.params,
        "answer_in_data": q.answer_in_data,
        "layout": plan.layout,
        "files": {name: plan.mess[name].kinds() for name in sorted(plan.needed)},
        "rows": {name: len(rows) for name, rows in sorted(plan.rows.items())},
        "distractors": {name: [o.source_id, o.framing, o.version] for name, o in plan.distractors},
        "near_duplicate": list(plan.near_duplicate) if plan.near_duplicate else None,
        "mess": {name: {k: v for k, v in vars(plan.mess[name]).items() if v} for name in sorted(plan.needed)},
    }
    return Posed(
        question=q,
        load=_load_code(plan),
        instruction=lake_instruction(plan, q, title),
        spec=spec,
        subtasks=_subtasks(plan, title),
        cleaning=_cleaning_code(plan),
        # The files become one table (parts combined, or two tables joined), cleaned, then the question's own.
        operations=[
            "join" if plan.layout == "join" else "combine",
            "clean",
            *PROGRAMS[q.program].operations,
        ],
        joins_files=plan.layout == "join",
    )


# --- writing the files ----------------------------------------------------------------------------------


def _grouped(text: str) -> str:
    match = _PLAIN_NUMBER.match(text)
    if not match:
        return text
    sign, digits, fraction = match.group(1), match.group(2), match.group(3) or ""
    return f"{sign}{int(digits):,}{fraction}" if len(digits) <= 18 else text


def _scaled(text: str) -> str:
    return format(Decimal(text).scaleb(-3), "f") if text else text


def _messy(table: pd.DataFrame, mess: Mess, rng: np.random.Generator) -> str:
    """The public text of one needed file: the clean text table with its mess applied, as CSV."""
    out = table.copy()
    for column in mess.missing:
        empty = out[column] == ""
        markers = rng.choice(WRITTEN_MARKERS, size=int(empty.sum()))
        out.loc[empty, column] = markers
    for column in mess.thousands:
        out[column] = out[column].map(_grouped)
    for column in mess.dates:
        formats = rng.choice(len(DATE_FORMATS), size=len(out))
        out[column] = [
            datetime.strptime(v, "%Y-%m-%d").strftime(DATE_FORMATS[f]) if v else v
            for v, f in zip(out[column], formats, strict=True)
        ]
    for column in mess.scaled:
        out[column] = out[column].map(_scaled)
    if mess.key_prefix:
        out[mess.key] = [mess.key_prefix + v if v else v for v in out[mess.key]]
    out = out.rename(columns={c: c + SCALE_SUFFIX for c in mess.scaled})
    if mess.key_alias:
        out = out.rename(columns={mess.key: mess.key_alias})
    csv_text = out.to_csv(index=False)
    if not mess.second_header:
        return csv_text
    header, _, body = csv_text.partition("\n")
    second = ",".join(_describe(table[c]) for c in table.columns)
    return f"{header}\n{second}\n{body}"


def _describe(values: pd.Series) -> str:
    """A second header row's cell: what the column holds."""
    present = values[values != ""]
    if present.map(lambda t: bool(_ISO_DATE.match(t))).all() and len(present):
        return "date"
    if present.map(lambda t: bool(_PLAIN_NUMBER.match(t))).all() and len(present):
        return "number"
    return "text"


def _materialize(ctx: RunContext, plan: LakePlan, text: pd.DataFrame, draft: Draft) -> Path:
    """Write the clean needed files (returned folder, never stored) and the public lake."""
    clean = draft.folder / "clean"
    clean.mkdir()
    rng = seeded(*plan.question.params.values(), *sorted(plan.needed), "mess")
    for name in sorted(plan.needed):
        table = text.iloc[plan.rows[name]][plan.needed[name]].reset_index(drop=True)
        table.to_csv(clean / name, index=False)
        (draft.public / name).write_text(_messy(table, plan.mess[name], rng))
    for name, other in plan.distractors:
        rows = _text_table(prepared_file(ctx, other, "train.csv")).head(MAX_DISTRACTOR_ROWS)
        rows.to_csv(draft.public / name, index=False)
        if plan.near_duplicate and plan.near_duplicate[1] == name:
            dropped = rng.random(len(rows)) < NEAR_DUPLICATE_DROP
            rows.loc[~dropped].to_csv(draft.public / plan.near_duplicate[0], index=False)
    return clean
