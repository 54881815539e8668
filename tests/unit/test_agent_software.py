"""agent.yaml's `protocol` and `software`: how they are read, refused, checked against models, mounted into a
run and made part of its identity; and mini-swe-agent's trajectory as a dialog."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ssebench.agent import AGENTS_HOME, Agent, load_agent
from ssebench.agentvolume import agent_volume_name, fill_script
from ssebench.backend import Volume
from ssebench.errors import ConfigError, ConfigErrors
from ssebench.reaper import Session
from ssebench.record import RESUME_IDENTITY
from ssebench.runspec import RunConfig, container_spec, sidecar_specs
from ssebench.session import OptionError, Plan, check_models
from ssebench.settings import get_settings
from ssebench.task import load_task
from tests.helpers import DEMO

pytest_plugins = ["pytester"]

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "mini-swe-agent"
DOCKERFILE = 'ARG SSEBENCH_TOOL\nFROM ${SSEBENCH_TOOL}\nCOPY agent.py /opt/agent/agent.py\nCMD ["true"]\n'


def hashed(closure: str) -> str:
    """A closure's pins, each with a (made-up) digest of its wheel, as `ssebench agents lock` writes them."""
    return "".join(
        line + (f" --hash=sha256:{'a' * 64}" if line and not line.startswith("#") else "") + "\n"
        for line in closure.splitlines()
    )


def write_agent(folder: Path, yaml: str, closure: str | None = None, name: str = "tool") -> Path:
    path = folder / name
    path.mkdir(parents=True, exist_ok=True)
    (path / "agent.yaml").write_text(f"name: {name}\n{yaml}")
    (path / "Dockerfile").write_text(DOCKERFILE)
    (path / "agent.py").write_text("print('hi')\n")
    if closure is not None:
        (path / "requirements.txt").write_text(closure)
    return path


def errors_of(call: Any) -> list[str]:
    """The lines a ConfigError(s) says."""
    try:
        call()
    except ConfigErrors as exc:
        return [str(e) for e in exc.errors]
    except ConfigError as exc:
        return [str(exc)]
    raise AssertionError("no error")


def test_an_agent_speaks_openai_chat_and_has_no_software_unless_it_says(tmp_path: Path) -> None:
    write_agent(tmp_path, "")
    agent = load_agent(tmp_path, "tool")
    assert agent.protocol == "openai-chat" and agent.closure is None and agent.software_digest is None
    assert agent.home == f"{AGENTS_HOME}/tool" == "/opt/agents/tool"
    write_agent(tmp_path, "protocol: anthropic-messages\n")
    assert load_agent(tmp_path, "tool").protocol == "anthropic-messages"


@pytest.mark.parametrize(
    ("yaml", "closure", "said"),
    [
        ("protocol: anthropic\n", None, r"agent\.yaml.*protocol.*openai-chat.*anthropic-messages"),
        ("software: {python: [mini-swe-agent]}\n", "", r"software\.python: 'mini-swe-agent' must be pinned"),
        ("software: {python: ['x>=1']}\n", "", r"software\.python: 'x>=1' must be pinned exactly as name==version"),
        ("software: {pip: [x==1]}\n", None, r"software\.pip.*unknown key"),
        ("software: {python: [x==1]}\n", None, r"requirements\.txt.*file not found.*ssebench agents lock NAME"),
        ("software: {python: [x==1]}\n", hashed("x==1\ny"), r"requirements\.txt: line 2.*'y .*' must be pinned"),
        ("software: {python: [x==1]}\n", hashed("x==1\nX==2"), r"line 2.*x is pinned twice"),
        ("software: {python: [x==1]}\n", hashed("x==2"), r"requirements\.txt: x: .*has x==1 but this closure has x==2"),
        ("software: {python: [x==1]}\n", hashed("y==2"), r"has x==1 but this closure has no pin of it"),
        # Each wheel is the one locked: a pin without its digest, or with a malformed one, is refused.
        ("software: {python: [x==1]}\n", "x==1\n", r"line 1.*'x==1' must carry its wheel's digest.*--keep-versions"),
        ("software: {python: [x==1]}\n", "x==1 --hash=sha256:abc\n", r"line 1.*must carry its wheel's digest"),
        ("software: {python: [x==1]}\n", "x==1 --hash=md5:" + "a" * 32 + "\n", r"must carry its wheel's digest"),
    ],
)
def test_a_bad_protocol_or_software_is_one_line_naming_the_field(
    tmp_path: Path, yaml: str, closure: str | None, said: str
) -> None:
    write_agent(tmp_path, yaml, closure)
    [line] = errors_of(lambda: load_agent(tmp_path, "tool"))
    assert "\n" not in line and re.search(said, line), line


def test_the_software_digest_follows_the_version_the_pins_and_the_closure(tmp_path: Path) -> None:
    def digest(yaml: str, closure: str) -> str | None:
        write_agent(tmp_path, yaml, closure)
        return load_agent(tmp_path, "tool").software_digest

    base = digest("software: {python: [x==1]}\n", hashed("x==1\ny==2"))
    assert base is not None and base == digest("software: {python: [X==1]}\n", hashed("x==1\ny==2")) is not None
    assert base != digest("software: {python: [x==1]}\n", hashed("x==1\ny==3"))  # a dependency moved
    assert base != digest("version: '2'\nsoftware: {python: [x==1]}\n", hashed("x==1\ny==2"))
    # Comments do not make a new volume, but the closure's bytes are the identity: they do here.
    assert digest("software: {python: [x==1]}\n", hashed("# made by hand\nx==1\ny==2")) not in (None, base)


def test_mini_swe_agent_pins_its_whole_closure() -> None:
    agent = load_agent(get_settings().agents_dir, "mini-swe-agent")
    assert agent.config.software is not None and agent.config.software.python == ("mini-swe-agent==2.4.6",)
    assert agent.protocol == "openai-chat" and agent.needs_model
    closure = agent.closure
    assert closure is not None and "litellm==" in closure.read_text() and "mini-swe-agent==2.4.6" in closure.read_text()
    assert agent_volume_name(get_settings(), agent).startswith("ssebench-agent-mini-swe-agent-")


def test_the_fill_installs_offline_into_the_mount_itself_and_checks_it_root_s() -> None:
    script = fill_script("/opt/agents/x")
    assert "python3 -m venv --without-pip /opt/agents/x;" in script
    assert "--no-index" in script and "--no-deps" in script and "-r /tmp/ssebench-wheels/install.txt" in script
    assert "chown -R root:root /opt/agents/x; chmod -R go-w /opt/agents/x;" in script
    assert script.index("not root's alone") < script.index(".ssebench-agent-complete")  # the marker comes last


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "chat.yaml").write_text("name: chat\nbase_url: http://127.0.0.1:9/v1\n")
    (folder / "claude.yaml").write_text("name: claude\nbase_url: http://127.0.0.1:9/v1\nprotocol: anthropic-messages\n")
    (folder / "scripted").mkdir()
    shutil.copy(get_settings().models_dir / "scripted" / "fix.yaml", folder / "scripted" / "fix.yaml")
    (folder / "played.yaml").write_text("name: played\nscript: scripted/fix.yaml\n")
    monkeypatch.setenv("SSEBENCH_MODELS_DIR", str(folder))
    monkeypatch.chdir(tmp_path)
    get_settings.cache_clear()
    yield folder
    get_settings.cache_clear()


def test_a_model_that_cannot_serve_the_agent_s_protocol_is_refused_in_one_line(models: Path) -> None:
    agents = tmp_agents(models.parent)
    speaks = {a.name: a for a in agents}
    check_models(get_settings(), ["chat", "played"], [speaks["chatty"], speaks["none-needed"]])
    check_models(get_settings(), ["claude", "played"], [speaks["anthropic"]])  # a script serves every protocol
    said = (
        "--agent anthropic speaks anthropic-messages; model chat (models/chat.yaml) serves openai-chat only: "
        "pick a model that serves anthropic-messages"
    )
    with pytest.raises(OptionError) as refused:
        check_models(get_settings(), ["played", "chat"], agents)
    assert str(refused.value) == said
    with pytest.raises(
        OptionError, match=r"--agent chatty speaks openai-chat; model claude .* anthropic-messages only"
    ):
        check_models(get_settings(), ["claude"], agents)
    # The session's own check, as the plugin and `ssebench run` make it.
    from ssebench.session import RunSession

    plan = Plan(results=models.parent / "r", needs_model="anthropic", models=("chat",), agents=tuple(agents))
    with pytest.raises(OptionError, match=re.escape(said)):
        RunSession(get_settings(), plan).start_models()


def tmp_agents(folder: Path) -> list[Agent]:
    agents = folder / "agents"
    write_agent(agents, "protocol: anthropic-messages\n", name="anthropic")
    write_agent(agents, "", name="chatty")
    write_agent(agents, "needs_model: false\nprotocol: anthropic-messages\n", name="none-needed")
    return [load_agent(agents, name) for name in ("anthropic", "chatty", "none-needed")]


def test_pytest_collection_refuses_the_pair(
    pytester: pytest.Pytester, models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(DEMO / "c-demo", pytester.path / "datasets" / "demo" / "c-demo")
    tmp_agents(models.parent)
    monkeypatch.setenv("SSEBENCH_AGENTS_DIR", str(models.parent / "agents"))
    get_settings.cache_clear()
    result = pytester.runpytest_subprocess(
        str(pytester.path / "datasets" / "demo"), "--agent", "anthropic", "--model", "chat", "--collect-only"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    # A process of its own: the control's session starts a gateway, which an in-process run would leave behind.
    result.stderr.fnmatch_lines(["*--agent anthropic speaks anthropic-messages; model chat (*chat.yaml) serves*"])
    control = pytester.runpytest_subprocess(
        str(pytester.path / "datasets" / "demo"), "--agent", "anthropic", "--model", "played", "--collect-only"
    )
    assert control.ret == pytest.ExitCode.OK, control.stderr.str()


def _mini(tmp_path: Path) -> Agent:
    write_agent(tmp_path, "software: {python: [x==1]}\n", hashed("x==1"), name="mini")
    return load_agent(tmp_path, "mini")


def test_a_run_mounts_the_agent_s_software_read_only_and_in_sidecar_mode_only_the_agent_s_container(
    tmp_path: Path,
) -> None:
    agent = _mini(tmp_path)
    task = load_task(DEMO / "c-demo")
    session = Session.new()
    for mode in ("sandbox", "sidecar"):
        config = RunConfig(task=task, agent=agent, model="m", mode=mode)
        spec = container_spec(config, "img", session, "r1", "net", runtime="rt", software="sw")
        software = Volume("sw", "/opt/agents/mini", fill=False, read_only=True)
        assert spec.volumes == [Volume("rt", "/opt/ssebench", read_only=True), software]
        if mode == "sidecar":
            task_side, agent_side, shared = sidecar_specs(config, spec, "tool-img", "r1", session)
            assert software in agent_side.volumes and software not in task_side.volumes
            assert "sw" not in shared  # the run's own volumes, removed with it; the software volume stays
    without = container_spec(RunConfig(task=task, agent=agent), "img", session, "r1", "net", runtime="rt")
    assert [v.container for v in without.volumes] == ["/opt/ssebench"]


def test_the_software_digest_is_part_of_a_run_s_identity(tmp_path: Path) -> None:
    agent = _mini(tmp_path)
    described = RunConfig(task=load_task(DEMO / "c-demo"), agent=agent).describe()
    assert "agent_software" in RESUME_IDENTITY and described["agent_software"] == agent.software_digest
    plain = RunConfig(task=load_task(DEMO / "c-demo"), agent=load_agent(get_settings().agents_dir, "dummy"))
    assert plain.describe()["agent_software"] is None  # as an old summary without the key reads


# -- mini-swe-agent's launcher --------------------------------------------------------------------------


def launcher() -> ModuleType:
    path = get_settings().agents_dir / "mini-swe-agent" / "agent.py"
    spec = importlib.util.spec_from_file_location("mini_swe_agent_launcher", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def translated(tmp_path: Path, fixture: str) -> tuple[tuple[str | None, str | None], list[dict[str, Any]]]:
    """A trajectory mini-swe-agent 2.4.6 saved (against models/scripted/fix.yaml, and a gateway that refused
    every call for the budget), as the launcher writes it into a dialog."""
    from sse.dialog import Dialog, read, validate

    dialog = Dialog(tmp_path / "dialog.jsonl")
    dialog.init(agent="mini-swe-agent", model="scripted-fix")
    dialog.prompt("# Task: tlvkit (C)")
    trajectory = json.loads((FIXTURES / fixture).read_text())
    end = launcher().translate(trajectory["messages"], dialog)
    dialog.complete(end[0] or "error", end[1])
    records = read(dialog.path)
    assert validate(records) == []
    return end, records


def test_a_trajectory_becomes_a_dialog_with_every_turn_command_and_output(tmp_path: Path) -> None:
    (status, _), records = translated(tmp_path, "fix-c-demo.json")
    assert status == "done"
    calls = [r for r in records if r["type"] == "tool_call"]
    results = {r["tool_id"]: r for r in records if r["type"] == "tool_result"}
    assert [c["name"] for c in calls] == ["bash"] * 4
    assert calls[1]["input"]["command"].startswith("patch -p1 <<'EOF'\ndiff --git a/tlv.c b/tlv.c")
    assert results[calls[1]["tool_id"]]["output"] == "patching file tlv.c\npatching file tlv.h\n"
    assert results[calls[1]["tool_id"]]["code"] == 0
    # The submitting command ends the session before mini-swe-agent records its result: the launcher does.
    assert results[calls[3]["tool_id"]]["output"] == "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
    # The tokens are the script's (models/scripted/fix.yaml, tlvkit's mini-swe-agent conversation).
    tokens = [r["tokens"] for r in records if r["type"] == "message"]
    assert tokens == [
        {"input": 1710, "output": 41},
        {"input": 2480, "output": 406},
        {"input": 3350, "output": 22},
        {"input": 3520, "output": 14},
    ]


def test_a_spent_budget_ends_the_dialog_with_status_budget(tmp_path: Path) -> None:
    (status, reason), records = translated(tmp_path, "budget.json")
    assert status == "budget" and reason and "budget is exhausted" in reason
    assert [r["type"] for r in records] == ["init", "prompt", "complete"]


def test_a_rejected_answer_is_shown_with_the_error_that_answered_it(tmp_path: Path) -> None:
    from sse.dialog import Dialog, read, validate

    dialog = Dialog(tmp_path / "dialog.jsonl")
    dialog.init(agent="mini-swe-agent", model="m")
    dialog.prompt("p")
    response = {
        "choices": [
            {
                "message": {
                    "content": "Let me look.",
                    "tool_calls": [{"id": "c1", "function": {"name": "view_file", "arguments": '{"path": "."}'}}],
                }
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2},
    }
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {
            "role": "user",
            "content": "Unknown tool 'view_file'.",
            "extra": {"interrupt_type": "FormatError", "response": response},
        },
        {"role": "exit", "content": "RepeatedFormatError", "extra": {"exit_status": "RepeatedFormatError"}},
    ]
    status, reason = launcher().translate(messages, dialog)
    dialog.complete(status or "error", reason)
    records = read(dialog.path)
    assert validate(records) == [] and status == "error" and reason and reason.startswith("RepeatedFormatError")
    call = next(r for r in records if r["type"] == "tool_call")
    result = next(r for r in records if r["type"] == "tool_result")
    assert call["name"] == "view_file" and call["input"] == {"path": "."}
    assert result["tool_id"] == call["tool_id"] and result["error"] == "Unknown tool 'view_file'."
