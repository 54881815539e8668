"""HTTP client of ssebench-daemon, which the rest of the SDK goes through.

The client connects to the Unix socket in SSE_DAEMON_SOCKET, or, when that is
unset, over TCP to the host:port in SSE_AGENT_DOCKER. A `transport` can be
given instead (an httpx transport), which is how the SDK's tests talk to the
daemon app in-process.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from sse._version import __version__
from sse.error import SDKError

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("sse")

# Grading can build and test a large project; the client waits for it.
_TIMEOUT_SECONDS = 4 * 3600.0


def same_version(sdk_version: str, daemon_version: object) -> bool:
    """Compare the SDK's PEP 440 version with the daemon's SemVer one.

    Both come from the same release, spelled per ecosystem (1.0.0rc1 and
    1.0.0-rc.1); PEP 440 parsing normalizes the SemVer spelling.
    """
    from packaging.version import InvalidVersion, Version

    if not isinstance(daemon_version, str):
        return False
    try:
        return Version(sdk_version) == Version(daemon_version)
    except InvalidVersion:
        return sdk_version == daemon_version


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "error" in body:
        return str(body["error"])
    return f"daemon answered {response.status_code}: {response.text[:500]}"


class Daemon:
    """A connection to the daemon.

    Creating one asks the daemon for its version and logs a warning when it
    differs from the SDK's. It connects to `socket` when given, else to
    SSE_DAEMON_SOCKET, else to the daemon at SSE_AGENT_DOCKER. Raises
    Exception when there is none of them, and RuntimeError when the daemon
    does not answer.
    """

    def __init__(self, socket: str | None = None, *, transport: httpx.BaseTransport | None = None) -> None:
        import httpx

        if transport is not None:
            base_url = "http://daemon"
        else:
            socket = socket or os.environ.get("SSE_DAEMON_SOCKET")
            if socket:
                if not os.path.exists(socket):
                    raise RuntimeError(f"the daemon does not answer: there is no socket at {socket}")
                transport = httpx.HTTPTransport(uds=socket)
                base_url = "http://daemon"
            elif tcp := os.environ.get("SSE_AGENT_DOCKER"):
                base_url = tcp if "://" in tcp else f"http://{tcp}"
            else:
                raise Exception("no daemon to talk to: set SSE_DAEMON_SOCKET (or SSE_AGENT_DOCKER=host:port)")
        self.socket = socket
        self._client = httpx.Client(base_url=base_url, transport=transport, timeout=_TIMEOUT_SECONDS)
        try:
            found = self.version()
        except SDKError as exc:
            self._client.close()
            raise RuntimeError(f"the daemon does not answer: {exc.message}") from exc
        if not same_version(__version__, found):
            log.warning("SDK version (%s) does not match daemon version (%s)", __version__, found)

    def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise SDKError(f"cannot reach the daemon ({method} {path}): {exc}") from exc
        if response.status_code >= 400:
            raise SDKError(_error_message(response))
        try:
            return response.json()
        except ValueError as exc:
            raise SDKError(f"the daemon's answer to {method} {path} is not JSON") from exc

    def get(self, path: str, headers: dict[str, str] | None = None) -> Any:
        """Send GET path and return the JSON body.

        Raises SDKError with the daemon's message when it answers with an
        error status, and on network errors.
        """
        return self._send("GET", path, headers=headers)

    def post(self, path: str, data: Any, headers: dict[str, str] | None = None) -> Any:
        """Send POST path with data as the JSON body and return the JSON body of the answer.

        Raises SDKError as get does.
        """
        return self._send("POST", path, json=data, headers=headers)

    def prepare_grading(self) -> Any:
        """POST /prepare_grading: save the agent's diff and apply it to the copy that is graded.

        Only the admin socket accepts it.
        """
        return self.post("/prepare_grading", {})

    def version(self) -> str:
        """GET /version: the daemon's version."""
        return str(self.get("/version")["version"])

    def project(self) -> dict[str, Any]:
        """GET /project: the task's metadata, as sse.project.Metadata holds it."""
        return dict(self.get("/project"))

    def capabilities(self) -> dict[str, Any]:
        """GET /capabilities: the checks the task supports."""
        return dict(self.get("/capabilities"))

    def tool(self, name: str, action: str | None, data: Any) -> Any:
        """POST /tool/{name}?action={action} with data as the JSON body."""
        params = {"action": action} if action else None
        return self._send("POST", f"/tool/{name}", json=data, params=params)

    def close(self) -> None:
        self._client.close()


_instance: Daemon | None = None


def _default() -> Daemon:
    """The process's connection, made on first use."""
    global _instance
    if _instance is None:
        _instance = Daemon()
    return _instance
