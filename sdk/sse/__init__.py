"""SSEBench SDK: the task, and the build, test and grading actions of the daemon, for code in a task container.

Agents, plugins and the evaluator run inside the task container and import
this package as sse. It talks to ssebench-daemon over the Unix socket in
SSE_DAEMON_SOCKET; see sse.daemon. import sse loads sse.ai, sse.grading,
sse.reference and sse.tools without contacting the daemon; sse.project and
sse.prompt ask the daemon for the task when they are imported.
"""

from sse import ai, daemon, dialog, error, grading, helper, metadata, reference, result, tools
from sse._version import __version__

__all__ = [
    "__version__",
    "ai",
    "daemon",
    "dialog",
    "error",
    "grading",
    "helper",
    "metadata",
    "reference",
    "result",
    "tools",
]
