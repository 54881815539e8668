"""Datasets and finding tasks on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from ssebench import ConfigError, ConfigErrors, load_dataset, load_tasks
from tests.helpers import task_config, write_dataset, write_task

pytest_plugins = ["pytester"]


def test_tasks_found_from_dataset_task_or_folder_above(tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path / "datasets", tasks=("b-task", "a-task"))
    write_dataset(tmp_path / "datasets", name="other", tasks=("c-task",))
    assert [t.id for t in load_tasks(dataset)] == ["a-task", "b-task"]
    assert [t.id for t in load_tasks(dataset / "b-task")] == ["b-task"]
    found = load_tasks(tmp_path)
    assert sorted((t.dataset, t.id) for t in found) == [
        ("other", "c-task"),
        ("tinyset", "a-task"),
        ("tinyset", "b-task"),
    ]


def test_a_folder_of_tasks_without_dataset_yaml_holds_what_pytest_collects(
    tmp_path: Path, pytester: pytest.Pytester
) -> None:
    loose = tmp_path / "mine"
    write_task(loose, "z-task")
    write_task(loose / "deeper", "y-task")
    write_dataset(tmp_path, name="set", tasks=("x-task",))
    found = sorted((t.dataset, t.id) for t in load_tasks(tmp_path))
    assert found == [("deeper", "y-task"), ("mine", "z-task"), ("set", "x-task")]
    assert [t.id for t in load_tasks(loose)] == ["y-task", "z-task"]
    # pytest collects the same tasks there.
    collected = pytester.runpytest(str(tmp_path), "--agent", "dummy", "--collect-only", "-q", "-p", "no:cacheprovider")
    ids = sorted(line.split("/sse/config.yaml::")[0].rsplit("/", 1)[-1] for line in collected.outlines if "::" in line)
    assert ids == ["x-task", "y-task", "z-task"], collected.outlines


def test_dataset_version_is_required(tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path)
    (dataset / "dataset.yaml").write_text("description: no version\n")
    with pytest.raises(ConfigErrors) as info:
        load_dataset(dataset)
    assert [str(e) for e in info.value.errors] == [f"{dataset / 'dataset.yaml'}: version: required key is missing"]


def test_dataset_unknown_key(tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path)
    (dataset / "dataset.yaml").write_text("version: v1\nowner: me\n")
    with pytest.raises(ConfigErrors, match="owner: unknown key"):
        load_dataset(dataset)


def test_ids_unique_case_insensitively(tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path, tasks=("Task-A",))
    write_task(dataset, "task-a", config=task_config("task-a"))
    with pytest.raises(ConfigErrors, match="clashes with"):
        load_dataset(dataset)


def test_every_broken_task_is_reported(tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path, tasks=("good", "bad-1", "bad-2"))
    for name in ("bad-1", "bad-2"):
        (dataset / name / "Dockerfile").unlink()
    with pytest.raises(ConfigErrors) as info:
        load_dataset(dataset)
    assert sorted(e.path.parent.name for e in info.value.errors) == ["bad-1", "bad-2"]


def test_a_folder_without_tasks_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="holds no task folder"):
        load_tasks(tmp_path)


def test_missing_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file or directory"):
        load_tasks(tmp_path / "nope")
