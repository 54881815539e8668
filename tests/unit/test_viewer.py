"""`ssebench view` in-process (Starlette's TestClient): its pages, and what it refuses.

A run's transcript, patch, logs and names are an agent's or a model's: the
hostile run (tests/helpers.hostile_results) puts a script, an `onerror`
attribute and links to /etc/passwd in each, and plants links to host files
where the viewer looks. Each check below has its positive control: the same
checker finds the markup when it is not escaped, the same file is served
when it is a regular file, the same request is answered from loopback.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

import ssebench.transcript
import ssebench.viewer
from ssebench.archive import one_file
from ssebench.errors import SSEBenchError
from ssebench.inflight import InFlight
from ssebench.viewer import EngineLive, create_app, host_name, is_loopback_bind, live_usage, serve
from tests.helpers import HOSTILE, HOSTILE_RUN, RESULTS_FIXTURE, hostile_results

LOOPBACK = "http://127.0.0.1:8765"
# The hostile run's URL: its folder names, escaped on disk, escaped again.
HOSTILE_URL = "/run/" + quote(HOSTILE_RUN)


def client(results: Path, **options: Any) -> TestClient:
    return TestClient(create_app(results, **options), base_url=LOOPBACK, client=("127.0.0.1", 50000))


@pytest.fixture
def results(tmp_path: Path) -> Path:
    return hostile_results(tmp_path)


class Markup(HTMLParser):
    """What a page would make a browser do: its elements with event attributes, its scripts, its links."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, str]] = []
        self.scripts: list[dict[str, str | None]] = []
        self.links: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.events += [(tag, name) for name, _ in attrs if name.startswith("on")]
        if tag == "script":
            self.scripts.append(dict(attrs))
        for name, value in attrs:
            if name in ("href", "src", "action") and value is not None:
                (self.images if tag == "img" else self.links).append(value)


def markup(page: str) -> Markup:
    found = Markup()
    found.feed(page)
    return found


def assert_inert(page: str, nonce_of: str) -> None:
    """No event attribute, no script but the page's own (its nonce), no link or image out of the app, no link
    to a host file."""
    found = markup(page)
    assert found.events == []
    assert all(script.get("nonce") == nonce_of for script in found.scripts), found.scripts
    assert found.images == []
    assert [link for link in found.links if not link.startswith(("/", "?"))] == []
    assert [link for link in found.links if "etc/passwd" in link or link.startswith("file:")] == []


def _nonce(response: Any) -> str:
    policy = str(response.headers["content-security-policy"])
    return policy.split("'nonce-", 1)[1].split("'", 1)[0]


def test_the_checker_finds_a_hostile_run_s_markup_when_it_is_not_escaped() -> None:
    # The positive control of every escaping check below.
    with pytest.raises(AssertionError):
        assert_inert(f"<p>{HOSTILE}</p>", "n")
    found = markup(HOSTILE)
    assert found.events == [("img", "onerror")] and found.scripts == [{}] and "/etc/passwd" in found.links


@pytest.mark.parametrize("url", ["/", "/runs", f"{HOSTILE_URL}", "/compare?by=model&a=evil<script>&b=none", "/live"])
def test_every_page_shows_what_a_run_wrote_as_text(results: Path, url: str) -> None:
    response = client(results).get(url)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    assert_inert(response.text, _nonce(response))
    # The hostile names are on the page, as text.
    assert "evil&lt;script&gt;" in response.text or url == "/live"


def test_a_hostile_run_s_page_holds_its_transcript_patch_logs_and_limits_as_text(results: Path) -> None:
    response = client(results).get(f"{HOSTILE_URL}")
    page = response.text
    escaped = "&lt;script&gt;document.title=&#34;pwned&#34;&lt;/script&gt;"
    assert page.count("&lt;img src=x onerror=") >= 5  # transcript (prompt, message, tool, result), patch, limits
    for section in ('id="transcript"', 'id="patch"', 'id="limits"', 'id="checks"'):
        part = page.split(section, 1)[1][:20000]
        assert "&lt;script&gt;" in part and "<script>document" not in part, section
    assert escaped in page or "&lt;script&gt;document.title=&quot;pwned&quot;" in page
    assert "document.title" not in "".join(str(s) for s in markup(page).scripts)
    assert_inert(page, _nonce(response))
    # The links planted in the run's folder are neither listed nor followed: the log linked to /etc/passwd
    # shows nothing of it.
    assert "root:x:0:0" not in page and "evaluator.log" not in page and "passwd.txt" not in page
    assert "agent.log" in page  # the control: a regular file of the same folder is listed


def test_only_regular_files_of_known_runs_are_served_and_as_text(
    results: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    viewer = client(results)
    served = viewer.get(f"{HOSTILE_URL}/file/agent.log")
    assert served.status_code == 200 and served.text == HOSTILE + "\n"  # the control
    assert served.headers["content-type"].startswith("text/plain")
    assert served.headers["x-content-type-options"] == "nosniff"
    for path in (
        f"{HOSTILE_URL}/file/evaluator.log",  # a link to /etc/passwd
        f"{HOSTILE_URL}/file/archive/passwd.txt",  # a link in the archive
        f"{HOSTILE_URL}/file/../../../../../../etc/passwd",
        f"{HOSTILE_URL}/file/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        f"{HOSTILE_URL}/file//etc/passwd",
        "/run/c-demo/evil%253Cscript%253E/chat-agent/linked-run",  # a run folder that is a link
        "/run/c-demo/evil%253Cscript%253E/chat-agent/linked-run/file/summary.json",
        "/run/linked-task/x/y/z/file/summary.json",  # a task folder that is a link
        "/run/../../etc/file/passwd",
    ):
        response = viewer.get(path)
        assert response.status_code == 404, path
        assert "root:" not in response.text
    # A run folder swapped for a link to another after it was found lists nothing and serves nothing.
    elsewhere = results.parent / "elsewhere"
    (elsewhere / "archive").mkdir(parents=True)
    (elsewhere / "agent.log").write_text("not this run's")
    swapped = results / "c-demo/none/reference/20261205T040112-d2-sandbox-736d12"
    (swapped / "agent.log").write_text("this run's")
    url = "/run/" + quote(swapped.relative_to(results).as_posix()) + "/file/agent.log"
    monkeypatch.setattr("ssebench.viewer.RESCAN_SECONDS", 3600.0)  # the run stays found after the swap
    assert viewer.get(url).text == "this run's"  # the control, found while it is a folder
    shutil.move(swapped, results.parent / "moved")
    swapped.symlink_to(elsewhere)
    assert viewer.get(url).status_code == 404
    (results / HOSTILE_RUN / "agent.log").unlink()
    (results / HOSTILE_RUN / "agent.log").symlink_to("/etc/passwd")  # swapped for a link after listing
    assert viewer.get(f"{HOSTILE_URL}/file/agent.log").status_code == 404


def test_requests_for_other_hosts_are_refused_against_dns_rebinding(results: Path) -> None:
    viewer = client(results)
    assert viewer.get("/", headers={"host": "127.0.0.1:8765"}).status_code == 200  # the control
    assert viewer.get("/", headers={"host": "localhost:8765"}).status_code == 200
    assert viewer.get("/", headers={"host": "[::1]:8765"}).status_code == 200
    for host in ("attacker.example", "attacker.example:8765", "127.0.0.1.attacker.example", "localhost.evil", ""):
        response = viewer.get("/", headers={"host": host})
        assert response.status_code == 421 and "--allow-host" in response.text, host
    named = client(results, allowed_hosts=["bench.lan"])
    assert named.get("/", headers={"host": "bench.lan:8765"}).status_code == 200


def test_a_peer_off_loopback_is_refused_unless_asked_to_answer_others(results: Path) -> None:
    remote = TestClient(create_app(results), base_url=LOOPBACK, client=("192.0.2.7", 50000))
    assert remote.get("/").status_code == 403
    opened = TestClient(
        create_app(results, allowed_hosts=["bench.lan"], loopback_only=False),
        base_url="http://bench.lan:8765",
        client=("192.0.2.7", 50000),
    )
    assert opened.get("/").status_code == 200
    assert opened.get("/", headers={"host": "attacker.example"}).status_code == 421


def test_serving_other_machines_needs_the_names_they_use() -> None:
    with pytest.raises(SSEBenchError, match="--allow-host"):
        serve(RESULTS_FIXTURE, host="0.0.0.0", port=0)
    assert is_loopback_bind("127.0.0.1") and is_loopback_bind("::1") and is_loopback_bind("localhost")
    assert not is_loopback_bind("0.0.0.0") and not is_loopback_bind("192.0.2.1")
    assert [host_name(h) for h in ("LocalHost:80", "[::1]:8765", "127.0.0.1", "a:b:c")] == [
        "localhost",
        "[::1]",
        "127.0.0.1",
        "a:b:c",
    ]


def test_every_answer_carries_a_policy_that_allows_no_other_origin(results: Path) -> None:
    response = client(results).get("/live")
    policy = str(response.headers["content-security-policy"])
    assert "default-src 'none'" in policy and "script-src 'nonce-" in policy and "connect-src 'self'" in policy
    assert response.headers["referrer-policy"] == "no-referrer"
    assert all(s.get("nonce") == _nonce(response) for s in markup(response.text).scripts)
    assert len(markup(response.text).scripts) == 1
    assert client(results).post("/").status_code == 405


def test_the_score_table_has_its_rows_and_plot(results: Path) -> None:
    page = client(results).get("/").text
    assert "100% [21-100]" in page and "pass rate [95% CI]" in page
    assert page.count('class="ci"') == 3  # one interval a row: dummy, reference, and the hostile run's
    assert "reference · none · d2 · sandbox" in page
    filtered = client(results).get("/?agent=reference").text
    assert filtered.count('class="ci"') == 1


def test_the_score_table_leaves_quarantined_tasks_out_and_says_how_many(results: Path) -> None:
    assert "quarantined" not in client(results).get("/").text
    for path in results.glob("*/*/dummy/*/summary.json"):  # runs of a task quarantined when they ran
        summary = json.loads(path.read_text())
        summary["task"]["quarantined"] = "flaky poc (1 of 3)"
        path.write_text(json.dumps(summary))
    page = client(results).get("/").text
    assert "2 run(s) of quarantined tasks left out (dataset.yaml: quarantine)" in page
    assert page.count('class="ci"') == 2  # reference and the hostile run's; the dummy's row is gone


def test_runs_filter_and_sort(results: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    viewer = client(results)
    assert viewer.get("/runs").text.count('<tr class="run">') == 4
    assert viewer.get("/runs?agent=dummy").text.count('<tr class="run">') == 2
    assert viewer.get("/runs?agent=dummy&agent=reference&grade=passed").text.count('<tr class="run">') == 1
    by_cost = viewer.get("/runs?sort=cost&order=desc").text
    rows = by_cost.split('<tr class="run">')[1:]
    assert "dummy" in rows[0] and "evil" in rows[2] and "reference" in rows[3]  # unknown cost last
    assert viewer.get("/runs?sort=__class__").status_code == 200  # an unknown column sorts by time
    monkeypatch.setattr("ssebench.viewer.RUNS_SHOWN", 3)
    capped = viewer.get("/runs").text
    assert capped.count('<tr class="run">') == 3 and "4 of 4 run(s); the first 3 are shown" in capped


def test_two_agents_side_by_side_task_by_task(results: Path) -> None:
    page = client(results).get("/compare?a=dummy&b=reference").text
    assert "dummy solved 0 task(s), reference 1; only dummy: 0, only reference: 1." in page
    assert page.count('class="verdict">only reference<') == 1
    models = client(results).get("/compare?by=model&a=none&b=openai/gpt-4o").text
    assert "only none" in models
    narrowed = client(results).get("/compare?a=dummy&b=reference&model=openai/gpt-4o").text
    assert "dummy solved 0 task(s), reference 0; only dummy: 0, only reference: 0." in narrowed


class FakeLive:
    """A run in flight whose dialog grows a record each time it is read."""

    def __init__(self, run: InFlight) -> None:
        self.run = run
        self.reads = 0
        self.over = False

    def runs(self) -> list[InFlight]:
        return [] if self.over else [self.run]

    def dialog(self, run: InFlight) -> str | None:
        self.reads += 1
        records = [{"seq": 0, "ts": 1.0, "type": "init", "agent": "chat-agent", "model": HOSTILE}]
        records += [
            {
                "seq": n,
                "ts": 1.0 + n,
                "type": "message",
                "text": f"turn {n} {HOSTILE}",
                "tokens": {"input": 10, "output": 2},
            }
            for n in range(1, self.reads + 1)
        ]
        return "".join(json.dumps(r) + "\n" for r in records)


def _in_flight(run: str = "20261205T130000-d2-sandbox-abcdef", session: str = "s1") -> InFlight:
    return InFlight(
        run=run,
        task="c-demo",
        agent="chat-agent",
        model="scripted-fix",
        difficulty="2",
        mode="sandbox",
        trial="1",
        phase="agent",
        elapsed=75.0,
        session=session,
        state="running",
        containers=("sbviewer-run",),
    )


def test_a_live_run_s_transcript_and_usage_grow_between_polls(results: Path) -> None:
    live = FakeLive(_in_flight())
    usage = results / ".gateway" / "s1" / "usage"
    usage.mkdir(parents=True)
    call = {"ts": 1.0, "run": live.run.run, "model": "scripted-fix", "status": 200, "prompt_tokens": 100}
    (usage / f"{live.run.run}.jsonl").write_text(json.dumps(call | {"completion_tokens": 5, "cost": 0.001}) + "\n")
    viewer = client(results, live=live)
    listing = viewer.get("/api/live").json()
    assert [(r["run"], r["phase"], r["tokens"], r["cost"]) for r in listing] == [(live.run.run, "agent", 105, 0.001)]
    page = viewer.get(f"/live/{live.run.run}")
    assert "0:01:15" in page.text and "105 · $0.0010" in page.text
    assert_inert(page.text, _nonce(page))
    first = viewer.get(f"/api/live/{live.run.run}").json()
    second = viewer.get(f"/api/live/{live.run.run}").json()
    assert (first["records"], second["records"]) == (3, 4) and first["running"] is True
    assert "turn 3" in second["transcript"] and "turn 3" not in first["transcript"]
    assert_inert(second["transcript"], "none")  # HTML the page puts in as is: escaped like any transcript
    without_model = FakeLive(replace(_in_flight(), model="none", run="r-none"))
    assert [(r["tokens"], r["cost"]) for r in client(results, live=without_model).get("/api/live").json()] == [
        (None, None)
    ]
    live.over = True
    assert viewer.get(f"/api/live/{live.run.run}").json() == {
        "running": False,
        "finished": None,
        "phase": "over",
        "transcript": "",
        "records": 0,
    }


def test_live_usage_reads_only_the_gateway_s_own_file_of_that_run(results: Path) -> None:
    usage = results / ".gateway" / "s1" / "usage"
    usage.mkdir(parents=True)
    (usage / "r1.jsonl").symlink_to("/etc/passwd")
    assert live_usage(results, "s1", "r1") == {"calls": 0, "tokens": 0, "cost": 0.0}
    (usage / "r2.jsonl").write_text(
        '{"ts": 1, "run": "r2", "model": "m", "status": 200, "prompt_tokens": 7}\nnot json\n'
    )
    assert live_usage(results, "s1", "r2") == {"calls": 1, "tokens": 7, "cost": 0.0}  # the control
    assert live_usage(results, "..", "r2")["calls"] == 0 and live_usage(results, "s1", "../s1/usage/r2")["calls"] == 0


def _tar(name: str, data: bytes | None = None, link: str | None = None) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo(name)
        if link is not None:
            info.type, info.linkname = tarfile.SYMTYPE, link
            tar.addfile(info)
        else:
            info.size = len(data or b"")
            tar.addfile(info, io.BytesIO(data or b""))
    return out.getvalue()


def test_a_live_dialog_is_one_regular_file_of_its_archive_never_a_link() -> None:
    assert one_file(_tar("dialog.jsonl", b'{"seq": 0}\n'), 1024) == b'{"seq": 0}\n'  # the control
    assert one_file(_tar("dialog.jsonl", link="/etc/shadow"), 1024) is None
    assert one_file(_tar("dialog.jsonl", b"x" * 2048), 1024) is None
    assert one_file(b"not a tar", 1024) is None


def test_the_engine_s_live_dialog_comes_from_the_run_s_last_container(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, str]] = []

    class Containers:
        def archive_of_file(self, container: str, path: str, cap: int) -> bytes:
            asked.append((container, path))
            return _tar("dialog.jsonl", b'{"seq": 0, "type": "init"}\n')

    monkeypatch.setattr("ssebench.engine.containers", lambda: Containers())
    run = _in_flight()
    sidecar = InFlight(**{**run.__dict__, "containers": ("task-c", "agent-c")})
    assert EngineLive().dialog(sidecar) == '{"seq": 0, "type": "init"}\n'
    assert asked == [("agent-c", "/tmp/sse-archive/dialog.jsonl")]


def test_a_run_whose_folders_are_named_file_opens_and_odd_file_names_link_to_themselves(results: Path) -> None:
    """A predictions file names the model: `file` once sent its runs to the file route (404); and a file the
    agent named `a?b#c` in its archive once made a link that asked for another name."""
    run = results / "c-demo/file/chat-agent/20261205T140000-d2-sandbox-f11e00"
    shutil.copytree(results / HOSTILE_RUN, run, symlinks=True)
    (run / "archive" / "a?b#c").write_text("odd but the agent's own")
    viewer = client(results)
    page = viewer.get("/run/" + quote(run.relative_to(results).as_posix()))
    assert page.status_code == 200, page.text[:300]
    links = [link for link in markup(page.text).links if "a%3Fb%23c" in link or "a?b" in link]
    assert links and all("a%3Fb%23c" in link for link in links), links
    served = viewer.get(links[0])
    assert served.status_code == 200 and served.text == "odd but the agent's own"


def test_pages_are_drawn_off_the_event_loop(results: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's page can take seconds (a long dialog): drawn on the event loop it would hold every other
    request; each page is drawn in a worker thread, where no event loop runs."""
    import asyncio

    on_loop: list[bool] = []
    real = ssebench.transcript.render_transcript

    def spy(records: Any) -> str:
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return real(records)

    monkeypatch.setattr(ssebench.viewer, "render_transcript", spy)
    assert client(results).get(HOSTILE_URL).status_code == 200
    assert on_loop == [False]
