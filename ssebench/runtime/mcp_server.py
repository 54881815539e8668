"""The MCP server: one tool, `test_patch`, over streamable HTTP at http://localhost:3000/mcp.

It runs the checks the difficulty level allows through the SDK on the
daemon's agent socket, so the daemon's own gate applies as well. The answer
is a one-line headline, one line per check (passed / FAILED / not run and
why) and the log of the first failure. A log longer than 10,000 words is cut
to its tail; the whole log is saved to a file the agent can read.
"""

from __future__ import annotations

import os
import socket
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sse.helper import ScriptResult

from ssebench.runtime import listeners
from ssebench.runtime.contract import DIFFICULTY_NAMES, MCP_LOG_DIR, RuntimeSettings, allowed_actions

MAX_WORDS = 10_000
LOG_DIR = Path(MCP_LOG_DIR)

NAMES = {"build": "build", "run_poc": "PoCs", "function_test": "function test", "intent_test": "intent test"}


@dataclass
class Checks:
    """What test_patch needs from the daemon; the SDK in production, fakes in tests."""

    capabilities: dict[str, Any]
    pocs: list[str]
    build: Callable[[], ScriptResult]
    run_poc: Callable[[str], ScriptResult]
    function_test: Callable[[], ScriptResult]
    intent_test: Callable[[], ScriptResult]


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    ran: int = 0
    failed: list[str] = field(default_factory=list)
    first_log: str | None = None

    def passed(self, name: str, detail: str = "") -> None:
        self.ran += 1
        self.lines.append(f"{name}: passed{detail}")

    def failure(self, name: str, detail: str, log: str) -> None:
        self.ran += 1
        self.failed.append(name)
        self.lines.append(f"{name}: FAILED{detail}")
        if self.first_log is None:
            self.first_log = log

    def skipped(self, name: str, why: str) -> None:
        self.lines.append(f"{name}: not run ({why})")


def _log(result: ScriptResult) -> str:
    return "\n".join(part for part in (result.stdout, result.stderr) if part)


def save_log(text: str, directory: Path = LOG_DIR) -> Path:
    """Save a whole log where model can read it but not tamper with it (root's, no links)."""
    if directory.is_symlink() or (
        directory.exists() and (not directory.is_dir() or directory.stat().st_uid != os.geteuid())
    ):
        raise PermissionError(f"{directory} is not this server's directory")
    directory.mkdir(mode=0o755, exist_ok=True)
    os.chmod(directory, 0o755)
    path = directory / f"test_patch-{time.time_ns()}.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    return path


def cut_log(text: str, save: Callable[[str], Path] = save_log) -> str:
    """At most MAX_WORDS words: the tail, with where the whole log is."""
    words = text.split()
    if len(words) <= MAX_WORDS:
        return text
    path = save(text)
    tail = " ".join(words[-MAX_WORDS:])
    return f"[log cut to its last {MAX_WORDS} of {len(words)} words; the whole log is in {path}]\n{tail}"


def patch_report(difficulty: int, checks: Checks, save: Callable[[str], Path] = save_log) -> str:
    """Run every check the level allows, in grading order, and describe the outcome."""
    caps = checks.capabilities
    level = f"difficulty {difficulty} ({DIFFICULTY_NAMES[difficulty]})"
    allowed = set(allowed_actions(difficulty))
    report = Report()
    built_ok: bool | None = None

    if not caps.get("can_build"):
        report.skipped(NAMES["build"], "this task has no build script")
    elif "build" not in allowed:
        report.skipped(NAMES["build"], f"{level} withholds it")
    else:
        result = checks.build()
        built_ok = result.is_success()
        if built_ok:
            report.passed(NAMES["build"])
        else:
            report.failure(NAMES["build"], f" (exit {result.code})", _log(result))

    if not caps.get("can_run_poc"):
        report.skipped(NAMES["run_poc"], "this task has none")
    elif "run_poc" not in allowed:
        report.skipped(NAMES["run_poc"], f"{level} withholds them")
    elif built_ok is False:
        report.skipped(NAMES["run_poc"], "the build failed")
    else:
        results = [(poc, checks.run_poc(poc)) for poc in checks.pocs]
        bad = [(poc, r) for poc, r in results if not r.is_success()]
        if bad:
            report.failure(
                NAMES["run_poc"],
                f" ({len(bad)} of {len(results)} still trigger the bug, first {bad[0][0]})",
                _log(bad[0][1]),
            )
        else:
            report.passed(NAMES["run_poc"], f" ({len(results)} of {len(results)} no longer trigger the bug)")

    for action, capability in (("function_test", "has_function_test"), ("intent_test", "has_intent_test")):
        name = NAMES[action]
        if not caps.get(capability):
            report.skipped(name, "this task has none")
        elif action not in allowed:
            report.skipped(name, f"{level} withholds it")
        else:
            result = checks.function_test() if action == "function_test" else checks.intent_test()
            if result.is_success():
                report.passed(name)
            else:
                report.failure(name, f" (exit {result.code})", _log(result))

    if report.ran == 0:
        headline = f"No check ran: {level} allows none of the checks this task has."
    elif report.failed:
        headline = f"{len(report.failed)} of {report.ran} checks FAILED: {', '.join(report.failed)}."
    else:
        headline = f"All {report.ran} checks that ran passed."
    parts = [headline, *report.lines]
    if report.first_log is not None:
        parts += ["", f"Log of the first failure ({report.failed[0]}):", cut_log(report.first_log, save)]
    return "\n".join(parts)


def sdk_checks() -> Checks:
    """The checks as the SDK runs them on the agent socket."""
    from sse.daemon import _default
    from sse.tools import bencher

    daemon = _default()
    return Checks(
        capabilities=daemon.capabilities(),
        pocs=[str(p) for p in daemon.project().get("poc") or []],
        build=bencher.build,
        run_poc=bencher.run_poc,
        function_test=bencher.function_test,
        intent_test=bencher.intent_test,
    )


def create_server(difficulty: int, checks: Callable[[], Checks] = sdk_checks) -> Any:
    from anyio import to_thread
    from mcp.server.mcpserver import MCPServer

    server = MCPServer(
        name="ssebench",
        instructions="test_patch builds and tests your change of the source tree with the checks "
        "this run's difficulty level allows.",
    )

    @server.tool()
    async def test_patch() -> str:
        """Build and test the current source tree with every check this run allows.

        Returns a headline, one line per check (passed, FAILED, or not run and
        why), and the log of the first failure.
        """
        report = await to_thread.run_sync(lambda: patch_report(difficulty, checks()))
        # Kept in the run's directory too: the server's output is its mcp.log, root's (each check's whole
        # output is a scriptrunner log beside it).
        print(f"[test_patch] {time.strftime('%H:%M:%S')} the agent was told:\n{report}\n[test_patch] end", flush=True)
        return report

    return server


def transport_security(settings: RuntimeSettings) -> Any:
    """The Host headers the server answers: loopback's, and the host of the URL the agent was given (sidecar
    mode's task container, by its name on the run's network); any other is refused, as a page of another
    site that resolved its name here would be."""
    from urllib.parse import urlsplit

    from mcp.server.transport_security import TransportSecuritySettings

    hosts = ["127.0.0.1", "localhost", "[::1]"]
    named = urlsplit(settings.mcp_url).hostname
    if named and named not in hosts:
        hosts.append(named)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{host}:*" for host in hosts],
        allowed_origins=[f"http://{host}:*" for host in hosts],
    )


def main() -> None:
    import uvicorn

    from ssebench.runtime.contract import SettingsError, load_settings

    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"ssebench-mcp: refusing to start: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if LOG_DIR.exists() and not stat.S_ISDIR(os.lstat(LOG_DIR).st_mode):
        os.unlink(LOG_DIR)
    # The entrypoint binds the socket before this starts (clients queue on it meanwhile); run alone, bind it.
    sock = listeners.inherited().get(listeners.MCP) or listeners.mcp_listener(settings.mcp_bind)
    ready = listeners.readiness()

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:  # the entrypoint learns it serves: it never starts then fails the run
                ready()

    app = create_server(settings.difficulty).streamable_http_app(
        stateless_http=True, json_response=True, transport_security=transport_security(settings)
    )
    server = Server(uvicorn.Config(app, log_level="warning"))
    server.run(sockets=[sock])
    if not server.started:  # uvicorn returns when its start-up fails: say so in the exit status
        raise SystemExit(3)


if __name__ == "__main__":
    main()
