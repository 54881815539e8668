"""A run's container spec and results directory, without Docker."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ssebench.agent import available_agents, load_agent
from ssebench.limits import Limits
from ssebench.reaper import Session
from ssebench.result import make_run_dir, point_latest, read_result, read_safely
from ssebench.run import REFERENCE_IN_CONTAINER, RunConfig, container_spec
from ssebench.settings import get_settings
from ssebench.task import load_task
from tests.helpers import DEMO


@pytest.mark.parametrize("agent_name", available_agents(get_settings().agents_dir))
def test_only_the_reference_agent_gets_the_reference_patch(agent_name: str, tmp_path: Path) -> None:
    agent = load_agent(get_settings().agents_dir, agent_name)
    task = load_task(DEMO / "c-demo")
    spec = container_spec(RunConfig(task=task, agent=agent), "img", Session.new(), "r1", "net")
    reference_mounts = [m for m in spec.mounts if m.container == REFERENCE_IN_CONTAINER]
    if agent_name == "reference":
        [mount] = reference_mounts
        assert mount.read_only and mount.host == (DEMO / "c-demo" / "sse" / "diffs" / "patch.diff").resolve()
    else:
        assert reference_mounts == []
    assert spec.labels["ssebench.session"] and spec.labels["ssebench.run"] == "r1"
    assert spec.env["SSE_DIFFICULTY"] == "2" and "SSE_MODEL_NAME" not in spec.env
    # Nothing else of the host enters a run: results come out by copy.
    assert [m for m in spec.mounts if m.container != REFERENCE_IN_CONTAINER] == []
    assert spec.limits == Limits() and spec.capabilities and "NET_RAW" not in spec.capabilities


def test_run_dirs_are_never_reused(tmp_path: Path) -> None:
    first = make_run_dir(tmp_path, "t", "none", "dummy", "run-1")
    point_latest(first)
    second = make_run_dir(tmp_path, "t", "none", "dummy", "run-2")
    point_latest(second)
    assert os.readlink(tmp_path / "t" / "none" / "dummy" / "latest") == "run-2"
    with pytest.raises(Exception, match="already exists"):
        make_run_dir(tmp_path, "t", "none", "dummy", "run-1")


def test_reading_a_run_never_follows_a_link(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path, "t", "none", "dummy", "run-1")
    (run_dir / "archive").mkdir()
    secret = tmp_path / "host-secret"
    secret.write_text("the host's secret")
    (run_dir / "archive" / "dialog.jsonl").symlink_to(secret)
    assert read_safely(run_dir, "archive/dialog.jsonl") is None
    (run_dir / "archive" / "dialog.jsonl").unlink()
    (run_dir / "archive").rmdir()
    (run_dir / "archive").symlink_to(tmp_path)
    assert read_safely(run_dir, "archive/host-secret") is None
    os.mkfifo(run_dir / "pipe")
    assert read_safely(run_dir, "pipe") is None  # and it did not block
    assert read_safely(run_dir, "../host-secret") is None


def test_long_files_are_read_by_their_tail(tmp_path: Path) -> None:
    (tmp_path / "log").write_text("x" * 100 + "END")
    text = read_safely(tmp_path, "log", limit=10)
    assert text is not None and text.endswith("xxxxxxxEND") and "bytes before this" in text


def test_result_must_be_a_grade(tmp_path: Path) -> None:
    (tmp_path / "result.json").write_text(json.dumps({"patch_result": {"status": "passed"}}))
    assert read_result(tmp_path) == {"patch_result": {"status": "passed"}}
    (tmp_path / "result.json").write_text("[1, 2]")
    assert read_result(tmp_path) is None
