"""The pytest plugin without Docker: options, collection, ids, markers, selection."""

from __future__ import annotations

import shutil

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
    (["--timeout", "0"], "--timeout 0.0: give the agent's time limit in seconds"),
    (["--retries", "-1"], "--retries -1: give a whole number of retries"),
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
