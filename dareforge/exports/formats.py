"""The export formats by name: registering one is a line here, naming the module that holds its class (a
`TrainingExport` or a `FolderLayout`, see `base`).

An entry names its class rather than importing it: `dareforge --help` lists the formats on every start, and
importing every writer would cost each start about 2 s.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING

from dareforge.exports import ExportError

if TYPE_CHECKING:
    from dareforge.exports.export_format import ExportFormat


@dataclass(frozen=True)
class Registered:
    where: str  # "module:Class"
    summary: str  # what `dareforge export --help` says the format writes


FORMATS: dict[str, Registered] = {
    "sft": Registered("dareforge.exports.sft:SftExport", "chosen trajectories as chat messages"),
    "rl": Registered("dareforge.exports.rl:RlExport", "tasks with a reward spec"),
    "dare-bench": Registered("dareforge.exports.dare_bench:DareBenchLayout", "DARE-bench's own layout"),
    "kramabench": Registered(
        "dareforge.exports.kramabench:KramaBenchLayout", "KramaBench's workload (QA and Lake tasks)"
    ),
    "harbor": Registered(
        "dareforge.exports.harbor:HarborLayout",
        "Harbor (Terminal-Bench 2) task folders whose oracle earns 1, a sample per family run",
    ),
}


def export_format(name: str) -> ExportFormat:
    """The format registered as `name`."""
    entry = FORMATS.get(name)
    if entry is None:
        raise ExportError(f"no export format {name!r}; the registered formats are {', '.join(FORMATS)}")
    module, cls = entry.where.split(":")
    return getattr(import_module(module), cls)(name)
