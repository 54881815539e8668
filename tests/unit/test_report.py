"""What a run adds to the reports: its vulnerability and project, escaped."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sse.result import RunResult

from pytest_ssebench.report import grade_card, properties, vulnerability_cell
from ssebench.agent import load_agent
from ssebench.dataset import load_dataset_config, load_tasks
from ssebench.record import RunRecord
from ssebench.runspec import RunConfig
from ssebench.scores import ScoreTable, pass_at_k, wilson_interval
from ssebench.settings import get_settings
from tests.helpers import DEMO, FAKE_RUNS, PILOT

pytest_plugins = ["pytester"]


def _result(data: dict[str, Any]) -> RunResult:
    """result.json's content `data` as the harness reads it."""
    read = RunResult.from_json(data)
    assert read is not None, data
    return read


def _record(task_id: str, tmp_path: Path) -> RunRecord:
    root = PILOT if task_id in {p.name for p in PILOT.iterdir()} else DEMO
    task = next(t for t in load_tasks(root) if t.id == task_id)
    config = RunConfig(task=task, agent=load_agent(get_settings().agents_dir, "dummy"))
    return RunRecord(config=config, run_id="r1", run_dir=tmp_path, started_at="now", grade="failed")


def test_a_pilot_run_names_its_advisories_and_project(tmp_path: Path) -> None:
    record = _record("time-CVE-2026-25727", tmp_path)
    props = dict(properties(record))
    assert props["ssebench.advisories"] == "CVE-2026-25727, RUSTSEC-2026-0009"
    # The dataset's own version (dataset.yaml), whatever it is at the time.
    version = load_dataset_config(PILOT).version
    assert version.startswith("pilot-")
    assert props["ssebench.project"] == "time" and props["ssebench.dataset_version"] == version
    assert vulnerability_cell(properties(record)) == "CVE-2026-25727, RUSTSEC-2026-0009 · time"
    card = grade_card(record)
    assert "time-CVE-2026-25727: time (rust)" in card and "CVE-2026-25727, RUSTSEC-2026-0009" in card
    assert "difficulty 2, sandbox mode, egress restricted" in card


def test_a_task_without_an_advisory_says_so_and_other_tests_get_an_empty_cell(tmp_path: Path) -> None:
    assert vulnerability_cell(properties(_record("c-demo", tmp_path))) == "no advisory · tlvkit"
    assert (
        vulnerability_cell([("ssebench.project", "<b>x</b>"), ("ssebench.advisories", "CVE-1")])
        == "CVE-1 · &lt;b&gt;x&lt;/b&gt;"
    )
    assert vulnerability_cell([("other", 1)]) == ""


def test_a_failure_says_why_the_model_was_stopped_and_which_limits_were_hit(tmp_path: Path) -> None:
    from pytest_ssebench.collect import failure_text

    record = _record("c-demo", tmp_path)
    said: dict[str, Any] = {
        "patch_result": {
            "error_msg": "PoC failed: /ssebench/pocs/long_value.tlv",
            "build_success": True,
            "pov_passed": 0,
            "pov_total": 1,
        }
    }
    record.result = _result(said)
    assert "stopped" not in failure_text(record) and "Limits" not in failure_text(record)
    record.usage = {"calls": 2, "stopped": "budget exhausted: 5105 of 5000 tokens used"}
    record.limits_hit = ["memory: 1 OOM kill"]
    lines = failure_text(record).splitlines()
    assert lines[0] == "A proof of concept still reproduces: /ssebench/pocs/long_value.tlv."
    assert "Model calls stopped by the gateway: budget exhausted: 5105 of 5000 tokens used." in lines
    assert "Limits hit: memory: 1 OOM kill." in lines


def test_files_grading_set_aside_are_named_in_the_failure_the_properties_and_the_card(tmp_path: Path) -> None:
    from pytest_ssebench.collect import failure_text

    record = _record("c-demo", tmp_path)
    said: dict[str, Any] = {
        "patch_result": {
            "error_msg": "PoC failed: /ssebench/pocs/long_value.tlv",
            "build_success": True,
            "pov_passed": 0,
            "pov_total": 1,
        }
    }
    record.result = _result(said)
    assert "Set aside" not in failure_text(record) and "signal" not in str(properties(record))
    assert "set aside" not in grade_card(record)
    named = [f"tests/t{i}.c" for i in range(12)]
    said["signals"] = {"protected_files": ["Makefile", "<b>x</b>", *named], "protected_files_count": 250}
    record.result = _result(said)
    assert (
        "Set aside by grading (outside the code under repair): 250 changed file(s): Makefile, <b>x</b>, tests/t0.c"
    ) in failure_text(record)
    assert "tests/t7.c and 240 more." in failure_text(record)
    props = dict(properties(record))
    assert props["ssebench.signal.protected_files_count"] == 250
    assert str(props["ssebench.signal.protected_files"]).startswith("Makefile, <b>x</b>, tests/t0.c")
    assert "250 file(s) outside the code under repair" in grade_card(record) and "&lt;b&gt;x" in grade_card(record)
    assert "<b>x</b>" not in grade_card(record)


def test_lines_that_can_hide_a_bug_are_named_in_the_failure_the_properties_and_the_card(tmp_path: Path) -> None:
    from pytest_ssebench.collect import failure_text

    record = _record("c-demo", tmp_path)
    said: dict[str, Any] = {
        "patch_result": {"error_msg": "Intent test failed", "build_success": True, "pov_passed": 1, "pov_total": 1},
        "signals": {"protected_files": [], "protected_files_count": 0, "hiding_code": [], "hiding_code_count": 0},
    }
    record.result = _result(said)
    assert "can hide a bug" not in failure_text(record) and "hiding" not in str(properties(record))
    said["signals"].update(hiding_code=[{"path": "tlv.h", "line": "#define main(...) <b>x</b>"}], hiding_code_count=3)
    record.result = _result(said)
    assert "Lines that can hide a bug from the checks: 3 (first, tlv.h: #define main(...) <b>x</b>)." in failure_text(
        record
    )
    props = dict(properties(record))
    assert props["ssebench.signal.hiding_code_count"] == 3
    assert props["ssebench.signal.hiding_code"] == "tlv.h: #define main(...) <b>x</b>"
    card = grade_card(record)
    assert "3 added line(s) that can hide a bug" in card and "&lt;b&gt;x&lt;/b&gt;" in card and "<b>x</b>" not in card


def test_wilson_interval_matches_known_values() -> None:
    # Wilson's 95 % interval (z = 1.96): 0 of 10 -> [0, 27.8 %]; 5 of 10 -> [23.7, 76.3 %]; 10 of 10 -> [72.2, 100].
    for passed, total, low, high in ((0, 10, 0.0, 0.2775), (5, 10, 0.2366, 0.7634), (10, 10, 0.7225, 1.0)):
        got = wilson_interval(passed, total)
        assert abs(got[0] - low) < 1e-3 and abs(got[1] - high) < 1e-3, (passed, total, got)


def test_pass_at_k_is_the_unbiased_estimate() -> None:
    assert pass_at_k(3, 0, 1) == 0.0 and pass_at_k(3, 3, 3) == 1.0
    assert abs(pass_at_k(3, 1, 1) - 1 / 3) < 1e-9
    assert abs(pass_at_k(5, 2, 2) - (1 - 3 / 10)) < 1e-9  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(4, 2, 3) == 1.0  # fewer failures than draws: one pass is certain
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def _props(task: str, agent: str = "chat-agent", model: str = "m", mode: str = "sandbox") -> list[tuple[str, object]]:
    return [
        ("ssebench.task", task),
        ("ssebench.agent", agent),
        ("ssebench.model", model),
        ("ssebench.difficulty", 2),
        ("ssebench.mode", mode),
    ]


def test_the_score_table_gives_pass_rates_intervals_and_pass_at_k() -> None:
    table = ScoreTable(trials=3)
    outcomes = {
        "a": ["passed", "failed", "failed"],
        "b": ["passed", "passed", "passed"],
        "c": ["failed", "error", "failed"],
    }
    for task, results in outcomes.items():
        for trial, outcome in enumerate(results, 1):
            table.add(f"{task}::chat-agent[m-d2-sandbox-t{trial}]", outcome, _props(task))
    header, row = table.cells()
    cells = dict(zip(header, row, strict=True))
    assert cells["runs"] == "9" and (cells["passed"], cells["failed"], cells["error"]) == ("4", "4", "1")
    # 4 of 8 graded runs (the error is not a grade): 50 %, Wilson [21.5, 78.5].
    assert cells["pass rate [95% CI]"] == "50% [22-78]"
    # pass@1 per task: 1/3, 1, 0 -> 44 %; pass@3 needs 3 graded trials: a (1) and b (1); c has 2 -> 100 %,
    # and the cell says it stands for two of the three tasks.
    assert cells["pass@1"] == "44%" and cells["pass@3"] == "100% (2 of 3 tasks)"
    assert "SSEBench scores" in table.html() and "50% [22-78]" in table.html()


def test_one_trial_each_shows_no_pass_at_k_column() -> None:
    table = ScoreTable()
    table.add("a::x", "passed", _props("a"))
    table.add("b::x", "failed", _props("b"))
    header, row = table.cells()
    assert not any(h.startswith("pass@") for h in header)
    assert dict(zip(header, row, strict=True))["pass rate [95% CI]"] == "50% [9-91]"


def test_every_property_is_a_plain_value_and_status_is_the_recorded_grade(tmp_path: Path) -> None:
    # xdist sends user_properties between processes and junit-xml writes them: only plain values travel.
    record = _record("c-demo", tmp_path)
    record.result = _result(
        {
            "patch_result": {"status": "failed", "build_success": True, "pov_passed": 0, "pov_total": 1},
            "runtime_result": {"agent_duration": 1.5},
        }
    )
    props = dict(properties(record))
    assert all(isinstance(value, (str, int, float, bool)) for value in props.values()), props
    assert props["ssebench.status"] == "failed" and props["ssebench.pov_total"] == 1
    record.result = None  # no result.json: no recorded grade either
    assert dict(properties(record))["ssebench.status"] == ""


def test_the_score_table_keeps_modes_apart() -> None:
    table = ScoreTable()
    for mode, outcome in (("sandbox", "passed"), ("sidecar", "failed")):
        table.add(f"a::x[none-d2-{mode}]", outcome, _props("a", mode=mode))
    header, *rows = table.cells()
    by_mode = {row[header.index("mode")]: dict(zip(header, row, strict=True)) for row in rows}
    assert set(by_mode) == {"sandbox", "sidecar"}
    assert by_mode["sandbox"]["passed"] == "1" and by_mode["sidecar"]["failed"] == "1"


def test_signals_a_run_wrote_are_read_whatever_their_shape(tmp_path: Path) -> None:
    """result.json comes out of the run's container: entries of the wrong type are dropped, and a count below
    what is listed, or not a number, is the list's length."""
    record = _record("c-demo", tmp_path)
    record.result = _result({"patch_result": {}, "signals": "not a mapping"})
    assert record.set_aside == ([], 0) and record.hiding_code == ([], 0)
    said: dict[str, Any] = {
        "patch_result": {},
        "signals": {
            "protected_files": ["Makefile", 7, None, "build.rs"],
            "protected_files_count": 1,
            "hiding_code": [{"path": "a.c", "line": "#define main x"}, "text", 3],
            "hiding_code_count": "many",
        },
    }
    record.result = _result(said)
    assert record.set_aside == (["Makefile", "build.rs"], 2)
    assert record.hiding_code == ([{"path": "a.c", "line": "#define main x"}], 1)
    said["signals"]["protected_files_count"] = 40
    record.result = _result(said)
    assert record.set_aside == (["Makefile", "build.rs"], 40)


def test_shortcut_signals_are_on_the_card_and_in_the_properties_escaped_and_never_the_grade(tmp_path: Path) -> None:
    record = _record("c-demo", tmp_path)
    said: dict[str, Any] = {
        "patch_result": {"status": "failed", "build_success": True, "pov_passed": 0, "pov_total": 1}
    }
    record.result = _result(said)
    quiet_card, quiet_props = grade_card(record), dict(properties(record))
    assert "<th style='text-align:left;padding-right:1em'>signals</th><td>none</td>" in quiet_card
    assert not [name for name in quiet_props if name.startswith("ssebench.signal.")]
    said["signals"] = {
        "refused_calls": [{"kind": "difficulty", "route": "/tool/bencher?action=run_poc", "reason": "<b>no</b>"}],
        "refused_calls_count": 3,
        "refused_requests": [{"kind": "gateway", "route": "GET /v1/files", "reason": "not served"}],
        "refused_requests_count": 1,
        "changed_tests": ["tests/t.c"],
        "changed_harness": ["tlvdump.c"],
        "changed_build": ["Makefile"],
        "reference_similarity": 0.25,
        "outside_reference_files": True,
    }
    record.result = _result(said)
    card, props = grade_card(record), dict(properties(record))
    assert props["ssebench.signal.fired"] == (
        "refused_calls, refused_requests, changed_tests, changed_harness, changed_build, outside_reference_files"
    )
    assert props["ssebench.signal.refused_calls_count"] == 3
    assert props["ssebench.signal.refused_calls"] == "difficulty /tool/bencher?action=run_poc: <b>no</b>"
    assert props["ssebench.signal.refused_requests"] == "gateway GET /v1/files: not served"
    assert props["ssebench.signal.changed_build"] == "Makefile"
    assert props["ssebench.signal.reference_similarity"] == 0.25
    assert props["ssebench.signal.outside_reference_files"] is True
    assert props["ssebench.grade"] == "failed"  # a signal changes no grade
    assert "&lt;b&gt;no&lt;/b&gt;" in card and "<b>no</b>" not in card
    assert "0.250 of 1" in card and "touches none of the files the reference fix touches" in card
    assert "1 file(s) of build logic" in card and "(never a grade)" in card


def test_the_score_table_counts_the_runs_with_each_signal(tmp_path: Path) -> None:
    """Fed from the runs' junit-xml properties, as under xdist: a run counts once per signal it fired."""
    table = ScoreTable()
    loud = _record("c-demo", tmp_path)
    loud.result = _result(
        {
            "patch_result": {"status": "failed"},
            "signals": {"refused_calls_count": 5, "changed_build": ["Makefile"], "outside_reference_files": True},
        }
    )
    near = _record("c-demo", tmp_path)
    near.result = _result({"patch_result": {"status": "passed"}, "signals": {"reference_similarity": 1.0}})
    quiet = _record("c-demo", tmp_path)
    quiet.result = _result({"patch_result": {"status": "failed"}, "signals": {"reference_similarity": 0.0}})
    for i, record in enumerate((loud, near, quiet, quiet)):
        table.add(f"c-demo::dummy[{i}]", record.grade, properties(record))
    table.add("c-demo::dummy[0]", "failed", properties(loud))  # a report seen twice counts once
    header, row = table.signal_cells()
    counts = dict(zip(header, row, strict=True))
    assert counts["runs"] == "4"
    assert (counts["refused calls"], counts["build files"], counts["outside ref"], counts["near ref"]) == (
        "1",
        "1",
        "1",
        "1",
    )
    assert counts["refused requests"] == counts["tests"] == counts["set aside"] == "0"
    assert table.records()[0]["signal_refused_calls"] == 1 and table.records()[0]["signal_hiding_code"] == 0
    assert 'id="ssebench-signals"' in table.html() and "never a grade" in table.html()


def test_the_score_table_leaves_runs_of_quarantined_tasks_out_and_says_how_many(tmp_path: Path) -> None:
    table = ScoreTable()
    table.add("a::x", "passed", _props("a"))
    table.add("b::x", "failed", [*_props("b"), ("ssebench.quarantined", "flaky poc (1 of 3)")])
    table.add("b::y", "error", [*_props("b"), ("ssebench.quarantined", "flaky poc (1 of 3)")])
    table.add("b::y", "error", [*_props("b"), ("ssebench.quarantined", "flaky poc (1 of 3)")])  # its call report
    table.add("c::x", "failed", [*_props("c"), ("ssebench.quarantined", "")])  # not quarantined: "" is None
    header, row = table.cells()
    cells = dict(zip(header, row, strict=True))
    assert (cells["runs"], cells["passed"], cells["failed"], cells["error"]) == ("2", "1", "1", "0")
    assert table.left_out_line() == "2 run(s) of quarantined tasks left out (dataset.yaml: quarantine)"
    assert "2 run(s) of quarantined tasks left out" in table.html()
    assert ScoreTable().left_out_line() is None


def test_only_a_quarantined_tasks_runs_say_so_in_their_properties(tmp_path: Path) -> None:
    record = _record("c-demo", tmp_path)
    assert "ssebench.quarantined" not in dict(properties(record))
    task = replace(record.config.task, quarantined="flaky poc (1 of 3)")
    record.config = replace(record.config, task=task)
    assert dict(properties(record))["ssebench.quarantined"] == "flaky poc (1 of 3)"
    # summary.json says it too, for the score tables made from a results directory.
    assert record.to_summary()["task"]["quarantined"] == "flaky poc (1 of 3)"


def test_the_plugins_score_table_leaves_a_quarantined_task_out_and_says_so(pytester: pytest.Pytester) -> None:
    shutil.copytree(DEMO, pytester.path / "datasets" / "demo")
    dataset = pytester.path / "datasets" / "demo" / "dataset.yaml"
    dataset.write_text(dataset.read_text() + "quarantine:\n  go-demo: flaky function test (1 of 3)\n")
    (pytester.path / "conftest.py").write_text(FAKE_RUNS.format(seconds=0))
    result = pytester.runpytest_subprocess(
        "datasets/demo/c-demo",
        "datasets/demo/go-demo",
        "--agent",
        "reference",
        "--agent",
        "dummy",
        "--results",
        "out",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=2, failed=2)  # both tasks ran: quarantine leaves out the counting only
    out = result.stdout.str()
    table = out[out.index("SSEBench scores") : out.index("shortcut signals")]
    assert "2 run(s) of quarantined tasks left out (dataset.yaml: quarantine)" in table
    rows = [line.split() for line in table.splitlines() if line.startswith(("reference ", "dummy "))]
    assert sorted((row[0], row[4]) for row in rows) == [("dummy", "1"), ("reference", "1")]  # one run each


def test_a_task_that_does_not_collect_is_an_error_in_the_html_report_not_a_crash(pytester: pytest.Pytester) -> None:
    # pytest-html also renders a failed collection's report, which has no user_properties.
    shutil.copytree(DEMO, pytester.path / "datasets" / "demo")
    config = pytester.path / "datasets" / "demo" / "go-demo" / "sse" / "config.yaml"
    config.write_text(config.read_text().replace("language: go", "language: cobol"))
    (pytester.path / "conftest.py").write_text(FAKE_RUNS.format(seconds=0))
    result = pytester.runpytest_subprocess(
        "datasets/demo", "--agent", "dummy", "--html", "report.html", "-p", "no:randomly", "-p", "no:cacheprovider"
    )
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.assert_outcomes(errors=1)
    assert "go-demo/sse/config.yaml" in (pytester.path / "report.html").read_text()  # its row, with its error
