"""What a stage did, in the one shape every stage returns: `StageReport`.

A stage fills its report as it works (the store keys it wrote, what it reused, what failed and why, what became
of each item it handled) and ends with its summary lines, in its own words; `dareforge.pipeline` adds the time
it took. The stage commands print the lines, `dareforge run` prints them stage after stage, and a DAG task
returns plain values taken from the report (store keys, labels, counts), so Airflow passes no data between tasks.
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import RenderableType

SHOWN = 5
"""Rejections and failures a summary names (the rest are in the store, and `dareforge sql` finds them)."""


@dataclass
class StageReport:
    stage: str
    written: list[str] = field(default_factory=list)
    """Store keys written, in order (a re-run that finds its work done writes none)."""
    reused: int = 0
    """Items found finished and left as they were: sources, framings, tasks or attempts (the stage says which)."""
    failures: dict[str, str] = field(default_factory=dict)
    """Label (a source, a `source/framing`, a task) -> why it failed."""
    outcomes: dict[str, dict[str, str]] = field(default_factory=dict)
    """What became of the items, by outcome (kept, framed, rejected, ...): label -> why, or "" when there is
    nothing to add."""
    counts: Counter[str] = field(default_factory=Counter)
    """The stage's tallies: sources per crawl action, drops per filter rule, framings per task type, tasks per
    family, rejections per check, attempts played."""
    seconds_in: dict[str, float] = field(default_factory=dict)
    """Seconds spent in named parts of the stage: `references` (generate: CPU seconds of the references it
    ran), `gx context` (validate: wall seconds creating the great-expectations context)."""
    lines: list[RenderableType] = field(default_factory=list)
    """The summary: rich markup strings, or renderables such as a table."""
    nothing_left: str | None = None
    """Why the stages after this one have nothing to work on (a run stops here and says so), or None."""
    seconds: float = 0.0
    """Wall seconds, as the spine measured them (a stage whose lines name its time measures itself too)."""
    cpu_seconds: float = 0.0
    """CPU seconds of this process and of the children it reaped (reference workers, sandboxes), measured by the
    spine."""

    def add(self, outcome: str, label: str, why: str = "") -> None:
        self.outcomes.setdefault(outcome, {})[label] = why

    def labels(self, outcome: str) -> list[str]:
        """The labels that had `outcome`, in the order the stage handled them."""
        return list(self.outcomes.get(outcome, {}))


def cpu_seconds() -> float:
    """User and system CPU of this process and of the children it has reaped."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def process_cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of a live process so far (all its threads), from /proc."""
    return _stat(pid)[1]


def _stat(pid: int) -> tuple[int, float]:
    """A live process's parent pid and CPU seconds so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_tree_cpu_seconds() -> float:
    """`cpu_seconds` plus the CPU so far of this process's live descendants: the helpers a process keeps until
    it exits (reference workers) are not reaped when a stage ends, and a task instance's cost includes theirs."""
    processes: dict[int, tuple[int, float]] = {}  # pid -> (parent pid, CPU seconds)
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):  # a process that ended while the others were read
                processes[int(entry.name)] = _stat(int(entry.name))
    live, parents = 0.0, [os.getpid()]
    while parents:
        parent = parents.pop()
        for pid, (ppid, cpu) in processes.items():
            if ppid == parent:
                live += cpu
                parents.append(pid)
    return cpu_seconds() + live
