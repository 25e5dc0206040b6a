"""The request cache: one JSON file per request, keyed by a hash of everything that determines the response.

Key = sha256 of the canonical JSON of (cache format version, base URL, model, messages, every sampling
parameter, sample index). The API key, timeout and retry settings are not in the key: they change whether a
request succeeds, not what it answers. Entries live at `llm-cache/<endpoint>/<key[:2]>/<key>.json` and are
written atomically by the store, so a reader never sees half an entry.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from dareforge.errors import StoreError
from dareforge.store import Store

log = logging.getLogger("dareforge.llm")

CACHE_PREFIX = "llm-cache"
CACHE_VERSION = 1


def request_identity(
    base_url: str,
    model: str,
    messages: list[dict[str, Any]],
    params: dict[str, Any],
    n_sample: int,
) -> dict[str, Any]:
    """What a response depends on, as plain JSON (stored beside the response, hashed into the key)."""
    return {
        "v": CACHE_VERSION,
        "base_url": base_url.rstrip("/"),
        "model": model,
        "messages": messages,
        "params": params,
        "n_sample": n_sample,
    }


def cache_key(identity: dict[str, Any]) -> str:
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def cache_path(endpoint: str, key: str) -> str:
    return f"{CACHE_PREFIX}/{endpoint}/{key[:2]}/{key}.json"


def read_entry(store: Store, endpoint: str, key: str) -> dict[str, Any] | None:
    """The stored entry, or None when absent; an unreadable entry is logged and treated as absent."""
    path = cache_path(endpoint, key)
    try:
        entry = store.read_json(path)
    except StoreError:
        return None
    except (ValueError, UnicodeDecodeError) as exc:
        log.warning("llm cache %s is unreadable (%s); requesting again and overwriting it", path, exc)
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("result"), dict):
        log.warning("llm cache %s has no result; requesting again and overwriting it", path)
        return None
    return entry


def write_entry(store: Store, endpoint: str, key: str, entry: dict[str, Any]) -> None:
    store.write_json(cache_path(endpoint, key), entry)
