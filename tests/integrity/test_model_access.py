"""A run reaches its model through the gateway, and nothing else; the provider key never enters it.

The session's gateway serves a model whose upstream (the scripted server, as
a real HTTP server on loopback) demands a provider key held in the host's
environment. A restricted run of that model reaches the gateway at its
SSE_BASE_URL (the positive control of the egress tests), gets an answer,
and cannot reach the internet. The provider key appears nowhere in the run
container: not in any process's environment, not in /proc, not in a file.
Another model, another run's key, a key after the run: refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from ssebench.gateway import GatewayClient, GatewayError, GatewayLink, GatewayProcess
from ssebench.settings import PROJECT_ROOT
from tests.helpers import scripted_upstream
from tests.integrity.harness import LEVELS, Launcher

pytestmark = [pytest.mark.docker, pytest.mark.integrity, pytest.mark.slow]

SECRET = "sk-provider-key-that-stays-on-the-host-7f3c"
SCRIPT = PROJECT_ROOT / "models" / "scripted" / "fix.yaml"

CALL = """
import json, os, httpx
base, key = os.environ["SSE_BASE_URL"], os.environ["SSE_API_KEY"]
def ask(model, token):
    try:
        r = httpx.post(base + "/chat/completions", headers={"authorization": "Bearer " + token}, timeout=20,
                       json={"model": model, "messages": [{"role": "user", "content": "# Task: tlvkit (C)"}]})
        return [r.status_code, r.text[:300]]
    except httpx.HTTPError as exc:
        return [0, type(exc).__name__]
def reach(host, port):
    try:
        import socket
        socket.create_connection((host, port), timeout=5).close()
        return "connected"
    except OSError as exc:
        return type(exc).__name__
print(json.dumps({"own": ask(os.environ["SSE_MODEL_NAME"], key), "other-model": ask("scripted-fix", key),
                  "forged-key": ask(os.environ["SSE_MODEL_NAME"], "sse-" + "0" * 40),
                  "internet": reach("1.1.1.1", 80), "mirror": reach("deb.debian.org", 80)}))
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayClient]:
    """The gateway, serving `remote`: the scripted model behind a real HTTP upstream that wants SECRET."""
    with scripted_upstream(SCRIPT, "UPSTREAM_KEY", SECRET, model="remote-upstream") as port:
        yield from _gateway(tmp_path_factory, port)


def _gateway(tmp_path_factory: pytest.TempPathFactory, port: int) -> Iterator[GatewayClient]:
    models = tmp_path_factory.mktemp("models")
    (models / "remote.yaml").write_text(
        f"name: remote\nbase_url: http://127.0.0.1:{port}/v1\n"
        "upstream_model: remote-upstream\napi_key_env: UPSTREAM_KEY\n"
        "price: {input: 1, output: 2}\n"
    )
    (models / "scripted-fix.yaml").write_text("name: scripted-fix\nscript: scripted/fix.yaml\n")
    (models / "scripted").mkdir()
    (models / "scripted" / "fix.yaml").write_text(SCRIPT.read_text())
    mp = pytest.MonkeyPatch()
    mp.setenv("UPSTREAM_KEY", SECRET)
    try:
        with GatewayProcess(models, tmp_path_factory.mktemp("gateway"), model_port=4081) as process:
            gateway_client = process.client()
            yield gateway_client
            gateway_client.close()
    finally:
        mp.undo()


@pytest.mark.parametrize("level", LEVELS, ids=lambda level: f"d{level}")
def test_the_model_is_reachable_and_the_provider_key_is_not(
    fresh_launcher: Launcher, gateway: GatewayClient, level: int
) -> None:
    run = fresh_launcher.start(level=level, model="remote", models=GatewayLink(gateway))
    env = json.loads(
        run.sh(
            "root",
            "cat /proc/1/environ | tr '\\0' '\\n' | grep '^SSE_' | "
            'python3 -c \'import json,sys; print(json.dumps(dict(l.strip().split("=",1) '
            "for l in sys.stdin)))'",
        )
    )
    assert env["SSE_BASE_URL"].startswith(f"http://{run.live.network.gateway}:")
    assert env["SSE_MODEL_NAME"] == "remote" and env["SSE_API_KEY"]
    out = run.py("1000", CALL, env={k: env[k] for k in ("SSE_BASE_URL", "SSE_API_KEY", "SSE_MODEL_NAME")})
    assert out["own"][0] == 200 and "tlv.c" in out["own"][1], out  # the positive control: the gateway answers
    assert out["other-model"][0] == 403 and out["forged-key"][0] == 401, out
    assert out["internet"] != "connected" and out["mirror"] != "connected", out
    # The provider key: in no environment, no file of the container.
    for task in (False, True):  # sidecar mode: in neither container
        found = run.sh(
            "root",
            f"cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c {SECRET} || true; "
            f"grep -rl --exclude-dir=proc --exclude-dir=sys -e {SECRET} / 2>/dev/null | head -3; true",
            task=task,
        )
        assert found.split() == ["0"], found
    if run.mode == "sidecar":  # and the task container gets no model access at all
        task_env = run.sh(
            "root",
            "cat /proc/1/environ | tr '\\0' '\\n' | grep -c -e '^SSE_API_KEY=' -e '^SSE_BASE_URL=' || true",
            task=True,
        )
        assert task_env.strip() == "0", task_env
    key = env["SSE_API_KEY"]
    run.close()  # the run ends: its key goes with it
    usage = fresh_launcher.usage[run.live.run_id]
    assert usage["calls"] == 1 and usage["prompt_tokens"] == 1850 and usage["completion_tokens"] == 74, usage
    assert usage["cost"] == pytest.approx((1850 * 1 + 74 * 2) / 1e6)
    with pytest.raises(GatewayError, match="already registered"):
        gateway.register_run(run.live.run_id, "remote", bind_host="127.0.0.1", ttl_seconds=60)  # no second life
    assert key not in json.dumps(gateway.usage(run.live.run_id).model_dump())
