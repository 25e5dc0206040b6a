from __future__ import annotations

from datetime import date

import pytest

from dareforge.config import load_config
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
    with pytest.raises(ConfigError, match=r"rules\.min_rowz: Extra inputs are not permitted"):
        load_config(file, environ={})
    with pytest.raises(ConfigError, match=r"rules\.min_rows: Input should be a valid integer"):
        load_config(environ={"DAREFORGE_RULES__MIN_ROWS": "many"})
    file.write_text("rules: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(file, environ={})
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(environ={"DAREFORGE_CONFIG": str(tmp_path / "missing.yaml")})


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
