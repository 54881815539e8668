"""What an agent wrote reaches a terminal as text, never as commands to it (escape sequences, a carriage return
that overwrites a line, bidirectional overrides): the failure text pytest shows, the CLI's output, the sweep's
messages. The HTML report escapes the same text for a browser (test_report.py)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from sse.result import RunResult

from ssebench.agent import load_agent
from ssebench.cli import main
from ssebench.errors import SSEBenchError
from ssebench.record import RunRecord
from ssebench.runspec import RunConfig
from ssebench.scores import ScoreTable
from ssebench.session import RunSession
from ssebench.settings import get_settings
from ssebench.task import load_task
from tests.helpers import DEMO

pytest_plugins = ["pytester"]

# A build log that commands the terminal: a window title, a cleared screen and the cursor sent home, a fake
# green line, a line overwritten by a carriage return, the 8-bit CSI, a bell, DEL and a right-to-left override.
ATTACK = (
    "compiling tlvkit\n"
    "\x1b]0;ssebench: every run passed\x07"
    "\x1b[2J\x1b[H"
    "\x1b[32mPASSED c-demo::dummy\x1b[0m\n"
    "FAILED\rPASSED\n"
    "\x9b31m 8-bit CSI\x07\x7f\n"
    "patch\u202eSSAP.txt\u2066isolated\u2069\n"
)
# What a terminal acts on, each present in ATTACK (the positive control of every test below).
RAW = ("\x1b", "\x07", "\r", "\x9b", "\x7f", "\u202e", "\u2066", "\u2069")
# What it shows instead.
SHOWN = (
    "\\x1b]0;ssebench: every run passed\\x07\\x1b[2J\\x1b[H\\x1b[32mPASSED c-demo::dummy\\x1b[0m",
    "FAILED\\x0dPASSED",
    "\\x9b31m 8-bit CSI\\x07\\x7f",
    "patch\\u202eSSAP.txt\\u2066isolated\\u2069",
)


def test_the_attack_holds_every_raw_control() -> None:
    assert all(char in ATTACK for char in RAW)


def assert_shown_as_text(text: str) -> None:
    """`text` (what a terminal was given) carries ATTACK escaped: every line of it, none of its controls."""
    raw = [f"U+{ord(char):04X}" for char in RAW if char in text]
    assert not raw, f"raw control characters reached the terminal: {raw}"
    for line in SHOWN:
        assert line in text, line


def test_controls_are_written_out_and_text_is_kept() -> None:
    from ssebench.logs import for_terminal

    assert_shown_as_text(for_terminal(ATTACK))
    kept = "tab\there\nnew line; naïve café, 中文, emoji 🙂, a backslash \\ and \\x1b as typed\n"
    assert for_terminal(kept) == kept
    # Windows line ends are line ends; a carriage return alone is not.
    assert for_terminal("a\r\nb\rc") == "a\nb\\x0dc"
    assert (
        for_terminal("\x00\x1f\x80\x9f\u061c\u200e\u200f\u202a\ud800")
        == "\\x00\\x1f\\x80\\x9f\\u061c\\u200e\\u200f\\u202a\\ud800"
    )
    assert for_terminal(for_terminal(ATTACK)) == for_terminal(ATTACK)


def _record(tmp_path: Path, **fields: object) -> RunRecord:
    config = RunConfig(task=load_task(DEMO / "c-demo"), agent=load_agent(get_settings().agents_dir, "dummy"))
    return RunRecord(config=config, run_id="r1", run_dir=tmp_path, started_at="now", **fields)  # type: ignore[arg-type]


def _failed(tmp_path: Path) -> RunRecord:
    return _record(
        tmp_path,
        grade="failed",
        result=RunResult.from_json(
            {
                "patch_result": {
                    "build_success": False,
                    "error_msg": "Build failed\x1b]0;ssebench: every run passed\x07",
                    "error_log": ATTACK,
                }
            }
        ),
        usage={"calls": 1, "stopped": "budget\x1b[2J"},
        node="host\x1b[H/n",
    )


def _broken(tmp_path: Path) -> RunRecord:
    (tmp_path / "container.log").write_text(ATTACK)
    return _record(tmp_path, infra_error=f"the run ended without a result.json; its log's last lines:\n{ATTACK}")


def test_the_failure_and_error_texts_pytest_shows_escape_what_the_run_wrote(tmp_path: Path) -> None:
    from pytest_ssebench.collect import error_text, failure_text

    failed = failure_text(_failed(tmp_path))
    assert "lines of its log:" in failed
    assert_shown_as_text(failed)
    assert_shown_as_text(error_text(_broken(tmp_path)))


def test_ssebench_run_prints_the_grade_and_error_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ssebench.cli import _report_run

    _report_run(_failed(tmp_path), require_pass=False)
    out = capsys.readouterr().out
    assert "grade: failed (Build failed\\x1b]0;" in out and "(ran on host\\x1b[H/n)" in out
    assert "\x1b" not in out and "\x07" not in out
    _report_run(_broken(tmp_path), require_pass=False)
    assert_shown_as_text(capsys.readouterr().out)


def test_ssebench_ps_and_errors_are_escaped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ssebench import inflight

    run = inflight.InFlight(
        run="r1",
        task=ATTACK.splitlines()[1],
        agent="dummy",
        model="none",
        difficulty="2",
        mode="sandbox",
        trial="1",
        phase="agent",
        elapsed=1.0,
        session="s",
        state="running",
    )
    monkeypatch.setattr(inflight, "runs_in_flight", lambda: [run])
    assert main(["ps"]) == 0
    out = capsys.readouterr().out
    assert "\\x1b]0;ssebench: every run passed\\x07" in out and "\x1b" not in out and "\x07" not in out

    def engine_error() -> list[inflight.InFlight]:
        raise SSEBenchError(f"reading a run's log: {ATTACK}")

    monkeypatch.setattr(inflight, "runs_in_flight", engine_error)
    assert main(["ps"]) == 1
    assert_shown_as_text(capsys.readouterr().err)


def test_dataset_verify_output_is_escaped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ssebench import verify

    def verified(
        settings: object, tasks: list[object], results: Path, *, jobs: int, say: object, **_: object
    ) -> list[object]:
        say(f"c-demo reference: failed — {ATTACK}")  # type: ignore[operator]
        return [verify.TaskVerdict(load_task(DEMO / "c-demo"), problems=[f"c-demo (reference): {ATTACK}"])]

    monkeypatch.setattr(verify, "verify", verified)
    assert main(["dataset", "verify", str(DEMO / "c-demo"), "--results", str(tmp_path)]) == 1
    said = capsys.readouterr()
    assert_shown_as_text(said.err)
    assert_shown_as_text(said.out)
    # The summary written beside the runs, read with cat as often as rendered.
    [summary] = tmp_path.glob("verify-*.md")
    assert_shown_as_text(summary.read_text())


def test_the_score_table_escapes_the_names_it_shows() -> None:
    table = ScoreTable()
    props = [
        ("ssebench.agent", "dummy\x1b[2J"),
        ("ssebench.model", "m\u202eodel"),
        ("ssebench.difficulty", 2),
        ("ssebench.mode", "sandbox"),
    ]
    table.add("a", "passed", props)
    lines = "\n".join(table.lines())
    assert "dummy\\x1b[2J" in lines and "m\\u202eodel" in lines
    assert "\x1b" not in lines and "\u202e" not in lines


# -- through the plugin, as an operator's terminal shows it --------------------------------------------------


@pytest.fixture
def demo(pytester: pytest.Pytester) -> pytest.Pytester:
    shutil.copytree(DEMO, pytester.path / "datasets" / "demo")
    return pytester


@pytest.mark.parametrize("capture", ["-s", "--capture=sys"])
def test_the_plugin_shows_a_run_s_log_and_errors_escaped(
    demo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capture: str
) -> None:
    """c-demo is graded failed with ATTACK as its build log; go-demo hits an infrastructure error quoting it
    (retried once, which the runner says on stderr); what dead sessions left cannot be removed, and
    --rebuild fails, each saying why in words that carry ATTACK too. No container runs."""
    import ssebench.build
    import ssebench.reaper

    def execute(runner: RunSession, config: RunConfig, *, build: bool = True) -> RunRecord:
        results = runner.plan.results
        run_dir = results / config.task.id / str(len(list(results.glob(f"{config.task.id}/*"))))
        run_dir.mkdir(parents=True)
        record = _failed(run_dir) if config.task.id == "c-demo" else _broken(run_dir)
        record.config = config
        return record

    def reap_orphans() -> int:
        raise SSEBenchError(f"the engine said: {ATTACK}")

    monkeypatch.setattr(RunSession, "execute", execute)
    monkeypatch.setattr(ssebench.reaper, "reap_orphans", reap_orphans)
    monkeypatch.setattr(ssebench.reaper, "reap_session", lambda session: 0)
    monkeypatch.setattr(
        ssebench.build,
        "build_images",
        lambda *a, **k: SimpleNamespace(
            failures={"c-demo": SSEBenchError(f"building the case layer failed: {ATTACK.splitlines()[1]}")}
        ),
    )
    result = demo.runpytest(
        "datasets/demo/c-demo",
        "datasets/demo/go-demo",
        "--agent",
        "dummy",
        "--rebuild",
        "--infra-retries",
        "1",
        "--results",
        "out",
        "--color=no",
        "-p",
        "no:cacheprovider",
        capture,
    )
    result.assert_outcomes(failed=1, errors=1)
    shown = result.stdout.str() + "\n" + result.stderr.str()
    assert_shown_as_text(shown)
    # Each place said its piece: the failure, the error, the retry, the sweep's two messages.
    for said in (
        "The build failed with the agent's patch.",
        "Infrastructure error, not a grade:",
        "attempt 1 of 2 hit an infrastructure error, retrying:",
        "could not remove what dead sessions left: the engine said: compiling tlvkit",
        "--rebuild: building the case layer failed: \\x1b]0;ssebench: every run passed",
    ):
        assert said in shown, said


def test_a_task_s_collection_error_shows_its_config_escaped(demo: pytest.Pytester) -> None:
    """A dataset from elsewhere is no more the operator's than a run's log is."""
    import yaml

    config = demo.path / "datasets" / "demo" / "c-demo" / "sse" / "config.yaml"
    config.write_text(config.read_text() + '"col\\e]0;pwned\\aour": blue\n')
    assert "col\x1b]0;pwned\x07our" in yaml.safe_load(config.read_text())
    result = demo.runpytest("datasets/demo/c-demo", "--agent", "dummy", "--collect-only", "-q", "--color=no")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*c-demo/sse/config.yaml: col\\x1b]0;pwned\\x07our: unknown key*"])
    assert "\x1b" not in result.stdout.str() and "\x07" not in result.stdout.str()
