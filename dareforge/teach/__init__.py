"""`dareforge teach`: does training on an SFT export make an agent better? (DataComp's method on our corpus.)

A fixed proxy model and a fixed recipe (LoRA through TRL's SFTTrainer, loss on the assistant turns only,
seeded) are trained on the train split of a release's SFT export (`tools` config); then the base model and the
tuned one are served through an OpenAI-compatible endpoint and played by `dareforge.agents.evaluate`, unchanged,
on the release's test split (tasks from other sources) with the same sandbox, limits, protocol and samples. Per
family: pass rate and mean score before and after, with bootstrap intervals over tasks. Only the data varies
between variants (gold trajectories only, gold plus sampled).

The modules here need no torch and are tested by `make test`: `corpus` (which rows train, the disjointness
check), `stats` (the intervals), `card` (the export card's section), `record` (the store record) and `run` (the
orchestration, which starts the torch parts as child processes of `.venv-teach`'s interpreter). `train` and
`serve` (with `model`, what they share) import torch and run only in `.venv-teach` (`make teach`).
"""
