"""The proxy model as transformers loads it (runs in `.venv-teach` only: imports torch).

A GGUF file (the embedded SmolLM2) loads with `gguf_file=` dequantized to float32, but the Trainer refuses a
model loaded that way ("quantized with QuantizationMethod.GGUF"): the config's `quantization_config` is cleared
and the model saved as a plain folder once (`plain_folder`, atomic: a temp folder renamed), which training and
serving then load. The chat template is TRL's bundled one named by `teach.chat_template`, the same for training
(its `{% generation %}` marks give the assistant mask) and serving, so the served model is asked in the form it
was trained on.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any


def chat_template(name: str) -> str:
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("trl is not installed in this interpreter: run `make teach`")
    path = Path(spec.submodule_search_locations[0]) / "chat_templates" / f"{name}.jinja"
    if not path.is_file():
        raise RuntimeError(f"TRL ships no chat template {name!r} (teach.chat_template): no {path}")
    return path.read_text(encoding="utf-8")


def plain_folder(model: str, cache: Path) -> Path:
    """A folder `from_pretrained` loads without GGUF: `model` itself unless it is a .gguf file."""
    if not model.endswith(".gguf"):
        return Path(model)  # a folder, or a Hub id (transformers resolves it)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = cache / Path(model).stem
    if (target / "config.json").is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=cache, prefix=f".{target.name}-"))
    try:
        gguf = Path(model)
        loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        # The weights are plain float32 already: drop the GGUF quantizer and its config so the model saves
        # (and later trains) as an ordinary one.
        loaded.hf_quantizer = None
        loaded.is_quantized = False
        if hasattr(loaded.config, "quantization_config"):
            del loaded.config.quantization_config
        loaded.save_pretrained(tmp)
        AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(tmp)
        if not target.exists():  # another process may have converted it meanwhile
            os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def load(
    folder: Path | str, template: str, device: str, adapter: Path | None = None, dtype: str = "float32"
) -> tuple[Any, Any]:
    """Model (with the LoRA adapter merged when given) in `dtype`, and the tokenizer carrying `template`.

    The weights load and merge in float32 and are cast last, so base and tuned are rounded the same way."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.chat_template = chat_template(template)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    model.to(device=device, dtype=getattr(torch, dtype))
    model.eval()
    return model, tokenizer
