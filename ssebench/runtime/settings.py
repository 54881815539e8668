"""Run-time settings inside a task container, declared once, read from the environment.

A bad value stops the process at start with the name of the variable.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields

from ssebench.runtime import layout

DIFFICULTY_NAMES = {
    0: "FULL_ASSISTANCE",
    1: "NO_INTENT_TEST",
    2: "NO_FUTURE_TEST",
    3: "BUILD_ONLY",
    4: "NO_BUILD",
}

# The highest difficulty level at which the agent may still run each action.
MAX_LEVEL = {"build": 3, "function_test": 2, "run_poc": 1, "intent_test": 0}


def allowed_actions(difficulty: int) -> list[str]:
    return [action for action, level in MAX_LEVEL.items() if difficulty <= level]


# Which part of a run a container plays: the one container of sandbox mode, or,
# in sidecar mode, the task container (daemon, MCP server, evaluator, the tree,
# the hidden files and the results: everything that grades) or the agent
# container (the agent alone; nothing of the task, nothing that grades).
ROLES = ("sandbox", "task", "agent")

# Field name -> environment variable.
ENV = {
    "role": "SSE_ROLE",
    "source": "SSE_SOURCE",
    "difficulty": "SSE_DIFFICULTY",
    "results": "SSE_RESULTS",
    "archive": "SSE_ARCHIVE",
    "agent_socket": "SSE_DAEMON_SOCKET",
    "admin_socket": "SSE_ADMIN_SOCKET",
    "http_port": "SSE_HTTP_PORT",
    "agent_timeout": "TIMEOUT",
    "daemon_timeout": "SSE_DAEMON_TIMEOUT",
    "script_timeout": "SSE_SCRIPT_TIMEOUT",
    "bash_timeout": "SSE_BASH_TIMEOUT",
    "grading_timeout": "SSE_GRADING_TIMEOUT",
    "output_cap": "SSE_OUTPUT_CAP",
    "keep_alive": "SSE_KEEP_ALIVE",
    "file_size": "SSE_FILE_SIZE_LIMIT",
    "copy_limit": "SSE_COPY_LIMIT",
    "patch_limit": "SSE_PATCH_LIMIT",
    "capture_timeout": "SSE_CAPTURE_TIMEOUT",
    "archive_file_cap": "SSE_ARCHIVE_FILE_CAP",
    "archive_cap": "SSE_ARCHIVE_CAP",
    "archive_entries": "SSE_ARCHIVE_ENTRIES",
    "mcp_bind": "SSE_MCP_BIND",
    "mcp_url": "SSE_MCP_URL",
}


class SettingsError(Exception):
    """A setting's value is invalid; the message names the variable."""


@dataclass(frozen=True)
class RuntimeSettings:
    role: str = "sandbox"
    # The agent's source tree (agent role: there is no config.yaml to read it from).
    source: str = ""
    difficulty: int = 2
    results: str = layout.RESULTS
    archive: str = layout.ARCHIVE
    agent_socket: str = layout.AGENT_SOCKET
    admin_socket: str = layout.ADMIN_SOCKET
    http_port: int = layout.HTTP_PORT
    agent_timeout: float = 3600.0
    daemon_timeout: float = 300.0
    script_timeout: float = 1800.0
    bash_timeout: float = 600.0
    grading_timeout: float = 7200.0
    output_cap: int = 256 * 1024
    keep_alive: bool = False
    # The largest file a process of model or sse-runner may write (RLIMIT_FSIZE).
    file_size: int = 4 << 30
    # The most a check copies of a tree; the largest patch a capture makes.
    copy_limit: int = 8 << 30
    patch_limit: int = 64 << 20
    capture_timeout: float = 300.0
    # What of the agent's archive is kept: per file and in all.
    archive_file_cap: int = 64 << 20
    archive_cap: int = 256 << 20
    archive_entries: int = 100_000
    # Where the MCP server listens (loopback; sidecar mode's task container: every interface of its own
    # network, for the agent container), and the URL the agent is given for it.
    mcp_bind: str = "127.0.0.1"
    mcp_url: str = f"http://127.0.0.1:{layout.MCP_PORT}/mcp"


# The bounds of each numeric setting: (least, most); a float's least is exclusive (a time must be > 0).
_BOUNDS: dict[str, tuple[float, float | None]] = {
    "http_port": (1, 65535),
    "output_cap": (1024, None),
    "file_size": (1 << 20, None),
    "copy_limit": (1 << 20, None),
    "patch_limit": (1 << 10, None),
    "archive_file_cap": (1, None),
    "archive_cap": (1, None),
    "archive_entries": (1, None),
    **{
        name: (0, None)
        for name in (
            "agent_timeout",
            "daemon_timeout",
            "script_timeout",
            "bash_timeout",
            "grading_timeout",
            "capture_timeout",
        )
    },
}
_FLOATS = {f.name for f in fields(RuntimeSettings) if isinstance(f.default, float)}


def _number(name: str, text: str) -> int | float:
    least, most = _BOUNDS[name]
    if name in _FLOATS:
        try:
            value: int | float = float(text)
        except ValueError:
            raise ValueError(f"must be a number (got {text!r})") from None
        if not math.isfinite(value) or value <= least:
            raise ValueError(f"must be a number greater than {least:g} (got {text!r})")
        return value
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"must be a whole number (got {text!r})") from None
    if value < least or (most is not None and value > most):
        bounds = f"from {least:g} to {most:g}" if most is not None else f"at least {least:g}"
        raise ValueError(f"must be a whole number {bounds} (got {text!r})")
    return value


def _value(name: str, text: str) -> object:
    if name == "role":
        if text not in ROLES:
            raise ValueError(f"must be one of {', '.join(ROLES)} (got {text!r})")
        return text
    if name == "difficulty":
        stripped = text.strip()
        if not stripped.isdigit() or int(stripped) not in DIFFICULTY_NAMES:
            raise ValueError(f"must be one of 0, 1, 2, 3, 4 (got {text or '(empty)'!r})")
        return int(stripped)
    if name == "keep_alive":
        return text.strip().lower() in ("1", "true", "yes")
    if name in _BOUNDS:
        return _number(name, text)
    return text


def load_settings(environ: Mapping[str, str] | None = None) -> RuntimeSettings:
    """Settings from the environment; unset variables take their defaults.

    Plain Python (no validation library): every runtime process reads these at start, so their import is on
    the path from a container's start to its agent's.
    """
    environ = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for name, var in ENV.items():
        if var in environ:
            try:
                values[name] = _value(name, environ[var])
            except ValueError as exc:
                raise SettingsError(f"{var}: {exc}") from None
    settings = RuntimeSettings(**values)  # type: ignore[arg-type]
    if settings.role == "agent" and not settings.source.startswith("/"):
        raise SettingsError("SSE_SOURCE: the agent container needs the source tree's absolute path")
    return settings
