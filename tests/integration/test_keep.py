"""Kept runs (--keep-containers) on real containers: graded as without keep, up afterwards for `docker exec`,
listed by `ssebench ps`, left by the session's end and the reapers, removed by `ssebench rm` alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ssebench.agent import load_agent
from ssebench.build import build_images
from ssebench.cli import main
from ssebench.defaults import Mode
from ssebench.engine import cleanup, client
from ssebench.reaper import reap_orphans, reap_session
from ssebench.record import RunRecord
from ssebench.runspec import RunConfig
from ssebench.runtime.contract import KEPT_LABEL, RUN_LABEL
from ssebench.session import Plan, RunSession
from ssebench.settings import Settings
from ssebench.task import Task

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _run(settings: Settings, task: Task, mode: Mode, results: Path, *, keep: bool) -> RunRecord:
    """One run of the reference agent (which passes) through a whole session, which has ended on return."""
    config = RunConfig(
        task=task, agent=load_agent(settings.agents_dir, "reference"), mode=mode, keep_container=keep, timeout=300
    )
    with RunSession(settings, Plan(results=results, keep=keep)) as session:
        return session.run(config, build=False)


def _of_run(run_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every container, network and volume of a run on the engine."""
    filters = {"label": f"{RUN_LABEL}={run_id}"}
    engine = cleanup()
    return {
        "containers": engine.containers(filters),
        "networks": engine.networks(filters),
        "volumes": engine.volumes(filters),
    }


def _grade(record: RunRecord) -> tuple[Any, ...]:
    """What grades a run: its grade, the result's checks, and how the agent ended."""
    said = json.loads((record.run_dir / "result.json").read_text())
    runtime = said["runtime_result"]
    return record.grade, said["patch_result"], runtime["agent_exit_code"], runtime["agent_timeout"]


@pytest.mark.parametrize("mode", ["sandbox", "sidecar"])
def test_a_kept_run_is_graded_as_without_keep_stays_up_and_only_ssebench_rm_removes_it(
    mode: Mode,
    settings: Settings,
    demo_tasks: list[Task],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    task = next(t for t in demo_tasks if t.id == "c-demo")
    outcome = build_images(settings, [task], load_agent(settings.agents_dir, "reference"), modes=(mode,))
    assert not outcome.failures, {k: str(v) for k, v in outcome.failures.items()}
    plain = _run(settings, task, mode, tmp_path / "plain", keep=False)
    kept = _run(settings, task, mode, tmp_path / "kept", keep=True)
    other = _run(settings, task, mode, tmp_path / "other", keep=True)  # the positive control of `ssebench rm`
    try:
        assert plain.grade == "passed", plain.infra_error
        assert _grade(kept) == _grade(plain) and kept.exit_code == plain.exit_code == 0
        assert _of_run(plain.run_id) == {"containers": [], "networks": [], "volumes": []}  # not kept: removed

        # Up after the session's end, and the reapers' (a kept run's session is over once it is home), each of
        # its containers running (none left frozen) and entered with `docker exec`.
        assert kept.session  # (an empty one would name every session's)
        reap_session(kept.session)
        reap_orphans()
        found = _of_run(kept.run_id)
        assert len(found["containers"]) == (2 if mode == "sidecar" else 1) and len(found["networks"]) == 1
        assert found["volumes"] and all(KEPT_LABEL in v["Labels"] for v in found["volumes"])
        for listed in found["containers"]:
            assert KEPT_LABEL in listed["Labels"] and listed["State"] == "running", listed
            status, output = client().containers.get(listed["Id"]).exec_run(["cat", "/run/ssebench/phase"])
            assert status == 0 and json.loads(output)["phase"] == "kept", output

        capsys.readouterr()
        assert main(["ps", "--json"]) == 0
        rows = {row["run"]: row for row in json.loads(capsys.readouterr().out)}
        assert rows[kept.run_id]["state"] == "kept" and rows[kept.run_id]["phase"] == "kept"
        names = sorted(c["Names"][0].lstrip("/") for c in found["containers"])
        assert sorted(rows[kept.run_id]["containers"]) == names
        assert main(["ps"]) == 0
        assert f"docker exec -it {names[0]} bash" in capsys.readouterr().out

        assert main(["rm", kept.run_id]) == 0
        said = capsys.readouterr().out.splitlines()
        assert len(said) == len(found["containers"]) + 1 + len(found["volumes"]), said
        assert all(line.startswith("removed ") and line.endswith(f"(run {kept.run_id})") for line in said)
        assert _of_run(kept.run_id) == {"containers": [], "networks": [], "volumes": []}
        control = _of_run(other.run_id)  # another kept run: untouched
        assert [c["State"] for c in control["containers"]] == ["running"] * len(found["containers"])
        assert len(control["networks"]) == 1 and len(control["volumes"]) == len(found["volumes"])
    finally:
        main(["rm", kept.run_id, other.run_id])
    assert _of_run(other.run_id) == {"containers": [], "networks": [], "volumes": []}
