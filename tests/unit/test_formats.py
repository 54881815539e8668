"""The file formats' JSON Schemas (`ssebench dataset schema`) and docs/formats.md, against the real files and code.

The schemas are made from the models that read the files, so these tests hold them to what those models and
the writers of result.json and summary.json do: every file of the repository validates, a broken file is
refused by the schema and by its loader alike, and docs/formats.md's field tables are the code's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator
from pydantic import BaseModel
from sse.result import PatchResult, RunResult, RuntimeResult, Signals

from ssebench.agent import AgentConfig, load_agent
from ssebench.cli import main
from ssebench.dataset import DatasetConfig
from ssebench.errors import ConfigErrors
from ssebench.formats import FORMATS, Format, field_rows, field_table
from ssebench.gateway._models import ModelConfig
from ssebench.gateway.scripted import Script
from ssebench.record import RunRecord
from ssebench.runspec import RunConfig
from ssebench.schema import FORMATS_DOC, validate
from ssebench.settings import get_settings
from ssebench.task import TaskConfig, load_task
from tests.helpers import DEMO, task_config

ROOT = Path(__file__).resolve().parents[2]
BY_NAME = {f.name: f for f in FORMATS}
# The repository's own files of each format.
FILES = {
    "dataset": "datasets/*/dataset.yaml",
    "config": "datasets/*/*/sse/config.yaml",
    "agent": "agents/*/agent.yaml",
    "model": "models/*.yaml",
    "script": "models/scripted/*.yaml",
    "result": "tests/fixtures/results/**/result.json",
    "summary": "tests/fixtures/results/**/summary.json",
}
# The model that loads each YAML format: a broken file must be refused by it as by the schema.
LOADERS: dict[str, type[BaseModel]] = {
    "dataset": DatasetConfig,
    "config": TaskConfig,
    "agent": AgentConfig,
    "model": ModelConfig,
    "script": Script,
}


def validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(BY_NAME[name].schema())


def read(path: Path) -> Any:
    return json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())


def errors(name: str, data: Any) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator(name).iter_errors(data)]


def test_every_file_format_has_a_schema_and_every_schema_real_files() -> None:
    assert set(BY_NAME) == set(FILES)


@pytest.mark.parametrize("name", sorted(FILES))
def test_the_repositorys_files_validate(name: str) -> None:
    paths = sorted(ROOT.glob(FILES[name]))
    assert paths, f"no file matches {FILES[name]}"
    for path in paths:
        assert errors(name, read(path)) == [], path


def _record() -> RunRecord:
    config = RunConfig(task=load_task(DEMO / "c-demo"), agent=load_agent(get_settings().agents_dir, "dummy"))
    return RunRecord(
        config=config,
        run_id="20260101T000000-d2-sandbox-abcdef",
        run_dir=Path("/nonexistent/run"),
        started_at="2026-01-01T00:00:00+00:00",
        grade="error",
        infra_error="the engine went away",
        limits_hit=["memory: hit"],
        usage={"calls": 1, "prompt_tokens": 10, "completion_tokens": 2, "cost": 0.0, "stopped": None},
        durations={"total": 1.5},
        timeline={"container_started": 1.0},
        node="host/n",
        images={"built": ["a"], "pulled": []},
    )


def test_what_the_harness_writes_today_validates() -> None:
    result = RunResult(
        status="failed",
        patch_result=PatchResult(build_success=True, pov_passed=0, pov_total=1, error_msg="PoC failed: p"),
        runtime_result=RuntimeResult(agent_duration=2.0, agent_timeout=False, agent_exit_code=0),
        signals=Signals(protected_files=["Makefile"], protected_files_count=1),
        graded_by="host: memory limit",
    )
    assert errors("result", json.loads(json.dumps(result.to_json()))) == []
    assert errors("summary", json.loads(json.dumps(_record().to_summary()))) == []


def _broken_yaml() -> dict[str, list[dict[str, Any]]]:
    model = {"name": "m", "base_url": "https://api.example.invalid/v1"}
    return {
        "dataset": [{}, {"version": "v1", "colour": "red"}],
        "config": [
            task_config(colour="red"),
            task_config(language="cobol"),
            {k: v for k, v in task_config().items() if k != "source"},
            task_config(files={"poc": [1]}),
        ],
        "agent": [{"name": "a", "needs_model": "maybe"}, {"version": "1"}],
        "model": [{**model, "api_key": "sk-not-in-a-file"}, {**model, "price": {"input": -1}}],
        "script": [{"conversations": []}, {"conversations": [{"match": "x", "steps": [{"times": 0, "garbage": "g"}]}]}],
    }


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_a_broken_yaml_file_is_refused_by_the_schema_and_by_its_loader(name: str, tmp_path: Path) -> None:
    for data in _broken_yaml()[name]:
        assert errors(name, data), f"the {name} schema accepts {data}"
        with pytest.raises(ConfigErrors):
            validate(LOADERS[name], tmp_path / "file.yaml", data)


def test_a_broken_result_or_summary_is_refused() -> None:
    good_result = read(next(ROOT.glob(FILES["result"])))
    assert errors("result", good_result) == []
    assert errors("result", {k: v for k, v in good_result.items() if k != "patch_result"})
    assert errors("result", {**good_result, "patch_result": {**good_result["patch_result"], "status": "great"}})
    assert errors("result", {**good_result, "patch_result": {**good_result["patch_result"], "pov_total": "1"}})
    good_summary = read(next(ROOT.glob(FILES["summary"])))
    assert errors("summary", good_summary) == []
    assert errors("summary", {k: v for k, v in good_summary.items() if k != "run_id"})
    assert errors("summary", {**good_summary, "grade": "maybe"})
    assert errors("summary", {**good_summary, "task": {**good_summary["task"], "digest": 7}})


def test_the_model_files_schema_leaves_out_where_the_file_was_read_from() -> None:
    assert "source" not in BY_NAME["model"].schema()["properties"]
    assert errors("model", {"name": "m", "script": "s.yaml", "source": "/x"})


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_every_field_is_described_in_its_model(fmt: Format) -> None:
    missing = [path for path, _, _, meaning in field_rows(fmt.schema()) if not meaning]
    assert missing == [], f"give these fields of {fmt.title} a docstring in their model: {missing}"


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_docs_formats_md_has_each_formats_field_table_as_the_code_makes_it(fmt: Format) -> None:
    doc = (ROOT / FORMATS_DOC).read_text()
    table = field_table(fmt)
    assert table in doc, (
        f"{FORMATS_DOC}'s table of {fmt.title} is not the code's: paste `python -m ssebench.formats`'s "
        f"({fmt.file_name}) in its place:\n{table}"
    )


def test_dataset_schema_writes_a_schema_per_format_and_prints_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "new" / "schemas"
    assert main(["dataset", "schema", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert sorted(printed[:-1]) == sorted(str(out / f.file_name) for f in FORMATS)
    assert printed[-1].startswith(f"{len(FORMATS)} JSON Schema(s)")
    for fmt in FORMATS:
        written = json.loads((out / fmt.file_name).read_text())
        Draft202012Validator.check_schema(written)
        assert written["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert written["$id"].endswith(fmt.file_name) and written["title"] == fmt.title
        assert written == fmt.schema()


@pytest.mark.parametrize("how", ["a file", "under a file"])
def test_dataset_schema_with_a_bad_out_says_so_in_one_line(
    how: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "f").write_text("")
    out = tmp_path / "f" if how == "a file" else tmp_path / "f" / "schemas"
    assert main(["dataset", "schema", "--out", str(out)]) == 2
    said = capsys.readouterr()
    assert said.out == ""
    [line] = said.err.splitlines()
    assert line.startswith(f"error: --out {out}: ")


def test_an_unknown_key_points_at_the_file_formats_description(tmp_path: Path) -> None:
    with pytest.raises(ConfigErrors) as raised:
        validate(AgentConfig, tmp_path / "agent.yaml", {"name": "a", "colour": "red"})
    [problem] = raised.value.errors
    assert (
        str(problem)
        == f"{tmp_path / 'agent.yaml'}: colour: unknown key (check its spelling against the file format: {FORMATS_DOC})"
    )
    assert (ROOT / FORMATS_DOC).is_file()
