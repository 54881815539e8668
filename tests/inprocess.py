"""A synchronous httpx transport that serves requests from an ASGI app in-process.

The SDK's client is synchronous (httpx.Client); httpx's own ASGITransport is
async-only. This runs the app on an event loop in a helper thread, which is
how the SDK's tests reach the real daemon app through its transport seam.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import anyio.from_thread
import httpx
from starlette.types import ASGIApp


class InProcessTransport(httpx.BaseTransport):
    def __init__(self, app: ASGIApp, client: tuple[str, int] = ("127.0.0.1", 50000)) -> None:
        self._inner = httpx.ASGITransport(app=app, client=client)
        self._portal_cm: AbstractContextManager[Any] = anyio.from_thread.start_blocking_portal()
        self._portal = self._portal_cm.__enter__()

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        body = await response.aread()
        return httpx.Response(response.status_code, headers=response.headers, content=body)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        return self._portal.call(self._handle, request)

    def close(self) -> None:
        self._portal_cm.__exit__(None, None, None)
