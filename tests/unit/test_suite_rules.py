"""Rules the suite itself keeps, so that a green CI means what it says (conftest.py, pyproject.toml)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[2]
CONTAINER_TEST = """
import pytest

@pytest.mark.docker
def test_needs_the_engine():
    pass
"""


@pytest.fixture
def no_engine(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """The repository's conftest.py beside a docker-marked test, with the engine's address one nobody serves."""
    shutil.copy(ROOT / "conftest.py", pytester.path / "conftest.py")
    pytester.makepyfile(test_container=CONTAINER_TEST)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/ssebench-no-engine.sock")
    return pytester


def test_without_an_engine_a_container_test_is_skipped_loudly(
    no_engine: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)
    result = no_engine.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*EVERY docker-marked test WILL BE SKIPPED*", "*DOCKER UNAVAILABLE*"])


def test_under_ci_a_container_test_fails_when_the_engine_does_not_answer(
    no_engine: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    result = no_engine.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)  # in its setup, before the test's body
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["*under CI EVERY docker-marked test WILL FAIL*", "*CI=true and the Docker engine does not answer*"]
    )


def test_a_hung_test_fails_alone_within_the_suite_s_time_limit(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    """pyproject.toml gives every test a time limit (pytest-timeout), in force in this very run; cut to 2 s,
    a test that hangs fails while the next one still runs."""
    assert request.config.getini("timeout") == "1800"
    pytester.makepyfile(
        test_hang="""
        import time

        def test_hangs():
            time.sleep(600)

        def test_after():
            pass
    """
    )
    import tomllib

    limit = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["timeout"]
    assert 60 <= int(limit) <= 1800, limit
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-o", "timeout=2")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*test_hangs - Failed: Timeout (>2.0s)*"])
