"""The task prompt that the bundled agents give their model.

build_prompt depends only on the task's public metadata, the daemon's GET
/project, so every agent that uses it sends the same text for a task. That
view holds the report contents and the build and test scripts, never the
reference patch, the hidden tests or the proofs of concept.
"""

from __future__ import annotations

from sse.metadata import Metadata

LANGUAGES = {"c": "C", "go": "Go", "rust": "Rust"}

INSTRUCTIONS = """\
Fix the security vulnerability described below in the source tree. Change
the project's source so that the vulnerability can no longer be triggered,
while the project still builds and its existing tests still pass. Keep the
fix small and in the style of the project. Do not delete or weaken tests.
Only your changes to the project's source code are checked and graded:
changes to build files, tests, test data and harnesses are set aside.
When you are done, leave your changes in the source tree; committing them is
optional. Use the test_patch tool, where available, to check your patch."""


def _given(text: str | None) -> bool:
    return bool(text and text.strip() and text.strip().lower() != "none")


def build_prompt(metadata: Metadata) -> str:
    """Return the task prompt for a task's public metadata.

    The prompt names the project and its language, gives fixed
    instructions, then every description field that is set (the bug
    description, the issue and each report), the source path, and the build
    and test scripts. A field that is empty or holds the placeholder none is
    left out.
    """
    language = LANGUAGES.get(metadata.language, metadata.language)
    parts = [f"# Task: {metadata.project} ({language})", INSTRUCTIONS]
    description = metadata.task_description
    if _given(description.bug_description):
        parts.append(f"## Bug description\n\n{description.bug_description.strip()}")  # type: ignore[union-attr]
    if _given(description.issue):
        parts.append(f"## Issue\n\n{description.issue.strip()}")  # type: ignore[union-attr]
    for number, report in enumerate(r for r in description.crash_report or [] if _given(r)):
        parts.append(f"## Report {number + 1}\n\n{report.strip()}")
    parts.append(f"## Source\n\nThe project's source tree is at {metadata.source}.")
    if _given(metadata.build_script):
        parts.append(f"## Build script\n\n```sh\n{metadata.build_script.strip()}\n```")  # type: ignore[union-attr]
    if _given(metadata.test_script):
        parts.append(f"## Test script\n\n```sh\n{metadata.test_script.strip()}\n```")  # type: ignore[union-attr]
    return "\n\n".join(parts) + "\n"


def task_prompt() -> str:
    """Return the prompt for the task of this container.

    It imports sse.project, so it needs the daemon.
    """
    from sse import project

    return build_prompt(project.metadata)
