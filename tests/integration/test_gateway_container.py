"""The gateway seen from real containers on internal networks of their own.

A container on a run's network reaches the gateway at that network's
gateway IP with its run's key and gets the scripted answer; the key of
another run, an expired key and another model are refused; a container
cannot reach another run's listener at all; once the run is finished its
listener is gone. No provider key is ever in the container.

Docker's internal networks (20.10) still give a container a default route
to the host's end of its bridge, so a container can reach every address of
the host, other runs' listeners included: what keeps runs apart is the key,
valid only on its own run's listener.
"""

from __future__ import annotations

import json
import textwrap
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ssebench.engine import client, images
from ssebench.gateway import GatewayClient, GatewayProcess, RunKey
from ssebench.task import Task
from tests.helpers import runtime_of, scripted_steps, scripted_upstream

pytestmark = [pytest.mark.docker, pytest.mark.slow]

IMAGE = "ssebench/tool/demo/c-demo:0.1.0"
PYTHON = "/opt/ssebench/venv/bin/python"
LABEL = {"ssebench.session": "tests-gateway"}
MODELS = Path(__file__).resolve().parents[2] / "models"
SECRET = "sk-container-test-provider-key-5e1a"

CALL = """
import json, sys, httpx
base_url, key, model = sys.argv[1:4]
messages = [{"role": "user", "content": "# Task: tlvkit (C)"}]
try:
    r = httpx.post(base_url + "/chat/completions", json={"model": model, "messages": messages},
                   headers={"authorization": "Bearer " + key}, timeout=10)
    print(json.dumps({"status": r.status_code, "body": r.text}))
except httpx.HTTPError as exc:
    print(json.dumps({"status": None, "body": type(exc).__name__}))
"""


@pytest.fixture(scope="module")
def image(demo_images: list[Task]) -> tuple[str, dict[str, dict[str, str]]]:
    """c-demo's tool image and its runtime; the demo's images are built (or found current) by the shared
    fixture."""
    from ssebench.settings import get_settings

    assert images().id(IMAGE) is not None
    return IMAGE, runtime_of(get_settings(), next(t for t in demo_images if t.id == "c-demo"))


@pytest.fixture(scope="module")
def upstream() -> Iterator[int]:
    """The scripted model as an HTTP upstream on loopback that wants the provider key."""
    with scripted_upstream(MODELS / "scripted" / "fix.yaml", "UPSTREAM_KEY", SECRET) as port:
        yield port


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, upstream: int) -> Iterator[GatewayClient]:
    models = tmp_path_factory.mktemp("models")
    for name in ("scripted-fix", "scripted-wander"):
        (models / f"{name}.yaml").write_text((MODELS / f"{name}.yaml").read_text())
    (models / "scripted").mkdir()
    for name in ("fix", "wander"):
        (models / "scripted" / f"{name}.yaml").write_text((MODELS / "scripted" / f"{name}.yaml").read_text())
    (models / "remote.yaml").write_text(
        f"name: remote\nbase_url: http://127.0.0.1:{upstream}/v1\napi_key_env: UPSTREAM_KEY\n"
    )
    mp = pytest.MonkeyPatch()
    mp.setenv("UPSTREAM_KEY", SECRET)
    try:
        with GatewayProcess(models, tmp_path_factory.mktemp("state")) as process:
            gateway_client = process.client()
            yield gateway_client
            gateway_client.close()
    finally:
        mp.undo()


@contextmanager
def run_network(image: tuple[str, dict[str, dict[str, str]]]) -> Iterator[tuple[str, Any]]:
    """An internal network of one run, its gateway IP, and a container on it (removed afterwards)."""
    network = client().networks.create(f"ssebench-tests-gw-{uuid.uuid4().hex[:10]}", internal=True, labels=LABEL)
    container = None
    try:
        network.reload()
        gateway_ip = network.attrs["IPAM"]["Config"][0]["Gateway"]
        container = client().containers.run(
            image[0],
            entrypoint=["sleep", "600"],
            detach=True,
            labels=LABEL,
            network=network.name,
            user="1000",
            volumes=image[1],
        )
        yield gateway_ip, container
    finally:
        if container is not None:
            container.remove(force=True)
        network.remove()


def call(container: Any, key: RunKey, *, base_url: str | None = None, model: str | None = None) -> dict[str, Any]:
    code, out = container.exec_run(
        [PYTHON, "-c", textwrap.dedent(CALL), base_url or key.base_url, key.key, model or key.model]
    )
    assert code == 0, out.decode(errors="replace")
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


def test_containers_reach_only_their_own_runs_model(
    image: tuple[str, dict[str, dict[str, str]]], gateway: GatewayClient
) -> None:
    with run_network(image) as (ip_a, box_a), run_network(image) as (ip_b, box_b):
        key_a = gateway.register_run("gw-a", "scripted-fix", bind_host=ip_a, ttl_seconds=600)
        key_b = gateway.register_run("gw-b", "scripted-fix", bind_host=ip_b, ttl_seconds=600)
        assert key_a.base_url == f"http://{ip_a}:4080/v1"

        # Positive control: each container, its own run's key, its own network's gateway IP.
        for box, key in ((box_a, key_a), (box_b, key_b)):
            answer = call(box, key)
            assert answer["status"] == 200, answer
            message = json.loads(answer["body"])["choices"][0]["message"]
            assert message["tool_calls"][0]["function"]["name"] == "view_file"

        # Run B's key on run A's listener: refused.
        stolen = call(box_a, key_b, base_url=key_a.base_url)
        assert stolen["status"] == 401 and "not a key of a run served here" in stolen["body"]
        # A model the key does not allow: refused, naming it.
        other = call(box_a, key_a, model="scripted-wander")
        assert other["status"] == 403 and "not 'scripted-wander'" in other["body"]
        # Run A's key at run B's listener: refused. (Docker's internal networks still route a container to
        # every address of the host, so B's listener may well be reachable from A: the key is the barrier.)
        crossed = call(box_a, key_a, base_url=key_b.base_url)
        assert crossed["status"] in (401, None), crossed

        # An expired key: refused. (Its life leaves a loaded machine's docker exec and Python start room to
        # make the first call within it; the second waits out what is left of it.)
        short = gateway.register_run("gw-short", "scripted-fix", bind_host=ip_a, ttl_seconds=8)
        registered = time.monotonic()  # its life began before this
        assert call(box_a, short)["status"] == 200
        time.sleep(max(0.0, registered + 8.5 - time.monotonic()))
        expired = call(box_a, short)
        assert expired["status"] == 401 and "expired" in expired["body"]

        # Finishing revokes the key; the last run on an address closes its listener.
        gateway.finish_run("gw-short")
        gateway.finish_run("gw-a")
        assert call(box_a, key_a)["status"] is None
        assert call(box_b, key_b)["status"] == 200
        usage_b = gateway.finish_run("gw-b")
        assert usage_b.calls == 2 and usage_b.prompt_tokens == 2 * 1850 and usage_b.completion_tokens == 2 * 74


def test_the_provider_key_stays_on_the_host(
    image: tuple[str, dict[str, dict[str, str]]], gateway: GatewayClient
) -> None:
    with run_network(image) as (ip, box):
        key = gateway.register_run("gw-remote", "remote", bind_host=ip, ttl_seconds=600)
        answer = call(box, key)
        assert answer["status"] == 200, answer  # the upstream accepted the provider key the gateway added
        assert SECRET not in answer["body"]
        assert SECRET not in json.dumps(key.env())
        code, out = box.exec_run(
            ["sh", "-c", "env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'"], environment=key.env()
        )
        assert code == 0 and key.key in out.decode() and SECRET not in out.decode()
        usage = gateway.finish_run("gw-remote")
        assert usage.calls == 1 and usage.records[0].status == 200 and usage.prompt_tokens == 1850


# -- the real agent in a real run, through the gateway --------------------------------


@pytest.fixture(scope="module")
def shipped_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayClient]:
    with GatewayProcess(MODELS, tmp_path_factory.mktemp("shipped-state")) as process:
        gateway_client = process.client()
        yield gateway_client
        gateway_client.close()


@pytest.mark.parametrize(
    ("model", "grade", "status"),
    [
        ("scripted-fix", "passed", "done"),
        ("scripted-wander", "failed", "done"),
        ("scripted-garbage", "failed", "error"),
        ("scripted-budget", "failed", "budget"),
    ],
)
def test_chat_agent_runs_c_demo_through_the_gateway(
    shipped_gateway: GatewayClient, tmp_path: Path, model: str, grade: str, status: str
) -> None:
    """One whole run (images, network, container, grade) of chat-agent; usage comes from the gateway."""
    import os

    from sse.dialog import read, validate

    from ssebench.agent import load_agent
    from ssebench.dataset import load_tasks
    from ssebench.engine import DockerBackend
    from ssebench.gateway import GatewayLink
    from ssebench.reaper import Session, reap_session
    from ssebench.run import execute
    from ssebench.runspec import RunConfig
    from ssebench.settings import get_settings
    from tests.helpers import DEMO

    settings = get_settings()
    task = next(t for t in load_tasks(DEMO) if t.id == "c-demo")
    config = RunConfig(task=task, agent=load_agent(settings.agents_dir, "chat-agent"), model=model, timeout=600)
    session = Session(id=f"tests-gateway-{uuid.uuid4().hex[:8]}", controller=os.getpid())
    try:
        record = execute(config, settings, DockerBackend(), session, tmp_path, models=GatewayLink(shipped_gateway))
    finally:
        reap_session(session.id)
    assert record.infra_error is None, record.infra_error
    assert record.grade == grade
    dialog = read(record.run_dir / "archive" / "dialog.jsonl")
    assert validate(dialog) == [], dialog
    assert dialog[-1]["status"] == status, dialog[-1]
    summary = json.loads((record.run_dir / "summary.json").read_text())
    usage = summary["usage"]
    totals = dialog[-1]["totals"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (totals["input_tokens"], totals["output_tokens"])
    if model == "scripted-fix":
        steps = scripted_steps(MODELS / "scripted" / "fix.yaml", "# Task: tlvkit")
        assert usage["prompt_tokens"] == sum(s["usage"]["prompt_tokens"] for s in steps)
        assert usage["calls"] == len(steps) and usage["stopped"] is None
        assert usage["cost"] == pytest.approx((usage["prompt_tokens"] * 3 + usage["completion_tokens"] * 15) / 1e6)
        patch = (record.run_dir / "final.patch").read_text()
        assert "TLV_ERR_TOO_LONG" in patch
    if model == "scripted-budget":
        assert usage["stopped"] == "budget exhausted: 5105 of 5000 tokens used" and usage["refused"] == 1
