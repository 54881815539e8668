"""The command line, without Docker: help, listing and validation of files."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from ssebench.cli import main
from tests.helpers import DEMO, write_dataset

COMMANDS = [
    ["tasks", "list"],
    ["task", "new"],
    ["dataset", "validate"],
    ["dataset", "schema"],
    ["images", "build"],
    ["images", "bootstrap"],
    ["run"],
    ["doctor"],
    ["agents", "list"],
    ["models", "list"],
    ["results", "export"],
    ["view"],
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


def test_agents_list_shows_every_agent_and_whether_it_needs_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agents", "list", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert {"chat-agent", "dummy", "hollow", "reference"} <= set(rows)
    assert rows["chat-agent"]["needs_model"] is True and rows["reference"]["needs_model"] is False
    assert main(["agents", "list"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["AGENT", "VERSION", "MODEL", "SOFTWARE", "DESCRIPTION"] and len(table) == 1 + len(rows)
    rows_by_name = {line.split()[0]: line.split() for line in table[1:]}
    assert rows_by_name["dummy"][:3] == ["dummy", "1", "none"]
    assert rows_by_name["claude-code"][:4] == ["claude-code", "1", "anthropic-messages", "claude-agent-sdk==0.2.189"]
    codex = next(line for line in table if line.startswith("codex "))
    assert codex.split()[:2] == ["codex", "0.163.0"] and "openai-codex-cli-bin==0.163.0" in codex


def test_models_list_shows_who_serves_each_its_price_and_budget(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from ssebench.settings import get_settings

    (tmp_path / "remote.yaml").write_text(
        "name: remote\nbase_url: https://api.example.com/v1\nupstream_model: gpt-x\napi_key_env: EXAMPLE_KEY\n"
        "price: {input: 2.5, output: 10}\nbudget: {tokens: 2000000, cost: 5}\n"
    )
    monkeypatch.setenv("SSEBENCH_MODELS_DIR", str(tmp_path))
    get_settings.cache_clear()
    try:
        assert main(["models", "list"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].startswith("MODEL") and len(lines) == 2
        assert lines[1].split() == [
            "remote",
            "https://api.example.com/v1",
            "openai-chat",
            "2.5",
            "/",
            "10",
            "2,000,000",
            "tokens,",
            "$5",
        ]
        assert main(["models", "list", "--json"]) == 0
        [row] = json.loads(capsys.readouterr().out)
        assert row["budget"] == {"tokens": 2000000, "cost": 5.0} and row["upstream_model"] == "gpt-x"
        assert row["protocols"] == ["openai-chat"]
        (tmp_path / "broken.yaml").write_text("name: broken\nprice: cheap\n")
        assert main(["models", "list"]) == 1
        said = capsys.readouterr()
        # The broken file is said, and the model that can be used is still listed.
        assert "broken.yaml: price" in said.err and said.out.splitlines()[1].startswith("remote ")
    finally:
        get_settings.cache_clear()


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
    assert main(["dataset", "validate", str(dataset)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(str(dataset / "tiny-1" / "sse" / "config.yaml"))
    assert EXPECTED[how] in lines[0]


def test_a_schema_problem_and_a_missing_file_are_said_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = write_dataset(tmp_path)
    _break(dataset, "unknown key")
    _break(dataset, "missing file")
    assert main(["dataset", "validate", str(dataset)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == [
        "colour: unknown key (check its spelling against the file format: docs/formats.md)",
        "files.poc[0]: 'pocs/crash.bin' does not exist (looked for sse/pocs/crash.bin)",
    ]


def test_validate_checks_files_and_builds_nothing_unless_asked(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import ssebench.build

    built: list[object] = []

    def build_images(*args: object, **kwargs: object) -> SimpleNamespace:
        built.append(args)
        return SimpleNamespace(failures={})

    monkeypatch.setattr(ssebench.build, "build_images", build_images)
    for flags in ([], ["--no-build"]):  # the old flag is still accepted: it is the default now
        assert main(["dataset", "validate", str(DEMO), *flags]) == 0
        assert capsys.readouterr().out.strip() == "3 task(s): config.yaml and files OK" and not built
    assert main(["dataset", "validate", str(DEMO), "--build"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "3 task(s): images build" and len(built) == 1


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


def _tar(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, extra: int = 0) -> bytes:
    """An archive as the engine gives a container's file: one member (`extra` more of the same)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for n in range(1 + extra):
            info = tarfile.TarInfo(name if not n else f"{name}{n}")
            info.type, info.size = kind, len(data) if kind == tarfile.REGTYPE else 0
            if kind == tarfile.SYMTYPE:
                info.linkname = "/var/lib/ssebench/results/result.json"
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return out.getvalue()


def test_ps_reads_the_phase_the_entrypoint_wrote() -> None:
    from ssebench.inflight import phase_of
    from ssebench.runtime.contract import Phase, phase_record

    assert phase_of(None) == "starting"  # no phase file yet
    for phase in Phase:
        assert phase_of(_tar("phase", phase_record(phase, 1.0))) == phase.value


@pytest.mark.parametrize(
    "archive",
    [
        _tar("phase", b'{"phase": "graded: passed"}'),  # a word that is no phase
        _tar("phase", b'{"phase": "agent", "pad": "' + b"x" * 300 + b'"}'),  # longer than a phase file
        _tar("phase", b"agent\n"),  # not the record
        _tar("phase", kind=tarfile.SYMTYPE),  # a link, never followed
        _tar("phase", b'{"phase": "agent"}', extra=1),  # more than the one file
        b"not a tar at all",
        b"\0" * (64 * 1024),  # more than the host reads
    ],
)
def test_ps_prints_no_phase_from_anything_but_one_small_regular_file_naming_one(archive: bytes) -> None:
    from ssebench.inflight import phase_of

    assert phase_of(archive) == "?"


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


def test_dataset_verify_refuses_results_that_cannot_hold_runs_before_it_builds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import ssebench.verify

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("images were built before the results directory was checked")

    monkeypatch.setattr(ssebench.verify, "build_images", no_build)
    a_file = tmp_path / "results.txt"
    a_file.write_text("a file")
    assert main(["dataset", "verify", str(DEMO), "--results", str(a_file)]) == 1
    err = capsys.readouterr().err
    assert err == f"error: --results {a_file}: not a directory; give a directory for the run results\n"


def test_ssebench_run_speaks_upstreams_flags_and_the_plugins_spellings() -> None:
    from ssebench.cli import parser

    base = ["run", "--task", "t", "--agent", "dummy"]
    upstream = parser().parse_args(
        [
            *base,
            "--timeout",
            "60",
            "--limits",
            "pids=512",
            "--keep-container",
            "--local",
            "--build",
            "--backend",
            "docker",
        ]
    )
    ours = parser().parse_args(
        [
            *base,
            "--agent-timeout",
            "60",
            "--run-limits",
            "pids=512",
            "--keep-containers",
            "--dispatch",
            "local",
            "--rebuild",
        ]
    )
    for name in ("agent_timeout", "limits", "keep_container", "dispatch", "build", "backend"):
        assert getattr(upstream, name) == getattr(ours, name), name
    assert (ours.agent_timeout, ours.limits, ours.keep_container, ours.dispatch) == (
        60.0,
        {"pids": "512"},
        True,
        "local",
    )
    assert parser().parse_args([*base, "--run-id", "my-run.1"]).run_id == "my-run.1"


@pytest.mark.parametrize(
    "args, said",
    [
        (["--agent-timeout", "0"], "argument --agent-timeout/--timeout: '0': give a time in seconds above zero"),
        (["--timeout", "nan"], "argument --agent-timeout/--timeout: 'nan': give a time in seconds above zero"),
        (["--limits", "disk=1g"], "argument --run-limits/--limits: unknown limit 'disk'"),
        (["--run-id", "../up"], "argument --run-id: '../up': give letters, digits"),
        (["--backend", "podman"], "argument --backend: invalid choice: 'podman'"),
        (["--local", "--dispatch", "ray"], "argument --dispatch: not allowed with argument --local"),
    ],
)
def test_ssebench_run_refuses_a_bad_flag_in_one_line_before_anything_starts(
    args: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--task", str(DEMO / "c-demo"), "--agent", "dummy", *args])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and said in err.splitlines()[-1], err


def test_ssebench_run_never_reuses_a_run_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    taken = tmp_path / "c-demo" / "none" / "dummy" / "mine"
    taken.mkdir(parents=True)
    status = main(
        ["run", "--task", str(DEMO / "c-demo"), "--agent", "dummy", "--results", str(tmp_path), "--run-id", "mine"]
    )
    err = capsys.readouterr().err
    assert status == 2 and err == f"error: --run-id mine: c-demo's run of that id is in {tmp_path}; give another id\n"
    assert list(taken.iterdir()) == []
