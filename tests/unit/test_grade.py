"""sse.result.grade: the one rule a run's grade comes from, each override in its place; and the evaluator's
use of it (a grading that raises, that runs out of time with and without the patch applied)."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sse import result as schema
from sse.result import PatchResult, RunResult, grade

from ssebench.runtime.evaluator import grade_with_limit

PASSING = PatchResult(build_success=True, pov_passed=1, pov_total=1, func_test_success=True)
FAILING = PatchResult(build_success=True, pov_passed=0, pov_total=1, error_msg="PoC failed: p")
MEMORY = ["memory: the container hit its memory limit of 4096 bytes"]


@pytest.mark.parametrize(
    "given, status, rule",
    [
        # 1. The host's own failure beats everything, memory and a recorded grade included.
        (
            {"infrastructure": "engine gone", "memory_hit": MEMORY, "recorded": RunResult("passed")},
            "error",
            "infrastructure",
        ),
        # 2. Memory used up: no grade, or an error, is the agent's failure; a grade the container made stands.
        ({"memory_hit": MEMORY}, "failed", "memory limit"),
        ({"memory_hit": MEMORY, "recorded": RunResult("error")}, "failed", "memory limit"),
        ({"memory_hit": MEMORY, "recorded": RunResult("passed")}, "passed", "recorded"),
        ({"memory_hit": ["agent container: memory: 1 OOM kill"]}, "error", "no result"),  # not the grader's
        # 3. What the container recorded, graded there by these rules.
        ({"recorded": RunResult("failed", PatchResult(error_msg="Build failed"))}, "failed", "recorded"),
        ({"recorded": RunResult("error", PatchResult(error_msg="boom"))}, "error", "recorded"),
        # 4.-5. In the container: grading raised, or ran out of time.
        ({"grading_raised": "grading raised OSError"}, "error", "grading raised"),
        ({"grading_time_limit": 60.0, "patch_applied": True}, "failed", "grading time limit"),
        ({"grading_time_limit": 60.0}, "error", "grading time limit"),
        # 6. Nothing at all.
        ({"no_result": "the run ended without a result.json"}, "error", "no result"),
    ],
)
def test_each_override_decides_in_its_order(given: dict[str, object], status: str, rule: str) -> None:
    verdict = grade(**given)  # type: ignore[arg-type]
    assert (verdict.status, verdict.rule) == (status, rule), verdict
    assert verdict.status == "passed" or verdict.reason  # anything but a pass says why


def test_the_reasons_are_the_words_the_grades_always_had() -> None:
    assert grade(recorded=RunResult("error", PatchResult(error_msg="boom"))).reason == "grading did not run: boom"
    assert grade(memory_hit=MEMORY).reason == (
        f"Memory limit: the run's processes used up its memory and grading could not finish ({MEMORY[0]})"
    )
    assert grade(grading_time_limit=60, patch_applied=True).reason == (
        "Grading time limit: the checks of the patched tree did not finish within 60 s"
    )
    assert grade(grading_time_limit=60).reason == "grading did not finish within its time limit of 60 s"


@pytest.mark.parametrize(
    "checks, status",
    [
        (PASSING, "passed"),
        (FAILING, "failed"),
        (PatchResult(build_success=False, error_msg="Patch apply failed"), "failed"),  # as sse.grading records it
        (PatchResult(error_msg="Daemon unreachable"), "error"),  # no check ran: not graded, as seed 003 says
        (PatchResult(), "error"),  # nothing ran, nothing failed: not graded
        (PatchResult(build_success=True, error_msg="PoC failed: p"), "failed"),
    ],
)
def test_the_checks_alone_grade_as_patch_result_status_always_did(checks: PatchResult, status: str) -> None:
    verdict = grade(checks)
    assert (verdict.status, verdict.rule) == (status, "checks") and checks.status() == status
    if status == "failed":
        assert verdict.reason == checks.error_msg


def test_the_docstring_lists_every_rule_in_its_order() -> None:
    doc = inspect.getdoc(grade) or ""
    numbered = [line.split(".", 1)[0] for line in doc.splitlines() if line[:1].isdigit()]
    assert numbered == [str(n) for n in range(1, len(schema.RULES) + 1)]
    cases = [grade(infrastructure="x"), grade(memory_hit=MEMORY), grade(recorded=RunResult("passed"))]
    cases += [grade(grading_raised="x"), grade(grading_time_limit=1), grade(), grade(PASSING)]
    assert tuple(v.rule for v in cases) == schema.RULES


def _fake_grading(monkeypatch: pytest.MonkeyPatch, body: Callable[[], PatchResult]) -> None:
    """sse.grading.grade (the checks) replaced by `body`, as the evaluator imports it."""
    import sse.grading

    monkeypatch.setattr(sse.grading, "grade", body)


def test_the_evaluator_grades_what_the_checks_found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_grading(monkeypatch, lambda: FAILING)
    result, timed_out = grade_with_limit(5, tmp_path)
    assert not timed_out and result == RunResult("failed", FAILING)


def test_an_evaluator_whose_grading_raises_records_an_error_with_its_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def broken() -> PatchResult:
        raise OSError("the daemon went away")

    _fake_grading(monkeypatch, broken)
    result, timed_out = grade_with_limit(5, tmp_path)
    assert not timed_out and result.status == "error"
    assert result.patch_result.error_msg == "Exception: OSError: the daemon went away"  # upstream's words
    assert "Traceback" in (result.patch_result.error_log or "")


@pytest.mark.parametrize("applied, status", [(True, "failed"), (False, "error")])
def test_an_evaluator_out_of_time_fails_the_patch_once_it_was_applied(
    applied: bool, status: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def slow() -> PatchResult:
        time.sleep(3)
        return PASSING

    _fake_grading(monkeypatch, slow)
    if applied:
        (tmp_path / "final.patch").write_text("diff\n")
    result, timed_out = grade_with_limit(0.2, tmp_path)
    assert (
        timed_out
        and result.status == status
        and result.patch_result == PatchResult(error_msg=grade(grading_time_limit=0.2, patch_applied=applied).reason)
    )
