"""The integrity bypass suite: a real run held in the agent phase, attacked as model.

At difficulty levels 0, 2 and 4, from inside the container as the agent's
user, it tries the known ways around the protections of the integrity
model and checks each fails, while the bash tool keeps working.

It attacks the demo's c-demo, or the images the environment names
(`SSEBENCH_INTEGRITY_IMAGE`, `SSEBENCH_INTEGRITY_SIDECAR_ENV_IMAGE` and
`SSEBENCH_INTEGRITY_SIDECAR_AGENT_IMAGE`; `SSEBENCH_INTEGRITY_SOURCE`):
what it looks for (the fix, the PoCs, the tree) is read from the task the
image holds. Run as a script, it runs these same tests through pytest and
prints each attack and what it found:

    python tests/integrity/test_bypass.py [--mode sidecar] [LEVEL ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a script: `tests` is the checkout's
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse
import re
import shlex
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ssebench.errors import SSEBenchError
from ssebench.runtime.contract import CAPTURE_DIR, REPO, RUNNER_DIR, TASK_DIR
from ssebench.settings import Settings
from ssebench.task import Task, task_file
from tests.integrity.harness import (
    LEVELS,
    MODES,
    HeldRun,
    ImagesNotNamed,
    Launcher,
    launching,
    target_from_environment,
)

pytestmark = [pytest.mark.docker, pytest.mark.integrity, pytest.mark.slow]

# What a test saw, for the script's report (pytest's record_property: junit's properties under pytest).
Record = Callable[[str, object], None]
ALLOWED = {0: {"build", "run_poc", "function_test", "intent_test"}, 2: {"build", "function_test"}, 4: set()}


@pytest.fixture(scope="module", params=MODES)
def launcher(
    request: pytest.FixtureRequest, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Launcher]:
    """The suite's launcher (conftest.py), on the images the environment names when it names any; the demo's
    are built only when it names none."""
    tmp = tmp_path_factory.mktemp("integrity")
    try:
        target = target_from_environment(request.param, tmp)
    except ImagesNotNamed as exc:
        pytest.skip(str(exc))
    except SSEBenchError as exc:
        pytest.fail(str(exc), pytrace=False)
    tasks: list[Task] = request.getfixturevalue("integrity_images") if target is None else [target.task]
    with launching(settings, tasks, tmp, request.param, target) as launch:
        yield launch


@pytest.fixture(scope="module", params=LEVELS, ids=lambda level: f"d{level}")
def run(request: pytest.FixtureRequest, launcher: Launcher) -> Iterator[HeldRun]:
    """A run of c-demo (or the named images' task) started as the plugin starts it, held in the agent phase at
    one level."""
    held = launcher.start(level=request.param)
    yield held
    held.close()


def hidden(task: Task) -> list[str]:
    """What the task hides from the agent, where its image holds it: the fix, the hidden tests, the PoCs,
    config.yaml, the run script, and grading's original of the first file the fix changes."""
    files, run_script = task.config.files, task.config.scripts.run
    named = [files.patch, files.future_test, *files.poc, "config.yaml", run_script]
    return [f"{TASK_DIR}/{p}" for p in named if p] + [f"{REPO}/{f}" for f in the_fix(task)[0][:1]]


def the_fix(task: Task) -> tuple[list[str], str | None]:
    """The files the task's reference fix changes, and its longest added line (a line of the fix: nowhere the
    agent looks may hold it)."""
    if not task.config.files.patch:
        return [], None
    text = task_file(task.path, task.config.files.patch).read_text(errors="replace")
    changed = re.findall(r"^\+\+\+ b/(\S+)", text, re.MULTILINE)
    added = [line[1:].strip() for line in text.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return changed, max(added, key=len, default=None) or None


def as_model(run: HeldRun, code: str) -> Any:
    return run.py("1000", code)


def sh(run: HeldRun, user: str, script: str) -> tuple[int, str]:
    code, out = run.container.exec_run(["bash", "-c", script], user=user, workdir=run.source)
    return code, out.decode(errors="replace")


LISTENERS = """
import httpx, json, os
clients = {
    "socket": httpx.Client(transport=httpx.HTTPTransport(uds=os.environ["SSE_DAEMON_SOCKET"]), base_url="http://d",
                           timeout=600),
    "http": httpx.Client(base_url=os.environ["DAEMON_URL"], timeout=600),
}
out = {}
for name, c in clients.items():
    out[name] = {"reference": c.get("/reference/patch").status_code,
                 "prepare_grading": c.post("/prepare_grading").status_code,
                 "agent_exited": c.post("/admin/agent_exited").status_code,
                 "refusals": c.get("/admin/refusals").status_code,
                 "grading": c.post("/tool/bencher", params={"action": "build"}, json={"grading": True}).status_code,
                 "version": c.get("/version").status_code}
    for action in ("build", "run_poc", "function_test", "intent_test"):
        body = {"poc": os.environ["POC"]} if action == "run_poc" else {}
        out[name][action] = c.post("/tool/bencher", params={"action": action}, json=body).status_code
print(json.dumps(out))
"""


def test_listeners_refuse_the_answer_and_withheld_checks(run: Any, record_property: Record) -> None:
    pocs = run.config.task.config.files.poc
    out = run.py("1000", LISTENERS, env={"DAEMON_URL": run.daemon_url, "POC": f"{TASK_DIR}/{pocs[0]}" if pocs else ""})
    for listener in ("socket", "http"):
        record_property("saw", f"{listener}: " + ", ".join(f"{k} {v}" for k, v in out[listener].items()))
    for listener in ("socket", "http"):
        codes = out[listener]
        assert codes["reference"] == 403 and codes["prepare_grading"] == 403 and codes["agent_exited"] == 403
        assert codes["refusals"] == 403  # what the daemon refused is root's to read, for the signals
        assert codes["grading"] == 403
        # Sidecar mode: the agent's container is a peer of the daemon's port, which serves peers (the model
        # gateway is one too) the public view only; the agent's way in is the socket volume.
        peer = listener == "http" and run.mode == "sidecar"
        for action in ("build", "run_poc", "function_test", "intent_test"):
            expected = 200 if action in ALLOWED[run.level] and not peer else 403
            assert codes[action] == expected, (listener, action, codes)
    assert "run_poc" not in ALLOWED[run.level] or out["socket"]["run_poc"] == 200  # a positive control
    assert out["http"]["version"] == 200  # and the port answers (what it refuses, it refuses)


ADMIN_AND_SOCKETS = """
import json, os, socket
agent, admin = os.environ["SSE_DAEMON_SOCKET"], "/run/ssebench/admin.sock"
out = {}
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(admin); out["admin"] = "connected"
except OSError as exc:
    out["admin"] = type(exc).__name__
for name, src in (("agent", agent), ("admin", admin)):
    for dest in ("/tmp/moved.sock", os.path.join(os.path.dirname(src), "moved.sock")):
        try:
            os.rename(src, dest); out["move " + name] = "moved"
        except FileNotFoundError as exc:
            out["move " + name] = type(exc).__name__
        except PermissionError as exc:
            out["move " + name] = type(exc).__name__
        except OSError as exc:  # another file system (sidecar mode's socket volume): not a move either
            out.setdefault("move " + name, "PermissionError")
for name, path in (("agent", agent), ("admin", admin)):
    try:
        os.unlink(path); out["unlink " + name] = "removed"
    except OSError as exc:
        out["unlink " + name] = type(exc).__name__
for directory in sorted({os.path.dirname(admin), os.path.dirname(agent)} - {"/tmp"}):
    for name in ("sse.sock", "admin.sock", "planted"):
        try:
            open(os.path.join(directory, name + ".new"), "w").close(); out[f"create {directory}/{name}"] = "created"
        except OSError as exc:
            out[f"create {directory}/{name}"] = type(exc).__name__
print(json.dumps(out))
"""


@pytest.mark.parametrize("where", ["agent", "task"])
def test_admin_socket_cannot_be_reached_nor_sockets_moved(run: Any, where: str, record_property: Record) -> None:
    """From where the agent runs, and through its bash tool (where the task is, in sidecar mode). In sidecar
    mode's agent container the admin socket and its directory do not exist at all: they never leave the task
    container, which grades."""
    out = run.py("1000", ADMIN_AND_SOCKETS, task=where == "task")
    absent = run.mode == "sidecar" and where == "agent"
    record_property("saw", ", ".join(f"{k}: {v}" for k, v in out.items()))
    for key, value in out.items():
        admins = "admin" in key.split("/")[0] or key.startswith("create /run/ssebench/")
        assert value == ("FileNotFoundError" if absent and admins else "PermissionError"), (key, out)
    assert len(out) == (8 if run.mode == "sandbox" else 11), out


def test_hidden_material_cannot_be_read_directly_or_through_the_bash_tool(run: Any, record_property: Record) -> None:
    secrets = hidden(run.config.task)
    # The control: each is there, where the task is, for root to read (a path that is not there proves nothing).
    assert [p for p in secrets if run.status("root", f"test -s {p} && head -c1 {p} >/dev/null", task=True)] == []
    for path in secrets:
        code, out = sh(run, "1000", f"cat {path}")
        lines = out.strip().splitlines() or [""]
        record_property(
            "saw", f"cat {path}: exit {code}: {lines[0][:100]}" + f" (+{len(lines) - 1} lines)" * (len(lines) > 1)
        )
        assert code != 0, (path, out)
    out = as_model(
        run,
        f"""
    import json
    from sse.tools.bash import execute
    print(json.dumps([execute("cat " + p).code for p in {secrets!r}]))
    """,
    )
    record_property("saw", f"the bash tool's cat of each: exit {out}")
    read = [path for path, code in zip(secrets, out, strict=True) if code == 0]
    assert read == [], f"the bash tool read {read}"


def test_the_reference_fix_is_mounted_for_the_reference_agent_alone(
    run: Any, launcher: Launcher, record_property: Record
) -> None:
    """The fix is in no container of a run but the reference agent's (which applies it); the control is that
    agent's run, where the same probe finds it (on named images, their own agent image run as the reference
    agent's: the mount is the run's, not the image's)."""
    probe = "test -e /reference/patch.diff"
    codes = run.status("root", probe), run.status("root", probe, task=True)
    record_property("saw", f"test -e /reference/patch.diff as root: exit {codes[0]} (agent), {codes[1]} (task)")
    assert codes[0] != 0 and codes[1] != 0
    if run.level != 2:
        return  # one reference run is control enough
    reference = launcher.start(agent="reference", level=2)
    try:
        found = reference.status("1000", "test -s /reference/patch.diff && grep -q '^+++ ' /reference/patch.diff")
        record_property("saw", f"the reference agent's run (the control): the patch {'not ' * bool(found)}found")
        assert found == 0
    finally:
        reference.close()


def test_history_has_at_most_one_commit(run: Any, record_property: Record) -> None:
    code, out = sh(run, "1000", "git rev-list --all | wc -l; git log --format=%s")
    record_property("saw", f"commits, then their subjects: {' '.join(out.split())}")
    assert code == 0 and out.split() == ["1", "buggy", "commit"]


def test_bash_tool_still_works(run: Any, record_property: Record) -> None:
    out = as_model(
        run,
        "import json; from sse.tools.bash import execute; r = execute('id -un; pwd');"
        "print(json.dumps([r.code, r.stdout]))",
    )
    record_property("saw", f"id -un; pwd: exit {out[0]}: {' '.join(out[1].split())}")
    assert out == [0, f"model\n{run.source}\n"]


def test_nothing_the_runner_writes_can_reach_model(run: Any, record_property: Record) -> None:
    """Code run by a check (as sse-runner, where the task is) finds no directory it can write and model can
    enter, there or (sidecar mode) through the volumes where the agent runs."""
    writable = run.sh(
        "root",
        "runuser -u sse-runner -- find / /dev/shm -xdev -type d -writable 2>/dev/null; "
        "runuser -u sse-runner -- find /src /run/ssebench /tmp/sse-archive -type d -writable "
        "2>/dev/null; true",
        task=True,
    )
    # The positive control: the same probe finds what model may write (its tree).
    assert run.source in run.sh(
        "root", f"runuser -u model -- find {run.source} -maxdepth 0 -type d -writable", task=True
    )
    channels = [
        d
        for d in writable.split()
        for task in (True, False)
        if run.status("root", f"runuser -u model -- test -x '{d}'", task=task) == 0
        and run.status("root", f"test -d '{d}'", task=task) == 0
    ]
    record_property("saw", f"{len(writable.split())} directories sse-runner may write; model may enter {channels}")
    assert channels == []


def test_the_agent_container_holds_nothing_of_the_task(run: Any, record_property: Record) -> None:
    """Sidecar mode: /ssebench, grading's original and the case image's files do not exist where the agent runs,
    for uid 1000 nor for root; they do where the task is (the positive control)."""
    if run.mode != "sidecar":
        pytest.skip("sandbox mode: the agent shares the task's container (the other tests cover it)")
    # The case image's own files: what it added to the base (its tree's original, the build it made).
    task = run.config.task
    files = task.config.files
    changed, line = the_fix(task)
    case_only = [
        TASK_DIR,
        f"{TASK_DIR}/config.yaml",
        *(f"{TASK_DIR}/{p}" for p in (files.patch, *files.poc[:1]) if p),
        CAPTURE_DIR,
        RUNNER_DIR,
        REPO,
        *(f"{REPO}/{f}" for f in changed[:1]),
    ]
    probe = "for p in " + shlex.join(case_only) + '; do [ -e "$p" ] || [ -L "$p" ] && echo "$p"; done; true'
    for user in ("1000", "root"):
        found = run.sh(user, probe).split()
        record_property("saw", f"as {user}, of {len(case_only)} paths of the task, the agent's container has {found}")
        assert found == [], user
    assert run.sh("root", probe, task=True).split() == case_only
    if line is None:
        return
    # No line of the fix anywhere in the agent container's files; the positive control finds it where the task is.
    fix = f"grep -rlF {shlex.quote(line)} / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev 2>/dev/null; true"
    found = run.sh("root", fix).split()
    record_property("saw", f"a line of the fix ({line!r}) in the agent's container: {found}")
    assert found == []
    assert f"{TASK_DIR}/{files.patch}" in run.sh("root", fix, task=True).split()


class Report:
    """The script's pytest plugin: runs the asked mode and levels only, and prints each attack, what it saw,
    and whether the protection held, then a verdict per level (in place of pytest's dots)."""

    def __init__(self, mode: str, levels: list[int]) -> None:
        self.mode, self.levels = mode, levels
        # A level where no check ran (all skipped, or none collected): nothing was shown to hold there.
        self.unchecked = False
        self.checks: dict[str, tuple[int, str]] = {}  # node id -> (level, what it tries)
        self.outcomes: dict[int, dict[str, str]] = {level: {} for level in levels}  # level -> what -> outcome
        self.write: Callable[[str], None] = print

    def pytest_configure(self, config: pytest.Config) -> None:
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            self.write = terminal.write_line

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        keep, drop = [], []
        for item in items:
            callspec = getattr(item, "callspec", None)
            params: dict[str, Any] = callspec.params if callspec is not None else {}
            level = params.get("run")
            if params.get("launcher") == self.mode and isinstance(level, int) and level in self.levels:
                keep.append(item)
                name = getattr(item, "originalname", item.name).removeprefix("test_").replace("_", " ")
                extra = [f"{k}={v}" for k, v in params.items() if k not in ("launcher", "run")]
                self.checks[item.nodeid] = (level, name + (f" ({', '.join(extra)})" if extra else ""))
            else:
                drop.append(item)
        items[:] = keep
        config.hook.pytest_deselected(items=drop)

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: pytest.TestReport) -> tuple[str, str, str] | None:
        """No dots: each check has its own lines."""
        if report.when == "call" or report.failed or report.skipped:
            return ("error" if report.failed and report.when != "call" else report.outcome), "", ""
        return None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.nodeid not in self.checks or not (report.when == "call" or report.failed or report.skipped):
            return
        level, what = self.checks[report.nodeid]
        if report.skipped:
            reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""
            outcome, detail = "skip", [reason.removeprefix("Skipped: ")]
        elif report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            outcome = "FAIL" if report.when == "call" else "ERROR"
            detail = [crash.message.splitlines()[0] if crash is not None else str(report.longrepr).splitlines()[-1]]
        else:
            outcome, detail = "pass", []
        self.outcomes[level][what] = outcome
        self.write(f"{self.mode} d{level}  {outcome:<5} {what}")
        for name, value in report.user_properties:
            if name == "saw":
                self.write(f"               saw: {value}")
        for line in detail:
            self.write(f"               {'skipped' if outcome == 'skip' else 'failed'}: {line}")

    def pytest_terminal_summary(self) -> None:
        self.write("")
        for level in self.levels:
            outcomes = self.outcomes[level]
            broken = [what for what, outcome in outcomes.items() if outcome in ("FAIL", "ERROR")]
            passed = sum(outcome == "pass" for outcome in outcomes.values())
            if broken:
                verdict = f"FAILED: {len(broken)} of {len(outcomes)} checks: {'; '.join(broken)}"
            elif not passed:
                verdict = "NOT RUN" if not outcomes else f"NOTHING CHECKED ({len(outcomes)} skipped)"
                self.unchecked = True
            else:
                verdict = f"held ({passed} checks passed, {len(outcomes) - passed} skipped)"
            self.write(f"{self.mode} d{level}: {verdict}")


def main(argv: list[str] | None = None) -> int:
    """Attack one mode's images at the levels asked for; 0 when every protection held."""
    parser = argparse.ArgumentParser(
        prog="python tests/integrity/test_bypass.py",
        description="Attack a run held in the agent phase, as the agent's user, in one mode at each level: the "
        "demo's c-demo, or the images SSEBENCH_INTEGRITY_IMAGE (sandbox mode), SSEBENCH_INTEGRITY_SIDECAR_ENV_IMAGE "
        "and SSEBENCH_INTEGRITY_SIDECAR_AGENT_IMAGE (sidecar mode) name, whose source tree is at "
        "SSEBENCH_INTEGRITY_SOURCE (default: their config.yaml's source). Exits 0 when every protection held at "
        "every level asked for; 1 when one did not, or when a level had no check run.",
    )
    parser.add_argument("--mode", choices=MODES, default="sandbox", help="the mode to attack (default: sandbox)")
    parser.add_argument("levels", nargs="*", metavar="LEVEL", help=f"difficulty levels (default: {LEVELS})")
    args = parser.parse_args(argv)
    levels: list[int] = []
    for value in args.levels or [str(level) for level in LEVELS]:
        if not value.isdigit() or int(value) not in LEVELS:
            parser.error(f"LEVEL {value!r}: the suite attacks levels {', '.join(map(str, LEVELS))}; name one of them")
        levels.append(int(value))
    import tempfile

    try:  # the images, checked once here: a bad one is one line, not an error per test
        with tempfile.TemporaryDirectory() as tmp:
            target = target_from_environment(args.mode, Path(tmp))
    except SSEBenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    attacked = f"{target.agent}" + (f" with {target.tool}" if target.tool != target.agent else "") if target else ""
    print(f"attacking {attacked or 'the demo images (c-demo)'} in {args.mode} mode at levels {levels}", flush=True)
    report = Report(args.mode, levels)
    status = int(pytest.main([__file__, "-p", "no:cacheprovider", "--tb=short", "-q", "-rfE"], plugins=[report]))
    return status or (1 if report.unchecked else 0)


if __name__ == "__main__":
    sys.exit(main())
