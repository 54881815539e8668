"""Datasets and finding tasks on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from ssebench import ConfigError, ConfigErrors, load_dataset, load_tasks
from ssebench.dataset import select_tasks
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


# -- quarantine and long: tasks set apart, each with its reason ---------------------------------------------

LISTS = {"quarantine": "quarantined", "long": "long"}  # dataset.yaml's field -> the Task's


@pytest.mark.parametrize("listed", LISTS)
@pytest.mark.parametrize(
    "entries",
    [
        "LIST:\n  - task: b-task\n    reason: flaky poc (1 of 3)\n",
        "LIST:\n  b-task: flaky poc (1 of 3)\n",
        "LIST:\n  B-TASK: flaky poc (1 of 3)\n",  # ids are case-insensitive, as everywhere
    ],
)
def test_a_list_or_a_mapping_marks_the_task_with_its_reason(tmp_path: Path, entries: str, listed: str) -> None:
    dataset = write_dataset(tmp_path, tasks=("a-task", "b-task"))
    (dataset / "dataset.yaml").write_text("version: v1\n" + entries.replace("LIST", listed))
    other = next(name for name in LISTS.values() if name != LISTS[listed])
    tasks = {t.id: (getattr(t, LISTS[listed]), getattr(t, other)) for t in load_dataset(dataset).tasks}
    assert tasks == {"a-task": (None, None), "b-task": ("flaky poc (1 of 3)", None)}
    # Loaded one at a time, as pytest collects it, the task knows it too.
    assert [getattr(t, LISTS[listed]) for t in load_tasks(dataset / "b-task")] == ["flaky poc (1 of 3)"]


def test_a_long_tasks_runs_carry_the_long_marker(tmp_path: Path, pytester: pytest.Pytester) -> None:
    dataset = write_dataset(tmp_path, tasks=("a-task", "b-task"))
    (dataset / "dataset.yaml").write_text("version: v1\nlong:\n  b-task: reference run 410 s\n")

    def collected(*marks: str) -> list[str]:
        out = pytester.runpytest(
            str(dataset), "--agent", "dummy", *marks, "--collect-only", "-q", "-p", "no:cacheprovider"
        )
        return sorted(line.split("/sse/config.yaml::")[0].rsplit("/", 1)[-1] for line in out.outlines if "::" in line)

    assert collected() == ["a-task", "b-task"]
    assert collected("-m", "not long") == ["a-task"]
    assert collected("-m", "long") == ["b-task"]


@pytest.mark.parametrize(
    ("entries", "problem"),
    [
        (
            "quarantine:\n  - task: no-such-task\n    reason: x\n",
            "quarantine: names task 'no-such-task', which is not in this dataset: correct the id or remove the entry",
        ),
        (
            "long:\n  - task: no-such-task\n    reason: x\n",
            "long: names task 'no-such-task', which is not in this dataset: correct the id or remove the entry",
        ),
        ("long:\n  a-task: ''\n", "long[0].reason: must not be empty"),
        ("quarantine:\n  - task: a-task\n", "quarantine[0].reason: required key is missing"),
        ("quarantine:\n  a-task: '  '\n", "quarantine[0].reason: must not be empty"),
        (
            "quarantine:\n  - {task: a-task, reason: x, until: never}\n",
            "quarantine[0].until: unknown key (check its spelling against the file format: docs/formats.md)",
        ),
        (
            "quarantine:\n  - {task: a-task, reason: x}\n  - {task: A-task, reason: y}\n",
            "quarantine: task 'A-task' is listed twice; keep one entry",
        ),
        (
            "quarantine: a-task\n",
            "quarantine: must be a list of {task, reason}, or a mapping of task id to reason",
        ),
    ],
)
def test_a_wrong_entry_is_one_line_naming_the_field(tmp_path: Path, entries: str, problem: str) -> None:
    dataset = write_dataset(tmp_path, tasks=("a-task",))
    (dataset / "dataset.yaml").write_text("version: v1\n" + entries)
    with pytest.raises(ConfigErrors) as info:
        load_dataset(dataset)
    assert [str(e) for e in info.value.errors] == [f"{dataset / 'dataset.yaml'}: {problem}"]


# -- -k: selecting tasks by id ------------------------------------------------------------------------------


IDS = ("libcue-CVE-2023-43641", "jwt-go-CVE-2020-26160", "time-CVE-2026-25727", "cjson-CVE-2023-50471")


@pytest.mark.parametrize(
    ("expression", "chosen"),
    [
        ("jwt", ["jwt-go-CVE-2020-26160"]),
        ("CVE-2023", ["cjson-CVE-2023-50471", "libcue-CVE-2023-43641"]),
        ("cve-2023", ["cjson-CVE-2023-50471", "libcue-CVE-2023-43641"]),  # any case
        ("libcue-CVE-2023-43641 or time", ["libcue-CVE-2023-43641", "time-CVE-2026-25727"]),
        ("not CVE-2023", ["jwt-go-CVE-2020-26160", "time-CVE-2026-25727"]),
        ("CVE-2023 and not cjson", ["libcue-CVE-2023-43641"]),
        ("not (jwt or time) and c", ["cjson-CVE-2023-50471", "libcue-CVE-2023-43641"]),
        ("nothing", []),
    ],
)
def test_k_selects_tasks_as_pytests_k_does(tmp_path: Path, expression: str, chosen: list[str]) -> None:
    tasks = load_dataset(write_dataset(tmp_path, tasks=IDS)).tasks
    assert sorted(t.id for t in select_tasks(tasks, expression)) == chosen


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("", "-k: empty; give a word of the task ids, e.g. -k libcue"),
        ("jwt time", "-k 'jwt time': 'time' after a whole expression; join words with and/or"),
        ("jwt or", "-k 'jwt or': ends where a word was expected"),
        ("(jwt or time", "-k '(jwt or time': a '(' is not closed"),
        ("and jwt", "-k 'and jwt': 'and' where a word was expected"),
    ],
)
def test_a_k_that_cannot_be_read_says_why(tmp_path: Path, expression: str, problem: str) -> None:
    tasks = load_dataset(write_dataset(tmp_path, tasks=IDS)).tasks
    with pytest.raises(ValueError) as info:
        select_tasks(tasks, expression)
    assert str(info.value) == problem
