"""ssebench-daemon: one process, one app, three listeners.

    agent socket  SSE_DAEMON_SOCKET (0666)           agent-facing
    HTTP          :SSE_HTTP_PORT on all interfaces    agent-facing
    admin socket  SSE_ADMIN_SOCKET (0600, 0700 dir)   privileged

Each listener wraps the same Starlette app and stamps the request's scope
with its kind, so every endpoint knows where a request came in. The rules of
who may call what are here; the work is in `ssebench.runtime.service`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.schemas import SchemaGenerator
from starlette.types import ASGIApp, Receive, Scope, Send

from ssebench.runtime import listeners, signals
from ssebench.runtime.bash import ToolClosed
from ssebench.runtime.bencher import BencherError
from ssebench.runtime.capture import CaptureError
from ssebench.runtime.contract import DIFFICULTY_NAMES, GRADING_ACTIONS, MAX_LEVEL, allowed_actions
from ssebench.runtime.service import PHASE_OVER, TaskService
from ssebench.runtime.signals import Refusals

AGENT, HTTP, ADMIN = listeners.AGENT, listeners.HTTP, listeners.ADMIN
LISTENER_KEY = "ssebench.listener"

log = logging.getLogger("ssebench.daemon")


def listener_app(app: ASGIApp, kind: str, refusals: Refusals | None = None) -> ASGIApp:
    """The app as served on one listener: requests carry the listener's kind.

    On the HTTP listener, a peer that is not this container (loopback) gets
    the public view only: nothing of the run's work (diff, dialog, result),
    which could carry an answer, and no tool. Each such refusal is recorded
    in `refusals` (a shortcut signal of the run's).
    """

    async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = {**scope, LISTENER_KEY: kind}
            client = scope.get("client")
            peer = kind == HTTP and (client is None or client[0] not in LOOPBACK)
            if peer and scope.get("path") not in PEER_ROUTES:
                if refusals is not None:
                    refusals.record(
                        signals.PEER,
                        str(scope.get("path", "")),
                        f"{PEER_REFUSAL} (asked by {client[0] if client else 'an unknown peer'})",
                    )
                if scope["type"] == "http":
                    response = JSONResponse({"error": PEER_REFUSAL}, status_code=403)
                    await response(scope, receive, send)
                return
        await app(scope, receive, send)

    return asgi


def _listener(request: Request) -> str:
    # A request without a listener stamp did not come through a listener:
    # treat it as the least privileged kind.
    return str(request.scope.get(LISTENER_KEY, HTTP))


def _is_admin(request: Request) -> bool:
    return _listener(request) == ADMIN


LOOPBACK = {"127.0.0.1", "::1", "localhost"}
# What the HTTP listener tells a peer that is not this container. Each run
# has a network of its own, but whatever else joins it (the model gateway)
# must not run tools or read the run's work.
PEER_ROUTES = {"/version", "/project", "/capabilities"}
PEER_REFUSAL = "served to this container only (loopback); other hosts may read the public view"


def _refuse(message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=403)


def _result(result: Any) -> JSONResponse:
    return JSONResponse({"code": result.code, "stdout": result.stdout, "stderr": result.stderr})


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        data = await request.json()
    except ValueError:
        raise HTTPException(400, "the body must be a JSON object") from None
    if not isinstance(data, dict):
        raise HTTPException(400, "the body must be a JSON object")
    return data


def create_app(service: TaskService, difficulty: int) -> Starlette:
    """The daemon's app for one task container."""
    withheld_note = {a: f"difficulty {difficulty} ({DIFFICULTY_NAMES[difficulty]}) withholds {a}" for a in MAX_LEVEL}

    def refuse(request: Request, kind: str, message: str) -> JSONResponse:
        """Refuse an agent-facing call, recorded as a shortcut signal (the end of the phase is not one)."""
        route = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        service.refusals.record(kind, route, message)
        return _refuse(message)

    async def bencher(request: Request) -> Response:
        """
        summary: "Run a check (build, run_poc, function_test, intent_test) on a copy of the tree."
        description: "Agent-facing listeners allow only the actions the difficulty level allows, and only
          during the agent phase; a grading body is admin-only."
        parameters:
          - {name: action, in: query, required: true, schema: {type: string, enum: [build, run_poc, function_test, intent_test]}}
        responses:
          200: {description: "ScriptResult {code, stdout, stderr}; a failing script is 200 with a non-zero code"}
          403: {description: "withheld by difficulty or phase, or grading requested on an agent-facing listener"}
        """
        action = request.query_params.get("action", "")
        if action not in MAX_LEVEL and action not in GRADING_ACTIONS:
            return JSONResponse({"error": f"unknown action {action!r}; use one of {', '.join(MAX_LEVEL)}"}, 400)
        body = await _body(request)
        agent = not _is_admin(request)
        if agent:
            if not service.agent_running:
                return _refuse(PHASE_OVER)
            if body.get("grading") or action in GRADING_ACTIONS:
                return refuse(request, signals.GRADING, "grading runs only on the admin socket")
            if action not in allowed_actions(difficulty):
                return refuse(request, signals.DIFFICULTY, withheld_note[action])
        # The phase is checked again when the check gets its turn (for_agent).
        return _result(await run_in_threadpool(service.bench, action, body, for_agent=agent))

    async def bash(request: Request) -> Response:
        """
        summary: "Run a command in the persistent shell (as model, in the source tree)."
        responses:
          200: {description: "ScriptResult {code, stdout, stderr}"}
          403: {description: "the agent phase is over (the shell is model's: it never runs after the phase)"}
        """
        if not service.agent_running:
            return _refuse(PHASE_OVER)
        body = await _body(request)
        command = body.get("command")
        if not isinstance(command, str):
            return JSONResponse({"error": 'give the command as {"command": "..."}'}, 400)
        timeout = body.get("timeout")
        limit = float(timeout) if isinstance(timeout, int | float) and timeout > 0 else None
        try:
            return _result(await service.bash.run(command, limit))
        except ToolClosed:  # the phase ended while this call waited for the shell
            return _refuse(PHASE_OVER)

    async def prepare_grading(request: Request) -> Response:
        """
        summary: "Capture the agent's patch, write final.patch and commits.log, apply it to the graded copy."
        responses:
          200: {description: "{applied, files, log}"}
          403: {description: "agent-facing listeners"}
        """
        if not _is_admin(request):
            return refuse(request, signals.ADMIN_ONLY, "prepare_grading is served on the admin socket only")
        return JSONResponse(await run_in_threadpool(service.prepare_grading))

    async def agent_exited(request: Request) -> Response:
        """
        summary: "End the agent phase: tools close on agent-facing listeners, model's processes are killed."
        responses:
          200: {description: "{ok: true}"}
          403: {description: "agent-facing listeners"}
        """
        if not _is_admin(request):
            return refuse(request, signals.ADMIN_ONLY, "agent_exited is served on the admin socket only")
        await service.agent_exited()
        return JSONResponse({"ok": True})

    async def reference_patch(request: Request) -> Response:
        """
        summary: "The reference patch (the answer). Admin socket only, at all times."
        responses:
          200: {description: "{diff}"}
          403: {description: "agent-facing listeners, always"}
        """
        if not _is_admin(request):
            return refuse(request, signals.ADMIN_ONLY, "the reference patch is served on the admin socket only")
        return JSONResponse({"diff": service.reference_patch()})

    async def refusals(request: Request) -> Response:
        """
        summary: "The agent-facing requests refused so far (a shortcut signal): the agent's calls and peers'."
        responses:
          200: {description: "{calls: {count, kept}, peers: {count, kept}}, the first 50 of each kept"}
          403: {description: "agent-facing listeners"}
        """
        if not _is_admin(request):
            return refuse(request, signals.ADMIN_ONLY, "refusals are served on the admin socket only")
        return JSONResponse(service.refusals.snapshot())

    async def project(request: Request) -> Response:
        """
        summary: "The task's public view (no patch, hidden tests, PoC contents or run script)."
        responses:
          200: {description: "id, project, language, source, task_description, poc, build_script, test_script"}
        """
        return JSONResponse(service.project())

    async def capabilities(request: Request) -> Response:
        """
        summary: "The checks the task supports, whatever the difficulty."
        responses:
          200: {description: "{can_build, can_run_poc, poc_count, has_function_test, has_intent_test}"}
        """
        return JSONResponse(service.capabilities())

    async def diff(request: Request) -> Response:
        """
        summary: "The agent's change against the initial commit."
        responses:
          200: {description: "{diff}"}
        """
        return JSONResponse({"diff": await run_in_threadpool(service.diff)})

    async def files(request: Request) -> Response:
        """
        summary: "The files the agent changed."
        responses:
          200: {description: "{files: [{path, status, additions, deletions}]}"}
        """
        return JSONResponse({"files": await run_in_threadpool(service.files)})

    async def dialog(request: Request) -> Response:
        """
        summary: "The agent's dialog.jsonl entries with seq >= since."
        parameters:
          - {name: since, in: query, required: false, schema: {type: integer, minimum: 0}}
        responses:
          200: {description: "{entries, next}"}
        """
        raw = request.query_params.get("since", "0")
        if not raw.isdigit():
            return JSONResponse({"error": "since must be a non-negative integer"}, 400)
        try:
            return JSONResponse(service.dialog(int(raw)))
        except PermissionError as exc:
            return JSONResponse({"error": f"dialog.jsonl refused: {exc}"}, 409)

    async def result(request: Request) -> Response:
        """
        summary: "result.json of the run, once the evaluator wrote it."
        responses:
          200: {description: "the grade"}
          404: {description: "not graded yet"}
        """
        graded = service.result()
        if graded is None:
            return JSONResponse({"error": "no result yet: the run is not graded"}, 404)
        return JSONResponse(graded)

    async def final_diff(request: Request) -> Response:
        """
        summary: "final.patch, the change that was graded, once grading was prepared."
        responses:
          200: {description: "{diff}"}
          404: {description: "grading not prepared yet"}
        """
        patch = service.final_diff()
        if patch is None:
            return JSONResponse({"error": "no final patch yet: grading was not prepared"}, 404)
        return JSONResponse({"diff": patch})

    async def version(request: Request) -> Response:
        """
        summary: "The daemon's version (the SDK's must match)."
        responses:
          200: {description: "{version}"}
        """
        return JSONResponse({"version": service.version})

    routes = [
        Route("/tool/bencher", bencher, methods=["POST"]),
        Route("/tool/bash", bash, methods=["POST"]),
        Route("/prepare_grading", prepare_grading, methods=["POST"]),
        Route("/admin/agent_exited", agent_exited, methods=["POST"]),
        Route("/reference/patch", reference_patch, methods=["GET"]),
        Route("/admin/refusals", refusals, methods=["GET"]),
        Route("/project", project, methods=["GET"]),
        Route("/capabilities", capabilities, methods=["GET"]),
        Route("/diff", diff, methods=["GET"]),
        Route("/files", files, methods=["GET"]),
        Route("/agent/dialog", dialog, methods=["GET"]),
        Route("/result", result, methods=["GET"]),
        Route("/final_diff", final_diff, methods=["GET"]),
        Route("/version", version, methods=["GET"]),
    ]
    schemas = SchemaGenerator({"openapi": "3.0.0", "info": {"title": "ssebench-daemon", "version": service.version}})

    async def openapi(request: Request) -> Response:
        return JSONResponse(schemas.get_schema(routes=app.routes))

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)

    async def on_bencher_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, BencherError)
        return JSONResponse({"error": exc.message}, status_code=exc.status)

    async def on_capture_error(request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": f"capturing the change failed: {exc}"}, status_code=500)

    async def on_error(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse({"error": f"internal error: {type(exc).__name__}: {exc}"}, status_code=500)

    app = Starlette(
        routes=[*routes, Route("/openapi.json", openapi, methods=["GET"], include_in_schema=False)],
        exception_handlers={
            HTTPException: on_http_error,
            BencherError: on_bencher_error,
            CaptureError: on_capture_error,
            Exception: on_error,
        },
    )
    app.state.refusals = service.refusals  # the listeners record peers' refusals there too (`serve`)
    return app


# -- serving ------------------------------------------------------------------


async def serve(app: Starlette, bound: dict[str, socket.socket], ready: Callable[[], None]) -> None:
    """Serve `app` on the three listeners (`ssebench.runtime.listeners`) until SIGTERM or SIGINT; call
    `ready` once all three serve."""
    import uvicorn

    servers: list[tuple[uvicorn.Server, socket.socket]] = []

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:  # one handler for all three, below
            yield

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if all(server.started for server, _ in servers):
                ready()

    for kind in (AGENT, HTTP, ADMIN):
        config = uvicorn.Config(
            listener_app(app, kind, app.state.refusals),
            lifespan="off",
            log_level="warning",
            access_log=True,
            timeout_keep_alive=30,
        )
        servers.append((Server(config), bound[kind]))

    def stop(*_: object) -> None:
        for server, _sock in servers:
            server.should_exit = True

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    log.info("listening: agent %s, http %s, admin %s", *(bound[kind].getsockname() for kind in (AGENT, HTTP, ADMIN)))
    await asyncio.gather(*(server.serve(sockets=[sock]) for server, sock in servers))


def main() -> None:
    from ssebench.runtime.contract import SettingsError, load_settings
    from ssebench.runtime.service import container_service

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"ssebench-daemon: refusing to start: {exc}", file=sys.stderr)
        raise SystemExit(2) from None

    # Bound by the entrypoint, which let the agent start at once (its calls wait in the sockets' queues
    # while this starts); run by itself, it binds them.
    bound = listeners.inherited() or listeners.daemon_listeners(
        settings.agent_socket, settings.admin_socket, settings.http_port
    )
    ready = listeners.readiness()

    async def run() -> None:
        service = container_service(settings)
        await serve(create_app(service, settings.difficulty), bound, ready)

    asyncio.run(run())


if __name__ == "__main__":
    main()
