"""The harness's side of the gateway: starting its process, registering and finishing runs.

with GatewayProcess(models_dir, state_dir) as gateway:      # the session's controller
    client = GatewayClient(gateway.control_url, gateway.admin_token)   # any process, xdist workers too
    key = client.register_run(run_id, "scripted-fix", bind_host="172.18.0.1", ttl_seconds=4000)
    ... start the run's container with key.env() ...
    usage = client.finish_run(run_id)                        # key revoked, usage returned
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Protocol

from ssebench.errors import SSEBenchError
from ssebench.gateway._health import ModelCheck
from ssebench.gateway._models import MODEL_PORT, Budget
from ssebench.gateway._usage import Usage
from ssebench.logs import file_tail

if TYPE_CHECKING:
    import httpx

TOKEN_VARIABLE = "SSEBENCH_GATEWAY_TOKEN"
LOG_TAIL_LINES = 30


class GatewayError(SSEBenchError):
    """The gateway refused a request, or could not be started or reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class RunKey:
    """What a run's container gets: the key (never shown in reprs), the base URL, the model."""

    run_id: str
    key: str = field(repr=False)
    base_url: str
    model: str
    expires_at: float

    def env(self) -> dict[str, str]:
        """The container's SSE_BASE_URL, SSE_API_KEY and SSE_MODEL_NAME."""
        return {"SSE_BASE_URL": self.base_url, "SSE_API_KEY": self.key, "SSE_MODEL_NAME": self.model}


class GatewayClient:
    """The control API of a running gateway. Every failure is a GatewayError."""

    def __init__(
        self, control_url: str, admin_token: str, *, timeout: float = 30.0, transport: httpx.BaseTransport | None = None
    ) -> None:
        self.control_url = control_url.rstrip("/")
        self._token = admin_token
        self._timeout = timeout
        self._transport = transport
        self._http: httpx.Client | None = None

    def __repr__(self) -> str:
        return f"GatewayClient({self.control_url!r})"

    def _send(self, method: str, path: str, body: Any = None) -> Any:
        import httpx

        if self._http is None:
            # The control API is on loopback: never through a proxy the environment may name.
            self._http = httpx.Client(
                base_url=self.control_url,
                timeout=self._timeout,
                transport=self._transport,
                headers={"authorization": f"Bearer {self._token}"},
                trust_env=False,
            )
        try:
            response = self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise GatewayError(f"cannot reach the gateway at {self.control_url} ({method} {path}): {exc}") from exc
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.status_code >= 400:
            error = data.get("error") if isinstance(data, dict) else None
            message = error.get("message") if isinstance(error, dict) else response.text[:300]
            raise GatewayError(
                f"the gateway refused {method} {path} ({response.status_code}): {message}", status=response.status_code
            )
        if data is None:
            raise GatewayError(f"the gateway's answer to {method} {path} is not JSON")
        return data

    def health(self) -> dict[str, Any]:
        return dict(self._send("GET", "/health"))

    def register_run(
        self,
        run_id: str,
        model: str,
        *,
        bind_host: str,
        ttl_seconds: float,
        budget: Budget | None = None,
        port: int | None = None,
    ) -> RunKey:
        """A key for one run of `model`, served on `bind_host` (the run network's gateway IP).

        `budget` replaces the model file's; `port` (default: the gateway's
        model port) is for tests. Raises GatewayError (unknown model, run
        already registered, provider key not set, cannot listen there).
        """
        body: dict[str, Any] = {"run_id": run_id, "model": model, "bind_host": bind_host, "ttl_seconds": ttl_seconds}
        if budget is not None:
            body["budget"] = budget.model_dump(exclude_none=True)
        if port is not None:
            body["port"] = port
        data = self._send("POST", "/runs", body)
        return RunKey(
            run_id=data["run_id"],
            key=data["key"],
            base_url=data["base_url"],
            model=data["model"],
            expires_at=float(data["expires_at"]),
        )

    def finish_run(self, run_id: str) -> Usage:
        """Revoke the run's key and return its usage (the same again when called twice)."""
        return Usage.model_validate(self._send("POST", f"/runs/{run_id}/finish"))

    def usage(self, run_id: str) -> Usage:
        return Usage.model_validate(self._send("GET", f"/runs/{run_id}/usage"))

    def check_model(self, name: str) -> ModelCheck:
        """Whether the model's server answers and takes the provider key (the gateway calls it with the key,
        which never leaves the gateway). Raises GatewayError (unknown model)."""
        return ModelCheck.model_validate(self._send("POST", f"/models/{name}/check"))

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None


class _Network(Protocol):
    """What GatewayLink needs of a run's network (`ssebench.backend.Network`)."""

    @property
    def name(self) -> str: ...

    @property
    def gateway(self) -> str | None: ...


class GatewayLink:
    """A run's access to its model through the gateway (the `ssebench.live.ModelLink` of a session).

    `open` registers the run on its network's gateway IP and returns the
    container's SSE_* variables; `close` finishes it and returns its usage
    totals for summary.json (the records stay in the gateway's
    `usage/<run_id>.jsonl`).
    """

    def __init__(self, client: GatewayClient, *, budget: Budget | None = None, port: int | None = None) -> None:
        self.client = client
        self.budget = budget
        self.port = port

    def open(self, run_id: str, model: str, network: _Network, ttl: float) -> dict[str, str]:
        if not network.gateway:
            raise GatewayError(f"network {network.name} has no gateway address for the model listener to bind")
        key = self.client.register_run(
            run_id, model, bind_host=network.gateway, ttl_seconds=ttl, budget=self.budget, port=self.port
        )
        return key.env()

    def close(self, run_id: str) -> dict[str, Any] | None:
        return self.client.finish_run(run_id).summary()


class GatewayProcess:
    """The gateway as a child process of this one: started on enter, stopped (for sure) on exit.

    It serves the models of `models_dir` (those named in `serve`, when given), writes its log, `control.json`
    and `usage/<run_id>.jsonl` under `state_dir`, and stops by itself when
    this process dies.
    """

    def __init__(
        self,
        models_dir: Path,
        state_dir: Path,
        *,
        model_port: int = MODEL_PORT,
        start_timeout: float = 30.0,
        python: str = sys.executable,
        serve: Sequence[str] | None = None,
    ) -> None:
        self.models_dir = Path(models_dir)
        # The models to serve (None: every file of models_dir): the others' files are not read.
        self.serve = None if serve is None else list(serve)
        self.state_dir = Path(state_dir)
        self.model_port = model_port
        self.start_timeout = start_timeout
        self.python = python
        self.admin_token = secrets.token_urlsafe(32)
        self.control_url: str | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def __repr__(self) -> str:
        return f"GatewayProcess({str(self.models_dir)!r}, control_url={self.control_url!r})"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "gateway.log"

    def client(self) -> GatewayClient:
        if self.control_url is None:
            raise GatewayError("the gateway is not running")
        return GatewayClient(self.control_url, self.admin_token)

    def start(self) -> GatewayProcess:
        """Start the process and wait until its control API answers. Raises GatewayError with the log tail."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        ready = self.state_dir / "control.json"
        ready.unlink(missing_ok=True)
        self._log = self.log_path.open("ab")
        command = [
            self.python,
            "-m",
            "ssebench.gateway",
            "--models",
            str(self.models_dir.resolve()),
            "--state-dir",
            str(self.state_dir.resolve()),
            "--model-port",
            str(self.model_port),
            "--parent-pid",
            str(os.getpid()),
            *(f"--serve={name}" for name in self.serve or ()),
        ]
        self.process = subprocess.Popen(
            command,
            env={**os.environ, TOKEN_VARIABLE: self.admin_token},
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self.state_dir,
            start_new_session=True,
        )
        try:
            self._wait_ready(ready)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, ready: Path) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.start_timeout
        problem = "no control.json yet"
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                raise GatewayError(
                    f"the gateway exited ({code}) while starting; last lines of {self.log_path}:\n"
                    f"{file_tail(self.log_path, LOG_TAIL_LINES)}"
                )
            if ready.is_file():
                try:
                    self.control_url = str(json.loads(ready.read_text())["url"])
                    client = GatewayClient(self.control_url, self.admin_token, timeout=5)
                    try:
                        client.health()
                    finally:
                        client.close()
                    return
                except (ValueError, KeyError, GatewayError) as exc:
                    problem = str(exc)
            time.sleep(0.05)
        raise GatewayError(
            f"the gateway did not answer within {self.start_timeout:.0f} s ({problem}); "
            f"last lines of {self.log_path}:\n{file_tail(self.log_path, LOG_TAIL_LINES)}"
        )

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after 10 s); a no-op when it is not running."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        self.control_url = None

    def __enter__(self) -> GatewayProcess:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
