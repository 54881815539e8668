"""`ssebench dataset verify --repeat` against real containers: the flake table of a valid task, and --resume
reading every run back."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ssebench.cli import main
from ssebench.task import Task
from tests.helpers import DEMO

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_repeat_2_prints_the_flake_table_and_resume_runs_nothing_again(
    demo_images: list[Task], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    demo = tmp_path / "demo"
    shutil.copytree(DEMO, demo)  # a verify records image ids beside its dataset: never in the repository's
    command = ["dataset", "verify", str(demo), "-k", "c-demo", "--repeat", "2", "-n", "2", "--results", str(results)]
    assert main(command) == 0
    said = capsys.readouterr()
    # Two runs each of reference and dummy, one of hollow: c-demo alone of the demo's three tasks.
    assert said.err.count("c-demo reference ") == 2 and said.err.count("c-demo dummy ") == 2
    assert said.err.count("c-demo hollow: failed") == 1 and "go-demo" not in said.err
    assert "## Flakes (2 runs each of reference and dummy)" in said.out
    assert "| c-demo | reference | 0/2 | 0/2 | 0/2 | 0/2 | 0/2 | 0/2 | no |" in said.out
    assert "| c-demo | dummy | 0/2 | 0/2 | 0/2 | 0/2 | 0/2 | 0/2 | no |" in said.out
    assert "0 flaky task(s)." in said.out and "1 of 1 task(s) valid" in said.out
    [summary] = results.glob("verify-demo-*.json")
    [row] = json.loads(summary.read_text())["tasks"]
    assert row["grades"] == {"reference": ["passed", "passed"], "dummy": ["failed", "failed"], "hollow": ["failed"]}
    assert row["flaky"] is False and row["flakes"]["reference"]["poc"]["runs"] == 2
    # Stopped or not, a verify run again with --resume reads back what is graded: here, all five runs.
    assert main([*command, "--resume"]) == 0
    said = capsys.readouterr()
    assert said.err.count("(resumed)") == 5 and "(5 run(s) resumed)" in said.out
    assert list(json.loads((demo / "images.json").read_text())["tasks"]) == ["c-demo"]
