"""Datasets: folders of tasks with a `dataset.yaml`, and finding them on disk."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import Field, field_validator

from ssebench import manifest
from ssebench.errors import ConfigError, ConfigErrors
from ssebench.schema import Strict, load
from ssebench.task import TASK_ID_PATTERN, Task, load_task

DATASET_FILE = "dataset.yaml"
# Folders never searched for datasets: results, caches and VCS metadata.
_SKIP_DIRS = {"results", "node_modules", "__pycache__", "build", "dist"}


class Listed(Strict):
    """A task of the dataset set apart, with the reason: quarantined (its verify runs disagree among
    themselves, `dataset verify --repeat`) or long (over the cost ceiling)."""

    task: str
    """The task's id."""
    reason: str
    """Why: which check flaked, how often, and what was seen; or what went over the ceiling, by how much."""

    @field_validator("task", "reason")
    @classmethod
    def _said(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()


class DatasetConfig(Strict):
    """`dataset.yaml`."""

    version: str
    """The dataset's version (e.g. pilot-v1): bump it whenever results could change; results record it."""
    description: str | None = None
    """What the dataset holds, for people."""
    quarantine: list[Listed] = Field(default_factory=list)
    """Tasks whose results are noise: each with its reason. Still run and verified, but left out of the score
    table, which says how many runs it left out. A list of {task, reason}, or a mapping of task id to reason."""
    long: list[Listed] = Field(default_factory=list)
    """Tasks over the cost ceiling (a case image build or a reference run of more than 5 minutes on 2 cores;
    `dataset verify` names them): each with its reason. Their runs carry the `long` marker, so
    `-m "not long"` runs the quick set. The same two forms as `quarantine`."""

    @field_validator("quarantine", "long", mode="before", json_schema_input_type=list[Listed] | dict[str, str] | None)
    @classmethod
    def _listed(cls, value: object) -> object:
        # The mapping form (task: reason) is the list form written shorter.
        if value is None:
            return []
        if isinstance(value, dict):
            return [{"task": task, "reason": reason} for task, reason in value.items()]
        if not isinstance(value, list):
            raise ValueError("must be a list of {task, reason}, or a mapping of task id to reason")
        return value

    @field_validator("quarantine", "long")
    @classmethod
    def _once(cls, value: list[Listed]) -> list[Listed]:
        seen: set[str] = set()
        for entry in value:
            if entry.task.lower() in seen:
                raise ValueError(f"task '{entry.task}' is listed twice; keep one entry")
            seen.add(entry.task.lower())
        return value

    def quarantined(self) -> dict[str, str]:
        """Task id (lower case) -> the reason it is quarantined."""
        return {entry.task.lower(): entry.reason for entry in self.quarantine}

    def long_tasks(self) -> dict[str, str]:
        """Task id (lower case) -> the reason it is over the cost ceiling."""
        return {entry.task.lower(): entry.reason for entry in self.long}

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
        if members.config is not None:
            task = replace(
                task,
                quarantined=members.config.quarantined().get(task.id.lower()),
                long=members.config.long_tasks().get(task.id.lower()),
            )
        members.tasks[key] = task
    if members.config is not None:
        # A task's problems make it unknown here too: said once, by the task's own lines.
        known = {path.name.lower() for path in members.task_problems}
        for field_name, listed in (("quarantine", members.config.quarantine), ("long", members.config.long)):
            for task_id in (e.task for e in listed if e.task.lower() not in seen and e.task.lower() not in known):
                members.problems.append(
                    ConfigError(
                        dataset_dir / DATASET_FILE,
                        field_name,
                        f"names task '{task_id}', which is not in this dataset: correct the id or remove the entry",
                    )
                )
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


# -k's words: parentheses, and runs of anything else but blanks.
_K_TOKEN = re.compile(r"\s*([()]|[^()\s]+)")


def select_tasks(tasks: list[Task], expression: str) -> list[Task]:
    """The tasks whose id `expression` matches, in their order: as pytest's -k, a word matches the ids that
    contain it (any case), and words join with `and`, `or`, `not` and parentheses
    (`"libcue or jwt-go"`, `"CVE-2023 and not cjson"`). Raises ValueError naming what is wrong."""
    tokens = _K_TOKEN.findall(expression)
    if "".join(tokens) != re.sub(r"\s", "", expression):
        raise ValueError(f"-k {expression!r}: cannot be read")
    if not tokens:
        raise ValueError("-k: empty; give a word of the task ids, e.g. -k libcue")
    position = 0

    def peek() -> str | None:
        return tokens[position] if position < len(tokens) else None

    def take() -> str:
        nonlocal position
        token = peek()
        if token is None:
            raise ValueError(f"-k {expression!r}: ends where a word was expected")
        position += 1
        return token

    # Each level returns a predicate on a task id (lower case).
    def either() -> Callable[[str], bool]:
        terms = [both()]
        while peek() == "or":
            take()
            terms.append(both())
        return lambda task_id: any(term(task_id) for term in terms)

    def both() -> Callable[[str], bool]:
        terms = [single()]
        while peek() == "and":
            take()
            terms.append(single())
        return lambda task_id: all(term(task_id) for term in terms)

    def single() -> Callable[[str], bool]:
        token = take()
        if token == "not":
            inner = single()
            return lambda task_id: not inner(task_id)
        if token == "(":
            inner = either()
            if peek() != ")":
                raise ValueError(f"-k {expression!r}: a '(' is not closed")
            take()
            return inner
        if token in (")", "and", "or"):
            raise ValueError(f"-k {expression!r}: '{token}' where a word was expected")
        word = token.lower()
        return lambda task_id: word in task_id

    match = either()
    if peek() is not None:
        raise ValueError(f"-k {expression!r}: '{peek()}' after a whole expression; join words with and/or")
    return [task for task in tasks if match(task.id.lower())]
