"""Predictions: patches made elsewhere, in SWE-bench's format, graded as runs of the `predictions` agent.

A predictions file is what SWE-bench's harness reads, so its users' files
work unchanged: JSON lines (`.jsonl`), or one JSON document holding a list
of predictions or an object keyed by instance id. Each prediction has

    instance_id          the task's id (config.yaml `id`), or `DATASET/ID`
    model_patch          the patch, a unified diff of the task's source tree
    model_name_or_path   the model: the run's model name (results/TASK/MODEL/predictions/)

and may have other keys (SWE-bench's files carry some), which are ignored.
A bad file is refused in one line naming the file, the line (or item) and
the field; so is a second prediction of the same task by the same model.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ssebench.errors import ConfigError, SSEBenchError
from ssebench.result import path_component, read_safely
from ssebench.runtime.contract import PREDICTIONS_AGENT as PREDICTIONS_AGENT
from ssebench.task import Task

if TYPE_CHECKING:
    from ssebench.runs import StoredRun

__all__ = [
    "KEYS",
    "PATCH_CAP",
    "PREDICTIONS_AGENT",
    "PastRun",
    "Prediction",
    "Predictions",
    "load_predictions",
    "past_runs",
    "prediction_line",
]

# SWE-bench's keys: the task, the patch, the model.
KEYS = ("instance_id", "model_patch", "model_name_or_path")
# The largest patch a prediction may hold: what a capture makes at most (the runtime's patch limit).
PATCH_CAP = 64 << 20
# A model name becomes part of item names and of a path (encoded): printable, one line, not too long.
MODEL_NAME_CAP = 200


@dataclass(frozen=True)
class Prediction:
    """One prediction: a patch for a task, by a model."""

    instance_id: str
    model: str
    patch: str
    # Where it is in its file, for messages: `line 3`, `item 2`, `key 'c-demo'`.
    where: str = ""

    @property
    def digest(self) -> str:
        """What identifies the patch (sha256 of its bytes): part of the run's identity, for `--resume`."""
        return hashlib.sha256(self.patch.encode("utf-8", errors="surrogateescape")).hexdigest()

    def names(self, task: Task) -> bool:
        """Whether its instance_id names `task`: the task's id, or `DATASET/ID`."""
        dataset, sep, task_id = self.instance_id.rpartition("/")
        return self.instance_id == task.id or bool(sep and dataset == task.dataset and task_id == task.id)


@dataclass(frozen=True)
class Predictions:
    """A predictions file, loaded: its predictions in file order."""

    path: Path
    items: tuple[Prediction, ...]
    _by_id: dict[str, list[Prediction]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for prediction in self.items:
            task_id = prediction.instance_id.rpartition("/")[2]
            self._by_id.setdefault(task_id, []).append(prediction)

    def for_task(self, task: Task) -> list[Prediction]:
        """The predictions naming `task`, in file order."""
        return [p for p in self._by_id.get(task.id, []) if p.names(task)]

    def naming_none_of(self, tasks: Iterable[Task]) -> list[Prediction]:
        """The predictions that name none of `tasks`, in file order."""
        named = {id(p) for task in tasks for p in self.for_task(task)}
        return [p for p in self.items if id(p) not in named]


def _records(path: Path, text: str) -> Iterator[tuple[str, Any]]:
    """(where, JSON value) of each prediction in the file's text: a line of JSON lines, an item of a list,
    a value of an object keyed by instance id (its key then stands for a missing instance_id)."""
    stripped = text.lstrip()
    if path.suffix != ".jsonl" and stripped[:1] in ("[", "{"):
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            if path.suffix == ".json" or stripped[:1] == "[":
                raise ConfigError(path, f"line {exc.lineno}", f"not valid JSON: {exc.msg}") from None
            document = None  # JSON lines whose first line is an object
        if isinstance(document, list):
            for number, value in enumerate(document, 1):
                yield f"item {number}", value
            return
        if isinstance(document, dict) and not any(key in document for key in KEYS):
            for key, value in document.items():
                if isinstance(value, dict) and "instance_id" not in value:
                    value = {**value, "instance_id": key}
                elif isinstance(value, dict) and value["instance_id"] != key:
                    raise ConfigError(
                        path, f"key {key!r}", f"its instance_id is {value['instance_id']!r}: make them the same"
                    )
                yield f"key {key!r}", value
            return
        if isinstance(document, dict):  # one prediction
            yield ("line 1" if len(stripped.rstrip().splitlines()) == 1 else "item 1"), document
            return
        if document is not None:
            raise ConfigError(path, "", "holds neither a list of predictions nor an object keyed by instance_id")
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(path, f"line {number}", f"not valid JSON: {exc.msg}") from None
        yield f"line {number}", value


def _text_field(path: Path, where: str, record: dict[str, Any], key: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value.strip():
        got = "missing" if key not in record else f"{type(value).__name__} {str(value)[:40]!r}"
        raise ConfigError(path, f"{where}: {key}", f"must be a non-empty string (got {got})")
    return value


def _prediction(path: Path, where: str, record: object) -> Prediction:
    if not isinstance(record, dict):
        raise ConfigError(path, where, f"must be a JSON object with {', '.join(KEYS)}")
    instance_id = _text_field(path, where, record, "instance_id").strip()
    model = _text_field(path, where, record, "model_name_or_path").strip()
    if len(model) > MODEL_NAME_CAP or any(unicodedata.category(c).startswith("C") for c in model):
        raise ConfigError(
            path,
            f"{where}: model_name_or_path",
            f"must be one printable line of at most {MODEL_NAME_CAP} characters (got {model[:60]!r})",
        )
    try:
        path_component(model)  # its runs' folder: refused here rather than as each run's error
    except SSEBenchError as exc:
        raise ConfigError(path, f"{where}: model_name_or_path", str(exc)) from None
    patch = record.get("model_patch")
    if patch is None:
        patch = ""  # SWE-bench's files say null for a model that made no patch: graded as no change
    if not isinstance(patch, str):
        raise ConfigError(
            path, f"{where}: model_patch", f"must be a string, a unified diff (got {type(patch).__name__})"
        )
    if len(patch) > PATCH_CAP:
        raise ConfigError(path, f"{where}: model_patch", f"is larger than {PATCH_CAP >> 20} MiB")
    try:
        patch.encode("utf-8")  # JSON's \ud800 escapes hold what no file can: refused here, not in the run
    except UnicodeEncodeError as exc:
        raise ConfigError(
            path, f"{where}: model_patch", f"must be UTF-8 text (a lone surrogate at character {exc.start})"
        ) from None
    return Prediction(instance_id=instance_id, model=model, patch=patch, where=where)


def load_predictions(path: Path) -> Predictions:
    """Read a predictions file. Raises ConfigError naming the file, the line (or item, or key) and the field.

    Two predictions of the same task by the same model are refused, naming both: which one to grade is the
    user's to say.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(path, "", "no such file: give a predictions file (JSON lines, SWE-bench's format)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, "", f"cannot be read as UTF-8 text: {exc}") from None
    predictions: list[Prediction] = []
    seen: dict[tuple[str, str], str] = {}
    for where, record in _records(path, text):
        prediction = _prediction(path, where, record)
        key = (prediction.instance_id, prediction.model)
        if key in seen:
            raise ConfigError(
                path,
                where,
                f"a second prediction of {prediction.instance_id} by model {prediction.model!r} "
                f"(the first is at {seen[key]}): keep one",
            )
        seen[key] = where
        predictions.append(prediction)
    if not predictions:
        raise ConfigError(path, "", f"holds no prediction (JSON objects with {', '.join(KEYS)})")
    return Predictions(path=path, items=tuple(predictions))


def prediction_line(instance_id: str, model: str, patch: str) -> str:
    """One prediction as a line of a JSON lines file."""
    return json.dumps({"instance_id": instance_id, "model_name_or_path": model, "model_patch": patch})


@dataclass(frozen=True)
class PastRun:
    """A past run's change, as a prediction: the newest run of a task by an agent and model."""

    instance_id: str
    model: str
    patch: str
    run_dir: Path


def past_runs(results_root: Path) -> Iterator[PastRun]:
    """The newest run with a final.patch of each task x model x agent under `results_root`
    (results/<task>/<model>/<agent>/<run-id>/, read by `ssebench.runs`, which follows no link), as a
    prediction named `<agent>/<model>`: what `ssebench results predictions` prints, so that any past run's
    patch can be graded again."""
    from ssebench.runs import read_runs

    newest: dict[tuple[str, ...], tuple[StoredRun, str]] = {}
    for run in reversed(read_runs(results_root)):  # newest first: each group's patch is read once found
        if run.parts[:3] in newest:
            continue
        patch = read_safely(run.run_dir, "final.patch", limit=PATCH_CAP, tail=False)
        if patch is not None:
            newest[run.parts[:3]] = (run, patch)
    for _, (run, patch) in sorted(newest.items()):
        yield PastRun(instance_id=run.task, model=f"{run.agent}/{run.model}", patch=patch, run_dir=run.run_dir)
