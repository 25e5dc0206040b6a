"""The command line as a user runs it: same stage functions, readable output, help on every command."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dareforge.cli import app
from tests.stores import mirror_dataset

COMMANDS = ["crawl", "filter", "run", "sources", "sql"]


def _four_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "DAREFORGE_BUILTIN__INCLUDE", "[sklearn-iris, sklearn-wine, statsmodels-longley, vega-airports]"
    )
    monkeypatch.setenv(
        "DAREFORGE_LLM__LOCAL__ENABLED", "false"
    )  # the same run whether or not it is installed
    # One IF seed per framing, and the per-source stages in this process: the run's summary and stores read the
    # same with one seed as with the default three, and with one process as with a pool, whose start-up cost
    # a four-source run half its CPU (test_source_pool and test_reproducible run the pool).
    monkeypatch.setenv("DAREFORGE_GENERATE__IF_VARIANTS", "1")
    monkeypatch.setenv("DAREFORGE_RUN__JOBS", "1")


def _invoker(store: Path):
    """`dareforge -q --store STORE ARGS...` in this process."""
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, ["-q", "--store", str(store), *args], catch_exceptions=False)

    return invoke


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _four_sources(monkeypatch)
    return _invoker(tmp_path / "store")


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """One `dareforge run` of the four sources (the whole pipeline, two reference runs per task): the store it
    made and what it printed, shared by the tests that read them (a run cost each of them a minute of CPU)."""
    root = tmp_path_factory.mktemp("cli-run")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        _four_sources(mp)
        return root / "store", _invoker(root / "store")("run")


@pytest.fixture
def ran(first_run, tmp_path, monkeypatch):
    """The CLI on the store of `first_run`, and that run's result."""
    monkeypatch.chdir(tmp_path)
    _four_sources(monkeypatch)
    store, result = first_run
    return _invoker(store), store, result


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_teaches_with_help(command):
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0
    assert "Usage:" in result.output and len(result.output.splitlines()) > 5


def test_run_until_a_stage_that_does_not_exist_names_the_stages(cli):
    result = cli("run", "--until", "publish")
    assert result.exit_code == 2 and "the stages are crawl, filter" in result.output


def test_run_summarises_and_sql_answers_why(ran):
    cli, store, result = ran
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

    # The run's own figures, kept as a run log: what each stage cost and what the run accepted.
    assert re.search(
        r"run: [\d.]+ min on \d+ worker\(s\), [\d,]+ CPU-s \([\d.]+ per accepted task", result.output
    )
    (log,) = (store / "reports" / "runs").glob("*.json")
    record = json.loads(log.read_text())
    assert record["accepted"] > 0 and record["tasks"] >= record["accepted"] and record["peak_rss_bytes"] > 0
    assert {"crawl", "generate", "check", "validate", "release"} <= record["stages"].keys()
    assert record["failures"]["understand"]["builtin.vega-airports"]

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


def test_sources_lists_by_status_and_verdict(ran):
    cli, _, _ = ran
    dropped = cli("sources", "--dropped", "--format", "csv").output
    assert "builtin.vega-airports" in dropped and "builtin.sklearn-iris" not in dropped
    assert "builtin.sklearn-iris" in cli("sources", "--kept", "--format", "csv").output
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


def test_run_that_drops_every_source_says_why_and_what_to_set(cli, tmp_path, monkeypatch):
    rows = "".join(f"{i},{i * 7 % 13},{i % 2}\n" for i in range(300))
    mirror_dataset(tmp_path / "mirror", "undated", {"train.csv": f"a,b,y\n{rows}".encode()}, lastUpdated=None)
    monkeypatch.setenv("DAREFORGE_BUILTIN__ENABLED", "false")
    monkeypatch.setenv("DAREFORGE_MIRROR__PATHS", json.dumps([str(tmp_path / "mirror")]))
    result = cli("run")
    text = " ".join(result.output.split())
    assert result.exit_code == 2
    assert "crawl: 1 sources seen (1 downloaded)" in text and "filter: 0 kept, 1 dropped" in text
    assert (
        "the run stopped after filter: the filter dropped every source (1 in all): recent-enough dropped 1"
        in text
    )
    setting = """DAREFORGE_RULES__RECENCY_EXEMPT_ORIGINS='["builtin", "mirror"]'"""
    assert setting in text
    assert "generate" not in text and "nothing to release" not in text  # no stage ran on nothing

    monkeypatch.setenv("DAREFORGE_RULES__RECENCY_EXEMPT_ORIGINS", '["builtin", "mirror"]')  # as it says
    assert "filter: 1 kept, 0 dropped" in cli("filter").output


def test_run_that_fails_at_a_stage_prints_the_stages_before_it(cli, monkeypatch):
    monkeypatch.setenv("DAREFORGE_RULES__EXCLUSION_LISTS", "[nope]")
    result = cli("run")
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "Traceback" not in text
    assert "crawl: 4 sources seen (4 downloaded)" in text
    assert "the run stopped at filter: rules.exclusion_lists names unknown list 'nope'" in text
    assert "why a source was dropped" in text


def _mirror_source(root, name: str, csv_text: str) -> None:
    mirror_dataset(root, name, {"train.csv": csv_text.encode()})


@pytest.fixture
def mirror_cli(cli, tmp_path, monkeypatch):
    """The CLI over a mirror of two sources: `good` prepares, `ragged` (rows wider than its header) cannot."""
    root = tmp_path / "mirror"
    _mirror_source(
        root,
        "good",
        "a,b,y\n"
        + "".join(
            f"{i * 37 % 101},{i * 7 % 13},{i * 37 % 101 / 2 + 2 * (i * 7 % 13) + i * i % 17}\n"
            for i in range(300)
        ),
    )
    header_rows = "".join(f"{i},{i * 2},{i % 2}\n" for i in range(50))
    wide_rows = "".join(f"{i},{i},{i % 3},{i},{i}\n" for i in range(50, 300))
    _mirror_source(root, "ragged", "a,b,y\n" + header_rows + wide_rows)
    monkeypatch.setenv("DAREFORGE_BUILTIN__ENABLED", "false")
    monkeypatch.setenv("DAREFORGE_MIRROR__PATHS", json.dumps([str(root)]))
    assert "filter: 2 kept" in cli("crawl").output + cli("filter").output
    return cli


def test_prepare_lists_a_failed_source_with_its_reason_and_goes_on(mirror_cli):
    understood = " ".join(mirror_cli("understand").output.split())
    assert "1 without a task" in understood and "train.csv line 52 has 5 fields" in understood
    sources = ["--source", "mirror.someone--good", "--source", "mirror.someone--ragged"]
    result = mirror_cli("prepare", *sources)
    assert result.exit_code == 0, result.output
    assert "prepare: 1 prepared, 0 unchanged, 1 failed" in result.output
    assert "failed mirror.someone--ragged: " in result.output
    assert "mirror.someone--ragged: mirror.someone--ragged" not in result.output  # the id is said once


def test_generate_reports_why_prepare_failed_not_that_it_never_ran(mirror_cli):
    mirror_cli("understand")
    mirror_cli("prepare", "--source", "mirror.someone--ragged")
    result = mirror_cli("generate", "--source", "mirror.someone--ragged")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "failed mirror.someone--ragged: prepare failed for this source: the understand stage found" in text
    assert "train.csv line 52 has 5 fields" in text
    assert "run `dareforge prepare` first" not in text
    failures = mirror_cli("sql", "select source_id, reason from prepare_failures", "--format", "json")
    assert [row["source_id"] for row in json.loads(failures.output)] == ["mirror.someone--ragged"]


LONG_ID = "kaggle.someone--a-source-whose-slug-runs-on-and-on-for-a-while"
LONG_REASON = (
    "target 'y' is not a column of train.csv (columns: a, b, c, d, e); name it under sources.x.target "
    "in dareforge.yaml, or pick another file with sources.x.table"
)
WIDE_QUERY = f"select '{LONG_ID}' as source_id, 'target-identifiable' as rule, $${LONG_REASON}$$ as reason"


@pytest.fixture
def narrow(cli, monkeypatch):
    """The CLI printing tables to a console of the given width."""
    from dareforge.cli.app import out

    def at(width: int, *args: str):
        monkeypatch.setattr(out, "width", width)  # the one console every command module prints to
        return cli(*args)

    return at


def test_sql_table_on_a_narrow_console_cuts_tokens_and_wraps_prose_readably(narrow):
    result = narrow(60, "sql", WIDE_QUERY)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(map(len, lines)) <= 60
    assert any("│ kaggle.someone… │ target-identif… │" in line for line in lines)  # one line each, cut
    cells = [line.split("│")[3].strip() for line in lines if line.startswith("│")]
    assert " ".join(c for c in cells if c) == LONG_REASON  # every word whole, in order
    assert "--format csv or --format json prints them whole" in " ".join(result.output.split())


def test_sql_rows_print_as_records_when_columns_cannot_fit(narrow):
    result = narrow(40, "sql", WIDE_QUERY + ", 1 as n, true as kept")
    assert result.exit_code == 0, result.output
    assert "row 1" in result.output and "┃" not in result.output
    assert f"source_id: {LONG_ID}" in result.output.replace("\n", "")  # folded, but whole
    assert "rule: target-identifiable" in result.output
    assert "kept: True" in result.output
    assert " ".join(result.output.split()).count(" ".join(LONG_REASON.split())) == 1


def test_sql_csv_and_json_print_values_whole_and_tables_never_read_markup(narrow):
    csv_out = narrow(30, "sql", WIDE_QUERY, "--format", "csv").output
    assert csv_out.splitlines()[1] == f'{LONG_ID},target-identifiable,"{LONG_REASON}"'
    assert json.loads(narrow(30, "sql", WIDE_QUERY, "--format", "json").output)[0]["reason"] == LONG_REASON
    markup = narrow(80, "sql", "select '[red]x[/] [bold' as v, null as empty")
    assert markup.exit_code == 0 and "[red]x[/] [bold" in markup.output
