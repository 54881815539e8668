"""The command line, without Docker: help, listing and validation of files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ssebench.cli import main
from tests.helpers import DEMO, write_dataset

COMMANDS = [
    ["tasks", "list"],
    ["dataset", "validate"],
    ["images", "build"],
    ["images", "bootstrap"],
    ["run"],
    ["doctor"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_explains_itself(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([*command, "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: ssebench " + " ".join(command))
    # A description sentence beyond the usage line.
    assert len(text.split("\n\n")[1].strip()) > 20


def test_tasks_list_json_lists_the_demo(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "list", str(DEMO), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {(r["id"], r["language"]) for r in rows} == {("c-demo", "c"), ("go-demo", "go"), ("rust-demo", "rust")}
    assert all(r["checks"] == ["build", "poc", "function_test", "intent_test"] for r in rows)


def test_tasks_list_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "list", str(DEMO)]) == 0
    out = capsys.readouterr().out
    assert "go-demo" in out and out.rstrip().endswith("3 task(s)")


def _break(dataset: Path, how: str) -> None:
    task = dataset / "tiny-1"
    config_path = task / "sse" / "config.yaml"
    data = yaml.safe_load(config_path.read_text())
    if how == "unknown key":
        data["colour"] = "blue"
    elif how == "missing key":
        del data["language"]
    elif how == "absolute path":
        data["files"]["patch"] = "/ssebench/diffs/patch.diff"
    elif how == "missing file":
        (task / "sse" / "pocs" / "crash.bin").unlink()
    elif how == "invalid id":
        data["id"] = "-bad-"
    config_path.write_text(yaml.safe_dump(data))


EXPECTED = {
    "unknown key": "colour: unknown key",
    "missing key": "language: required key is missing",
    "absolute path": "files.patch: '/ssebench/diffs/patch.diff' is absolute",
    "missing file": "files.poc[0]: 'pocs/crash.bin' does not exist",
    "invalid id": "id: '-bad-' is not a valid task id",
}


@pytest.mark.parametrize("how", list(EXPECTED))
def test_validate_prints_one_line_per_problem(tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = write_dataset(tmp_path)
    _break(dataset, how)
    assert main(["dataset", "validate", str(dataset), "--no-build"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(str(dataset / "tiny-1" / "sse" / "config.yaml"))
    assert EXPECTED[how] in lines[0]


def test_validate_accepts_the_demo_files(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dataset", "validate", str(DEMO), "--no-build"]) == 0
    assert "3 task(s): config.yaml and files OK" in capsys.readouterr().out


def test_unknown_agent_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = write_dataset(tmp_path)
    assert main(["images", "build", str(dataset), "--agent", "nobody"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no agent 'nobody'" in err[0] and "dummy" in err[0]


@pytest.mark.parametrize("value", ["0", "17", "two"])
def test_bad_jobs_value_names_the_flag(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["images", "build", "--jobs", value])
    assert info.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--jobs" in last and "1 to 16" in last and repr(value) in last


def test_ps_reads_the_phase_from_the_entrypoints_own_lines() -> None:
    from ssebench.inflight import phase_of

    said = [
        "[ssebench-entrypoint 12:00:01] daemon ready",
        "[ssebench-entrypoint 12:00:02.125] MCP server ready",
        "[ssebench-entrypoint 12:00:02] agent: sleep 600 (timeout 3600 s, difficulty 2)",
        "[ssebench-entrypoint 12:10:02] agent exited with status 0 after 600.0 s",
        "[ssebench-entrypoint 12:12:00] graded: failed",
    ]
    phases = [phase_of("\n".join(said[:n])) for n in range(len(said) + 1)]
    assert phases == ["starting", "starting", "starting", "agent", "grading", "finishing"]
    # Other output (the daemon's, say) never sets a phase; only whole entrypoint lines do.
    assert phase_of(said[2] + "\nagent exited with status 0\n x [ssebench-entrypoint 1:2:3] graded: x") == "agent"


def test_run_refuses_open_egress_over_ray_before_connecting(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "run",
                "--task",
                str(DEMO / "c-demo"),
                "--agent",
                "dummy",
                "--dispatch",
                "ray",
                "--egress",
                "open",
                "--ray-address",
                "127.0.0.1:1",
            ]
        )
        == 2
    )
    assert "--egress open with --dispatch ray" in capsys.readouterr().err


def test_run_refuses_a_cluster_beyond_loopback_without_token_auth(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    status = main(
        [
            "run",
            "--task",
            str(DEMO / "c-demo"),
            "--agent",
            "dummy",
            "--dispatch",
            "ray",
            "--ray-address",
            "10.9.9.9:6379",
        ]
    )
    assert status != 0
    assert "start the cluster with token authentication" in capsys.readouterr().err
