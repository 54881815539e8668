"""The gateway as the harness runs it: a child process, real listeners on loopback, a real HTTP upstream."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ssebench.gateway import GatewayClient, GatewayError, GatewayProcess, RunKey

MODELS = Path(__file__).resolve().parents[2] / "models"
SECRET = "sk-process-test-secret-91c3"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_port(port: int, process: subprocess.Popen[bytes], log: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[int]:
    """The scripted model as a standalone OpenAI-compatible server, requiring the provider key."""
    port = _free_port()
    log = tmp_path / "upstream.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ssebench.gateway.scripted",
                "--script",
                str(MODELS / "scripted" / "fix.yaml"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--api-key-env",
                "UPSTREAM_KEY",
                "--model",
                "fix-upstream",
            ],
            env={**os.environ, "UPSTREAM_KEY": SECRET},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_port(port, process, log)
        yield port
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def models_dir(tmp_path: Path, upstream: int) -> Path:
    folder = tmp_path / "models"
    (folder / "scripted").mkdir(parents=True)
    (folder / "scripted" / "fix.yaml").write_text((MODELS / "scripted" / "fix.yaml").read_text())
    (folder / "local.yaml").write_text("name: local\nscript: scripted/fix.yaml\nprice: {input: 1, output: 1}\n")
    (folder / "remote.yaml").write_text(
        f"name: remote\nbase_url: http://127.0.0.1:{upstream}/v1\nupstream_model: fix-upstream\n"
        "api_key_env: UPSTREAM_KEY\nprice: {input: 2.5, output: 10}\n"
    )
    return folder


def _chat(key: RunKey, assistants: int = 0) -> httpx.Response:
    messages = [{"role": "user", "content": "# Task: kvrec (Go)"}] + [
        {"role": "assistant", "content": "x"}
    ] * assistants
    return httpx.post(
        f"{key.base_url}/chat/completions",
        json={"model": key.model, "messages": messages},
        headers={"authorization": f"Bearer {key.key}"},
        timeout=30,
    )


def test_runs_through_the_gateway_process(models_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UPSTREAM_KEY", SECRET)
    state = tmp_path / "state"
    with GatewayProcess(models_dir, state, model_port=0) as gateway:
        assert gateway.process is not None
        pid = gateway.process.pid
        client = GatewayClient(gateway.control_url or "", gateway.admin_token)
        assert client.health()["models"] == ["local", "remote"]
        one = client.register_run("run-1", "remote", bind_host="127.0.0.1", ttl_seconds=60, port=0)
        two = client.register_run("run-2", "local", bind_host="127.0.0.2", ttl_seconds=60, port=0)
        assert one.base_url.startswith("http://127.0.0.1:") and two.base_url.startswith("http://127.0.0.2:")
        assert one.key not in repr(one) and one.env() == {
            "SSE_BASE_URL": one.base_url,
            "SSE_API_KEY": one.key,
            "SSE_MODEL_NAME": "remote",
        }
        assert [_chat(one, n).status_code for n in range(2)] == [200, 200]
        assert _chat(two).status_code == 200
        # Run 2's key, sent to run 1's listener, is refused (and the other way round).
        swapped = RunKey("x", two.key, one.base_url, "local", 0)
        assert _chat(swapped).status_code == 401
        assert _chat(RunKey("x", one.key, two.base_url, "remote", 0)).status_code == 401
        usage = client.finish_run("run-1")
        assert usage.calls == 2 and usage.prompt_tokens == 1640 + 2710 and usage.completion_tokens == 39 + 52
        assert usage.cost == pytest.approx(((1640 + 2710) * 2.5 + (39 + 52) * 10) / 1e6)
        assert usage.summary()["total_tokens"] == 1640 + 2710 + 39 + 52 and "records" not in usage.summary()
        # Run 1 was the only run on 127.0.0.1: its listener is closed; run 2's is not.
        with pytest.raises(httpx.ConnectError):
            _chat(one)
        assert _chat(two, 1).status_code == 200
        with pytest.raises(GatewayError, match="already registered"):
            client.register_run("run-2", "local", bind_host="127.0.0.2", ttl_seconds=60, port=0)
        with pytest.raises(GatewayError, match=r"\(404\): no model 'nope'"):
            client.register_run("run-3", "nope", bind_host="127.0.0.1", ttl_seconds=60, port=0)
        client.close()
    # Stopped for good; the records outlive it.
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    records = [json.loads(line) for line in (state / "usage" / "run-1.jsonl").read_text().splitlines()]
    assert [(r["prompt_tokens"], r["completion_tokens"]) for r in records] == [(1640, 39), (2710, 52)]
    assert len((state / "usage" / "run-2.jsonl").read_text().splitlines()) == 2
    log = (state / "gateway.log").read_text()
    assert "run run-1 registered" in log and SECRET not in log and one.key not in log and gateway.admin_token not in log


def test_a_gateway_that_cannot_start_says_why(tmp_path: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "bad.yaml").write_text("name: bad\n")
    with pytest.raises(GatewayError) as caught:
        GatewayProcess(folder, tmp_path / "state", start_timeout=30).start()
    message = str(caught.value)
    assert "exited (2) while starting" in message and "bad.yaml: give exactly one of base_url" in message


def test_a_broken_model_file_does_not_keep_the_gateway_from_the_models_it_serves(
    models_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UPSTREAM_KEY", SECRET)
    (models_dir / "broken.yaml").write_text("name: broken\n")
    with pytest.raises(GatewayError, match=r"broken\.yaml: give exactly one of base_url"):  # the control: it is broken
        GatewayProcess(models_dir, tmp_path / "all", start_timeout=30).start()
    with GatewayProcess(models_dir, tmp_path / "state", model_port=0, serve=["local"]) as gateway:
        client = GatewayClient(gateway.control_url or "", gateway.admin_token)
        assert client.health()["models"] == ["local"]
        client.close()


def test_the_gateway_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ssebench.gateway", "--models", str(MODELS), "--state-dir", str(tmp_path)],
        env={k: v for k, v in os.environ.items() if k != "SSEBENCH_GATEWAY_TOKEN"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "SSEBENCH_GATEWAY_TOKEN must hold the admin token" in done.stderr


def test_the_gateway_stops_when_its_parent_dies(tmp_path: Path) -> None:
    """A crashed session (kill -9) leaves no gateway behind."""
    code = (
        "import sys, time; from pathlib import Path; from ssebench.gateway import GatewayProcess;"
        f"g = GatewayProcess(Path({str(MODELS)!r}), Path({str(tmp_path / 'state')!r}), model_port=0).start();"
        "print(g.process.pid, flush=True); time.sleep(600)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)
        os.kill(child, 9)
        raise AssertionError("the gateway outlived its parent")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


def test_the_gateway_process_relays_streams_of_each_protocol(
    models_dir: Path, upstream: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UPSTREAM_KEY", SECRET)
    (models_dir / "claude.yaml").write_text(
        f"name: claude\nbase_url: http://127.0.0.1:{upstream}/v1\nprotocol: anthropic-messages\n"
        "upstream_model: fix-upstream\napi_key_env: UPSTREAM_KEY\n"
    )
    task = [{"role": "user", "content": "# Task: kvrec (Go)"}]
    with GatewayProcess(models_dir, tmp_path / "state", model_port=0) as gateway:
        client = GatewayClient(gateway.control_url or "", gateway.admin_token)
        claude = client.register_run("run-1", "claude", bind_host="127.0.0.1", ttl_seconds=60, port=0)
        local = client.register_run("run-2", "local", bind_host="127.0.0.2", ttl_seconds=60, port=0)
        with httpx.stream(
            "POST",
            f"{claude.base_url}/messages",
            json={"model": "claude", "max_tokens": 100, "stream": True, "messages": task},
            headers={"x-api-key": claude.key},
            timeout=30,
        ) as answer:
            kinds = [line[7:] for line in answer.iter_lines() if line.startswith("event: ")]
        assert answer.status_code == 200 and kinds[0] == "message_start" and kinds[-1] == "message_stop"
        with httpx.stream(
            "POST",
            f"{local.base_url}/responses",
            json={"model": "local", "stream": True, "input": task},
            headers={"authorization": f"Bearer {local.key}"},
            timeout=30,
        ) as answer:
            text = answer.read().decode()
        assert "event: response.completed" in text
        records = [client.finish_run(run).records[0] for run in ("run-1", "run-2")]
        client.close()
    assert [(r.status, r.prompt_tokens, r.completion_tokens, r.error) for r in records] == [(200, 1640, 39, None)] * 2
