"""The bypass script's verdict per level (tests/integrity/test_bypass.py, `Report`): a level is shown to hold only
when a check of it passed and none failed."""

from __future__ import annotations

from tests.integrity.test_bypass import Report


def _verdicts(outcomes: dict[int, dict[str, str]]) -> tuple[list[str], bool]:
    report = Report("sandbox", list(outcomes))
    report.outcomes = outcomes
    said: list[str] = []
    report.write = said.append
    report.pytest_terminal_summary()
    return [line for line in said if line], report.unchecked


def test_a_level_holds_only_when_a_check_passed_and_none_failed() -> None:
    said, unchecked = _verdicts({0: {"a": "pass", "b": "skip"}, 2: {"a": "FAIL", "b": "skip"}})
    assert said == ["sandbox d0: held (1 checks passed, 1 skipped)", "sandbox d2: FAILED: 1 of 2 checks: a"]
    assert not unchecked  # a failure is the exit status's to say (pytest's)
    said, unchecked = _verdicts({4: {"a": "skip", "b": "skip"}})
    assert said == ["sandbox d4: NOTHING CHECKED (2 skipped)"] and unchecked
    said, unchecked = _verdicts({4: {}})
    assert said == ["sandbox d4: NOT RUN"] and unchecked
