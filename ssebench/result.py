"""A run's directory on the host: where it goes, what is written there, and reading it safely.

    results/<task>/<model>/<agent>/<run-id>/
        (each name escaped into one path component: openai/gpt-4o -> openai%2Fgpt-4o)
        summary.json  result.json  final.patch  reference.patch  source.tar.gz  commits.log  *.log  archive/
        (and prediction.patch, the patch a predictions run was given)

What summary.json holds is `ssebench.record.RunRecord`'s; what result.json
holds, `sse.result.RunResult`'s. A run never reuses another's directory; `latest` points at the newest run of
a task/model/agent. Part of a run directory (archive/) was writable by the
agent, so the harness reads files there without following links and only
if they are regular files.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from sse.result import RunResult

from ssebench.errors import SSEBenchError

# The task's reference patch, copied into each run's directory once the run is over (`run.save_reference_patch`).
REFERENCE_PATCH_FILE = "reference.patch"
# A predictions run's patch as its file gave it (`run.save_prediction`); final.patch is what grading captured.
PREDICTION_FILE = "prediction.patch"
# The agent's final tree as the engine tars it, gzipped, and the most of it (as a tar) kept (`run.save_source`).
SOURCE_FILE = "source.tar.gz"
SOURCE_CAP = 128 << 20

# What the report shows of a log: enough to see a failure, never megabytes.
TAIL_BYTES = 64 * 1024


def new_run_id(difficulty: int, mode: str) -> str:
    return f"{time.strftime('%Y%m%dT%H%M%S')}-d{difficulty}-{mode}-{secrets.token_hex(3)}"


# Characters a name keeps in a path component; everything else is %XX-escaped.
_SAFE = "-_.+@="


def path_component(name: str) -> str:
    """A user-given name (model, agent, task id) as one path component, reversibly.

    `openai/gpt-4o` -> `openai%2Fgpt-4o`, `..` -> `%2E.`: never a separator,
    never `.` or `..`, never hidden. `name_of(path_component(x)) == x`.
    """
    if not name:
        raise SSEBenchError("an empty name cannot name a results directory")
    component = quote(name, safe=_SAFE)
    if component.startswith("."):
        component = "%2E" + component[1:]
    if len(component.encode()) > 255:
        raise SSEBenchError(
            f"the name {name[:40]!r}… is too long for a results directory "
            f"({len(component.encode())} bytes escaped, at most 255)"
        )
    return component


def name_of(component: str) -> str:
    """The name a path component was made from (the inverse of `path_component`)."""
    return unquote(component)


def runs_parent(results_root: Path, task_id: str, model: str, agent: str) -> Path:
    """Where the runs of a task x model x agent go: always inside `results_root`."""
    return results_root / path_component(task_id) / path_component(model) / path_component(agent)


def _levels(results_root: Path, below: Path) -> list[Path]:
    """The folders from `results_root` (excluded) down to `below` (included), top first."""
    parts = below.relative_to(results_root).parts
    return [results_root.joinpath(*parts[:n]) for n in range(1, len(parts) + 1)]


def linked_level(results_root: Path, below: Path) -> Path | None:
    """The first folder between `results_root` and `below` that is a link (never to be followed), if any."""
    return next((level for level in _levels(results_root, below) if level.is_symlink()), None)


def make_run_dir(results_root: Path, task_id: str, model: str, agent: str, run_id: str) -> Path:
    """Create the run's directory; never an existing one, never outside `results_root`.

    Its files arrive when the run ends.
    """
    parent = runs_parent(results_root, task_id, model, agent)
    results_root.mkdir(parents=True, exist_ok=True)
    linked = linked_level(results_root, parent)
    if linked is not None:
        raise SSEBenchError(
            f"{linked} is a link, which would lead runs outside {results_root}; remove it or choose another --results"
        )
    parent.mkdir(parents=True, exist_ok=True)
    run_dir = parent / path_component(run_id)
    try:
        run_dir.mkdir()
    except FileExistsError:
        raise SSEBenchError(f"{run_dir} already exists; a run never reuses another's directory") from None
    return run_dir


def point_latest(run_dir: Path) -> None:
    """Make `latest` beside the run point at it, replacing the old link atomically."""
    link = run_dir.parent / "latest"
    tmp = run_dir.parent / f".latest-{secrets.token_hex(4)}"
    os.symlink(run_dir.name, tmp)
    os.replace(tmp, link)


def write_text_atomic(path: Path, text: str) -> None:
    """Write a file by temp file and rename: never half-written, never through a link at `path`."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any) -> None:
    """Write JSON by temp file and rename: never half-written."""
    write_text_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


def read_safely(run_dir: Path, relative: str, limit: int = TAIL_BYTES, tail: bool = True) -> str | None:
    """A run file's text (its tail when long), or None when absent, a link or not a regular file.

    Every component below `run_dir` is opened with O_NOFOLLOW, so a link the
    agent planted in archive/ cannot make the harness read a host file.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    parts = Path(relative).parts
    if not parts or any(p in ("..", "/") for p in parts):
        return None
    try:
        fd = os.open(run_dir, flags | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            next_fd = os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        leaf = os.open(parts[-1], flags, dir_fd=fd)
    except OSError:
        os.close(fd)
        return None
    os.close(fd)
    try:
        info = os.fstat(leaf)
        if not stat.S_ISREG(info.st_mode):
            return None
        if tail and info.st_size > limit:
            os.lseek(leaf, info.st_size - limit, os.SEEK_SET)
            prefix = f"[… {info.st_size - limit} bytes before this are not shown]\n"
        else:
            prefix = ""
        chunks, size = [], 0
        while size < limit and (chunk := os.read(leaf, min(1 << 20, limit - size))):
            chunks.append(chunk)
            size += len(chunk)
        return prefix + b"".join(chunks).decode("utf-8", errors="replace")
    finally:
        os.close(leaf)


def read_result(run_dir: Path) -> RunResult | None:
    """result.json as the container (or the host's override) wrote it, any version read as the current one;
    None when missing, unreadable or not a result."""
    text = read_safely(run_dir, "result.json", limit=16 * 1024 * 1024, tail=False)
    if text is None:
        return None
    try:
        return RunResult.from_json(json.loads(text))
    except ValueError:
        return None


def read_json_object(run_dir: Path, relative: str, limit: int = 4 << 20) -> dict[str, Any] | None:
    """A run file's JSON object, or None when missing, unreadable or not an object."""
    text = read_safely(run_dir, relative, limit=limit, tail=False)
    try:
        data = json.loads(text) if text else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
