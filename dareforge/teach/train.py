"""Train a LoRA adapter on an SFT export's chosen rows: `python -m dareforge.teach.train SPEC.json`.

Runs in `.venv-teach` (torch, transformers, peft, trl); `dareforge.teach.run` writes the spec (every setting
of the recipe, the export folder, the row ids) and copies the adapter into the store afterwards. The rows load
with `datasets` from the export's `tools` config as they are (each turn a JSON object; `tools` the schema's
JSON text, which TRL parses), and TRL's SFTTrainer trains with the loss on the assistant turns only. Rows are cut
at `teach.max_length`; `dareforge.teach.fit` says how many keep assistant tokens and stops with the key to raise
when none does. The result file says how it went: the fit, losses, seconds, the peak resident memory.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    import torch

    torch.set_num_threads(spec["threads"])
    from datasets import load_dataset
    from peft import LoraConfig
    from transformers import set_seed
    from trl import SFTConfig, SFTTrainer

    from dareforge.errors import ConfigError
    from dareforge.teach.fit import fit
    from dareforge.teach.model import load

    set_seed(spec["seed"])
    started = time.monotonic()
    wanted = set(spec["ids"])
    rows = load_dataset(spec["export_folder"], "tools", split="train", cache_dir=spec["hf_cache"])
    rows = rows.filter(lambda r: r["id"] in wanted).select_columns(["messages", "tools"])
    if rows.num_rows != len(wanted):
        raise SystemExit(f"the export holds {rows.num_rows} of the {len(wanted)} chosen rows")
    model, tokenizer = load(spec["model_folder"], spec["chat_template"], spec["device"])
    try:
        fitted = fit(assistant_masks(rows, tokenizer), spec["max_length"])
    except ConfigError as e:
        raise SystemExit(str(e)) from e
    model.train()
    out = Path(spec["out_dir"])
    config = SFTConfig(
        output_dir=str(out / "trainer"),
        max_length=spec["max_length"],
        max_steps=spec["steps"],
        per_device_train_batch_size=spec["batch_size"],
        gradient_accumulation_steps=spec["grad_accumulation"],
        learning_rate=spec["learning_rate"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        assistant_only_loss=True,
        packing=False,
        seed=spec["seed"],
        data_seed=spec["seed"],
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=spec["device"] == "cpu",
        dataloader_num_workers=0,
        dataset_num_proc=None,
        # bf16 autocast over float32 master weights (the LoRA weights and optimizer state stay float32).
        bf16=spec["precision"] == "bfloat16",
        fp16=False,
    )
    lora = LoraConfig(
        r=spec["lora_rank"],
        lora_alpha=spec["lora_alpha"],
        lora_dropout=0.0,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )
    trainer = SFTTrainer(
        model=model, args=config, train_dataset=rows, processing_class=tokenizer, peft_config=lora
    )
    # TRL cuts and drops rows itself: should its count differ from ours, say so here, not "num_samples=0" later.
    if len(trainer.train_dataset) != fitted["rows_kept"]:
        raise SystemExit(
            f"TRL kept {len(trainer.train_dataset)} of {rows.num_rows} rows at teach.max_length={spec['max_length']}, "
            f"{fitted['rows_kept']} expected: the chat template's assistant mask and TRL's differ"
        )
    trained_at = time.monotonic()
    trainer.train()
    adapter = out / "adapter"
    trainer.model.save_pretrained(str(adapter))
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    result = {
        "rows": rows.num_rows,
        "fit": fitted,
        "steps": trainer.state.global_step,
        "losses": losses,
        "train_s": round(time.monotonic() - trained_at, 1),
        "total_s": round(time.monotonic() - started, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "versions": {m: sys.modules[m].__version__ for m in ("torch", "transformers", "peft", "trl")},
    }
    (out / "result.json").write_text(json.dumps(result, indent=2))


def assistant_masks(rows: Any, tokenizer: Any) -> list[list[int]]:
    """Each row's assistant-token mask, tokenized as TRL does (the chat template with the row's tools)."""
    masks = []
    for row in rows:
        tools = json.loads(row["tools"]) if isinstance(row["tools"], str) else row["tools"]
        out = tokenizer.apply_chat_template(
            row["messages"], tools=tools, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        masks.append(list(out["assistant_masks"]))
    return masks


def prepare(model: str, cache: str) -> None:
    """Print the plain folder of `model` (converting a GGUF file once)."""
    from dareforge.teach.model import plain_folder

    print(plain_folder(model, Path(cache)))


if __name__ == "__main__":
    if sys.argv[1] == "prepare":
        prepare(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1])
