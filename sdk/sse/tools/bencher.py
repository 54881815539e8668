"""The daemon's bencher tool: build, test and run proofs of concept on a copy of the source tree.

sse.project wraps these functions for agents. The evaluator calls them with
grading=True over the daemon's admin socket, which runs every check whatever
the difficulty level. Each function raises SDKError when the task does not
support the check, when the daemon refuses it, or when the daemon fails; a
check that fails is a result with a non-zero exit code.
"""

from __future__ import annotations

from typing import Any

from sse import daemon
from sse.error import SDKError
from sse.helper import ScriptResult, wrap_result

# The daemon's message when hidden tests do not apply to the agent's tree.
APPLY_FAILED = "git apply failed"


def _bench(action: str, **body: Any) -> Any:
    return daemon._default().tool("bencher", action, body)


@wrap_result(ScriptResult)
def build(*, grading: bool = False) -> Any:
    """Build the project, and keep the build for run_poc.

    With grading, build the clean copy of the repository that POST
    /prepare_grading applied the agent's diff to, instead of the source tree
    the agent edits.
    """
    return _bench("build", grading=grading)


@wrap_result(ScriptResult)
def run_poc(poc: Any, *, grading: bool = False) -> Any:
    """Run the proof of concept poc against the last build.

    Exit code 0 means that the vulnerability no longer triggers; without a
    build the exit code is -1. grading has no effect: the proof of concept
    runs in whatever the last build built.
    """
    return _bench("run_poc", poc=str(poc), grading=grading)


@wrap_result(ScriptResult)
def run_variant(variant: Any) -> Any:
    """Run one of the task's hidden variant inputs as a proof of concept is run, against the last build.

    Grading's only: the daemon answers it on the admin socket alone, and the
    variants' names come from POST /prepare_grading's answer there.
    """
    return _bench("run_variant", variant=str(variant), grading=True)


@wrap_result(ScriptResult)
def function_test(*, grading: bool = False) -> Any:
    """Run the project's tests on a copy of the source tree, or with grading of the graded copy."""
    return _bench("function_test", grading=grading)


def intent_test(*, grading: bool = False) -> ScriptResult:
    """Apply the hidden tests of the fix to a copy of the source tree and run the project's tests.

    With grading, the copy is of the graded repository. Hidden tests that do
    not apply to the agent's changes give exit code 1 instead of an error.
    """
    try:
        data = _bench("intent_test", grading=grading)
    except SDKError as exc:
        if exc.message.startswith(APPLY_FAILED):
            return ScriptResult(code=1, stdout="", stderr=exc.message)
        raise
    return ScriptResult(code=int(data["code"]), stdout=str(data["stdout"]), stderr=str(data["stderr"]))
