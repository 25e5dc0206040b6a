"""dareforge: verified tasks and training corpora for LLM data-science agents, from real tabular sources."""

__version__ = "0.1.0"
