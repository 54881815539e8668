"""The run record: summary.json is its form, a Ray node ships it, --resume reads it back, the report derives
from it; and results written before summary.json and result.json had a version still resume and report."""

from __future__ import annotations

import json
import shutil
import types
import typing
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, get_type_hints

from sse.result import PatchResult, RunResult, RuntimeResult

from pytest_ssebench.report import grade_card, properties
from ssebench.agent import load_agent
from ssebench.record import SCHEMA_VERSION, RunRecord, finished_run, read_record
from ssebench.runspec import RunConfig
from ssebench.scores import PREFIX, ScoreTable
from ssebench.settings import get_settings
from ssebench.task import load_task
from tests.helpers import DEMO

V0 = Path(__file__).resolve().parent.parent / "fixtures" / "results" / "v0"
DUMMY_RUNS = V0 / "c-demo" / "openai%2Fgpt-4o" / "dummy"
REFERENCE_RUN = next((V0 / "c-demo" / "none" / "reference").iterdir())


def _config(agent: str = "dummy", **kw: Any) -> RunConfig:
    return RunConfig(task=load_task(DEMO / "c-demo"), agent=load_agent(get_settings().agents_dir, agent), **kw)


def _old_results(tmp_path: Path) -> Path:
    """A copy of the v0 results root whose summaries name today's c-demo files (the digest is of the task's
    files, which may have changed since the fixture was written; every other byte is as written then)."""
    root = tmp_path / "results"
    shutil.copytree(V0, root)
    task = load_task(DEMO / "c-demo")
    for summary in root.rglob("summary.json"):
        data = json.loads(summary.read_text())
        data["task"]["digest"] = task.digest
        summary.write_text(json.dumps(data, indent=2) + "\n")
    return root


def test_old_summaries_read_and_write_back_with_their_fields_unchanged() -> None:
    """Version 0 is read as version 1; writing it again adds schema_version and changes nothing else."""
    for summary in V0.rglob("summary.json"):
        old = json.loads(summary.read_text())
        assert "schema_version" not in old  # the fixture is what the old code wrote
        record = read_record(_config(), summary.parent)
        assert record is not None, summary
        new = record.to_summary()
        assert new.pop("schema_version") == SCHEMA_VERSION
        # task and config are today's config's (what resume compares); every recorded field is as it was (a
        # field added since may join them, at its default).
        assert set(old) <= set(new)
        assert {k: new[k] for k in old if k not in ("task", "config")} == {
            k: v for k, v in old.items() if k not in ("task", "config")
        }


def test_old_results_read_as_the_container_wrote_them() -> None:
    for path in V0.rglob("result.json"):
        old = json.loads(path.read_text())
        result = RunResult.from_json(old)
        assert result is not None and result.status == old["patch_result"]["status"]
        assert result.patch_result == PatchResult(**{k: v for k, v in old["patch_result"].items() if k != "status"})
        assert result.runtime_result == RuntimeResult(**old["runtime_result"])
        new = result.to_json()
        assert new.pop("schema_version") == 1
        assert new["patch_result"] == old["patch_result"] and new["runtime_result"] == old["runtime_result"]
        assert new.get("graded_by") == old.get("graded_by")


def test_old_runs_resume_with_their_grades_and_show_in_the_report(tmp_path: Path) -> None:
    root = _old_results(tmp_path)
    # The newest of the dummy's two trial-2 runs: the host's memory-limit failure.
    config = _config(model="openai/gpt-4o", trial=2)
    record = finished_run(config, root)
    assert record is not None and record.resumed and record.run_dir.name.endswith("bbbbbb")
    assert record.grade == "failed" and record.node == "worker-1/abcdef12"
    assert record.limits_hit == ["memory: the container hit its memory limit of 4294967296 bytes"]
    assert record.patch_result.error_msg is not None and record.patch_result.error_msg.startswith("Memory limit")
    assert record.usage is not None and record.usage["prompt_tokens"] == 40000
    # A real run's: the reference agent's pass (it ran with a 120 s agent limit).
    reference = finished_run(_config("reference", timeout=120.0), root)
    assert (
        reference is not None
        and reference.grade == "passed"
        and reference.run_dir == root / REFERENCE_RUN.relative_to(V0)
    )
    # The report: properties, the grade card, the score table, all from the records read back.
    table = ScoreTable()
    for item, got in (("a", record), ("b", reference)):
        props = properties(got)
        assert dict(props)[PREFIX + "resumed"] is True
        table.add(item, "passed" if got.grade == "passed" else "failed", props)
        assert f">{got.grade}</b>" in grade_card(got)
    cells = {row[0]: dict(zip(table.cells()[0], row, strict=True)) for row in table.cells()[1:]}
    assert cells["dummy"]["failed"] == "1" and cells["dummy"]["tokens"] == "42000"
    assert cells["reference"]["passed"] == "1" and cells["reference"]["PoC"] == "100%"


def test_a_summary_of_the_wrong_shape_or_a_newer_version_is_not_resumed(tmp_path: Path) -> None:
    root = _old_results(tmp_path)
    config = _config("reference", timeout=120.0)
    summary = root / REFERENCE_RUN.relative_to(V0) / "summary.json"
    good = json.loads(summary.read_text())
    change: dict[str, Any]
    for change in ({"schema_version": SCHEMA_VERSION + 1}, {"durations": []}, {"grade": "maybe"}, {"run_id": 7}):
        summary.write_text(json.dumps(good | change))
        assert finished_run(config, root) is None, change
    summary.write_text(json.dumps(good | {"schema_version": SCHEMA_VERSION}))
    assert finished_run(config, root) is not None


def _sample(hint: Any) -> Any:
    """A value of type `hint` unlike any field's default."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return _sample(args[0])
    if origin is list:
        return [_sample(args[0])]
    if origin is dict:
        return {"k": _sample(args[1])}
    return {str: "s", int: 7, float: 1.5, bool: True, Any: {"n": 1}}.get(hint, "s")


def test_every_field_of_the_record_travels_through_summary_json() -> None:
    """What a node ships and resume reads: every field but the local ones comes back as it was written."""
    hints = get_type_hints(RunRecord)
    local = {f.name for f in fields(RunRecord) if not f.metadata.get("summary", True)}
    assert local == {"config", "run_dir", "result", "resumed", "rerun"}
    sent = RunRecord(
        config=_config(),
        run_dir=Path("/node/scratch"),
        **{f.name: _sample(hints[f.name]) for f in fields(RunRecord) if f.name not in local},
    )
    sent = replace(sent, grade="failed")
    shipped = json.loads(json.dumps(sent.to_summary()))
    back = RunRecord.from_summary(_config(), Path("/home/run"), shipped)
    assert back is not None
    assert back == replace(sent, run_dir=Path("/home/run"))


def test_the_properties_hold_every_one_line_field_of_the_record_and_its_results(tmp_path: Path) -> None:
    record = RunRecord(config=_config(), run_id="r", run_dir=tmp_path, started_at="now", grade="failed")
    record.result = RunResult("failed", PatchResult(build_success=True, error_log="long log"))
    names = {name for name, _ in record.properties()}
    scalar = {
        f.name
        for f in fields(RunRecord)
        if f.metadata.get("summary", True) and not isinstance(_sample(get_type_hints(RunRecord)[f.name]), dict | list)
    }
    assert scalar <= names and "usage" not in names and "durations" not in names  # mappings are the report's
    assert {f.name for f in fields(PatchResult)} - {"error_log"} <= names  # logs stay in the files
    assert {f.name for f in fields(RuntimeResult)} <= names and "error_log" not in names
    assert all(value is None or isinstance(value, str | int | float | bool) for _, value in record.properties())


def test_an_old_run_whose_result_json_disagrees_with_its_summary_runs_again(tmp_path: Path) -> None:
    root = _old_results(tmp_path)
    config = _config("reference", timeout=120.0)
    result = root / REFERENCE_RUN.relative_to(V0) / "result.json"
    data = json.loads(result.read_text())
    data["patch_result"]["status"] = "failed"  # its summary says passed
    result.write_text(json.dumps(data))
    assert finished_run(config, root) is None


def test_old_usage_without_the_gateway_s_account_of_failures_reads_and_is_no_broken_model(tmp_path: Path) -> None:
    """Summaries from before the gateway counted calls that failed upstream: their usage reads as it was, and
    its calls, of which nothing else is known, never make the run an error."""
    from ssebench.gateway import Usage

    for summary in V0.rglob("summary.json"):
        record = read_record(_config(), summary.parent)
        assert record is not None and record.usage == json.loads(summary.read_text()).get("usage"), summary
        if record.usage is not None:
            usage = Usage.from_summary(record.usage)
            assert (usage.calls, usage.answered, usage.upstream_failed) == (12, 0, 0)
            assert usage.upstream_broken() is None
