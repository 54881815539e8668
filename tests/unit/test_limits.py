"""Run limits: parsing, precedence (settings, task, option), and one-line errors that name the source."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ssebench.errors import ConfigErrors
from ssebench.limits import Limits, LimitsError, host_cpus, parse_limits, parse_size
from ssebench.runspec import limits_for
from ssebench.settings import Settings
from ssebench.task import load_task
from tests.helpers import task_config, write_task

pytest_plugins = ["pytester"]


@pytest.mark.parametrize(
    "text, size", [("512", 512), ("4g", 4 << 30), ("1.5GiB", 3 << 29), ("64m", 64 << 20), ("2K", 2048), (7, 7)]
)
def test_sizes(text: str | int, size: int) -> None:
    assert parse_size(text, "x") == size


@pytest.mark.parametrize("text", ["lots", "-1", "0", "4q", ""])
def test_bad_sizes_name_where(text: str) -> None:
    with pytest.raises(LimitsError, match=r"^--run-limits: memory: "):
        parse_size(text, "--run-limits: memory")


def test_option_text() -> None:
    assert parse_limits(" pids=512, memory=2g ,", "--run-limits") == {"pids": "512", "memory": "2g"}
    with pytest.raises(LimitsError, match="'memory' is not name=value"):
        parse_limits("memory", "--run-limits")


def test_precedence_settings_then_task_then_option(tmp_path: Path) -> None:
    config = task_config("tiny-1", limits={"memory": "8g", "pids": 2048})
    task = load_task(write_task(tmp_path, "tiny-1", config=config))
    settings = Settings(limit_pids=512, limit_memory="1g", limit_cpus=1.0, limit_file_size="1g")
    assert settings.default_limits() == Limits(pids=512, memory=1 << 30, cpus=1.0, file_size=1 << 30)
    assert limits_for(settings, task) == Limits(pids=2048, memory=8 << 30, cpus=1.0, file_size=1 << 30)
    assert limits_for(settings, task, {"pids": "300"}).pids == 300


def test_a_bad_task_limit_names_the_file_and_field(tmp_path: Path) -> None:
    folder = write_task(tmp_path, "tiny-1", config=task_config("tiny-1", limits={"memory": "huge"}))
    with pytest.raises(ConfigErrors, match=r"config.yaml: limits.memory: .*'huge' is not a size"):
        load_task(folder)
    folder = write_task(tmp_path, "tiny-2", config=task_config("tiny-2", limits={"disk": "1g"}))
    with pytest.raises(ConfigErrors, match=r"limits.disk: unknown key"):
        load_task(folder)


@pytest.mark.parametrize(
    "values, message",
    [
        ({"pids": "10"}, "too low for the runtime"),
        ({"memory": "1m"}, "below 128m"),
        ({"cpus": "0"}, "give 0.01 to"),
        ({"file_size": "10k"}, "below 1m"),
        ({"pids": "many"}, "is not a number"),
    ],
)
def test_unworkable_limits_are_refused(values: dict[str, str], message: str) -> None:
    with pytest.raises(LimitsError, match=message):
        Limits().merged(values, "--run-limits")


def test_recorded_as_numbers() -> None:
    assert yaml.safe_load(yaml.safe_dump(Limits().describe())) == {
        "pids": 1024,
        "memory": 4 << 30,
        "cpus": 2.0,
        "file_size": 4 << 30,
    }


def test_a_clusters_nodes_not_this_machine_bound_the_cpus_of_a_run_of_theirs() -> None:
    many = {"cpus": str(host_cpus() * 8)}
    with pytest.raises(LimitsError, match="the CPUs of this machine"):  # the control: here, they are too many
        Limits().merged(many, "--run-limits")
    assert Limits().merged(many, "--run-limits", here=False).cpus == host_cpus() * 8
    for bad in ("0", "inf", "nan"):
        with pytest.raises(LimitsError):
            Limits().merged({"cpus": bad}, "--run-limits", here=False)


def test_the_plugin_checks_run_limits_against_this_machine_only_for_runs_here(pytester: pytest.Pytester) -> None:
    import shutil

    from tests.helpers import DEMO

    shutil.copytree(DEMO, pytester.path / "datasets" / "demo")
    many = f"cpus={host_cpus() * 8}"
    here = pytester.runpytest("datasets/demo", "--agent", "dummy", "--run-limits", many, "--collect-only", "-q")
    assert here.ret == pytest.ExitCode.USAGE_ERROR
    assert sum("the CPUs of this machine" in line for line in here.errlines) == 1  # once, not once per task
    ray = pytester.runpytest(
        "datasets/demo", "--agent", "dummy", "--run-limits", many, "--dispatch", "ray", "--collect-only", "-q"
    )
    assert ray.ret == pytest.ExitCode.OK and "3 tests collected" in ray.stdout.str()
