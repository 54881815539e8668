"""Grading as the entrypoint runs it, on this host: the evaluator's hand-over, and a run it cannot grade."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ssebench.runtime import grader
from ssebench.runtime.contract import AgentEnd, RuntimeSettings


def _evaluator(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)


# Reads the figures and grades by writing result.json where the settings say.
GRADES = """
import json, os, sys
figures = json.loads(sys.stdin.readline())
with open(os.path.join(sys.argv[1], "result.json"), "w") as f:
    json.dump({"patch_result": {"status": "failed"}, "figures": figures}, f)
"""


def test_an_evaluator_that_died_with_the_agent_is_replaced(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings = RuntimeSettings(results=str(tmp_path))
    dead = _evaluator("import sys; sys.exit(3)")
    dead.wait()
    replacements = []

    def start(settings: RuntimeSettings, env: dict[str, str], log: Any) -> subprocess.Popen[bytes]:
        process = subprocess.Popen([sys.executable, "-c", GRADES, str(tmp_path)], stdin=subprocess.PIPE)
        replacements.append(process)
        return process

    monkeypatch.setattr(grader, "start_evaluator", start)
    grader.evaluate(settings, {}, dead, None, tmp_path / "evaluator.log", AgentEnd(0, 1.5, False))  # type: ignore[arg-type]
    assert len(replacements) == 1 and dead.stdin is not None and dead.stdin.closed
    replacements[0].wait()
    result = json.loads((tmp_path / "result.json").read_text())
    # the replacement was told, and graded
    assert result["figures"] == {
        "AGENT_DURATION": "1.500",
        "AGENT_EXIT_STATUS": "0",
        "SSE_METRIC_AGENT_TIMEOUT": "false",
    }


def test_an_evaluator_that_ends_without_a_grade_is_not_graded_naming_its_status(tmp_path: Path) -> None:
    settings = RuntimeSettings(results=str(tmp_path))
    (tmp_path / "evaluator.log").write_text("Traceback: something broke\n")
    quits = _evaluator("import sys; sys.stdin.readline(); sys.exit(5)")
    with pytest.raises(grader.NotGraded) as info:
        grader.evaluate(settings, {}, quits, None, tmp_path / "evaluator.log", AgentEnd(0, 1.0, False))  # type: ignore[arg-type]
    assert quits.returncode == 5
    assert not (tmp_path / "result.json").exists()  # the entrypoint writes the error it raises
    grader.write_error(settings, str(info.value))
    grade = json.loads((tmp_path / "result.json").read_text())["patch_result"]
    assert grade["status"] == "error"
    assert grade["error_msg"].startswith(
        "No result: evaluator did not produce output (the evaluator exited with status 5 without a grade"
    )
    assert "something broke" in grade["error_msg"]
