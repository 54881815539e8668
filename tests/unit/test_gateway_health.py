"""Whether a model's upstream works: the gateway's account of calls that failed upstream, and the preflight check.

A run whose every model call failed upstream (unreachable, the provider key
refused, an unknown model, a 5xx) measured nothing of its agent: the
gateway counts such calls apart from the answered ones, so the host can
tell a broken model from an agent's failure without reading error strings.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from ssebench.gateway import Usage
from ssebench.gateway.scripted import Playback, create_app
from tests.helpers import closed_port
from tests.unit.test_gateway_server import MODELS, SECRET, TOKEN, Setup, _http_model, _setup, chat, run


def _calls(setup: Setup, count: int, model: str = "remote") -> Usage:
    """`count` calls of one run of `model`, then its finish: the usage the host gets."""

    async def calls() -> Usage:
        run_key = await setup.register(model=model)
        async with setup.model(run_key["key"]) as client:
            for assistants in range(count):
                await client.post("/v1/chat/completions", json=chat(model, assistants=assistants))
        return await setup.gateway.finish("run-1")

    result: list[Usage] = []

    async def test() -> None:
        result.append(await calls())

    run(test)
    return result[0]


def test_an_upstream_that_refuses_the_key_fails_every_call_upstream(tmp_path: Path) -> None:
    upstream = create_app(Playback.from_file(MODELS / "scripted" / "fix.yaml"), api_key="another-key")
    setup = _setup(tmp_path, {"remote": _http_model()}, {"TEST_PROVIDER_KEY": SECRET}, upstream)
    usage = _calls(setup, 3)
    assert (usage.calls, usage.answered, usage.upstream_failed) == (3, 0, 3)
    assert usage.upstream_failure == (
        "the upstream refused the gateway's credentials (401); the operator should check $TEST_PROVIDER_KEY"
    )
    assert usage.upstream_broken() == (
        "model remote: every call failed upstream (3 calls): the upstream refused the gateway's credentials (401); "
        "the operator should check $TEST_PROVIDER_KEY; the gateway's own call: http://upstream.test/v1/models "
        "refused the key in $TEST_PROVIDER_KEY (401)"
    )
    said = usage.model_dump_json()
    assert SECRET not in said and "wrong API key" not in said  # neither the key nor the body that may quote it


def test_an_upstream_on_a_closed_port_fails_every_call_upstream(tmp_path: Path) -> None:
    base_url = f"http://127.0.0.1:{closed_port()}/v1"
    setup = _setup(
        tmp_path, {"remote": _http_model().model_copy(update={"base_url": base_url})}, {"TEST_PROVIDER_KEY": SECRET}
    )
    usage = _calls(setup, 2)
    assert (usage.calls, usage.answered, usage.upstream_failed) == (2, 0, 2)
    said = usage.upstream_broken()
    assert said is not None and said.startswith(
        "model remote: every call failed upstream (2 calls): the upstream of model remote did not answer: ConnectError; "
        f"the gateway's own call: {base_url}/models did not answer"
    ), said


def test_an_upstream_that_does_not_know_the_model_fails_every_call_upstream(tmp_path: Path) -> None:
    upstream = create_app(Playback.from_file(MODELS / "scripted" / "fix.yaml"), model="another-id")
    setup = _setup(tmp_path, {"remote": _http_model()}, {"TEST_PROVIDER_KEY": SECRET}, upstream)
    usage = _calls(setup, 1)
    assert (usage.calls, usage.answered, usage.upstream_failed) == (1, 0, 1)
    assert usage.upstream_broken() == (
        "model remote: every call failed upstream (1 call): upstream answered 404: model 'upstream-id' does not exist; "
        "the gateway's own call: http://upstream.test/v1/models does not list the model"
    )


def _replying(*statuses: int) -> httpx.MockTransport:
    """An upstream answering each call with the next status (the last one from then on): a 200 is an answer."""
    seen: list[int] = []

    def reply(request: httpx.Request) -> httpx.Response:
        status = statuses[min(len(seen), len(statuses) - 1)]
        seen.append(status)
        if status == 200:
            answer = {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}
            return httpx.Response(200, json={**answer, "usage": {"prompt_tokens": 10, "completion_tokens": 2}})
        return httpx.Response(status, json={"error": {"type": "x", "message": f"status {status}\nsecond line"}})

    return httpx.MockTransport(reply)


@pytest.mark.parametrize(
    "statuses, counts, broken",
    [
        # An upstream down on every call: not the agent's failure.
        ((500,), (0, 3), "model remote: every call failed upstream (3 calls): upstream answered 500: status 500"),
        ((503, 502, 504), (0, 3), "model remote: every call failed upstream (3 calls): upstream answered 504: status"),
        # One good answer: the model worked, and the run is graded as usual.
        ((503, 503, 200), (1, 2), None),
        ((200, 500), (1, 2), None),
        # The upstream refused the agent's calls for themselves: the agent's doing, graded.
        ((400,), (0, 0), None),
        ((500, 400), (0, 1), None),
        # A rate limit is not a broken model (an agent can bring one on with its own calls).
        ((429,), (0, 0), None),
    ],
)
def test_a_run_is_broken_only_when_every_call_failed_upstream(
    tmp_path: Path, statuses: tuple[int, ...], counts: tuple[int, int], broken: str | None
) -> None:
    setup = _setup(tmp_path, {"remote": _http_model()}, {"TEST_PROVIDER_KEY": SECRET})
    setup.gateway.upstream_transport = _replying(*statuses)
    usage = _calls(setup, 3)
    assert (usage.calls, usage.answered, usage.upstream_failed) == (3, *counts)
    if broken is None:
        assert usage.upstream_broken() is None
    else:
        said = usage.upstream_broken()
        assert said is not None and said.startswith(broken) and "\n" not in said, said


def _streaming(*events: bytes) -> httpx.MockTransport:
    """An upstream answering every call 200 with a stream of these server-sent events, and the gateway's own
    check (its list of models) 503, as a failing server does."""

    def reply(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(503, json={"error": {"type": "overloaded_error", "message": "Overloaded"}})
        body = b"".join(b"data: " + event + b"\n\n" for event in events)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return httpx.MockTransport(reply)


OVERLOADED = b'{"error": {"type": "overloaded_error", "message": "Overloaded"}}'
ANSWER = b'{"choices": [{"delta": {"content": "ok"}}]}'
USAGE = b'{"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 2}}'


@pytest.mark.parametrize(
    "events, counts",
    [
        # A 200 whose stream is an error event answered nothing: the upstream failed, as a 5xx would have.
        ((OVERLOADED,), (0, 2)),
        ((ANSWER, OVERLOADED), (0, 2)),
        # The same stream ending as streams do: answered (the positive control).
        ((ANSWER, USAGE, b"[DONE]"), (2, 0)),
    ],
)
def test_a_stream_that_ends_in_an_error_event_failed_upstream(
    tmp_path: Path, events: tuple[bytes, ...], counts: tuple[int, int]
) -> None:
    setup = _setup(tmp_path, {"remote": _http_model()}, {"TEST_PROVIDER_KEY": SECRET})
    setup.gateway.upstream_transport = _streaming(*events)

    async def test() -> Usage:
        run_key = await setup.register(model="remote")
        async with setup.model(run_key["key"]) as client:
            for _ in range(2):
                streamed = await client.post("/v1/chat/completions", json=chat("remote", stream=True))
                assert streamed.status_code == 200 and streamed.content.startswith(b"data: ")
        return await setup.gateway.finish("run-1")

    result: list[Usage] = []

    async def calls() -> None:
        result.append(await test())

    run(calls)
    [usage] = result
    assert (usage.calls, usage.answered, usage.upstream_failed) == (2, *counts)
    if counts[0] == 0:
        assert usage.upstream_failure == "the upstream stream ended in an error event"
        said = usage.upstream_broken()
        assert said is not None and said.startswith("model remote: every call failed upstream (2 calls)"), said
    else:
        assert usage.upstream_broken() is None


def test_a_run_that_made_no_call_and_old_usage_are_never_broken(tmp_path: Path) -> None:
    setup = _setup(tmp_path, {"remote": _http_model()}, {"TEST_PROVIDER_KEY": SECRET})
    assert _calls(setup, 0).upstream_broken() is None  # the agent chose not to call
    # The usage of summaries written before the gateway counted failures: calls, and nothing of how they went.
    old = Usage.model_validate({"run_id": "r", "model": "m", "calls": 3, "prompt_tokens": 0, "budget": None})
    assert (old.answered, old.upstream_failed, old.upstream_failure, old.upstream_broken()) == (0, 0, None, None)


def test_a_scripted_model_that_answers_is_not_broken(tmp_path: Path) -> None:
    setup = _setup(tmp_path)
    usage = _calls(setup, 2, model="scripted-fix")
    assert (usage.calls, usage.answered, usage.upstream_failed, usage.upstream_broken()) == (2, 2, 0, None)


# -- the preflight check: POST /models/{name}/check ------------------------------------------------


def _check(setup: Setup, name: str, token: str = TOKEN) -> httpx.Response:
    answers: list[httpx.Response] = []

    async def test() -> None:
        async with setup.control(token) as control:
            answers.append(await control.post(f"/models/{name}/check"))

    run(test)
    return answers[0]


class Upstream:
    """A mock upstream answering GET /models with `status`; what it was sent is kept."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.requests: list[httpx.Request] = []
        self.transport = httpx.MockTransport(self.reply)

    def reply(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.status == 200:
            return httpx.Response(200, json={"object": "list", "data": [{"id": "upstream-id"}]})
        return httpx.Response(self.status, json={"error": {"message": f"Incorrect API key provided: {SECRET[:8]}..."}})


def test_the_check_needs_the_admin_token(tmp_path: Path) -> None:
    upstream = Upstream()
    setup = _setup(tmp_path, {"remote": _http_model()}, {"TEST_PROVIDER_KEY": SECRET})
    setup.gateway.upstream_transport = upstream.transport
    for token in ("", "not-the-token"):
        refused = _check(setup, "remote", token)
        assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"
    assert upstream.requests == []
    assert _check(setup, "nope").status_code == 404 and "no model 'nope'" in _check(setup, "nope").text


def test_the_check_lists_the_models_with_the_provider_key_and_never_returns_it(tmp_path: Path) -> None:
    upstream = Upstream()
    setup = _setup(tmp_path, {"remote": _http_model()}, {"TEST_PROVIDER_KEY": SECRET})
    setup.gateway.upstream_transport = upstream.transport
    answer = _check(setup, "remote")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "model": "remote",
        "ok": True,
        "url": "http://upstream.test/v1/models",
        "status": 200,
        "cause": None,
        "fix": None,
        "listed": True,
    }
    [sent] = upstream.requests
    assert (sent.method, str(sent.url)) == ("GET", "http://upstream.test/v1/models")
    assert sent.headers["authorization"] == f"Bearer {SECRET}" and SECRET not in answer.text


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_key_is_named_by_its_variable_never_by_its_value(tmp_path: Path, status: int) -> None:
    upstream = Upstream(status)
    setup = _setup(tmp_path, {"remote": _http_model()}, {"TEST_PROVIDER_KEY": SECRET})
    setup.gateway.upstream_transport = upstream.transport
    answer = _check(setup, "remote")
    assert answer.status_code == 200
    assert answer.json() == {
        "model": "remote",
        "ok": False,
        "url": "http://upstream.test/v1/models",
        "status": status,
        "cause": f"refused the key in $TEST_PROVIDER_KEY ({status})",
        "fix": "check the key",
        "listed": None,
    }
    assert SECRET[:8] not in answer.text and "Incorrect API key" not in answer.text


def test_an_unreachable_upstream_fails_the_check_naming_the_url_and_the_model_file(tmp_path: Path) -> None:
    port = closed_port()
    model = _http_model().model_copy(update={"base_url": f"http://127.0.0.1:{port}/v1", "source": tmp_path / "r.yaml"})
    setup = _setup(tmp_path, {"remote": model}, {"TEST_PROVIDER_KEY": SECRET})
    found = _check(setup, "remote").json()
    assert (found["ok"], found["url"], found["status"]) == (False, f"http://127.0.0.1:{port}/v1/models", None)
    assert found["cause"].startswith("did not answer (ConnectError"), found
    assert found["fix"] == f"check base_url in {tmp_path / 'r.yaml'} and that the server is up"


def test_a_server_that_answers_without_refusing_the_key_passes(tmp_path: Path) -> None:
    """Only an unreachable server or a refused key stops a session: a server without /models still serves."""
    for status in (404, 500):
        upstream = Upstream(status)
        setup = _setup(tmp_path, {"remote": _http_model()}, {"TEST_PROVIDER_KEY": SECRET})
        setup.gateway.upstream_transport = upstream.transport
        found = _check(setup, "remote").json()
        assert (found["ok"], found["status"]) == (True, status)


def test_a_scripted_model_passes_without_a_call(tmp_path: Path) -> None:
    upstream = Upstream()
    setup = _setup(tmp_path)
    setup.gateway.upstream_transport = upstream.transport
    found = _check(setup, "scripted-fix").json()
    assert (found["ok"], found["url"]) == (True, None) and upstream.requests == []


def test_an_anthropic_messages_model_is_checked_with_its_own_headers(tmp_path: Path) -> None:
    upstream = Upstream()
    model = _http_model().model_copy(update={"protocol": "anthropic-messages"})
    setup = _setup(tmp_path, {"remote": model}, {"TEST_PROVIDER_KEY": SECRET})
    setup.gateway.upstream_transport = upstream.transport
    assert _check(setup, "remote").json()["ok"] is True
    [sent] = upstream.requests
    assert str(sent.url) == "http://upstream.test/v1/models" and "authorization" not in sent.headers
    assert sent.headers["x-api-key"] == SECRET and sent.headers["anthropic-version"] == "2023-06-01"


def _serving_but_refusing_calls(status: int) -> httpx.MockTransport:
    """A healthy upstream that lists the model, and answers every call of the agent's with `status`: what an
    agent brings about with its own bodies (an item it names that does not exist, a call past the read
    timeout, a template the server cannot render)."""

    def reply(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path.endswith("/models"):
            return httpx.Response(200, json={"object": "list", "data": [{"id": "upstream-id", "object": "model"}]})
        return httpx.Response(status, json={"error": {"type": "x", "message": f"no such item ({status})"}})

    return httpx.MockTransport(reply)


@pytest.mark.parametrize("status", [404, 500, 502])
def test_calls_an_agent_made_fail_do_not_make_a_working_model_broken(tmp_path: Path, status: int) -> None:
    """Every call failed upstream, but the gateway's own call finds the server up, taking the key and listing
    the model: the failures were the calls' own, and the run is graded (a failure must stay a failure)."""
    setup = _setup(tmp_path, {"remote": _http_model()}, {"TEST_PROVIDER_KEY": SECRET})
    setup.gateway.upstream_transport = _serving_but_refusing_calls(status)
    usage = _calls(setup, 2)
    assert (usage.calls, usage.answered, usage.upstream_failed) == (2, 0, 2)  # each failed upstream, as counted
    assert usage.upstream_confirmed is None and usage.upstream_broken() is None


def test_a_scripted_models_own_errors_are_never_a_broken_model(tmp_path: Path) -> None:
    """A script out of its steps answers 500: the agent's doing (it called past the script), never infrastructure."""
    setup = _setup(tmp_path)

    async def calls() -> Usage:
        run_key = await setup.register(model="scripted-fix")
        async with setup.model(run_key["key"]) as client:
            answer = await client.post("/v1/chat/completions", json=chat("scripted-fix", assistants=40))
            assert answer.status_code == 500 and "out_of_script" in answer.text  # the control: the script's 500
        return await setup.gateway.finish("run-1")

    result: list[Usage] = []

    async def test() -> None:
        result.append(await calls())

    run(test)
    [usage] = result
    assert (usage.calls, usage.answered, usage.upstream_failed) == (1, 0, 1)
    assert usage.upstream_broken() is None
