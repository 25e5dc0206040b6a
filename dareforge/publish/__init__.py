"""Publish: freeze released tasks into versioned releases and copy them to targets.

- `release.build_release` / `list_versions` / `load_release` / `verify_release`: the store's releases;
- `versions`: how releases and exports are versioned, listed and loaded;
- `targets.LocalTarget` (and the `Target` protocol a Hub target implements): copy a finished version out.

Other benchmarks' layouts of a release are export formats (`dareforge.exports`).
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
