"""Grading module for SSEBench SDK.

Runs all available tests for a benchmark case (based on capabilities) and
returns a structured PatchResult describing what passed and what failed.
PatchResult and the rule that grades it live in sse.result, with the rest of
result.json.
"""

from __future__ import annotations

from sse import daemon
from sse.helper import ScriptResult
from sse.metadata import parse_capabilities, parse_metadata
from sse.result import GradeStatus, PatchResult
from sse.tools import bencher

__all__ = ["NOT_APPLIED", "GradeStatus", "PatchResult", "grade", "not_applied"]

# Logs kept in a PatchResult: the tail, where the failure usually is.
_LOG_LIMIT = 64 * 1024


# The first words of error_msg when the patch to grade does not apply.
NOT_APPLIED = "Patch apply failed"


def not_applied(reason: str, log: str = "") -> PatchResult:
    """The grade of a patch that does not apply: a failed build, so the result is graded (failed), never
    "no check ran" (an error the agent could trade a failure for). `reason` begins with NOT_APPLIED."""
    result = PatchResult(build_success=False)
    result.mark_failure(reason, log)
    return result


def _log_of(result: ScriptResult) -> str:
    text = (result.stdout or "") + ("\n" if result.stdout and result.stderr else "") + (result.stderr or "")
    return text[-_LOG_LIMIT:]


def grade() -> PatchResult:
    """Run all available tests and return a PatchResult.

    The pipeline is driven entirely by the case's capabilities:

      1. Build -- early-return on failure (everything else depends on it).
      2. Security test -- runs all PoCs, records how many passed.
      3. Variants -- runs the task's hidden variant inputs as PoCs, records
         how many passed; a failed one fails the grade unless the task's
         variant_policy is "report".
      4. Function test -- runs the project's own test suite.
      5. Intent test -- runs the test suite with the intent patch applied.

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
        # The patched project cannot be built when the patch does not apply.
        return not_applied(str(prepared.get("reason") or NOT_APPLIED), str(prepared.get("log") or ""))

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

    variants = [str(v) for v in prepared.get("variants") or []]
    if capabilities.can_run_poc and variants:
        decides = prepared.get("variant_policy", "fail") != "report"
        result.variants_total, result.variants_passed, result.variants_decide = len(variants), 0, decides
        for variant in variants:
            ran = bencher.run_variant(variant)
            if ran.is_success():
                result.variants_passed += 1
            elif decides:
                result.mark_failure(f"Variant failed: {variant}", _log_of(ran))

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
