"""Probes of what a task really measures: can models solve it without its data (shortcuts), and do they score
because they recall a public dataset (memorization, measured on obscured variants)?

report = probe_shortcuts(ctx)        # no-data attempts; a `shortcut` finding per task; the gate re-runs
variants = obscure_tasks(ctx)        # renamed, rescaled, re-keyed twins with certified references
memo = probe_memorization(ctx)       # originals vs their variants, per model
"""

from dareforge.probes.memorization import MemorizationReport, ModelMemorization, probe_memorization
from dareforge.probes.obscure import ObscureMap, load_map, obscure_spec, obscure_tasks
from dareforge.probes.shortcut import PROBE_VERSION, probe_endpoints, probe_shortcuts

__all__ = [
    "PROBE_VERSION",
    "MemorizationReport",
    "ModelMemorization",
    "ObscureMap",
    "load_map",
    "obscure_spec",
    "obscure_tasks",
    "probe_endpoints",
    "probe_memorization",
    "probe_shortcuts",
]
