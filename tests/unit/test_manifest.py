"""A dataset's pin (ssebench.manifest): written by `ssebench dataset pin`, checked whenever the dataset loads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ssebench import manifest
from ssebench.cli import main
from ssebench.dataset import load_dataset, load_task_in_place, load_tasks
from ssebench.errors import ConfigErrors
from tests.helpers import DEMO, PILOT, write_dataset


@pytest.fixture
def pinned(tmp_path: Path) -> Path:
    folder = write_dataset(tmp_path, tasks=("tiny-1", "tiny-2"))
    assert main(["dataset", "pin", str(folder)]) == 0
    return folder


def _problems(folder: Path) -> list[str]:
    with pytest.raises(ConfigErrors) as caught:
        load_dataset(folder)
    return [str(e) for e in caught.value.errors]


def test_the_shipped_datasets_match_their_pins() -> None:
    for folder in (DEMO, PILOT):
        pin = manifest.read_manifest(folder)
        assert pin is not None, folder
        dataset = load_dataset(folder)
        assert pin.version == dataset.version
        assert sorted(pin.tasks) == sorted(t.id for t in dataset.tasks)


def test_a_pin_is_sorted_and_a_second_pin_writes_the_same_bytes(
    pinned: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = pinned / "manifest.json"
    first = path.read_bytes()
    data = json.loads(first)
    assert list(data) == ["version", "tasks"] and data["version"] == "tiny-v1"
    assert list(data["tasks"]) == ["tiny-1", "tiny-2"]
    files = data["tasks"]["tiny-1"]
    assert list(files) == sorted(files) and "sse/config.yaml" in files and "Dockerfile" in files
    assert files["sse/build.sh"].endswith(" +x") and files["sse/config.yaml"].startswith("sha256:")
    capsys.readouterr()
    assert main(["dataset", "pin", str(pinned)]) == 0
    assert path.read_bytes() == first
    assert capsys.readouterr().out.strip().endswith("(unchanged)")


@pytest.mark.parametrize(
    "edit, said",
    [
        (
            lambda t: (t / "sse" / "config.yaml").write_text((t / "sse" / "config.yaml").read_text() + "\n"),
            "sse/config.yaml changed",
        ),
        (lambda t: (t / "sse" / "extra.txt").write_text("x"), "sse/extra.txt added"),
        (lambda t: (t / "sse" / "pocs" / "crash.bin").unlink(), "sse/pocs/crash.bin removed"),
        (lambda t: (t / "sse" / "build.sh").chmod(0o644), "sse/build.sh changed"),
    ],
)
def test_an_edited_task_is_refused_with_one_line_naming_it_and_the_fix(pinned: Path, edit: object, said: str) -> None:
    edit(pinned / "tiny-2")  # type: ignore[operator]
    # (A file config.yaml names that is gone is also said as missing.)
    assert [p for p in _problems(pinned) if "manifest.json" in p] == [
        f"{pinned}/tiny-2: differs from {pinned}/manifest.json (tiny-v1): {said}; to change a task, bump version "
        f"in {pinned}/dataset.yaml and run `ssebench dataset pin {pinned}` (while authoring a version not yet "
        f"released: `ssebench dataset pin {pinned} --keep-version`)"
    ]
    # One task at a time (as pytest loads them): the unchanged task still loads, the edited one does not.
    assert load_task_in_place(pinned / "tiny-1").id == "tiny-1"
    with pytest.raises(ConfigErrors, match="tiny-2: differs from"):
        load_task_in_place(pinned / "tiny-2")


def test_a_new_task_and_a_gone_task_are_refused_too(pinned: Path) -> None:
    shutil.copytree(pinned / "tiny-1", pinned / "tiny-3")
    config = pinned / "tiny-3" / "sse" / "config.yaml"
    config.write_text(config.read_text().replace("id: tiny-1", "id: tiny-3"))
    shutil.rmtree(pinned / "tiny-2")
    problems = _problems(pinned)
    assert len(problems) == 2
    assert (
        f"{pinned}: task(s) tiny-2 pinned in {pinned}/manifest.json (tiny-v1) are gone; to remove a task" in problems[0]
    )
    assert (
        f"{pinned}/tiny-3: is not in {pinned}/manifest.json (tiny-v1), which pins this version: to add it"
        in problems[1]
    )


def test_a_bumped_version_or_no_manifest_loads_edited_tasks(pinned: Path) -> None:
    (pinned / "tiny-2" / "sse" / "extra.txt").write_text("x")
    (pinned / "dataset.yaml").write_text("version: tiny-v2\n")
    assert len(load_dataset(pinned).tasks) == 2
    assert manifest.pinned_state(pinned, "tiny-v2") == "pinned at tiny-v1"
    (pinned / "dataset.yaml").write_text("version: tiny-v1\n")
    (pinned / "manifest.json").unlink()
    assert len(load_dataset(pinned).tasks) == 2
    assert manifest.pinned_state(pinned, "tiny-v1") == "unpinned"


def test_a_manifest_that_cannot_be_read_says_how_to_write_it_again(pinned: Path) -> None:
    (pinned / "manifest.json").write_text("{not json")
    [problem] = _problems(pinned)
    assert problem == (
        f"{pinned}/manifest.json: not a manifest (JSON with version and tasks); write it again with "
        f"`ssebench dataset pin {pinned}`"
    )


def test_pin_refuses_other_files_under_a_pinned_version_unless_told(
    pinned: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (pinned / "tiny-1" / "Dockerfile").write_text("FROM scratch\nRUN true\n")
    before = (pinned / "manifest.json").read_bytes()
    capsys.readouterr()
    assert main(["dataset", "pin", str(pinned)]) == 1
    out, err = capsys.readouterr()
    assert "tiny-1: differs from" in out and "Dockerfile changed" in out
    assert "not pinned again: tiny-v1 is pinned with other files; bump version" in err
    assert (pinned / "manifest.json").read_bytes() == before
    assert main(["dataset", "pin", str(pinned), "--keep-version"]) == 0
    assert len(load_tasks(pinned)) == 2
    # The ordinary way: bump, then pin.
    (pinned / "tiny-2" / "Dockerfile").write_text("FROM scratch\nRUN true\n")
    (pinned / "dataset.yaml").write_text("version: tiny-v2\n")
    assert main(["dataset", "pin", str(pinned)]) == 0
    assert json.loads((pinned / "manifest.json").read_text())["version"] == "tiny-v2"
    assert len(load_tasks(pinned)) == 2


def test_tasks_list_refuses_an_edited_pinned_task(pinned: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (pinned / "tiny-1" / "sse" / "build.sh").write_text("#!/bin/sh\nexit 1\n")
    assert main(["tasks", "list", str(pinned)]) != 0
    assert "tiny-1: differs from" in capsys.readouterr().err


def test_image_ids_are_recorded_beside_the_pin_per_version(pinned: Path) -> None:
    path = manifest.record_images(pinned, "tiny-v1", {"tiny-2": {"case": "sha256:c2", "tool": "sha256:t2"}})
    manifest.record_images(pinned, "tiny-v1", {"tiny-1": {"case": "sha256:c1", "tool": "sha256:t1"}})
    data = json.loads(path.read_text())
    assert data["version"] == "tiny-v1" and list(data["tasks"]) == ["tiny-1", "tiny-2"]
    assert data["tasks"]["tiny-2"]["tool"] == "sha256:t2" and "verified_at" in data["tasks"]["tiny-2"]
    # A task found invalid loses its record; a new version starts the file again.
    manifest.record_images(pinned, "tiny-v1", {}, invalid=["tiny-2"])
    assert list(json.loads(path.read_text())["tasks"]) == ["tiny-1"]
    manifest.record_images(pinned, "tiny-v2", {"tiny-2": {"case": "c", "tool": "t"}})
    data = json.loads(path.read_text())
    assert data["version"] == "tiny-v2" and list(data["tasks"]) == ["tiny-2"]
