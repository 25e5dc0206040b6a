"""Exports of a release, every format registered by name in `registry` (one module and one class per format):

- training data, versioned in the store like releases (`exports/<release>-<format>/<version>/`, see `base`):
  `sft` (chosen trajectories as chat records), `rl` (tasks as prompts with a reward spec; `reward` scores an
  attempt as DARE-bench rewarded it);
- other benchmarks' folder layouts of a whole release, written to a folder: `dare_bench`, `kramabench`,
  `harbor` (Harbor task folders, each checked by control runs in the sandbox: `harbor_control`, `harbor_grader`).

`registry.export_format(name).export(ExportJob(...))` runs one; `dareforge export`, the corpus stage and the SFT
DAG do. A finished training export (`base.Export`) is published like a release (`LocalTarget`, `HubTarget`).

This module imports nothing else: the CLI reads the registry on every start.
"""

from dareforge.errors import DareforgeError


class ExportError(DareforgeError):
    pass
