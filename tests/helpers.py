"""Shared helpers of the test suite: minimal task folders written on the fly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEMO = Path(__file__).resolve().parent.parent / "datasets" / "demo"


def task_config(task_id: str = "tiny-1", **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "id": task_id,
        "project": "tiny",
        "repository": "https://example.invalid/tiny",
        "language": "c",
        "source": "/src/tiny",
        "task_description": {"crash_report": ["reports/issue.md"], "bug_description": "it crashes", "issue": "none"},
        "scripts": {"build": "scripts/build.sh", "run": "scripts/run.sh", "test": "scripts/test.sh"},
        "files": {"patch": "diffs/patch.diff", "poc": ["pocs/crash.bin"], "future_test": "diffs/test.diff"},
        "originality": "crafted",
    }
    config.update(overrides)
    return config


def write_task(parent: Path, task_id: str = "tiny-1", config: dict[str, Any] | None = None,
               dockerfile: str = "FROM scratch\n") -> Path:
    """A task folder with every file its config names."""
    folder = parent / task_id
    sse = folder / "sse"
    for sub in ("pocs", "reports", "diffs"):
        (sse / sub).mkdir(parents=True, exist_ok=True)
    for name in ("build.sh", "run.sh", "test.sh"):
        (sse / name).write_text("#!/bin/sh\nexit 0\n")
        (sse / name).chmod(0o755)
    (sse / "pocs" / "crash.bin").write_bytes(b"\x00\x01")
    (sse / "reports" / "issue.md").write_text("It crashes.\n")
    (sse / "diffs" / "patch.diff").write_text("")
    (sse / "diffs" / "test.diff").write_text("")
    (folder / "Dockerfile").write_text(dockerfile)
    data = config if config is not None else task_config(task_id)
    (sse / "config.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


def write_dataset(root: Path, name: str = "tinyset", tasks: tuple[str, ...] = ("tiny-1",)) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "dataset.yaml").write_text("version: tiny-v1\n")
    for task_id in tasks:
        write_task(folder, task_id)
    return folder
