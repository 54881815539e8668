"""--predictions end to end: patches made elsewhere graded by the same evaluator, in real containers."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ssebench.task import Task
from tests.helpers import DEMO, failure_reports

pytest_plugins = ["pytester"]
pytestmark = [pytest.mark.docker, pytest.mark.slow]

# A comment: it applies, and fixes nothing.
COMMENT = "".join(
    line + "\n"
    for line in (
        "diff --git a/tlv.c b/tlv.c",
        "--- a/tlv.c",
        "+++ b/tlv.c",
        "@@ -1,3 +1,4 @@",
        "+/* A comment fixes nothing. */",
        ' #include "tlv.h"',
        " ",
        " #include <stdlib.h>",
    )
)
# Its context is not in kvrec.go: it does not apply.
STALE = "".join(
    line + "\n"
    for line in (
        "diff --git a/kvrec.go b/kvrec.go",
        "--- a/kvrec.go",
        "+++ b/kvrec.go",
        "@@ -1,3 +1,3 @@",
        " package kvrec_of_another_version",
        "-// a line that is not there",
        "+// another line",
        " ",
    )
)


def reference(task_id: str) -> str:
    return (DEMO / task_id / "sse" / "diffs" / "patch.diff").read_text()


def hunks(patch: str) -> list[str]:
    return [line for line in patch.splitlines() if not line.startswith("index ")]


def predictions(path: Path) -> Path:
    """The reference patch of the three demo tasks (model `gold`), a wrong patch and one that does not apply
    (model `org/broken`), and one of a task that is not in the demo."""
    rows = [
        *({"instance_id": t, "model_patch": reference(t), "model_name_or_path": "gold"} for t in ("c-demo", "go-demo")),
        {"instance_id": "demo/rust-demo", "model_patch": reference("rust-demo"), "model_name_or_path": "gold"},
        {"instance_id": "c-demo", "model_patch": COMMENT, "model_name_or_path": "org/broken"},
        {"instance_id": "go-demo", "model_patch": STALE, "model_name_or_path": "org/broken"},
        {"instance_id": "astropy__astropy-12907", "model_patch": COMMENT, "model_name_or_path": "gold"},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def demo(pytester: pytest.Pytester, demo_images: list[Task]) -> pytest.Pytester:
    shutil.copytree(DEMO, pytester.path / "datasets" / "demo")
    return pytester


def test_predictions_are_graded_as_runs(demo: pytest.Pytester) -> None:
    preds = predictions(demo.path / "preds.jsonl")
    result = demo.runpytest_subprocess(
        "datasets/demo", "--predictions", str(preds), "--results", "out", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=3, failed=2)
    text = failure_reports(result)
    # The patch that does not apply: a failed grade that says so, with git's words.
    assert (
        "The patch was not applied: the predicted patch does not apply to the task's source (git apply exited 1)."
        in text
    )
    assert "error: patch failed: kvrec.go:1" in text
    assert "Checks: build FAILED; PoCs not run; function test not run; intent test not run." in text
    # The wrong patch applies and is graded: its PoC still reproduces.
    assert "A proof of concept still reproduces: /ssebench/pocs/" in text
    result.stdout.fnmatch_lines(
        ["*predictions*gold*2*sandbox*3*3*0*0*100%*", "*predictions*org/broken*2*sandbox*2*0*2*0*"]
    )
    said = [line for line in result.errlines if "name no task" in line]
    assert len(said) == 1 and "astropy__astropy-12907 (line 6)" in said[0]

    # Each run's directory, under its model's name: the patch as given, and what grading captured of it.
    out = demo.path / "out"
    (gold,) = (out / "c-demo" / "gold" / "predictions").glob("*-d2-sandbox-*")
    assert (gold / "prediction.patch").read_text() == reference("c-demo")
    # What grading captured is the patch (capture writes full object ids in its index lines).
    assert hunks((gold / "final.patch").read_text()) == hunks(reference("c-demo"))
    summary = json.loads((gold / "summary.json").read_text())
    assert summary["grade"] == "passed" and summary["config"]["model"] == "gold"
    assert summary["config"]["reference_run"] is False and len(summary["config"]["prediction"]) == 64
    (stale,) = (out / "go-demo" / "org%2Fbroken" / "predictions").glob("*-d2-sandbox-*")
    graded = json.loads((stale / "result.json").read_text())["patch_result"]
    assert graded["status"] == "failed" and graded["build_success"] is False
    assert graded["error_msg"].startswith("Patch apply failed: the predicted patch does not apply")
    assert (stale / "final.patch").read_text() == ""  # nothing of it reached the tree
    assert not (out / "rust-demo" / "org%2Fbroken").exists()  # no prediction of it by that model: no run

    # --resume reports the finished runs; another patch under the same model name runs again.
    again = demo.runpytest_subprocess(
        "datasets/demo/c-demo", "--predictions", str(preds), "--results", "out", "--resume", "-p", "no:cacheprovider"
    )
    again.assert_outcomes(passed=1, failed=1)
    assert len(list((out / "c-demo" / "gold" / "predictions").glob("*-d2-sandbox-*"))) == 1
    changed = demo.path / "changed.jsonl"
    changed.write_text(json.dumps({"instance_id": "c-demo", "model_patch": COMMENT, "model_name_or_path": "gold"}))
    rerun = demo.runpytest_subprocess(
        "datasets/demo/c-demo", "--predictions", str(changed), "--results", "out", "--resume", "-p", "no:cacheprovider"
    )
    rerun.assert_outcomes(failed=1)
    assert len(list((out / "c-demo" / "gold" / "predictions").glob("*-d2-sandbox-*"))) == 2


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ssebench.cli", *args], cwd=cwd, capture_output=True, text=True, check=False
    )


def test_past_runs_are_graded_again_and_ssebench_run_grades_one_prediction(demo: pytest.Pytester) -> None:
    preds = predictions(demo.path / "preds.jsonl")
    first = demo.runpytest_subprocess(
        "datasets/demo", "--predictions", str(preds), "--results", "out", "-p", "no:cacheprovider"
    )
    first.assert_outcomes(passed=3, failed=2)
    # Each run's final.patch, as predictions: the patch that did not apply left no change, graded as none.
    listed = cli(demo.path, "results", "predictions", "out")
    assert listed.returncode == 0, listed.stderr
    past = [json.loads(line) for line in listed.stdout.splitlines()]
    assert sorted((p["instance_id"], p["model_name_or_path"]) for p in past) == [
        ("c-demo", "predictions/gold"),
        ("c-demo", "predictions/org/broken"),
        ("go-demo", "predictions/gold"),
        ("go-demo", "predictions/org/broken"),
        ("rust-demo", "predictions/gold"),
    ]
    assert "5 prediction(s): the newest run of each task x model x agent in out" in listed.stderr
    (demo.path / "past.jsonl").write_text(listed.stdout)
    again = demo.runpytest_subprocess(
        "datasets/demo", "--predictions", "past.jsonl", "--results", "again", "-p", "no:cacheprovider"
    )
    again.assert_outcomes(passed=3, failed=2)
    text = failure_reports(again)
    assert text.count("A proof of concept still reproduces") == 2 and "The patch was not applied" not in text

    # One prediction outside pytest: the file's prediction of the task, by the model asked for.
    passed = cli(
        demo.path, "run", "--task", "datasets/demo/c-demo", "--predictions", str(preds), "--model", "gold",
        "--results", "out", "--require-pass",
    )  # fmt: skip
    assert passed.returncode == 0 and "grade: passed" in passed.stdout, passed.stdout + passed.stderr
    both = cli(demo.path, "run", "--task", "datasets/demo/c-demo", "--predictions", str(preds), "--results", "out")
    assert both.returncode == 1
    assert (
        f"error: --predictions {preds}: 2 predictions of c-demo (models gold, org/broken): pick one with --model"
        in (both.stderr)
    )
    stale = cli(
        demo.path, "run", "--task", "datasets/demo/go-demo", "--predictions", str(preds), "--model", "org/broken",
        "--results", "out",
    )  # fmt: skip
    assert stale.returncode == 0, stale.stderr  # a graded run, failed: the command itself did its work
    assert "grade: failed (Patch apply failed: the predicted patch does not apply" in stale.stdout
