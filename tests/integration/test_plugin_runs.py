"""The plugin end to end with pytester: real runs of the demo dataset."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from ssebench.engine import cleanup, client
from ssebench.task import Task
from tests.helpers import DEMO, failure_reports, interruptible, rendered_text, scripted_steps, unpin

pytest_plugins = ["pytester"]
pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def demo(pytester: pytest.Pytester, demo_images: list[Task]) -> pytest.Pytester:
    """A project holding a copy of the demo dataset (same content, so the same images)."""
    shutil.copytree(DEMO, pytester.path / "datasets" / "demo")
    return pytester


def _session_containers(agent: str | None = None) -> list[dict[str, Any]]:
    """Run containers of any session (of one agent's runs, given `agent`)."""
    return cleanup().containers({"label": f"ssebench.agent={agent}" if agent else "ssebench.session"})


def _started_by(process: subprocess.Popen[bytes]) -> list[dict[str, Any]]:
    """The run containers of the session `process` leads: a leftover of another test's session is not counted."""
    return cleanup().containers({"label": [f"ssebench.controller={process.pid}", "ssebench.agent=sleeper"]})


def test_reference_passes_every_demo_task(demo: pytest.Pytester) -> None:
    result = demo.runpytest_subprocess(
        "datasets/demo",
        "--agent",
        "reference",
        "--results",
        "out",
        "--junitxml",
        "junit.xml",
        "--html",
        "report.html",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*SSEBench scores*", "*reference*none*2*3*3*0*0*100%*100%*100%*100%*"])
    # Every run has its own directory, with everything a run leaves.
    runs = sorted((demo.path / "out").glob("*/none/reference/*-d2-sandbox-*"))
    assert len(runs) == 3
    for run_dir in runs:
        names = {p.name for p in run_dir.iterdir()}
        assert {
            "summary.json",
            "result.json",
            "final.patch",
            "commits.log",
            "daemon.log",
            "evaluator.log",
            "agent.log",
            "mcp.log",
            "archive",
            "container.log",
        } <= names
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["grade"] == "passed" and summary["config"]["reference_run"] is True
        assert {"task", "config", "grade", "run_id", "started_at", "durations"} <= set(summary)
        assert (run_dir / "archive" / "dialog.jsonl").exists()
        assert os.readlink(run_dir.parent / "latest") == run_dir.name
    junit = ET.parse(demo.path / "junit.xml")
    props = {p.get("name"): p.get("value") for p in junit.iter("property")}
    assert props["ssebench.status"] == "passed" and props["ssebench.pov_total"] == "1"
    report = (demo.path / "report.html").read_text()
    assert "tlv.c" in report and "passed" in report and "final.patch" in report


def test_dummy_fails_every_demo_task_naming_the_poc(demo: pytest.Pytester) -> None:
    result = demo.runpytest_subprocess(
        "datasets/demo", "--agent", "dummy", "--results", "out", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(failed=3)
    text = failure_reports(result)
    assert text.count("A proof of concept still reproduces: /ssebench/pocs/") == 3
    assert "Checks: build passed; PoCs 0/1 fixed; variants 0/2 fixed; function test passed" in text


def _image_ids() -> dict[str, str]:
    """The id of each tagged layer image (untagged ones, all named <none>:<none>, are no image's current form)."""
    return {
        tag: image["Id"]
        for image in client().api.images(filters={"label": "ssebench.layer"})
        for tag in image.get("RepoTags") or []
        if tag != "<none>:<none>"
    }


def test_sweep_in_parallel_with_trials(demo: pytest.Pytester) -> None:
    before = _image_ids()
    result = demo.runpytest_subprocess(
        "datasets/demo",
        "--agent",
        "reference",
        "--agent",
        "dummy",
        "--trials",
        "2",
        "-n",
        "2",
        "--results",
        "out",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=6, failed=6)
    # Per agent: 6 runs, the pass rate with its Wilson interval, pass@1 and pass@2 over the three tasks.
    table = result.stdout.str().split("SSEBench scores")[1].splitlines()[1:4]
    assert (
        table[0].split()[:11]
        == ["agent", "model", "diff", "mode", "runs", "passed", "failed", "error", "pass", "rate", "[95%"]
        and "pass@1  pass@2" in table[0]
    ), table
    assert table[1].split()[:11] == ["dummy", "none", "2", "sandbox", "6", "0", "6", "0", "0%", "[0-39]", "0%"], table
    assert table[2].split()[:11] == [
        "reference",
        "none",
        "2",
        "sandbox",
        "6",
        "6",
        "0",
        "0",
        "100%",
        "[61-100]",
        "100%",
    ], table
    summaries = [json.loads(p.read_text()) for p in (demo.path / "out").glob("*/*/*/*-sandbox-*/summary.json")]
    assert sorted(s["config"]["trial"] for s in summaries) == [1] * 6 + [2] * 6
    # The images were current: nothing was built again (another test's agents may have been built meanwhile).
    assert {tag: image for tag, image in _image_ids().items() if tag in before} == before
    [session] = {s["session"] for s in summaries}
    assert cleanup().containers({"label": f"ssebench.session={session}"}) == []


def test_an_interrupted_sweep_resumes_with_what_had_not_finished(demo: pytest.Pytester) -> None:
    def run_dirs() -> list[Path]:
        return sorted((demo.path / "out" / "c-demo" / "none" / "dummy").glob("*-d2-sandbox-*"))

    # The sweep stops at its first failure (-x): one run of three is finished.
    first = demo.runpytest_subprocess(
        "datasets/demo/c-demo",
        "--agent",
        "dummy",
        "--trials",
        "3",
        "-x",
        "--results",
        "out",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
    )
    first.assert_outcomes(failed=1)
    assert "resumed:" not in first.stdout.str() and "ran again" not in first.stdout.str()  # no --resume: no word of it
    [done] = run_dirs()
    resumed = demo.runpytest_subprocess(
        "datasets/demo/c-demo",
        "--agent",
        "dummy",
        "--trials",
        "3",
        "--resume",
        "--results",
        "out",
        "--junitxml",
        "junit.xml",
        "-p",
        "no:cacheprovider",
    )
    resumed.assert_outcomes(failed=3)
    resumed.stdout.fnmatch_lines(
        [
            "resumed: 1 item(s) reported from finished runs, not run again; 2 run again",
            "  ran again: datasets/demo/c-demo/sse/config.yaml::dummy[[]none-d2-sandbox-t2[]]: no earlier run of this trial",
            "  ran again: datasets/demo/c-demo/sse/config.yaml::dummy[[]none-d2-sandbox-t3[]]: no earlier run of this trial",
        ]
    )
    # Two new runs; the finished one was reported from its directory, not run again.
    assert len(run_dirs()) == 3 and done in run_dirs()
    props = [
        {p.get("name"): p.get("value") for p in case.iter("property")}
        for case in ET.parse(demo.path / "junit.xml").iter("testcase")
    ]
    from_disk = [p for p in props if p["ssebench.resumed"] == "True"]
    assert len(from_disk) == 1 and from_disk[0]["ssebench.run_dir"] == str(done)
    assert from_disk[0]["ssebench.trial"] == "1"
    # Everything finished now: resuming again runs nothing.
    again = demo.runpytest_subprocess(
        "datasets/demo/c-demo",
        "--agent",
        "dummy",
        "--trials",
        "3",
        "--resume",
        "--results",
        "out",
        "-p",
        "no:cacheprovider",
    )
    again.assert_outcomes(failed=3)
    again.stdout.fnmatch_lines(["resumed: 3 item(s) reported from finished runs, not run again; 0 run again"])
    assert len(run_dirs()) == 3


def test_a_run_beside_popular_plugins(demo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest-timeout, pytest-retry, pytest-rerunfailures, pytest-randomly and pytest-cov loaded, and used."""
    from tests.unit.test_plugin import beside_popular_plugins

    beside_popular_plugins(monkeypatch)
    result = demo.runpytest_subprocess(
        "datasets/demo/c-demo",
        "--agent",
        "dummy",
        "--timeout",
        "900",
        "--cov=ssebench",
        "-p",
        "randomly",
        "--results",
        "out",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "Using --randomly-seed=*",
            "*A proof of concept still reproduces*",
            "*SSEBench scores*",
            "*coverage: platform*",
        ]
    )


def test_broken_dockerfile_is_an_error_with_the_build_log(demo: pytest.Pytester) -> None:
    unpin(demo.path / "datasets" / "demo")  # else the pinned demo refuses the edited task before any build
    dockerfile = demo.path / "datasets" / "demo" / "c-demo" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN echo the-case-build-breaks-here && false\n")
    result = demo.runpytest_subprocess(
        "datasets/demo", "--agent", "dummy", "--results", "out", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(failed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*Infrastructure error, not a grade*c-demo*case layer*", "*the-case-build-breaks-here*"]
    )


SLEEPER = """\
ARG SSEBENCH_TOOL
FROM ${SSEBENCH_TOOL}
CMD ["sleep", "600"]
"""


@pytest.fixture
def sleeper(demo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """Agents dir with the bundled agents and `sleeper`, whose runs stay in the agent phase."""
    agents = demo.path / "agents"
    shutil.copytree(Path(__file__).resolve().parents[2] / "agents", agents)
    (agents / "sleeper").mkdir()
    (agents / "sleeper" / "agent.yaml").write_text("name: sleeper\nneeds_model: false\n")
    (agents / "sleeper" / "Dockerfile").write_text(SLEEPER)
    monkeypatch.setenv("SSEBENCH_AGENTS_DIR", str(agents))
    return demo


def _start(pytester: pytest.Pytester, mode: str = "sandbox") -> subprocess.Popen[bytes]:
    """The sweep, its output in `session.log`; with faulthandler, so that SIGABRT shows where it hangs."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "datasets/demo/c-demo",
        "datasets/demo/go-demo",
        "--agent",
        "sleeper",
        "-n",
        "2",
        "--results",
        "out",
        "-p",
        "no:cacheprovider",
        "--mode",
        mode,
    ]
    with open(pytester.path / "session.log", "wb") as log:
        return subprocess.Popen(
            command,
            cwd=pytester.path,
            env={**os.environ, "PYTHONFAULTHANDLER": "1"},
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=interruptible,
        )


def _interrupt(process: subprocess.Popen[bytes], pytester: pytest.Pytester, timeout: float = 120) -> None:
    """Ctrl-C the sweep and wait for it to end; if it does not, fail with every Python stack of its tree."""
    workers = _children(process.pid)
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        for pid in [process.pid, *workers]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGABRT)
        time.sleep(3)
        log = (pytester.path / "session.log").read_text(errors="replace")
        raise AssertionError(
            f"the sweep did not end within {timeout} s of Ctrl-C; its output and stacks:\n{log[-20000:]}"
        ) from None


def _wait_for_containers(process: subprocess.Popen[bytes], count: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len([c for c in _started_by(process) if c.get("State") == "running"]) >= count:
            return
        time.sleep(1)
    raise AssertionError(f"{count} run containers did not start")


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def _listed_in_agent_phase(agent: str, runs: int, timeout: float = 120) -> list[dict[str, Any]]:
    """What `ssebench ps --json` lists of `agent`'s runs, once all `runs` are in their agent phase (or at
    the timeout, as they are then)."""
    deadline = time.monotonic() + timeout
    while True:
        listed = subprocess.run(
            [sys.executable, "-m", "ssebench.cli", "ps", "--json"], capture_output=True, text=True, check=True
        )
        mine: list[dict[str, Any]] = [r for r in json.loads(listed.stdout) if r["agent"] == agent]
        if [r["phase"] for r in mine] == ["agent"] * runs or time.monotonic() > deadline:
            return mine
        time.sleep(1)


def test_ctrl_c_leaves_nothing_behind(sleeper: pytest.Pytester) -> None:
    process = _start(sleeper)
    try:
        _wait_for_containers(process, 2)
        volumes = cleanup().volumes({"label": f"ssebench.controller={process.pid}"})
        assert len(volumes) == 4, volumes  # the positive control: each run's runner area and tree, labelled
        # While they run, `ssebench ps` shows both in their agent phase.
        mine = _listed_in_agent_phase("sleeper", 2)
        assert sorted((r["task"], r["model"], r["difficulty"], r["mode"], r["phase"]) for r in mine) == [
            ("c-demo", "none", "2", "sandbox", "agent"),
            ("go-demo", "none", "2", "sandbox", "agent"),
        ]
        table = subprocess.run(
            [sys.executable, "-m", "ssebench.cli", "ps"], capture_output=True, text=True, check=True
        ).stdout
        assert table.startswith("TASK") and "sleeper" in table
        _interrupt(process, sleeper)
    finally:
        process.kill()
    assert _started_by(process) == []
    assert cleanup().volumes({"label": f"ssebench.controller={process.pid}"}) == []


def test_ctrl_c_in_sidecar_mode_leaves_no_container_volume_or_network(sleeper: pytest.Pytester) -> None:
    process = _start(sleeper, "sidecar")
    try:
        _wait_for_containers(process, 4)  # two runs, two containers each
        volumes = cleanup().volumes({"label": f"ssebench.controller={process.pid}"})
        # The positive control: four volumes per run, labelled (three shared, the task container's runner area).
        assert len(volumes) == 8, volumes
        roles = sorted(c["Labels"].get("ssebench.role", "") for c in _started_by(process))
        assert roles == ["agent", "agent", "task", "task"], roles
        mine = _listed_in_agent_phase("sleeper", 2)  # each run once (by its agent container)
        assert sorted((r["task"], r["mode"], r["phase"]) for r in mine) == [
            ("c-demo", "sidecar", "agent"),
            ("go-demo", "sidecar", "agent"),
        ]
        _interrupt(process, sleeper)
    finally:
        process.kill()
    assert _started_by(process) == []
    assert cleanup().volumes({"label": f"ssebench.controller={process.pid}"}) == []
    assert client().networks.list(filters={"label": f"ssebench.controller={process.pid}"}) == []


def test_killed_worker_and_crashed_session_are_reaped_by_the_next(sleeper: pytest.Pytester) -> None:
    process = _start(sleeper)
    try:
        _wait_for_containers(process, 2)
        workers = _children(process.pid)
        assert workers, "no xdist worker found"
        os.kill(workers[0], signal.SIGKILL)
        os.kill(process.pid, signal.SIGKILL)  # and the controller crashes too
        process.wait(timeout=60)
    finally:
        process.kill()
    for worker in workers:  # the survivor, reparented once its controller died
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)
    time.sleep(1)
    assert _started_by(process), "the crash should have left containers for the next session to reap"
    nextone = sleeper.runpytest_subprocess(
        "datasets/demo/c-demo", "--agent", "dummy", "--collect-only", "-q", "-p", "no:cacheprovider"
    )
    assert nextone.ret == 0
    assert _started_by(process) == []
    assert client().networks.list(filters={"label": f"ssebench.controller={process.pid}"}) == []


def test_ssebench_run_cli(demo: pytest.Pytester) -> None:
    passed = subprocess.run(
        [
            sys.executable,
            "-m",
            "ssebench.cli",
            "run",
            "--task",
            "datasets/demo/go-demo",
            "--agent",
            "reference",
            "--results",
            "out",
            "--require-pass",
        ],
        cwd=demo.path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "grade: passed" in passed.stdout and "run directory: " in passed.stdout
    [reference_dir] = (demo.path / "out" / "go-demo" / "none" / "reference").glob("*-d2-sandbox-*")
    # What the run's consumers read: the known fix beside the agent's patch, and the run's settings in result.json.
    task_patch = demo.path / "datasets" / "demo" / "go-demo" / "sse" / "diffs" / "patch.diff"
    assert (reference_dir / "reference.patch").read_bytes() == task_patch.read_bytes()
    config = json.loads((reference_dir / "result.json").read_text())["config"]
    assert config["reference_run"] is True and config["egress"] == "restricted" and config["agent"] == "reference"
    # The agent's final tree, as the engine tarred it: the fix the reference agent applied is in it.
    with tarfile.open(reference_dir / "source.tar.gz") as tar:
        fixed = tar.extractfile(next(n for n in tar.getnames() if n.endswith("/kvrec.go")))
        assert fixed is not None and b"value length: %w" in fixed.read()  # a line the fix adds
    failed = subprocess.run(
        [
            sys.executable,
            "-m",
            "ssebench.cli",
            "run",
            "--task",
            "go-demo",
            "--datasets",
            "datasets",
            "--agent",
            "dummy",
            "--results",
            "out",
            "--require-pass",
            # Upstream's spellings: the run's id names its directory.
            "--run-id",
            "first-try",
            "--timeout",
            "300",
            "--local",
        ],
        cwd=demo.path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert failed.returncode == 1
    assert "grade: failed (PoC failed: /ssebench/pocs/" in failed.stdout
    run_dir = demo.path / "out" / "go-demo" / "none" / "dummy" / "first-try"
    assert f"run directory: {run_dir}" in failed.stdout
    assert json.loads((run_dir / "summary.json").read_text())["run_id"] == "first-try"
    assert json.loads((run_dir / "result.json").read_text())["config"]["reference_run"] is False


FLAKY_CONFTEST = """
from ssebench.engine import DockerBackend
from ssebench.errors import SSEBenchError


class Flaky(DockerBackend):
    starts = 0

    def start(self, spec):
        Flaky.starts += 1
        if Flaky.starts == 1:
            raise SSEBenchError("the engine hiccuped")
        return super().start(spec)


def pytest_ssebench_backend(config):
    return Flaky()
"""


@pytest.mark.parametrize("retries, outcome", [("0", {"errors": 1}), ("2", {"failed": 1})])
def test_infrastructure_errors_are_retried_failures_never(
    demo: pytest.Pytester, retries: str, outcome: dict[str, int]
) -> None:
    demo.makeconftest(FLAKY_CONFTEST)
    result = demo.runpytest_subprocess(
        "datasets/demo/c-demo",
        "--agent",
        "dummy",
        "--infra-retries",
        retries,
        "--results",
        "out",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(**outcome)
    runs = list((demo.path / "out" / "c-demo" / "none" / "dummy").glob("*-d2-sandbox-*"))
    # One attempt hit the hiccup; with retries one more ran and was graded failed, and was not retried.
    assert len(runs) == (1 if retries == "0" else 2)
    if retries == "0":
        result.stdout.fnmatch_lines(["*Infrastructure error, not a grade: the engine hiccuped*"])


# -- a model-driven agent through the plugin, read in a browser ----------------------


def test_chat_agent_fixes_the_demo_through_the_gateway_and_the_report_shows_it(demo: pytest.Pytester) -> None:
    from sse.dialog import read, validate

    models = Path(__file__).resolve().parents[2] / "models"
    result = demo.runpytest_subprocess(
        "datasets/demo",
        "--agent",
        "chat-agent",
        "--model",
        "scripted-fix",
        "--results",
        "out",
        "--html",
        "report.html",
        "--self-contained-html",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=3)
    runs = sorted((demo.path / "out").glob("*/scripted-fix/chat-agent/*-d2-sandbox-*"))
    assert len(runs) == 3
    for run_dir in runs:
        dialog = read(run_dir / "archive" / "dialog.jsonl")
        assert validate(dialog) == [], run_dir
        prompt = next(r["text"] for r in dialog if r["type"] == "prompt")
        steps = scripted_steps(models / "scripted" / "fix.yaml", prompt)
        usage = json.loads((run_dir / "summary.json").read_text())["usage"]
        expected = (
            sum(s["usage"]["prompt_tokens"] for s in steps),
            sum(s["usage"]["completion_tokens"] for s in steps),
        )
        assert (usage["prompt_tokens"], usage["completion_tokens"]) == expected, run_dir
        assert usage["calls"] == len(steps) and usage["stopped"] is None
        assert usage["cost"] == pytest.approx((expected[0] * 3.0 + expected[1] * 15.0) / 1e6)
        # Each test_patch report the agent was told is in the run's directory (mcp.log).
        asked = sum(1 for s in steps for call in s.get("tool_calls") or [] if call["name"] == "test_patch")
        assert (run_dir / "mcp.log").read_text().count("[test_patch] end") == asked, run_dir
    text = rendered_text(demo.path / "report.html")
    # What a person sees: the runs, the vulnerability column, and each transcript with its tool calls.
    assert "3 Passed" in text and "Vulnerability" in text
    for seen in (
        "chat-agent with model scripted-fix",
        "Task prompt",
        "view_file",
        "edit_file",
        "test_patch",
        "tokens: 1850 in / 74 out",
        "complete: done",
        "TLV_ERR_TOO_LONG",
        "model use",
    ):
        assert seen in text, seen


def test_sidecar_runs_through_the_plugin_are_graded_where_the_task_is(demo: pytest.Pytester) -> None:
    """Sidecar mode as a user runs it: the plugin, two xdist workers sharing the controller's gateway, a model
    agent that fixes c-demo and the dummy that does not; each graded in its task container."""
    result = demo.runpytest_subprocess(
        "datasets/demo/c-demo",
        "--agent",
        "chat-agent",
        "--agent",
        "dummy",
        "--model",
        "scripted-fix",
        "--mode",
        "sidecar",
        "-n",
        "2",
        "--results",
        "out",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1, failed=1)
    summaries = {
        s["config"]["agent"]: s
        for s in (json.loads(p.read_text()) for p in (demo.path / "out").glob("c-demo/*/*/*/summary.json"))
    }
    assert {a: (s["grade"], s["config"]["mode"]) for a, s in summaries.items()} == {
        "chat-agent": ("passed", "sidecar"),
        "dummy": ("failed", "sidecar"),
    }
    assert summaries["chat-agent"]["usage"]["calls"] >= 2  # through the controller's gateway, from a worker
    result.stdout.fnmatch_lines(["*A proof of concept still reproduces*"])
    (session,) = {s["session"] for s in summaries.values()}
    assert cleanup().containers({"label": f"ssebench.session={session}"}) == []  # the workers' runs, reaped


def test_a_run_whose_model_never_answered_is_an_error_not_a_failure(
    demo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the check (--skip-model-check), a model whose server is down: every call of the run fails upstream,
    so the run measured nothing of its agent: an infrastructure error naming the model and the cause."""
    from tests.helpers import closed_port

    (demo.path / "models").mkdir()
    (demo.path / "models" / "down.yaml").write_text(f"name: down\nbase_url: http://127.0.0.1:{closed_port()}/v1\n")
    monkeypatch.setenv("SSEBENCH_MODELS_DIR", str(demo.path / "models"))
    result = demo.runpytest_subprocess(
        "datasets/demo/c-demo",
        "--agent",
        "chat-agent",
        "--model",
        "down",
        "--skip-model-check",
        "--results",
        "out",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*Infrastructure error, not a grade: model down: every call failed upstream (* calls): "
            "the upstream of model down did not answer: ConnectError*"
        ]
    )
    [summary_file] = (demo.path / "out").glob("c-demo/down/chat-agent/*-d2-sandbox-*/summary.json")
    summary = json.loads(summary_file.read_text())
    assert summary["grade"] == "error" and summary["error"].startswith("model down: every call failed upstream")
    usage = summary["usage"]
    assert usage["answered"] == 0 and usage["upstream_failed"] == usage["calls"] >= 1


def test_claude_code_fixes_the_demo_through_the_gateway(demo: pytest.Pytester) -> None:
    """The real Claude Code CLI (agents/claude-code, its software volume) plays fix.yaml's Claude Code steps."""
    import yaml
    from sse.dialog import read, validate

    models = Path(__file__).resolve().parents[2] / "models"
    result = demo.runpytest_subprocess(
        "datasets/demo",
        "--agent",
        "claude-code",
        "--model",
        "scripted-fix",
        "--results",
        "out",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=3)
    script = yaml.safe_load((models / "scripted" / "fix.yaml").read_text())
    runs = sorted((demo.path / "out").glob("*/scripted-fix/claude-code/*-d2-sandbox-*"))
    assert len(runs) == 3
    for run_dir in runs:
        dialog = read(run_dir / "archive" / "dialog.jsonl")
        assert validate(dialog) == [], run_dir
        assert dialog[0]["cli_version"] == "2.1.332 (Claude Code)" and dialog[0]["sdk"] == "claude-agent-sdk 0.2.189"
        prompt = dialog[1]["text"]
        [steps] = [c["steps"] for c in script["conversations"] if c["match"] in prompt and "Edit" in c.get("tools", [])]
        calls = [r for r in dialog if r["type"] == "tool_call"]
        assert [c["name"] for c in calls] == [t["name"] for s in steps for t in s.get("tool_calls", [])], run_dir
        results = {r["tool_id"]: r for r in dialog if r["type"] == "tool_result"}
        assert all(results[c["tool_id"]]["error"] is None for c in calls), run_dir
        test_patch = next(c for c in calls if c["name"] == "mcp__ssebench__test_patch")
        assert "passed" in results[test_patch["tool_id"]]["output"]
        expected = (
            sum(s["usage"]["prompt_tokens"] for s in steps),
            sum(s["usage"]["completion_tokens"] for s in steps),
        )
        complete = dialog[-1]
        assert complete["status"] == "done", complete
        assert (complete["totals"]["input_tokens"], complete["totals"]["output_tokens"]) == expected
        usage = json.loads((run_dir / "summary.json").read_text())["usage"]
        # The gateway's account: every call the CLI made was a scripted step, and nothing else.
        assert (usage["prompt_tokens"], usage["completion_tokens"]) == expected, run_dir
        assert usage["calls"] == len(steps) and usage["refused"] == 0 and usage["stopped"] is None
        assert (run_dir / "archive" / "claude-stream.jsonl").stat().st_size > 0


# CI leaves it out (README, Tests): chat-agent's budget and wander runs are CI's; this agent's, `make test TESTS=`.
@pytest.mark.exhaustive
def test_claude_code_stops_at_the_budget_and_a_wandering_model_fixes_nothing(demo: pytest.Pytester) -> None:
    from sse.dialog import read, validate

    result = demo.runpytest_subprocess(
        "datasets/demo/c-demo",
        "--agent",
        "claude-code",
        "--model",
        "scripted-budget,scripted-wander",
        "--results",
        "out",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(failed=2)
    [budget_run] = (demo.path / "out").glob("c-demo/scripted-budget/claude-code/*-d2-sandbox-*")
    dialog = read(budget_run / "archive" / "dialog.jsonl")
    assert validate(dialog) == []
    assert dialog[-1]["status"] == "budget" and "budget is exhausted" in dialog[-1]["reason"], dialog[-1]
    usage = json.loads((budget_run / "summary.json").read_text())["usage"]
    # Two calls (1850 + 3120 prompt tokens) cross the 5,000 tokens; the refusal is not retried.
    assert usage["calls"] == 2 and usage["refused"] == 1 and usage["stopped"].startswith("budget exhausted")
    [wander_run] = (demo.path / "out").glob("c-demo/scripted-wander/claude-code/*-d2-sandbox-*")
    dialog = read(wander_run / "archive" / "dialog.jsonl")
    assert validate(dialog) == []
    assert [r["name"] for r in dialog if r["type"] == "tool_call"] == ["Bash", "Bash", "Glob"]
    assert dialog[-1]["status"] == "done"
    assert json.loads((wander_run / "summary.json").read_text())["usage"]["calls"] == 4
