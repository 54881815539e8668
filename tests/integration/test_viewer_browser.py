"""`ssebench view` in a real browser: Debian's Chromium, headless, driven by Selenium through chromium-driver.

The results directory is made by real runs of the demo (the reference, the
dummy and chat-agent with the scripted model), plus the hostile run of
tests/helpers (a transcript holding a script, an `onerror` attribute and
links to /etc/passwd). The viewer is the real command, served by uvicorn on
loopback. The live test starts a sweep of chat-agent with a scripted model
that takes a second a step, and watches its page grow without a reload.

With SSEBENCH_VIEWER_SHOTS=DIR each page's screenshot is saved there
(docs/viewer/ holds the ones docs/viewer.md shows).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from ssebench.task import Task
from tests.helpers import DEMO, HOSTILE_RUN, add_hostile_run, interruptible

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"

# A scripted model for chat-agent whose run lasts ~20 s: each step runs `sleep 1` with the bash tool, and says
# a script, which the page must show as text. Its tokens and cost grow with each call, in the gateway's count.
SLOW_MODEL = "name: scripted-slow\nscript: slow.yaml\nprice: {input: 3.0, output: 15.0}\n"
SLOW_STEPS = 16


def _slow_script() -> str:
    steps = [
        {
            "content": f"tick {n} <script>document.title='pwned'</script>",
            "tool_calls": [{"name": "bash", "arguments": {"command": f"sleep 1; echo tick {n}"}}],
            "usage": {"prompt_tokens": 1000 + 100 * n, "completion_tokens": 20},
        }
        for n in range(1, SLOW_STEPS + 1)
    ]
    steps.append(
        {
            "tool_calls": [{"name": "finish", "arguments": {"summary": "ticked"}}],
            "usage": {"prompt_tokens": 3000, "completion_tokens": 10},
        }
    )
    return json.dumps({"conversations": [{"match": "# Task: ", "steps": steps}]})


def _sweep(cwd: Path, results: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "pytest", *args, "--results", str(results), "-p", "no:cacheprovider", "-q"]
    with open(cwd / f"sweep-{len(list(cwd.glob('sweep-*.log')))}.log", "wb") as log:
        return subprocess.Popen(
            command,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=interruptible,
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory, demo_images: list[Task]) -> Path:
    """A project holding the demo dataset, and the models with `scripted-slow` among them."""
    root = tmp_path_factory.mktemp("viewer")
    shutil.copytree(DEMO, root / "datasets" / "demo")
    shutil.copytree(ROOT / "models", root / "models")
    (root / "models" / "scripted-slow.yaml").write_text(SLOW_MODEL)
    (root / "models" / "slow.yaml").write_text(_slow_script())
    return root


@pytest.fixture(scope="module")
def results(workdir: Path) -> Path:
    """Real runs of c-demo (reference, dummy, chat-agent with the scripted fix), and the hostile run beside."""
    out = workdir / "results"
    sweep = _sweep(
        workdir,
        out,
        "datasets/demo/c-demo",
        *("--agent", "reference", "--agent", "dummy", "--agent", "chat-agent", "--model", "scripted-fix"),
        env={"SSEBENCH_MODELS_DIR": str(workdir / "models")},
    )
    assert sweep.wait(timeout=900) == 1, (workdir / "sweep-0.log").read_text()  # the dummy's run fails
    add_hostile_run(out, workdir / "outside")
    return out


@pytest.fixture(scope="module")
def viewer(results: Path, workdir: Path) -> Iterator[str]:
    """`ssebench view RESULTS` on a free loopback port: its base URL."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "ssebench.cli", "view", str(results), "--port", str(port)],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url + "/", timeout=2).close()
                break
            except OSError:
                time.sleep(0.2)
        else:
            raise AssertionError("the viewer did not answer")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)
        assert process.stdout is not None
        process.stdout.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert os.path.exists(DRIVER), "chromium-driver is missing: `make chromium` installs Debian's chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def shot(browser: Any, name: str) -> None:
    """The page's screenshot, its whole height, into SSEBENCH_VIEWER_SHOTS when set."""
    folder = os.environ.get("SSEBENCH_VIEWER_SHOTS")
    if not folder:
        return
    height = int(browser.execute_script("return document.documentElement.scrollHeight"))
    browser.set_window_size(1400, min(max(height, 500), 2600))
    Path(folder).mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(Path(folder) / f"{name}.png"))
    browser.set_window_size(1400, 900)


def _text(browser: Any, css: str) -> str:
    from selenium.webdriver.common.by import By

    return str(browser.find_element(By.CSS_SELECTOR, css).text)


def _wait(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = condition()
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"waited {timeout} s for {what}")


def test_the_score_table_and_its_plot(browser: Any, viewer: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(viewer + "/")
    rows = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#scores tbody tr")]
    assert any(r.startswith("reference none 2 sandbox 1 1 0 0 100% [21-100]") for r in rows), rows
    assert any(r.startswith("chat-agent scripted-fix 2 sandbox 1 1 0 0 100%") for r in rows), rows
    assert len(browser.find_elements(By.CSS_SELECTOR, "#plot svg line.ci")) == len(rows)
    shot(browser, "scores")


def test_the_runs_list_filters_and_sorts(browser: Any, viewer: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(viewer + "/runs")
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr.run")) == 4
    Select(browser.find_element(By.ID, "filter-grade")).select_by_value("passed")
    browser.find_element(By.ID, "apply").click()
    _wait(lambda: "grade=passed" in browser.current_url, 10, "the filtered page")
    graded = [r.find_elements(By.TAG_NAME, "td")[7].text for r in browser.find_elements(By.CSS_SELECTOR, "tr.run")]
    assert graded == ["passed", "passed"]
    shot(browser, "runs-filtered")
    browser.find_element(By.LINK_TEXT, "agent").click()  # sort by agent, within the filter
    _wait(lambda: "sort=agent" in browser.current_url and "grade=passed" in browser.current_url, 10, "sorted")
    agents = [r.find_elements(By.TAG_NAME, "td")[3].text for r in browser.find_elements(By.CSS_SELECTOR, "tr.run")]
    assert agents == sorted(agents, reverse=True) and set(agents) == {"chat-agent", "reference"}


def test_a_run_s_page_shows_its_card_diff_and_transcript(browser: Any, viewer: str, results: Path) -> None:
    from selenium.webdriver.common.by import By

    [run] = [p.parent for p in results.glob("c-demo/scripted-fix/chat-agent/2*/summary.json")]
    browser.get(viewer + "/run/" + quote(run.relative_to(results).as_posix()))
    assert _text(browser, "#grade") == "passed"
    assert browser.find_elements(By.CSS_SELECTOR, "#patch .add") and browser.find_elements(
        By.CSS_SELECTOR, "#patch .hunk"
    )
    added = browser.find_element(By.CSS_SELECTOR, "#patch .add").value_of_css_property("background-color")
    assert added == "rgba(218, 251, 225, 1)"  # coloured: the stylesheet applies
    transcript = _text(browser, "#transcript")
    assert "Task prompt" in transcript and "complete: done" in transcript and "tokens:" in transcript
    assert len(browser.find_elements(By.CSS_SELECTOR, "#turns tr")) > 2
    assert "build" in _text(browser, "#checks")
    shot(browser, "run")


def test_a_hostile_transcript_is_text_and_nothing_is_followed(browser: Any, viewer: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(viewer + "/run/" + quote(HOSTILE_RUN))
    # Had the script or the onerror run, the title would say so; had the links been made, they would be here.
    assert browser.title != "pwned" and "chat-agent" in browser.title
    assert "<script>document.title" in _text(browser, "#transcript")  # shown, as text
    assert browser.find_elements(By.CSS_SELECTOR, "#transcript img, #transcript a, #patch a") == []
    assert browser.execute_script("return document.querySelectorAll('[onerror]').length") == 0
    hrefs = [a.get_attribute("href") for a in browser.find_elements(By.TAG_NAME, "a")]
    assert not [h for h in hrefs if h and ("passwd" in h or not h.startswith(viewer))], hrefs
    shot(browser, "hostile")


def test_two_agents_side_by_side(browser: Any, viewer: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(viewer + "/compare")
    Select(browser.find_element(By.ID, "a")).select_by_value("dummy")
    Select(browser.find_element(By.ID, "b")).select_by_value("reference")
    browser.find_element(By.ID, "compare").click()
    _wait(lambda: "a=dummy" in browser.current_url, 10, "the comparison")
    assert _text(browser, "#summary") == "dummy solved 0 task(s), reference 1; only dummy: 0, only reference: 1."
    row = _text(browser, "#comparison tbody tr")
    assert row.startswith("c-demo 2 sandbox failed passed only reference"), row
    shot(browser, "compare")


def test_a_live_run_s_page_grows_without_a_reload(browser: Any, viewer: str, results: Path, workdir: Path) -> None:
    from selenium.webdriver.common.by import By

    sweep = _sweep(
        workdir,
        results,
        "datasets/demo/c-demo",
        *("--agent", "chat-agent", "--model", "scripted-slow"),
        env={"SSEBENCH_MODELS_DIR": str(workdir / "models")},
    )
    try:
        browser.get(viewer + "/live")
        # Every run on the engine is listed (as `ssebench ps` does): this test's is the slow model's. The list is
        # redrawn every poll, so its link is read in the page, in one go.
        find = (
            "return [...document.querySelectorAll('#live-rows tr')].filter(r => r.textContent.includes("
            "'scripted-slow')).map(r => r.querySelector('a').href)"
        )
        href = _wait(lambda: browser.execute_script(find), 240, "the run in the live list")[0]
        shot(browser, "live-list")
        browser.get(href)
        _wait(lambda: int(_text(browser, "#records") or 0) >= 8, 60, "the transcript's first ticks")
        browser.execute_script("document.body.dataset.loaded = 'once'")  # gone if the page reloaded
        first, first_text = int(_text(browser, "#records")), _text(browser, "#transcript")
        first_tokens = int(_text(browser, "#usage").split()[0])
        assert _text(browser, "#phase") == "agent"
        shot(browser, "live-1")
        time.sleep(4)
        second, second_text = int(_text(browser, "#records")), _text(browser, "#transcript")
        assert second > first and len(second_text) > len(first_text), (first, second)
        assert int(_text(browser, "#usage").split()[0]) > first_tokens > 0  # the gateway's count so far
        assert browser.execute_script("return document.body.dataset.loaded") == "once"
        assert browser.title != "pwned" and "<script>document.title" in second_text
        shot(browser, "live-2")
        assert sweep.wait(timeout=240) == 1  # the slow model changes nothing: its run fails
        _wait(lambda: browser.find_element(By.ID, "over").is_displayed(), 30, "the page to say the run is over")
    finally:
        if sweep.poll() is None:
            sweep.terminate()
            sweep.wait(timeout=60)
    _wait(lambda: browser.find_elements(By.ID, "finished"), 30, "the link to the run's results")
    browser.find_element(By.ID, "finished").click()
    _wait(lambda: "/run/c-demo/scripted-slow/chat-agent/" in browser.current_url, 10, "the finished run's page")
    assert _text(browser, "#grade") == "failed" and f"tick {SLOW_STEPS}" in _text(browser, "#transcript")
    listed = json.loads(urllib.request.urlopen(viewer + "/api/live", timeout=5).read())
    assert "scripted-slow" not in [r["model"] for r in listed]
