"""The runtime's reading of /ssebench/config.yaml.

The host validated the file strictly before the image was built; here it is
only read, leniently, with the same meaning of empty values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:  # the tool layer imports this module; the protection is a run's, not the image's
    from ssebench.runtime.protection import Protection


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    return str(value)


def _paths(value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    return [p for p in (_text(v) for v in value or []) if p]


@dataclass(frozen=True)
class TaskFile:
    id: str
    project: str
    language: str
    source: str
    issue: str | None = None
    crash_report: list[str] = field(default_factory=list)
    bug_description: str | None = None
    build_script: str | None = None
    run_script: str | None = None
    test_script: str | None = None
    patch: str | None = None
    poc: list[str] = field(default_factory=list)
    future_test: str | None = None
    # Paths grading takes from the original beyond the language's defaults, and those the fix may change
    # (`ssebench.runtime.protection`).
    protected_files: list[str] = field(default_factory=list)
    fix_may_change: list[str] = field(default_factory=list)

    def protection(self) -> Protection:
        from ssebench.runtime.protection import Protection

        return Protection.of(self.language, self.protected_files, self.fix_may_change)

    def secret_paths(self) -> list[str]:
        """Paths under /ssebench that only root may read."""
        named = [self.run_script, self.patch, self.future_test, *self.poc, *self.crash_report]
        return ["config.yaml", "diffs", "pocs", "reports", *(p for p in named if p)]


def parse_taskfile(data: dict[str, Any]) -> TaskFile:
    description = data.get("task_description") or {}
    scripts = data.get("scripts") or {}
    files = data.get("files") or {}
    return TaskFile(
        id=str(data["id"]),
        project=str(data["project"]),
        language=str(data["language"]),
        source=str(data["source"]).rstrip("/"),
        issue=_text(description.get("issue")),
        crash_report=_paths(description.get("crash_report")),
        bug_description=_text(description.get("bug_description")),
        build_script=_text(scripts.get("build")),
        run_script=_text(scripts.get("run")),
        test_script=_text(scripts.get("test")),
        patch=_text(files.get("patch")),
        poc=_paths(files.get("poc")),
        future_test=_text(files.get("future_test")),
        protected_files=_paths(data.get("protected_files")),
        fix_may_change=_paths(data.get("fix_may_change")),
    )


def load_taskfile(path: Path) -> TaskFile:
    return parse_taskfile(yaml.safe_load(path.read_text(encoding="utf-8")))
