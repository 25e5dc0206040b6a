"""The one LLM client for every use (probe, agent, judge): OpenAI-compatible, cached, rate-limited, retried."""

from dareforge.llm.cache import cache_key, cache_path
from dareforge.llm.client import (
    ChatResult,
    LLMClient,
    LLMError,
    RateLimiter,
    Usage,
    clients_from_config,
    gather_chats,
    write_usage,
)

__all__ = [
    "ChatResult",
    "LLMClient",
    "LLMError",
    "RateLimiter",
    "Usage",
    "cache_key",
    "cache_path",
    "clients_from_config",
    "gather_chats",
    "write_usage",
]
