"""The command line as a user runs it: same stage functions, readable output, help on every command."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from dareforge.cli import app

COMMANDS = ["crawl", "filter", "run", "sources", "sql"]


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(
        "DAREFORGE_BUILTIN__INCLUDE", "[sklearn-iris, sklearn-wine, statsmodels-longley, vega-airports]"
    )
    monkeypatch.setenv(
        "DAREFORGE_LLM__LOCAL__ENABLED", "false"
    )  # the same run whether or not it is installed
    runner = CliRunner()

    def invoke(*args: str):
        result = runner.invoke(app, ["-q", "--store", str(tmp_path / "store"), *args], catch_exceptions=False)
        return result

    return invoke


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_teaches_with_help(command):
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0
    assert "Usage:" in result.output and len(result.output.splitlines()) > 5


def test_run_summarises_and_sql_answers_why(cli):
    result = cli("run")
    assert result.exit_code == 0, result.output
    assert "crawl: 4 sources seen (4 downloaded)" in result.output
    assert "filter: 3 kept, 1 dropped" in result.output and "enough-rows" in result.output
    # The airports table names no target and none of its columns is one: no task, and the reason says so.
    assert "understand: 2 sources framed (2 classification), 1 without a task" in result.output
    assert "builtin.vega-airports" in result.output

    assert "models: none (the local model is disabled" in result.output
    assert re.search(
        r"gold on dareforge@\S+ train: (\d+) IF/QA/Lake tasks, \1 verified, 0\s+not\s+verified", result.output
    )
    assert re.search(r"QA [1-9]\d*,\s+Lake [1-9]", result.output)  # question tasks from the same run
    assert re.search(r"sft export: dareforge-sft@\S+ \(new version\)", result.output)
    assert re.search(r"rl export: dareforge-rl@\S+ \(new version\)", result.output)

    again = cli("run")
    assert "crawl: 4 sources seen (4 unchanged); 0 records written" in again.output
    assert "0 decision files written" in again.output
    assert re.search(r"sft export: dareforge-sft@\S+ \(unchanged\)", again.output)
    exported = cli("export", "--format", "rl", "--to", "published-rl")
    assert exported.exit_code == 0 and "(unchanged)" in exported.output and "copied to" in exported.output
    probe = cli("probe")  # no endpoint and the local model off: a clear error, not a traceback
    assert probe.exit_code == 2 and "llm.endpoints" in probe.output and "Traceback" not in probe.output

    answer = cli(
        "sql",
        "select rule, count(*) as n from filter_decisions where not kept group by rule order by rule",
        "--format",
        "json",
    )
    assert json.loads(answer.output) == [{"rule": "enough-rows", "n": 1}]
    why = cli("sources", "--why", "builtin.sklearn-iris", "--format", "json")
    assert why.exit_code == 0 and "classification-species" in why.output and "enough-rows" in why.output


def test_sources_lists_by_status_and_verdict(cli):
    cli("run")
    dropped = cli("sources", "--dropped").output
    assert "builtin.vega-airports" in dropped and "builtin.sklearn-iris" not in dropped
    assert "builtin.sklearn-iris" in cli("sources", "--kept").output
    assert "builtin" not in cli("sources", "--status", "needs-rules").output.replace("sources", "")


def test_bad_sql_is_a_clear_error_not_a_traceback(cli):
    cli("crawl")
    result = cli("sql", "select nope from sources")
    assert result.exit_code == 2
    assert "nope" in result.output and "Traceback" not in result.output


def test_bad_config_names_the_field(cli, monkeypatch):
    monkeypatch.setenv("DAREFORGE_RULES__MIN_ROWS", "lots")
    result = cli("filter")
    assert result.exit_code == 2 and "rules.min_rows" in result.output
