"""`dareforge teach`: does training on the release's SFT export make an agent better? (see `dareforge.teach`)."""

from __future__ import annotations

from typing import Annotated

import typer

from dareforge.cli.app import ReleaseOption, command, context, out

PANEL = "Agents and training data"


@command(panel=PANEL)
def teach(
    release: ReleaseOption = "dareforge",
    model: Annotated[
        str | None, typer.Option(help="`embedded`, a local folder or a Hub id (default teach.model).")
    ] = None,
    device: Annotated[str | None, typer.Option(help="cpu or cuda (default teach.device).")] = None,
    variant: Annotated[
        list[str] | None,
        typer.Option("--variant", help="gold or gold+sampled (repeat; default teach.variants)."),
    ] = None,
    steps: Annotated[int | None, typer.Option(help="Optimizer steps (default teach.steps).")] = None,
    examples: Annotated[int | None, typer.Option(help="Training rows (default teach.examples).")] = None,
    tasks_per_family: Annotated[
        int | None, typer.Option(help="Test tasks per family (default teach.tasks_per_family).")
    ] = None,
) -> None:
    """Fine-tune a fixed proxy model (LoRA, TRL) on the release's SFT export (train split), then evaluate the base
    and the tuned model on the release's test split with `evaluate`'s sandbox, limits and protocol.

    Prints per family the pass rate and mean score before and after with 95% bootstrap intervals over tasks; the
    record goes in the store (teach/<export>/<version>/) and the export's card gets "What training on it did".
    Needs `make teach` (torch and TRL in .venv-teach).
    """
    from dareforge.teach.run import teach as teach_stage
    from dareforge.validators.audit import parse_release

    ctx = context()
    overrides = {
        k: v
        for k, v in {
            "model": model,
            "device": device,
            "variants": variant,
            "steps": steps,
            "examples": examples,
            "tasks_per_family": tasks_per_family,
        }.items()
        if v is not None
    }
    cfg = ctx.config.teach.model_validate({**ctx.config.teach.model_dump(), **overrides})
    name, version = parse_release(release)
    report = teach_stage(ctx, name, version, cfg)
    from dareforge.teach.card import section

    out.print(section(report.record))
    out.print(f"record: {ctx.store.path(report.record_key)}")
    rec = report.record
    out.print(f"wall {rec['wall_s']:.0f} s; peak memory {rec['peak_rss_mb']}")
