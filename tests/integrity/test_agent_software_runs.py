"""The agents with software of their own (Claude Code, Codex, mini-swe-agent) give `model` nothing more.

A run of each, held in its agent phase with its software volume mounted as
every run of it has it, is attacked as the agent's user: the volume cannot
be written, holds nothing set-id and nothing not root's; and the files the
agent's CLI reads from its home (Claude Code's settings with hooks, Codex's
config with a notify command, a shell profile) are planted with commands that
would leave a mark naming the uid that ran them. Then the run grades: root
runs none of them (no mark of uid 0 anywhere), and the grade is the one the
unchanged tree gets (failed), as for the dummy agent.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import PurePosixPath

import pytest

from ssebench.agent import load_agent
from ssebench.build import build_images
from ssebench.result import read_result
from ssebench.settings import Settings
from ssebench.task import Task
from tests.integrity.harness import HeldRun, Launcher, launching

pytestmark = [pytest.mark.docker, pytest.mark.integrity, pytest.mark.slow]

AGENTS = ("claude-code", "codex", "mini-swe-agent")
# Where each CLI (or any shell) reads commands from the agent's home; each, if run, marks /tmp/mark-<uid>.
MARK = 'touch "/tmp/mark-$(id -u)" 2>/dev/null; touch "/var/tmp/mark-$(id -u)" 2>/dev/null'
PLANT = f"""
set -e
mkdir -p ~/.claude ~/.codex ~/.config/mini-swe-agent
cat > ~/.claude/settings.json <<'JSON'
{{"hooks": {{"Stop": [{{"hooks": [{{"type": "command", "command": "{MARK}"}}]}}],
            "SessionStart": [{{"hooks": [{{"type": "command", "command": "{MARK}"}}]}}]}},
  "apiKeyHelper": "{MARK}"}}
JSON
printf 'notify = ["sh", "-c", "%s"]\\n' '{MARK}' > ~/.codex/config.toml
printf 'MSWEA_GLOBAL_CONFIG_DIR=/tmp\\n' > ~/.config/mini-swe-agent/.env
for f in ~/.profile ~/.bashrc ~/.bash_logout; do printf '%s\\n' '{MARK}' >> "$f"; done
echo planted
"""


@pytest.fixture(scope="module")
def launcher(
    settings: Settings, integrity_images: list[Task], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Launcher]:
    demo = [t for t in integrity_images if t.id == "c-demo"]
    for agent in AGENTS:
        outcome = build_images(settings, demo, load_agent(settings.agents_dir, agent), modes=("sandbox",))
        assert not outcome.failures, {k: str(v) for k, v in outcome.failures.items()}
    with launching(settings, integrity_images, tmp_path_factory.mktemp("agents"), "sandbox") as made:
        yield made


def _names_under(run: HeldRun, path: str) -> list[str]:
    """The names of the files under `path` in the run's (stopped) container, as the engine tars them."""
    data = b"".join(run.live.handle.export(path))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return [PurePosixPath(name).name for name in tar.getnames()]


@pytest.mark.parametrize("agent", AGENTS)
def test_an_agents_software_and_its_config_files_give_model_nothing_more(launcher: Launcher, agent: str) -> None:
    run = launcher.start(agent=agent)
    home = f"/opt/agents/{agent}"
    # The positive control: the volume is there, with the agent's software in it, as a run of it has it.
    assert run.sh("1000", f"test -x {home}/bin/python && ls {home}").split()
    out = run.sh("1000", f"touch {home}/planted 2>&1; mkdir {home}/bin/planted 2>&1; true")
    assert out.count("Read-only file system") + out.count("Permission denied") == 2, out
    # Nothing set-id, nothing not root's, nothing others can write (links apart: their mode means nothing).
    found = run.sh(
        "1000", f"find {home} -xdev ! -type l \\( -perm /6000 -o ! -user 0 -o -perm -o+w \\) -print | head -5"
    )
    assert found.strip() == "", found
    assert "planted" in run.sh("1000", PLANT)
    run.finish()
    result = read_result(run.run_dir)
    assert result is not None and result.status == "failed", (result, run.logs()[-3000:])
    # Root ran none of what was planted (the control of the search: the planted files are there, model's).
    marks = _names_under(run, "/tmp") + _names_under(run, "/var/tmp")
    assert "mark-0" not in marks, marks
    assert "settings.json" in _names_under(run, "/home/model/.claude")
