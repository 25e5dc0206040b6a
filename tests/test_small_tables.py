"""Small tables get questions (issue 44): each family's row minimum, not one per source. A folder of real-shaped
tables of 20-99 rows (numbers, categories, dates, text) goes through crawl, filter, understand, prepare,
generate, validate and the gate: question tasks are accepted on them, and every prediction family says why it
skips them."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dareforge.context import RunContext
from dareforge.crawlers.crawl import crawl
from dareforge.crawlers.filter import filter_sources
from dareforge.crawlers.rules import with_needs
from dareforge.families.generate import generate
from dareforge.families.registry import families, row_needs
from dareforge.generators.prepare import prepare
from dareforge.generators.questions.programs import PROGRAMS
from dareforge.schema import FilterDecision, Framing, PreparedSource, Task, Verdict
from dareforge.understand.understand_stage import understand
from dareforge.validators.gate import gate
from dareforge.validators.validate import validate
from tests.stores import mirror_dataset, store_config

CITIES = ["Lyon", "Porto", "Graz", "Turin", "Ghent"]
PLANS = ["basic", "plus", "pro"]
WORDS = ["late delivery", "friendly staff", "broken box", "fast refund", "no reply", "great value"]


def _shop(rows: int, seed: int) -> bytes:
    """Customer orders as a small shop keeps them: an id, categories, a date, amounts and a free-text note."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "order_id": np.arange(1, rows + 1),
            "city": rng.choice(CITIES, rows),
            "plan": rng.choice(PLANS, rows),
            # Several orders a day on a few days: dates that do not index the rows (no series to forecast).
            "ordered_on": rng.choice(
                pd.date_range("2023-01-03", periods=6, freq="7D").strftime("%Y-%m-%d"), rows
            ),
            "items": rng.integers(1, 9, rows),
            "amount_eur": np.round(rng.gamma(3.0, 18.0, rows), 2),
            "note": [f"{rng.choice(WORDS)} (order {i})" for i in range(rows)],
        }
    )
    return frame.to_csv(index=False).encode()


SIZES = {"shop-small": 24, "shop-medium": 61, "shop-large": 97}
TOO_SMALL = 12


def _paired() -> bytes:
    """A study's paired measurements (as R's `sleep`): ten subjects measured once in each of two groups. Its
    best-ranked target is the subject's id, whose every class holds two rows: too few for a stratified split
    to hold one out."""
    rng = np.random.default_rng(3)
    frame = pd.DataFrame(
        {
            "extra": np.round(rng.normal(1.5, 2.0, 20), 1),
            "group": np.repeat([1, 2], 10),
            "ID": np.tile(np.arange(1, 11), 2),
        }
    )
    return frame.to_csv(index=False).encode()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("small")
    mirror = root / "mirror"
    ids = {
        name: mirror_dataset(mirror, name, {"orders.csv": _shop(rows, n)})
        for n, (name, rows) in enumerate(SIZES.items())
    }
    tiny = mirror_dataset(mirror, "shop-tiny", {"orders.csv": _shop(TOO_SMALL, 9)})
    paired = mirror_dataset(mirror, "paired", {"paired.csv": _paired()})
    cfg = store_config(root, [])
    cfg.builtin.enabled = False
    cfg.mirror.paths = [str(mirror)]
    cfg.rules.recency_exempt_origins = ["mirror"]
    cfg.validate_.ladder_cpu_seconds = 0
    cfg.generate.lakes_per_source = 0  # Lake mixes sources; QA is what a small table must yield
    ctx = RunContext.from_config(cfg, show_progress=False)
    crawl(ctx)
    # As the pipeline judges them: with the families' row minimums handed in.
    filter_sources(ctx, with_needs(row_needs(ctx.config)))
    understand(ctx)
    prepare(ctx)
    generated = generate(ctx)
    validate(ctx)
    gate(ctx)
    return ctx, ids, tiny, generated, paired


def test_the_filter_keeps_a_small_table_and_drops_one_no_family_can_use(run):
    ctx, ids, tiny, _, _ = run
    decisions = {(d.source_id, d.rule): d for d in ctx.store.iter_records(FilterDecision)}
    for name, sid in ids.items():
        rows = decisions[(sid, "enough-rows")]
        assert rows.kept and rows.measured == str(SIZES[name])
        assert "too few for Class-IF (needs 100)" in rows.reason
    dropped = decisions[(tiny, "enough-rows")]
    assert not dropped.kept
    assert dropped.reason.startswith(f"{TOO_SMALL} rows, fewer than any task family needs (20 for ")


def test_a_table_too_small_for_a_model_is_framed_for_questions_with_the_reason(run):
    ctx, ids, _, _, _ = run
    for sid in ids.values():
        chosen = [f for f in ctx.store.read_partition(Framing, sid) if f.status == "chosen"]
        assert [f.questions_only for f in chosen] == [True]
        assert "models skip it" in chosen[0].reason and "fewer than the 100 it needs" in chosen[0].reason


def test_small_tables_yield_accepted_questions_and_prediction_families_say_why_they_skip(run):
    ctx, ids, _, generated, paired = run
    verdicts = list(ctx.store.iter_records(Verdict))
    accepted = {v.source_id for v in verdicts if v.accepted and v.family == "QA"}
    assert accepted == set(ids.values()) | {paired}
    assert not any(v.family != "QA" for v in verdicts)
    skipped = generated.outcomes["skipped"]
    for sid in ids.values():
        for family in families():
            if family.kind is None:
                continue
            why = skipped[f"{sid}/{family.name}"]
            assert "poses questions only" in why or "framing, not" in why
        assert "fewer than the 100 it needs" in skipped[f"{sid}/Class-IF"] + skipped[f"{sid}/Reg-IF"]


def test_each_kind_of_column_a_small_table_holds_gets_a_question(run):
    """The shop tables hold dates beside their numbers and categories: where their first questions leave the
    dates unasked, one more question asks about them (the notes are free text the framing leaves out, so no
    question reads them)."""
    ctx, ids, _, _, _ = run
    cap = ctx.config.generate.qa_per_source
    counts = []
    for sid in ids.values():
        programs = [
            json.loads(t.spec)["program"]
            for t in ctx.store.read_records(Task)
            if t.source_id == sid and t.family == "QA" and t.status == "candidate"
        ]
        assert "time" in {PROGRAMS[p].kind for p in programs}, (sid, programs)
        counts.append(len(programs))
    assert min(counts) >= cap and max(counts) == cap + 1, counts


def test_a_question_table_whose_classes_are_too_small_to_stratify_is_split_at_random(run):
    """Each class of the paired table's target holds two rows, so a stratified split holds none out: the
    questions framing is split at random instead of failing (a classification framing would fail), and its
    questions are accepted (the test above)."""
    ctx, _, _, generated, paired = run
    assert not generated.failures
    prepared = ctx.store.read_partition(PreparedSource, paired)
    assert [(p.questions_only, p.split) for p in prepared] == [(True, "random")]
    assert prepared[0].n_test == round(20 * ctx.config.prepare.test_share)
