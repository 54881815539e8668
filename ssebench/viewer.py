"""`ssebench view`: a results directory as a local web app (docs/viewer.md).

Pages: the score table with a plot of pass rates (`/`), every run, filtered
and sorted (`/runs`), one run (`/run/<path>`), two agents or models side by
side (`/compare`), and the runs in flight, live (`/live`, `/live/<run>`).
Everything is drawn on the server from Jinja templates that escape every
value; the only script is the live pages' small poller, inline, allowed by
the page's nonce, fetching JSON from this app. Nothing is loaded from
anywhere else: it works offline.

What it trusts nothing of: a run's transcript, patch, logs and names
(agents and models write them). The app

- serves files of runs only, each looked up among the runs `ssebench.runs`
  found (a URL never becomes a path), read with `read_safely` (no link
  followed, regular files only), as text/plain, never as a page;
- escapes everything a run wrote, and sends a Content-Security-Policy that
  allows no script but its own and no request to another origin;
- answers only requests whose Host header names this machine's loopback
  (or a name given with --allow-host), against DNS rebinding, and, bound to
  loopback, only peers on loopback.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import secrets
import stat
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, unquote, urlencode

import jinja2
from markupsafe import Markup
from sse.dialog import parse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from ssebench.errors import SSEBenchError
from ssebench.inflight import InFlight
from ssebench.result import read_safely
from ssebench.runs import FILTERS, StoredRun, matching, read_runs, score_table
from ssebench.transcript import render_transcript

TEMPLATES = Path(__file__).resolve().parent / "templates" / "viewer"
# The most of a file a page shows (a log's tail, a patch, a transcript): enough to read, never gigabytes.
FILE_BYTES = 8 << 20
# The most rows the runs page draws (the first, in its order): a page a browser shows at once.
RUNS_SHOWN = 2000
# How often the live pages ask again, in seconds (and their refresh without JavaScript).
POLL_SECONDS = 2
# A results directory is read again at most this often: a sweep adds runs while one looks.
RESCAN_SECONDS = 2.0
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]", "::1")


class LiveSource(Protocol):
    """Where the live pages learn of runs in flight: the engine (`EngineLive`), or a test's stand-in."""

    def runs(self) -> list[InFlight]:
        """Every run in flight, oldest first."""

    def dialog(self, run: InFlight) -> str | None:
        """The run's dialog.jsonl so far (None when there is none yet or it cannot be read)."""


def is_loopback_bind(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def host_name(header: str) -> str:
    """The name of a Host header without its port: `127.0.0.1:8765` -> `127.0.0.1`, `[::1]:80` -> `[::1]`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[: header.find("]") + 1] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


@dataclass
class Viewer:
    """The app's state: the results directory, its runs (read again when older than RESCAN_SECONDS)."""

    results: Path
    sessions: Sequence[str] = ()
    live: LiveSource | None = None
    _runs: list[StoredRun] = field(default_factory=list)
    _read_at: float = -math.inf

    def runs(self) -> list[StoredRun]:
        if time.monotonic() - self._read_at > RESCAN_SECONDS:
            found = read_runs(self.results)
            self._runs = matching(found, {"session": list(self.sessions)}) if self.sessions else found
            self._read_at = time.monotonic()
        return self._runs

    def run(self, path: str) -> StoredRun | None:
        """The run at `path` (`StoredRun.path`), looked up among those found: a URL never names a file."""
        return next((r for r in self.runs() if r.path == path), None)

    def run_of_url(self, request: Request) -> tuple[StoredRun | None, str]:
        """The run a `/run/<task>/<model>/<agent>/<run-id>[/...]` URL names, and what follows it.

        Read from the raw path, each component unescaped once: a folder's own name holds escapes
        (`openai%2Fgpt-4o`), which the URL escapes again (`/run/x/openai%252Fgpt-4o/...`).
        """
        raw = request.scope.get("raw_path") or request.url.path.encode()
        parts = raw.decode("latin-1").split("?", 1)[0].removeprefix("/run/").split("/", 4)
        names = [unquote(part) for part in parts]
        if len(names) < 4:
            return None, ""
        return self.run("/".join(names[:4])), names[4] if len(names) > 4 else ""


# -- what the pages show ------------------------------------------------------------------------------------


def _selected(request: Request) -> dict[str, list[str]]:
    return {name: request.query_params.getlist(name) for name in FILTERS if request.query_params.getlist(name)}


def _choices(runs: Iterable[StoredRun]) -> dict[str, list[str]]:
    """Each filter's values among these runs, sorted."""
    values: dict[str, set[str]] = defaultdict(set)
    for run in runs:
        for name, attribute in FILTERS.items():
            value = str(getattr(run, attribute))
            if value:
                values[name].add(value)
    return {
        name: sorted(values[name], key=lambda v: (len(v), v) if name == "difficulty" else (0, v)) for name in FILTERS
    }


def plot(table_rows: list[dict[str, Any]]) -> Markup:
    """An SVG of each row's pass rate with its 95 % interval: a bar, a whisker, its label (all escaped)."""
    rows = [r for r in table_rows if r["pass_rate"] is not None]
    if not rows:
        return Markup("<p>No graded run to plot.</p>")
    label_w, bar_w, row_h = 330, 420, 26
    height = row_h * len(rows) + 40
    esc = Markup.escape
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="pass rate per agent with 95% intervals" '
        f'width="{label_w + bar_w + 70}" height="{height}" class="plot">'
    ]
    for tick in range(0, 101, 25):
        x = label_w + bar_w * tick / 100
        parts.append(f'<line x1="{x:.1f}" y1="10" x2="{x:.1f}" y2="{height - 24}" stroke="#d0d7de"/>')
        parts.append(f'<text x="{x:.1f}" y="{height - 8}" text-anchor="middle" font-size="11">{tick}%</text>')
    for i, row in enumerate(rows):
        y = 14 + i * row_h
        label = f"{row['agent']} · {row['model']} · d{row['difficulty']} · {row['mode']}"
        rate, low, high = row["pass_rate"], row["pass_rate_low"], row["pass_rate_high"]
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 13}" text-anchor="end" font-size="12">{esc(label)}</text>'
            f'<rect x="{label_w}" y="{y + 2}" width="{bar_w * rate:.1f}" height="{row_h - 10}" fill="#54aeff">'
            f"<title>{esc(label)}: {100 * rate:.0f}% [{100 * low:.0f}-{100 * high:.0f}] of {row['passed'] + row['failed']} graded</title></rect>"
            f'<line class="ci" x1="{label_w + bar_w * low:.1f}" x2="{label_w + bar_w * high:.1f}" y1="{y + 8}" '
            f'y2="{y + 8}" stroke="#24292f" stroke-width="2"/>'
            f'<line x1="{label_w + bar_w * low:.1f}" x2="{label_w + bar_w * low:.1f}" y1="{y + 3}" y2="{y + 13}" '
            f'stroke="#24292f" stroke-width="2"/>'
            f'<line x1="{label_w + bar_w * high:.1f}" x2="{label_w + bar_w * high:.1f}" y1="{y + 3}" y2="{y + 13}" '
            f'stroke="#24292f" stroke-width="2"/>'
            f'<text x="{label_w + bar_w + 6}" y="{y + 13}" font-size="12">{100 * rate:.0f}%</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def diff_lines(patch: str) -> list[tuple[str, str]]:
    """A patch as (css class, line) pairs for colouring: added, removed, hunk, file header, context."""
    out = []
    for line in patch.splitlines():
        if line.startswith(("+++", "---", "diff ", "index ")):
            kind = "head"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        out.append((kind, line))
    return out


def run_files(run: StoredRun) -> list[tuple[str, int]]:
    """The regular files of a run's folder and its archive/ (name, bytes), links and all else left out.

    Each folder is opened without following a link (a run folder swapped for one since it was found lists
    nothing), and listed through that descriptor."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    found: list[tuple[str, int]] = []
    try:
        top = os.open(run.run_dir, flags)
    except OSError:
        return found
    try:
        for below in ("", "archive"):
            try:
                fd = os.open(below, flags, dir_fd=top) if below else os.dup(top)
            except OSError:
                continue
            try:
                with os.scandir(fd) as entries:
                    listed = sorted(entries, key=lambda e: e.name)
                for entry in listed:
                    info = entry.stat(follow_symlinks=False)
                    if stat.S_ISREG(info.st_mode):
                        found.append((f"{below}/{entry.name}" if below else entry.name, info.st_size))
            finally:
                os.close(fd)
    finally:
        os.close(top)
    return found


# The check a script runner's log is of, from its first line ({"check": "build", ...}).
_CHECK = re.compile(r'^\{.*?"check":\s*"([a-z_]+)"')


def check_logs(run: StoredRun, files: list[tuple[str, int]]) -> list[dict[str, str]]:
    """Each check the evaluator ran, with its log (the script runners' logs, in the order they ran)."""
    found = []
    for name, _ in files:
        if not (name.startswith("scriptrunner-") and name.endswith(".log")):
            continue
        head = read_safely(run.run_dir, name, limit=4096, tail=False) or ""  # its first line names the check
        text = read_safely(run.run_dir, name, limit=256 * 1024) or ""
        match = _CHECK.match(head)
        found.append({"check": match.group(1) if match else "?", "file": name, "text": text})
    return found


def timeline(run: StoredRun, records: list[Any]) -> list[tuple[str, str]]:
    """What happened when, in seconds from the container's start (or the first event): the host's timeline and
    the dialog's records."""
    events: list[tuple[float, str]] = [(t, name.replace("_", " ")) for name, t in run.timeline.items()]
    for record in records:
        if isinstance(record, dict) and isinstance(record.get("ts"), int | float) and record.get("type"):
            name = record.get("name") if record.get("type") == "tool_call" else None
            events.append(
                (float(record["ts"]), f"dialog: {record['type']}" + (f" {name}" if isinstance(name, str) else ""))
            )
    if not events:
        return []
    start = run.timeline.get("container_started", min(t for t, _ in events))
    return [(f"{t - start:+.1f} s", what) for t, what in sorted(events, key=lambda e: e[0])]


def turns(records: list[Any]) -> list[dict[str, Any]]:
    """Tokens of each model turn, from the dialog's messages."""
    out: list[dict[str, Any]] = []
    for record in records:
        tokens = record.get("tokens") if isinstance(record, dict) and record.get("type") == "message" else None
        if isinstance(tokens, dict) and isinstance(tokens.get("input"), int) and isinstance(tokens.get("output"), int):
            out.append({"turn": len(out) + 1, "input": tokens["input"], "output": tokens["output"]})
    return out


def comparison(runs: list[StoredRun], a: str, b: str, by: str) -> dict[str, Any]:
    """Two agents (`by` = agent) or two models (`by` = model) task by task: each task's grades on either side,
    and the tasks only one of them solved. A task is its id, difficulty and mode."""
    sides: dict[str, dict[tuple[str, int, str], list[StoredRun]]] = {a: defaultdict(list), b: defaultdict(list)}
    for run in runs:
        side = getattr(run, by)
        if side in sides:
            sides[side][(run.task, run.difficulty, run.mode)].append(run)
    rows = []
    solved = {a: 0, b: 0}
    only = {a: 0, b: 0}
    for key in sorted(set(sides[a]) | set(sides[b])):
        cells = {name: sorted(sides[name].get(key, []), key=lambda r: r.started_at) for name in (a, b)}
        passed = {name: any(r.grade == "passed" for r in cells[name]) for name in (a, b)}
        for name in (a, b):
            solved[name] += passed[name]
        verdict = ""
        if passed[a] != passed[b]:
            winner = a if passed[a] else b
            only[winner] += 1
            verdict = f"only {winner}"
        elif passed[a]:
            verdict = "both"
        elif cells[a] and cells[b]:
            verdict = "neither"
        rows.append(
            {"task": key[0], "difficulty": key[1], "mode": key[2], "a": cells[a], "b": cells[b], "verdict": verdict}
        )
    return {"rows": rows, "solved": solved, "only": only}


# -- the app -----------------------------------------------------------------------------------------------


# A page, drawn in a worker thread (`guarded`): reading and drawing a run can take a while, and the event loop
# must stay free for every other request.
Endpoint = Callable[[Request], Response]


def create_app(
    results: Path,
    *,
    allowed_hosts: Sequence[str] = (),
    loopback_only: bool = True,
    sessions: Sequence[str] = (),
    live: LiveSource | None = None,
) -> Starlette:
    """The viewer of `results`; answers Host headers of loopback and `allowed_hosts`, and with `loopback_only`
    only peers on loopback."""
    viewer = Viewer(results, sessions=sessions, live=live)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined
    )
    env.filters["query"] = lambda params: urlencode(params, doseq=True)
    # A run's folder names are escaped already (`openai%2Fgpt-4o`): its URL escapes them again, so that the
    # path the app is asked for is the folder's name, never its decoding.
    env.filters["urlpath"] = lambda path: quote(path, safe="/")
    hosts = {name.lower() for name in (*LOOPBACK_NAMES, *allowed_hosts)}

    def page(request: Request, template: str, **values: Any) -> HTMLResponse:
        nonce = request.state.nonce
        text = env.get_template(template).render(nonce=nonce, results=str(results), poll=POLL_SECONDS, **values)
        return HTMLResponse(text)

    def guarded(endpoint: Endpoint) -> Callable[[Request], Awaitable[Response]]:
        async def answer(request: Request) -> Response:
            if host_name(request.headers.get("host", "")) not in hosts:
                return PlainTextResponse(
                    "refused: this viewer answers only requests addressed to this machine's loopback "
                    "(start it with --allow-host NAME to answer NAME)",
                    status_code=421,
                )
            peer = request.client.host if request.client else ""
            if loopback_only and not is_loopback_bind(peer):
                return PlainTextResponse("refused: this viewer answers only this machine", status_code=403)
            request.state.nonce = secrets.token_urlsafe(16)
            response = await run_in_threadpool(endpoint, request)
            response.headers["Content-Security-Policy"] = (
                f"default-src 'none'; script-src 'nonce-{request.state.nonce}'; style-src 'unsafe-inline'; "
                "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; "
                "frame-ancestors 'none'"
            )
            response.headers["X-Content-Type-Options"] = "nosniff"
            response.headers["Referrer-Policy"] = "no-referrer"
            response.headers["Cache-Control"] = "no-store"
            return response

        return answer

    def scores(request: Request) -> Response:
        selected = _selected(request)
        runs = viewer.runs()
        chosen = matching(runs, selected)
        table = score_table(chosen)
        header, *rows = table.cells()
        records = table.records()
        return page(
            request,
            "scores.html",
            title="Scores",
            header=header,
            rows=[
                (row, {k: rec[k] for k in ("agent", "model", "difficulty", "mode")})
                for row, rec in zip(rows, records, strict=True)
            ],
            plot=plot(records),
            choices=_choices(runs),
            selected=selected,
            count=len(chosen),
            total=len(runs),
            left_out=table.left_out_line(),
        )

    columns = ("started_at", "task", "language", "agent", "model", "difficulty", "mode", "grade", "session")

    def runs_page(request: Request) -> Response:
        selected = _selected(request)
        runs = viewer.runs()
        chosen = matching(runs, selected)
        sort = request.query_params.get("sort", "started_at")
        sort = sort if sort in (*columns, "cost", "tokens", "agent_time") else "started_at"
        descending = request.query_params.get("order", "desc" if sort == "started_at" else "asc") == "desc"

        def key(run: StoredRun) -> tuple[int, Any]:
            if sort == "cost":
                value: Any = run.cost
            elif sort == "tokens":
                value = run.total_tokens
            elif sort == "agent_time":
                value = run.runtime.agent_duration
            else:
                value = getattr(run, sort)
            return (0, value) if value is not None else (1, 0)

        known = sorted((r for r in chosen if key(r)[0] == 0), key=key, reverse=descending)
        unknown = [r for r in chosen if key(r)[0] == 1]
        return page(
            request,
            "runs.html",
            title="Runs",
            runs=(known + unknown)[:RUNS_SHOWN],
            matched=len(chosen),
            choices=_choices(runs),
            selected=selected,
            sort=sort,
            descending=descending,
            headers=[*columns, "agent_time", "tokens", "cost"],
            total=len(runs),
        )

    def run_page(request: Request) -> Response:
        run, rest = viewer.run_of_url(request)
        if rest:
            run = None
        if run is None:
            return PlainTextResponse("no such run in this results directory", status_code=404)
        files = run_files(run)
        names = {name for name, _ in files}
        dialog = read_safely(run.run_dir, "archive/dialog.jsonl", limit=FILE_BYTES, tail=False) or ""
        records = parse(dialog) if dialog else []
        patch = read_safely(run.run_dir, "final.patch", limit=FILE_BYTES) if "final.patch" in names else None
        reference = (
            read_safely(run.run_dir, "reference.patch", limit=FILE_BYTES) if "reference.patch" in names else None
        )
        return page(
            request,
            "run.html",
            title=f"{run.task} · {run.agent} · {run.model}",
            run=run,
            files=files,
            checks=check_logs(run, files),
            patch=None if patch is None else diff_lines(patch),
            reference=None if reference is None else diff_lines(reference),
            transcript=Markup(render_transcript(records)) if records else None,
            turns=turns(records),
            timeline=timeline(run, records),
            logs={
                name: read_safely(run.run_dir, name) or ""
                for name in ("evaluator.log", "agent.log", "container.log")
                if name in names
            },
        )

    def run_file(request: Request) -> Response:
        run, rest = viewer.run_of_url(request)
        name = rest.removeprefix("file/")
        if run is None or not rest.startswith("file/") or name not in {n for n, _ in run_files(run)}:
            return PlainTextResponse("no such file of a run in this results directory", status_code=404)
        text = read_safely(run.run_dir, name, limit=FILE_BYTES)
        if text is None:  # replaced by a link, or gone, since it was listed
            return PlainTextResponse("no such file of a run in this results directory", status_code=404)
        return PlainTextResponse(text, headers={"Content-Disposition": "inline"})

    def run_or_file(request: Request) -> Response:
        # One route: which run a URL names is the results directory's to say (`run_of_url`), so a run whose
        # folders are named `file` is a run, and what follows its four parts is a file of it.
        _, rest = viewer.run_of_url(request)
        return run_file(request) if rest else run_page(request)

    def compare(request: Request) -> Response:
        # The other filters narrow both sides alike (two agents on one model, say).
        selected = _selected(request)
        runs = matching(viewer.runs(), selected)
        by = request.query_params.get("by", "agent")
        by = by if by in ("agent", "model") else "agent"
        names = sorted({getattr(r, by) for r in runs})
        a = request.query_params.get("a") or (names[0] if names else "")
        b = request.query_params.get("b") or (names[1] if len(names) > 1 else a)
        return page(
            request,
            "compare.html",
            title=f"{a} vs {b}",
            by=by,
            names=names,
            a=a,
            b=b,
            result=comparison(runs, a, b, by) if a and b and a != b else None,
            selected=selected,
        )

    def live_runs() -> list[InFlight]:
        return viewer.live.runs() if viewer.live is not None else []

    def live_page(request: Request) -> Response:
        return page(request, "live.html", title="Runs in flight", runs=live_runs(), enabled=viewer.live is not None)

    def live_json(request: Request) -> Response:
        return JSONResponse([_live_summary(viewer, r) for r in live_runs()])

    def find_live(run_id: str) -> InFlight | None:
        return next((r for r in live_runs() if r.run == run_id), None)

    def live_run_page(request: Request) -> Response:
        run_id = request.path_params["run"]
        found = find_live(run_id)
        return page(
            request, "live_run.html", title=f"live: {run_id}", run_id=run_id, state=_live_state(viewer, run_id, found)
        )

    def live_run_json(request: Request) -> Response:
        run_id = request.path_params["run"]
        state = _live_state(viewer, run_id, find_live(run_id))
        state["transcript"] = str(state["transcript"])
        return JSONResponse(state)

    routes = [
        Route("/", guarded(scores)),
        Route("/runs", guarded(runs_page)),
        Route("/run/{path:path}", guarded(run_or_file)),
        Route("/compare", guarded(compare)),
        Route("/live", guarded(live_page)),
        Route("/live/{run}", guarded(live_run_page)),
        Route("/api/live", guarded(live_json)),
        Route("/api/live/{run}", guarded(live_run_json)),
    ]
    return Starlette(routes=routes)


def _live_summary(viewer: Viewer, run: InFlight) -> dict[str, Any]:
    usage = live_usage(viewer.results, run.session, run.run)
    return {
        "run": run.run,
        "task": run.task,
        "agent": run.agent,
        "model": run.model,
        "mode": run.mode,
        "phase": run.phase,
        "state": run.state,
        "elapsed": round(run.elapsed, 1),
        # A run without a model has no use to show (null), rather than a count of zero.
        "tokens": usage["tokens"] if usage["calls"] or run.model != "none" else None,
        "cost": usage["cost"] if usage["calls"] or run.model != "none" else None,
    }


def _live_state(viewer: Viewer, run_id: str, run: InFlight | None) -> dict[str, Any]:
    """What a live run's page shows: its phase, time, usage so far and transcript; or where its results are
    once it is over."""
    if run is None:
        done = next((r.path for r in viewer.runs() if r.run_id == run_id), None)
        return {"running": False, "finished": done, "phase": "over", "transcript": Markup(""), "records": 0}
    text = viewer.live.dialog(run) if viewer.live is not None else None
    records = parse(text) if text else []
    return {
        "running": True,
        "finished": None,
        **_live_summary(viewer, run),
        "elapsed_text": _clock(run.elapsed),
        "records": len(records),
        "turns": len(turns(records)),
        "transcript": Markup(render_transcript(records)) if records else Markup("<p>(no transcript yet)</p>"),
    }


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"


def live_usage(results: Path, session: str, run_id: str) -> dict[str, Any]:
    """A run's model use so far, from the gateway's log of its calls (`<results>/.gateway/<session>/usage/
    <run>.jsonl`, the host's own file, read without following links); zeros when there is none."""
    from ssebench.gateway._usage import UsageRecord

    tokens, cost, calls = 0, 0.0, 0
    parts = (session, run_id)
    if all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", p) for p in parts):
        text = read_safely(results, f".gateway/{session}/usage/{run_id}.jsonl", limit=FILE_BYTES, tail=False) or ""
        for line in text.splitlines():
            try:
                record = UsageRecord.model_validate_json(line)
            except ValueError:
                continue
            calls += 1
            tokens += record.prompt_tokens + record.completion_tokens
            cost += record.cost
    return {"calls": calls, "tokens": tokens, "cost": round(cost, 6)}


class EngineLive:
    """Runs in flight on this Docker engine (`ssebench.inflight`), and each one's dialog so far, copied out of
    its container through the engine's archive API: no port of the container, nothing new on the network.

    The dialog is the agent's file, in the agent's container: it is read as one regular file of a capped
    archive (never extracted, never followed), and shown escaped like any transcript.
    """

    def runs(self) -> list[InFlight]:
        from ssebench.inflight import runs_in_flight

        return [r for r in runs_in_flight() if r.state in ("running", "kept")]

    def dialog(self, run: InFlight) -> str | None:
        from ssebench.archive import one_file
        from ssebench.engine import EngineError, containers
        from ssebench.runtime.contract import ARCHIVE

        if not run.containers:
            return None
        # Sidecar mode: the agent's container (listed second) writes the dialog; sandbox mode has one.
        try:
            archive = containers().archive_of_file(run.containers[-1], f"{ARCHIVE}/dialog.jsonl", FILE_BYTES + 4096)
        except EngineError:
            return None
        if archive is None:
            return None
        text = one_file(archive, FILE_BYTES)
        return None if text is None else text.decode("utf-8", errors="replace")


def serve(
    results: Path, *, host: str, port: int, allowed_hosts: Sequence[str] = (), sessions: Sequence[str] | None = None
) -> None:
    """Serve the viewer until interrupted; answers only loopback's Host names and `allowed_hosts`."""
    import uvicorn

    loopback = is_loopback_bind(host)
    if not loopback and not allowed_hosts:
        raise SSEBenchError(
            f"--host {host}: answering other machines needs the names they will use: give --allow-host NAME "
            "(each Host header to answer), or keep the default 127.0.0.1"
        )
    app = create_app(
        results, allowed_hosts=allowed_hosts, loopback_only=loopback, sessions=sessions or (), live=EngineLive()
    )
    print(f"ssebench view: {results} on http://{'localhost' if loopback else host}:{port}/ (Ctrl-C stops it)")
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", server_header=False, proxy_headers=False)
    uvicorn.Server(config).run()
