"""The gateway's apps in-process: keys, listeners, budgets, upstream calls and their records."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from ssebench.gateway import ModelConfig, Price, Usage, load_models
from ssebench.gateway._server import Gateway
from ssebench.gateway.scripted import Playback, create_app

MODELS = Path(__file__).resolve().parents[2] / "models"
TOKEN = "admin-token-for-tests-0123456789"
SECRET = "sk-provider-secret-4f7d2c"
RUN_HOST, OTHER_HOST = "172.18.0.1", "172.19.0.1"


@dataclass
class FakeListeners:
    """Listeners without sockets: which hosts were asked for, and released."""

    acquired: list[tuple[str, int]] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    broken: set[str] = field(default_factory=set)

    async def acquire(self, host: str, port: int) -> int:
        if host in self.broken:
            raise OSError(99, "Cannot assign requested address")
        self.acquired.append((host, port))
        return port or 40000

    async def release(self, host: str) -> None:
        self.released.append(host)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Setup:
    gateway: Gateway
    listeners: FakeListeners
    clock: Clock
    upstream: Any = None

    def control(self, token: str = TOKEN) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.gateway.control_app(TOKEN)),
            base_url="http://control",
            headers={"authorization": f"Bearer {token}"},
        )

    def model(self, key: str, host: str = RUN_HOST) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.gateway.model_app(host)),
            base_url=f"http://{host}:4080",
            headers={"authorization": f"Bearer {key}"},
        )

    async def register(
        self, run_id: str = "run-1", model: str = "scripted-fix", host: str = RUN_HOST, **extra: Any
    ) -> dict[str, Any]:
        async with self.control() as control:
            response = await control.post(
                "/runs", json={"run_id": run_id, "model": model, "bind_host": host, "ttl_seconds": 600, **extra}
            )
        assert response.status_code == 200, response.text
        return dict(response.json())


def _setup(
    tmp_path: Path,
    extra: dict[str, ModelConfig] | None = None,
    environ: dict[str, str] | None = None,
    upstream: Any = None,
) -> Setup:
    listeners, clock = FakeListeners(), Clock()
    models = {**load_models(MODELS), **(extra or {})}
    transport = httpx.ASGITransport(app=upstream) if upstream is not None else None
    gateway = Gateway(
        models=models,
        state_dir=tmp_path / "state",
        listeners=listeners,
        clock=clock,
        upstream_transport=transport,
        environ=environ or {},
    )
    return Setup(gateway, listeners, clock, upstream)


def run(test: Callable[[], Awaitable[None]]) -> None:
    anyio.run(test)


def chat(
    model: str = "scripted-fix", text: str = "# Task: tlvkit (C)", assistants: int = 0, **extra: Any
) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "s"}, {"role": "user", "content": text}]
    messages += [{"role": "assistant", "content": "x"}] * assistants
    return {"model": model, "messages": messages, **extra}


FIX_USAGE = [(1850, 74), (3120, 61), (3890, 212), (4420, 18), (4630, 83)]  # models/scripted/fix.yaml, tlvkit


def test_a_run_gets_a_key_for_its_model_on_its_listener(tmp_path: Path) -> None:
    setup = _setup(tmp_path)

    async def test() -> None:
        run_key = await setup.register()
        assert run_key["key"].startswith("sse-run-") and len(run_key["key"]) > 40
        assert run_key["base_url"] == "http://172.18.0.1:4080/v1"
        assert run_key["expires_at"] == setup.clock.now + 600
        assert setup.listeners.acquired == [(RUN_HOST, 4080)]
        async with setup.model(run_key["key"]) as client:
            answer = await client.post("/v1/chat/completions", json=chat())
            models = await client.get("/v1/models")
        assert answer.status_code == 200
        assert answer.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "view_file"
        assert [m["id"] for m in models.json()["data"]] == ["scripted-fix"]

    run(test)


def test_keys_are_refused_off_their_run_model_listener_or_time(tmp_path: Path) -> None:
    setup = _setup(tmp_path)

    async def test() -> None:
        one = await setup.register("run-1")
        two = await setup.register("run-2", "scripted-wander", host=OTHER_HOST)
        async with setup.model(two["key"], RUN_HOST) as client:  # run 2's key on run 1's listener
            refused = await client.post("/v1/chat/completions", json=chat("scripted-wander"))
        assert refused.status_code == 401 and "not a key of a run served here" in refused.text
        async with setup.model(one["key"]) as client:
            other_model = await client.post("/v1/chat/completions", json=chat("scripted-wander"))
            streaming = await client.post("/v1/chat/completions", json=chat(stream="yes"))
            not_json = await client.post("/v1/chat/completions", content=b"{nope")
            no_messages = await client.post("/v1/chat/completions", json={"model": "scripted-fix"})
        assert other_model.status_code == 403
        assert (
            other_model.json()["error"]["message"] == "this key is for model 'scripted-fix' only, not 'scripted-wander'"
        )
        assert streaming.status_code == 400 and "stream must be true or false" in streaming.text
        assert not_json.status_code == 400 and no_messages.status_code == 400
        for bad in ("", "Bearer ", "Basic abc", "Bearer sse-run-forged"):
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=setup.gateway.model_app(RUN_HOST)),
                base_url="http://x",
                headers={"authorization": bad} if bad else {},
            ) as c:
                assert (await c.post("/v1/chat/completions", json=chat())).status_code == 401
                assert (await c.get("/v1/models")).status_code == 401
        setup.clock.now += 601
        async with setup.model(one["key"]) as client:
            expired = await client.post("/v1/chat/completions", json=chat())
        assert expired.status_code == 401 and "has expired" in expired.text
        # Refusals before the budget check call nothing upstream: the run's bad calls are counted as rejected
        # (and the first few kept as records); calls without a valid key are nobody's.
        usage = setup.gateway.runs["run-1"].usage()
        assert [r.status for r in usage.records] == [403, 400, 400, 400]
        assert usage.calls == 0 and usage.rejected == 4 and usage.refused == 0 and usage.total_tokens == 0

    run(test)


def test_finishing_revokes_the_key_and_returns_what_the_upstream_reported(tmp_path: Path) -> None:
    setup = _setup(tmp_path)

    async def test() -> None:
        run_key = await setup.register()
        async with setup.model(run_key["key"]) as client:
            for position in range(len(FIX_USAGE)):
                assert (await client.post("/v1/chat/completions", json=chat(assistants=position))).status_code == 200
        async with setup.control() as control:
            live = Usage.model_validate((await control.get("/runs/run-1/usage")).json())
            finished = await control.post("/runs/run-1/finish")
            again = await control.post("/runs/run-1/finish")
        usage = Usage.model_validate(finished.json())
        assert usage == live == Usage.model_validate(again.json())
        assert setup.listeners.released == [RUN_HOST]  # released once, not per finish call
        assert usage.calls == 5 and usage.refused == 0 and usage.stopped is None
        assert usage.prompt_tokens == sum(p for p, _ in FIX_USAGE)
        assert usage.completion_tokens == sum(c for _, c in FIX_USAGE)
        assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
        assert usage.cost == pytest.approx(
            Price(input=3.0, output=15.0).cost(usage.prompt_tokens, usage.completion_tokens)
        )
        assert [(r.prompt_tokens, r.completion_tokens) for r in usage.records] == FIX_USAGE
        assert {r.status for r in usage.records} == {200} and {r.run for r in usage.records} == {"run-1"}
        lines = (tmp_path / "state" / "usage" / "run-1.jsonl").read_text().splitlines()
        assert [json.loads(line) for line in lines] == [r.model_dump() for r in usage.records]
        async with setup.model(run_key["key"]) as client:
            revoked = await client.post("/v1/chat/completions", json=chat())
        assert revoked.status_code == 401

    run(test)


def test_the_budget_stops_the_run_before_forwarding(tmp_path: Path) -> None:
    setup = _setup(tmp_path)

    async def test() -> None:
        run_key = await setup.register(model="scripted-budget")  # 5,000 tokens; the fix's 2nd call crosses it
        statuses = []
        async with setup.model(run_key["key"]) as client:
            for position in range(4):
                reply = await client.post("/v1/chat/completions", json=chat("scripted-budget", assistants=position))
                statuses.append(reply.status_code)
        assert statuses == [200, 200, 429, 429]
        assert reply.json()["error"]["type"] == "budget_exhausted"
        # The providers' SDKs retry a 429 unless told not to: this one never clears.
        assert reply.headers["x-should-retry"] == "false"
        usage = setup.gateway.runs["run-1"].usage()
        assert usage.stopped == "budget exhausted: 5105 of 5000 tokens used"
        assert usage.calls == 2 and usage.refused == 2 and usage.total_tokens == 5105
        assert [r.status for r in usage.records] == [200, 200, 429, 429]

    run(test)


def test_a_budget_given_at_registration_replaces_the_models(tmp_path: Path) -> None:
    setup = _setup(tmp_path)

    async def test() -> None:
        run_key = await setup.register(budget={"cost": 0.001})  # the first call costs $0.006660
        async with setup.model(run_key["key"]) as client:
            first = await client.post("/v1/chat/completions", json=chat())
            second = await client.post("/v1/chat/completions", json=chat(assistants=1))
        assert (first.status_code, second.status_code) == (200, 429)
        assert setup.gateway.runs["run-1"].usage().stopped == "budget exhausted: $0.006660 of $0.001000 spent"

    run(test)


def test_the_control_api_needs_the_token_and_valid_requests(tmp_path: Path) -> None:
    setup = _setup(tmp_path)
    setup.listeners.broken.add("172.30.0.1")

    async def test() -> None:
        async with setup.control(token="wrong") as control:
            assert (await control.get("/health")).status_code == 401
            assert (await control.post("/runs", json={})).status_code == 401
        async with setup.control() as control:
            health = (await control.get("/health")).json()
            assert health["status"] == "ok" and "scripted-fix" in health["models"]

            async def refused(body: dict[str, Any]) -> tuple[int, str]:
                response = await control.post(
                    "/runs",
                    json={"run_id": "r", "model": "scripted-fix", "bind_host": RUN_HOST, "ttl_seconds": 60, **body},
                )
                return response.status_code, (response.json().get("error") or {}).get("message", "")

            assert await refused({"model": "gpt-9"}) == (
                404,
                "no model 'gpt-9' (models: scripted-budget, scripted-fix, scripted-garbage, scripted-wander)",
            )
            assert (await refused({"bind_host": "0.0.0.0"}))[1].endswith("give the run network's gateway IP")
            assert (await refused({"bind_host": "gateway"}))[0] == 400
            assert (await refused({"run_id": "../escape"}))[0] == 400
            assert (await refused({"ttl_seconds": -1}))[0] == 400
            assert (await refused({"extra": 1}))[0] == 400
            status, message = await refused({"bind_host": "172.30.0.1"})
            assert status == 500 and message.startswith("cannot listen on 172.30.0.1: Cannot assign requested")
            assert (await refused({}))[0] == 200
            assert await refused({}) == (409, "run 'r' is already registered")
            assert (await control.post("/runs/nobody/finish")).status_code == 404
            assert (await control.get("/runs/nobody/usage")).status_code == 404
            assert (await control.post("/runs", content=b"[")).status_code == 400

    run(test)


def _http_model(**extra: Any) -> ModelConfig:
    return ModelConfig(
        name="remote",
        base_url="http://upstream.test/v1",
        upstream_model="upstream-id",
        api_key_env="TEST_PROVIDER_KEY",
        price=Price(input=1.0, output=2.0),
        **extra,
    )


def test_an_http_upstream_gets_the_provider_key_and_its_model_id_the_agent_sees_neither(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    upstream = create_app(Playback.from_file(MODELS / "scripted" / "fix.yaml"), api_key=SECRET, model="upstream-id")
    setup = _setup(tmp_path, {"remote": _http_model(max_output_tokens=256)}, {"TEST_PROVIDER_KEY": SECRET}, upstream)
    caplog.set_level(logging.DEBUG)

    async def test() -> None:
        run_key = await setup.register(model="remote")
        async with setup.model(run_key["key"]) as client:
            answer = await client.post("/v1/chat/completions", json=chat("remote", max_tokens=9999))
            capped = await client.post("/v1/chat/completions", json=chat("remote", max_completion_tokens=100))
        assert answer.status_code == 200 and capped.status_code == 200
        assert SECRET not in answer.text and "upstream-id" in answer.text  # the upstream's answer, as it was
        received = upstream.state.received
        assert [r["model"] for r in received] == ["upstream-id", "upstream-id"]
        assert received[0]["max_tokens"] == 256 and received[1]["max_completion_tokens"] == 100
        async with setup.control() as control:
            usage = Usage.model_validate((await control.post("/runs/run-1/finish")).json())
        assert (
            usage.calls == 2
            and usage.prompt_tokens == 1850 * 2
            and usage.cost == pytest.approx((1850 * 2 * 1.0 + 74 * 2 * 2.0) / 1e6)
        )
        stored = (tmp_path / "state" / "usage" / "run-1.jsonl").read_text()
        assert SECRET not in stored and SECRET not in caplog.text and run_key["key"] not in caplog.text

    run(test)


def test_upstream_failures_reach_the_agent_as_errors_and_are_recorded(tmp_path: Path) -> None:
    def script(steps: list[dict[str, Any]]) -> Any:
        path = tmp_path / "s.yaml"
        path.write_text(json.dumps({"conversations": [{"match": "", "steps": steps}]}))
        return create_app(Playback.from_file(path), api_key=SECRET)

    upstream = script(
        [
            {"error": {"status": 503, "body": "busy"}},
            {"garbage": "<html>oops"},
            {"error": {"status": 429, "body": '{"error": {"message": "slow"}}'}},
            {"content": "ok"},
        ]
    )
    setup = _setup(tmp_path, {"remote": _http_model()}, {"TEST_PROVIDER_KEY": SECRET}, upstream)

    async def test() -> None:
        run_key = await setup.register(model="remote")
        async with setup.model(run_key["key"]) as client:
            replies = [await client.post("/v1/chat/completions", json=chat("remote")) for _ in range(4)]
        assert [(r.status_code, r.text) for r in replies[:3]] == [
            (503, "busy"),
            (200, "<html>oops"),
            (429, '{"error": {"message": "slow"}}'),
        ]
        assert replies[3].json()["usage"] == {
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "total_tokens": 0,
            "prompt_tokens_details": {"cached_tokens": 0},
        }
        records = setup.gateway.runs["run-1"].records
        assert [r.status for r in records] == [503, 200, 429, 200]
        assert [r.error for r in records] == [
            "upstream answered 503: busy",
            "upstream answer is not JSON (10 bytes)",
            'upstream answered 429: {"error": {"message": "slow"}}',
            None,
        ]

    run(test)


def test_an_upstream_that_refuses_the_provider_key_is_a_502_without_its_body(tmp_path: Path) -> None:
    upstream = create_app(Playback.from_file(MODELS / "scripted" / "fix.yaml"), api_key="another-key")
    setup = _setup(tmp_path, {"remote": _http_model()}, {"TEST_PROVIDER_KEY": SECRET}, upstream)

    async def test() -> None:
        run_key = await setup.register(model="remote")
        async with setup.model(run_key["key"]) as client:
            reply = await client.post("/v1/chat/completions", json=chat("remote"))
        assert reply.status_code == 502 and reply.json()["error"]["type"] == "upstream_auth_error"
        assert "wrong API key" not in reply.text and "$TEST_PROVIDER_KEY" in reply.text

    run(test)


def test_an_unreachable_upstream_is_a_502(tmp_path: Path) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    setup = _setup(tmp_path, {"remote": _http_model()}, {"TEST_PROVIDER_KEY": SECRET})
    setup.gateway.upstream_transport = httpx.MockTransport(refuse)

    async def test() -> None:
        run_key = await setup.register(model="remote")
        async with setup.model(run_key["key"]) as client:
            reply = await client.post("/v1/chat/completions", json=chat("remote"))
        assert reply.status_code == 502 and reply.json()["error"]["type"] == "upstream_unreachable"
        assert setup.gateway.runs["run-1"].records[0].status == 502

    run(test)


def _failing(error: type[httpx.RequestError], *, stream: bool = False) -> httpx.MockTransport:
    """An upstream whose every call ends in `error`: before an answer, or (`stream`) after a stream's first event
    and before its usage."""

    def fail(request: httpx.Request) -> httpx.Response:
        if not stream:
            raise error("no answer", request=request)

        async def events() -> AsyncIterator[bytes]:
            yield b'data: {"choices": [{"delta": {"content": "ok"}}]}\n\n'
            raise error("broke off", request=request)

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=events())

    return httpx.MockTransport(fail)


@pytest.mark.parametrize(
    "error, stream, billed",
    [
        # Never sent: nothing to bill.
        (httpx.ConnectError, False, False),
        (httpx.ConnectTimeout, False, False),
        # Sent, and no usage came back: the upstream may bill the prompt, so the budget counts its estimate.
        (httpx.ReadTimeout, False, True),
        (httpx.RemoteProtocolError, False, True),
        (httpx.ReadTimeout, True, True),
    ],
)
def test_a_call_sent_whose_usage_never_came_is_billed_an_estimate_of_its_prompt(
    tmp_path: Path, error: type[httpx.RequestError], stream: bool, billed: bool
) -> None:
    setup = _setup(tmp_path, {"remote": _http_model()}, {"TEST_PROVIDER_KEY": SECRET})
    setup.gateway.upstream_transport = _failing(error, stream=stream)
    body = chat("remote", text="x" * 4000, stream=stream)

    async def test() -> None:
        run_key = await setup.register(model="remote")
        async with setup.model(run_key["key"]) as client:
            await client.post("/v1/chat/completions", json=body)
        [record] = setup.gateway.runs["run-1"].records
        if billed:
            # About four bytes a token: the 4,000-character prompt and the body around it.
            assert 1000 <= record.prompt_tokens <= 1100 and record.completion_tokens == 0, record
            assert record.cost == pytest.approx(record.prompt_tokens * 1.0 / 1e6)
            assert record.error is not None and "estimated from the request's size" in record.error, record.error
        else:
            assert (record.prompt_tokens, record.cost) == (0, 0), record

    run(test)


def test_a_model_whose_provider_key_is_not_set_is_refused_at_registration(tmp_path: Path) -> None:
    setup = _setup(tmp_path, {"remote": _http_model()}, {})

    async def test() -> None:
        async with setup.control() as control:
            response = await control.post(
                "/runs", json={"run_id": "r", "model": "remote", "bind_host": RUN_HOST, "ttl_seconds": 60}
            )
        assert response.status_code == 400
        assert "needs the provider key in $TEST_PROVIDER_KEY on the host" in response.json()["error"]["message"]
        assert setup.listeners.acquired == []

    run(test)


# -- what one run's agent can send --------------------------------------------------------------------


def test_a_body_is_parsed_once_within_a_depth_and_a_count_of_values(tmp_path: Path) -> None:
    setup = _setup(tmp_path)

    def nested(depth: int) -> bytes:
        """A chat body `depth` levels deep in all: the body, then the tools array and the arrays in it."""
        return json.dumps(chat())[:-1].encode() + b', "tools": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"

    async def test() -> None:
        run_key = await setup.register()
        async with setup.model(run_key["key"]) as client:

            async def send(body: bytes) -> tuple[int, str]:
                reply = await client.post("/v1/chat/completions", content=body)
                return reply.status_code, reply.json().get("error", {}).get("message", "")

            deepest = await send(nested(64))
            too_deep = [await send(nested(depth)) for depth in (65, 990, 1100, 50_000)]
            values = b", 0" * 1_000_000
            too_many = await send(json.dumps(chat())[:-1].encode() + b', "x": [0' + values + b"]}")
            not_json = [
                await send(body)
                for body in (
                    json.dumps(chat())[:-1].encode() + b', "top_p": NaN}',
                    b'{"model": "scripted-fix", "messages": ["\xff"]}',
                    b"",
                )
            ]
        assert deepest[0] == 200
        assert too_deep == [(400, "the body is nested deeper than 64 levels")] * 4
        assert too_many == (413, "request body too large: more than 1000000 JSON values")
        assert not_json == [(400, "the body is not JSON")] * 3
        usage = setup.gateway.runs["run-1"].usage()
        assert usage.calls == 1 and usage.rejected == 8

    run(test)


def test_the_allow_list_forwards_what_it_names_within_the_models_cap() -> None:
    from ssebench.gateway._apis import CHAT_COMPLETIONS, BadCall

    def upstream(cap: int | None = 512, **extra: Any) -> dict[str, Any]:
        body = {"model": "agent-side", "messages": [{"role": "user", "content": "hi"}], **extra}
        return CHAT_COMPLETIONS.upstream_body(body, model="provider-id", max_output_tokens=cap)

    sent = upstream(
        temperature=0,
        tools=[],
        tool_choice="none",
        n=1,
        stream=False,
        store=True,
        n_predict=-1,
        service_tier="priority",
        web_search_options={},
        metadata={"a": "b"},
        top_k=5,
    )
    assert sent == {
        "model": "provider-id",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0,
        "tools": [],
        "tool_choice": "none",
        "max_tokens": 512,
    }
    assert upstream(max_tokens=9999)["max_tokens"] == 512 and upstream(max_tokens=7)["max_tokens"] == 7
    assert upstream(max_completion_tokens=9999)["max_completion_tokens"] == 512
    assert "max_tokens" not in upstream(max_completion_tokens=10)
    assert "max_tokens" not in upstream(None) and upstream(None, max_tokens=10**6)["max_tokens"] == 10**6
    refused: dict[str, list[Any]] = {
        "max_tokens": [-1, 0, True, False, 1.5, "100", None, [1]],
        "max_completion_tokens": [-5, True],
        "n": [0, 2, 64, True, "1", 1.0],
    }
    for name, values in refused.items():
        for value in values:
            with pytest.raises(BadCall, match=f"^{name} must be"):
                upstream(**{name: value})
    broken_bodies: list[tuple[dict[str, Any], str]] = [
        ({"messages": "hi"}, "a messages list"),
        ({"stream": "yes"}, "stream must be"),
    ]
    for broken, message in broken_bodies:
        with pytest.raises(BadCall, match=message):
            upstream(**broken)


def test_a_run_has_a_few_requests_under_way_at_most(tmp_path: Path) -> None:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    release = anyio.Event()

    async def slow(request: Request) -> JSONResponse:
        await release.wait()
        return JSONResponse({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})

    upstream = Starlette(routes=[Route("/v1/chat/completions", slow, methods=["POST"])])
    setup = _setup(tmp_path, {"remote": _http_model()}, {"TEST_PROVIDER_KEY": SECRET}, upstream)

    async def test() -> None:
        run_key = await setup.register(model="remote")
        statuses: list[int] = []
        async with setup.model(run_key["key"]) as client, anyio.create_task_group() as group:

            async def call() -> None:
                statuses.append((await client.post("/v1/chat/completions", json=chat("remote"))).status_code)

            for _ in range(5):
                group.start_soon(call)
            with anyio.fail_after(5):  # the fifth is refused at once; the first is upstream, three wait their turn
                while not statuses:
                    await anyio.sleep(0.01)
            assert statuses == [429] and setup.gateway.runs["run-1"].active == 4
            release.set()
        assert sorted(statuses) == [200, 200, 200, 200, 429]
        usage = setup.gateway.runs["run-1"].usage()
        assert usage.calls == 4 and usage.rejected == 1
        assert usage.records[0].error == "run run-1 has 4 requests under way, its limit; wait for their answers"

    run(test)


def test_lines_a_client_can_cause_are_logged_within_a_quota(caplog: pytest.LogCaptureFixture) -> None:
    from ssebench.gateway._limits import LogQuota

    clock = Clock()
    noisy = logging.getLogger("tests.gateway.noisy")
    quota = LogQuota(burst=3, window=60, clock=clock)
    noisy.addFilter(quota)
    caplog.set_level(logging.INFO)
    try:
        for _ in range(1000):
            noisy.warning("Invalid HTTP request received.")
        noisy.warning("another kind of line")
        clock.now += 61
        noisy.warning("Invalid HTTP request received.")
    finally:
        noisy.removeFilter(quota)
    lines = [record.getMessage() for record in caplog.records]
    assert lines == ["Invalid HTTP request received."] * 3 + [
        "another kind of line",
        "997 more lines of tests.gateway.noisy like 'Invalid HTTP request received.' in 61 s were not logged",
        "Invalid HTTP request received.",
    ]
