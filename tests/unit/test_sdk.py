"""The sse SDK against the real daemon app, in-process, through its transport seam."""

from __future__ import annotations

import importlib
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import sse
import sse.daemon
from sse.daemon import Daemon, same_version
from sse.error import SDKError
from sse.grading import PatchResult, grade
from sse.helper import ScriptResult
from sse.metadata import Metadata, TaskDescription, parse_metadata
from sse.prompt import build_prompt
from sse.result import VARIANT_KEYS, RunResult
from sse.tools import bash, bencher

from ssebench.runtime.bencher import BencherError
from ssebench.runtime.daemon import ADMIN, AGENT, create_app, listener_app
from ssebench.runtime.service import TaskService
from tests.inprocess import InProcessTransport
from tests.unit import test_daemon
from tests.unit.test_daemon import FakeBencher

# The daemon tests' task service, as a fixture of this module too.
service = test_daemon.service


class ScriptedBencher(FakeBencher):
    """Answers each check with a chosen exit code."""

    def __init__(self, codes: dict[str, int]) -> None:
        super().__init__()
        self.codes = codes

    def _ran(self, name: str, arg: object) -> ScriptResult:
        self.calls.append((name, arg))
        if self.codes.get(name) == -999:
            raise BencherError(500, "git apply failed: patch does not apply")
        code = self.codes.get(name, 0)
        return ScriptResult(code=code, stdout=f"{name} out", stderr=f"{name} err" if code else "")


# The fixture below: a daemon on the task service, through a listener of the kind and at the difficulty given.
Connect = Callable[..., Daemon]


@pytest.fixture
def connect(service: TaskService) -> Iterator[Connect]:
    opened: list[tuple[Daemon, InProcessTransport]] = []

    def make(kind: str = AGENT, difficulty: int = 2) -> Daemon:
        transport = InProcessTransport(listener_app(create_app(service, difficulty), kind))
        daemon = Daemon(transport=transport)
        opened.append((daemon, transport))
        sse.daemon._instance = daemon
        return daemon

    yield make
    sse.daemon._instance = None
    for daemon, transport in opened:
        daemon.close()
        transport.close()


def test_project_fetches_the_task_on_import(connect: Connect, service: TaskService) -> None:
    connect(AGENT)
    sys.modules.pop("sse.project", None)
    project = importlib.import_module("sse.project")
    assert project.metadata.id == "t1" and project.source == Path("/src/tiny")
    assert project.all_poc == [service.task_dir / "pocs/crash.bin"]
    assert project.capabilities.poc_count == 1
    assert project.build().is_success()
    with pytest.raises(SDKError, match="withholds run_poc"):
        project.run_poc(project.all_poc[0])


def test_bash_and_bencher_results(connect: Connect) -> None:
    connect(AGENT, 0)
    assert bash.execute("echo hi") == ScriptResult(0, "ran: echo hi", "")
    assert bencher.function_test().stdout == "function_test ran"


@pytest.mark.parametrize(
    "codes, status, message",
    [
        ({}, "passed", None),
        ({"build": 2}, "failed", "Build failed"),
        ({"run_poc": 1}, "failed", "PoC failed: "),
        ({"function_test": 1}, "failed", "Function test failed"),
        ({"intent_test": 1}, "failed", "Intent test failed"),
        ({"intent_test": -999}, "failed", "Intent test failed"),
        ({"run_variant": 1}, "failed", "Variant failed: variants/longer.bin"),
    ],
)
def test_grade_walks_the_checks(
    connect: Connect,
    service: TaskService,
    codes: dict[str, int],
    status: str,
    message: str | None,
) -> None:
    service.bencher = ScriptedBencher(codes)
    connect(ADMIN)
    result = grade()
    assert result.status() == status
    assert (result.error_msg or "").startswith(message or "")
    if codes.get("build"):
        assert result.pov_total is None and result.func_test_success is None  # nothing ran after the build
    else:
        assert result.pov_total == 1 and result.func_test_success is (codes.get("function_test", 0) == 0)
        assert (result.variants_passed, result.variants_total) == (0 if codes.get("run_variant") else 1, 1)


@pytest.mark.parametrize("variant_code", [0, 1])
def test_a_variant_reported_only_leaves_the_grade_to_the_other_checks(
    connect: Connect, service: TaskService, variant_code: int
) -> None:
    """variant_policy "report": a variant that still crashes is counted, and the grade is the other checks'."""
    service.task = replace(service.task, variant_policy="report")
    service.bencher = ScriptedBencher({"run_variant": variant_code})
    connect(ADMIN)
    result = grade()
    assert result.status() == "passed" and result.error_msg is None
    assert (result.variants_passed, result.variants_total, result.variants_decide) == (1 - variant_code, 1, False)


def test_a_task_without_variants_runs_none_and_writes_upstreams_keys(connect: Connect, service: TaskService) -> None:
    service.task = replace(service.task, variants=[])
    service.bencher = ScriptedBencher({})
    connect(ADMIN)
    result = grade()
    assert result.status() == "passed" and result.variants_total is None
    assert not [call for call in service.bencher.calls if call[0] == "run_variant"]
    written = RunResult(status="passed", patch_result=result).to_json()["patch_result"]
    assert not set(written) & set(VARIANT_KEYS)


def test_grade_is_refused_on_the_agent_socket(connect: Connect) -> None:
    connect(AGENT)
    with pytest.raises(SDKError, match="admin socket only"):
        grade()


def test_patch_result_rules() -> None:
    assert PatchResult().status() == "error" and not PatchResult().checks_ran()
    result = PatchResult(build_success=True, pov_passed=1, pov_total=1)
    assert result.status() == "passed" and result.is_fully_successful()
    result.mark_failure("first", "log1")
    result.mark_failure("second", "log2")
    assert (result.error_msg, result.error_log, result.status()) == ("first", "log1", "failed")
    assert PatchResult(build_success=True, pov_passed=0, pov_total=2).status() == "failed"
    variant = PatchResult(build_success=True, pov_passed=1, pov_total=1, variants_passed=0, variants_total=1)
    assert replace(variant, variants_decide=True).status() == "failed"
    assert replace(variant, variants_decide=False).status() == "passed"


def test_an_error_message_without_a_check_is_an_error_as_seed_003_says() -> None:
    result = PatchResult()
    result.mark_failure("Patch apply failed", "does not apply")
    assert result.status() == "error" and not result.checks_ran()


def test_versions() -> None:
    assert same_version("1.0.0rc1", "1.0.0-rc.1")
    assert same_version("1.2.0", "1.2.0")
    assert not same_version("1.1.0", "1.2.0")
    assert not same_version("1.1.0", None)


def test_version_mismatch_warns(connect: Connect, service: TaskService, caplog: pytest.LogCaptureFixture) -> None:
    service.version = "9.9.9"
    with caplog.at_level(logging.WARNING, logger="sse"):
        connect(AGENT)
    assert f"SDK version ({sse.__version__}) does not match daemon version (9.9.9)" in caplog.text


def test_no_daemon_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSE_DAEMON_SOCKET", raising=False)
    monkeypatch.delenv("SSE_AGENT_DOCKER", raising=False)
    with pytest.raises(Exception, match="SSE_DAEMON_SOCKET"):
        Daemon()


def test_daemon_not_answering(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="does not answer"):
        Daemon(str(tmp_path / "no.sock"))


def test_reference_patch_only_through_the_admin_socket(connect: Connect, monkeypatch: pytest.MonkeyPatch) -> None:
    from sse import reference

    from tests.unit.test_daemon import PATCH

    admin = connect(ADMIN)
    monkeypatch.setattr(reference, "Daemon", lambda socket: admin)
    assert reference.get_reference_patch() == PATCH
    agent = connect(AGENT)
    monkeypatch.setattr(reference, "Daemon", lambda socket: agent)
    with pytest.raises(SDKError):
        reference.get_reference_patch()


def test_old_name_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    from sse import cheating

    monkeypatch.setattr(cheating, "get_reference_patch", lambda: "diff")
    with pytest.warns(DeprecationWarning, match="get_reference_patch"):
        assert cheating.get_ground_truth() == "diff"


def _metadata(**description: object) -> Metadata:
    return Metadata(
        id="t",
        project="tlvkit",
        language="c",
        source=Path("/src/tlvkit"),
        task_description=TaskDescription(
            **{
                "issue": None,
                "crash_report": None,  # type: ignore[arg-type]
                "bug_description": None,
                **description,
            }
        ),
        poc=[Path("/ssebench/pocs/x")],
        build_script="make",
        test_script=None,
    )


def test_prompt_is_deterministic_and_skips_empty_fields() -> None:
    meta = _metadata(bug_description="overflow in tlv_parse", issue="none", crash_report=["ASan report", ""])
    text = build_prompt(meta)
    assert text == build_prompt(meta)
    assert text.startswith("# Task: tlvkit (C)")
    assert "## Bug description\n\noverflow in tlv_parse" in text and "## Report 1\n\nASan report" in text
    assert "## Issue" not in text and "## Report 2" not in text and "## Test script" not in text
    assert "/src/tlvkit" in text and "```sh\nmake\n```" in text
    assert "/ssebench/pocs" not in text


def test_parse_metadata_round_trip(service: TaskService) -> None:
    meta = parse_metadata(service.project())
    assert meta.task_description.crash_report == ["It crashes on long input.\n"]
    assert meta.build_script == "make\n"


def test_import_sse_contacts_nothing(tmp_path: Path) -> None:
    """import sse (with ai, grading, reference, tools) works with no daemon; sse.project needs one."""
    code = (
        "import sse, sse.ai, sse.grading, sse.reference, sse.tools, sse.prompt\n"
        "try:\n    import sse.project\nexcept RuntimeError as exc:\n    print('project:', exc)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "SSE_DAEMON_SOCKET": str(tmp_path / "no-daemon.sock")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("project: the daemon does not answer")
