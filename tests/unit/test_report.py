"""What a run adds to the reports: its vulnerability and project, escaped."""

from __future__ import annotations

from pathlib import Path

from pytest_ssebench.report import grade_card, properties, vulnerability_cell
from ssebench.agent import load_agent
from ssebench.dataset import load_tasks
from ssebench.run import RunConfig, RunRecord
from ssebench.settings import get_settings
from tests.helpers import DEMO, PILOT


def _record(task_id: str, tmp_path: Path) -> RunRecord:
    root = PILOT if task_id in {p.name for p in PILOT.iterdir()} else DEMO
    task = next(t for t in load_tasks(root) if t.id == task_id)
    config = RunConfig(task=task, agent=load_agent(get_settings().agents_dir, "dummy"))
    return RunRecord(config=config, run_id="r1", run_dir=tmp_path, started_at="now", grade="failed")


def test_a_pilot_run_names_its_advisories_and_project(tmp_path: Path) -> None:
    record = _record("time-CVE-2026-25727", tmp_path)
    props = dict(properties(record))
    assert props["ssebench.advisories"] == "CVE-2026-25727, RUSTSEC-2026-0009"
    assert props["ssebench.project"] == "time" and props["ssebench.dataset_version"] == "pilot-v1"
    assert vulnerability_cell(properties(record)) == "CVE-2026-25727, RUSTSEC-2026-0009 · time"
    card = grade_card(record)
    assert "time-CVE-2026-25727: time (rust)" in card and "CVE-2026-25727, RUSTSEC-2026-0009" in card


def test_a_task_without_an_advisory_says_so_and_other_tests_get_an_empty_cell(tmp_path: Path) -> None:
    assert vulnerability_cell(properties(_record("c-demo", tmp_path))) == "no advisory · tlvkit"
    assert vulnerability_cell([("ssebench.project", "<b>x</b>"), ("ssebench.advisories", "CVE-1")]) == \
        "CVE-1 · &lt;b&gt;x&lt;/b&gt;"
    assert vulnerability_cell([("other", 1)]) == ""


def test_a_failure_says_why_the_model_was_stopped_and_which_limits_were_hit(tmp_path: Path) -> None:
    from pytest_ssebench.collect import failure_text

    record = _record("c-demo", tmp_path)
    record.result = {"patch_result": {"error_msg": "PoC failed: /ssebench/pocs/long_value.tlv", "build_success": True,
                                      "pov_passed": 0, "pov_total": 1}}
    assert "stopped" not in failure_text(record) and "Limits" not in failure_text(record)
    record.usage = {"calls": 2, "stopped": "budget exhausted: 5105 of 5000 tokens used"}
    record.limits_hit = ["memory: 1 OOM kill"]
    lines = failure_text(record).splitlines()
    assert lines[0] == "A proof of concept still reproduces: /ssebench/pocs/long_value.tlv."
    assert "Model calls stopped by the gateway: budget exhausted: 5105 of 5000 tokens used." in lines
    assert "Limits hit: memory: 1 OOM kill." in lines
