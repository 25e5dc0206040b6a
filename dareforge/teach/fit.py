"""How an SFT export's rows fit the training sequence length, before TRL cuts them.

TRL's SFTTrainer cuts each tokenized row at `max_length` (keeping the start) and then drops every row left with
no assistant token, since it carries no loss. Our rows open with the system prompt, the tools' JSON schema and
the task (about 700 to 1,700 tokens with the embedded model's tokenizer before the first assistant token), so a
short `teach.max_length` silently drops most rows, or all of them (TRL then stops with "num_samples=0"). `fit`
says, from the assistant masks the chat template gives, how many rows survive and how much of the assistant text
trains, and refuses a length that leaves no row. Torch-free (`.venv-teach` runs it in `train`, `make test` tests
it); it imports nothing of dareforge that needs the pipeline's packages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dareforge.errors import ConfigError


def fit(masks: Sequence[Sequence[int]], max_length: int) -> dict[str, Any]:
    """Figures of the rows whose assistant masks are `masks` (1 = an assistant token) cut at `max_length`.

    Raises ConfigError naming `teach.max_length` when no row keeps an assistant token."""
    if not masks:
        raise ConfigError("no training rows to fit into teach.max_length")
    firsts = [list(m).index(1) if 1 in m else len(m) for m in masks]
    kept = [m for m, first in zip(masks, firsts, strict=True) if first < max_length]
    if not kept:
        raise ConfigError(
            f"teach.max_length={max_length} leaves none of the {len(masks)} training rows an assistant token to "
            f"learn from (the system prompt, tool schema and task fill it; the earliest assistant token is at "
            f"{min(firsts)}, the longest row has {max(len(m) for m in masks)} tokens): raise teach.max_length "
            f"above {min(firsts)}, e.g. to {max(firsts) + 256} to keep every row"
        )
    assistant = sum(sum(m) for m in masks)
    return {
        "max_length": max_length,
        "rows_kept": len(kept),
        "rows_dropped": len(masks) - len(kept),
        "rows_cut": sum(len(m) > max_length for m in masks),
        "longest": max(len(m) for m in masks),
        "assistant_tokens": assistant,
        "assistant_tokens_trained": sum(sum(m[:max_length]) for m in kept),
    }
