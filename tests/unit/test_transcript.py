"""The HTML transcript of a dialog: readable, escaped, folded, robust to broken records."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

from ssebench.transcript import FOLD_LINES, MAX_HTML, render_transcript


def _records(*records: dict[str, Any]) -> list[Any]:
    return [{"seq": i, "ts": 1.0, **r} for i, r in enumerate(records)]


SESSION = _records(
    {"type": "init", "agent": "chat-agent", "model": "scripted-fix", "version": "1"},
    {"type": "prompt", "text": "# Task: tlvkit (C)\n\nFix the overflow."},
    {"type": "thinking", "text": "The buffer is 32 bytes.", "tokens": None},
    {"type": "message", "text": "Let me read tlv.c.", "tokens": {"input": 1850, "output": 74}},
    {"type": "tool_call", "tool_id": "call_0_0", "name": "view_file", "input": {"path": "tlv.c", "start_line": 1}},
    {"type": "tool_result", "tool_id": "call_0_0", "output": "     1\t#include <stdio.h>", "code": None, "error": None},
    {"type": "message", "text": "", "tokens": {"input": 3120, "output": 61}},
    {
        "type": "tool_call",
        "tool_id": "call_1_0",
        "name": "edit_file",
        "input": {"path": "tlv.h", "old_str": "a\nb", "new_str": "a\nc\nb"},
    },
    {"type": "tool_result", "tool_id": "call_1_0", "output": "", "code": None, "error": "old_str is not in tlv.h"},
    {
        "type": "complete",
        "status": "done",
        "reason": "finish: fixed",
        "totals": {"input_tokens": 4970, "output_tokens": 135, "turns": 2, "tool_calls": 2},
    },
)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.text: list[str] = []
        self.in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += attrs
        self.in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self.in_style = False

    def handle_data(self, data: str) -> None:
        if not self.in_style:
            self.text.append(data)


def _parse(html: str) -> _Tags:
    parser = _Tags()
    parser.feed(html)
    return parser


def test_a_session_reads_as_a_transcript() -> None:
    html = render_transcript(SESSION)
    text = " ".join(_parse(html).text)
    for expected in (
        "chat-agent",
        "scripted-fix",
        "Task prompt",
        "# Task: tlvkit (C)",
        "turn 1",
        "tokens: 1850 in / 74 out",
        "turn 2",
        "tokens: 3120 in / 61 out",
        "view_file",
        "tlv.c",
        "#include <stdio.h>",
        "error: old_str is not in tlv.h",
        "complete:",
        "done",
        "finish: fixed",
        "input_tokens 4970",
        "The buffer is 32 bytes.",
        "(tool calls only)",
    ):
        assert expected in text, expected
    # A call's result comes right under the call.
    assert html.index("view_file") < html.index("#include &lt;stdio.h&gt;") < html.index("turn 2")


def test_every_string_is_escaped_and_nothing_links() -> None:
    evil = '<script>alert(1)</script><a href="http://evil.example/">x</a><img src=x onerror=alert(2)>'
    records = [
        *_records(
            {"type": "init", "agent": evil, "model": evil, "note": evil},
            {"type": "prompt", "text": evil},
            {"type": "message", "text": evil, "tokens": {"input": 1, "output": 1}},
            {"type": "tool_call", "tool_id": evil, "name": evil, "input": {evil: evil, "long": evil * 10}},
            {"type": "tool_result", "tool_id": evil, "output": evil, "code": 0, "error": evil},
            {"type": "complete", "status": evil, "reason": evil, "totals": {evil: evil}},
            {"type": evil},
        ),
        evil,
    ]
    html = render_transcript(records)
    parsed = _parse(html)
    assert not {"script", "a", "img", "iframe", "link"} & set(parsed.tags)
    assert not [a for a in parsed.attrs if a[0] in ("href", "src", "onerror")]
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "alert(1)" in " ".join(parsed.text)


def test_long_outputs_are_folded_short_ones_are_not() -> None:
    long_output = "\n".join(f"line {i}" for i in range(FOLD_LINES + 30))
    records = _records(
        {"type": "init", "agent": "a", "model": "m"},
        {"type": "prompt", "text": "short prompt"},
        {"type": "tool_call", "tool_id": "t1", "name": "bash", "input": {"command": "seq 50"}},
        {"type": "tool_result", "tool_id": "t1", "output": long_output, "code": 0},
        {"type": "tool_call", "tool_id": "t2", "name": "bash", "input": {"command": "echo hi"}},
        {"type": "tool_result", "tool_id": "t2", "output": "hi", "code": 0},
    )
    html = render_transcript(records)
    folded = re.findall(r"<details><summary>([^<]*)</summary><pre>(.*?)</pre></details>", html, re.S)
    assert [summary for summary, _ in folded] == [f"output ({FOLD_LINES + 30} lines, {len(long_output)} characters)"]
    assert "line 49" in folded[0][1]
    assert "<pre>hi</pre>" in html and "<pre>short prompt</pre>" in html


def test_invalid_records_are_shown_as_such() -> None:
    records: list[Any] = [
        "not json at all",
        {"seq": 1, "type": "message", "text": 42},
        {"seq": 2, "type": "mystery", "x": 1},
        {"seq": 3, "type": "tool_call", "tool_id": "t9", "name": "bash", "input": {}},
        {"seq": 4, "type": "tool_result", "tool_id": "nobody", "output": "orphan output"},
    ]
    text = " ".join(_parse(render_transcript(records)).text)
    assert "invalid record 0" in text and "not a JSON object" in text and "not json at all" in text
    assert "invalid record 1" in text and "message without a string text" in text
    assert "invalid record 2" in text and "unknown type mystery" in text
    assert "no result recorded for this call" in text
    assert "that no earlier call is waiting for" in text and "orphan output" in text


def test_an_empty_dialog_renders() -> None:
    assert 'class="sse-t"' in render_transcript([])


def test_records_nested_too_deep_are_shown_as_text_not_a_crash() -> None:
    """The agent writes dialog.jsonl: a line nested deeper than json (or the renderer) recurses raised
    RecursionError in the host's report (json.loads' ValueError was the only failure parse caught)."""
    import json

    import pytest
    from sse.dialog import MAX_DEPTH, loads_record, parse

    too_deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(RecursionError):  # the positive control: what reading it raised before
        json.loads(too_deep)
    deep = json.dumps({"seq": 1, "type": "message", "text": "x", "nested": json.loads("[" * 500 + "]" * 500)})
    within = json.dumps({"seq": 2, "type": "message", "text": "y", "n": [[["ok"]]]})
    records = parse("\n".join([too_deep, deep, within]))
    assert records[0] == too_deep and records[1] == deep and records[2]["text"] == "y"
    html = render_transcript(records)
    assert "invalid record 0" in html and "invalid record 1" in html and "y" in html
    assert loads_record(json.dumps(json.loads("[" * MAX_DEPTH + "]" * MAX_DEPTH))) is not None
    with pytest.raises(ValueError, match="deeper than"):
        loads_record("[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2))


def test_a_flood_of_records_is_cut_short_with_a_line_saying_how_many_are_not_shown() -> None:
    """An agent writes the dialog: 4 million one-byte lines once made 394 MiB of HTML and 35 s of CPU in the
    viewer and the report. What is drawn is bounded, whatever the records."""
    flood: list[Any] = [1] * 400_000
    html = render_transcript(flood)
    assert len(html) < 2 * MAX_HTML, len(html)
    assert re.search(r"\d+ more record\(s\) not shown", html), html[-500:]
    big = _records(*({"type": "message", "text": "x" * 90_000, "tokens": None} for _ in range(400)))
    html = render_transcript(big)
    assert len(html) < 2 * MAX_HTML and "more record(s) not shown" in html
    whole = render_transcript(SESSION)
    assert "not shown" not in whole  # a real session is drawn whole
