"""Error types. Each names the thing that is wrong and the fix, so a person can act on the message alone."""


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
