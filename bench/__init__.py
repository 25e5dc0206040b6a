"""Benchmarks: `make bench`. Each prints its figures and a ratio against a baseline measured in the same run."""
