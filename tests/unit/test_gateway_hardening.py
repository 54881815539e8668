"""One hostile run against the gateway process that serves every run: the attacks, and what the others still get.

The gateway is one host process per session; a run's agent (hostile) reaches
its own model listener only. These tests start the real process, give each
run a listener of its own on a loopback address, run the attack program
(`ATTACKER`, the same one the docker test runs inside a container) against
the hostile run's listener, and check that the other runs keep their model,
that the control API keeps answering, and what the gateway spent on it.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from ssebench.gateway import GatewayClient, GatewayError, GatewayProcess, RunKey

HOSTILE, VICTIM, OTHER = "127.0.0.2", "127.0.0.3", "127.0.0.4"
CAP = 512  # the test model's max_output_tokens
MIB = 1 << 20
TIMEOUT = "HTTP/1.1 408 Request Timeout"

# The attacks, as one stdlib-only program: the unit tests run it on the host, the docker test inside a run's
# container. `python -c ATTACKER BASE_URL KEY MODEL ATTACK [ARGS...]`; each line it prints is a JSON report.
ATTACKER = r'''
import json, selectors, socket, sys, threading, time
from urllib.parse import urlsplit

BASE_URL, KEY, MODEL, ATTACK, *ARGS = sys.argv[1:]
URL = urlsplit(BASE_URL)
PATH = URL.path + "/chat/completions"


def report(**data):
    print(json.dumps(data), flush=True)


def connect():
    return socket.create_connection((URL.hostname, URL.port), timeout=5)


def head(length=None):
    lines = ["POST " + PATH + " HTTP/1.1", "Host: " + URL.netloc, "Authorization: Bearer " + KEY,
             "Content-Type: application/json",
             "Transfer-Encoding: chunked" if length is None else "Content-Length: %d" % length]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def answer(sock):
    """(status, body) of the next response on sock; (None, why) when there is none."""
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            piece = sock.recv(65536)
            if not piece:
                return None, "closed"
            data += piece
        top, _, rest = data.partition(b"\r\n\r\n")
        lines = top.decode("latin-1").split("\r\n")
        length = next((int(l.split(":", 1)[1]) for l in lines[1:] if l.lower().startswith("content-length:")), 0)
        while len(rest) < length:
            piece = sock.recv(65536)
            if not piece:
                break
            rest += piece
        return int(lines[0].split()[1]), rest[:length].decode("utf-8", "replace")
    except OSError as exc:
        return None, type(exc).__name__


def chat(**extra):
    messages = [{"role": "user", "content": "# Task: tlvkit (C)"}]
    return json.dumps({"model": MODEL, "messages": messages, **extra}).encode()


class Caller:
    """Requests on one keep-alive connection, reconnecting when the gateway closes it."""

    def __init__(self):
        self.sock = None

    def __call__(self, body):
        for _ in range(2):
            try:
                if self.sock is None:
                    self.sock = connect()
                self.sock.sendall(head(len(body)) + body)
            except OSError:
                self.sock = None
                continue
            status, text = answer(self.sock)
            if status is None:
                self.sock = None
                continue
            return status, text
        return None, "no answer"


def idle(count, seconds):
    """`count` connections held for `seconds`: 10 trickle a request head, 10 a body, the rest send nothing.

    The tricklers connect first, each from a thread of its own, then eight threads connect the silent ones;
    each trickler sends a byte every 0.1 s from its connect. Reports per kind: how many the gateway closed,
    the longest one lived (from its connect), the bytes each trickled, the longest one had been quiet when
    closed, and what the gateway said.
    """
    started, request, conns = time.monotonic(), head(1000), []

    def add(kind):
        try:
            sock = connect()
            if kind == "body":
                sock.sendall(request)
        except OSError:
            return
        sock.setblocking(False)
        now = time.monotonic()
        conns.append({"sock": sock, "kind": kind, "at": now, "last": now, "sent": 0})

    def together(targets):
        threads = [threading.Thread(target=target) for target in targets]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    silent = iter(range(count - 20))
    flood = threading.Thread(target=lambda: (
        together([lambda kind=kind: add(kind) for kind in ["head"] * 10 + ["body"] * 10]),
        together([lambda: [add("silent") for _ in silent]] * 8)))
    flood.start()
    selector, watched, reported, alive = selectors.DefaultSelector(), 0, False, set()

    def closed(conn, text):
        alive.discard(id(conn))
        selector.unregister(conn["sock"])
        conn["sock"].close()
        conn["closed"] = time.monotonic()
        conn["said"] = text or "(nothing)"

    while time.monotonic() - started < seconds:
        connected = not flood.is_alive()  # before watching the new ones: then none is left out
        for conn in conns[watched:]:
            selector.register(conn["sock"], selectors.EVENT_READ, conn)
            alive.add(id(conn))
        watched = len(conns)
        if connected and not reported:
            report(opened=len(conns))
            reported = True
        if reported and not alive:
            break
        for key, _ in selector.select(0.1):
            try:
                data = key.fileobj.recv(65536)
            except OSError:
                data = b""
            closed(key.data, data.split(b"\r\n")[0].decode("latin-1"))
        now = time.monotonic()
        for conn in conns[:watched]:
            if id(conn) not in alive or conn["kind"] == "silent" or now - conn["last"] < 0.1:
                continue
            piece = request[conn["sent"]:][:1] if conn["kind"] == "head" else b" "
            try:
                conn["sock"].send(piece)
            except OSError as exc:
                closed(conn, type(exc).__name__)
                continue
            conn["sent"] += 1
            conn["last"] = now
    flood.join()
    done = [conn for conn in conns if "closed" in conn]
    kinds = sorted({conn["kind"] for conn in conns})
    of = lambda kind: [conn for conn in done if conn["kind"] == kind]
    report(opened=len(conns), closed={k: len(of(k)) for k in kinds},
           longest={k: max([c["closed"] - c["at"] for c in of(k)], default=None) for k in kinds},
           sent={k: sorted(c["sent"] for c in of(k)) for k in kinds},
           quiet={k: max([c["closed"] - c["last"] for c in of(k)], default=None) for k in kinds},
           said={k: sorted({c["said"] for c in of(k)}) for k in kinds})


def body(size, parallel, mode):
    """`parallel` bodies of `size` bytes at once, declared with Content-Length (mode length) or chunked."""
    results = [None] * parallel

    def one(i):
        sent, sock = 0, connect()
        chunk = b"x" * (1 << 20)
        try:
            sock.sendall(head(size if mode == "length" else None))
            while sent < size:
                sock.sendall(chunk if mode == "length" else b"100000\r\n" + chunk + b"\r\n")
                sent += len(chunk)
            if mode == "chunked":
                sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass
        status, text = answer(sock)
        sock.close()
        results[i] = {"sent": sent, "status": status, "body": text[:300]}

    threads = [threading.Thread(target=one, args=(i,)) for i in range(parallel)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    report(results=results)


def flood(calls, bad, depth):
    """`calls` chat calls and `bad` bodies that are not JSON on one connection, then one body `depth` deep."""
    caller, statuses, refusals = Caller(), {}, {}
    started = time.monotonic()
    for _ in range(calls):
        status, _ = caller(chat())
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    for _ in range(bad):
        status, _ = caller(b"{not json")
        refusals[str(status)] = refusals.get(str(status), 0) + 1
    deep = chat()[:-1] + b', "tools": ' + b"[" * depth + b"]" * depth + b"}"
    status, text = Caller()(deep)
    report(statuses=statuses, bad=refusals, deep={"status": status, "body": text[:300], "bytes": len(deep)},
           took=round(time.monotonic() - started, 2))


def smuggle(extras):
    """One call per set of extra parameters."""
    caller = Caller()
    report(answers=[caller(chat(**extra)) for extra in json.loads(extras)])


{"idle": lambda: idle(int(ARGS[0]), float(ARGS[1])),
 "body": lambda: body(int(ARGS[0]), int(ARGS[1]), ARGS[2]),
 "flood": lambda: flood(int(ARGS[0]), int(ARGS[1]), int(ARGS[2])),
 "smuggle": lambda: smuggle(ARGS[0])}[ATTACK]()
'''

# What the smuggling attack sends on top of a valid call, and what an agent legitimately sends along.
SMUGGLED: list[dict[str, Any]] = [
    {"max_tokens": -1},
    {"max_completion_tokens": True},
    {"max_tokens": 0},
    {"max_tokens": "100"},
    {"max_tokens": 1.5},
    {"n": 64},
    {
        "n_predict": 100000,
        "store": True,
        "service_tier": "priority",
        "max_tokens": 99999,
        "stream_options": {"include_usage": True},
    },
]
SMUGGLED_STATUSES = [400, 400, 400, 400, 400, 400, 200]
LEGIT: dict[str, Any] = {
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "view_file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
            },
        }
    ],
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "temperature": 0.2,
    "top_p": 0.9,
    "stop": ["\n\n"],
    "response_format": {"type": "text"},
    "seed": 7,
    "frequency_penalty": 0.1,
    "presence_penalty": 0.1,
    "max_completion_tokens": 100,
    "n": 1,
}


def attack(key: RunKey, *args: object, timeout: float = 120) -> dict[str, Any]:
    """Run one attack to its end on the host; its last report."""
    done = subprocess.run(
        [sys.executable, "-c", ATTACKER, key.base_url, key.key, key.model, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


class Upstream(ThreadingHTTPServer):
    """An OpenAI-compatible upstream on 127.0.0.1: each call answers 100 + 10 tokens after `delay` s."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Answer)
        self.received: list[dict[str, Any]] = []
        self.delay = 0.0
        self.released = threading.Event()  # set at teardown: calls still waiting answer at once

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Answer(BaseHTTPRequestHandler):
    server: Upstream

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.received.append(body)
        self.server.released.wait(self.server.delay)
        answer = json.dumps(
            {
                "id": "c",
                "object": "chat.completion",
                "model": body.get("model"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
            }
        ).encode()
        with contextlib.suppress(OSError):  # the gateway may have given up on the call
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.released.set()
        server.shutdown()
        server.server_close()


# Short timeouts, so the tests see them act.
TEST_LIMITS = {
    "SSEBENCH_GATEWAY_IDLE_TIMEOUT": "1",
    "SSEBENCH_GATEWAY_BODY_TIMEOUT": "2",
    "SSEBENCH_GATEWAY_FINISH_WAIT": "2",
}


@pytest.fixture
def gateway(tmp_path: Path, upstream: Upstream, monkeypatch: pytest.MonkeyPatch) -> Iterator[GatewayProcess]:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "remote.yaml").write_text(
        f"name: remote\nbase_url: {upstream.url}\nmax_output_tokens: {CAP}\nprice: {{input: 1, output: 2}}\n"
    )
    for name, value in TEST_LIMITS.items():
        monkeypatch.setenv(name, value)
    with GatewayProcess(folder, tmp_path / "state", model_port=0) as process:
        yield process


@pytest.fixture
def client(gateway: GatewayProcess) -> Iterator[GatewayClient]:
    """The control API, with a timeout shorter than the harness's, to see it answer promptly."""
    control = GatewayClient(gateway.control_url or "", gateway.admin_token, timeout=10)
    yield control
    control.close()


def _register(client: GatewayClient, run_id: str, host: str, **extra: Any) -> RunKey:
    return client.register_run(run_id, "remote", bind_host=host, ttl_seconds=600, port=0, **extra)


def _chat(key: RunKey, timeout: float = 10, **extra: Any) -> httpx.Response:
    return httpx.post(
        f"{key.base_url}/chat/completions",
        timeout=timeout,
        json={"model": key.model, "messages": [{"role": "user", "content": "hi"}], **extra},
        headers={"authorization": f"Bearer {key.key}"},
    )


def process_status(pid: int) -> dict[str, int]:
    """The gateway process's memory figures (kB) and open file descriptors."""
    figures = {
        line.split(":")[0]: int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("Vm")
    }
    return {**figures, "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def _pid(gateway: GatewayProcess) -> int:
    assert gateway.process is not None
    return gateway.process.pid


def _others_still_served(client: GatewayClient, victim: RunKey, run_id: str, host: str) -> None:
    """Another run's calls, and a run registered and finished meanwhile: all answered, promptly."""
    started = time.monotonic()
    assert [_chat(victim).status_code for _ in range(3)] == [200, 200, 200]
    client.health()
    late = _register(client, run_id, host)
    assert _chat(late).status_code == 200
    assert client.finish_run(run_id).calls == 1
    assert time.monotonic() - started < 5


# -- 4a: connections ------------------------------------------------------------------------------


def test_idle_connections_of_one_run_leave_the_others_their_model(
    gateway: GatewayProcess, client: GatewayClient
) -> None:
    pid = _pid(gateway)
    # A host whose descriptor limit is 256: more connections than that must not starve the other runs.
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (256, 256))
    hostile, victim = _register(client, "hostile", HOSTILE), _register(client, "victim", VICTIM)
    before = process_status(pid)["fds"]
    peak, sampling = [before], threading.Event()

    def sample() -> None:
        while not sampling.wait(0.01):
            peak.append(process_status(pid)["fds"])

    sampler = threading.Thread(target=sample)
    sampler.start()
    command = [sys.executable, "-c", ATTACKER, hostile.base_url, hostile.key, hostile.model, "idle", "400", "15"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as flood:
        assert flood.stdout is not None and flood.stderr is not None
        try:
            first = flood.stdout.readline()
            assert first, flood.stderr.read()[-3000:]
            assert json.loads(first)["opened"] == 400  # positive control: more than the gateway's descriptors
            _others_still_served(client, victim, "late", OTHER)
            final = flood.stdout.readline()  # not communicate(): readline's buffer may hold this line already
            assert flood.wait(60) == 0 and final, flood.stderr.read()[-3000:]
        finally:
            sampling.set()
            sampler.join()
            if flood.poll() is None:
                flood.kill()
    result = json.loads(final)
    # The gateway held a run's share (32) and, for an instant, what asyncio accepted before the listener's
    # protocol closed it (a few accept queues of 16): a bound whatever the flood, half its descriptors at most.
    held = max(peak) - before
    assert 0 < held <= 128, held
    # It dropped the tricklers within the timeouts (1 s for a head, 2 s for a body), though none had been quiet
    # for a whole timeout (positive control: they did trickle), and closed more silent ones than it has
    # descriptors. (A few may still wait in the kernel, never accepted: a full accept queue drops a
    # handshake's last packet, and the client cannot tell.)
    assert result["closed"]["head"] == result["closed"]["body"] == 10, result
    assert min(result["sent"]["head"]) >= 3 and result["quiet"]["head"] < 1, result
    assert min(result["sent"]["body"][-4:]) >= 3, result  # the run's 4 requests under way (6 were refused)
    assert result["longest"]["head"] < 2 and result["longest"]["body"] < 3.5, result
    # What it said, when its answer beat the client's next byte: the idle timeout, a run's 4 requests at once,
    # a run's 32 connections.
    said = result["said"]
    assert set(said["head"]) <= {TIMEOUT, "(nothing)", "ConnectionResetError"}, result
    assert set(said["body"]) <= {TIMEOUT, "HTTP/1.1 429 Too Many Requests", "(nothing)", "ConnectionResetError"}
    assert set(said["silent"]) <= {"(nothing)", "HTTP/1.1 503 Service Unavailable"}, result
    assert result["closed"]["silent"] > 256, result
    assert process_status(pid)["fds"] <= before + 2
    log = gateway.log_path.read_text()
    assert "Too many open files" not in log and len(log.splitlines()) < 50, log[-3000:]
    assert client.finish_run("victim").calls == 3


# -- 4b: bodies -----------------------------------------------------------------------------------


def test_huge_bodies_are_refused_while_read_and_the_gateway_stays_small(
    gateway: GatewayProcess, client: GatewayClient
) -> None:
    pid = _pid(gateway)
    hostile, victim = _register(client, "hostile", HOSTILE), _register(client, "victim", VICTIM)
    assert _chat(victim).status_code == 200
    before = process_status(pid)["VmHWM"]

    declared = attack(hostile, "body", 512 * MIB, 1, "length")["results"][0]
    chunked = attack(hostile, "body", 256 * MIB, 4, "chunked")["results"]
    grown = (process_status(pid)["VmHWM"] - before) // 1024
    assert grown < 200, f"the gateway grew by {grown} MiB"
    # Positive control: each of the four really sent more than the cap before the gateway stopped reading.
    assert all(r["sent"] >= 32 * MIB for r in chunked), chunked
    # Declared too large: refused on its head, before its body is read (what the client sent sits in buffers).
    assert declared["sent"] < 32 * MIB, declared
    # The answer when it beat the connection's reset: at most 32 MiB.
    for answer in [declared, *chunked]:
        assert answer["status"] in (413, None), answer
        assert answer["status"] is None or "at most 32 MiB" in answer["body"], answer
    _others_still_served(client, victim, "late", OTHER)


# -- 4c: refused calls and nesting ------------------------------------------------------------------


def test_refused_calls_are_counted_not_kept_and_deep_bodies_are_400s(
    gateway: GatewayProcess, upstream: Upstream, client: GatewayClient, tmp_path: Path
) -> None:
    from ssebench.gateway import Budget

    hostile = _register(client, "hostile", HOSTILE, budget=Budget(tokens=1))
    victim = _register(client, "victim", VICTIM)
    result = attack(hostile, "flood", 1500, 300, 1100)
    # Positive control: one call spent the budget, the 1,499 after it were refused; 300 bodies were not JSON.
    assert result["statuses"] == {"200": 1, "429": 1499} and result["bad"] == {"400": 300}, result
    assert result["deep"]["status"] == 400, result
    assert json.loads(result["deep"]["body"]) == {
        "error": {"type": "invalid_request_error", "message": "the body is nested deeper than 64 levels"}
    }
    assert len(upstream.received) == 1
    _others_still_served(client, victim, "late", OTHER)
    started = time.monotonic()
    usage = client.finish_run("hostile")
    assert time.monotonic() - started < 2
    assert usage.calls == 1 and usage.refused == 1499 and usage.rejected == 301
    assert len(usage.records) <= 1 + 20 and usage.unrecorded == 1499 + 301 - (len(usage.records) - 1)
    lines = (tmp_path / "state" / "usage" / "hostile.jsonl").read_text().splitlines()
    assert len(lines) == len(usage.records)
    log = gateway.log_path.read_text()
    assert "Traceback" not in log and "RecursionError" not in log
    assert sum("hostile" in line for line in log.splitlines()) <= 20, log[-3000:]


# -- 4d: parameters ------------------------------------------------------------------------------


def test_only_parameters_the_gateway_understands_go_upstream_within_the_models_caps(
    upstream: Upstream, client: GatewayClient
) -> None:
    hostile = _register(client, "hostile", HOSTILE)
    answers = attack(hostile, "smuggle", json.dumps([{**LEGIT, **extra} for extra in SMUGGLED]))["answers"]
    assert [status for status, _ in answers] == SMUGGLED_STATUSES, answers
    messages = [json.loads(text)["error"]["message"] for status, text in answers if status == 400]
    assert messages[:2] == [
        "max_tokens must be a positive integer, not -1",
        "max_completion_tokens must be a positive integer, not true",
    ]
    assert messages[-1] == "n must be 1: the gateway forwards one completion per call, not 64"
    # One call went upstream: the agent's parameters as they were, the tokens capped, n (1) left to its default,
    # nothing else.
    assert len(upstream.received) == 1
    received = upstream.received[0]
    legit = {name: value for name, value in LEGIT.items() if name != "n"}
    assert received == {**legit, "model": "remote", "messages": received["messages"], "max_tokens": CAP}
    usage = client.finish_run("hostile")
    assert usage.calls == 1 and usage.rejected == 6


# -- 6: calls around a run's finish ------------------------------------------------------------


def test_every_call_forwarded_before_finishing_is_recorded_and_none_after(
    upstream: Upstream, client: GatewayClient
) -> None:
    key = _register(client, "run", HOSTILE)
    upstream.delay = 1.0
    answers: list[int] = []
    calls = [threading.Thread(target=lambda: answers.append(_chat(key).status_code)) for _ in range(3)]
    for call in calls:
        call.start()
        time.sleep(0.1)
    while not upstream.received:
        time.sleep(0.02)
    usage = client.finish_run("run")  # one call upstream, two queued behind it
    for call in calls:
        call.join(10)
    # Finishing waited for the call in flight and recorded it; the queued ones never went upstream.
    assert len(upstream.received) == 1
    assert usage.calls == 1 and [r.status for r in usage.records if r.status == 200] == [200]
    assert sorted(answers) == [200, 401, 401], answers
    assert client.finish_run("run") == usage


def test_finishing_waits_for_a_slow_call_a_bounded_time_and_records_it(
    upstream: Upstream, client: GatewayClient
) -> None:
    key = _register(client, "run", HOSTILE)
    upstream.delay = 60
    answers: list[int] = []
    call = threading.Thread(target=lambda: answers.append(_chat(key, timeout=30).status_code))
    call.start()
    while not upstream.received:
        time.sleep(0.02)
    started = time.monotonic()
    usage = client.finish_run("run")
    assert time.monotonic() - started < 5  # the finish wait is 2 s here
    call.join(10)
    assert usage.calls == 1 and usage.records[0].status == 503, usage.records
    assert "the run finished while the call was upstream" in (usage.records[0].error or "")
    assert answers == [503]


# -- the process ---------------------------------------------------------------------------------


def test_the_gateway_process_has_a_memory_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    models = Path(__file__).resolve().parents[2] / "models"
    for setting, expected in (("", 2 << 30), ("1g", 1 << 30)):
        if setting:
            monkeypatch.setenv("SSEBENCH_GATEWAY_MEMORY", setting)
        with GatewayProcess(models, tmp_path / "state", model_port=0) as process:
            assert resource.prlimit(_pid(process), resource.RLIMIT_AS)[0] == expected


def test_the_gateway_refuses_to_start_with_a_bad_limit_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSEBENCH_GATEWAY_MEMORY", "lots")
    process = GatewayProcess(Path(__file__).resolve().parents[2] / "models", tmp_path / "state", model_port=0)
    try:
        with pytest.raises(GatewayError, match="SSEBENCH_GATEWAY_MEMORY"):
            process.start()
    finally:
        process.stop()
