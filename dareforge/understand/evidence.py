"""What a source's own words say: its title, description, tags and metric, read for the target, for time
series and for columns to leave out. Every hint carries the sentence it came from, so an auditor sees why.

The phrases are the ones real documentation uses: "the target variable is X", "predict whether X", "X is the
label", "forecast Y" (and the same in other languages, `languages`), an R formula whose left side is the response (`y ~ x1 + x2`, as R documentation's
examples write models), sklearn's ":Target: Column 11", a variable list whose entry calls a column the
response or an identifier, and title words that name a column (`Cars (auto MPG)` -> Miles_per_Gallon).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from difflib import get_close_matches

from dareforge.schema import Source, TaskType
from dareforge.understand.languages import foreign_targets, glosses

TARGET_WORDS = (
    r"(?:target|label|response|outcome|output (?:variable|parameter|attribute)|dependent variable|class label|"
    r"variable to (?:predict|forecast))"
)
TARGET_IS = re.compile(
    rf"\b{TARGET_WORDS}\s*(?:variable|column|attribute|field)?\s*(?:is|:|=|-|\u2013)\s*(?:the\s+|a\s+)?"
    r"(?:column\s+|variable\s+)?(?P<x>[^\n.,;()]{1,60})",
    re.IGNORECASE,
)
IS_TARGET = re.compile(
    rf"(?P<x>[\w.\- ]{{1,40}}?)\s+(?:is|as|serves as|will be|are|being)\s+(?:the|our|a|an)\s+{TARGET_WORDS}",
    re.IGNORECASE,
)
PREDICT = re.compile(
    r"\b(?P<verb>predict(?:s|ing|ed)?|classify(?:ing)?|forecast(?:s|ing)?|estimat(?:e|es|ing))\s+"
    r"(?:whether|if|how\s+(?:many|much)|which|the|a|an)?\s*(?P<x>[^\n.,;()]{1,60})",
    re.IGNORECASE,
)
EXPLAIN = re.compile(
    r"\b(?:explain(?:s|ing)?|model(?:s|ing|ling)?|determinants of)\s+(?:the\s+)?(?P<x>[^\n.,;()]{1,40})", re.I
)
FORMULA = re.compile(
    r"(?:^|[\s(,=<-])(?:(?:log\d*|sqrt|exp|I|factor|as\.\w+|Surv)\()?(?P<x>[A-Za-z.][\w.]*)(?:\s*[)>=!<][^~\n]{0,12})?\s*~\s*[\w.(]"
)
COLUMN_NUMBER = re.compile(r"\btarget\s*:?\s*(?:is\s+)?column\s+(?P<n>\d+)", re.IGNORECASE)
OUTCOME_DEFINITION = re.compile(
    r"\b(?:response|dependent variable|target|outcome|label|to be predicted|endogenous|output (?:variable|"
    r"parameter|attribute))\b",
    re.IGNORECASE,
)
ID_DEFINITION = re.compile(
    r"^(?:an?\s+)?(?:unique\s+)?(?:identifier|id\b|id number|row (?:name|number|index)|record number|index\b)",
    re.IGNORECASE,
)
SERIES = re.compile(
    r"\btime[- ]series\b|\bforecast(?:s|ing)?\b|\bclass\s*[\"'`]?m?ts\b|\bunivariate series\b|"
    r"\b(?:monthly|quarterly|weekly|daily|annual|yearly|hourly) (?:time )?series\b",
    re.IGNORECASE,
)
SERIES_OBJECT = re.compile(
    r"\b(?:a|an)\s+(?:[\w-]+\s+){0,3}time[- ]series\b|\bclass\s*[\"'`]?m?ts\b", re.IGNORECASE
)
"""Documentation saying the table *is* a series (R's "A monthly time series", class "mts"): then even a table
without a time column is one, ordered by its rows."""
CADENCE = {"hourly", "daily", "weekly", "monthly", "quarterly", "yearly", "annual", "annually"}
"""How often a table is sampled: a title's "Daily Weather" and a column's "total daily rainfall" share it as
every measured column of the table would, so it says nothing about which one is the target."""
SERIES_TAGS = {"time series", "time-series", "timeseries", "forecasting", "time series analysis"}
CLASS_TAGS = {
    "classification",
    "binary classification",
    "multiclass classification",
    "multi-class classification",
}
REGRESSION_TAGS = {"regression", "linear regression"}
CLASS_METRICS = re.compile(
    r"accuracy|auc|f1|log ?loss|logarithmic|precision|recall|kappa|mcc|cross.?entropy", re.I
)
REGRESSION_METRICS = re.compile(
    r"rmse|rmsle|mae|mse|mean (?:absolute|squared)|r2|r-squared|mape|smape|pearson", re.I
)
MEASURES = r"prices?|sales|rates?|index|levels?|yields?|volumes?|counts?|values?|temperatures?|demand|flows?"
STOP = {
    "data",
    "dataset",
    "datasets",
    "the",
    "and",
    "for",
    "from",
    "with",
    "data set",
    "set",
    "of",
    "in",
    "on",
    "by",
    "per",
    "a",
    "an",
    "to",
    "its",
    "us",
    "uci",
    "kaggle",
    "csv",
    "table",
    "sample",
    "survey",
    "study",
}
DEFINITION_LINE = re.compile(
    r"^\s{0,12}[`'\"*]*(?P<name>[A-Za-z_.][\w. ]{0,40}?(?:\s*\([^()]{1,20}\))?)[`'\"*]*"
    r"(?:\s*[:|]\s*|\s+[-\u2013\u2014]\s+)(?P<text>\S.*)$"
)
LIST_MARKER = re.compile(r"^\s{0,12}(?:[-*+\u2022]|\d{1,3}[.)])\s+")
"""A bullet or a number in front of a glossary entry (`* `, `- `, `3. `)."""
UNIT_SUFFIX = re.compile(r"\s*\([^()]{1,20}\)\s*$")


@dataclass(frozen=True)
class Hint:
    column: str
    weight: float
    sentence: str


@dataclass
class TextEvidence:
    targets: list[Hint] = field(default_factory=list)
    excluded: list[Hint] = field(default_factory=list)
    series: list[str] = field(default_factory=list)
    series_object: bool = False
    task_type: dict[TaskType, list[str]] = field(default_factory=dict)
    definitions: dict[str, str] = field(default_factory=dict)
    absent_targets: list[str] = field(default_factory=list)
    """Names the description calls the target that are no column of the table read (see `absent_target_notes`)."""

    def weight(self, column: str) -> float:
        return sum(h.weight for h in self.targets if h.column == column)

    def sentences(self, column: str) -> list[str]:
        return [h.sentence for h in self.targets if h.column == column]


def normalize(text: str) -> str:
    """Lower-case words: `Miles_per_Gallon` -> 'miles per gallon', `sepal length (cm)` -> 'sepal length cm'."""
    text = re.sub(r"([a-z])([A-Z])", r"\1 \2", text)
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def _clean(text: str) -> str:
    """The text without Markdown's emphasis and code marks; an underscore inside a name (`price_usd`) stays."""
    return re.sub(r"(?<!\w)[`*_]{1,2}(?=\w)|(?<=\w)[`*]{1,2}", "", text)


class _Matcher:
    """Finds the columns a phrase names: whole-word matches of a column's normalized name, longest first."""

    def __init__(self, columns: list[str]):
        self.columns = columns
        self.names = sorted(((normalize(c), c) for c in columns if normalize(c)), key=lambda p: -len(p[0]))

    def in_phrase(self, phrase: str, words: int = 8) -> list[str]:
        head = " ".join(normalize(phrase).split()[:words])
        found, taken = [], head
        for norm, column in self.names:
            # A plural names the column too: "predict area types" names `Type`.
            word = rf"(?:^| ){re.escape(norm)}(?:e?s)?(?: |$)"
            if re.search(word, taken):
                found.append(column)
                taken = re.sub(word, " ", taken)
        return found

    def exact(self, word: str) -> str | None:
        for column in self.columns:
            if column == word or column.lower() == word.lower() or normalize(column) == normalize(word):
                return column
        return None


def read_text(source: Source, columns: list[str]) -> TextEvidence:
    evidence = TextEvidence()
    matcher = _Matcher(columns)
    text = _clean(source.description or "")
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n\s*\n", text) if s.strip()]

    glossed = glosses(text, matcher.exact)

    def add(column: str, weight: float, sentence: str) -> None:
        evidence.targets.append(Hint(column, weight, " ".join(sentence.split())[:200]))

    for sentence in sentences:
        for pattern, weight in ((TARGET_IS, 8.0), (IS_TARGET, 8.0)):
            for match in pattern.finditer(sentence):
                for column in matcher.in_phrase(match.group("x"))[:1]:
                    add(column, weight, f"the description says: {sentence}")
                # Noted even when a column shares a word with it (`price` for `price_usd`): that match is a guess.
                name = _code_name(match.group("x"), pattern is IS_TARGET, source.description)
                if name and matcher.exact(name) is None:
                    evidence.absent_targets.append(name)
        for match in PREDICT.finditer(sentence):
            for column in (
                _listed(matcher, match.group("x")) or matcher.in_phrase(match.group("x"), words=6)[:1]
            ):
                add(column, 6.0, f"the description says: {sentence}")
        for column in foreign_targets(sentence, glossed, matcher.in_phrase):
            add(column, 6.0, f"the description says (not in English): {sentence}")
        for match in EXPLAIN.finditer(sentence):
            for column in matcher.in_phrase(match.group("x"), words=4)[:1]:
                add(column, 3.0, f"the description says: {sentence}")
        for match in COLUMN_NUMBER.finditer(sentence):
            number = int(match.group("n"))
            if 1 <= number <= len(columns):
                add(columns[number - 1], 8.0, f"the description says: {sentence}")
    lhs = Counter()
    for match in FORMULA.finditer(text):
        column = matcher.exact(match.group("x"))
        if column is not None:
            lhs[column] += 1
    for column, count in lhs.items():
        add(
            column,
            min(12.0, 6.0 * count),
            f"the documentation models {column} as a response ({count}x `{column} ~ ...`)",
        )
    evidence.definitions = _definitions(text, matcher)
    for column, definition in evidence.definitions.items():
        if OUTCOME_DEFINITION.search(definition):
            add(column, 4.0, f"the variable list describes {column} as: {definition[:120]}")
        if ID_DEFINITION.search(definition):
            evidence.excluded.append(
                Hint(column, 1.0, f"the variable list calls {column} {definition[:80]!r}")
            )
    _title(source, matcher, evidence)
    _series_and_type(source, sentences, evidence)
    return evidence


def _listed(matcher: _Matcher, phrase: str) -> list[str]:
    """The columns of a phrase that is a list of column names and nothing else ("target_min and target_max"),
    else none: a phrase with other words ("price from area and rooms") names its first column only."""
    columns = [matcher.exact(part) for part in re.split(r"\s+(?:and|&)\s+", phrase.strip())]
    return columns if len(columns) > 1 and None not in columns else []


def _code_name(phrase: str, last: bool, description: str) -> str | None:
    """The name in a phrase the description calls the target (its first word, or its last for "X is the
    target") when it reads as a column's name rather than prose: written as code (`x`, "x") or shaped like one
    (snake_case, camelCase, digits), or capitalised when it is the phrase's only word. "The target is whether
    it rains" names no column."""
    words = phrase.split()
    word = words[-1 if last else 0].strip("'\".-") if words else ""
    if not re.fullmatch(r"[A-Za-z_][\w.\-]*", word):
        return None
    shaped = re.search(r"_|\d|[a-z][A-Z]", word) or (len(words) == 1 and word[0].isupper())
    quoted = any(f"{mark}{word}{mark}" in description for mark in "`'\"")
    return word if shaped or quoted else None


def absent_target_notes(evidence: TextEvidence, source: Source, table: str, columns: list[str]) -> list[str]:
    """What to tell an auditor about each target the description names that `table` (the table read, with
    `columns`) lacks: the other table that has it, or the columns closest to it. Without these, a source whose
    documentation names a renamed or dropped column got a framing on another target with no word of why."""
    others = {f.name: f.columns for f in source.files if f.columns and f.name != table}
    everything = {c.lower(): c for c in [*columns, *(c for cs in others.values() for c in cs)]}
    notes = []
    for name in dict.fromkeys(evidence.absent_targets):
        holder = next((f for f, cs in others.items() if _Matcher(cs).exact(name)), None)
        if holder is not None:
            notes.append(
                f"the description names target {name!r}, a column of {holder}, not of {table} (the table "
                f"read); to frame it, set sources.{source.id}.table: {holder}"
            )
            continue
        close = [everything[c] for c in get_close_matches(name.lower(), list(everything), n=3, cutoff=0.5)]
        shown = (
            f"closest: {', '.join(close)}" if close else f"none is close; columns: {', '.join(columns[:10])}"
        )
        notes.append(f"the description names target {name!r}, but no table has a column {name!r} ({shown})")
    return notes


def _definitions(text: str, matcher: _Matcher) -> dict[str, str]:
    """Each column's entry in a variable list: `name - text`, `name: text`, `* **name (unit)**: text`,
    `3. name: text`, a Markdown table row `| name | text | ... |`, or R documentation's `name` line followed by an
    indented paragraph (the forms Kaggle descriptions, their column glossaries and R documentation use)."""
    definitions: dict[str, str] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        entry = _table_row(line, matcher) or _list_entry(line, matcher)
        if entry is not None:
            column, body = entry
            if column not in definitions and body:
                definitions[column] = body
            continue
        column = matcher.exact(line.strip().strip("`'\"*"))
        if column and column not in definitions:
            following = [x.strip() for x in lines[i + 1 : i + 8]]
            body = " ".join(x for x in following if x)
            if body and matcher.exact(body.split()[0].strip("`'\"*,")) is None:
                definitions[column] = body[:300]
    return definitions


def _named(name: str, matcher: _Matcher) -> str | None:
    """The column a glossary's name cell names, also when it adds a unit: `temperature_2m_max (°C)`."""
    name = name.strip().strip("`'\"*").strip()
    return matcher.exact(name) or matcher.exact(UNIT_SUFFIX.sub("", name).strip("`'\"* "))


def _table_row(line: str, matcher: _Matcher) -> tuple[str, str] | None:
    if line.count("|") < 2:
        return None
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) < 2 or all(set(c) <= set("-: ") for c in cells):
        return None
    column = _named(cells[0], matcher)
    return (column, " | ".join(c for c in cells[1:] if c)) if column else None


def _list_entry(line: str, matcher: _Matcher) -> tuple[str, str] | None:
    match = DEFINITION_LINE.match(LIST_MARKER.sub("", line, count=1))
    if not match:
        return None
    column = _named(match.group("name"), matcher)
    return (column, match.group("text").strip()) if column else None


def _title(source: Source, matcher: _Matcher, evidence: TextEvidence) -> None:
    title = normalize(source.title)
    words = [w for w in title.split() if len(w) >= 3 and w not in STOP and not w.isdigit()]
    if not words:
        return
    for column in matcher.columns:
        words_of_name = normalize(column).split()
        tokens = [t for t in words_of_name if t not in STOP]
        if not tokens:
            continue
        acronym = "".join(t[0] for t in words_of_name) if len(words_of_name) >= 2 else None
        hit = next(
            (
                w
                for w in words
                for t in tokens
                if (
                    len(t) >= 3
                    and (w == t or (min(len(w), len(t)) >= 4 and (w.startswith(t) or t.startswith(w))))
                )
            ),
            None,
        )
        if hit is None and acronym and acronym in words:
            hit = acronym
        if hit is not None:
            evidence.targets.append(Hint(column, 3.0, f"the title {source.title!r} names it ({hit!r})"))
            measure = re.search(rf"(?:^| ){re.escape(hit)} ({MEASURES})(?: |$)", title)
            if measure:
                sentence = f"the title calls it a measured quantity ({hit} {measure.group(1)})"
                evidence.targets.append(Hint(column, 2.0, sentence))
            continue
        definition = normalize(evidence.definitions.get(column, ""))
        shared = [
            w for w in words if len(w) >= 4 and w not in CADENCE and re.search(rf"(?:^| ){w}", definition)
        ]
        if shared:
            evidence.targets.append(
                Hint(column, 1.5, f"the title {source.title!r} shares {shared[0]!r} with its description")
            )


def _series_and_type(source: Source, sentences: list[str], evidence: TextEvidence) -> None:
    tags = {t.strip().lower() for t in source.tags}
    for tag in sorted(tags & SERIES_TAGS):
        evidence.series.append(f"tagged {tag!r}")
    evidence.series_object = bool(SERIES_OBJECT.search(" ".join(sentences)))
    for sentence in sentences:
        if SERIES.search(sentence) and len(evidence.series) < 4:
            evidence.series.append(f"the description says: {' '.join(sentence.split())[:160]}")
    for tag in sorted(tags & CLASS_TAGS):
        evidence.task_type.setdefault(TaskType.CLASSIFICATION, []).append(f"tagged {tag!r}")
    for tag in sorted(tags & REGRESSION_TAGS):
        evidence.task_type.setdefault(TaskType.REGRESSION, []).append(f"tagged {tag!r}")
    if source.evaluation_metric:
        metric = source.evaluation_metric
        if CLASS_METRICS.search(metric):
            evidence.task_type.setdefault(TaskType.CLASSIFICATION, []).append(f"evaluated by {metric}")
        elif REGRESSION_METRICS.search(metric):
            evidence.task_type.setdefault(TaskType.REGRESSION, []).append(f"evaluated by {metric}")
