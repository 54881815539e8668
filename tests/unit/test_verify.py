"""How `dataset verify` judges a run of each of its agents (the runs themselves are the container tests')."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sse.result import GradeStatus, RunResult

import ssebench.reaper
import ssebench.verify
from ssebench.agent import load_agent
from ssebench.cli import main
from ssebench.dataset import load_tasks
from ssebench.image import image_names
from ssebench.record import RunRecord
from ssebench.result import make_run_dir
from ssebench.runspec import RunConfig
from ssebench.session import RunSession
from ssebench.settings import get_settings
from ssebench.task import Task, load_task
from ssebench.verify import AGENTS, TaskVerdict, flakes, judge, markdown, record_images, summary, verify
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


# -- --repeat, --resume and the flake table, with runs faked (no container) ----------------------------------

# What each agent's run gives, as judge and flakes read it: (grade, patch_result, signals).
Outcome = tuple[GradeStatus, dict[str, Any], dict[str, Any]]
AS_EXPECTED: dict[str, Outcome] = {
    "reference": ("passed", PASSED, {}),
    "dummy": ("failed", DUMMY, {}),
    "hollow": ("failed", DUMMY, SET_ASIDE),
}


def _c_demo() -> Task:
    return next(t for t in load_tasks(DEMO) if t.id == "c-demo")


class Engine:
    """The runs verify executed, in order, and how each is graded (`outcome`: AS_EXPECTED unless set)."""

    def __init__(self) -> None:
        self.runs: list[RunConfig] = []
        self.outcome: Callable[[RunConfig], Outcome] = lambda config: AS_EXPECTED[config.agent.name]
        # What the image builds report: the seconds of each image built.
        self.built = SimpleNamespace(failures={}, report=SimpleNamespace(built=[], reused=[], seconds={}))

    def ran(self) -> list[tuple[str, int]]:
        return sorted((c.agent.name, c.trial) for c in self.runs)


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Engine:
    """verify without Docker: no image to build, nothing the agent can read names the fix, and each run is
    written to the results directory as a real run's execute writes it (summary.json and result.json)."""
    fake = Engine()

    def execute(self: RunSession, config: RunConfig, *, build: bool = True) -> RunRecord:
        fake.runs.append(config)
        run_id = f"2026-12-05T00-00-{len(fake.runs):02d}"  # later runs sort later, as real run ids do
        run_dir = make_run_dir(self.plan.results, config.task.id, config.model, config.agent.name, run_id)
        grade, patch, signals = fake.outcome(config)
        result = RunResult.from_json({"status": grade, "patch_result": {"status": grade, **patch}, "signals": signals})
        assert result is not None
        (run_dir / "result.json").write_text(json.dumps(result.to_json()))
        record = RunRecord(
            config=config, run_id=run_id, run_dir=run_dir, started_at="2026-12-05T00:00:00+00:00", grade=grade
        )
        record.result = result
        if grade == "error":
            record.infra_error = "the engine hiccuped"
        record.write()
        return record

    monkeypatch.setattr(RunSession, "execute", execute)
    monkeypatch.setattr(RunSession, "check_engine", lambda self: None)
    monkeypatch.setattr(ssebench.reaper, "reap_orphans", lambda: 0)
    monkeypatch.setattr(ssebench.reaper, "reap_session", lambda session: 0)
    monkeypatch.setattr(ssebench.verify, "build_images", lambda *args, **kwargs: fake.built)
    monkeypatch.setattr(ssebench.verify, "task_leaks", lambda *args: [])
    return fake


def _verify(tmp_path: Path, **options: Any) -> list[ssebench.verify.TaskVerdict]:
    return verify(get_settings(), [_c_demo()], tmp_path / "results", say=lambda message: None, **options)


def test_repeat_runs_reference_and_dummy_n_times_and_hollow_once(tmp_path: Path, engine: Engine) -> None:
    [verdict] = _verify(tmp_path, repeat=3, jobs=2)
    assert engine.ran() == [
        ("dummy", 1),
        ("dummy", 2),
        ("dummy", 3),
        ("hollow", 1),
        ("reference", 1),
        ("reference", 2),
        ("reference", 3),
    ]
    assert verdict.valid and [r.config.trial for r in verdict.runs["reference"]] == [1, 2, 3]
    report = summary([verdict], "demo", "demo-v2", 1.0, repeat=3)
    [row] = report["tasks"]
    assert row["grades"] == {"reference": ["passed"] * 3, "dummy": ["failed"] * 3, "hollow": ["failed"]}
    assert list(row["grades"]) == list(AGENTS)
    assert list(row["flakes"]) == ["reference", "dummy"] and row["flaky"] is False  # in AGENTS' order
    assert all(c["disagree"] == 0 and c["runs"] == 3 for checks in row["flakes"].values() for c in checks.values())
    text = markdown(report)
    assert "| c-demo | c | - | 3 passed | 3 failed | failed | yes |" in text
    assert "| c-demo | reference | 0/3 | 0/3 | 0/3 | 0/3 | 0/3 | 0/3 | no |" in text
    assert "0 flaky task(s)." in text


@pytest.mark.parametrize("long", [None, "its case image builds in 7 minutes"])
def test_a_task_over_the_cost_ceiling_is_named_unless_listed_as_long(
    tmp_path: Path, engine: Engine, long: str | None
) -> None:
    task = replace(_c_demo(), long=long)
    engine.built.report.seconds = {image_names(get_settings(), task)["case"]: 412.0, "other/image:1": 999.0}
    said: list[str] = []
    [verdict] = verify(get_settings(), [task], tmp_path / "results", say=said.append)
    assert verdict.valid and verdict.build_seconds == 412.0
    assert verdict.over_ceiling() == ["case image build 412 s"]
    warned = "c-demo is over the cost ceiling of 300 s (case image build 412 s): list it under long: in dataset.yaml"
    assert any(line.startswith(warned) for line in said) is (long is None), said
    text = markdown(summary([verdict], "demo", "demo-v3", 1.0))
    assert "| c-demo | 412 s | - | - | PoC failed | " + ("yes" if long else "-") + " |" in text
    if long:
        assert "0 task(s) over the ceiling and not listed as long." in text
    else:
        assert "1 task(s) over the ceiling and not listed as long: c-demo (case image build 412 s); list each" in text


def test_images_that_do_not_build_are_one_problem_and_the_cost_table_says_failed(
    tmp_path: Path, engine: Engine
) -> None:
    failure = SimpleNamespace(layer="case", log_path="/logs/case.log")
    engine.built = SimpleNamespace(
        failures={"c-demo": failure}, report=SimpleNamespace(built=[], reused=[], seconds={})
    )
    [verdict] = _verify(tmp_path)
    # Every agent's build meets the same failed layer: said once, and no run starts.
    assert verdict.problems == ["c-demo: images do not build (case layer): see /logs/case.log"] and not engine.runs
    text = markdown(summary([verdict], "demo", "demo-v3", 1.0))
    assert "| c-demo | failed | - | - | - | - |" in text and "failed: its images did not build" in text


def test_a_stopped_verify_resumes_running_only_what_it_lacks(tmp_path: Path, engine: Engine) -> None:
    # The first verify got through one run of each agent, the dummy's ending in an infrastructure error.
    engine.outcome = lambda c: ("error", {}, {}) if c.agent.name == "dummy" else AS_EXPECTED[c.agent.name]
    [first] = _verify(tmp_path)
    assert not first.valid and len(engine.runs) == 3
    engine.outcome, engine.runs = Engine().outcome, []
    [again] = _verify(tmp_path, repeat=2, resume=True)
    # Read back: the reference's and the hollow agent's graded runs. Run: the errored dummy, and every second run.
    assert engine.ran() == [("dummy", 1), ("dummy", 2), ("reference", 2)]
    resumed = sorted((r.config.agent.name, r.config.trial) for runs in again.runs.values() for r in runs if r.resumed)
    assert resumed == [("hollow", 1), ("reference", 1)]
    assert again.valid
    assert summary([again], "demo", None, 1.0, repeat=2)["resumed"] == 2
    # Without --resume every run runs again.
    engine.runs = []
    _verify(tmp_path, repeat=2)
    assert len(engine.runs) == 5


def test_a_changed_task_is_not_resumed(tmp_path: Path, engine: Engine) -> None:
    _verify(tmp_path)
    engine.runs = []
    changed = replace(_c_demo(), dataset_version="demo-changed")
    verify(get_settings(), [changed], tmp_path / "results", resume=True, say=lambda message: None)
    assert len(engine.runs) == 3


def _runs(agent: str, tmp_path: Path, *patches: tuple[GradeStatus, dict[str, Any]]) -> list[RunRecord]:
    runs = []
    for trial, (grade, patch) in enumerate(patches, 1):
        record = _record(agent, tmp_path, grade, patch)
        runs.append(replace(record, config=replace(record.config, trial=trial)))
    return runs


def _failed(patch: dict[str, Any]) -> tuple[GradeStatus, dict[str, Any]]:
    return ("failed", patch)


def test_flakes_count_runs_against_the_majority_and_against_a_valid_tasks_result(tmp_path: Path) -> None:
    task = _c_demo()
    still = PASSED | {"pov_passed": 0}
    # One reference run of three left the PoC unfixed and was graded failed: 1 of 3 on poc and grade.
    got = flakes(
        task, "reference", _runs("reference", tmp_path, ("passed", PASSED), ("failed", still), ("passed", PASSED))
    )
    assert got["poc"] == {"runs": 3, "flaky": 1, "wrong": 1, "disagree": 1}
    assert got["grade"] == {"runs": 3, "flaky": 1, "wrong": 1, "disagree": 1}
    assert got["build"] == {"runs": 3, "flaky": 0, "wrong": 0, "disagree": 0}
    assert set(got) == {"build", "poc", "variants", "function", "intent", "grade"}
    # Every dummy run fixed the PoC without a change: no noise, but every run wrong.
    fixed = DUMMY | {"pov_passed": 1}
    got = flakes(task, "dummy", _runs("dummy", tmp_path, *[_failed(fixed)] * 3))
    assert got["poc"] == {"runs": 3, "flaky": 0, "wrong": 3, "disagree": 3}
    # The dummy's intent test is expected of nothing: it failing once is noise, never wrong.
    passes = DUMMY | {"intent_test_success": True}
    got = flakes(task, "dummy", _runs("dummy", tmp_path, ("failed", DUMMY), ("failed", passes), ("failed", DUMMY)))
    assert got["intent"] == {"runs": 3, "flaky": 1, "wrong": 0, "disagree": 1}
    # Two runs that disagree: the expected one stands as the majority, the other counts once.
    got = flakes(task, "reference", _runs("reference", tmp_path, ("passed", PASSED), ("failed", still)))
    assert got["poc"] == {"runs": 2, "flaky": 1, "wrong": 1, "disagree": 1}


def test_the_flake_table_names_the_flaky_task_and_what_to_do(tmp_path: Path) -> None:
    task = _c_demo()
    verdict = ssebench.verify.TaskVerdict(task)
    still = PASSED | {"pov_passed": 0}
    verdict.runs["reference"] = _runs("reference", tmp_path, ("passed", PASSED), ("failed", still), ("passed", PASSED))
    verdict.runs["dummy"] = _runs("dummy", tmp_path, *[_failed(DUMMY)] * 3)
    report = summary([verdict], "demo", "demo-v2", 1.0, repeat=3)
    assert report["tasks"][0]["flaky"] is True
    text = markdown(report)
    assert "## Flakes (3 runs each of reference and dummy)" in text
    assert "| c-demo | reference | 0/3 | 1/3 | 0/3 | 0/3 | 0/3 | 1/3 | YES |" in text
    assert "| c-demo | dummy | 0/3 | 0/3 | 0/3 | 0/3 | 0/3 | 0/3 | no |" in text
    assert "1 flaky task(s): c-demo; quarantine each in dataset.yaml with the reason (quarantine:)." in text
    # Without repeats there is no flake table.
    assert "Flakes" not in markdown(summary([verdict], "demo", "demo-v2", 1.0))


def test_verify_takes_several_paths_and_k(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chosen: list[list[str]] = []

    def verified(settings: object, tasks: list[Task], results: Path, **options: object) -> list[object]:
        chosen.append([t.id for t in tasks])
        assert options["repeat"] == 2 and options["resume"] is True
        return [ssebench.verify.TaskVerdict(t) for t in tasks]

    monkeypatch.setattr(ssebench.verify, "verify", verified)
    monkeypatch.setattr(ssebench.verify, "record_images", lambda settings, verdicts: [])  # beside the dataset
    demo = tmp_path / "demo"
    shutil.copytree(DEMO, demo)  # a verify writes beside its dataset: never into the repository's
    out = ["--results", str(tmp_path / "results"), "--repeat", "2", "--resume"]
    # A task named twice (by its folder and by its dataset) is verified once.
    assert main(["dataset", "verify", str(demo / "rust-demo"), str(demo), "-k", "c-demo or rust", *out]) == 0
    assert chosen == [["rust-demo", "c-demo"]]
    assert "## Flakes (2 runs each of reference and dummy)" in capsys.readouterr().out
    assert main(["dataset", "verify", str(demo), "-k", "nothing-like-it", *out]) == 2
    assert capsys.readouterr().err == "error: -k 'nothing-like-it' selects none of the tasks there\n"
    assert main(["dataset", "verify", str(demo), "-k", "c-demo rust", *out]) == 2
    assert (
        capsys.readouterr().err == "error: -k 'c-demo rust': 'rust' after a whole expression; join words with and/or\n"
    )
    assert len(chosen) == 1


def test_a_verify_stopped_with_ctrl_c_starts_no_other_run_and_resume_goes_on(tmp_path: Path, engine: Engine) -> None:
    interrupted = threading.Event()

    def stopped(config: RunConfig) -> Outcome:
        if config.agent.name == "dummy":
            interrupted.set()
            raise KeyboardInterrupt  # as Ctrl-C during the dummy's first run
        if interrupted.is_set():
            time.sleep(0.5)  # a run takes minutes: the interrupt reaches the pool while this one is under way
        return AS_EXPECTED[config.agent.name]

    engine.outcome = stopped
    said: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        verify(get_settings(), [_c_demo()], tmp_path / "results", repeat=3, say=said.append)
    # The one worker may have taken the next run before the interrupt reached the pool; none after that.
    first = engine.ran()
    assert first in ([("dummy", 1), ("reference", 1)], [("dummy", 1), ("hollow", 1), ("reference", 1)])
    [stopping] = [line for line in said if line.startswith("stopping: ")]
    assert stopping.endswith("(Ctrl-C again stops them); then --resume goes on")
    engine.outcome, engine.runs = Engine().outcome, []
    [verdict] = _verify(tmp_path, repeat=3, resume=True)
    every = [
        ("dummy", 1),
        ("dummy", 2),
        ("dummy", 3),
        ("hollow", 1),
        ("reference", 1),
        ("reference", 2),
        ("reference", 3),
    ]
    graded = {("reference", 1), ("hollow", 1)} & set(first)  # the interrupted dummy run was never recorded
    assert engine.ran() == [run for run in every if run not in graded]
    assert verdict.valid
