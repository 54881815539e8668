"""SSEBench SDK: the task, and the build, test and grading actions of the daemon.

Agents, plugins and the evaluator run inside the task container and import
this package as `sse`. Importing `sse` contacts nothing; `sse.project` and
`sse.prompt` ask the daemon for the task when they are imported.
"""

from sse._version import __version__

__all__ = ["__version__"]
