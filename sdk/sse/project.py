"""The task of this container: its metadata, its capabilities and the checks an agent may run.

Importing this module asks the daemon for the task's metadata and
capabilities, so it works only where a daemon answers: inside a task
container, or with SSE_DAEMON_SOCKET pointing at one. The checks go to the
daemon's agent-facing socket, which refuses those that the run's difficulty
level withholds: they raise SDKError. The types of the metadata are in
sse.metadata.
"""

from __future__ import annotations

from pathlib import Path

from sse import daemon
from sse.helper import ScriptResult
from sse.metadata import Capabilities, Metadata, parse_capabilities, parse_metadata
from sse.tools import bencher


def init_metadata() -> Metadata:
    """Ask the daemon for the task's metadata. Importing the module does this once; use metadata."""
    return parse_metadata(daemon._default().project())


def init_capabilities() -> Capabilities:
    """Ask the daemon for the task's capabilities. Importing the module does this once; use capabilities."""
    return parse_capabilities(daemon._default().capabilities())


metadata: Metadata = init_metadata()
capabilities: Capabilities = init_capabilities()
source: Path = metadata.source
all_poc: list[Path] = list(metadata.poc)


def build() -> ScriptResult:
    """Build the project from a copy of its source tree, and keep the build for run_poc.

    Raises SDKError when the task has no build script, when the difficulty
    level withholds the build, or when the daemon fails. A failed build is a
    result with a non-zero exit code, not an error.
    """
    return bencher.build()


def run_poc(poc: Path) -> ScriptResult:
    """Run one proof of concept, one of all_poc, against the last build.

    Exit code 0 means that the vulnerability no longer triggers. Without a
    build the result has exit code -1. Raises SDKError as build does.
    """
    return bencher.run_poc(poc)


def function_test() -> ScriptResult:
    """Run the project's tests on a copy of its source tree. Raises SDKError as build does."""
    return bencher.function_test()


def intent_test() -> ScriptResult:
    """Apply the hidden tests of the fix to a copy of the source tree and run the project's tests.

    Hidden tests that do not apply to the agent's changes give exit code 1.
    Raises SDKError as build does.
    """
    return bencher.intent_test()
