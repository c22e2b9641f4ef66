"""The three commands say one idea with one flag: the token from --token-file or
$GPUBENCH_TOKEN (gpubench's old --token works, hidden, for one release), --tls and --ca
on every client of a collector. Against a real collector (gRPC on port 0, DuckDB)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpubench.agent.cli import main as agent
from gpubench.cli import cli
from gpubench.collector.cli import cli as collector_cli

CLEAN_ENV = {"GPUBENCH_TOKEN": None, "GPUBENCH_TOKEN_FILE": None, "GPUBENCH_COLLECTOR": None}


@pytest.fixture
def token_file(collector: Any, tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(collector.make_token("lab") + "\n")
    return path


@pytest.mark.parametrize("where", ["before", "after"])
def test_gpubench_reads_the_token_from_a_file(collector: Any, token_file: Path,
                                              make_run: Any, where: str) -> None:
    from gpubench.client import Client

    with Client(collector.address, collector.admin_token) as client:
        client.submit_run(make_run())
    connection = ["--collector", collector.address, "--token-file", str(token_file)]
    args = [*connection, "runs", "list", "--format", "json"] if where == "before" else \
        ["runs", "list", "--format", "json", *connection]
    done = CliRunner(env=CLEAN_ENV).invoke(cli, args)
    assert done.exit_code == 0, done.output
    assert len(json.loads(done.stdout)) == 1


def test_a_wrong_token_file_names_the_flag(collector: Any, tmp_path: Path) -> None:
    wrong = tmp_path / "token"
    wrong.write_text("gpb_wrong\n")
    done = CliRunner(env=CLEAN_ENV).invoke(
        cli, ["--collector", collector.address, "--token-file", str(wrong), "runs", "list"])
    assert done.exit_code == 4, done.output
    assert "--token-file" in done.output


def test_an_empty_token_file_is_a_usage_error(tmp_path: Path) -> None:
    empty = tmp_path / "token"
    empty.write_text("\n")
    done = CliRunner(env=CLEAN_ENV).invoke(cli, ["--token-file", str(empty), "runs", "list"])
    assert done.exit_code == 2 and "holds no token" in done.output, done.output


def test_the_old_token_flag_still_works_but_is_not_offered(collector: Any) -> None:
    done = CliRunner(env=CLEAN_ENV).invoke(
        cli, ["--collector", collector.address, "--token", collector.admin_token, "runs",
              "list", "--format", "json"])
    assert done.exit_code == 0, done.output
    helps = CliRunner().invoke(cli, ["--help"]).output + \
        CliRunner().invoke(cli, ["runs", "list", "--help"]).output
    assert "--token-file" in helps and "--token " not in helps


@pytest.mark.parametrize(("group", "args"), [(cli, ["--help"]), (agent, ["run", "--help"]),
                                             (agent, ["push", "--help"])])
def test_every_client_offers_tls_ca_and_the_token_file(group: Any, args: list[str]) -> None:
    text = CliRunner().invoke(group, args).output
    for flag in ("--tls", "--ca", "--token-file"):
        assert flag in text, (flag, text)


def test_the_three_commands_help_at_80_columns_in_a_wide_terminal() -> None:
    for group, args in ((cli, ["--help"]), (cli, ["compare", "--help"]),
                        (agent, ["run", "--help"]), (collector_cli, ["serve", "--help"])):
        text = CliRunner(env={"COLUMNS": "200"}).invoke(group, args).output
        assert max(map(len, text.splitlines())) <= 80, text


@pytest.mark.parametrize("flag", [["--format", "json"], ["--json"]])
def test_the_agent_says_json_with_format_as_gpubench_does(tmp_path: Path,
                                                          flag: list[str]) -> None:
    """--format json, and --json, the old spelling kept hidden, print the same listing."""
    done = CliRunner(env=CLEAN_ENV).invoke(agent, ["status", "--spool", str(tmp_path),
                                                   *flag])
    assert done.exit_code == 0, done.output
    json.loads(done.stdout)
    assert "--json" not in CliRunner().invoke(agent, ["status", "--help"]).output
