"""Publish: freeze released tasks into versioned releases, copy them to targets, export other layouts.

- `release.build_release` / `list_versions` / `load_release` / `verify_release`: the store's releases;
- `targets.LocalTarget` (and the `Target` protocol a Hub target implements): copy a finished version out;
- `export.export_dare_bench`: DARE-bench's own folder layout, so its tools can run our tasks.
"""

from dareforge.publish.release import (
    Release,
    ReleaseError,
    ReleaseResult,
    build_release,
    list_versions,
    load_release,
    verify_release,
)

__all__ = [
    "Release",
    "ReleaseError",
    "ReleaseResult",
    "build_release",
    "list_versions",
    "load_release",
    "verify_release",
]
