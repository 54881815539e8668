"""The gateway: per-run keys, budgets and accounting in front of model upstreams.

Two kinds of listener share one `Gateway` in one process:

- the CONTROL listener (127.0.0.1, admin bearer token): the harness registers
  a run (`POST /runs`), gets its key and base URL, and finishes it
  (`POST /runs/{id}/finish`) to get its usage;
- MODEL listeners, one per address runs are served on (a run network's
  gateway IP, where only that network's containers reach it), with the
  run's key: `POST /v1/chat/completions` (OpenAI Chat Completions),
  `POST /v1/responses` (OpenAI Responses), `POST /v1/messages` (Anthropic
  Messages) and `/v1/messages/count_tokens`, `GET /v1/models`. A call goes
  upstream in its own protocol, which must be the model's (`_apis.py`); a
  streamed answer passes to the agent as it comes, its usage read on the way.

A key is valid only for its run's model, only while the run is registered
and not expired, and only on the listener its run was registered for. The
upstream request carries the provider key from the gateway's environment;
nothing the agent can see ever holds it.

One process serves every run, and each run's agent is hostile: a body is
read within a size and a time and parsed once, within a nesting depth; a
call goes upstream as the parameters its API's allow-list names
(`_apis.py`), within the model's output cap; a run's refused calls are
counted, not kept; a run has a few requests under way at most; and the
listeners limit connections (`_listeners.py`). Every call forwarded is
recorded, and none is forwarded once its run is finishing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn, Protocol

import httpx
from pydantic import ConfigDict, Field, ValidationError, field_validator
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ssebench.defaults import ModelProtocol
from ssebench.gateway._apis import ANTHROPIC_VERSION, APIS, MESSAGES, Api, BadCall, FetchRefused, counted_tokens
from ssebench.gateway._health import check_upstream, failed_upstream, still_broken
from ssebench.gateway._limits import (
    KEPT_NETWORK_REFUSALS,
    KEPT_REFUSALS,
    LOGGED_REFUSALS,
    MAX_BODY_BYTES,
    MAX_DEPTH,
    MAX_JSON_VALUES,
    GatewayLimits,
    LogQuota,
)
from ssebench.gateway._listeners import Connections, UvicornListeners, listen, server
from ssebench.gateway._models import MODEL_PORT, Budget, ModelConfig
from ssebench.gateway._usage import StreamUsage, Tokens, Usage, UsageRecord, estimate_said, estimated, usage_of
from ssebench.gateway.scripted import Playback, Reply, error_body, error_reply
from ssebench.schema import Strict
from ssebench.settings import get_settings

log = logging.getLogger("ssebench.gateway")
# Failures of the gateway's own code: logged with their traceback, within a quota (serve()).
errors = logging.getLogger("ssebench.gateway.errors")

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_TTL_SECONDS = 7 * 24 * 3600
# Upstream answers can take minutes for long outputs; connecting cannot.
UPSTREAM_TIMEOUT = httpx.Timeout(600.0, connect=15.0)
# Chunks of a streamed answer held for an agent that reads slower than the upstream sends: then
# the upstream waits (a stream's chunks are small: tokens).
PIPE_CHUNKS = 256
# The agent's headers passed upstream (the Api's `headers`) are short printable ASCII.
HEADER_VALUE = re.compile(r"^[\x20-\x7e]{1,512}$")


class GatewayRefusal(Exception):
    """A request the gateway answers with an error of its own: status, type, message.

    `close` ends the connection after the answer: the body was not read
    (whole), and reading it only to throw it away is what the client wants.
    """

    def __init__(self, status: int, kind: str, message: str, *, close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.close = close

    def response(self, protocol: ModelProtocol = "openai-chat") -> Response:
        return JSONResponse(
            error_body(self.kind, self.message, protocol),
            self.status,
            headers={"connection": "close"} if self.close else None,
        )


class RunRequest(Strict):
    """The body of `POST /runs`."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    run_id: str
    model: str
    bind_host: str
    ttl_seconds: float = Field(gt=0, le=MAX_TTL_SECONDS)
    budget: Budget | None = None
    port: int | None = Field(default=None, ge=0, le=65535)

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, value: str) -> str:
        if not RUN_ID.match(value):
            raise ValueError("must be letters, digits, '.', '_' or '-' (at most 128), starting with a letter or digit")
        return value

    @field_validator("bind_host")
    @classmethod
    def _host(cls, value: str) -> str:
        try:
            address = ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"'{value}' must be an IP address (a run network's gateway IP, or 127.0.0.1)") from None
        if address.is_unspecified:
            raise ValueError(f"'{value}' would listen on every interface; give the run network's gateway IP")
        return str(address)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass
class Run:
    run_id: str
    model: ModelConfig
    key_digest: str
    host: str
    base_url: str
    expires_at: float
    budget: Budget | None
    usage_file: Path
    records: list[UsageRecord] = field(default_factory=list)
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost: float = 0.0
    refused: int = 0
    rejected: int = 0
    unrecorded: int = 0
    stopped: str | None = None
    # Calls forwarded that the upstream answered (200), and that failed there (_health.failed_upstream).
    answered: int = 0
    upstream_failed: int = 0
    upstream_failure: str | None = None
    upstream_confirmed: str | None = None
    network_refused: int = 0
    network_refusals: list[dict[str, str]] = field(default_factory=list)
    # Requests under way (from the key's check to the answer), and the calls among them, queued or upstream.
    active: int = 0
    calls_under_way: set[asyncio.Task[Reply]] = field(default_factory=set)
    finishing: bool = False
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def usage(self) -> Usage:
        return Usage(
            run_id=self.run_id,
            model=self.model.name,
            calls=self.calls,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cache_read_tokens=self.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens,
            total_tokens=self.prompt_tokens + self.completion_tokens,
            cost=round(self.cost, 10),
            refused=self.refused,
            rejected=self.rejected,
            unrecorded=self.unrecorded,
            stopped=self.stopped,
            budget=self.budget,
            answered=self.answered,
            upstream_failed=self.upstream_failed,
            upstream_failure=self.upstream_failure,
            upstream_confirmed=self.upstream_confirmed,
            network_refused=self.network_refused,
            network_refusals=[dict(entry) for entry in self.network_refusals],
            records=list(self.records),
        )

    def exhausted(self) -> str | None:
        if self.budget is None:
            return None
        return self.budget.exhausted(self.prompt_tokens + self.completion_tokens, self.cost)


class Listeners(Protocol):
    """Where model listeners come from: real sockets in the gateway process, fakes in tests."""

    async def acquire(self, host: str, port: int) -> int:
        """Listen on host:port (or join the listener already there); return the port. Raises OSError."""

    async def release(self, host: str) -> None:
        """One run less on host; the last one closes the listener."""


@dataclass
class Gateway:
    """Every run's key, budget and records; the control and model apps are views of it."""

    models: dict[str, ModelConfig]
    state_dir: Path
    listeners: Listeners
    model_port: int = MODEL_PORT
    upstream_transport: httpx.AsyncBaseTransport | None = None
    clock: Callable[[], float] = time.time
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    limits: GatewayLimits = field(default_factory=lambda: GatewayLimits.from_settings(get_settings()))
    runs: dict[str, Run] = field(default_factory=dict)
    _keys: dict[str, Run] = field(default_factory=dict)
    _registering: set[str] = field(default_factory=set)
    _playbacks: dict[str, Playback] = field(default_factory=dict)
    _client: httpx.AsyncClient | None = None

    # -- runs --------------------------------------------------------------

    def model(self, name: str) -> ModelConfig:
        """The model served as `name`. Raises GatewayRefusal (404)."""
        model = self.models.get(name)
        if model is None:
            known = ", ".join(sorted(self.models)) or "none"
            raise GatewayRefusal(404, "unknown_model", f"no model '{name}' (models: {known})")
        return model

    async def register(self, request: RunRequest) -> dict[str, Any]:
        """A key for a run of one model, served on `bind_host`. Raises GatewayRefusal."""
        model = self.model(request.model)
        if request.run_id in self.runs or request.run_id in self._registering:
            raise GatewayRefusal(409, "conflict", f"run '{request.run_id}' is already registered")
        if model.api_key_env and not self.environ.get(model.api_key_env):
            raise GatewayRefusal(
                400,
                "missing_provider_key",
                f"model '{model.name}' needs the provider key in ${model.api_key_env} on the "
                "host; export it before starting the session",
            )
        usage_dir = self.state_dir / "usage"
        usage_dir.mkdir(parents=True, exist_ok=True)
        usage_file = usage_dir / f"{request.run_id}.jsonl"
        if usage_file.resolve().parent != usage_dir.resolve():
            raise GatewayRefusal(400, "invalid_request", f"run_id '{request.run_id}' is not a plain name")
        self._registering.add(request.run_id)  # the listener is awaited: no second registration meanwhile
        try:
            port = await self.listeners.acquire(
                request.bind_host, self.model_port if request.port is None else request.port
            )
        except OSError as exc:
            raise GatewayRefusal(
                500,
                "listen_failed",
                f"cannot listen on {request.bind_host}: {exc.strerror or exc}; "
                "is it the gateway IP of an existing network?",
            ) from None
        finally:
            self._registering.discard(request.run_id)
        host = f"[{request.bind_host}]" if ":" in request.bind_host else request.bind_host
        key = "sse-run-" + secrets.token_urlsafe(32)
        run = Run(
            run_id=request.run_id,
            model=model,
            key_digest=key_hash(key),
            host=request.bind_host,
            base_url=f"http://{host}:{port}/v1",
            expires_at=self.clock() + request.ttl_seconds,
            budget=request.budget or model.budget,
            usage_file=usage_file,
        )
        self.runs[run.run_id] = run
        self._keys[run.key_digest] = run
        log.info("run %s registered: model %s on %s", run.run_id, model.name, run.base_url)
        return {
            "run_id": run.run_id,
            "key": key,
            "base_url": run.base_url,
            "model": model.name,
            "expires_at": run.expires_at,
        }

    def find(self, run_id: str) -> Run:
        run = self.runs.get(run_id)
        if run is None:
            raise GatewayRefusal(404, "unknown_run", f"no run '{run_id}' is registered")
        return run

    async def finish(self, run_id: str, *, wait: float | None = None) -> Usage:
        """Stop a run's calls, revoke its key, close its listener; return its usage.

        From the first moment no call of the run goes upstream. Calls already
        upstream get `wait` seconds (default: the finish wait) to answer; the
        late ones are cancelled and recorded as such, so the usage returned
        holds every call forwarded. Finishing twice returns the same usage.
        """
        run = self.find(run_id)
        if run.finishing:
            await run.finished.wait()
            return run.usage()
        run.finishing = True
        if run.calls_under_way:
            _, late = await asyncio.wait(
                set(run.calls_under_way), timeout=self.limits.finish_wait if wait is None else wait
            )
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)
        self._keys.pop(run.key_digest, None)
        await self.listeners.release(run.host)
        if run.calls and not run.answered and run.upstream_failed >= run.calls:
            # Every call failed upstream: the model's server, or the agent's own bodies? The gateway's own call,
            # with nothing of the agent's in it, tells them apart (`_health.still_broken`).
            run.upstream_confirmed = still_broken(
                await check_upstream(run.model, self.environ, self.upstream_transport)
            )
        run.finished.set()
        log.info(
            "run %s finished: %d calls, %d tokens, %d refused for the budget, %d rejected",
            run.run_id,
            run.calls,
            run.prompt_tokens + run.completion_tokens,
            run.refused,
            run.rejected,
        )
        return run.usage()

    async def close(self) -> None:
        # The process is stopping: calls under way are cut short (and recorded) at once.
        await asyncio.gather(*(self.finish(run_id, wait=0) for run_id in list(self.runs)))
        if self._client is not None:
            await self._client.aclose()

    # -- model calls ---------------------------------------------------------

    def authorise(self, request: Request, host: str) -> Run:
        """The run whose key the request carries, on this listener. Raises GatewayRefusal (401).

        The key comes as `Authorization: Bearer <key>` (OpenAI's SDKs, and
        Anthropic's with an auth token) or as `x-api-key: <key>` (Anthropic's
        SDK and Claude Code). Its refusals close the connection: the body is
        not read for a caller without a key.
        """
        header = request.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            key = request.headers.get("x-api-key", "")
        if not key.strip():
            raise _unauthorised("send the run's key as 'Authorization: Bearer <key>' or as 'x-api-key: <key>'")
        run = self._keys.get(key_hash(key.strip()))
        if run is None or run.host != host:
            raise _unauthorised("invalid key: not a key of a run served here")
        if run.finishing:
            raise _unauthorised(_revoked(run))
        if self.clock() >= run.expires_at:
            raise _unauthorised(f"the key of run {run.run_id} has expired")
        return run

    async def _read_json(self, run: Run, request: Request, api: Api) -> tuple[dict[str, Any], int]:
        """A call's body (and its size): read, parsed, its model checked. Raises GatewayRefusal."""
        try:
            raw = await self._read_body(request)
            body = _parse(raw)
        except MemoryError:
            raise GatewayRefusal(
                503, "overloaded", "the gateway has no memory for this request now; retry later", close=True
            ) from None
        size = len(raw)
        del raw  # what waits for its turn is the upstream body only
        if not isinstance(body, dict):
            lists = " and ".join(f"a {name} list" for name in api.lists)
            raise GatewayRefusal(
                400, "invalid_request_error", "the body must be a JSON object" + (f" with {lists}" if lists else "")
            )
        if body.get("model") != run.model.name:
            raise GatewayRefusal(
                403,
                "permission_error",
                f"this key is for model '{run.model.name}' only, not '{_shown(body.get('model'))}'",
            )
        return body, size

    async def _read_call(self, run: Run, request: Request, api: Api) -> Call:
        """The upstream call of a request in `api`'s protocol: read, parsed, checked. Raises GatewayRefusal."""
        body, _ = await self._read_json(run, request, api)
        try:
            upstream = api.upstream_body(
                body, model=run.model.upstream_id, max_output_tokens=run.model.max_output_tokens
            )
        except FetchRefused as exc:
            self.refuse_network(run, request.url.path, str(exc))
            raise GatewayRefusal(400, "invalid_request_error", str(exc)) from None
        except BadCall as exc:
            raise GatewayRefusal(400, "invalid_request_error", str(exc)) from None
        headers: dict[str, str] = {}
        for name in api.headers:
            value = request.headers.get(name)
            if value is None:
                continue
            if not HEADER_VALUE.match(value):
                raise GatewayRefusal(
                    400, "invalid_request_error", f"the {name} header must be printable ASCII of at most 512 characters"
                )
            headers[name] = value
        # ASCII: a lone surrogate the agent sent escaped goes on escaped, as the agent sent it.
        payload = json.dumps(upstream, separators=(",", ":")).encode()
        return Call(api, payload, stream=upstream.get("stream") is True, headers=headers)

    async def _read_body(self, request: Request) -> bytearray:
        """The body, read as it comes: refused (413) once past the cap, or (408) when it is too slow."""
        too_large = f"request body too large: the gateway takes at most {MAX_BODY_BYTES >> 20} MiB"
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            raise GatewayRefusal(413, "invalid_request_error", too_large, close=True)
        raw = bytearray()
        try:
            async with asyncio.timeout(self.limits.body_timeout):
                async for chunk in request.stream():
                    if len(raw) + len(chunk) > MAX_BODY_BYTES:
                        raise GatewayRefusal(413, "invalid_request_error", too_large, close=True)
                    raw += chunk
        except TimeoutError:
            raise GatewayRefusal(
                408, "request_timeout", f"the body did not arrive within {self.limits.body_timeout:g} s", close=True
            ) from None
        except ClientDisconnect:
            raise GatewayRefusal(
                400, "invalid_request_error", "the client left before sending the whole body", close=True
            ) from None
        return raw

    def _playback(self, model: ModelConfig) -> Playback:
        if model.name not in self._playbacks:
            assert model.script_path is not None
            self._playbacks[model.name] = Playback.from_file(model.script_path)
        return self._playbacks[model.name]

    async def _upstream(
        self, run: Run, call: Call, pipe: Pipe | None, meter: StreamUsage
    ) -> tuple[Reply, Tokens, str | None]:
        """The call's answer from its upstream, with its tokens and the problem of its usage, if any.

        A streamed answer goes to `pipe` as it comes (the Reply returned has
        no body); `meter` reads its usage on the way.
        """
        model, protocol = run.model, call.api.protocol
        if model.script is not None:
            reply = self._playback(model).respond(json.loads(call.payload), caller=run.run_id, protocol=protocol)
            if reply.chunks and pipe is not None:
                return await _relay(reply.status, reply.content_type, _each(reply.chunks), pipe, meter)
            return _measured(protocol, reply)
        assert model.base_url is not None
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=UPSTREAM_TIMEOUT, transport=self.upstream_transport, follow_redirects=False
            )
        headers = {"content-type": "application/json", **call.headers}
        key = self.environ.get(model.api_key_env, "") if model.api_key_env else None
        if protocol == "anthropic-messages":
            headers.setdefault("anthropic-version", ANTHROPIC_VERSION)
            if key is not None:
                headers["x-api-key"] = key
        elif key is not None:
            headers["authorization"] = f"Bearer {key}"
        request = self._client.build_request(
            "POST", f"{model.base_url}{call.api.path}", content=call.payload, headers=headers
        )
        try:
            response = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            failed = _failed(
                502,
                "upstream_unreachable",
                f"the upstream of model {model.name} did not answer: {type(exc).__name__}",
                protocol,
            )
            # A connection never made sent nothing; any later failure sent the call, which may be billed.
            return failed if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout) else _sent(failed, call)
        try:
            if response.status_code in (401, 403):
                # Never pass these bodies on: providers quote (part of) the key they refused.
                return _failed(
                    502,
                    "upstream_auth_error",
                    f"the upstream refused the gateway's credentials ({response.status_code}); "
                    f"the operator should check ${model.api_key_env or '(no api_key_env)'}",
                    protocol,
                )
            content_type = response.headers.get("content-type", "application/json").split(";")[0].strip()
            if pipe is not None and response.status_code == 200 and content_type == "text/event-stream":
                return await _relay(200, content_type, response.aiter_bytes(), pipe, meter)
            try:
                body = await response.aread()
            except httpx.HTTPError as exc:
                return _sent(
                    _failed(
                        502,
                        "upstream_unreachable",
                        f"the upstream of model {model.name} broke off: {type(exc).__name__}",
                        protocol,
                    ),
                    call,
                )
            return _measured(protocol, Reply(response.status_code, body, content_type))
        finally:
            await response.aclose()

    def _record(self, run: Run, record: UsageRecord) -> None:
        run.records.append(record)
        run.prompt_tokens += record.prompt_tokens
        run.completion_tokens += record.completion_tokens
        run.cache_read_tokens += record.cache_read_tokens
        run.cache_write_tokens += record.cache_write_tokens
        run.cost += record.cost
        with run.usage_file.open("a", encoding="utf-8") as out:
            out.write(record.model_dump_json() + "\n")

    def refuse(self, run: Run, status: int, error: str, *, budget: bool = False) -> None:
        """Count a call of `run` refused before it went upstream: the first few are records, the rest a count.

        A refusal costs the agent nothing, so a hostile one can send millions:
        each kept would grow the gateway, the usage file, the log and the
        finish that returns them.
        """
        if budget:
            run.refused += 1
        else:
            run.rejected += 1
        refusals = run.refused + run.rejected
        if refusals <= KEPT_REFUSALS:
            self._record(
                run, UsageRecord(ts=self.clock(), run=run.run_id, model=run.model.name, status=status, error=error)
            )
        else:
            run.unrecorded += 1
        if refusals <= LOGGED_REFUSALS:
            log.info(
                "run %s: refused (%d): %s%s",
                run.run_id,
                status,
                error,
                "; further refusals are counted, not logged" if refusals == LOGGED_REFUSALS else "",
            )

    def refuse_network(self, run: Run, route: str, reason: str) -> None:
        """Count a request of `run` that would have gone out of its network (a shortcut signal of the run's):
        the first few kept, the rest counted."""
        run.network_refused += 1
        if len(run.network_refusals) < KEPT_NETWORK_REFUSALS:
            run.network_refusals.append({"kind": "gateway", "route": route[:200], "reason": reason[:200]})

    async def complete(self, run: Run, call: Call) -> Reply | Pipe:
        """One call of `run`: the budget, the upstream call, its record.

        The call is a task of its own, which the request only waits for: once
        upstream, it is recorded even if the request is cancelled or its
        agent leaves mid-stream (the rest of the stream is read for its
        usage). A streamed answer is a Pipe as soon as its first bytes come;
        anything else (an error, a refusal, a whole answer) is a Reply.
        """
        pipe = Pipe() if call.stream else None
        task = asyncio.create_task(self._complete(run, call, pipe))
        run.calls_under_way.add(task)
        task.add_done_callback(run.calls_under_way.discard)
        if pipe is None:
            return await asyncio.shield(task)
        opened = asyncio.ensure_future(pipe.opened.wait())
        try:
            await asyncio.wait({task, opened}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            pipe.leave()
            raise
        finally:
            opened.cancel()
        return pipe if pipe.opened.is_set() else task.result()

    async def _complete(self, run: Run, call: Call, pipe: Pipe | None) -> Reply:
        protocol = call.api.protocol
        try:
            async with run.lock:  # a run's calls one at a time: its budget is exact
                if run.finishing:
                    return self._finished_before(run, protocol)
                why = run.exhausted()
                if why is not None:
                    run.stopped = run.stopped or f"budget exhausted: {why}"
                    self.refuse(run, 429, "budget exhausted", budget=True)
                    refused = error_reply(
                        429,
                        "budget_exhausted",
                        f"the run's budget is exhausted ({why}); no more calls are forwarded",
                        protocol,
                    )
                    # A 429 is retried by the providers' SDKs (Claude Code: 10 times, over minutes) unless
                    # the answer says not to; this one will not change, so the agent should stop at once.
                    return replace(refused, headers=(("x-should-retry", "false"),))
                return await self._forward(run, call, pipe)
        except asyncio.CancelledError:  # the run finished while this call waited for its turn
            return self._finished_before(run, protocol)

    def _finished_before(self, run: Run, protocol: ModelProtocol) -> Reply:
        self.refuse(run, 401, "the run finished before the call's turn")
        return error_reply(401, "authentication_error", _revoked(run), protocol)

    async def _forward(self, run: Run, call: Call, pipe: Pipe | None) -> Reply:
        started = time.monotonic()
        run.calls += 1
        meter = StreamUsage(call.api.protocol, sent=len(call.payload))
        try:
            reply, tokens, error = await self._upstream(run, call, pipe, meter)
        except asyncio.CancelledError:
            # Finishing gave up waiting: the upstream may bill this call, so it is recorded, with the
            # tokens its stream reported so far (else an estimate of its prompt, `estimated`).
            cut = "cancelled: the run finished while the call was upstream; the upstream may bill it"
            tokens, _ = meter.result()
            self._record(run, self._usage_record(run, 503, tokens, started, cut))
            log.warning("run %s: %s", run.run_id, cut)
            return error_reply(
                503, "run_finished", f"run {run.run_id} finished while this call was upstream", call.api.protocol
            )
        # A 200 whose stream ended in an error event, or broke off, answered nothing: the upstream failed.
        failure = meter.failure if reply.status == 200 else failed_upstream(reply)
        if failure is not None:
            run.upstream_failed += 1
            run.upstream_failure = failure
        elif reply.status == 200:
            run.answered += 1
        self._record(run, self._usage_record(run, reply.status, tokens, started, error))
        log.info(
            "run %s: %s %s -> %d, %d+%d tokens, %.2fs%s",
            run.run_id,
            run.model.name,
            call.api.protocol,
            reply.status,
            tokens.prompt,
            tokens.completion,
            time.monotonic() - started,
            f", {error}" if error else "",
        )
        if (why := run.exhausted()) is not None:
            run.stopped = run.stopped or f"budget exhausted: {why}"
        return reply

    def _usage_record(self, run: Run, status: int, tokens: Tokens, started: float, error: str | None) -> UsageRecord:
        return UsageRecord(
            ts=self.clock(),
            run=run.run_id,
            model=run.model.name,
            status=status,
            prompt_tokens=tokens.prompt,
            completion_tokens=tokens.completion,
            cache_read_tokens=tokens.cache_read,
            cache_write_tokens=tokens.cache_write,
            cost=run.model.price.cost(*tokens),
            latency=round(time.monotonic() - started, 4),
            error=error,
        )

    # -- the apps ------------------------------------------------------------

    def _admit(self, request: Request, host: str, protocol: ModelProtocol) -> Run:
        """The run of a request on a route of `protocol`, if its key, its model and its load allow. Raises GatewayRefusal."""
        run = self.authorise(request, host)
        if protocol not in run.model.protocols:
            served = ", ".join(sorted(run.model.protocols))
            self._turn_away(
                run,
                404,
                "not_found_error",
                f"model '{run.model.name}' speaks {served}, not {protocol}: call its route, or pick a model of {protocol}",
            )
        if run.active >= self.limits.run_requests:
            self._turn_away(
                run,
                429,
                "too_many_requests",
                f"run {run.run_id} has {run.active} requests under way, its limit; wait for their answers",
            )
        return run

    def _turn_away(self, run: Run, status: int, kind: str, message: str) -> NoReturn:
        """Refuse a request of `run` before its body is read: counted as the run's, and its connection closed."""
        self.refuse(run, status, message)
        raise GatewayRefusal(status, kind, message, close=True)

    def model_app(self, host: str) -> Starlette:
        """The app of the model listener on `host`: keys of runs registered for `host` only."""

        def calls(api: Api) -> Callable[[Request], Awaitable[Response]]:
            async def answer(request: Request) -> Response:
                try:
                    run = self._admit(request, host, api.protocol)
                except GatewayRefusal as refusal:
                    return refusal.response(api.protocol)
                run.active += 1
                streaming = False
                try:
                    try:
                        call = await self._read_call(run, request, api)
                    except GatewayRefusal as refusal:
                        self.refuse(run, refusal.status, refusal.message)
                        return refusal.response(api.protocol)
                    outcome = await self.complete(run, call)
                    if isinstance(outcome, Pipe):
                        streaming = True  # the request is under way until its stream ends

                        def ended() -> None:
                            run.active -= 1

                        return Relayed(outcome, ended)
                except Exception:  # a bug of ours: one answer in the error shape, the traceback logged within a quota
                    errors.exception("run %s: the gateway failed a model call", run.run_id)
                    return GatewayRefusal(500, "gateway_error", "the gateway failed this call; see its log").response(
                        api.protocol
                    )
                finally:
                    if not streaming:
                        run.active -= 1
                return Response(
                    outcome.body, outcome.status, headers=dict(outcome.headers), media_type=outcome.content_type
                )

            return answer

        async def count_tokens(request: Request) -> Response:
            # Answered here, for every model of Messages: no model call, so neither forwarded,
            # budgeted nor recorded (see counted_tokens).
            try:
                run = self._admit(request, host, MESSAGES.protocol)
            except GatewayRefusal as refusal:
                return refusal.response(MESSAGES.protocol)
            run.active += 1
            try:
                _, size = await self._read_json(run, request, MESSAGES)
            except GatewayRefusal as refusal:
                self.refuse(run, refusal.status, refusal.message)
                return refusal.response(MESSAGES.protocol)
            finally:
                run.active -= 1
            return JSONResponse({"input_tokens": counted_tokens(size)})

        async def models(request: Request) -> Response:
            try:
                run = self.authorise(request, host)
            except GatewayRefusal as refusal:
                return refusal.response()
            name = run.model.name
            # One list in both shapes: OpenAI's (object, owned_by) and Anthropic's (type, display_name, has_more).
            entry = {"id": name, "object": "model", "owned_by": "ssebench", "type": "model", "display_name": name}
            return JSONResponse(
                {
                    "object": "list",
                    "data": [{**entry, "created_at": "2026-01-01T00:00:00Z"}],
                    "has_more": False,
                    "first_id": name,
                    "last_id": name,
                }
            )

        async def unserved(request: Request) -> Response:
            # A path the gateway does not serve: with a run's key, a request of that run's that the network
            # refused (a shortcut signal: another service, a provider's file or fetch API); without one, a 404.
            path = request.url.path[:200]  # the agent's: quoted short
            if path in served:  # a model route asked with another method
                methods = ", ".join(sorted(served[path]))
                return GatewayRefusal(405, "invalid_request_error", f"{path} answers {methods} only").response()
            message = f"the gateway serves no {request.method} {path}: only its model routes"
            try:
                run = self.authorise(request, host)
            except GatewayRefusal:
                return GatewayRefusal(404, "not_found_error", message, close=True).response()
            self.refuse(run, 404, message)
            self.refuse_network(run, f"{request.method} {path}", message)
            return GatewayRefusal(404, "not_found_error", message, close=True).response()

        routes = [
            *(Route(f"/v1{api.path}", calls(api), methods=["POST"]) for api in APIS.values()),
            Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
        ]
        served = {route.path: route.methods or set() for route in routes}
        return Starlette(
            routes=[
                *routes,
                Route("/{path:path}", unserved, methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]),
            ]
        )

    def control_app(self, admin_token: str) -> Starlette:
        """The harness's API, behind the admin token."""

        def check(request: Request) -> None:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {admin_token}".encode()):
                raise GatewayRefusal(401, "authentication_error", "the control API needs the admin token")

        async def health(request: Request) -> Response:
            check(request)
            live = [r for r in self.runs.values() if not r.finished.is_set()]
            return JSONResponse(
                {
                    "status": "ok",
                    "models": sorted(self.models),
                    "runs": len(live),
                    "listeners": sorted({r.host for r in live}),
                }
            )

        async def register(request: Request) -> Response:
            check(request)
            try:
                data = json.loads(await request.body())
                run_request = RunRequest.model_validate(data)
            except ValueError as exc:  # ValidationError is a ValueError
                raise GatewayRefusal(400, "invalid_request", _first_problem(exc)) from None
            return JSONResponse(await self.register(run_request))

        async def finish(request: Request) -> Response:
            check(request)
            return JSONResponse((await self.finish(request.path_params["run_id"])).model_dump())

        async def usage(request: Request) -> Response:
            check(request)
            return JSONResponse(self.find(request.path_params["run_id"]).usage().model_dump())

        async def check_model(request: Request) -> Response:
            check(request)
            model = self.model(request.path_params["name"])
            if model.base_url is None:
                log.info("model %s: scripted, nothing to check", model.name)
            found = await check_upstream(model, self.environ, self.upstream_transport)
            if found.url is not None:
                log.info(
                    "model %s: checked %s: %s",
                    model.name,
                    found.url,
                    f"{found.status}" if found.ok else f"{found.cause}; {found.fix}",
                )
            return JSONResponse(found.model_dump())

        async def on_refusal(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, GatewayRefusal)
            return exc.response()

        return Starlette(
            routes=[
                Route("/health", health, methods=["GET"]),
                Route("/runs", register, methods=["POST"]),
                Route("/runs/{run_id}/finish", finish, methods=["POST"]),
                Route("/runs/{run_id}/usage", usage, methods=["GET"]),
                Route("/models/{name}/check", check_model, methods=["POST"]),
            ],
            exception_handlers={GatewayRefusal: on_refusal},
        )


def _unauthorised(message: str) -> GatewayRefusal:
    return GatewayRefusal(401, "authentication_error", message, close=True)


def _revoked(run: Run) -> str:
    return f"run {run.run_id} has finished; its key is revoked"


def _first_problem(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        return f"{where}: {message}" if where else message
    return "the body is not JSON"


@dataclass(frozen=True)
class Call:
    """A model call as it goes upstream: its API, its body, whether it streams, the agent's headers passed on."""

    api: Api
    payload: bytes
    stream: bool = False
    headers: dict[str, str] = field(default_factory=dict)


class Pipe:
    """A streamed answer on its way from the call's task to the agent: its head, then its chunks.

    The task puts each chunk as it comes; an agent reading slower makes it
    wait (PIPE_CHUNKS), an agent that left (`leave`) does not: the task
    reads on to the stream's end for its usage, and drops the chunks.
    """

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.status = 200
        self.content_type = "text/event-stream"
        self.gone = False
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._room = asyncio.Event()

    def open(self, status: int, content_type: str) -> None:
        self.status, self.content_type = status, content_type
        self.opened.set()

    async def put(self, chunk: bytes) -> None:
        while not self.gone and self._queue.qsize() >= PIPE_CHUNKS:
            self._room.clear()
            await self._room.wait()
        if not self.gone:
            self._queue.put_nowait(chunk)

    def end(self) -> None:
        self._queue.put_nowait(None)

    def leave(self) -> None:
        self.gone = True
        self._room.set()
        while not self._queue.empty():
            self._queue.get_nowait()

    async def chunks(self) -> AsyncIterator[bytes]:
        while (chunk := await self._queue.get()) is not None:
            self._room.set()
            yield chunk


class Relayed(StreamingResponse):
    """The agent's end of a Pipe; when it ends (the stream's end, or the agent gone) `ended` runs."""

    def __init__(self, pipe: Pipe, ended: Callable[[], None]) -> None:
        super().__init__(
            pipe.chunks(), pipe.status, headers={"cache-control": "no-cache"}, media_type=pipe.content_type
        )
        self.pipe = pipe
        self.ended = ended

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.pipe.leave()
            self.ended()


async def _relay(
    status: int, content_type: str, chunks: AsyncIterator[bytes], pipe: Pipe, meter: StreamUsage
) -> tuple[Reply, Tokens, str | None]:
    """Pass a stream to `pipe` chunk by chunk, reading its usage on the way; its tokens once it ends."""
    pipe.open(status, content_type)
    cut = None
    try:
        async for chunk in chunks:
            meter.feed(chunk)
            await pipe.put(chunk)
    except httpx.HTTPError as exc:
        cut = meter.failure = f"upstream stream broke off ({type(exc).__name__})"
    finally:
        pipe.end()
    tokens, error = meter.result(cut)
    return Reply(status, b"", content_type), tokens, error


async def _each(chunks: tuple[bytes, ...]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


def _measured(protocol: ModelProtocol, reply: Reply) -> tuple[Reply, Tokens, str | None]:
    if reply.status != 200:
        return reply, Tokens(), f"upstream answered {reply.status}: {reply.body[:200].decode('utf-8', 'replace')}"
    tokens, error = usage_of(protocol, reply.body)
    return reply, tokens, error


def _failed(status: int, kind: str, message: str, protocol: ModelProtocol) -> tuple[Reply, Tokens, str | None]:
    return _measured(protocol, error_reply(status, kind, message, protocol))


def _sent(failed: tuple[Reply, Tokens, str | None], call: Call) -> tuple[Reply, Tokens, str | None]:
    """A failure after the call went upstream: billed the estimate of its prompt (`estimated`)."""
    reply, _, error = failed
    tokens = estimated(len(call.payload))
    return reply, tokens, f"{error}; {estimate_said(tokens)}"


def _parse(raw: bytearray) -> Any:
    """The JSON value of a body, parsed once: standard JSON only, within MAX_JSON_VALUES and MAX_DEPTH."""
    # A comma or colon precedes every value but the first: their count bounds the parser's memory
    # before it runs (strings holding them only make the bound looser).
    if raw.count(b",") + raw.count(b":") > MAX_JSON_VALUES:
        raise GatewayRefusal(
            413, "invalid_request_error", f"request body too large: more than {MAX_JSON_VALUES} JSON values"
        )
    nested = GatewayRefusal(400, "invalid_request_error", f"the body is nested deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_not_json)
    except RecursionError:
        raise nested from None
    except ValueError:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise GatewayRefusal(400, "invalid_request_error", "the body is not JSON") from None
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _deeper_than(value, MAX_DEPTH):
        raise nested
    return value


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _deeper_than(value: Any, depth: int) -> bool:
    """Whether `value` nests more than `depth` arrays and objects; level by level, without recursion."""
    level = [value]
    for _ in range(depth):
        level = [
            child
            for node in level
            if isinstance(node, (dict, list))
            for child in (node.values() if isinstance(node, dict) else node)
        ]
        if not level:
            return False
    return any(isinstance(node, (dict, list)) for node in level)


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


async def serve(
    models: dict[str, ModelConfig],
    state_dir: Path,
    admin_token: str,
    limits: GatewayLimits,
    *,
    control_port: int = 0,
    model_port: int = MODEL_PORT,
    parent_pid: int | None = None,
) -> None:
    """Run the gateway until SIGTERM/SIGINT (or until `parent_pid` is gone).

    Writes `<state_dir>/control.json` ({url, pid}) once the control listener answers.
    """
    import signal

    quota = LogQuota()
    for name in ("uvicorn.error", "asyncio", errors.name):
        logging.getLogger(name).addFilter(quota)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per upstream request: each call has its own
    holder: dict[str, Gateway] = {}
    listeners = UvicornListeners(
        lambda host: holder["gateway"].model_app(host),
        Connections(limits.connections, limits.run_connections),
        limits.idle_timeout,
    )
    gateway = Gateway(models=models, state_dir=state_dir, listeners=listeners, model_port=model_port, limits=limits)
    holder["gateway"] = gateway
    sock = listen("127.0.0.1", control_port)
    port = int(sock.getsockname()[1])
    control = server(gateway.control_app(admin_token))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def watch_parent() -> None:
        while parent_pid is not None:
            try:
                os.kill(parent_pid, 0)
            except ProcessLookupError:
                log.warning("parent process %d is gone; stopping", parent_pid)
                stop.set()
                return
            except PermissionError:
                pass
            await asyncio.sleep(2)

    serving = asyncio.create_task(control.serve(sockets=[sock]))
    watcher = asyncio.create_task(watch_parent())
    while not control.started and not serving.done():
        await asyncio.sleep(0.01)
    if serving.done():
        await serving
        return
    ready = state_dir / "control.json"
    temporary = ready.with_suffix(".tmp")
    temporary.write_text(json.dumps({"url": f"http://127.0.0.1:{port}", "pid": os.getpid()}))
    os.replace(temporary, ready)
    log.info("control API on http://127.0.0.1:%d; models: %s", port, ", ".join(sorted(models)) or "none")
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
    control.should_exit = True
    watcher.cancel()
    await gateway.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(serving, 10)
    log.info("stopped")
