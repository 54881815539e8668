"""Predictions files (SWE-bench's format): reading them, refusing bad ones in one line, matching tasks."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ssebench.agent import available_agents, load_agent
from ssebench.backend import Mount
from ssebench.errors import ConfigError
from ssebench.predictions import PATCH_CAP, Prediction, load_predictions, prediction_line
from ssebench.reaper import Session
from ssebench.runspec import PREDICTION_IN_CONTAINER, RunConfig, container_spec, sidecar_specs
from ssebench.runtime.contract import PREDICTION_NOT_MOUNTED, AgentEnd, RuntimeSettings
from ssebench.runtime.evaluator import prediction_not_applied
from ssebench.settings import get_settings
from ssebench.task import load_task
from tests.helpers import DEMO, ROOT

pytest_plugins = ["pytester"]

PATCH = "diff --git a/x.c b/x.c\n--- a/x.c\n+++ b/x.c\n@@ -1 +1 @@\n-a\n+b\n"


def one(instance_id: str = "c-demo", model: Any = "m1", patch: Any = PATCH, **more: Any) -> dict[str, Any]:
    return {"instance_id": instance_id, "model_patch": patch, "model_name_or_path": model, **more}


def write_lines(path: Path, *records: object) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_json_lines_are_read_in_order_and_other_keys_are_ignored(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "preds.jsonl", one("c-demo"), one("go-demo", "m2", full_output="..."))
    loaded = load_predictions(path)
    assert [(p.instance_id, p.model, p.where) for p in loaded.items] == [
        ("c-demo", "m1", "line 1"),
        ("go-demo", "m2", "line 2"),
    ]
    assert loaded.items[0].patch == PATCH


def test_a_json_list_and_an_object_keyed_by_instance_id_read_as_swe_bench_reads_them(tmp_path: Path) -> None:
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps([one("c-demo"), one("go-demo")], indent=2))
    assert [p.instance_id for p in load_predictions(listed).items] == ["c-demo", "go-demo"]
    keyed = tmp_path / "keyed.json"
    # SWE-bench's dict form: the key names the task; a value may leave instance_id out.
    keyed.write_text(
        json.dumps({"c-demo": one("c-demo"), "go-demo": {"model_patch": PATCH, "model_name_or_path": "m1"}})
    )
    loaded = load_predictions(keyed)
    assert [(p.instance_id, p.where) for p in loaded.items] == [
        ("c-demo", "key 'c-demo'"),
        ("go-demo", "key 'go-demo'"),
    ]


def test_a_key_that_disagrees_with_its_instance_id_is_refused(tmp_path: Path) -> None:
    keyed = tmp_path / "keyed.json"
    keyed.write_text(json.dumps({"c-demo": one("go-demo")}))
    with pytest.raises(ConfigError, match=r"keyed.json: key 'c-demo': its instance_id is 'go-demo'"):
        load_predictions(keyed)


@pytest.mark.parametrize(
    "record, message",
    [
        (
            {"model_patch": PATCH, "model_name_or_path": "m"},
            r"line 2: instance_id: must be a non-empty string \(got missing\)",
        ),
        (one(instance_id=""), r"line 2: instance_id: must be a non-empty string \(got str ''\)"),
        (one(model=None), r"line 2: model_name_or_path: must be a non-empty string \(got NoneType"),
        (one(model="a\nb"), r"line 2: model_name_or_path: must be one printable line"),
        (one(model="m" * 201), r"line 2: model_name_or_path: must be one printable line of at most 200"),
        (one(model="é" * 50), r"line 2: model_name_or_path: the name 'ééé.*is too long for a results directory"),
        (one(patch=["x"]), r"line 2: model_patch: must be a string, a unified diff \(got list\)"),
        # JSON can carry a lone surrogate, which no file holds: once the run's error, now the file's.
        (one(patch="+\ud800\n"), r"line 2: model_patch: must be UTF-8 text \(a lone surrogate at character 1\)"),
        (["c-demo", PATCH], r"line 2: must be a JSON object with instance_id, model_patch, model_name_or_path"),
    ],
)
def test_a_bad_record_is_one_line_naming_file_line_and_field(tmp_path: Path, record: object, message: str) -> None:
    path = write_lines(tmp_path / "preds.jsonl", one("go-demo"), record)
    with pytest.raises(ConfigError, match=message) as raised:
        load_predictions(path)
    assert str(raised.value).startswith(f"{path}: line 2") and "\n" not in str(raised.value)


def test_a_line_that_is_not_json_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "preds.jsonl"
    path.write_text(json.dumps(one()) + "\n\n{not json\n")
    with pytest.raises(ConfigError, match=r"preds.jsonl: line 3: not valid JSON"):
        load_predictions(path)


def test_a_json_file_that_is_not_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "preds.json"
    path.write_text("[\n" + json.dumps(one()) + ",\n]\n")
    with pytest.raises(ConfigError, match=r"preds.json: line 3: not valid JSON"):
        load_predictions(path)


def test_a_second_prediction_of_a_task_by_the_same_model_names_both_lines(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "preds.jsonl", one("c-demo"), one("go-demo"), one("c-demo", patch=""))
    with pytest.raises(ConfigError) as raised:
        load_predictions(path)
    assert str(raised.value) == (
        f"{path}: line 3: a second prediction of c-demo by model 'm1' (the first is at line 1): keep one"
    )
    # Another model's prediction of the same task is its own run.
    other = write_lines(tmp_path / "two.jsonl", one("c-demo"), one("c-demo", "m2"))
    assert [p.model for p in load_predictions(other).items] == ["m1", "m2"]


def test_an_empty_file_a_missing_one_and_a_huge_patch_are_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ConfigError, match="holds no prediction"):
        load_predictions(empty)
    with pytest.raises(ConfigError, match="no such file"):
        load_predictions(tmp_path / "absent.jsonl")
    huge = write_lines(tmp_path / "huge.jsonl", one(patch="+" * (PATCH_CAP + 1)))
    with pytest.raises(ConfigError, match=r"line 1: model_patch: is larger than 64 MiB"):
        load_predictions(huge)


def test_a_null_patch_is_an_empty_one(tmp_path: Path) -> None:
    """SWE-bench's files say null for a model that made no patch: graded as no change."""
    path = write_lines(tmp_path / "preds.jsonl", one(patch=None))
    assert load_predictions(path).items[0].patch == ""


def test_a_prediction_names_its_task_by_id_or_dataset_and_id(tmp_path: Path) -> None:
    c, go = load_task(DEMO / "c-demo"), load_task(DEMO / "go-demo")
    path = write_lines(
        tmp_path / "preds.jsonl", one("c-demo"), one("demo/go-demo"), one("pilot/go-demo", "m2"), one("nope")
    )
    loaded = load_predictions(path)
    assert [p.where for p in loaded.for_task(c)] == ["line 1"]
    assert [p.where for p in loaded.for_task(go)] == ["line 2"]
    assert [p.instance_id for p in loaded.naming_none_of([c, go])] == ["pilot/go-demo", "nope"]


def test_the_digest_follows_the_patch() -> None:
    a, b = Prediction("c-demo", "m", PATCH), Prediction("c-demo", "m", PATCH + "\n")
    assert a.digest != b.digest and a.digest == Prediction("c-demo", "other", PATCH).digest


def test_a_line_made_by_prediction_line_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "preds.jsonl"
    path.write_text(prediction_line("c-demo", "openai/gpt-4o", PATCH) + "\n")
    (read,) = load_predictions(path).items
    assert (read.instance_id, read.model, read.patch) == ("c-demo", "openai/gpt-4o", PATCH)


# -- the plugin: --predictions collects one run of the predictions agent per prediction --------------------------


@pytest.fixture
def demo(pytester: pytest.Pytester) -> pytest.Pytester:
    shutil.copytree(DEMO, pytester.path / "datasets" / "demo")
    return pytester


def _ids(result: pytest.RunResult) -> list[str]:
    return sorted(line.strip() for line in result.outlines if "::" in line and "[" in line)


def test_each_prediction_is_one_item_and_a_task_the_file_does_not_name_is_not_collected(
    demo: pytest.Pytester,
) -> None:
    write_lines(demo.path / "preds.jsonl", one("c-demo", "gold"), one("demo/go-demo", "gold"), one("c-demo", "org/m2"))
    result = demo.runpytest("datasets/demo", "--predictions", "preds.jsonl", "--collect-only", "-q")
    assert result.ret == 0, result.stdout.str()
    assert _ids(result) == [
        "datasets/demo/c-demo/sse/config.yaml::predictions[gold-d2-sandbox]",
        "datasets/demo/c-demo/sse/config.yaml::predictions[org/m2-d2-sandbox]",
        "datasets/demo/go-demo/sse/config.yaml::predictions[gold-d2-sandbox]",
    ]
    # Nothing of rust-demo, which the file does not name; and no word about predictions that all name a task.
    assert "name no task" not in result.stderr.str()


def test_other_agents_run_beside_predictions_on_every_task(demo: pytest.Pytester) -> None:
    write_lines(demo.path / "preds.jsonl", one("c-demo", "gold"))
    result = demo.runpytest("datasets/demo", "--agent", "dummy", "--predictions", "preds.jsonl", "--collect-only", "-q")
    ids = _ids(result)
    assert len(ids) == 4 and "datasets/demo/c-demo/sse/config.yaml::predictions[gold-d2-sandbox]" in ids
    assert sum("::dummy[none-d2-sandbox]" in i for i in ids) == 3


def test_predictions_naming_no_collected_task_are_said_once(demo: pytest.Pytester) -> None:
    write_lines(
        demo.path / "preds.jsonl", one("c-demo", "gold"), one("astropy__astropy-12907", "gold"), one("nope", "gold")
    )
    result = demo.runpytest("datasets/demo", "--predictions", "preds.jsonl", "--collect-only", "-q")
    assert result.ret == 0
    said = [line for line in result.errlines if "name no task" in line]
    assert said == [
        f"ssebench: --predictions {demo.path / 'preds.jsonl'}: 2 of 3 prediction(s) name no task under the paths "
        "given and are not graded: astropy__astropy-12907 (line 2), nope (line 3)"
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--predictions", "absent.jsonl"], "ERROR: --predictions: */absent.jsonl: no such file*"),
        (["--predictions", "bad.jsonl"], "ERROR: --predictions: */bad.jsonl: line 2: model_name_or_path: must be*"),
        (["--agent", "predictions"], "ERROR: --agent predictions: give the patches it applies with --predictions*"),
    ],
)
def test_a_bad_predictions_file_is_one_usage_error(demo: pytest.Pytester, args: list[str], message: str) -> None:
    write_lines(demo.path / "bad.jsonl", one("c-demo"), one("go-demo", model=""))
    result = demo.runpytest("datasets/demo", *args, "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert len([line for line in result.errlines if line.startswith("ERROR")]) == 1


# -- a predictions run's container, and its grade when the patch does not apply -----------------------------------


@pytest.mark.parametrize("agent_name", available_agents(get_settings().agents_dir))
def test_only_the_predictions_agent_gets_the_prediction_and_is_graded_as_one(agent_name: str, tmp_path: Path) -> None:
    agent = load_agent(get_settings().agents_dir, agent_name)
    patch = tmp_path / "prediction.patch"
    patch.write_text(PATCH)
    config = RunConfig(
        task=load_task(DEMO / "c-demo"), agent=agent, model="m1", prediction=Prediction("c-demo", "m1", PATCH)
    )
    session = Session.new()
    spec = container_spec(config, "img", session, "r1", "net", runtime="rt", prediction=patch)
    mounted = [m for m in spec.mounts if m.container == PREDICTION_IN_CONTAINER]
    if agent_name == "predictions":
        assert mounted == [Mount(patch.resolve(), "/prediction/patch.diff", read_only=True)]
        assert spec.env["SSE_PREDICTION"] == "1"
        # Sidecar mode: the agent's container applies it; the task container's evaluator knows the run is one.
        task, agent_side, _ = sidecar_specs(replace(config, mode="sidecar"), spec, "tool-img", "r1", session)
        assert task.mounts == [] and agent_side.mounts == mounted and task.env["SSE_PREDICTION"] == "1"
        assert config.describe()["prediction"] == Prediction("c-demo", "m1", PATCH).digest
    else:
        assert mounted == [] and "SSE_PREDICTION" not in spec.env


def _settings(results: Path, prediction: bool = True) -> RuntimeSettings:
    return RuntimeSettings(results=str(results), prediction=prediction)


def test_a_prediction_that_did_not_apply_is_a_failed_build_saying_so(tmp_path: Path) -> None:
    (tmp_path / "agent.log").write_text("error: patch failed: kvrec.go:1\nerror: kvrec.go: patch does not apply\n")
    graded = prediction_not_applied(_settings(tmp_path), AgentEnd(status=1, duration=0.2, timed_out=False))
    assert graded is not None and graded.status() == "failed" and graded.build_success is False
    assert graded.error_msg == (
        "Patch apply failed: the predicted patch does not apply to the task's source (git apply exited 1)"
    )
    assert graded.error_log is not None and "kvrec.go: patch does not apply" in graded.error_log
    assert (graded.pov_total, graded.func_test_success, graded.intent_test_success) == (None, None, None)
    late = prediction_not_applied(_settings(tmp_path / "none"), AgentEnd(status=124, duration=9.0, timed_out=True))
    assert (
        late is not None and late.error_msg is not None and late.error_msg.endswith("(its time limit ended the apply)")
    )
    assert late.error_log == ""  # no agent.log (sidecar mode): the grade stands without it


def test_a_prediction_the_harness_did_not_mount_is_not_graded_and_not_the_patchs_failure(tmp_path: Path) -> None:
    """The agent's own exit status for a missing /prediction/patch.diff (the harness's fault): an error."""
    unmounted = AgentEnd(status=PREDICTION_NOT_MOUNTED, duration=0.1, timed_out=False)
    graded = prediction_not_applied(_settings(tmp_path), unmounted)
    assert graded is not None and graded.status() == "error" and not graded.checks_ran()
    assert graded.error_msg is not None and "no patch at /prediction/patch.diff" in graded.error_msg
    agent = (ROOT / "agents" / "predictions" / "agent.py").read_text()
    assert f"NOT_MOUNTED = {PREDICTION_NOT_MOUNTED}" in agent  # the agent exits with the status read here


def test_an_applied_prediction_and_any_other_run_are_graded_by_the_checks(tmp_path: Path) -> None:
    applied = AgentEnd(status=0, duration=0.2, timed_out=False)
    failed = AgentEnd(status=1, duration=0.2, timed_out=False)
    assert prediction_not_applied(_settings(tmp_path), applied) is None
    assert prediction_not_applied(_settings(tmp_path), None) is None
    # An agent's own non-zero exit is never read so: only the predictions agent does nothing but apply.
    assert prediction_not_applied(_settings(tmp_path, prediction=False), failed) is None


def test_past_runs_give_the_newest_run_with_a_patch_of_each_task_model_and_agent(tmp_path: Path) -> None:
    from ssebench.predictions import past_runs

    def run(name: str, started: str, patch: str | None) -> None:
        folder = tmp_path / "c-demo" / "m" / "chat-agent" / name
        folder.mkdir(parents=True)
        summary = {"task": {"id": "c-demo"}, "config": {"agent": "chat-agent", "model": "m"}, "started_at": started}
        (folder / "summary.json").write_text(json.dumps(summary))
        if patch is not None:
            (folder / "final.patch").write_text(patch)

    run("20261201T000000-d2-sandbox-aaaaaa", "2026-12-01T00:00:00+00:00", "old\n")
    run("20261202T000000-d2-sandbox-bbbbbb", "2026-12-02T00:00:00+00:00", "new\n")
    run("20261203T000000-d2-sandbox-cccccc", "2026-12-03T00:00:00+00:00", None)  # no patch: not a prediction
    [found] = past_runs(tmp_path)
    assert (found.instance_id, found.model, found.patch) == ("c-demo", "chat-agent/m", "new\n")
