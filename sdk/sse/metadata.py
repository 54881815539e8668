"""Types of the task's public metadata, as the daemon's GET /project and GET /capabilities return them.

They live apart from sse.project, which asks the daemon for them on import,
so that code built on them, such as sse.prompt.build_prompt, works without a
daemon.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class TaskDescription:
    """What the agent is told about the vulnerability."""

    issue: str | None
    crash_report: list[str] | None
    bug_description: str | None


@dataclass
class Metadata:
    """The task, as the daemon's GET /project returns it. Reference material is left out."""

    id: str
    project: str
    language: str
    source: Path
    task_description: TaskDescription
    poc: list[Path] = field(default_factory=list)
    build_script: str | None = None
    test_script: str | None = None


@dataclass
class Capabilities:
    """The checks the task supports, as the daemon's GET /capabilities returns them.

    The difficulty level can still withhold a supported check from the agent.
    """

    can_build: bool
    can_run_poc: bool
    poc_count: int
    has_function_test: bool
    has_intent_test: bool


def parse_metadata(data: dict[str, Any]) -> Metadata:
    """Build Metadata from the JSON object of the daemon's GET /project."""
    description = data.get("task_description") or {}
    return Metadata(
        id=str(data["id"]),
        project=str(data["project"]),
        language=str(data["language"]),
        source=Path(data["source"]),
        task_description=TaskDescription(
            issue=description.get("issue"),
            crash_report=description.get("crash_report"),
            bug_description=description.get("bug_description"),
        ),
        poc=[Path(p) for p in data.get("poc") or []],
        build_script=data.get("build_script"),
        test_script=data.get("test_script"),
    )


def parse_capabilities(data: dict[str, Any]) -> Capabilities:
    return Capabilities(
        can_build=bool(data["can_build"]),
        can_run_poc=bool(data["can_run_poc"]),
        poc_count=int(data["poc_count"]),
        has_function_test=bool(data["has_function_test"]),
        has_intent_test=bool(data["has_intent_test"]),
    )
