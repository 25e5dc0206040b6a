"""Helpers a process starts once and keeps for every source it handles: reference workers, the great-expectations
context.

Starting them costs more than most sources' own work (a reference worker imports scikit-learn: about 1.5 CPU-s;
a GX context: seconds), and a process of `dareforge run`'s pool handles hundreds of sources, one stage call each.
Each helper is closed when its process ends (`multiprocessing.util.Finalize` runs in pool workers, where atexit
does not), so its own processes are reaped and their CPU seconds counted. A forked child never reuses its
parent's helpers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable
from multiprocessing import util
from typing import Any, TypeVar

T = TypeVar("T")

_kept: dict[Hashable, Any] = {}
_owner = os.getpid()


def kept(key: Hashable, start: Callable[[], T], close: Callable[[T], None] | None = None) -> T:
    """This process's helper under `key`, started by `start()` on first use; `close(helper)` runs at exit."""
    global _owner
    if _owner != os.getpid():  # a forked child: the helpers' pipes and processes are the parent's
        _kept.clear()
        _owner = os.getpid()
    if key not in _kept:
        helper = _kept[key] = start()
        if close is not None:
            util.Finalize(None, close, args=(helper,), exitpriority=10)
    return _kept[key]
