"""Reading the config: defaults, overlaid by `dareforge.yaml`, overlaid by `DAREFORGE_*` env vars (the schema is
`dareforge.config`).

Env vars address nested fields with double underscores and take YAML values, e.g.
`DAREFORGE_RULES__MAX_TOTAL_BYTES=1e9` or `DAREFORGE_MIRROR__PATHS='[/srv/kaggle-mirror]'`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from dareforge.config import CONFIG_ENV, DEFAULT_CONFIG_FILE, ENV_PREFIX, Config
from dareforge.config_limits import BOUND_WHY
from dareforge.errors import ConfigError


def env_var(key: str) -> str:
    """The environment variable that sets a dotted config key: `store.root` -> `DAREFORGE_STORE__ROOT`."""
    return ENV_PREFIX + key.replace(".", "__").upper()


MAX_VALUES = 1_000_000
"""Most values a config may resolve to: far more than any real one holds, and few enough to walk in a second,
however many times its anchors are repeated by aliases (a "billion laughs" document)."""


def _parse_yaml(text: str, where: str, fix: str) -> Any:
    """`text` as YAML, or a one-line ConfigError naming where the text came from, what is wrong and `fix`."""
    try:
        data = yaml.safe_load(text)
    except RecursionError as exc:
        raise ConfigError(f"{where}: not valid YAML (nested too deeply); {fix}") from exc
    except yaml.YAMLError as exc:
        # str(exc) quotes the text over several lines; the problem and its position are what a person needs.
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{where}: not valid YAML ({problem}{at}); {fix}") from exc
    _check_resolves(data, where, fix)
    return data


def _check_resolves(data: Any, where: str, fix: str) -> None:
    """A ConfigError unless `data` is a finite tree of at most MAX_VALUES values. YAML's anchors and aliases
    let a few lines hold a list that contains itself (`a: &a [*a]`) or repeat a value a billion times; either
    would hang or crash whatever walks the config next (merging, validation, a fingerprint)."""
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    values = 0
    while stack:
        node, leaving = stack.pop()
        if leaving:
            on_path.discard(id(node))
            continue
        values += 1
        if values > MAX_VALUES:
            raise ConfigError(
                f"{where}: expands to more than {MAX_VALUES:,} values (anchors repeated by aliases); {fix}"
            )
        if isinstance(node, dict | list):
            if id(node) in on_path:
                raise ConfigError(f"{where}: an alias refers to a value that holds it (a loop); {fix}")
            on_path.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in (node.values() if isinstance(node, dict) else node))


ENV_YAML_FIX = "env values are YAML (quote text holding [ { : or #); fix the value or unset the variable"


def _env_overrides(environ: dict[str, str]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for key in sorted(environ):
        if not key.startswith(ENV_PREFIX) or key == CONFIG_ENV:
            continue
        path = key[len(ENV_PREFIX) :].lower().split("__")
        node = tree
        for depth, part in enumerate(path[:-1], start=1):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):  # a variable set this whole section to a value, not a mapping
                whole = ENV_PREFIX + "__".join(path[:depth]).upper()
                raise ConfigError(
                    f"{whole} and {key} both set {'.'.join(path[:depth])}: give the section as a YAML mapping "
                    f"in {whole}, or its keys one by one, not a value and keys"
                )
        node[path[-1]] = _parse_yaml(environ[key], f"{key}={environ[key]!r}", ENV_YAML_FIX)
    return tree


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _read_file(file: Path) -> dict[str, Any]:
    pointer = f"point --config or {CONFIG_ENV} at a readable YAML file"
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:  # a folder, or a file this user may not read
        raise ConfigError(f"config file {file} cannot be read ({exc.strerror}); {pointer}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {file} is not UTF-8 text (byte {exc.start}: {exc.object[exc.start : exc.start + 1]!r}); "
            "save it as UTF-8"
        ) from exc
    data = _parse_yaml(text, str(file), "fix the syntax or remove the file") or {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{file}: expected a mapping of sections at the top level, got {type(data).__name__}"
        )
    return data


def _problem(error: Any, file: Path, environ: dict[str, str]) -> str:
    """One pydantic error as one line: the key, the value given, what is wrong, and where it was set."""
    loc = [str(part) for part in error["loc"]]
    value = "" if error["type"] == "missing" else f" = {json.dumps(error['input'], default=str)}"
    # The longest key an env var sets wins over the file; a list item is set by the variable of its list.
    names = (env_var(".".join(loc[:end])) for end in range(len(loc), 0, -1))
    origin = next((f"env {name}" for name in names if name in environ), f"file {file}")
    bound = BOUND_WHY.get(error.get("ctx", {}).get("le")) if error["type"] == "less_than_equal" else None
    why = f", {bound}" if bound else ""
    return f"config: {'.'.join(loc)}{value}: {error['msg']}{why} (set in {origin})"


def load_config(path: str | Path | None = None, environ: dict[str, str] | None = None) -> Config:
    """Defaults, overlaid by the config file, overlaid by `DAREFORGE_*` env vars. A mistake is a ConfigError
    naming the file or variable, with one line per bad key."""
    environ = dict(os.environ if environ is None else environ)
    explicit = path or environ.get(CONFIG_ENV)
    file = Path(explicit or DEFAULT_CONFIG_FILE)
    if file.exists():
        data = _read_file(file)
    elif explicit:
        raise ConfigError(
            f"config file {file} does not exist; create it or point --config or {CONFIG_ENV} elsewhere"
        )
    else:
        data = {}
    try:
        return Config.model_validate(_merge(data, _env_overrides(environ)))
    except ValidationError as exc:
        raise ConfigError("\n".join(_problem(e, file, environ) for e in exc.errors())) from exc
