"""A run's dialog (archive/dialog.jsonl) as a readable HTML transcript, for the HTML report and the viewer.

Every string from the dialog is escaped: the transcript holds no link, no
image and no markup of the agent's; it follows nothing. Long texts are
folded into `<details>`, each tool call shows its arguments and, right
under it, its result. A record that does not follow the dialog protocol is
shown as invalid, with its raw JSON, rather than dropped.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

FOLD_LINES = 20
FOLD_CHARS = 2000
SHOW_CHARS = 100_000
# The most HTML a transcript is drawn as: the dialog is the agent's to write, and each reader (the viewer, live,
# and report.html) draws it whole; past this, a line says how many records are left out (the file is whole).
MAX_HTML = 8 << 20
KNOWN = ("init", "prompt", "message", "thinking", "tool_call", "tool_result", "complete")
STATUS_COLOURS = {"done": "#1a7f37", "error": "#cf222e", "timeout": "#9a6700", "budget": "#9a6700", "turns": "#9a6700"}

STYLE = (
    "<style>"
    ".sse-t{font-family:system-ui,sans-serif;font-size:13px;max-width:1100px}"
    ".sse-t pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;padding:6px;margin:4px 0;"
    "border-radius:4px;font-size:12px}"
    ".sse-t .rec{border-left:3px solid #d0d7de;padding:2px 8px;margin:6px 0}"
    ".sse-t .msg{border-color:#0969da}.sse-t .tool{border-color:#8250df}.sse-t .bad{border-color:#cf222e;"
    "background:#fff5f5}"
    ".sse-t .meta{color:#57606a;font-size:11px}.sse-t .err{color:#cf222e}"
    "</style>"
)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _block(text: str, label: str, *, open_: bool = False) -> str:
    """Text in a <pre>, folded under `label` when it is long."""
    shown = (
        text
        if len(text) <= SHOW_CHARS
        else text[:SHOW_CHARS] + f"\n[... {len(text) - SHOW_CHARS} characters not shown]"
    )
    pre = f"<pre>{escape(shown)}</pre>"
    lines = text.count("\n") + 1
    if lines <= FOLD_LINES and len(text) <= FOLD_CHARS:
        return pre
    opened = " open" if open_ else ""
    return f"<details{opened}><summary>{escape(label)} ({lines} lines, {len(text)} characters)</summary>{pre}</details>"


def _raw(record: Any) -> str:
    try:
        return json.dumps(record, ensure_ascii=False, indent=1, default=str)
    except (TypeError, ValueError):
        return repr(record)


def _invalid(index: int, problem: str, record: Any) -> str:
    return (
        f'<div class="rec bad"><b class="err">invalid record {index}</b>: {escape(problem)}'
        f"{_block(_raw(record), 'raw record')}</div>"
    )


def _tokens(tokens: Any) -> str:
    if isinstance(tokens, dict) and isinstance(tokens.get("input"), int) and isinstance(tokens.get("output"), int):
        return f" · tokens: {tokens['input']} in / {tokens['output']} out"
    return ""


def _arguments(value: Any) -> str:
    """A tool call's input: short fields inline, long or multi-line ones in blocks."""
    if not isinstance(value, dict):
        return _block(_text(value), "input")
    inline, blocks = [], []
    for key, item in value.items():
        text = _text(item)
        if "\n" in text or len(text) > 120:
            blocks.append(f'<div class="meta">{escape(str(key))}</div>{_block(text, str(key))}')
        else:
            inline.append(f"<code>{escape(str(key))}</code>: <code>{escape(text)}</code>")
    return (f"<div>{' · '.join(inline)}</div>" if inline else "") + "".join(blocks)


def _result(record: dict[str, Any]) -> str:
    parts = []
    code = record.get("code")
    if code is not None:
        parts.append(f'<span class="meta">exit code {escape(str(code))}</span>')
    error = record.get("error")
    if error:
        parts.append(f'<div class="err">error: {escape(_text(error))}</div>')
    output = record.get("output")
    if isinstance(output, str) and output:
        parts.append(_block(output, "output"))
    elif output not in (None, ""):
        parts.append(_block(_text(output), "output"))
    return "".join(parts) or '<span class="meta">(no output)</span>'


def _problem(record: dict[str, Any]) -> str | None:
    """Why a record of a known type cannot be shown as one, or None."""
    kind = record["type"]
    need: dict[str, tuple[str, ...]] = {
        "init": ("agent", "model"),
        "prompt": ("text",),
        "message": ("text",),
        "thinking": ("text",),
        "tool_call": ("tool_id", "name"),
        "tool_result": ("tool_id",),
        "complete": ("status",),
    }
    for name in need[kind]:
        if not isinstance(record.get(name), str):
            return f"{kind} without a string {name}"
    return None


def render_transcript(records: list[Any]) -> str:
    """The dialog as an HTML fragment (escaped, self-contained, no links)."""
    results: dict[str, dict[str, Any]] = {}
    for record in records:
        if isinstance(record, dict) and record.get("type") == "tool_result" and isinstance(record.get("tool_id"), str):
            results.setdefault(record["tool_id"], record)
    shown_results: set[int] = set()
    out = [STYLE, '<div class="sse-t">']
    turn = 0
    size, counted = 0, len(out)
    for index, record in enumerate(records):
        size += sum(len(piece) for piece in out[counted:])
        counted = len(out)
        if size > MAX_HTML:
            out.append(
                f'<div class="rec bad"><span class="err">{len(records) - index} more record(s) not shown: '
                "the transcript is longer than this page draws (dialog.jsonl holds it all)</span></div>"
            )
            break
        if not isinstance(record, dict):
            out.append(_invalid(index, "not a JSON object", record))
            continue
        kind = record.get("type")
        if kind not in KNOWN:
            out.append(_invalid(index, f"unknown type {_text(kind)}", record))
            continue
        problem = _problem(record)
        if problem is not None:
            out.append(_invalid(index, problem, record))
            continue
        if kind == "init":
            extra = ", ".join(
                f"{k}={_text(v)}" for k, v in record.items() if k not in ("seq", "ts", "type", "agent", "model")
            )
            out.append(
                f'<div class="rec"><b>{escape(record["agent"])}</b> with model '
                f"<b>{escape(record['model'])}</b>"
                f"{f' <span class=meta>({escape(extra)})</span>' if extra else ''}</div>"
            )
        elif kind == "prompt":
            out.append(f'<div class="rec"><b>Task prompt</b>{_block(record["text"], "the prompt")}</div>')
        elif kind == "thinking":
            out.append(
                f'<div class="rec"><details><summary>thinking{escape(_tokens(record.get("tokens")))}'
                f"</summary><pre>{escape(record['text'])}</pre></details></div>"
            )
        elif kind == "message":
            tokens = record.get("tokens")
            if isinstance(tokens, dict):
                turn += 1
            label = f"turn {turn}" if isinstance(tokens, dict) else "message"
            text = record["text"]
            body = _block(text, "the message", open_=True) if text else '<div class="meta">(tool calls only)</div>'
            out.append(f'<div class="rec msg"><div class="meta">{escape(label + _tokens(tokens))}</div>{body}</div>')
        elif kind == "tool_call":
            result = results.get(record["tool_id"])
            answer = (
                '<div class="err">no result recorded for this call</div>'
                if result is None
                else f'<div class="meta">result</div>{_result(result)}'
            )
            if result is not None:
                shown_results.add(id(result))
            out.append(
                f'<div class="rec tool"><b>{escape(record["name"])}</b> '
                f'<span class="meta">{escape(record["tool_id"])}</span>'
                f"{_arguments(record.get('input'))}{answer}</div>"
            )
        elif kind == "tool_result":
            if id(record) not in shown_results:
                out.append(
                    f'<div class="rec bad"><span class="err">result of {escape(record["tool_id"])}, '
                    f"that no earlier call is waiting for</span>{_result(record)}</div>"
                )
        elif kind == "complete":
            status = record["status"]
            colour = STATUS_COLOURS.get(status, "#9a6700")
            reason = record.get("reason")
            totals = record.get("totals")
            totals_text = ", ".join(f"{k} {_text(v)}" for k, v in totals.items()) if isinstance(totals, dict) else ""
            out.append(
                f'<div class="rec"><b>complete: <span style="color:{colour}">{escape(status)}</span></b>'
                f"{f' — {escape(_text(reason))}' if reason else ''}"
                f"{f'<div class=meta>{escape(totals_text)}</div>' if totals_text else ''}</div>"
            )
    out.append("</div>")
    return "".join(out)
