"""The model gateway: the one way a run's agent reaches a model.

A host process (`python -m ssebench.gateway`, started by `GatewayProcess`)
serves the models declared in `models/*.yaml`. The harness registers each
run through the control API (`GatewayClient`) and gets a key valid only for
that run's model, only while the run lasts, and only on the address of the
run's network; the gateway forwards the run's calls upstream with the
provider key from the host's environment, enforces the run's budget and
records every call's tokens and cost. docs/gateway.md has the whole story.

Importing this package loads no web framework: starlette, uvicorn and the
HTTP client are imported by the modules that serve and call.
"""

from ssebench.gateway._apis import MODEL_PROTOCOLS, ModelProtocol
from ssebench.gateway._client import GatewayClient, GatewayError, GatewayLink, GatewayProcess, RunKey
from ssebench.gateway._health import ModelCheck
from ssebench.gateway._models import MODEL_NAME, Budget, ModelConfig, Price, load_model, load_models, read_models
from ssebench.gateway._usage import Usage, UsageRecord

__all__ = [
    "MODEL_NAME",
    "MODEL_PROTOCOLS",
    "Budget",
    "GatewayClient",
    "GatewayError",
    "GatewayLink",
    "GatewayProcess",
    "ModelCheck",
    "ModelConfig",
    "ModelProtocol",
    "Price",
    "RunKey",
    "Usage",
    "UsageRecord",
    "load_model",
    "load_models",
    "read_models",
]
