"""How `dataset verify` judges a run of each of its agents (the runs themselves are the container tests')."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from sse.result import GradeStatus, RunResult

from ssebench.agent import load_agent
from ssebench.dataset import load_tasks
from ssebench.image import image_names
from ssebench.record import RunRecord
from ssebench.runspec import RunConfig
from ssebench.settings import get_settings
from ssebench.task import load_task
from ssebench.verify import AGENTS, TaskVerdict, judge, markdown, record_images
from tests.helpers import DEMO


def _record(
    agent: str, tmp_path: Path, grade: GradeStatus, patch: dict[str, Any], signals: dict[str, Any] | None = None
) -> RunRecord:
    task = next(t for t in load_tasks(DEMO) if t.id == "c-demo")
    config = RunConfig(task=task, agent=load_agent(get_settings().agents_dir, agent))
    result: dict[str, Any] = {"patch_result": {"status": grade, **patch}}
    if signals is not None:
        result["signals"] = signals
    read = RunResult.from_json(result)
    return RunRecord(config=config, run_id="r", run_dir=tmp_path, started_at="now", grade=grade, result=read)


PASSED = {
    "build_success": True,
    "pov_passed": 1,
    "pov_total": 1,
    "variants_passed": 2,
    "variants_total": 2,
    "variants_decide": True,
    "func_test_success": True,
    "intent_test_success": True,
}
DUMMY = {
    "build_success": True,
    "pov_passed": 0,
    "pov_total": 1,
    "variants_passed": 0,
    "variants_total": 2,
    "variants_decide": True,
    "func_test_success": True,
    "intent_test_success": False,
    "error_msg": "PoC failed: /ssebench/pocs/long_value.tlv",
}
SET_ASIDE = {"protected_files": ["Makefile"], "protected_files_count": 1}


def test_a_valid_tasks_three_runs_raise_nothing(tmp_path: Path) -> None:
    task = load_tasks(DEMO)[0]
    assert judge(task, "reference", _record("reference", tmp_path, "passed", PASSED, {})) == []
    assert judge(task, "dummy", _record("dummy", tmp_path, "failed", DUMMY)) == []
    assert judge(task, "hollow", _record("hollow", tmp_path, "failed", DUMMY, SET_ASIDE)) == []


def test_a_hollow_run_that_passes_or_whose_edits_were_graded_is_a_problem(tmp_path: Path) -> None:
    task = next(t for t in load_tasks(DEMO) if t.id == "c-demo")
    [forged] = judge(task, "hollow", _record("hollow", tmp_path, "passed", PASSED, SET_ASIDE))
    assert forged.startswith("c-demo (hollow): graded passed, expected failed") and "protected_files" in forged
    [unseen] = judge(task, "hollow", _record("hollow", tmp_path, "failed", DUMMY, {}))
    assert "set none of its edits aside" in unseen


def test_a_reference_fix_that_grading_does_not_apply_whole_is_a_problem(tmp_path: Path) -> None:
    task = next(t for t in load_tasks(DEMO) if t.id == "c-demo")
    [problem] = judge(task, "reference", _record("reference", tmp_path, "passed", PASSED, SET_ASIDE))
    assert "set aside 1 file(s) of the fix (Makefile)" in problem and "fix_may_change" in problem


def test_variants_must_all_pass_for_the_reference_and_all_fail_without_a_fix(tmp_path: Path) -> None:
    task = next(t for t in load_tasks(DEMO) if t.id == "c-demo")
    assert len(task.config.files.variants) == 2
    [missed] = judge(task, "reference", _record("reference", tmp_path, "passed", PASSED | {"variants_passed": 1}, {}))
    assert missed == "c-demo (reference): variants: 1 of 2 fixed, expected all 2 fixed"
    [harmless] = judge(task, "dummy", _record("dummy", tmp_path, "failed", DUMMY | {"variants_passed": 1}))
    assert harmless.endswith(
        "variants: 1 of 2 pass without any change, expected 2 that each trigger the bug on the original tree"
    )
    [unrun] = judge(task, "dummy", _record("dummy", tmp_path, "failed", DUMMY | {"variants_total": None}))
    assert unrun.startswith("c-demo (dummy): variants: none ran without any change, expected 2")


@pytest.mark.parametrize("agent", AGENTS)
def test_the_summary_has_a_column_per_agent(agent: str) -> None:
    report = {
        "dataset": "demo",
        "version": "demo-v2",
        "verified_at": "now",
        "seconds": 1.0,
        "tasks": [
            {
                "task": "c-demo",
                "language": "c",
                "advisories": [],
                "valid": True,
                "problems": [],
                agent: {"grade": "failed"},
            }
        ],
    }
    text = markdown(report)
    assert "| reference | dummy | hollow | valid |" in text
    assert "| c-demo | c | - | " + " | ".join("failed" if a == agent else "-" for a in AGENTS) + " | yes |" in text


def test_the_ids_of_the_images_of_valid_tasks_are_recorded_beside_the_pin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ssebench.engine

    class Ids:
        def id(self, ref: str) -> str:
            return "sha256:" + ref

    monkeypatch.setattr(ssebench.engine, "images", lambda: Ids())
    shutil.copytree(DEMO, tmp_path / "demo")
    tasks = {t.id: t for t in load_tasks(tmp_path / "demo")}
    verdicts = [TaskVerdict(tasks["c-demo"]), TaskVerdict(tasks["go-demo"], problems=["go-demo (dummy): ..."])]
    settings = get_settings()
    [written] = record_images(settings, verdicts)
    assert written == (tmp_path / "demo" / "images.json").resolve()
    data = json.loads(written.read_text())
    assert data["version"] == "demo-v3" and list(data["tasks"]) == ["c-demo"]
    names = image_names(settings, tasks["c-demo"])
    assert data["tasks"]["c-demo"]["tool"] == "sha256:" + names["tool"]
    assert data["tasks"]["c-demo"]["case"] == "sha256:" + names["case"]
    # A task outside any dataset has no manifest beside which to record it.
    assert record_images(settings, [TaskVerdict(load_task(tmp_path / "demo" / "c-demo"))]) == []
