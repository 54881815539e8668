"""Whether a model's upstream works: what a call's answer says of it, and the preflight check.

A run whose every call failed upstream may have measured the model's server
rather than the agent, so the gateway counts those calls apart
(`failed_upstream`): the server did not answer, refused the provider key,
answered 404 or 5xx. A 400 or a 429 answers the agent's own call (a bad
request, a prompt over the rate limit), so it is no sign of a broken model.

But an agent's own bodies can bring each of those about too (an item it
names that does not exist, a call past the read timeout, a template the
server cannot render, a script run past its end), and the run's failure
must stay a failure. So a run whose calls all failed is a broken model only
when the gateway's own call, made at the run's finish with nothing of the
agent's in it, fails too (`still_broken`): the server does not answer,
refuses the key, fails, or does not list the model.

The check (`check_upstream`, the control API's `POST /models/{name}/check`)
is the cheapest call each protocol has, made with the provider key from the
gateway's environment before a session's first run: listing the models.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from collections.abc import Mapping

    import httpx

    from ssebench.gateway._models import ModelConfig
    from ssebench.gateway.scripted import Reply

OPENAI_CHAT = "openai-chat"
ANTHROPIC_MESSAGES = "anthropic-messages"
ANTHROPIC_VERSION = "2023-06-01"
# Listing models answers at once; a server that has not within this is of no use to a run either.
CHECK_TIMEOUT = 20.0
# What of an upstream's error a cause keeps: one line, this long at most.
CAUSE_CHARS = 200


def failed_upstream(reply: Reply) -> str | None:
    """Why the answer to a forwarded call says the model's upstream is broken; None when it does not (an
    answer, or a refusal of the call itself).

    The gateway's own 502s (the upstream did not answer, or refused the key,
    whose body is never kept) carry their message; an upstream's 404 or 5xx
    is named with its status and its error's message.
    """
    if reply.status != 404 and reply.status < 500:
        return None
    said = _message(reply.body)
    kind = _error(reply.body).get("type")
    if reply.status == 502 and kind in ("upstream_unreachable", "upstream_auth_error"):
        return said
    return f"upstream answered {reply.status}: {said}" if said else f"upstream answered {reply.status}"


def _error(body: bytes) -> dict[str, Any]:
    """The `error` object of an error body (OpenAI's and Anthropic's shape alike); empty if none."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return {}
    error = data.get("error") if isinstance(data, dict) else None
    return error if isinstance(error, dict) else {}


def _message(body: bytes) -> str:
    message = _error(body).get("message")
    text = message if isinstance(message, str) else body.decode("utf-8", "replace")
    line = " ".join(text.split())
    return line if len(line) <= CAUSE_CHARS else line[: CAUSE_CHARS - 3] + "..."


class ModelCheck(BaseModel):
    """What the check found: `ok`, the URL it called (None for a scripted model), the status it got, and
    when not ok, the cause (after the URL in a sentence) and the fix."""

    model_config = ConfigDict(frozen=True)

    model: str
    ok: bool
    url: str | None = None
    status: int | None = None
    cause: str | None = None
    fix: str | None = None
    # Whether the listing names the model's upstream id; None when the answer is not such a listing.
    listed: bool | None = None


def protocol_of(model: ModelConfig) -> str:
    """The model's upstream protocol; model files without one are OpenAI-compatible."""
    return str(getattr(model, "protocol", None) or OPENAI_CHAT)


async def check_upstream(
    model: ModelConfig, environ: Mapping[str, str], transport: httpx.AsyncBaseTransport | None = None
) -> ModelCheck:
    """List the upstream's models with the provider key: unreachable, or the key refused, is not ok.

    Any other answer is ok: a server may lack the listing and still serve
    its model, and a run's calls are accounted for on their own.
    """
    import httpx

    if model.base_url is None:
        return ModelCheck(model=model.name, ok=True)
    url = f"{model.base_url}/models"
    key = environ.get(model.api_key_env, "") if model.api_key_env else None
    headers: dict[str, str] = {}
    if protocol_of(model) == ANTHROPIC_MESSAGES:
        headers["anthropic-version"] = ANTHROPIC_VERSION
        if key is not None:
            headers["x-api-key"] = key
    elif key is not None:
        headers["authorization"] = f"Bearer {key}"
    async with httpx.AsyncClient(timeout=CHECK_TIMEOUT, transport=transport, follow_redirects=False) as client:
        try:
            response = await client.get(url, headers=headers)
        except httpx.HTTPError as exc:
            detail = " ".join(str(exc).split())
            where = model.source or f"models/{model.name}.yaml"
            return ModelCheck(
                model=model.name,
                ok=False,
                url=url,
                cause=f"did not answer ({type(exc).__name__}{': ' + detail if detail else ''})",
                fix=f"check base_url in {where} and that the server is up",
            )
    status = response.status_code
    if status in (401, 403):
        # Never the body: providers quote (part of) the key they refused.
        held = f"the key in ${model.api_key_env}" if model.api_key_env else "a call without a key (no api_key_env)"
        fix = "check the key" if model.api_key_env else "name the variable holding the key in api_key_env"
        return ModelCheck(
            model=model.name, ok=False, url=url, status=status, cause=f"refused {held} ({status})", fix=fix
        )
    return ModelCheck(model=model.name, ok=True, url=url, status=status, listed=_lists(response, model.upstream_id))


def _lists(response: httpx.Response, model_id: str) -> bool | None:
    """Whether a model listing (OpenAI's and Anthropic's `data: [{id}]`) names `model_id`; None when the answer
    is no such listing."""
    if response.status_code != 200:
        return None
    try:
        data = response.json().get("data")
    except (ValueError, AttributeError):
        return None
    if not isinstance(data, list):
        return None
    return any(isinstance(item, dict) and item.get("id") == model_id for item in data)


def still_broken(found: ModelCheck) -> str | None:
    """What the gateway's own call (`check_upstream`, at the finish of a run whose calls all failed) says
    is broken in the model's upstream; None when it works: a scripted model, or a server that answers,
    takes the key and lists the model (or has no listing to tell)."""
    if found.url is None:
        return None
    if not found.ok:
        return f"{found.url} {found.cause}"
    if found.status is not None and found.status >= 500:
        return f"{found.url} answered {found.status}"
    if found.listed is False:
        return f"{found.url} does not list the model"
    return None
