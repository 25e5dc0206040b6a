"""Error types. Each names the thing that is wrong and the fix, so a person can act on the message alone."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dareforge.locking import LockHolder


class DareforgeError(Exception):
    """Base for errors a user can fix (bad input, missing credentials, bad config)."""


class ConfigError(DareforgeError):
    pass


class StoreError(DareforgeError):
    pass


class StoreBusyError(StoreError):
    """A store lock is held by another process (or thread) and the caller chose not to wait."""

    def __init__(self, name: str, path: Path, holder: LockHolder):
        self.name, self.path, self.holder = name, path, holder
        super().__init__(
            f"{name} is in use by {holder.describe()}; wait for it to finish, or stop it (its lock file "
            f"{path} is released when that process ends)"
        )


class SourceError(DareforgeError):
    """A source could not be crawled; the crawl records it and goes on with the others."""

    status = "failed"


class NeedsRulesError(SourceError):
    """Kaggle refuses the download until the account accepts the competition's rules."""

    status = "needs-rules"

    def __init__(self, message: str, rules_url: str):
        super().__init__(message)
        self.rules_url = rules_url


class UnsafeArchiveError(SourceError):
    pass


class UnsafeFileError(SourceError):
    """A local file the crawl will not read: a symbolic link, a special file, or one swapped while copied."""


class CredentialsError(DareforgeError):
    pass


class TransientError(DareforgeError):
    """An error worth retrying (rate limit, 5xx, dropped connection)."""
