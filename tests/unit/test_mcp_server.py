"""test_patch's answer: headline, one line per check, the first failure's log."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from sse.helper import ScriptResult

from ssebench.runtime.mcp_server import MAX_WORDS, Checks, create_server, cut_log, patch_report, save_log

OK = ScriptResult(0, "fine\n", "")
CAPS = {"can_build": True, "can_run_poc": True, "poc_count": 2, "has_function_test": True, "has_intent_test": True}


def _checks(
    build: ScriptResult = OK,
    poc: ScriptResult = OK,
    test: ScriptResult = OK,
    intent: ScriptResult = OK,
    caps: dict[str, object] | None = None,
) -> tuple[Checks, list[str]]:
    calls: list[str] = []

    def record(name: str, result: ScriptResult):  # type: ignore[no-untyped-def]
        def run(*args: object) -> ScriptResult:
            calls.append(name)
            return result

        return run

    checks = Checks(
        capabilities=caps or CAPS,
        pocs=["/ssebench/pocs/a", "/ssebench/pocs/b"],
        build=record("build", build),
        run_poc=record("run_poc", poc),
        function_test=record("function_test", test),
        intent_test=record("intent_test", intent),
    )
    return checks, calls


def test_default_level_runs_build_and_function_test_only() -> None:
    checks, calls = _checks()
    text = patch_report(2, checks)
    assert calls == ["build", "function_test"]
    assert text.splitlines() == [
        "All 2 checks that ran passed.",
        "build: passed",
        "PoCs: not run (difficulty 2 (NO_FUTURE_TEST) withholds them)",
        "function test: passed",
        "intent test: not run (difficulty 2 (NO_FUTURE_TEST) withholds it)",
    ]


def test_level_0_runs_everything_and_reports_the_first_failure_log() -> None:
    checks, calls = _checks(
        poc=ScriptResult(86, "", "ASan: heap-buffer-overflow"), intent=ScriptResult(1, "intent broke", "")
    )
    text = patch_report(0, checks)
    assert calls == ["build", "run_poc", "run_poc", "function_test", "intent_test"]
    lines = text.splitlines()
    assert lines[0] == "2 of 4 checks FAILED: PoCs, intent test."
    assert lines[2] == "PoCs: FAILED (2 of 2 still trigger the bug, first /ssebench/pocs/a)"
    assert lines[-2] == "Log of the first failure (PoCs):"
    assert lines[-1] == "ASan: heap-buffer-overflow"


def test_failed_build_skips_pocs() -> None:
    checks, calls = _checks(build=ScriptResult(2, "", "error: x.c:3"))
    text = patch_report(1, checks)
    assert "PoCs: not run (the build failed)" in text
    assert text.startswith("1 of 2 checks FAILED: build.")
    assert "run_poc" not in calls


def test_level_4_runs_nothing() -> None:
    checks, calls = _checks()
    assert patch_report(4, checks).startswith("No check ran: difficulty 4 (NO_BUILD)")
    assert calls == []


def test_missing_checks_are_named() -> None:
    caps: dict[str, object] = {
        "can_build": True,
        "can_run_poc": False,
        "poc_count": 0,
        "has_function_test": False,
        "has_intent_test": False,
    }
    checks, _ = _checks(caps=caps)
    text = patch_report(0, checks)
    assert "function test: not run (this task has none)" in text and "PoCs: not run (this task has none)" in text


def test_long_log_is_cut_to_its_tail_and_saved_whole(tmp_path: Path) -> None:
    words = [f"w{i}" for i in range(MAX_WORDS + 500)]
    text = " ".join(words)
    cut = cut_log(text, lambda t: save_log(t, tmp_path / "logs"))
    first, body = cut.split("\n", 1)
    assert body.split() == words[-MAX_WORDS:]
    saved = Path(first.split("the whole log is in ")[1].rstrip("]"))
    assert saved.read_text() == text


def test_short_log_is_untouched() -> None:
    assert cut_log("a b c", lambda t: pytest.fail("must not save")) == "a b c"


def test_save_log_refuses_a_planted_link(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "logs").symlink_to(target)
    with pytest.raises(PermissionError):
        save_log("x", tmp_path / "logs")


def test_the_tool_is_served_over_mcp(capsys: pytest.CaptureFixture[str]) -> None:
    from mcp import Client

    checks, _ = _checks()

    async def call() -> str:
        async with Client(create_server(2, lambda: checks)) as client:
            tools = await client.list_tools()
            assert [t.name for t in tools.tools] == ["test_patch"]
            result = await client.call_tool("test_patch", {})
            return str(result.content[0].text)  # type: ignore[union-attr]

    told = anyio.run(call)
    assert told.startswith("All 2 checks that ran passed.")
    # What the agent was told is kept in the server's log (the run directory's mcp.log), whole.
    logged = capsys.readouterr().out
    assert "the agent was told:\n" + told + "\n[test_patch] end" in logged
