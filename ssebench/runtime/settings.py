"""Run-time settings inside a task container, declared once, read from the environment.

A bad value stops the process at start with the name of the variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

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
# in sidecar mode, the task container (daemon, tree, hidden files) or the agent
# container (agent, MCP server, evaluator; nothing of the task).
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
    "mcp_timeout": "SSE_MCP_TIMEOUT",
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
}


class SettingsError(Exception):
    """A setting's value is invalid; the message names the variable."""


class RuntimeSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    role: str = "sandbox"
    # The agent's source tree (agent role: there is no config.yaml to read it from).
    source: str = ""
    difficulty: int = Field(2, ge=0, le=4)
    results: str = layout.RESULTS
    archive: str = layout.ARCHIVE
    agent_socket: str = layout.AGENT_SOCKET
    admin_socket: str = layout.ADMIN_SOCKET
    http_port: int = Field(layout.HTTP_PORT, ge=1, le=65535)
    agent_timeout: float = Field(3600.0, gt=0)
    daemon_timeout: float = Field(300.0, gt=0)
    mcp_timeout: float = Field(300.0, gt=0)
    script_timeout: float = Field(1800.0, gt=0)
    bash_timeout: float = Field(600.0, gt=0)
    grading_timeout: float = Field(7200.0, gt=0)
    output_cap: int = Field(256 * 1024, ge=1024)
    keep_alive: bool = False
    # The largest file a process of model or sse-runner may write (RLIMIT_FSIZE).
    file_size: int = Field(4 << 30, ge=1 << 20)
    # The most a check copies of a tree; the largest patch a capture makes.
    copy_limit: int = Field(8 << 30, ge=1 << 20)
    patch_limit: int = Field(64 << 20, ge=1 << 10)
    capture_timeout: float = Field(300.0, gt=0)
    # What of the agent's archive is kept: per file and in all.
    archive_file_cap: int = Field(64 << 20, ge=1)
    archive_cap: int = Field(256 << 20, ge=1)

    @field_validator("role")
    @classmethod
    def _role(cls, value: str) -> str:
        if value not in ROLES:
            raise ValueError(f"must be one of {', '.join(ROLES)} (got {value!r})")
        return value

    @model_validator(mode="after")
    def _source(self) -> RuntimeSettings:
        if self.role == "agent" and not self.source.startswith("/"):
            raise ValueError("SSE_SOURCE: the agent container needs the source tree's absolute path")
        return self

    @field_validator("difficulty", mode="before")
    @classmethod
    def _difficulty(cls, value: object) -> object:
        text = str(value).strip()
        if not text.isdigit() or int(text) not in DIFFICULTY_NAMES:
            raise ValueError(f"must be one of 0, 1, 2, 3, 4 (got {value!r})")
        return int(text)


def load_settings(environ: Mapping[str, str] | None = None) -> RuntimeSettings:
    """Settings from the environment; unset variables take their defaults."""
    environ = os.environ if environ is None else environ
    given = {field: environ[var] for field, var in ENV.items() if var in environ}
    values: dict[str, object] = dict(given)
    if given.get("difficulty") == "":
        values["difficulty"] = "(empty)"
    if "keep_alive" in given:
        values["keep_alive"] = given["keep_alive"].strip().lower() in ("1", "true", "yes")
    try:
        return RuntimeSettings.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        if not first["loc"]:  # a rule across settings: its message names the variable
            raise SettingsError(message) from None
        var = ENV.get(str(first["loc"][0]), str(first["loc"][0]))
        raise SettingsError(f"{var}: {message}") from None
