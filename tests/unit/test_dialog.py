"""The dialog protocol: what Dialog writes validates, and validate names each way a dialog breaks it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sse.dialog import STATUSES, Dialog, read, validate


def _session(path: Path) -> Dialog:
    dialog = Dialog(path)
    dialog.init(agent="a", model="m", version="1")
    dialog.prompt("fix it")
    dialog.thinking("hmm")
    dialog.message("I look", tokens={"input": 100, "output": 7})
    dialog.tool_call("t1", "bash", {"command": "ls"})
    dialog.tool_result("t1", "a.c\n", code=0)
    dialog.message("", tokens={"input": 150, "output": 3})
    dialog.tool_call("t2", "edit_file", {"path": "a.c"})
    dialog.tool_result("t2", "", error="old_str is not in a.c")
    return dialog


def test_a_written_session_validates_and_counts_its_totals(tmp_path: Path) -> None:
    path = tmp_path / "dialog.jsonl"
    dialog = _session(path)
    dialog.complete("done", "finished")
    records = read(path)
    assert validate(records) == []
    assert [r["seq"] for r in records] == list(range(len(records)))
    assert [r["type"] for r in records] == [
        "init",
        "prompt",
        "thinking",
        "message",
        "tool_call",
        "tool_result",
        "message",
        "tool_call",
        "tool_result",
        "complete",
    ]
    assert records[0]["version"] == "1"
    assert records[-1]["totals"] == {"input_tokens": 250, "output_tokens": 10, "turns": 2, "tool_calls": 2}
    assert all(isinstance(r["ts"], float) for r in records)


def test_each_line_is_on_disk_when_its_method_returns(tmp_path: Path) -> None:
    path = tmp_path / "dialog.jsonl"
    dialog = Dialog(path)
    dialog.init(agent="a", model="m")
    assert json.loads(path.read_text())["type"] == "init"


def test_complete_refuses_an_unknown_status_and_a_second_complete(tmp_path: Path) -> None:
    dialog = _session(tmp_path / "d.jsonl")
    with pytest.raises(ValueError, match="status must be one of"):
        dialog.complete("finished")
    dialog.complete("error", "x", totals={"input_tokens": 1, "output_tokens": 2, "turns": 3, "tool_calls": 4})
    with pytest.raises(ValueError, match="already complete"):
        dialog.complete("done")
    assert read(tmp_path / "d.jsonl")[-1]["totals"]["turns"] == 3


def test_the_path_defaults_to_the_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSE_ARCHIVE", str(tmp_path))
    assert Dialog().path == tmp_path / "dialog.jsonl"


def _valid() -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = [
        {"type": "init", "agent": "a", "model": "m"},
        {"type": "prompt", "text": "p"},
        {"type": "message", "text": "x", "tokens": {"input": 1, "output": 2}},
        {"type": "tool_call", "tool_id": "t", "name": "bash", "input": {"command": "ls"}},
        {"type": "tool_result", "tool_id": "t", "output": "", "code": 0, "error": None},
        {
            "type": "complete",
            "status": "done",
            "reason": None,
            "totals": {"input_tokens": 1, "output_tokens": 2, "turns": 1, "tool_calls": 1},
        },
    ]
    return [{"seq": i, "ts": 1.5, **r} for i, r in enumerate(records)]


def test_the_reference_dialog_is_valid() -> None:
    assert validate(_valid()) == []


def _broken(change: Any) -> list[str]:
    records = _valid()
    change(records)
    return validate(records)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda r: r.clear(), "the dialog is empty"),
        (lambda r: r[2].update(seq=7), "record 2: seq is 7, expected 2"),
        (lambda r: r[2].update(ts="now"), "record 2: ts must be a number"),
        (lambda r: r[2].update(type="chat"), "record 2: unknown type 'chat'"),
        (
            lambda r: r.insert(0, r.pop(1)) or [x.update(seq=i) for i, x in enumerate(r)],
            "record 0: the first record must be init, not prompt",
        ),
        (lambda r: r.pop(), "no complete record"),
        (
            lambda r: r.insert(3, {**r[-1], "seq": 3}) or [x.update(seq=i) for i, x in enumerate(r)],
            "record 3: complete must be the last record",
        ),
        (lambda r: r.pop(4) and [x.update(seq=i) for i, x in enumerate(r)], "tool_call 't' has no tool_result"),
        (lambda r: r[4].update(tool_id="u"), "tool_result for tool_id 'u', which no earlier tool_call has"),
        (
            lambda r: r.insert(5, {**r[4], "seq": 5}) or [x.update(seq=i) for i, x in enumerate(r)],
            "a second tool_result for tool_id 't'",
        ),
        (lambda r: r[2].update(tokens={"input": -1, "output": 2}), "must be non-negative integers"),
        (lambda r: r[2].update(tokens={"in": 1}), "tokens must be null or {input, output}"),
        (lambda r: r[2].pop("text"), "message lacks text"),
        (lambda r: r[0].update(agent=3), "init.agent must be a string"),
        (lambda r: r[5].update(status="finished"), "complete.status must be one of"),
        (lambda r: r[5].update(totals={"turns": 1}), "complete.totals.input_tokens must be a non-negative integer"),
        (lambda r: r[4].update(code="0"), "tool_result.code must be an integer or null"),
        (lambda r: r[3].pop("input"), "tool_call lacks input"),
        (lambda r: r.__setitem__(2, "not json"), "record 2: not a JSON object"),
    ],
)
def test_each_break_is_named(change: Any, expected: str) -> None:
    problems = _broken(change)
    assert any(expected in p for p in problems), problems


def test_a_second_init_and_prompt_are_named() -> None:
    records = _valid()
    records.insert(2, {"seq": 2, "ts": 1.0, "type": "init", "agent": "a", "model": "m"})
    records.insert(3, {"seq": 3, "ts": 1.0, "type": "prompt", "text": "again"})
    for i, record in enumerate(records):
        record["seq"] = i
    problems = validate(records)
    assert "record 2: init must come first, and once" in problems
    assert "record 3: prompt must come second, and once" in problems


def test_every_status_is_accepted() -> None:
    for status in STATUSES:
        records = _valid()
        records[-1]["status"] = status
        assert validate(records) == []


def test_read_keeps_a_broken_line_as_its_text(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"seq": 0}\nnot json\n\n')
    assert read(path) == [{"seq": 0}, "not json"]


def test_the_module_is_cheap_to_import() -> None:
    code = "import sys, sse.dialog; print(sorted(m for m in sys.modules if m.split('.')[0] in ('httpx', 'mcp')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
