"""The pytest plugin without Docker: options, collection, ids, markers, selection."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.helpers import DEMO

pytest_plugins = ["pytester"]


@pytest.fixture
def demo(pytester: pytest.Pytester) -> pytest.Pytester:
    shutil.copytree(DEMO, pytester.path / "datasets" / "demo")
    return pytester


def _ids(result: pytest.RunResult) -> list[str]:
    return sorted(line.strip() for line in result.outlines if "::" in line and "[" in line)


def test_collects_task_x_agent_x_difficulty(demo: pytest.Pytester) -> None:
    result = demo.runpytest("datasets/demo", "--agent", "reference", "--agent", "dummy", "--difficulty", "0,2,4",
                            "--collect-only", "-q")
    ids = _ids(result)
    assert len(ids) == 18
    assert "datasets/demo/c-demo::reference[none-d2-sandbox]" in ids
    assert "datasets/demo/rust-demo::dummy[none-d4-sandbox]" in ids


def test_single_task_folder_and_folder_above(demo: pytest.Pytester) -> None:
    one = _ids(demo.runpytest("datasets/demo/go-demo", "--agent", "dummy", "--collect-only", "-q"))
    assert one == ["datasets/demo/go-demo::dummy[none-d2-sandbox]"]
    above = _ids(demo.runpytest("datasets", "--agent", "dummy", "--collect-only", "-q"))
    assert len(above) == 3


def test_models_multiply_only_model_agents(demo: pytest.Pytester) -> None:
    ids = _ids(demo.runpytest("datasets/demo/c-demo", "--agent", "dummy", "--model", "m1", "--model", "m2",
                              "--collect-only", "-q"))
    assert ids == ["datasets/demo/c-demo::dummy[none-d2-sandbox]"]


def test_markers_and_keywords_select(demo: pytest.Pytester) -> None:
    go = _ids(demo.runpytest("datasets/demo", "--agent", "dummy", "-m", "go", "--collect-only", "-q"))
    assert go == ["datasets/demo/go-demo::dummy[none-d2-sandbox]"]
    rust = _ids(demo.runpytest("datasets/demo", "--agent", "dummy", "-k", "rust", "--collect-only", "-q"))
    assert rust == ["datasets/demo/rust-demo::dummy[none-d2-sandbox]"]
    dataset = _ids(demo.runpytest("datasets", "--agent", "dummy", "-m", "dataset_demo and c", "--collect-only", "-q"))
    assert dataset == ["datasets/demo/c-demo::dummy[none-d2-sandbox]"]


def test_without_agent_nothing_is_collected(demo: pytest.Pytester) -> None:
    result = demo.runpytest("datasets/demo", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED


@pytest.mark.parametrize("args, message", [
    (["--difficulty", "5"], "--difficulty '5': give levels 0-4"),
    (["--difficulty", "two"], "--difficulty 'two': give levels 0-4"),
    (["--mode", "sidecar"], "--mode sidecar: sidecar mode is not available yet"),
    (["--mode", "cloud"], "--mode 'cloud': the accepted mode is sandbox"),
    (["--agent-timeout", "0"], "--agent-timeout 0.0: give the agent's time limit in seconds"),
    (["--infra-retries", "-1"], "--infra-retries -1: give a whole number of retries"),
    (["--run-limits", "pids=10"], "--run-limits: pids=10 is too low for the runtime itself"),
    (["--run-limits", "memory=lots"], "--run-limits: memory: 'lots' is not a size"),
    (["--run-limits", "disk=1g"], "--run-limits: unknown limit 'disk'; use pids, memory, cpus, file_size"),
    (["--run-limits", "cpus=999"], "--run-limits: cpus=999: give 0.01 to"),
])
def test_bad_options_are_usage_errors(demo: pytest.Pytester, args: list[str], message: str) -> None:
    result = demo.runpytest("datasets/demo", "--agent", "dummy", *args, "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


def test_unknown_agent_is_a_usage_error(demo: pytest.Pytester) -> None:
    result = demo.runpytest("datasets/demo", "--agent", "nobody", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--agent:*no agent 'nobody'*"])


def test_broken_task_is_a_collection_error_naming_the_field(demo: pytest.Pytester) -> None:
    config = demo.path / "datasets" / "demo" / "c-demo" / "sse" / "config.yaml"
    config.write_text(config.read_text() + "colour: blue\n")
    result = demo.runpytest("datasets/demo", "--agent", "dummy", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*c-demo/sse/config.yaml: colour: unknown key*"])


def test_ini_keys_give_defaults(demo: pytest.Pytester) -> None:
    demo.makeini("[pytest]\nssebench_agents = dummy\nssebench_difficulty = 1,3\n")
    ids = _ids(demo.runpytest("datasets/demo/c-demo", "--collect-only", "-q"))
    assert ids == ["datasets/demo/c-demo::dummy[none-d1-sandbox]", "datasets/demo/c-demo::dummy[none-d3-sandbox]"]


# pytest-retry, loaded into pytester's in-process runs, breaks them (it reads
# an option of its own that the inner run has not declared), so `make install`
# puts it apart and only the subprocess below sees it.
ISOLATED_PLUGINS = Path(sys.prefix) / "isolated-plugins"


def test_options_live_beside_popular_plugins(demo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """One option namespace for every plugin: ours must not take a name that a popular one owns."""
    assert (ISOLATED_PLUGINS / "pytest_retry").is_dir(), f"pytest-retry is not in {ISOLATED_PLUGINS}: run make install"
    monkeypatch.setenv("PYTHONPATH", str(ISOLATED_PLUGINS))
    helped = demo.runpytest_subprocess("--help")
    assert helped.ret == 0, helped.stderr.str()
    text = helped.stdout.str()
    # Theirs (pytest-timeout, pytest-retry, pytest-rerunfailures, xdist, pytest-html), then ours.
    for option in ("--timeout=", "--retries=", "--reruns=", "--numprocesses=", "--html=",
                   "--agent-timeout=", "--infra-retries=", "--run-limits="):
        assert option in text, option
    ran = demo.runpytest_subprocess("datasets/demo/c-demo", "--agent", "dummy", "--timeout", "30", "--retries", "1",
                                    "--agent-timeout", "60", "--infra-retries", "1", "--collect-only", "-q")
    assert ran.ret == 0, ran.stderr.str()
    assert "datasets/demo/c-demo::dummy[none-d2-sandbox]" in ran.stdout.str()
