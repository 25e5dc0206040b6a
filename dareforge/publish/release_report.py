"""The release report: one self-contained HTML page about a finished release version.

`write_release_report(ctx, name, version)` writes `reports/release/<name>/<version>/index.html` with

1. the filter funnel (sources seen -> fetched ok -> kept by the filter -> prepared -> with tasks -> with tasks
   in the release) and the top reasons sources dropped out along it;
2. the released tasks per family, stacked by release split;
3. baseline vs strong reference scores of the released model-making (MM) and time-series (TS) tasks;
4. how the tasks measure skill, per family (the manifest's `skill` block, `publish.skill`): the solver
   ladder's figures with each family's mean score per rung and the distributions of difficulty and headroom,
   and the question families' difficulty tiers;
5. the validation outcome per family (from the store's `verdicts`) and the top rejection reasons;
6. the released tasks in aggregate (per source origin, tasks per source, the sources with most tasks) and a
   bounded sample of task rows: the page's size does not grow with the task count; the full list is the
   release's own Parquet files and manifest. Each sampled task links to its page in `dareforge browse`, and the
   section to the release's task list there, at `BROWSE_URL` (where `dareforge browse` listens by default):
   `<BROWSE_URL>/task/<task id>`, `<BROWSE_URL>/release/<name>/<version>`, `<BROWSE_URL>/tasks?release=<name>@<version>`.

The release parts (tasks, splits, scores) come from the frozen release; the funnel and the verdicts describe
the store as it is when the report is written, which the page says. Plots are PNGs (matplotlib, Agg) embedded
as base64, so the page needs no other file and no network. The bytes depend only on the store: no clock, no
matplotlib version in the PNGs, fixed figure sizes; re-writing an unchanged report writes nothing.
"""

from __future__ import annotations

import html
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from dareforge.context import RunContext
from dareforge.errors import DareforgeError
from dareforge.families.registry import family_named, in_order
from dareforge.publish import release_task_views as task_views
from dareforge.publish import skill
from dareforge.publish.release import RELEASES, Release, load_release
from dareforge.publish.release_card import answer_type_mix
from dareforge.publish.release_figures import (
    DPI,
    WIDTH,
    distribution_plot,
    family_plot,
    funnel_plot,
    ladder_plot,
    score_plot,
    validation_plot,
)
from dareforge.publish.source_split import SPLITS
from dareforge.publish.versions import read_build_record
from dareforge.schema import SourceStatus

REPORTS = "reports/release"
BROWSE_URL = "http://127.0.0.1:8765"
"""Where `dareforge browse` listens by default: the report's links to task pages point there (nothing is fetched
from it; a page opened without the workbench running shows the report whole)."""
TOP = 15
EXAMPLE_CHARS = 180
STAGES = ("fetch", "filter", "prepare", "generate", "validate", "release")

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 62rem; padding: 0 1rem; color: #222;
       line-height: 1.4; }
h1 { margin-bottom: .2rem; }
h2 { margin-top: 2.5rem; border-bottom: 1px solid #ddd; padding-bottom: .2rem; }
nav a { margin-right: 1rem; }
table { border-collapse: collapse; margin: 1rem 0 2rem; font-size: .92rem; }
th, td { border: 1px solid #ccc; padding: .3rem .6rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td code, p code { font-size: .9em; }
img { display: block; max-width: 100%; height: auto; margin: 1rem 0; }
.muted { color: #666; }
.bad { color: #a00; }
"""


def report_key(name: str, version: str) -> str:
    return f"{REPORTS}/{name}/{version}/index.html"


def write_release_report(ctx: RunContext, name: str, version: str | None = None) -> str:
    """Write the HTML report of a finished release version (the latest when None); returns its store key."""
    release = load_release(ctx, name, version)
    key = report_key(release.name, release.version)
    ctx.store.write_bytes(key, render_release_report(ctx, release).encode())
    return key


# -- data ---------------------------------------------------------------------------------------------------------
@dataclass
class Funnel:
    stages: list[tuple[str, int]]
    drops: list[tuple[str, str, int, str]]  # stage, reason, sources, example


@dataclass
class StoreState:
    funnel: Funnel
    verdicts: list[tuple[str, str, str, bool, list[str]]]  # task id, source id, family, accepted, reasons


def _clip(text: str, limit: int = EXAMPLE_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _store_state(ctx: RunContext, release: Release) -> StoreState:
    con = ctx.store.connect()
    try:
        sources = con.sql("select id, status, status_detail from sources order by all").fetchall()
        decisions = con.sql(
            "select source_id, rule, kept, reason from filter_decisions order by all"
        ).fetchall()
        prepared = {r[0] for r in con.sql("select distinct source_id from prepared").fetchall()}
        tasks = con.sql("select id, source_id, status, reject_reason from tasks order by all").fetchall()
        verdicts = con.sql(
            "select task_id, source_id, family, accepted, reasons from verdicts order by task_id"
        ).fetchall()
    finally:
        con.close()
    return StoreState(_funnel(sources, decisions, prepared, tasks, verdicts, release), verdicts)


def _funnel(
    sources: list[tuple],
    decisions: list[tuple],
    prepared_ids: set[str],
    tasks: list[tuple],
    verdicts: list[tuple],
    release: Release,
) -> Funnel:
    status = {sid: (st, detail) for sid, st, detail in sources}
    seen = sorted(status)
    fetched = [s for s in seen if status[s][0] == SourceStatus.OK]
    rules: dict[str, list[tuple[str, bool, str]]] = defaultdict(list)
    for sid, rule, kept, reason in decisions:
        rules[sid].append((rule, kept, reason))
    kept = [s for s in fetched if rules.get(s) and all(k for _, k, _ in rules[s])]
    prepared = [s for s in kept if s in prepared_ids]
    candidates: dict[str, list[str]] = defaultdict(list)
    rejected_by_generator: dict[str, list[str]] = defaultdict(list)
    for task_id, sid, task_status, reject_reason in tasks:
        if task_status == "candidate":
            candidates[sid].append(task_id)
        else:
            rejected_by_generator[sid].append(reject_reason or "no reason recorded")
    with_tasks = [s for s in prepared if candidates.get(s)]
    released = sorted({s["id"] for s in release.manifest["sources"]})

    counts: Counter = Counter()
    examples: dict[tuple[str, str], str] = {}

    def drop(stage: str, reason: str, source_id: str, detail: str | None = None) -> None:
        counts[(stage, reason)] += 1
        examples.setdefault((stage, reason), f"{source_id}: {detail}" if detail else source_id)

    for s in seen:
        if status[s][0] != SourceStatus.OK:
            drop("fetch", f"status {status[s][0]}", s, status[s][1])
    for s in fetched:
        if not rules.get(s):
            drop("filter", "not judged yet (run `dareforge filter`)", s)
        for rule, ok, reason in rules.get(s, []):
            if not ok:
                drop("filter", rule, s, reason)
    for s in kept:
        if s not in prepared_ids:
            drop("prepare", "no prepared record (prepare failed or has not run; see its log)", s)
    for s in prepared:
        if not candidates.get(s):
            if rejected_by_generator.get(s):
                drop("generate", "every generated task rejected", s, rejected_by_generator[s][0])
            else:
                drop("generate", "no tasks generated", s)
    by_task = {v[0]: v for v in verdicts}
    released_set = set(released)
    for s in with_tasks:
        if s in released_set:
            continue
        judged = [by_task[t] for t in candidates[s] if t in by_task]
        if verdicts and not judged:
            drop("validate", "not validated yet", s)
        elif judged and not any(v[3] for v in judged):
            reasons = sorted(r for v in judged for r in v[4])
            drop("validate", "every task rejected by the validation gate", s, reasons[0] if reasons else None)
        else:
            drop("release", "not in this release version (the store changed after it was built)", s)

    order = {stage: i for i, stage in enumerate(STAGES)}
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], order[kv[0][0]], kv[0][1]))[:TOP]
    stages = [
        ("sources seen", len(seen)),
        ("fetched ok", len(fetched)),
        ("kept by the filter", len(kept)),
        ("prepared", len(prepared)),
        ("with tasks", len(with_tasks)),
        ("with tasks in the release", len(released)),
    ]
    drops = [(stage, reason, n, _clip(examples[(stage, reason)])) for (stage, reason), n in ranked]
    return Funnel(stages, drops)


def _scores(release: Release) -> dict[str, dict[str, Any]]:
    """task id -> {baseline, strong, ...} from the private half (falling back to the store's task manifests)."""
    try:
        return {row["id"]: dict(row["scores"] or {}) for row in release.private_rows()}
    except (DareforgeError, OSError):
        try:
            return {t.id: t.scores.model_dump() for t in release.tasks()}
        except (DareforgeError, OSError):
            return {}


# -- html ---------------------------------------------------------------------------------------------------------
def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _table(
    headers: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    num: Iterable[int] = (),
    table_id: str = "",
    links: Mapping[int, Callable[[object], str]] | None = None,
) -> str:
    """An HTML table of escaped cells; `links`: column -> the URL its cells link to."""
    right, linked = set(num), links or {}

    def cell(tag: str, i: int, value: object) -> str:
        cls = " class='num'" if i in right else ""
        text = _e(value)
        if tag == "td" and i in linked:
            text = f"<a href='{_e(linked[i](value))}'>{text}</a>"
        return f"<{tag}{cls}>{text}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(cell("td", i, c) for i, c in enumerate(row)) + "</tr>\n" for row in rows)
    ident = f" id='{_e(table_id)}'" if table_id else ""
    return f"<table{ident}>\n<tr>{head}</tr>\n{body}</table>"


def _img(png: str, alt: str) -> str:
    return f"<img src='data:image/png;base64,{png}' alt='{_e(alt)}' width='{int(WIDTH * DPI)}'>"


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _funnel_section(funnel: Funnel) -> list[str]:
    parts = [
        "<h2 id='funnel'>1. Filter funnel</h2>",
        "<p class='muted'>Sources as the store holds them now; each stage counts the sources of the stage "
        "before it that passed. The last bar counts the sources this release version holds.</p>",
        _img(funnel_plot(funnel.stages), "bar chart of the source funnel"),
        _table(["stage", "sources"], funnel.stages, num=[1], table_id="funnel-counts"),
        "<h3>Top drop reasons</h3>",
    ]
    if funnel.drops:
        parts += [
            "<p class='muted'>A source a filter rule drops counts once per rule that dropped it.</p>",
            _table(["stage", "reason", "sources", "example"], funnel.drops, num=[2], table_id="drop-reasons"),
        ]
    else:
        parts.append("<p>No source was dropped.</p>")
    return parts


def _family_section(release: Release) -> list[str]:
    counts: dict[str, dict[str, int]] = {}
    for entry in release.manifest["tasks"]:
        side = counts.setdefault(entry["family"], dict.fromkeys(SPLITS, 0))
        side[entry["split"]] = side.get(entry["split"], 0) + 1
    families = in_order(counts)
    rows = [[f, *(counts[f].get(s, 0) for s in SPLITS), sum(counts[f].values())] for f in families]
    rows.append(["all", *(sum(counts[f].get(s, 0) for f in families) for s in SPLITS), len(release.task_ids)])
    parts = ["<h2 id='families'>2. Tasks per family</h2>"]
    if families:
        parts.append(_img(family_plot(families, counts), "stacked bar chart of tasks per family and split"))
    parts.append(
        _table(["family", *SPLITS, "total"], rows, num=range(1, len(SPLITS) + 2), table_id="family-counts")
    )
    mix = answer_type_mix(release.manifest["tasks"])
    if mix:
        parts += [
            "<p class='muted'>Question tasks: QA asks one question about one table; Lake asks one over a folder "
            "of files (distractors, untidy needed files) with sub-tasks. Answers are typed and certified by "
            "running the question's program twice.</p>",
            _table(
                ["family", "answer type", "tasks"],
                [[f, kind, n] for f in in_order(mix) for kind, n in sorted(mix[f].items())],
                num=[2],
                table_id="answer-types",
            ),
        ]
    return parts


def _score_section(release: Release, scores: dict[str, dict[str, Any]]) -> list[str]:
    pairs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    metrics: dict[str, set[str]] = defaultdict(set)
    missing: Counter = Counter()
    for entry in release.manifest["tasks"]:
        family = entry["family"]
        if not family_named(family).scored_against_baseline:
            continue
        s = scores.get(entry["id"], {})
        if s.get("baseline") is None or s.get("strong") is None:
            missing[family] += 1
            continue
        pairs[family].append((float(s["baseline"]), float(s["strong"])))
        metrics[family].add(entry["metric"]["name"])
    parts = [
        "<h2 id='scores'>3. Baseline vs strong reference</h2>",
        "<p class='muted'>Scores of the released model-making (MM) and time-series (TS) tasks: the best trivial "
        "predictor (baseline) and a strong default model (strong), each task's pair joined by a line.</p>",
    ]
    families = in_order(pairs)
    if not families:
        parts.append("<p>No released MM or TS task has both scores.</p>")
        return parts
    groups = [(f, " / ".join(sorted(metrics[f])), pairs[f]) for f in families]
    parts.append(_img(score_plot(groups), "box and strip plots of baseline and strong reference scores"))
    rows = []
    for family, metric, ps in groups:
        b = [x for x, _ in ps]
        s = [y for _, y in ps]
        gains = [y - x for x, y in ps]
        rows.append(
            [
                family,
                metric,
                len(ps),
                _fmt(statistics.median(b)),
                _fmt(statistics.median(s)),
                _fmt(statistics.median(gains)),
                sum(g <= 0 for g in gains),
            ]
        )
    parts.append(
        _table(
            [
                "family",
                "metric",
                "tasks",
                "median baseline",
                "median strong",
                "median gain",
                "strong ≤ baseline",
            ],
            rows,
            num=range(2, 7),
            table_id="score-summary",
        )
    )
    if missing:
        text = ", ".join(f"{f}: {n}" for f, n in sorted(missing.items()))
        parts.append(f"<p class='muted'>Tasks without both scores (left out): {_e(text)}.</p>")
    return parts


def _family_table(rows: dict[str, list[str]], columns: list[str], table_id: str) -> str:
    """A table of `rows` (family -> its cells under `columns`, all numbers), as the card's `family_table`."""
    return _table(
        ["family", *columns],
        [[f, *cells] for f, cells in rows.items()],
        num=range(1, len(columns) + 1),
        table_id=table_id,
    )


def _skill_section(release: Release) -> list[str]:
    parts = ["<h2 id='skill'>4. How the tasks measure skill</h2>"]
    summary = release.manifest.get("skill")
    if summary is None:
        parts.append("<p>This version was built before releases summed up their tasks' skill.</p>")
        return parts
    ladder = summary["ladder"]
    if not ladder:
        parts.append(f"<p>{_e(skill.NO_LADDER)}</p>")
    else:
        parts += [
            f"<p class='muted'>{_e(skill.LADDER_TEXT)}</p>",
            _family_table(skill.ladder_rows(summary), skill.LADDER_COLUMNS, "ladder-summary"),
        ]
        shown = [f for f, figures in ladder.items() if figures["released"]]
        if shown:
            parts += [
                "<p class='muted'>Per family, each rung's mean score over the released tasks that scored it, "
                "in a band from the mean low to the mean high end of the rungs' 95% bootstrap intervals.</p>",
                _img(
                    ladder_plot([(f, ladder[f]["released"], ladder[f]["rungs"]) for f in shown]),
                    "line plots of mean score per rung",
                ),
                _img(
                    distribution_plot(
                        shown,
                        {
                            measure: {f: ladder[f][f"{measure}_bins"] for f in shown}
                            for measure in ("difficulty", "headroom")
                        },
                    ),
                    "histograms of difficulty and headroom of the released tasks",
                ),
            ]
    if trivial := skill.trivial_rows(summary):
        parts += [
            f"<p class='muted'>{_e(skill.TRIVIAL_TEXT)}</p>",
            _family_table(trivial, skill.TRIVIAL_COLUMNS, "trivial-answers"),
        ]
    if summary["tiers"]:
        parts += [
            f"<p class='muted'>{_e(skill.TIER_TEXT)}</p>",
            _family_table(skill.tier_rows(summary), skill.TIER_COLUMNS, "question-tiers"),
        ]
    if sensitivity := skill.sensitivity_rows(summary):
        parts += [
            f"<p class='muted'>{_e(skill.SENSITIVITY_TEXT)}</p>",
            _family_table(sensitivity, skill.SENSITIVITY_COLUMNS, "if-sensitivity"),
        ]
    return parts


def _validation_section(release: Release, verdicts: list[tuple]) -> list[str]:
    parts = ["<h2 id='validation'>5. Validation outcome</h2>"]
    at_release = release.manifest.get("verdicts") or {}
    if at_release.get("present"):
        parts.append(
            f"<p>When this version was built the gate had accepted {_e(at_release.get('accepted', 0))} and "
            f"rejected {_e(at_release.get('rejected', 0))} tasks.</p>"
        )
    if not verdicts:
        parts.append(
            "<p>No verdicts in the store: the validation gate has not run"
            + (", and every candidate task was released." if not at_release.get("present") else ".")
            + "</p>"
        )
        return parts
    counts = Counter((family, accepted) for _, _, family, accepted, _ in verdicts)
    families = in_order(f for f, _ in counts)
    rows = [[f, counts[(f, True)], counts[(f, False)]] for f in families]
    rows.append(["all", sum(r[1] for r in rows), sum(r[2] for r in rows)])
    parts += [
        "<p class='muted'>Verdicts as the store holds them now.</p>",
        _img(
            validation_plot(families, counts), "stacked bar chart of accepted and rejected tasks per family"
        ),
        _table(["family", "accepted", "rejected"], rows, num=[1, 2], table_id="verdict-counts"),
        "<h3>Top rejection reasons</h3>",
    ]
    checks: Counter = Counter()
    examples: dict[str, str] = {}
    for task_id, _, _, accepted, reasons in verdicts:
        if accepted:
            continue
        for reason in sorted(set(reasons)):
            check = reason.split(":", 1)[0].strip()
            checks[check] += 1
            examples.setdefault(check, f"{task_id}: {reason}")
    if not checks:
        parts.append("<p>No task was rejected.</p>")
        return parts
    rows = [
        [c, n, _clip(examples[c])] for c, n in sorted(checks.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP]
    ]
    parts.append(_table(["check", "tasks", "example"], rows, num=[1], table_id="rejection-reasons"))
    return parts


def _task_section(release: Release, scores: dict[str, dict[str, Any]]) -> list[str]:
    """Aggregated views of the released tasks and a bounded sample of them (`release_task_views`)."""
    entries = release.manifest["tasks"]
    browse_release = f"{BROWSE_URL}/tasks?release={quote(f'{release.name}@{release.version}')}"
    per_source = Counter(e["source_id"] for e in entries)
    sides = {s["id"]: s["split"] for s in release.manifest.get("sources", [])}
    sample = [
        [
            e["id"],
            e["family"],
            e["source_id"],
            e["split"],
            e["metric"]["name"],
            _fmt(scores.get(e["id"], {}).get("baseline")),
            _fmt(scores.get(e["id"], {}).get("strong")),
        ]
        for e in task_views.sample_entries(entries)
    ]
    return [
        f"<h2 id='tasks'>6. Released tasks ({len(entries)})</h2>",
        "<p class='muted'>The full list is the release itself: <code>data/train.parquet</code> and "
        "<code>data/test.parquet</code> (one row per task, what <code>datasets.load_dataset</code> loads) and "
        "<code>manifest.json</code> (<code>tasks</code>); from the store's root folder (DuckDB reads paths from "
        "the working folder), for example "
        f"<code>{_e(task_views.full_list_query(release.name, release.version))}</code>.</p>",
        "<h3>Tasks per source origin</h3>",
        _table(
            ["origin", "sources", *SPLITS, "tasks"],
            task_views.origin_rows(entries),
            num=range(1, len(SPLITS) + 3),
            table_id="origin-counts",
        ),
        "<h3>Tasks per source</h3>",
        f"<p>{_e(task_views.spread_text(per_source))}.</p>",
        _table(
            ["tasks per source", "sources", "tasks"],
            task_views.bucket_rows(per_source),
            num=[1, 2],
            table_id="tasks-per-source",
        ),
        f"<h3>Sources with most tasks (top {task_views.TOP_SOURCES})</h3>",
        _table(
            ["source", "origin", "split", "tasks", "per family"],
            task_views.top_source_rows(entries, sides),
            num=[3],
            table_id="top-sources",
        ),
        f"<h3>A sample of tasks ({len(sample)} of {len(entries)})</h3>",
        f"<p class='muted'>Up to {task_views.SAMPLE_PER_GROUP} tasks of each family and split. With "
        f"<code>dareforge browse</code> running, each task opens at <code>{_e(BROWSE_URL)}/task/&lt;task id&gt;</code>"
        f" and <a id='browse-release' href='{_e(browse_release)}'>the release's task list</a> filters them all.</p>",
        _table(
            ["task", "family", "source", "split", "metric", "baseline", "strong"],
            sample,
            num=[5, 6],
            table_id="task-sample",
            links={0: lambda task_id: f"{BROWSE_URL}/task/{quote(str(task_id))}"},
        ),
    ]


def _cost_section(ctx: RunContext) -> list[str]:
    """The cost model (dareforge/plan.py) from the store's last measurement, or how to make one."""
    from dareforge.plan import MEASURED_KEY, Measured, plan_lines

    measured = Measured.load(ctx.store)
    if measured is None:
        return [
            "<h2 id='costs'>Costs</h2>",
            f"<p class='muted'>No measurement in this store ({_e(MEASURED_KEY)}): `make bench` (its cost model "
            "bench) measures the catalog and keeps one.</p>",
        ]
    items = "".join(f"<li>{_e(line)}</li>" for line in plan_lines(measured))
    return [
        "<h2 id='costs'>Costs</h2>",
        "<p class='muted'>Projected from per-task CPU and tokens measured by `make bench` on the builtin catalog "
        "(dareforge/plan.py says what the model counts and what it leaves out).</p>",
        f"<ul>{items}</ul>",
    ]


def render_release_report(ctx: RunContext, release: Release) -> str:
    """The report page of a loaded release (see the module doc)."""
    manifest = release.manifest
    state = _store_state(ctx, release)
    scores = _scores(release)
    built = read_build_record(release.store, f"{RELEASES}/{release.name}", release.version)
    title = f"Release report: {release.name} {release.version}"
    splits = manifest.get("splits", {})
    split_text = ", ".join(
        f"{splits.get(s, {}).get('tasks', 0)} {s} ({len(splits.get(s, {}).get('sources', []))} sources)"
        for s in SPLITS
    )
    selection = manifest.get("selection", {})
    excluded = ", ".join(f"{n} {why}" for why, n in selection.get("excluded", {}).items()) or "none"
    summary = [
        ("tasks", f"{len(release.task_ids)}: {split_text}"),
        ("sources", len(manifest.get("sources", []))),
        ("candidate tasks", f"{selection.get('candidates', '?')}; left out: {excluded}"),
        # Versions built before build records were kept carry the time in the manifest.
        ("created", built.get("created_at") or manifest.get("created_at", "?")),
        ("previous version", manifest.get("previous_version") or "none"),
        ("content fingerprint", str(manifest.get("content_fingerprint", "?"))[:16]),
        ("generator versions", ", ".join(manifest.get("generator_versions", []))),
    ]
    summary_rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in summary)
    parts = [
        "<!doctype html>",
        f"<html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p class='muted'>{_e(manifest.get('pretty_name', release.name))}</p>",
        "<nav><a href='#funnel'>Funnel</a><a href='#families'>Families</a><a href='#scores'>Scores</a>"
        "<a href='#skill'>Skill</a><a href='#validation'>Validation</a><a href='#tasks'>Tasks</a><a href='#costs'>Costs</a></nav>",
        f"<table id='summary'>{summary_rows}</table>",
        *_funnel_section(state.funnel),
        *_family_section(release),
        *_score_section(release, scores),
        *_skill_section(release),
        *_validation_section(release, state.verdicts),
        *_task_section(release, scores),
        *_cost_section(ctx),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
