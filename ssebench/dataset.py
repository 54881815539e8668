"""Datasets: folders of tasks with a `dataset.yaml`, and finding them on disk."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import field_validator

from ssebench import manifest
from ssebench.errors import ConfigError, ConfigErrors
from ssebench.schema import Strict, load
from ssebench.task import TASK_ID_PATTERN, Task, load_task

DATASET_FILE = "dataset.yaml"
# Folders never searched for datasets: results, caches and VCS metadata.
_SKIP_DIRS = {"results", "node_modules", "__pycache__", "build", "dist"}


class DatasetConfig(Strict):
    """`dataset.yaml`."""

    version: str
    """The dataset's version (e.g. pilot-v1): bump it whenever results could change; results record it."""
    description: str | None = None
    """What the dataset holds, for people."""

    @field_validator("version", mode="before", json_schema_input_type=str | int | float)
    @classmethod
    def _version(cls, value: object) -> str:
        if value is None or not str(value).strip():
            raise ValueError("must not be empty; bump it whenever results could change, e.g. pilot-v1")
        return str(value).strip()


@dataclass(frozen=True)
class Dataset:
    """A dataset folder and its tasks (loaded and validated)."""

    path: Path
    config: DatasetConfig
    tasks: list[Task] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.resolve().name

    @property
    def version(self) -> str:
        return self.config.version


def is_task_dir(path: Path) -> bool:
    """A task folder of a dataset: not hidden, with an `sse/` folder (its config.yaml may still be missing)."""
    return (path / "sse").is_dir() and not path.name.startswith(".")


def looks_like_task(path: Path) -> bool:
    """What pytest collects as a task: a dataset's task folder, or any folder with `sse/config.yaml`.

    (`sdk/`, which holds the `sse` package, is neither.)
    """
    if (path / "sse" / "config.yaml").is_file():
        return True
    return is_task_dir(path) and (path.parent / DATASET_FILE).is_file()


# A task's file, relative to its folder: pytest collects a task's runs as its items.
TASK_FILE = "sse/config.yaml"


def run_argument(arg: str, cwd: Path) -> str:
    """A pytest argument `TASK_FOLDER::RUN` as the task's file with the run (`pytest` refuses `::` after a
    folder); any other argument as it is."""
    folder, sep, rest = arg.partition("::")
    if sep and not arg.startswith("-") and looks_like_task(cwd / folder):
        return f"{folder.rstrip('/')}/{TASK_FILE}::{rest}"
    return arg


def argument_path(arg: str) -> str:
    """The path a pytest argument names without its run: a task's file stands for the task's folder."""
    return arg.split("::", 1)[0].removesuffix("/" + TASK_FILE)


def task_dirs(dataset_dir: Path) -> list[Path]:
    """Task folders of a dataset, sorted by name."""
    return sorted((p for p in dataset_dir.iterdir() if p.is_dir() and is_task_dir(p)), key=lambda p: p.name)


def load_dataset_config(dataset_dir: Path) -> DatasetConfig:
    return load(DatasetConfig, dataset_dir / DATASET_FILE)


def check_dataset_name(dataset_dir: Path) -> None:
    name = dataset_dir.resolve().name
    if not TASK_ID_PATTERN.match(name):
        raise ConfigError(
            dataset_dir, "", f"dataset folder name '{name}' must be letters and digits separated by '.', '_' or '-'"
        )


@dataclass
class _Members:
    """What loading a dataset folder found: its config, its tasks, and the problems of each."""

    config: DatasetConfig | None
    problems: list[ConfigError]  # of the dataset itself (name, dataset.yaml)
    tasks: dict[Path, Task]
    task_problems: dict[Path, list[ConfigError]]


def _load_members(dataset_dir: Path, check_files: bool) -> _Members:
    members = _Members(config=None, problems=[], tasks={}, task_problems={})
    try:
        check_dataset_name(dataset_dir)
        members.config = load_dataset_config(dataset_dir)
    except ConfigError as exc:
        members.problems.append(exc)
    except ConfigErrors as exc:
        members.problems.extend(exc.errors)
    version = members.config.version if members.config else None
    seen: dict[str, Path] = {}
    for task_dir in task_dirs(dataset_dir):
        key = task_dir.resolve()
        try:
            task = load_task(task_dir, dataset_dir.resolve().name, check_files=check_files, dataset_version=version)
        except ConfigErrors as exc:
            members.task_problems[key] = list(exc.errors)
            continue
        except ConfigError as exc:
            members.task_problems[key] = [exc]
            continue
        other = seen.get(task.id.lower())
        if other is not None:
            members.task_problems[key] = [
                ConfigError(
                    task.config_path, "id", f"'{task.id}' clashes with {other.name} (ids are unique case-insensitively)"
                )
            ]
            continue
        seen[task.id.lower()] = task_dir
        members.tasks[key] = task
    if version is not None:
        try:
            pinned, per_task = manifest.check(dataset_dir, version, task_dirs(dataset_dir))
        except ConfigError as exc:
            pinned, per_task = [exc], {}
        members.problems.extend(pinned)
        for task_dir in task_dirs(dataset_dir):
            if task_dir.name in per_task:
                members.task_problems.setdefault(task_dir.resolve(), []).append(per_task[task_dir.name])
                members.tasks.pop(task_dir.resolve(), None)
    return members


def load_dataset(dataset_dir: Path, *, check_files: bool = True) -> Dataset:
    """Load a dataset and every task in it; raise ConfigErrors listing every problem."""
    dataset_dir = Path(dataset_dir)
    members = _load_members(dataset_dir, check_files)
    problems = members.problems + [e for errors in members.task_problems.values() for e in errors]
    if problems:
        raise ConfigErrors(problems)
    assert members.config is not None
    return Dataset(path=dataset_dir, config=members.config, tasks=list(members.tasks.values()))


class TaskLoader:
    """Loads task folders one at a time (as pytest collects them) by the same rules as `load_dataset`.

    A task inside a dataset is loaded with its whole dataset (once per
    loader), so it gets the dataset's name and version, and an id that
    clashes with another task's is an error here too.
    """

    def __init__(self, *, check_files: bool = True) -> None:
        self.check_files = check_files
        self._datasets: dict[Path, _Members] = {}

    def load(self, task_dir: Path) -> Task:
        task_dir = Path(task_dir).resolve()
        dataset_dir = task_dir.parent
        if not (dataset_dir / DATASET_FILE).is_file():
            return load_task(task_dir, dataset_dir.name, check_files=self.check_files)
        members = self._datasets.get(dataset_dir)
        if members is None:
            members = self._datasets[dataset_dir] = _load_members(dataset_dir, self.check_files)
        problems = members.problems + members.task_problems.get(task_dir, [])
        if problems:
            raise ConfigErrors(problems)
        task = members.tasks.get(task_dir)
        if task is None:  # not a task folder by the dataset's rules (a hidden folder, say)
            return load_task(
                task_dir,
                dataset_dir.name,
                check_files=self.check_files,
                dataset_version=members.config.version if members.config else None,
            )
        return task


def load_task_in_place(task_dir: Path, *, check_files: bool = True) -> Task:
    """One task folder, with the name and version of the dataset it sits in (if its parent is one)."""
    return TaskLoader(check_files=check_files).load(task_dir)


def _walk(root: Path) -> Iterator[Path]:
    """Dataset folders at or below `root`, and the task folders outside any dataset (a folder with
    `sse/config.yaml`): what pytest collects there."""
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if DATASET_FILE in filenames or (here != root and looks_like_task(here)):
            yield here
            dirnames[:] = []  # tasks live directly below a dataset; nothing below a task is one
            continue
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS)


def find_datasets(path: Path) -> list[Path]:
    """Dataset folders at or below `path`."""
    path = Path(path)
    if (path / DATASET_FILE).is_file():
        return [path]
    return [found for found in _walk(path) if (found / DATASET_FILE).is_file()]


def load_tasks(path: Path, *, check_files: bool = True) -> list[Task]:
    """Every task at `path`: a task folder, a dataset folder, or any folder above datasets and task folders
    (the tasks pytest collects there).

    A task folder outside a dataset is loaded on its own, its dataset named
    after the parent folder.
    """
    path = Path(path)
    if not path.exists():
        raise ConfigError(path, "", "no such file or directory")
    if is_task_dir(path):
        return [load_task_in_place(path, check_files=check_files)]
    found = [path] if (path / DATASET_FILE).is_file() else list(_walk(path))
    if not found:
        raise ConfigError(path, "", f"holds no task folder (a folder with sse/config.yaml) and no {DATASET_FILE}")
    tasks: list[Task] = []
    problems: list[ConfigError] = []
    for folder in found:
        try:
            if (folder / DATASET_FILE).is_file():
                tasks.extend(load_dataset(folder, check_files=check_files).tasks)
            else:  # a task outside any dataset, as pytest collects it
                tasks.append(load_task_in_place(folder, check_files=check_files))
        except ConfigErrors as exc:
            problems.extend(exc.errors)
        except ConfigError as exc:
            problems.append(exc)
    if problems:
        raise ConfigErrors(problems)
    return tasks
