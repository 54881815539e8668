"""A dataset's pin: the SHA-256 of every file of every task, under the dataset's version.

Results carry the dataset's version (`dataset.yaml`), so a task that changes
under the same version would make two sets of results look comparable when
they are not. `ssebench dataset pin DATASET` writes `manifest.json` beside
`dataset.yaml`; loading the dataset (pytest's collection, `ssebench run`,
`tasks list`, `dataset verify`) then refuses any task whose files differ from
it while the version is the one pinned. A dataset whose version differs from
its manifest's (bumped, not yet pinned) or that has no manifest (a scratch
copy, a dataset being written) is loaded as it is: pinning is what makes a
version final.

After `dataset verify`, `images.json` beside it records the image ids the
engine built for each task found valid, under the same version.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ssebench.errors import ConfigError
from ssebench.image import file_digests

MANIFEST_FILE = "manifest.json"
IMAGES_FILE = "images.json"
# How many changed files one refusal names.
_SHOWN = 3


@dataclass(frozen=True)
class Manifest:
    """`manifest.json`: the version pinned and each task's files (relative path -> digest)."""

    version: str
    tasks: dict[str, dict[str, str]]


def _write_json(path: Path, data: Any) -> None:
    """One entry a line, atomically; callers give their entries sorted, so the same content always gives the
    same bytes (merges stay small, a second pin changes nothing), the version first."""
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def pin_command(dataset_dir: Path) -> str:
    return (
        f"bump version in {dataset_dir / 'dataset.yaml'} and run `ssebench dataset pin {dataset_dir}`"
        f" (while authoring a version not yet released: `ssebench dataset pin {dataset_dir} --keep-version`)"
    )


def read_manifest(dataset_dir: Path) -> Manifest | None:
    """The dataset's manifest, or None when it has none; a manifest that cannot be read is a ConfigError."""
    path = dataset_dir / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        version, tasks = data["version"], data["tasks"]
        if not isinstance(version, str) or not isinstance(tasks, dict):
            raise TypeError
        pinned = {str(t): {str(k): str(v) for k, v in files.items()} for t, files in tasks.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ConfigError(
            path,
            "",
            f"not a manifest (JSON with version and tasks); write it again with `ssebench dataset pin {dataset_dir}`",
        ) from None
    return Manifest(version=version, tasks=pinned)


def pin(dataset_dir: Path, version: str, task_dirs: list[Path]) -> tuple[Path, bool, int]:
    """Write the manifest of these task folders under `version`: (its path, whether it changed, how many files
    it pins)."""
    path = dataset_dir / MANIFEST_FILE
    tasks = {d.name: file_digests(d) for d in sorted(task_dirs, key=lambda d: d.name)}
    before = path.read_bytes() if path.is_file() else None
    _write_json(path, {"version": version, "tasks": tasks})
    return path, path.read_bytes() != before, sum(len(files) for files in tasks.values())


def differences(pinned: dict[str, str], now: dict[str, str]) -> list[str]:
    """What changed in one task's files: `PATH changed`, `PATH added`, `PATH removed`, sorted by path."""
    found = []
    for rel in sorted(pinned.keys() | now.keys()):
        if rel not in pinned:
            found.append(f"{rel} added")
        elif rel not in now:
            found.append(f"{rel} removed")
        elif pinned[rel] != now[rel]:
            found.append(f"{rel} changed")
    return found


def check(dataset_dir: Path, version: str, task_dirs: list[Path]) -> tuple[list[ConfigError], dict[str, ConfigError]]:
    """Against the dataset's manifest: (problems of the dataset, problems of each task folder by name).

    Nothing when there is no manifest or it pins another version. A task
    folder that differs (or is not in the manifest) gets one line naming
    what changed and how to pin again; a pinned task whose folder is gone is
    a problem of the whole dataset.
    """
    manifest = read_manifest(dataset_dir)
    if manifest is None or manifest.version != version:
        return [], {}
    where = dataset_dir / MANIFEST_FILE
    fix = pin_command(dataset_dir)
    per_task: dict[str, ConfigError] = {}
    for task_dir in task_dirs:
        pinned = manifest.tasks.get(task_dir.name)
        if pinned is None:
            per_task[task_dir.name] = ConfigError(
                task_dir, "", f"is not in {where} ({version}), which pins this version: to add it, {fix}"
            )
            continue
        changed = differences(pinned, file_digests(task_dir))
        if changed:
            more = f" and {len(changed) - _SHOWN} more" if len(changed) > _SHOWN else ""
            per_task[task_dir.name] = ConfigError(
                task_dir,
                "",
                f"differs from {where} ({version}): {', '.join(changed[:_SHOWN])}{more}; to change a task, {fix}",
            )
    gone = sorted(manifest.tasks.keys() - {d.name for d in task_dirs})
    dataset_problems = []
    if gone:
        dataset_problems.append(
            ConfigError(
                dataset_dir,
                "",
                f"task(s) {', '.join(gone)} pinned in {where} ({version}) are gone; to remove a task, {fix}",
            )
        )
    return dataset_problems, per_task


def pinned_state(dataset_dir: Path, version: str) -> str:
    """`pinned`, `unpinned` (no manifest) or `pinned at OTHER` (the version was bumped since): for people."""
    manifest = read_manifest(dataset_dir)
    if manifest is None:
        return "unpinned"
    return "pinned" if manifest.version == version else f"pinned at {manifest.version}"


def record_images(
    dataset_dir: Path, version: str, images: dict[str, dict[str, str]], invalid: list[str] | None = None
) -> Path:
    """Add the image ids of tasks just verified valid to `images.json` and drop those of tasks just found
    invalid (entries of other tasks stay when the file is of the same version; one of another version is
    started again)."""
    path = dataset_dir / IMAGES_FILE
    known: dict[str, Any] = {}
    if path.is_file():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(old, dict) and old.get("version") == version and isinstance(old.get("tasks"), dict):
                known = dict(old["tasks"])
        except ValueError:
            pass  # a broken record of ids is written again from what this verify knows
    at = datetime.now(UTC).isoformat(timespec="seconds")
    for task, ids in images.items():
        known[task] = {**ids, "verified_at": at}
    for task in invalid or []:
        known.pop(task, None)
    _write_json(path, {"version": version, "tasks": dict(sorted(known.items()))})
    return path
