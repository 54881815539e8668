"""The task model: config.yaml as the upstream schema, with one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ssebench import ConfigError, ConfigErrors, load_task
from tests.helpers import task_config, write_task


def _errors(folder: Path) -> list[str]:
    with pytest.raises((ConfigErrors, ConfigError)) as info:
        load_task(folder)
    exc = info.value
    lines = [str(e) for e in exc.errors] if isinstance(exc, ConfigErrors) else [str(exc)]
    assert all("\n" not in line for line in lines), lines
    return lines


def _rewrite(folder: Path, **changes: object) -> None:
    path = folder / "sse" / "config.yaml"
    data = yaml.safe_load(path.read_text())
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            data[section][field] = value
        elif value is ...:
            del data[section]
        else:
            data[section] = value
    path.write_text(yaml.safe_dump(data))


def test_valid_task_loads_with_its_checks(tmp_path: Path) -> None:
    task = load_task(write_task(tmp_path))
    assert task.id == "tiny-1"
    assert task.config.files.poc == ["pocs/crash.bin"]
    assert task.checks() == ["build", "poc", "function_test", "intent_test"]
    assert task.config.task_description.issue is None  # 'none' counts as empty


def test_a_config_that_is_not_utf8_is_one_line_naming_the_file(tmp_path: Path) -> None:
    folder = write_task(tmp_path)
    path = folder / "sse" / "config.yaml"
    path.write_bytes(path.read_bytes().replace(b"tiny", "tïny".encode("latin-1"), 1))  # an editor's Latin-1
    [line] = _errors(folder)
    assert str(path) in line and "not UTF-8 text (byte 0xef at offset" in line and "save it as UTF-8" in line


def test_unknown_key_names_file_and_key(tmp_path: Path) -> None:
    folder = write_task(tmp_path)
    _rewrite(folder, colour="blue")
    [line] = _errors(folder)
    assert line.startswith(str(folder / "sse" / "config.yaml") + ": colour: unknown key")


def test_unknown_nested_key_is_named_with_its_section(tmp_path: Path) -> None:
    folder = write_task(tmp_path)
    _rewrite(folder, scripts__deploy="scripts/deploy.sh")
    [line] = _errors(folder)
    assert ": scripts.deploy: unknown key" in line


def test_missing_required_key(tmp_path: Path) -> None:
    folder = write_task(tmp_path)
    _rewrite(folder, repository=...)
    [line] = _errors(folder)
    assert line.endswith("repository: required key is missing")


def test_absolute_path_is_refused(tmp_path: Path) -> None:
    folder = write_task(tmp_path)
    _rewrite(folder, scripts__build="/ssebench/scripts/build.sh")
    [line] = _errors(folder)
    assert "scripts.build: '/ssebench/scripts/build.sh' is absolute" in line


@pytest.mark.parametrize(
    "source, named",
    [
        ("/var/lib/ssebench-runner", "/var/lib/ssebench-runner"),  # the runner's area itself
        ("/var/lib/ssebench-runner/repo", "/var/lib/ssebench-runner"),  # inside it: grading's original
        ("/var/lib", "/var/lib/ssebench"),  # above the run's state and results
        ("/ssebench/src", "/ssebench"),  # inside the task's hidden files
        ("/opt/ssebench/venv", "/opt/ssebench"),  # inside the runtime
        ("/tmp/sse-archive", "/tmp/sse-archive"),  # the agent's archive
        ("/run/ssebench/x", "/run/ssebench"),  # beside the admin socket
        ("/reference", "/reference"),  # where the reference patch is mounted
        ("/usr", "system directory"),
        ("/tmp", "/tmp/sse-archive"),
    ],
)
def test_a_source_that_overlaps_the_runtimes_paths_is_refused(tmp_path: Path, source: str, named: str) -> None:
    """A run mounts the agent's tree there: it must hide nothing of the runtime's, nor sit inside it."""
    folder = write_task(tmp_path)
    _rewrite(folder, source=source)
    [line] = _errors(folder)
    assert line.split(": ")[1] == "source" and named in line and "put the tree elsewhere" in line, line


@pytest.mark.parametrize("source", ["/src/gjson", "/usr/src/linux", "/var/src/x", "/work/project", "/opt/proj"])
def test_a_source_beside_the_runtimes_paths_loads(tmp_path: Path, source: str) -> None:
    folder = write_task(tmp_path)
    _rewrite(folder, source=source)
    assert load_task(folder).config.source == source


@pytest.mark.parametrize(
    ("pattern", "said"),
    [
        ("/src/x/tests/**", "must be relative to the source tree's root"),
        ("tests/../../etc", "leaves the source tree"),
        ("tests/[a-z.c", "the [ at character 7 is never closed (write [[] for a literal [)"),
        ("[[:word:]]*.c", "[:word:] is not a character class"),
    ],
)
def test_a_tree_pattern_git_would_not_take_is_one_line_naming_the_item(tmp_path: Path, pattern: str, said: str) -> None:
    folder = write_task(tmp_path)
    _rewrite(folder, protected_files=["Makefile", pattern])
    [line] = _errors(folder)
    assert "protected_files[1]:" in line and said in line, line


def test_path_leaving_the_task_folder_is_refused(tmp_path: Path) -> None:
    folder = write_task(tmp_path)
    _rewrite(folder, files__poc=["../../etc/passwd"])
    [line] = _errors(folder)
    assert "files.poc[0]" in line and "'..'" in line


def test_missing_referenced_file_names_field_and_where_it_looked(tmp_path: Path) -> None:
    folder = write_task(tmp_path)
    (folder / "sse" / "run.sh").unlink()
    [line] = _errors(folder)
    assert "scripts.run: 'scripts/run.sh' does not exist (looked for sse/run.sh)" in line


def test_invalid_task_id(tmp_path: Path) -> None:
    folder = write_task(tmp_path, "bad--", config=task_config("bad..id"))
    lines = _errors(folder)
    assert any("id: 'bad..id' is not a valid task id" in line for line in lines)


def test_id_must_equal_folder_name(tmp_path: Path) -> None:
    folder = write_task(tmp_path, "tiny-1", config=task_config("tiny-2"))
    [line] = _errors(folder)
    assert "id: 'tiny-2' differs from the folder name 'tiny-1'" in line


@pytest.mark.parametrize("task_id", ["a", "gjson-196-bf4efcb", "RUSTSEC-2019-0009", "a.b_c__d---e"])
def test_valid_task_ids(tmp_path: Path, task_id: str) -> None:
    assert load_task(write_task(tmp_path, task_id, config=task_config(task_id))).id == task_id


def test_too_long_task_id(tmp_path: Path) -> None:
    long_id = "a" * 129
    folder = write_task(tmp_path, long_id[:100], config=task_config(long_id))
    assert any("longer than 128" in line for line in _errors(folder))


def test_every_description_empty_is_an_error(tmp_path: Path) -> None:
    folder = write_task(tmp_path)
    _rewrite(folder, task_description={"issue": "none", "crash_report": None, "bug_description": ""})
    [line] = _errors(folder)
    assert "task_description: give at least one of issue, crash_report, bug_description" in line


def test_legacy_keys_are_accepted_and_ignored(tmp_path: Path) -> None:
    folder = write_task(tmp_path)
    _rewrite(folder, files__security_test="diffs/old.diff", files__intent_test=None)
    assert load_task(folder).config.files.future_test == "diffs/test.diff"


def test_language_and_originality_are_closed_sets(tmp_path: Path) -> None:
    folder = write_task(tmp_path)
    _rewrite(folder, language="python", originality="invented")
    lines = _errors(folder)
    assert any(line.split(": ")[1] == "language" for line in lines)
    assert any(line.split(": ")[1] == "originality" for line in lines)


def test_several_problems_are_each_one_line(tmp_path: Path) -> None:
    folder = write_task(tmp_path)
    _rewrite(folder, colour="blue", source="src/tiny", repository="http://example.invalid")
    lines = _errors(folder)
    assert len(lines) == 3
    assert {line.split(": ")[1] for line in lines} == {"colour", "source", "repository"}


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    folder = write_task(tmp_path)
    (folder / "sse" / "config.yaml").write_text("id: tiny-1\nproject: [unclosed\n")
    [line] = _errors(folder)
    assert "config.yaml: line" in line


def test_upstream_task_folder_loads_unchanged(tmp_path: Path) -> None:
    # The shape of an upstream pilot task: empty values, 'none', a trailing
    # space in a URL, legacy keys, a registry-parameterised Dockerfile.
    config = """\
id: upstream-go-1
project: example
repository: https://github.com/example/example
language: go
source: /src/example
task_description:
  crash_report:
  - reports/issue.md
  bug_description:
scripts:
  build: scripts/build.sh
  run: scripts/run.sh
  test: scripts/test.sh
files:
  patch: diffs/patch.diff
  poc:
  - pocs/crash.bin
  future_test: diffs/test.diff
  intent_test:
sanitizer:
type: Injection
binary:
trigger_commit: 7bf825bfcdcd894ba12ef160cd9913a26844d6b6
patch_commit: 2a2ecc916925642fd8cb1efd026588e6828f82e1
reference:
- https://github.com/example/example.git 
- https://github.com/example/example/issues/1
originality: crafted
"""
    folder = write_task(
        tmp_path,
        "upstream-go-1",
        dockerfile="ARG SSEBENCH_REGISTRY=ghcr.io/x/ssebench\nFROM ${SSEBENCH_REGISTRY}/base-generic-go:1.0.0\n",
    )
    (folder / "sse" / "config.yaml").write_text(config)
    task = load_task(folder)
    assert task.language == "go"
    assert task.config.reference[0] == "https://github.com/example/example.git"
    assert task.config.sanitizer is None and task.config.task_description.bug_description is None
