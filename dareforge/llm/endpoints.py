"""Which configured LLM endpoints a stage uses: one by name, or a section's list (`probe.endpoints`, ...), else
every `llm.endpoints` entry; an unknown name or none at all is a ConfigError saying what to set."""

from __future__ import annotations

from collections.abc import Iterable

from dareforge.config import EndpointConfig
from dareforge.context import RunContext
from dareforge.errors import ConfigError


def find_endpoint(ctx: RunContext, name: str) -> EndpointConfig:
    endpoints = ctx.config.llm.endpoints
    if not endpoints:
        raise ConfigError(
            "no LLM endpoints are configured; add one under `llm.endpoints` in dareforge.yaml "
            "(name, base_url, model; api_key_env for hosted APIs)"
        )
    for endpoint in endpoints:
        if endpoint.name == name:
            return endpoint
    known = ", ".join(repr(e.name) for e in endpoints)
    raise ConfigError(f"no endpoint named {name!r} under `llm.endpoints` (configured: {known})")


def endpoints_for(ctx: RunContext, names: Iterable[str] | None, section: str) -> list[EndpointConfig]:
    """`names`, else `<section>.endpoints` (probe, synthesize), else every `llm.endpoints` entry, without
    repeats; an unknown name or no endpoint at all is a ConfigError saying what to set."""
    chosen = list(names) if names is not None else list(getattr(ctx.config, section).endpoints)
    if not chosen:
        chosen = [e.name for e in ctx.config.llm.endpoints]
    if not chosen:
        raise ConfigError(
            f"no models for {section}: `llm.endpoints` is empty; add one in dareforge.yaml (name, base_url, "
            f"model; api_key_env for hosted APIs), and optionally pick some of them with `{section}.endpoints`"
        )
    return [find_endpoint(ctx, name) for name in dict.fromkeys(chosen)]
