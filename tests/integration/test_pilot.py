"""The CI subset of the pilot dataset: one real CVE per language, end to end through the plugin.

The whole pilot is checked by `ssebench dataset verify datasets/pilot`
(about an hour from an empty engine); CI runs these three tasks.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import pytest
import yaml

from ssebench.agent import load_agent
from ssebench.build import build_images
from ssebench.dataset import load_dataset_config, load_tasks
from ssebench.image import image_names
from ssebench.leak import leak_terms, task_leaks, visible_mentions
from ssebench.reaper import Session, reap_session
from ssebench.settings import Settings
from ssebench.task import Task
from tests.helpers import PILOT, failure_reports, rendered_text

pytest_plugins = ["pytester"]
pytestmark = [pytest.mark.docker, pytest.mark.slow]

SUBSET = ("libcue-CVE-2023-43641", "jwt-go-CVE-2020-26160", "time-CVE-2026-25727")


@pytest.fixture(scope="module")
def pilot_subset(settings: Settings) -> list[Task]:
    """The subset's images with both agents, built or reused."""
    tasks = [t for t in load_tasks(PILOT) if t.id in SUBSET]
    assert sorted(t.id for t in tasks) == sorted(SUBSET)
    for agent in ("reference", "dummy", "hollow"):
        outcome = build_images(settings, tasks, load_agent(settings.agents_dir, agent))
        assert not outcome.failures, {k: str(v) for k, v in outcome.failures.items()}
    return tasks


@pytest.fixture
def session() -> Iterator[Session]:
    session = Session.new()
    yield session
    reap_session(session.id)


def test_reference_passes_and_dummy_and_hollow_fail_on_the_poc(
    pytester: pytest.Pytester, pilot_subset: list[Task]
) -> None:
    """The reference fix passes; no change, and a change of build files, tests and harnesses alone (the hollow
    agent, which forged a pass on jwt-go and time before grading set such files aside), fail on the PoC."""
    (pytester.path / "datasets" / "pilot").mkdir(parents=True)
    # The subset's own dataset.yaml: the pilot's, less the lists that name tasks the subset leaves out.
    config = {
        k: v for k, v in yaml.safe_load((PILOT / "dataset.yaml").read_text()).items() if k in ("version", "description")
    }
    (pytester.path / "datasets" / "pilot" / "dataset.yaml").write_text(yaml.safe_dump(config))
    for task in pilot_subset:
        shutil.copytree(task.path, pytester.path / "datasets" / "pilot" / task.id)
    result = pytester.runpytest_subprocess(
        "datasets/pilot",
        "--agent",
        "reference",
        "--agent",
        "dummy",
        "--agent",
        "hollow",
        "-n",
        "2",
        "--results",
        "out",
        "--html",
        "report.html",
        "--self-contained-html",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=3, failed=6)
    failures = failure_reports(result)
    assert failures.count("A proof of concept still reproduces: /ssebench/pocs/") == 6
    assert failures.count("Set aside by grading (outside the code under repair): ") == 3
    summaries = [json.loads(p.read_text()) for p in (pytester.path / "out").glob("*/none/*/*-sandbox-*/summary.json")]
    assert len(summaries) == 9
    version = load_dataset_config(PILOT).version  # dataset.yaml's, whatever it is at the time
    for summary in summaries:
        task = summary["task"]
        assert task["dataset_version"] == version and any(a in task["id"] for a in task["advisories"]), task
        assert summary["grade"] == ("passed" if summary["config"]["agent"] == "reference" else "failed")
    for run in (pytester.path / "out").glob("*/none/hollow/*-sandbox-*"):
        signals = json.loads((run / "result.json").read_text())["signals"]
        assert signals["protected_files_count"] > 0, (run, signals)
    text = rendered_text(pytester.path / "report.html")
    for shown in (
        "CVE-2023-43641, GHSA-5982-x7hv-r9cj · libcue",
        "CVE-2020-26160 · jwt-go",
        "CVE-2026-25727, RUSTSEC-2026-0009 · time",
    ):
        assert shown in text, shown


@pytest.mark.parametrize("task_id", SUBSET)
def test_the_agent_cannot_read_what_names_the_fix_or_holds_its_answer(
    pilot_subset: list[Task], settings: Settings, session: Session, task_id: str
) -> None:
    task = next(t for t in pilot_subset if t.id == task_id)
    image = image_names(settings, task)["tool"]
    terms = leak_terms(task)
    assert task.advisories()[0] in terms
    # Names of the fix, and the answer itself: its hunks, the hidden tests, the PoCs (ssebench.leak).
    assert task_leaks(image, task, session) == []
    # Positive control: the same search, as the same user, with the same terms and the source tree's own
    # name last, finds files of the tree.
    source_name = task.config.source.rstrip("/").rsplit("/", 1)[-1]
    found = visible_mentions(image, [*terms, source_name], session)
    assert any(path.startswith(task.config.source) for path in found), found
