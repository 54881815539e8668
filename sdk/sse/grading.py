"""Grading module for SSEBench SDK.

Runs all available tests for a benchmark case (based on capabilities) and
returns a structured PatchResult describing what passed and what failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sse import daemon
from sse.helper import ScriptResult
from sse.metadata import parse_capabilities, parse_metadata
from sse.tools import bencher

GradeStatus = Literal["passed", "failed", "error"]
"""passed: every check that ran passed. failed: a check failed, or the patch did
not apply. error: no check ran, so the patch was not graded."""

# Logs kept in a PatchResult: the tail, where the failure usually is.
_LOG_LIMIT = 64 * 1024


def _log_of(result: ScriptResult) -> str:
    text = (result.stdout or "") + ("\n" if result.stdout and result.stderr else "") + (result.stderr or "")
    return text[-_LOG_LIMIT:]


@dataclass
class PatchResult:
    """Structured result of grading a patch against all available tests.

    Fields are None when the corresponding step did not run (e.g. no build
    script configured, or an earlier failure ended grading).
    """

    build_success: bool | None = None
    pov_passed: int | None = None
    pov_total: int | None = None
    func_test_success: bool | None = None
    intent_test_success: bool | None = None
    error_msg: str | None = None
    error_log: str | None = None

    def checks_ran(self) -> bool:
        """Return True when at least one check ran."""
        return any(
            v is not None
            for v in (self.build_success, self.pov_total, self.func_test_success, self.intent_test_success)
        )

    def is_fully_successful(self) -> bool:
        """Return True when at least one check ran and every check that ran passed.

        A result in which no check ran was not graded, so it is never a success.
        """
        if not self.checks_ran() or self.error_msg is not None:
            return False
        return (
            self.build_success is not False
            and (self.pov_total is None or self.pov_passed == self.pov_total)
            and self.func_test_success is not False
            and self.intent_test_success is not False
        )

    def status(self) -> GradeStatus:
        """Return the verdict: passed, failed, or error when no check ran."""
        if self.is_fully_successful():
            return "passed"
        if self.checks_ran() or self.error_msg is not None:
            return "failed"
        return "error"

    def mark_failure(self, msg: str, log: str | None = None) -> None:
        """Record the first failure encountered.

        Subsequent calls are no-ops so the original failure context is
        preserved while later steps keep running.
        """
        if self.error_msg is None:
            self.error_msg = msg
            self.error_log = log


def grade() -> PatchResult:
    """Run all available tests and return a PatchResult.

    The pipeline is driven entirely by the case's capabilities:

      1. Build -- early-return on failure (everything else depends on it).
      2. Security test -- runs all PoCs, records how many passed.
      3. Function test -- runs the project's own test suite.
      4. Intent test -- runs the test suite with the intent patch applied.

    Call it over the daemon's admin socket, after the agent has finished: it
    applies the agent's diff to the copy of the repository that is graded,
    and the agent-facing socket refuses that.

    Raises SDKError on infrastructure failures (daemon unreachable, etc.) --
    those are not test failures.
    """
    connection = daemon._default()
    capabilities = parse_capabilities(connection.capabilities())
    metadata = parse_metadata(connection.project())
    result = PatchResult()

    prepared = connection.prepare_grading()
    if not prepared.get("applied", False):
        result.mark_failure(str(prepared.get("reason") or "Patch apply failed"), str(prepared.get("log") or ""))
        return result

    if capabilities.can_build:
        built = bencher.build(grading=True)
        result.build_success = built.is_success()
        if not built.is_success():
            result.mark_failure("Build failed", _log_of(built))
            return result

    if capabilities.can_run_poc:
        result.pov_total, result.pov_passed = len(metadata.poc), 0
        for poc in metadata.poc:
            ran = bencher.run_poc(poc, grading=True)
            if ran.is_success():
                result.pov_passed += 1
            else:
                result.mark_failure(f"PoC failed: {poc}", _log_of(ran))

    if capabilities.has_function_test:
        tested = bencher.function_test(grading=True)
        result.func_test_success = tested.is_success()
        if not tested.is_success():
            result.mark_failure("Function test failed", _log_of(tested))

    if capabilities.has_intent_test:
        intent = bencher.intent_test(grading=True)
        result.intent_test_success = intent.is_success()
        if not intent.is_success():
            result.mark_failure("Intent test failed", _log_of(intent))

    return result
