"""mini-swe-agent (2.4.6) as an SSEBench agent: its default agent, a LiteLLM model and a local environment.

Two processes. This file runs first under the runtime's Python (it has the
SDK). It starts itself again at once under the agent's own venv
(/opt/agents/mini-swe-agent, the read-only volume of its software) with
`--inner`, whose import of LiteLLM takes seconds; meanwhile it asks the
daemon for the task prompt (`sse.prompt`), writes the dialog's head and
hands the job to the second process on its standard input. That process runs mini-swe-agent's `DefaultAgent` with the
package's own `mini.yaml` templates, a `LitellmModel` that speaks Chat
Completions to the run's gateway (`openai/<SSE_MODEL_NAME>` at SSE_BASE_URL)
and a `LocalEnvironment` in the task's source tree; it saves its trajectory
after every step. When it ends (or is stopped before TIMEOUT), the first
process translates the trajectory into $SSE_ARCHIVE/dialog.jsonl
(`sse.dialog`): every answer, every bash command and its output.

Left to ourselves: cost and its limits (the gateway counts cost and
enforces the run's budget; mini-swe-agent's limits are off and LiteLLM's
cost lookup errors ignored), and the time limit (mini-swe-agent's wall-time
limit is set short of TIMEOUT, and this process stops it at the margin).
Nothing else leaves the container: LiteLLM reads its bundled cost map
instead of fetching one, no proxy is used, mini-swe-agent's start-up banner
and global config are off. mini-swe-agent has no MCP client: it has bash
only (no test_patch).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

NAME = "mini-swe-agent"
VERSION = "1"
# Where its software is (ssebench.agentvolume): the venv mini-swe-agent and LiteLLM are installed in.
HOME = Path("/opt/agents") / NAME
PYTHON = HOME / "bin" / "python"
# Each bash command's own limit (mini-swe-agent's default is 30 s: too short for a build).
COMMAND_TIMEOUT = 600
SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
# The environment of the inner process: no network but the gateway's, nothing written outside its folder.
QUIET = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # the cost map that ships in the wheel, not one from the web
    "LITELLM_OFFLINE_MODE": "true",  # nor any other catalog, check or tokenizer it would fetch on its own
    "LITELLM_MODE": "PRODUCTION",
    "LITELLM_LOG": "ERROR",
    "LITELLM_TELEMETRY": "False",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "MSWEA_SILENT_STARTUP": "1",
    "MSWEA_COST_TRACKING": "ignore_errors",  # the gateway counts cost; LiteLLM does not know our model names
    "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "3",
    "PYTHONDONTWRITEBYTECODE": "1",
}
PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def margin(timeout: float) -> float:
    """Time kept back from TIMEOUT to write the dialog (as chat-agent keeps)."""
    return min(60.0, max(5.0, timeout * 0.05))


def main(argv: list[str]) -> int:
    if argv[1:2] == ["--inner"]:
        return inner()
    return outer()


# -- the first process: the runtime's Python, with the SDK ---------------------------------------------------


def outer() -> int:
    started = time.monotonic()
    timeout = float(os.environ.get("TIMEOUT") or 3600)
    deadline = started + timeout - margin(timeout)
    missing = [n for n in ("SSE_BASE_URL", "SSE_API_KEY", "SSE_MODEL_NAME") if not os.environ.get(n)]
    # mini-swe-agent's process starts first: importing LiteLLM takes seconds, which the SDK's import and the
    # prompt's fetch below overlap. It reads its job from its standard input once it has imported.
    work = Path(tempfile.mkdtemp(prefix=f"{NAME}-"))
    inner_process = None
    if not missing and PYTHON.is_file():
        env = {k: v for k, v in os.environ.items() if k not in PROXIES}
        env.update(
            QUIET, MSWEA_GLOBAL_CONFIG_DIR=str(work / "config"), NO_PROXY="*", OPENAI_API_KEY=os.environ["SSE_API_KEY"]
        )
        inner_process = subprocess.Popen(
            [str(PYTHON), "-I", str(Path(__file__).resolve()), "--inner", "-"], env=env, stdin=subprocess.PIPE
        )

    from sse import project
    from sse.dialog import Dialog
    from sse.prompt import task_prompt

    dialog = Dialog()
    model = os.environ.get("SSE_MODEL_NAME") or "none"
    dialog.init(agent=NAME, model=model, version=VERSION, software="mini-swe-agent==2.4.6")
    prompt = task_prompt()
    dialog.prompt(prompt)
    if missing:
        dialog.complete("error", f"{', '.join(missing)} not set: the harness gives them to a run with a model")
        return 1
    if inner_process is None:
        dialog.complete("error", f"{PYTHON} is missing: the agent's software volume is not mounted")
        return 1
    job: dict[str, Any] = {
        "task": prompt,
        "cwd": str(project.source),
        "model": f"openai/{os.environ['SSE_MODEL_NAME']}",
        "base_url": os.environ["SSE_BASE_URL"].rstrip("/"),
        # mini-swe-agent stops itself first; this process stops it at the deadline if it has not.
        "wall_time": max(1, int(deadline - time.monotonic() - 10)),
        "command_timeout": COMMAND_TIMEOUT,
        "trajectory": str(work / "trajectory.json"),
    }
    timed_out = False
    try:
        inner_process.communicate(json.dumps(job).encode(), timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        inner_process.kill()
        inner_process.wait()
        timed_out = True
    except BrokenPipeError:  # it ended before it read its job (its own error is on stderr)
        inner_process.wait()
    trajectory = _read(Path(job["trajectory"]))
    end, reason = translate(trajectory.get("messages") or [], dialog)
    if timed_out:
        end, reason = "timeout", f"stopped {margin(timeout):.0f} s before TIMEOUT"
    elif end is None:
        end, reason = "error", f"mini-swe-agent ended (status {inner_process.returncode}) without an exit message"
    dialog.complete(end, reason)
    return 0 if end == "done" else 1


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _tokens(response: Any) -> dict[str, int] | None:
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return None
    return {"input": int(usage.get("prompt_tokens") or 0), "output": int(usage.get("completion_tokens") or 0)}


def _answer(dialog: Any, text: Any, reasoning: Any, tokens: dict[str, int] | None) -> None:
    if isinstance(reasoning, str) and reasoning.strip():
        dialog.thinking(reasoning)
    dialog.message(text if isinstance(text, str) else "", tokens=tokens)


def _arguments(raw: Any) -> Any:
    try:
        return json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return raw


def translate(messages: list[Any], dialog: Any) -> tuple[str | None, str | None]:
    """Write mini-swe-agent's trajectory (its `messages`, format mini-swe-agent-1.1) as dialog records;
    (status, reason) of its exit message, or (None, None) when it has none.

    An answer is the model's message with its bash calls; a `tool` message
    the output of one. A rejected answer (no or an unknown tool call) is not
    in the messages but in the error's `extra.response`: it is written with
    each of its calls answered by the error. The submitting command ends the
    run before it has a result of its own.
    """
    open_calls: list[str] = []
    for message in messages[2:]:  # the system message and the task, already written as the prompt
        if not isinstance(message, dict):
            continue
        role, extra = message.get("role"), message.get("extra") or {}
        if role == "assistant":
            _answer(dialog, message.get("content"), message.get("reasoning_content"), _tokens(extra.get("response")))
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                dialog.tool_call(call["id"], function.get("name") or "?", _arguments(function.get("arguments")))
                open_calls.append(call["id"])
        elif role == "tool" and message.get("tool_call_id") in open_calls:
            open_calls.remove(message["tool_call_id"])
            code = extra.get("returncode")
            dialog.tool_result(
                message["tool_call_id"],
                str(extra.get("raw_output", message.get("content") or "")),
                code=code if isinstance(code, int) else None,
                error=extra.get("exception_info") or None,
            )
        elif role == "user" and extra.get("interrupt_type") == "FormatError":
            raw = extra.get("response")
            response: dict[str, Any] = raw if isinstance(raw, dict) else {}
            choice = ((response.get("choices") or [{}])[0] or {}).get("message") or {}
            _answer(dialog, choice.get("content"), choice.get("reasoning_content"), _tokens(response))
            for number, call in enumerate(choice.get("tool_calls") or []):
                function = call.get("function") or {}
                tool_id = f"{call.get('id') or 'rejected'}-{dialog.seq}-{number}"
                dialog.tool_call(tool_id, function.get("name") or "?", _arguments(function.get("arguments")))
                dialog.tool_result(tool_id, "", error=str(message.get("content") or "rejected"))
        elif role == "exit":
            kind = str(extra.get("exit_status") or message.get("content") or "")
            for tool_id in open_calls:
                done = kind == "Submitted"
                dialog.tool_result(
                    tool_id,
                    SUBMIT if done else "",
                    code=0 if done else None,
                    error=None if done else f"not run: the session ended ({kind})",
                )
            open_calls = []
            said = str(extra.get("exception_str") or message.get("content") or kind)
            if kind == "Submitted":
                return "done", "the model submitted (echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT)"
            if kind in ("TimeExceeded", "LimitsExceeded"):
                return "timeout", kind
            if "budget" in said:
                return "budget", said[:500]
            return "error", f"{kind}: {said[:500]}"
    for tool_id in open_calls:
        dialog.tool_result(tool_id, "", error="not run: the session was stopped")
    return None, None


# -- the second process: the agent's venv, with mini-swe-agent -------------------------------------------------


def inner() -> int:
    """Run mini-swe-agent on the job `outer` writes to its standard input once it has imported; its trajectory
    is saved after every step."""
    yaml: Any = importlib.import_module("yaml")
    litellm: Any = importlib.import_module("litellm")
    minisweagent: Any = importlib.import_module("minisweagent")
    default: Any = importlib.import_module("minisweagent.agents.default")
    local: Any = importlib.import_module("minisweagent.environments.local")
    models: Any = importlib.import_module("minisweagent.models.litellm_model")
    litellm.suppress_debug_info = True  # its "Provider List" banner after every cost lookup it cannot do
    try:
        job = json.loads(sys.stdin.read().strip() or "null")
    except ValueError:
        job = None
    if not isinstance(job, dict):
        return 1  # the first process ended without a job for it (it says why in the dialog)

    # The package's own configuration of its `mini` command (tool calls, its templates), run unattended.
    config = yaml.safe_load((Path(minisweagent.package_dir) / "config" / "mini.yaml").read_text(encoding="utf-8"))
    agent_config = {k: v for k, v in config["agent"].items() if k != "mode"}
    agent_config.update(
        step_limit=0, cost_limit=0.0, wall_time_limit_seconds=job["wall_time"], output_path=Path(job["trajectory"])
    )
    model_config = dict(config["model"])
    model_config.update(
        model_name=job["model"],
        cost_tracking="ignore_errors",
        # The key comes from the environment (OPENAI_API_KEY), so that it is not in the trajectory's config.
        model_kwargs={**(model_config.get("model_kwargs") or {}), "api_base": job["base_url"]},
    )
    # A refused call that will be refused again is not retried: the run's budget spent (429 budget_exhausted),
    # a request the gateway will not serve (400).
    aborts = [
        *models.LitellmModel.abort_exceptions,
        litellm.exceptions.RateLimitError,
        litellm.exceptions.BadRequestError,
    ]
    model_class = type("GatewayModel", (models.LitellmModel,), {"abort_exceptions": aborts})
    environment = local.LocalEnvironment(
        **{**(config.get("environment") or {}), "cwd": job["cwd"], "timeout": job["command_timeout"]}
    )
    agent = default.DefaultAgent(model_class(**model_config), environment, **agent_config)
    try:
        agent.run(job["task"])
    except Exception as exc:  # its exit message is in the trajectory already
        print(f"{NAME}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
