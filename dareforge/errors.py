"""Error types. Each names the thing that is wrong and the fix, so a person can act on the message alone."""

from __future__ import annotations

import errno
import os


class DareforgeError(Exception):
    """Base for errors a user can fix (bad input, missing credentials, bad config)."""


class ConfigError(DareforgeError):
    pass


class StoreError(DareforgeError):
    pass


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


MACHINE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
"""A full or read-only disk: the machine is at fault, never one source."""


def filesystem_errno(exc: BaseException) -> int | None:
    """The errno of a file system error: an OSError's own, or a machine errno DuckDB names in its message (it
    raises its own IOException with the system's words, not an OSError)."""
    if isinstance(exc, OSError):
        return exc.errno
    import duckdb  # here: errors is imported everywhere, duckdb is heavy, and only this asks it

    if isinstance(exc, duckdb.IOException):
        return machine_errno_named_in(str(exc))
    return None


def machine_errno_named_in(text: str) -> int | None:
    """The machine errno whose system message `text` quotes, for libraries that report one only in words."""
    return next((code for code in sorted(MACHINE_ERRNOS) if os.strerror(code) in text), None)


def machine_at_fault(exc: BaseException) -> bool:
    """Whether a stage that records a source's failure and goes on must stop instead: every later source would
    fail the same way, and the recorded failure would outlive its cause once space is freed."""
    return filesystem_errno(exc) in MACHINE_ERRNOS
