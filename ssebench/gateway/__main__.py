"""`python -m ssebench.gateway`: the gateway process (started by `GatewayProcess`).

The admin token comes from SSEBENCH_GATEWAY_TOKEN (never from the command
line, which other users can read); provider keys come from the variables
the model files name; the gateway's limits from the settings
(SSEBENCH_GATEWAY_MEMORY and the others, docs/gateway.md), which this
process applies to itself before it serves anything.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

from ssebench.errors import SSEBenchError
from ssebench.gateway._models import MODEL_PORT

TOKEN_VARIABLE = "SSEBENCH_GATEWAY_TOKEN"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m ssebench.gateway", description="The SSEBench model gateway (started by the harness)."
    )
    parser.add_argument("--models", type=Path, required=True, help="the folder of model YAML files")
    parser.add_argument("--state-dir", type=Path, required=True, help="where control.json and usage/ go")
    parser.add_argument("--control-port", type=int, default=0, help="port of the control API on 127.0.0.1 (0: any)")
    parser.add_argument(
        "--model-port", type=int, default=MODEL_PORT, help=f"port of the model listeners (default {MODEL_PORT})"
    )
    parser.add_argument("--parent-pid", type=int, help="stop when this process is gone")
    parser.add_argument(
        "--serve",
        action="append",
        metavar="NAME",
        help="serve this model only (repeatable; default: every model file); other files are not read",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    token = os.environ.pop(TOKEN_VARIABLE, "")
    if len(token) < 16:
        print(
            f"ssebench-gateway: refusing to start: {TOKEN_VARIABLE} must hold the admin token (16 characters or more)",
            file=sys.stderr,
        )
        raise SystemExit(2)

    from ssebench.gateway._limits import GatewayLimits, limit_process
    from ssebench.gateway._models import load_models
    from ssebench.gateway._server import serve
    from ssebench.settings import get_settings

    try:
        limits = GatewayLimits.from_settings(get_settings())
        models = load_models(args.models, args.serve)
    except SSEBenchError as exc:
        print(f"ssebench-gateway: refusing to start: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    limits = limit_process(limits)
    args.state_dir.mkdir(parents=True, exist_ok=True)
    try:
        asyncio.run(
            serve(
                models,
                args.state_dir,
                token,
                limits,
                control_port=args.control_port,
                model_port=args.model_port,
                parent_pid=args.parent_pid,
            )
        )
    except OSError as exc:
        print(f"ssebench-gateway: cannot listen: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
